"""Tile slices (`x[a:b, c:d]` with compile-time bounds: tensor.extract_slice)
against numpy, on every target the suite runs on. Wherever something other
than a dot reads the slice it is a copy; a slice only dots read is a view of
its source's buffer (on a GPU, for tensor-core dots, of its shared-memory
rows: padded rows and ldmatrix under mma.sync, core matrices under wgmma),
which the dot cases below take: a loaded tile sliced for two
dots, and DSA's pattern of gathered key rows whose first columns are the
values (docs/gpu.md, "Tile slices")."""
import os

import numpy as np
import pytest

import kiln
import kiln.language as kl
from conftest import assert_close, from_bf16_bits, to_bf16_bits


@kiln.jit
def slice_copy(x, oa, ob, oc, R, C, BR: kl.constexpr, BC: kl.constexpr):
    t = kl.load(kl.make_view(x, (R, C), (C, 1)), offsets=(0, 0), shape=(BR, BC))
    a = t[2:7, 8:40] * 2 + 1                         # a block, then elementwise
    b = t[:, -40:-35][1:4]                           # a slice of a slice, from the end
    c = t[3:4, :][None, :, :]                        # with an inserted dimension
    kl.store(kl.make_view(oa, (5, 32), (32, 1)), a, offsets=(0, 0))
    kl.store(kl.make_view(ob, (3, 5), (5, 1)), b, offsets=(0, 0))
    kl.store(kl.make_view(oc, (1, 1, BC), (BC, BC, 1)), c, offsets=(0, 0, 0))


@pytest.mark.parametrize("dtype", [np.float32, np.int32, "bf16"])
def test_slices_copy(rng, dtype):
    R, C, BR, BC = 9, 45, 16, 64                      # the tile's edges are masked (zero)
    x = rng.standard_normal((R, C)).astype(np.float32)
    if dtype == "bf16":
        xs = kiln.bf16(to_bf16_bits(x))
        xv = from_bf16_bits(to_bf16_bits(x)).astype(np.float64)
        outs = [kiln.bf16(np.full(n, 0x7FC0, np.uint16)) for n in (160, 15, BC)]
    elif dtype == np.int32:
        xs = (x * 100).astype(np.int32)
        xv = xs.astype(np.float64)
        outs = [np.full(n, np.iinfo(np.int32).max, np.int32) for n in (160, 15, BC)]
    else:
        xs, xv = x, x.astype(np.float64)
        outs = [np.full(n, np.nan, np.float32) for n in (160, 15, BC)]
    slice_copy[(1,)](xs, *outs, R, C, BR=BR, BC=BC)
    tile = np.zeros((BR, BC))
    tile[:R, :C] = xv
    got = [from_bf16_bits(o.array).astype(np.float64) if dtype == "bf16"
           else np.asarray(o, np.float64) for o in outs]
    # (x * 2 + 1 rounds in the element type.)
    assert_close(got[0], (tile[2:7, 8:40] * 2 + 1).ravel(), 1e-2 if dtype == "bf16" else 1e-6, 0)
    assert np.array_equal(got[1], tile[:, -40:-35][1:4].ravel())
    assert np.array_equal(got[2], tile[3])


@kiln.jit
def sliced_dots(a, b, out, M, K2, N, BM: kl.constexpr, BK2: kl.constexpr,
                BN: kl.constexpr, K: kl.constexpr):
    # A [BM, 2K] and B [2K, BN] loaded whole, each half of K sliced off for
    # its own dot: out = A[:, :K] @ B[:K] + A[:, K:] @ B[K:] (= A @ B).
    pid = kl.program_id(0)
    ta = kl.load(kl.make_view(a, (M, K2), (K2, 1)), offsets=(pid * BM, 0), shape=(BM, BK2))
    tb = kl.load(kl.make_view(b, (K2, N), (N, 1)), offsets=(0, 0), shape=(BK2, BN))
    acc = kl.dot(ta[:, :K], tb[:K, :])
    acc = kl.dot(ta[:, K:], tb[K:, :], acc)
    kl.store(kl.make_view(out, (M, N), (N, 1)), acc, offsets=(pid * BM, 0))


