"""Dot epilogues on the GPU targets, run by the SIMT emulator (so this file
runs in every pytest suite): on sm_90a a wgmma dot whose result feeds
elementwise expressions and row reductions keeps it in registers, and each
expression is computed per lane on the dot's accumulator fragments (one and
two warpgroups); emu-sm_80 (mma.sync, through shared memory) is the same
kernel the usual way. The expressions read other tiles (a broadcast row and
column vector, an iota mask) at the fragment elements' coordinates. Ragged
sizes; outputs poisoned; float64 references."""
import numpy as np
import pytest

import kiln
import kiln.language as kl
from conftest import assert_close, dense_reference, from_bf16_bits, to_bf16_bits


@kiln.jit
def dot_epilogue(a, b, bias, scale, c, m, n, k, BM: kl.constexpr, BN: kl.constexpr,
                 BK: kl.constexpr):
    # c = relu(a @ b * scale[:, None] + bias[None, :]), columns >= n - 3 zero.
    pid_n = kl.program_id(0)
    pid_m = kl.program_id(1)
    va = kl.make_view(a, (m, k), (k, 1))
    vb = kl.make_view(b, (k, n), (n, 1))
    vc = kl.make_view(c, (m, n), (n, 1))
    vbias = kl.make_view(bias, (1, n), (n, 1))
    vscale = kl.make_view(scale, (m, 1), (1, 1))
    ta = kl.load(va, offsets=(pid_m * BM, 0), shape=(BM, BK))
    tb = kl.load(vb, offsets=(0, pid_n * BN), shape=(BK, BN))
    s = kl.dot(ta, tb, kl.zeros((BM, BN), kl.float32))
    cols = pid_n * BN + kl.arange(0, BN)
    keep = kl.broadcast_to(kl.expand_dims(cols < n - 3, 0), (BM, BN))
    row_scale = kl.load(vscale, offsets=(pid_m * BM, 0), shape=(BM, 1))
    col_bias = kl.load(vbias, offsets=(0, pid_n * BN), shape=(1, BN))
    y = kl.maximum(s * kl.broadcast_to(row_scale, (BM, BN)) + kl.broadcast_to(col_bias, (BM, BN)),
                   kl.zeros((BM, BN), kl.float32))
    kl.store(vc, kl.where(keep, y, kl.zeros((BM, BN), kl.float32)),
             offsets=(pid_m * BM, pid_n * BN))




@pytest.mark.parametrize("target,warps", [("emu-sm_80", 4), ("emu-sm_90a", 4), ("emu-sm_90a", 8)])
@pytest.mark.parametrize("mn", [(64, 64), (100, 70), (130, 33)])
def test_dot_epilogue_on_fragments(rng, monkeypatch, target, warps, mn):
    monkeypatch.setenv("KILN_TARGET", target)
    m, n = mn
    k = 32  # one block of k: the dot's result is not loop-carried
    abits = to_bf16_bits(rng.standard_normal((m, k)))
    bbits = to_bf16_bits(rng.standard_normal((k, n)))
    a, b = from_bf16_bits(abits).astype(np.float64), from_bf16_bits(bbits).astype(np.float64)
    bias = rng.standard_normal(n).astype(np.float32)
    scale = rng.standard_normal(m).astype(np.float32)
    c = np.full((m, n), np.nan, np.float32)
    bm = 128 if warps == 8 else 64
    dot_epilogue[(kiln.cdiv(n, 64), kiln.cdiv(m, bm))](
        kiln.bf16(abits), kiln.bf16(bbits), bias, scale, c, m, n, k, BM=bm, BN=64, BK=k,
        num_warps=warps)
    ref = np.maximum(a @ b * scale[:, None].astype(np.float64) + bias[None, :], 0)
    ref[:, n - 3:] = 0
    assert_close(c, ref, 1e-5, 1e-5)


