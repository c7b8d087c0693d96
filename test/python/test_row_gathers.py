"""kl.gather / kl.scatter of view rows against numpy, on every target the
suite runs on (the CPU; the emulated GPUs, where rows move as whole cp.async
chunks with zero fill, or vector stores, when the view allows, and element by
element otherwise: docs/gpu.md, "Gathers and scatters"). The cases are the
paths' edges: row indices outside the view (-1, negative, past the end), a
strided view whose last columns end inside a chunk, a column offset off the
chunk alignment, a negative one, columns entirely outside, a middle dimension
partly outside, and a non-zero padding."""
import numpy as np
import pytest

import kiln
import kiln.language as kl
from conftest import assert_close, from_bf16_bits, to_bf16_bits


@kiln.jit
def gather_rows(x, idx, out, R, C, stride, n, col0, BN: kl.constexpr, BC: kl.constexpr,
                PAD: kl.constexpr):
    pid = kl.program_id(0)
    rows = pid * BN + kl.arange(0, BN)
    i = kl.load(idx + rows, mask=rows < n, other=-1)
    v = kl.make_view(x, (R, C), (stride, 1))
    if PAD:
        t = kl.gather(v, i, offsets=(col0,), shape=(BN, BC), other=1.5)
    else:
        t = kl.gather(v, i, offsets=(col0,), shape=(BN, BC))
    kl.store(kl.make_view(out, (n, BC), (BC, 1)), t, offsets=(pid * BN, 0))


@kiln.jit
def gather_rows_3d(x, idx, out, R, M, C, n, m0, BN: kl.constexpr, BM: kl.constexpr,
                   BC: kl.constexpr):
    pid = kl.program_id(0)
    rows = pid * BN + kl.arange(0, BN)
    i = kl.load(idx + rows, mask=rows < n, other=-1)
    v = kl.make_view(x, (R, M, C), (M * C, C, 1))
    t = kl.gather(v, i, offsets=(m0, 0), shape=(BN, BM, BC))
    kl.store(kl.make_view(out, (n, BM, BC), (BM * BC, BC, 1)), t, offsets=(pid * BN, 0, 0))


@kiln.jit
def scatter_rows(src, idx, y, R, C, stride, n, col0, BN: kl.constexpr, BC: kl.constexpr):
    pid = kl.program_id(0)
    rows = pid * BN + kl.arange(0, BN)
    i = kl.load(idx + rows, mask=rows < n, other=-1)
    t = kl.load(kl.make_view(src, (n, BC), (BC, 1)), offsets=(pid * BN, 0), shape=(BN, BC))
    kl.scatter(kl.make_view(y, (R, C), (stride, 1)), t, i, offsets=(col0,))


def _data(rng, dtype, shape):
    """(the array to pass, its values as float64, a poison of the same kind)."""
    x = rng.standard_normal(shape).astype(np.float32)
    if dtype == "bf16":
        bits = to_bf16_bits(x)
        return kiln.bf16(bits), from_bf16_bits(bits).astype(np.float64)
    a = x.astype(dtype)
    return a, a.astype(np.float64)


def _values(a):
    return from_bf16_bits(a.array).astype(np.float64) if isinstance(a, kiln.bf16) \
        else np.asarray(a, np.float64)


def _empty(dtype, shape):
    """An output poisoned: NaN, or for integers a value the data (rounded
    normal samples) never has."""
    if dtype == "bf16":
        return kiln.bf16(np.full(shape, 0x7FC0, np.uint16))
    if np.issubdtype(dtype, np.integer):
        return np.full(shape, np.iinfo(dtype).max, dtype)
    return np.full(shape, np.nan, dtype)


def _indices(rng, n, R):
    idx = rng.integers(0, R, n).astype(np.int32)
    idx[rng.random(n) < 0.2] = -1
    idx[rng.random(n) < 0.1] = R + rng.integers(0, 5)
    idx[rng.random(n) < 0.1] = -7
    return idx


# (C, stride, col0, BC): stride in elements; every case has 16-byte aligned
# rows unless said.
CASES = [
    (61, 64, 0, 64),    # the last chunk of each row partly inside
    (64, 64, 0, 64),    # whole rows
    (200, 208, 72, 64), # columns inside a wider row
    (61, 64, 1, 64),    # a column offset off the chunk alignment
    (61, 64, -3, 64),   # a negative column offset
    (61, 64, 70, 32),   # every column outside
    (77, 77, 0, 40),    # rows 77 elements apart: not 16-byte aligned
]


@pytest.mark.parametrize("dtype", [np.float32, "bf16", np.float16, np.int8])
@pytest.mark.parametrize("C,stride,col0,BC", CASES)
def test_gather_rows(rng, dtype, C, stride, col0, BC):
    R, n, BN = 23, 37, 8
    xs, xv = _data(rng, dtype, (R, stride))
    idx = _indices(rng, n, R)
    out = _empty(dtype, (n, BC))
    gather_rows[(kiln.cdiv(n, BN),)](xs, idx, out, R, C, stride, n, col0, BN=BN, BC=BC, PAD=0)
    ref = np.zeros((n, BC))
    for r in range(n):
        for j in range(BC):
            c = col0 + j
            if 0 <= idx[r] < R and 0 <= c < C:
                ref[r, j] = xv[idx[r], c]
    got = _values(out)
    assert not np.isnan(got).any()
    assert np.array_equal(got, ref)