@pytest.mark.parametrize("BM", [16, 64])
def test_sliced_dot_operands(rng, BM):
    # bf16 operands: tensor-core dots on the GPU targets (BM 64 on sm_90a:
    # wgmma, the slices views of core matrices; 16: mma.sync).
    M, K2, N, BN, K = 70, 123, 60, 64, 64
    a = rng.standard_normal((M, K2)).astype(np.float32)
    b = rng.standard_normal((K2, N)).astype(np.float32)
    ab, bb = to_bf16_bits(a), to_bf16_bits(b)
    out = np.full((M, N), np.nan, np.float32)
    sliced_dots[(kiln.cdiv(M, BM),)](kiln.bf16(ab), kiln.bf16(bb), out, M, K2, N,
                                     BM=BM, BK2=2 * K, BN=BN, K=K)
    ref = from_bf16_bits(ab).astype(np.float64) @ from_bf16_bits(bb).astype(np.float64)
    assert_close(out, ref, 1e-4, 1e-4)


@kiln.jit
def gathered_attention(q, kv, idx, out, H, S, D, DV: kl.constexpr, n,
                       BH: kl.constexpr, BK: kl.constexpr, BD: kl.constexpr,
                       BDV: kl.constexpr):
    # One step of DSA's loop: key rows gathered by index, scores q . kᵀ,
    # softmax, then p @ v with v the key rows' first DV columns (a slice).
    tq = kl.load(kl.make_view(q, (H, D), (D, 1)), offsets=(0, 0), shape=(BH, BD))
    ks = kl.arange(0, BK)
    i = kl.load(idx + ks, mask=ks < n, other=-1)
    rows = kl.gather(kl.make_view(kv, (S, D), (D, 1)), i, offsets=(0,), shape=(BK, BD))
    s = kl.dot(tq, kl.trans(rows))
    s = kl.where((ks < n)[None, :], s, float("-inf"))
    p = kl.exp(s - kl.max(s, 1)[:, None])
    p = p / kl.sum(p, 1)[:, None]
    o = kl.dot(p.to(kl.bfloat16), rows[:, :BDV])
    kl.store(kl.make_view(out, (H, DV), (DV, 1)), o, offsets=(0, 0))


@pytest.mark.parametrize("BH", [16, 64])
def test_gathered_rows_sliced_for_values(rng, BH):
    H, S, D, DV, n, BK, BD, BDV = BH - 3, 50, 150, 120, 29, 32, 160, 128
    q = to_bf16_bits(rng.standard_normal((H, D)).astype(np.float32))
    kv = to_bf16_bits(rng.standard_normal((S, D)).astype(np.float32))
    idx = rng.choice(S, n, replace=False).astype(np.int32)
    out = np.full((H, DV), np.nan, np.float32)
    gathered_attention[(1,)](kiln.bf16(q), kiln.bf16(kv), idx, out, H, S, D, DV, n,
                             BH=BH, BK=BK, BD=BD, BDV=BDV)
    qv, kvv = from_bf16_bits(q).astype(np.float64), from_bf16_bits(kv).astype(np.float64)
    s = qv @ kvv[idx].T
    p = np.exp(s - s.max(1, keepdims=True))
    p = p / p.sum(1, keepdims=True)
    p = from_bf16_bits(to_bf16_bits(p.astype(np.float32))).astype(np.float64)
    # p is rounded to bfloat16 as the kernel rounds its own (a float32 exp
    # that may sit on the other side of a rounding tie): one bf16 ulp of a p
    # near 1 (2^-8) times the largest value apart at most; a wrong column
    # or row is off by O(1).
    assert_close(out, p @ kvv[idx, :DV], 2e-3, 2.0 ** -8 * np.abs(kvv).max())