@kiln.jit
def dot_row_softmax(a, b, out, rowmax, m, n, k, BM: kl.constexpr, BN: kl.constexpr,
                    BK: kl.constexpr):
    # p = softmax over the row of s = a @ b (columns >= n masked), and the
    # row maxima: the dot result, the masked scores and the exponentials
    # each feed a row reduction and another expression.
    pid_m = kl.program_id(0)
    va = kl.make_view(a, (m, k), (k, 1))
    vb = kl.make_view(b, (k, n), (n, 1))
    vo = kl.make_view(out, (m, n), (n, 1))
    vmax = kl.make_view(rowmax, (m,), (1,))
    ta = kl.load(va, offsets=(pid_m * BM, 0), shape=(BM, BK))
    tb = kl.load(vb, offsets=(0, 0), shape=(BK, BN))
    s = kl.dot(ta, tb, kl.zeros((BM, BN), kl.float32))
    keep = kl.broadcast_to(kl.expand_dims(kl.arange(0, BN) < n, 0), (BM, BN))
    s = kl.where(keep, s * 0.5, kl.full((BM, BN), float("-inf"), kl.float32))
    mx = kl.max(s, axis=1)
    p = kl.exp(s - kl.broadcast_to(kl.expand_dims(mx, 1), (BM, BN)))
    total = kl.sum(p, axis=1)
    kl.store(vo, p / kl.broadcast_to(kl.expand_dims(total, 1), (BM, BN)),
             offsets=(pid_m * BM, 0))
    kl.store(vmax, mx, offsets=(pid_m * BM,))


@pytest.mark.parametrize("target,warps", [("emu-sm_80", 4), ("emu-sm_90a", 4), ("emu-sm_90a", 8)])
@pytest.mark.parametrize("m,n", [(64, 64), (100, 50), (70, 9)])
def test_row_reductions_on_fragments(rng, monkeypatch, target, warps, m, n):
    # Whole rows per warp (wgmma with one warpgroup across the columns):
    # the reductions run on the fragments with quad shuffles; otherwise
    # (mma.sync's warp grid, two warpgroups) the values are stored first.
    monkeypatch.setenv("KILN_TARGET", target)
    k = 48
    abits = to_bf16_bits(rng.standard_normal((m, k)))
    bbits = to_bf16_bits(rng.standard_normal((k, n)))
    a, b = from_bf16_bits(abits).astype(np.float64), from_bf16_bits(bbits).astype(np.float64)
    out = np.full((m, n), np.nan, np.float32)
    rowmax = np.full(m, np.nan, np.float32)
    bm = 128 if warps == 8 else 64
    dot_row_softmax[(kiln.cdiv(m, bm),)](kiln.bf16(abits), kiln.bf16(bbits), out, rowmax,
                                         m, n, k, BM=bm, BN=64, BK=k, num_warps=warps)
    s = a @ b * 0.5
    e = np.exp(s - s.max(axis=1, keepdims=True))
    assert_close(rowmax, s.max(axis=1), 1e-5, 1e-5)
    assert_close(out, e / e.sum(axis=1, keepdims=True), 1e-5, 1e-6)


@kiln.jit
def chained_dots(a, b, c, out, m, n, k, d, BM: kl.constexpr, BN: kl.constexpr,
                 BK: kl.constexpr, BD: kl.constexpr, LOOP: kl.constexpr):
    # out = sum over key blocks j of exp(a @ b[:, j] * 0.1) @ c[j, :] (the
    # exponentials rounded to bf16), like attention without the max: the
    # first dot's fragments become the second's A operand. With LOOP the
    # second dot accumulates in registers across key blocks (A from
    # registers); without, it is a single dot from zero (A stored first).
    pid_m = kl.program_id(0)
    va = kl.make_view(a, (m, k), (k, 1))
    vb = kl.make_view(b, (k, n), (n, 1))
    vc = kl.make_view(c, (n, d), (d, 1))
    vo = kl.make_view(out, (m, d), (d, 1))
    ta = kl.load(va, offsets=(pid_m * BM, 0), shape=(BM, BK))
    acc = kl.zeros((BM, BD), kl.float32)
    if LOOP:
        for j in range(0, n, BN):
            tb = kl.load(vb, offsets=(0, j), shape=(BK, BN))
            p = kl.exp(kl.dot(ta, tb, kl.zeros((BM, BN), kl.float32)) * 0.1)
            tc = kl.load(vc, offsets=(j, 0), shape=(BN, BD))
            acc = kl.dot(p.to(kl.bfloat16), tc, acc)
    else:
        tb = kl.load(vb, offsets=(0, 0), shape=(BK, BN))
        p = kl.exp(kl.dot(ta, tb, kl.zeros((BM, BN), kl.float32)) * 0.1)
        tc = kl.load(vc, offsets=(0, 0), shape=(BN, BD))
        acc = kl.dot(p.to(kl.bfloat16), tc, acc)
    kl.store(vo, acc, offsets=(pid_m * BM, 0))


