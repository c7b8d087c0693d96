"""Tiles whose last dimension whole vectors do not divide (a stem
convolution's window of 7 pixels x 3 channels: 21): an interior tile's rows
are copied by whole vectors, the last overlapping the one before it, where
edge tiles go element by element. Loads, gathers (rows outside the table
read the padding) and stores, exact against numpy, outputs poisoned."""
import numpy as np
import pytest

import kiln
import kiln.language as kl


@kiln.jit
def scaled_copy(x, out, m, n, BM: kl.constexpr, BN: kl.constexpr):
    r = kl.program_id(0) * BM + kl.arange(0, BM)
    c = kl.program_id(1) * BN + kl.arange(0, BN)
    inside = (r[:, None] < m) & (c[None, :] < n)
    t = kl.load(x + r[:, None] * n + c[None, :], mask=inside, other=0)
    kl.store(out + r[:, None] * n + c[None, :], t * 2, mask=inside)


@kiln.jit
def scaled_rows(table, idx, out, m, n, rows_n, BM: kl.constexpr, BN: kl.constexpr):
    r = kl.program_id(0) * BM + kl.arange(0, BM)
    c = kl.program_id(1) * BN + kl.arange(0, BN)
    i = kl.load(idx + r, mask=r < m, other=-1)
    ok = (i >= 0) & (i < rows_n)
    t = kl.load(table + i[:, None] * n + c[None, :], mask=ok[:, None] & (c[None, :] < n),
                other=0)
    kl.store(out + r[:, None] * n + c[None, :], t * 2,
             mask=(r[:, None] < m) & (c[None, :] < n))


SHAPES = [(37, 21, 8, 21), (20, 50, 4, 21), (9, 30, 3, 13), (16, 40, 16, 9), (5, 100, 2, 47)]
TYPES = [np.float32, np.float16, np.int32, np.int8]


def poisoned(shape, dtype):
    if np.issubdtype(dtype, np.floating):
        return np.full(shape, np.nan, dtype)
    return np.full(shape, -1, dtype)


def values(rng, shape, dtype):
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-50, 50, shape).astype(dtype)


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("m,n,BM,BN", SHAPES)
def test_loads_and_stores(rng, m, n, BM, BN, dtype):
    x = values(rng, (m, n), dtype)
    out = poisoned((m, n), dtype)
    scaled_copy[(kiln.cdiv(m, BM), kiln.cdiv(n, BN))](x, out, m, n, BM=BM, BN=BN)
    np.testing.assert_array_equal(out, (x * 2).astype(dtype))


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("m,n,BM,BN", SHAPES)
def test_gathered_rows(rng, m, n, BM, BN, dtype):
    rows_n = 11
    table = values(rng, (rows_n, n), dtype)
    idx = rng.integers(-2, rows_n + 2, m).astype(np.int32)
    out = poisoned((m, n), dtype)
    scaled_rows[(kiln.cdiv(m, BM), kiln.cdiv(n, BN))](table, idx, out, m, n, rows_n,
                                                      BM=BM, BN=BN)
    ok = (idx >= 0) & (idx < rows_n)
    ref = np.where(ok[:, None], table[np.where(ok, idx, 0)], 0) * 2
    np.testing.assert_array_equal(out, ref.astype(dtype))