@pytest.mark.parametrize("hb,Dv", [(64, 128), (16, 160)])
def test_dsa_values_from_the_key_rows(rng, hb, Dv):
    # dsa_sparse_attention at 64 heads per program and 8 warps: on sm_90a
    # both dots run on wgmma and the values are core matrices of the key
    # rows (the view deferSliceToTensorCores makes). At d_v = d_qk the key
    # rows are the values (two dots read one tile in its own block: the
    # dots' layout, sharedOperandDots).
    Sq, Hq, Skv, Dqk, topk = 2, hb, 90, 160, 40
    q = to_bf16_bits(rng.standard_normal((Sq, Hq, Dqk)).astype(np.float32))
    kv = to_bf16_bits(rng.standard_normal((Skv, Dqk)).astype(np.float32))
    idx = np.full((Sq, topk), -1, np.int32)
    idx[0] = rng.choice(Skv, topk, replace=False)
    idx[1, :17] = rng.choice(Skv, 17, replace=False)
    k = kiln.ops.kernel("dsa_sparse_attention", _num_warps=8, d_qk=Dqk, d_v=Dv,
                        heads_block=hb, block_k=16, dtype="bf16")
    out = np.full((Sq, Hq, Dv), np.nan, np.float32)
    lse = np.full((Sq, Hq), np.nan, np.float32)
    errors = np.zeros(1, np.int32)
    scale = 1 / np.sqrt(Dqk)
    k.launch([q, kv, idx, out, lse, errors, Sq, Hq, Skv, topk, np.float32(scale)], [Sq, 1])
    qv, kvv = from_bf16_bits(q).astype(np.float64), from_bf16_bits(kv).astype(np.float64)
    for t in range(Sq):
        sel = idx[t][idx[t] >= 0]
        s = qv[t] @ kvv[sel].T * scale
        m = s.max(1, keepdims=True)
        p = np.exp(s - m)
        l = p.sum(1, keepdims=True)
        pr = from_bf16_bits(to_bf16_bits(p.astype(np.float32))).astype(np.float64)
        # (One bf16 ulp of a p near 1 apart at most, as above.)
        assert_close(out[t], pr @ kvv[sel, :Dv] / l, 1e-2, 2.0 ** -8 * np.abs(kvv).max())
        assert_close(lse[t], (m + np.log(l))[:, 0], 1e-4, 1e-4)
    assert errors[0] == 0


@pytest.mark.parametrize("body,match", [
    ("t[0:4:2]", "step of 1"),
    ("t[5:3]", "empty or outside"),
    ("t[:, 0:40]", "empty or outside"),
    ("t[n:4]", "compile-time integer"),
    ("t[0]", "in subscripts"),
    ("t[:, :, :]", "too many subscripts"),
    ("kl.load((x + kl.arange(0, 8)[:, None] * 32 + kl.arange(0, 32)[None, :])[:, :4])",
     "slice the offsets before adding them to the pointer"),
])
def test_slice_errors(tmp_path, monkeypatch, body, match):
    (tmp_path / "bad_slice.py").write_text(f"""
import kiln, kiln.language as kl
@kiln.jit
def bad(x, out, n):
    t = kl.load(kl.make_view(x, (8, 32), (32, 1)), offsets=(0, 0), shape=(8, 32))
    u = {body}
    kl.store(kl.make_view(out, (8, 32), (32, 1)), u, offsets=(0, 0))
""")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib
    mod = importlib.import_module("bad_slice")
    importlib.reload(mod)
    x = np.zeros((8, 32), np.float32)
    with pytest.raises(kiln.CompilationError, match=match):
        mod.bad[(1,)](x, x.copy(), 3)


@kiln.jit
def split_pairs(x, o, ob):
    # kl.split of a (2,) tile gives scalars; of a boolean (4, 2) tile, bools
    # (kl.split, kl.sort, kl.flip and the generic reductions take pair
    # halves as two slices).
    a, b = kl.split(kl.load(x + kl.arange(0, 2)))
    kl.store(o, b)
    kl.store(o + 1, a)
    m = kl.reshape(kl.load(x + kl.arange(0, 8)) > 0, (4, 2))
    lo, hi = kl.split(m)
    kl.store(ob + kl.arange(0, 4), lo.to(kl.int32) * 2 + hi.to(kl.int32))