@pytest.mark.parametrize("target,warps", [("emu-sm_80", 4), ("emu-sm_90a", 4), ("emu-sm_90a", 8)])
@pytest.mark.parametrize("loop", [False, True])
def test_chained_dots_a_from_fragments(rng, monkeypatch, target, warps, loop):
    monkeypatch.setenv("KILN_TARGET", target)
    m, k, d = 100, 32, 64
    n = 150 if loop else 64
    abits = to_bf16_bits(rng.standard_normal((m, k)))
    bbits = to_bf16_bits(rng.standard_normal((k, n)))
    cbits = to_bf16_bits(rng.standard_normal((n, d)))
    a, b, c = (from_bf16_bits(x).astype(np.float64) for x in (abits, bbits, cbits))
    out = np.full((m, d), np.nan, np.float32)
    bm = 128 if warps == 8 else 64
    chained_dots[(kiln.cdiv(m, bm),)](kiln.bf16(abits), kiln.bf16(bbits), kiln.bf16(cbits),
                                      out, m, n, k, d, BM=bm, BN=64, BK=k, BD=d,
                                      LOOP=loop, num_warps=warps)
    # The reference rounds the exponentials to bf16 as the kernel does, but
    # an exponential near a rounding boundary may round the other way in the
    # kernel (f32 scores, its exp): one bf16 step of p (up to 0.016 here)
    # times c, a few times per output, is the tolerance. A wrong fragment or
    # register layout is off by tens.
    p = from_bf16_bits(to_bf16_bits(np.exp(a @ b * 0.1).astype(np.float32))).astype(np.float64)
    assert_close(out, p @ c, 1e-2, 0.2)


@pytest.mark.parametrize("target,warps,block", [("emu-sm_90a", 8, 128), ("emu-sm_90a", 4, 128),
                                                ("emu-sm_90a", 4, 64), ("emu-sm_80", 4, 64),
                                                ("emu-sm_90a", 8, (128, 64)),
                                                ("emu-sm_80", 8, (128, 64))],
                         ids=lambda v: f"{v[0]}x{v[1]}" if isinstance(v, tuple) else None)
