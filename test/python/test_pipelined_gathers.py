"""Gathers in loops whose row indices a load of the same loop gives (DSA's
top-k blocks, a paged cache's block table), against numpy. On the emulated
GPUs these are pipelined (docs/gpu.md, "Pipelined gathers"): the index
blocks are copied 2D iterations ahead and the rows D ahead (D = num_stages -
1), so the cases cover loops shorter than the distance, index lists that end
inside a block (the -1 padding), indices outside the view, rows whose last
chunk is partly outside, unaligned rows (element by element, still issued
ahead), and the gathered rows as a dot operand. On the CPU the same kernels
check the plain gather."""
import numpy as np
import pytest

import kiln
import kiln.language as kl
from conftest import assert_close, from_bf16_bits, to_bf16_bits


@kiln.jit
def gather_sum(x, idx, out, R, C, stride, n, BN: kl.constexpr, BC: kl.constexpr):
    """out[p, :] = sum over the index list's rows p, p + P, ... (P programs)
    of x[idx[...], :BC]: each program walks its own strided share."""
    pid = kl.program_id(0)
    v = kl.make_view(x, (R, C), (stride, 1))
    acc = kl.zeros((BN, BC), kl.float32)
    for start in range(0, n, BN):
        rows = start + kl.arange(0, BN)
        i = kl.load(idx + pid * n + rows, mask=rows < n, other=-1)
        t = kl.gather(v, i, offsets=(0,), shape=(BN, BC))
        acc += t.to(kl.float32)
    kl.store(kl.make_view(out, (BN * kl.num_programs(0), BC), (BC, 1)), acc,
             offsets=(pid * BN, 0))


@kiln.jit
def gathered_scores(q, kv, idx, out, R, n, BH: kl.constexpr, BN: kl.constexpr,
                    D: kl.constexpr):
    """DSA's first dot: out[p] = sum over blocks of rowsum(q[p] @ rows.T),
    the rows gathered by a loaded index block (a tensor-core dot operand)."""
    pid = kl.program_id(0)
    qt = kl.load(kl.make_view(q, (BH * kl.num_programs(0), D), (D, 1)),
                 offsets=(pid * BH, 0), shape=(BH, D))
    vkv = kl.make_view(kv, (R, D), (D, 1))
    acc = kl.zeros((BH, BN), kl.float32)
    for start in range(0, n, BN):
        cols = start + kl.arange(0, BN)
        i = kl.load(idx + pid * n + cols, mask=cols < n, other=-1)
        rows = kl.gather(vkv, i, offsets=(0,), shape=(BN, D))
        acc = kl.dot(qt, kl.trans(rows), acc)
    kl.store(kl.make_view(out, (BH * kl.num_programs(0), BN), (BN, 1)), acc,
             offsets=(pid * BH, 0))


def _indices(rng, P, n, R):
    idx = rng.integers(0, R, (P, n)).astype(np.int32)
    idx[rng.random((P, n)) < 0.15] = -1
    idx[rng.random((P, n)) < 0.05] = R + 3
    return idx


def _ref_rows(x, idx):
    inside = (idx >= 0) & (idx < x.shape[0])
    return np.where(inside[..., None], x[np.clip(idx, 0, x.shape[0] - 1)], 0.0)


# (C, stride, BC): rows 16-byte aligned and whole, the last chunk partly
# outside, and rows 37 elements apart (no chunk alignment).
@pytest.mark.parametrize("dtype", [np.float32, "bf16"])
@pytest.mark.parametrize("C,stride,BC", [(64, 64, 64), (61, 64, 64), (37, 37, 32)])
@pytest.mark.parametrize("n", [5, 16, 40, 83])
def test_gather_sum(rng, dtype, C, stride, BC, n):
    R, P, BN = 29, 3, 16
    x = rng.standard_normal((R, stride)).astype(np.float32)
    if dtype == "bf16":
        bits = to_bf16_bits(x)
        xs, xv = kiln.bf16(bits), from_bf16_bits(bits).astype(np.float64)
    else:
        xs, xv = x, x.astype(np.float64)
    idx = _indices(rng, P, n, R)
    out = np.full((P * BN, BC), np.nan, np.float32)
    gather_sum[(P,)](xs, idx, out, R, C, stride, n, BN=BN, BC=BC)
    xc = np.where(np.arange(stride) < C, xv, 0.0)[:, :BC] if BC <= stride else None
    pad = np.full(((-n) % BN), -1, np.int32)
    ref = np.stack([_ref_rows(xc, np.concatenate([idx[p], pad]).reshape(-1, BN)).sum(0)
                    for p in range(P)]).reshape(P * BN, BC)
    assert_close(out, ref, 1e-5, 1e-5)


@pytest.mark.parametrize("n", [20, 64, 150])
def test_gathered_rows_as_dot_operand(rng, n):
    R, P, BH, BN, D = 70, 2, 16, 32, 64
    qb = to_bf16_bits(rng.standard_normal((P * BH, D)).astype(np.float32))
    kvb = to_bf16_bits(rng.standard_normal((R, D)).astype(np.float32))
    idx = _indices(rng, P, n, R)
    out = np.full((P * BH, BN), np.nan, np.float32)
    gathered_scores[(P,)](kiln.bf16(qb), kiln.bf16(kvb), idx, out, R, n, BH=BH, BN=BN, D=D)
    q = from_bf16_bits(qb).astype(np.float64)
    kv = from_bf16_bits(kvb).astype(np.float64)
    pad = np.full(((-n) % BN), -1, np.int32)
    ref = np.concatenate([
        sum(q[p * BH:(p + 1) * BH] @ _ref_rows(kv, blk).T
            for blk in np.concatenate([idx[p], pad]).reshape(-1, BN))
        for p in range(P)])
    assert_close(out, ref, 1e-4, 1e-4)