def test_split_pairs_scalars_and_bools():
    x = np.array([-0.0, np.nan, 1, -2, 3, 4, -5, -6], np.float32)
    o = np.full(2, 7.0, np.float32)
    ob = np.full(4, 9, np.int32)
    split_pairs[(1,)](x, o, ob)
    assert (o.view(np.int32) == x[[1, 0]].view(np.int32)).all()
    assert ob.tolist() == [0, 2, 3, 0]


@kiln.jit
def _either(a, b):
    return a | b


@kiln.jit
def reduce_bools(x, o):
    # A generic reduction (a combine function kl.reduce does not map to one
    # kiln.reduce) to a scalar keeps its dtype: a boolean here (it was
    # int32 when the last pair went through a max).
    m = kl.load(x + kl.arange(0, 8)) > 0
    r = kl.reduce(m, 0, _either)
    kl.static_assert(r.dtype == kl.int1, "a bool reduction gives a bool")
    kl.store(o, r.to(kl.int32) + 5)


def test_generic_reduction_of_bools_to_a_scalar():
    x = np.array([-1, -2, 3, -4, -5, -6, -7, -8], np.float32)
    o = np.zeros(1, np.int32)
    reduce_bools[(1,)](x, o)
    assert o[0] == 6
    x[2] = -3
    reduce_bools[(1,)](x, o)
    assert o[0] == 5


@kiln.jit
def slice_reduce(x, o_sum, o_max, o_blk, R, C, BR: kl.constexpr, BC: kl.constexpr,
                 R0: kl.constexpr, R1: kl.constexpr, C0: kl.constexpr, C1: kl.constexpr):
    # A block of a loaded tile read by a reduction, a scan and a store (the
    # copy path on every target), at offsets and sizes the test draws.
    t = kl.load(kl.make_view(x, (R, C), (C, 1)), offsets=(0, 0), shape=(BR, BC))
    s = t[R0:R1, C0:C1]
    rows = kl.arange(0, R1 - R0)
    kl.store(o_sum + rows, kl.sum(s, 1))
    kl.store(o_max + kl.arange(0, C1 - C0), kl.max(kl.cumsum(s, 0), 0))
    kl.store(kl.make_view(o_blk, (R1 - R0, C1 - C0), (C1 - C0, 1)), s.to(kl.float32) * 3,
             offsets=(0, 0))


@pytest.mark.parametrize("trial", range(4))
def test_random_slices_copied(rng, trial):
    BR, BC = 16, 32
    R, C = int(rng.integers(5, BR + 1)), int(rng.integers(9, BC + 1))
    R0 = int(rng.integers(0, BR - 1))
    R1 = int(rng.integers(R0 + 1, BR + 1))
    C0 = int(rng.integers(0, BC - 1))
    C1 = int(rng.integers(C0 + 1, BC + 1))
    x = rng.standard_normal((R, C)).astype(np.float32)
    tile = np.zeros((BR, BC))
    tile[:R, :C] = x
    s = tile[R0:R1, C0:C1]
    o_sum = np.full(R1 - R0, np.nan, np.float32)
    o_max = np.full(C1 - C0, np.nan, np.float32)
    o_blk = np.full((R1 - R0) * (C1 - C0), np.nan, np.float32)
    slice_reduce[(1,)](x, o_sum, o_max, o_blk, R, C, BR=BR, BC=BC, R0=R0, R1=R1, C0=C0, C1=C1)
    assert_close(o_sum, s.sum(1), 1e-5, 1e-5)
    assert_close(o_max, np.cumsum(s, 0).max(0), 1e-5, 1e-5)
    assert np.array_equal(o_blk, (s * 3).ravel().astype(np.float32))