@pytest.mark.parametrize("kind", ["causal", "none"])
def test_attention_row_statistics_in_registers(rng, monkeypatch, target, warps, block, kind):
    # The library's bf16 attention at head dim 128. On sm_90a the running
    # max and sum are row vectors carried in registers, in the rows of the
    # warpgroups' wgmma fragments: block 128 at 8 warps is two warpgroups of
    # 64 rows each (FlashAttention's shape), at 4 warps one warpgroup with
    # two 64-row blocks (four rows per lane); block 64 at 4 warps one block.
    # (128, 64): query blocks of 128 rows, key blocks of 64, at 8 warps two
    # warpgroups with 64x64 scores each. emu-sm_80 keeps them in shared
    # memory. Ragged sequence, GQA.
    monkeypatch.setenv("KILN_TARGET", target)
    monkeypatch.setenv("KILN_NUM_WARPS", str(warps))
    B, Hq, Hkv, S, D = 1, 2, 1, 300, 128
    shapes = [(B, Hq, S, D), (B, Hkv, S, D), (B, Hkv, S, D)]
    bits = [to_bf16_bits(rng.standard_normal(sh)) for sh in shapes]
    x = [from_bf16_bits(b) for b in bits]
    rule = {"causal": lambda b, h, qi, ki: ki <= qi,
            "none": lambda b, h, qi, ki: np.ones_like(qi + ki, bool)}[kind]
    block, block_kv = block if isinstance(block, tuple) else (block, block)
    mask = kiln.ops.block_mask(rule, B, Hq, S, S, block=block, block_kv=block_kv)
    out, lse = kiln.ops.block_sparse_attention(*(kiln.bf16(b) for b in bits), mask, kind)
    ro, rl = dense_reference(*x, rule, 1 / np.sqrt(D))
    # P is rounded to bf16 before P @ V, as FlashAttention does.
    assert_close(out, ro, 2e-2, 1e-2)
    assert_close(lse, rl, 1e-4, 1e-4)
    if kind == "causal":
        # A bf16 output (flex_attention's): the f32 output's rounding, bit
        # for bit, through the fragments' conversion and the bf16 epilogue.
        outb, lseb = kiln.ops.block_sparse_attention(*(kiln.bf16(b) for b in bits), mask,
                                                     kind, out_dtype="bf16")
        np.testing.assert_array_equal(outb.array, to_bf16_bits(out))
        np.testing.assert_array_equal(lseb, lse)