@pytest.mark.parametrize("dtype", [np.float32, "bf16"])
def test_gather_rows_nonzero_padding(rng, dtype):
    R, n, BN, C, BC = 19, 21, 8, 61, 64
    xs, xv = _data(rng, dtype, (R, 64))
    idx = _indices(rng, n, R)
    out = _empty(dtype, (n, BC))
    gather_rows[(kiln.cdiv(n, BN),)](xs, idx, out, R, C, 64, n, 0, BN=BN, BC=BC, PAD=1)
    ref = np.full((n, BC), 1.5)
    ok = (idx >= 0) & (idx < R)
    ref[ok, :C] = xv[idx[ok], :C]
    assert np.array_equal(_values(out), ref)


@pytest.mark.parametrize("m0", [0, 3, -2])
def test_gather_rows_middle_dimension_partly_outside(rng, m0):
    R, M, C, n, BN, BM, BC = 11, 6, 16, 13, 4, 4, 16
    x = rng.standard_normal((R, M, C)).astype(np.float32)
    idx = _indices(rng, n, R)
    out = np.full((n, BM, BC), np.nan, np.float32)
    gather_rows_3d[(kiln.cdiv(n, BN),)](x, idx, out, R, M, C, n, m0, BN=BN, BM=BM, BC=BC)
    ref = np.zeros((n, BM, BC))
    for r in range(n):
        for m in range(BM):
            if 0 <= idx[r] < R and 0 <= m0 + m < M:
                ref[r, m] = x[idx[r], m0 + m]
    assert np.array_equal(out.astype(np.float64), ref)


@pytest.mark.parametrize("dtype", [np.float32, "bf16", np.float16])
@pytest.mark.parametrize("C,stride,col0,BC", CASES)
def test_scatter_rows(rng, dtype, C, stride, col0, BC):
    R, n, BN = 40, 29, 8
    # Distinct row indices (equal ones race), some outside the view.
    idx = rng.permutation(R)[:n].astype(np.int32)
    idx[rng.random(n) < 0.2] = -1
    idx[rng.random(n) < 0.1] = R + 2
    src, sv = _data(rng, dtype, (n, BC))
    y, yv = _data(rng, dtype, (R, stride))
    scatter_rows[(kiln.cdiv(n, BN),)](src, idx, y, R, C, stride, n, col0, BN=BN, BC=BC)
    ref = yv.copy()
    for r in range(n):
        if not 0 <= idx[r] < R:
            continue
        for j in range(BC):
            c = col0 + j
            if 0 <= c < C:
                ref[idx[r], c] = sv[r, j]
    assert np.array_equal(_values(y), ref)


@kiln.jit
def gathered_dots(x, idx, w, out, out_t, R, n, BN: kl.constexpr, D: kl.constexpr,
                  BM: kl.constexpr, PAD: kl.constexpr):
    """A gathered tile as a dot's A operand and, transposed, as its B: on
    sm_90a written by the gather in wgmma's core-matrix layout, on mma.sync
    targets with padded rows (allocLoadTile). With PAD, A's rows outside read
    0.5: its gather goes element by element, still into that layout."""
    pid = kl.program_id(0)
    rows = pid * BN + kl.arange(0, BN)
    i = kl.load(idx + rows, mask=rows < n, other=-1)
    vx = kl.make_view(x, (R, D), (D, 1))
    if PAD:
        a = kl.gather(vx, i, offsets=(0,), shape=(BN, D), other=0.5)
    else:
        a = kl.gather(vx, i, offsets=(0,), shape=(BN, D))
    wt = kl.load(kl.make_view(w, (D, BM), (BM, 1)), offsets=(0, 0), shape=(D, BM))
    kl.store(kl.make_view(out, (n, BM), (BM, 1)), kl.dot(a, wt), offsets=(pid * BN, 0))
    b = kl.gather(vx, i, offsets=(0,), shape=(BN, D))
    q = kl.load(kl.make_view(w, (BM, D), (D, 1)), offsets=(0, 0), shape=(BM, D))
    kl.store(kl.make_view(out_t, (BM, n), (n, 1)), kl.dot(q, kl.trans(b)),
             offsets=(0, pid * BN))


@pytest.mark.parametrize("pad", [0, 1])
def test_gathered_tiles_as_dot_operands(rng, pad):
    R, n, BN, D, BM = 50, 150, 64, 64, 64
    xb = to_bf16_bits(rng.standard_normal((R, D)).astype(np.float32))
    wb = to_bf16_bits(rng.standard_normal((D, BM)).astype(np.float32))
    idx = _indices(rng, n, R)
    out = np.full((n, BM), np.nan, np.float32)
    out_t = np.full((BM, n), np.nan, np.float32)
    gathered_dots[(kiln.cdiv(n, BN),)](kiln.bf16(xb), idx, kiln.bf16(wb), out, out_t, R, n,
                                       BN=BN, D=D, BM=BM, PAD=pad)
    x = from_bf16_bits(xb).astype(np.float64)
    w = from_bf16_bits(wb).astype(np.float64)
    inside = ((idx >= 0) & (idx < R))[:, None]
    a = np.where(inside, x[np.clip(idx, 0, R - 1)], 0.0)
    a_pad = np.where(inside, a, 0.5) if pad else a
    assert_close(out, a_pad @ w, 1e-5, 1e-4)
    assert_close(out_t, w.reshape(BM, D) @ a.T, 1e-5, 1e-4)