@kiln.jit
def mixed_loop(q, k, v, idx, out, R, n, BH: kl.constexpr, BN: kl.constexpr, D: kl.constexpr):
    """A loop with a plain pipelined load (k: TMA on sm_90a) beside a
    pipelined gather (v's rows by a loaded index block), both tensor-core
    operands: out = sum over blocks of (q @ k_blk.T) @ v[idx_blk]."""
    pid = kl.program_id(0)
    qt = kl.load(kl.make_view(q, (BH * kl.num_programs(0), D), (D, 1)),
                 offsets=(pid * BH, 0), shape=(BH, D))
    vk = kl.make_view(k, (n, D), (D, 1))
    vv = kl.make_view(v, (R, D), (D, 1))
    acc = kl.zeros((BH, D), kl.float32)
    for start in range(0, n, BN):
        kt = kl.load(vk, offsets=(start, 0), shape=(BN, D))
        cols = start + kl.arange(0, BN)
        i = kl.load(idx + pid * n + cols, mask=cols < n, other=-1)
        rows = kl.gather(vv, i, offsets=(0,), shape=(BN, D))
        s = kl.dot(qt, kl.trans(kt))
        acc = kl.dot(s.to(kl.bfloat16), rows, acc)
    kl.store(kl.make_view(out, (BH * kl.num_programs(0), D), (D, 1)), acc,
             offsets=(pid * BH, 0))


@pytest.mark.parametrize("n", [40, 64, 200])
def test_gather_beside_a_pipelined_load(rng, n):
    R, P, BH, BN, D = 90, 2, 64, 32, 64
    bf = lambda *s: to_bf16_bits((rng.standard_normal(s) * 0.5).astype(np.float32))
    qb, kb, vb = bf(P * BH, D), bf(n, D), bf(R, D)
    idx = _indices(rng, P, n, R)
    out = np.full((P * BH, D), np.nan, np.float32)
    mixed_loop[(P,)](kiln.bf16(qb), kiln.bf16(kb), kiln.bf16(vb), idx, out, R, n,
                     BH=BH, BN=BN, D=D)
    q, k, v = (from_bf16_bits(x).astype(np.float64) for x in (qb, kb, vb))
    pad = (-n) % BN
    kp = np.concatenate([k, np.zeros((pad, D))])
    ref, bound = [], []
    for p in range(P):
        blocks = np.concatenate([idx[p], np.full(pad, -1, np.int32)]).reshape(-1, BN)
        acc, mag = np.zeros((BH, D)), np.zeros((BH, D))
        for j, blk in enumerate(blocks):
            s = q[p * BH:(p + 1) * BH] @ kp[j * BN:(j + 1) * BN].T
            rows = _ref_rows(v, blk)
            acc += s @ rows
            mag += np.abs(s) @ np.abs(rows)
        ref.append(acc)
        bound.append(mag)
    # The kernel rounds the scores to bf16 before the second dot: each term
    # moves by at most 2^-8 of its size.
    got, ref, bound = np.asarray(out, np.float64), np.concatenate(ref), np.concatenate(bound)
    assert not np.isnan(got).any()
    assert (np.abs(got - ref) <= 2.0 ** -8 * bound + 1e-4).all()


@kiln.jit
def computed_gather(x, perm, out, R, n, BN: kl.constexpr, BC: kl.constexpr,
                    STRIDE: kl.constexpr):
    """Indices computed in the loop: a tile loaded before it, the loop's
    columns, the program id and a mask (on a GPU evaluated per row at issue,
    for the iteration issued)."""
    pid = kl.program_id(0)
    v = kl.make_view(x, (R, BC), (BC, 1))
    base = kl.load(perm + kl.arange(0, BN))
    acc = kl.zeros((BN, BC), kl.float32)
    for start in range(0, n, BN):
        cols = start + kl.arange(0, BN)
        i = kl.where(cols < n, (base + cols * STRIDE + pid) % R, -1)
        t = kl.gather(v, i, offsets=(0,), shape=(BN, BC))
        acc += t.to(kl.float32)
    kl.store(kl.make_view(out, (BN * kl.num_programs(0), BC), (BC, 1)), acc,
             offsets=(pid * BN, 0))


@pytest.mark.parametrize("n", [7, 16, 45, 130])
def test_gather_by_computed_indices(rng, n):
    R, P, BN, BC, STRIDE = 37, 3, 16, 64, 5
    bits = to_bf16_bits(rng.standard_normal((R, BC)).astype(np.float32))
    perm = rng.permutation(BN * 3)[:BN].astype(np.int32)
    out = np.full((P * BN, BC), np.nan, np.float32)
    computed_gather[(P,)](kiln.bf16(bits), perm, out, R, n, BN=BN, BC=BC, STRIDE=STRIDE)
    x = from_bf16_bits(bits).astype(np.float64)
    ref = np.zeros((P, BN, BC))
    for p in range(P):
        for start in range(0, n, BN):
            cols = start + np.arange(BN)
            i = np.where(cols < n, (perm + cols * STRIDE + p) % R, -1)
            ref[p] += _ref_rows(x, i)
    assert_close(out, ref.reshape(P * BN, BC), 1e-5, 1e-5)