@kiln.jit
def online_softmax_log(a, b, c, out, mlog, m, n, k, d, BM: kl.constexpr, BN: kl.constexpr,
                       BK: kl.constexpr, BD: kl.constexpr):
    # Flash attention's loop (online softmax of a @ b, times c), and the
    # running row maximum after each column block stored to mlog[block]:
    # a row vector in registers that a store also reads inside the loop
    # (stored there, then carried on in registers). Columns >= n masked.
    pid_m = kl.program_id(0)
    va = kl.make_view(a, (m, k), (k, 1))
    vb = kl.make_view(b, (k, n), (n, 1))
    vc = kl.make_view(c, (n, d), (d, 1))
    vo = kl.make_view(out, (m, d), (d, 1))
    vlog = kl.make_view(mlog, (kl.cdiv(n, BN), m), (m, 1))
    ta = kl.load(va, offsets=(pid_m * BM, 0), shape=(BM, BK))
    mrun = kl.full((BM,), float("-inf"), kl.float32)
    lrun = kl.zeros((BM,), kl.float32)
    acc = kl.zeros((BM, BD), kl.float32)
    for j in range(0, n, BN):
        tb = kl.load(vb, offsets=(0, j), shape=(BK, BN))
        s = kl.dot(ta, tb, kl.zeros((BM, BN), kl.float32))
        keep = kl.broadcast_to(kl.expand_dims(j + kl.arange(0, BN) < n, 0), (BM, BN))
        s = kl.where(keep, s, kl.full((BM, BN), float("-inf"), kl.float32))
        mnew = kl.maximum(mrun, kl.max(s, axis=1))
        p = kl.exp(s - kl.broadcast_to(kl.expand_dims(mnew, 1), (BM, BN)))
        alpha = kl.exp(mrun - mnew)
        lrun = lrun * alpha + kl.sum(p, axis=1)
        tc = kl.load(vc, offsets=(j, 0), shape=(BN, BD))
        acc = kl.dot(p.to(kl.bfloat16), tc,
                     acc * kl.broadcast_to(kl.expand_dims(alpha, 1), (BM, BD)))
        kl.store(vlog, kl.expand_dims(mnew, 0), offsets=(j // BN, pid_m * BM))
        mrun = mnew
    kl.store(vo, acc / kl.broadcast_to(kl.expand_dims(lrun, 1), (BM, BD)),
             offsets=(pid_m * BM, 0))


@pytest.mark.parametrize("target,warps", [("emu-sm_80", 4), ("emu-sm_90a", 4), ("emu-sm_90a", 8)])
def test_row_vectors_carried_and_stored_in_the_loop(rng, monkeypatch, target, warps):
    monkeypatch.setenv("KILN_TARGET", target)
    m, n, k, d = 150, 170, 32, 64
    abits = to_bf16_bits(rng.standard_normal((m, k)))
    bbits = to_bf16_bits(rng.standard_normal((k, n)))
    cbits = to_bf16_bits(rng.standard_normal((n, d)))
    a, b, c = (from_bf16_bits(x).astype(np.float64) for x in (abits, bbits, cbits))
    bm, bn = (128 if warps == 8 else 64), 64
    nb = -(-n // bn)
    out = np.full((m, d), np.nan, np.float32)
    mlog = np.full((nb, m), np.nan, np.float32)
    online_softmax_log[(kiln.cdiv(m, bm),)](kiln.bf16(abits), kiln.bf16(bbits),
                                            kiln.bf16(cbits), out, mlog, m, n, k, d,
                                            BM=bm, BN=bn, BK=k, BD=d, num_warps=warps)
    s = a @ b
    ref_log = np.stack([s[:, :min(n, (i + 1) * bn)].max(axis=1) for i in range(nb)])
    assert_close(mlog, ref_log, 1e-5, 1e-5)
    # P is rounded to bf16 against the block's running max: the reference
    # is exact softmax, so the tolerance is a few bf16 steps of P.
    e = np.exp(s - s.max(axis=1, keepdims=True))
    assert_close(out, e @ c / e.sum(axis=1, keepdims=True), 2e-2, 2e-2)


@kiln.jit
def rescaled_then_plain(a, b, scale, out, m, n, k, BM: kl.constexpr, BN: kl.constexpr,
                        BK: kl.constexpr):
    # Two loops carry one accumulator in registers: the first rescales it
    # per row before each dot (flash attention's shape: under mma.sync its
    # warps own whole rows), the second is a plain GEMM loop (a warp grid).
    # The second must not take the first's registers as if laid out alike.
    pid_m = kl.program_id(0)
    va = kl.make_view(a, (m, k), (k, 1))
    vb = kl.make_view(b, (k, n), (n, 1))
    vo = kl.make_view(out, (m, n), (n, 1))
    half = kl.load(kl.make_view(scale, (m,), (1,)), offsets=(pid_m * BM,), shape=(BM,))
    acc = kl.zeros((BM, BN), kl.float32)
    for j in range(0, k, BK):
        ta = kl.load(va, offsets=(pid_m * BM, j), shape=(BM, BK))
        tb = kl.load(vb, offsets=(j, 0), shape=(BK, BN))
        acc = kl.dot(ta, tb, acc * kl.broadcast_to(kl.expand_dims(half, 1), (BM, BN)))
    for j in range(0, k, BK):
        ta = kl.load(va, offsets=(pid_m * BM, j), shape=(BM, BK))
        tb = kl.load(vb, offsets=(j, 0), shape=(BK, BN))
        acc = kl.dot(ta, tb, acc)
    kl.store(vo, acc, offsets=(pid_m * BM, 0))


@pytest.mark.parametrize("target", ["emu-sm_80", "emu-sm_90a"])
def test_loops_with_different_register_layouts(rng, monkeypatch, target):
    monkeypatch.setenv("KILN_TARGET", target)
    m, n, k, BK = 100, 64, 80, 16
    abits = to_bf16_bits(rng.standard_normal((m, k)))
    bbits = to_bf16_bits(rng.standard_normal((k, n)))
    a, b = from_bf16_bits(abits).astype(np.float64), from_bf16_bits(bbits).astype(np.float64)
    out = np.full((m, n), np.nan, np.float32)
    scale = rng.uniform(0.25, 1.0, m).astype(np.float32)
    rescaled_then_plain[(kiln.cdiv(m, 64),)](kiln.bf16(abits), kiln.bf16(bbits), scale, out, m,
                                             n, k, BM=64, BN=64, BK=BK, num_warps=4)
    ref = np.zeros((m, n))
    for j in range(0, k, BK):
        ref = ref * scale[:, None] + a[:, j:j + BK] @ b[j:j + BK]
    ref = ref + a @ b
    assert_close(out, ref, 1e-5, 1e-4)
