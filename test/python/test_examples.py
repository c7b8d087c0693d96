"""Every Python example against a float64 numpy reference, on ragged sizes,
with outputs poisoned (NaN) before each launch."""
import numpy as np
import pytest

import kiln
from conftest import assert_close, from_bf16_bits, to_bf16_bits

import block_sparse_attention as bsa_ex
import flash_attention as fa_ex
import fp8_blockwise_matmul as f8_ex
import layernorm as ln_ex
import matmul as mm_ex
import mx_matmul as mx_ex
import softmax as sm_ex
import triton_attention as tfa_ex
import triton_dropout as tdo_ex
import triton_grouped_gemm as tgg_ex
import triton_layernorm as tln_ex
import triton_matmul as tmm_ex
import vector_add as va_ex
import w4a16_matmul as w4_ex
import w8a8_matmul as w8_ex


@pytest.mark.parametrize("n", [1, 17, 1023, 1024, 1025, 100_003])
def test_vector_add(rng, n):
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    out = np.full(n + 8, np.nan, np.float32)
    va_ex.add_kernel[(kiln.cdiv(n, 256),)](x, y, out[:n], n, BLOCK=256)
    assert_close(out[:n], x.astype(np.float64) + y, 1e-6, 1e-6)
    assert np.isnan(out[n:]).all()


@pytest.mark.parametrize("shape", [(1, 1), (3, 17), (64, 255), (7, 1000)])
def test_softmax(rng, shape):
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    out = np.full(shape, np.nan, np.float32)
    sm_ex.softmax_kernel[(shape[0],)](x, out, shape[1], BLOCK=max(16, sm_ex.next_pow2(shape[1])))
    assert_close(out, sm_ex.reference(x), 1e-5, 1e-7)


@pytest.mark.parametrize("shape", [(1, 1), (5, 255), (9, 257), (3, 1283)])
def test_layernorm(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32) + 2
    w = rng.standard_normal(shape[1]).astype(np.float32)
    b = rng.standard_normal(shape[1]).astype(np.float32)
    y = np.full(shape, np.nan, np.float32)
    ln_ex.layernorm_kernel[(shape[0],)](x, w, b, y, shape[1], 1e-5, BLOCK=128)
    assert_close(y, ln_ex.reference(x, w, b), 1e-4, 1e-4)


@pytest.mark.parametrize("offset", [300.0, 1e4, "outlier"])
def test_layernorm_of_rows_with_a_large_mean(rng, offset):
    """The sum of squares minus the squared mean cancelled: rows of randn +
    1e4 were wrong by 370 (0.044 off at + 300); sums shifted by the first
    element cancelled when it was an outlier (3000 in randn: 6e-3 off)."""
    x = (rng.standard_normal((4, 1283)) + (0 if offset == "outlier" else offset)).astype(
        np.float32)
    if offset == "outlier":
        x[:, 0], offset = 3000, 0
    w, b = np.ones(1283, np.float32), np.zeros(1283, np.float32)
    y = np.full(x.shape, np.nan, np.float32)
    ln_ex.layernorm_kernel[(4,)](x, w, b, y, 1283, 1e-5, BLOCK=128)
    # (x itself is rounded to float32 at 1e4: its ulp, 1e-3, over a std of 1.)
    assert_close(y, ln_ex.reference(x, w, b), 1e-4, 2e-3 if offset > 1e3 else 1e-4)


@pytest.mark.parametrize("mnk", [(1, 1, 1), (63, 65, 31), (130, 70, 129)])
def test_matmul(rng, mnk):
    m, n, k = mnk
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = mm_ex.matmul(a, b)
    assert_close(c, a.astype(np.float64) @ b, 1e-4, 1e-4 * np.sqrt(k))


@pytest.mark.parametrize("seq,causal", [(1, False), (100, True), (130, False), (257, True)])
def test_flash_attention(rng, seq, causal):
    q, k, v = (rng.standard_normal((2, seq, 64)).astype(np.float32) for _ in range(3))
    out = fa_ex.attention(q, k, v, causal)
    assert_close(out, fa_ex.reference(q, k, v, causal), 1e-4, 1e-5)


@pytest.mark.parametrize("seq,density", [(1, 1.0), (100, 0.5), (200, 0.3), (150, 0.0)])
def test_block_sparse_attention(rng, seq, density):
    q, k, v = (rng.standard_normal((2, seq, 64)).astype(np.float32) for _ in range(3))
    kv_num, kv_idx = bsa_ex.random_block_mask(2, seq, density=density, seed=int(rng.integers(1 << 30)))
    out, lse = bsa_ex.block_sparse_attention(q, k, v, kv_num, kv_idx)
    ro, rl = bsa_ex.reference(q, k, v, kv_num, kv_idx)
    assert_close(out, ro, 1e-4, 1e-5)
    assert_close(lse, rl, 1e-5, 1e-5)


@pytest.mark.parametrize("mnk", [(1, 1, 1), (70, 45, 83), (130, 200, 64)])
def test_triton_tutorial_matmul(rng, mnk):
    m, n, k = mnk
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.full((m, n), np.nan, np.float32)
    grid, args, kw = tmm_ex.launch_args(a, b, c, m, n, k, tmm_ex.CPU_CONFIG)
    tmm_ex.matmul_kernel[grid](*args, **kw)
    assert_close(c, a.astype(np.float64) @ b, 1e-4, 1e-4 * np.sqrt(k))


@pytest.mark.parametrize("shape,causal", [((1, 1, 1, 64), True), ((2, 3, 100, 64), False),
                                          ((1, 2, 130, 32), True), ((2, 1, 128, 64), True)])
def test_triton_tutorial_attention(rng, shape, causal):
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    Z, H, N, D = shape
    o = np.full(shape, np.nan, np.float32)
    lse = np.full((Z * H, N), np.nan, np.float32)
    grid, args, kw = tfa_ex.launch_args(q, k, v, o, lse, Z, H, N, D, causal)
    tfa_ex._attn_fwd[grid](*args, **kw)
    ro, rl = tfa_ex.reference(q, k, v, causal)
    assert_close(o, ro, 1e-4, 1e-5)
    assert_close(lse, rl, 1e-5, 1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_triton_tutorial_attention_with_extreme_scores(rng, causal):
    """Keys past N_CTX were given the score -1e6, and the causal mask added
    -1e6: a row whose scores were all below -1e6 attended to the padding
    (output 0), and a future key 1e6 above a visible one got the weight."""
    Z, H, N, D = 1, 1, 17, 16
    v = rng.standard_normal((Z, H, N, D)).astype(np.float32)
    q = np.full((Z, H, N, D), 300, np.float32)
    k = np.full((Z, H, N, D), -3000, np.float32)   # every score -1.44e7
    cases = [(q, k)]
    if causal:   # row 0's future key 1 scores 4e6 above its own
        q2, k2 = (rng.standard_normal((Z, H, 16, D)).astype(np.float32) for _ in range(2))
        q2[0, 0, 0], k2[0, 0, 0], k2[0, 0, 1] = 0, 0, 0
        q2[0, 0, 0, 0] = k2[0, 0, 1, 0] = 2000
        cases.append((q2, k2))
    for qq, kk in cases:
        n = qq.shape[2]
        vv = v[:, :, :n]
        o = np.full(qq.shape, np.nan, np.float32)
        lse = np.full((Z * H, n), np.nan, np.float32)
        grid, args, kw = tfa_ex.launch_args(qq, kk, vv, o, lse, Z, H, n, D, causal)
        tfa_ex._attn_fwd[grid](*args, **kw)
        ro, rl = tfa_ex.reference(qq, kk, vv, causal)
        assert_close(o, ro, 1e-4, 1e-4)
        assert_close(lse, rl, 1e-5, 1e-5)


@pytest.mark.parametrize("shape", [(1, 1), (37, 300), (130, 1000)])
def test_triton_tutorial_layernorm(rng, shape):
    # Forward, and backward with its lock-guarded partial sums (130 rows over
    # 8 lock groups: every lock taken by ~16 programs).
    M, N = shape
    x = rng.standard_normal(shape).astype(np.float32)
    w, b = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    y, mean, rstd = (np.full(shape, np.nan, np.float32), np.full(M, np.nan, np.float32),
                     np.full(M, np.nan, np.float32))
    tln_ex._layer_norm_fwd_fused[(M,)](x, y, w, b, mean, rstd, N, N, 1e-5, BLOCK_SIZE=256)
    dx, dw, db = tln_ex.backward(dy, x, w, mean, rstd)
    ry, rdx, rdw, rdb = tln_ex.reference(x, w, b, dy)
    assert_close(y, ry, 1e-4, 1e-4)
    assert_close(dx, rdx, 1e-4, 1e-3)
    assert_close(dw, rdw, 1e-4, 1e-3 * np.sqrt(M))
    assert_close(db, rdb, 1e-4, 1e-3 * np.sqrt(M))


# Triton's low-memory dropout tutorial: the mask-tensor kernel, and the seeded
# one whose keep mask is kl.rand(seed, offsets) > p, exactly as NumPy's Philox
# (p = 0.5: x / 0.5 is exact on every target); another seed, another mask.
@pytest.mark.parametrize("n", [1, 1000, 4097])
def test_triton_dropout(rng, n):
    x = rng.standard_normal(n).astype(np.float32)
    keep = rng.random(n) > 0.3
    out = tdo_ex.dropout(x, keep, 0.3, block=256)
    assert_close(out, np.where(keep, x.astype(np.float64) / 0.7, 0), 1e-6, 0)
    for seed in (123, 2 ** 33 + 5):
        out = np.full(n, np.nan, np.float32)
        tdo_ex._seeded_dropout[(kiln.cdiv(n, 256),)](x, out, n, 0.5, seed, BLOCK_SIZE=256)
        assert np.array_equal(out, tdo_ex.reference(x, 0.5, seed))
    if n > 100:
        a = tdo_ex.seeded_dropout(x, 0.5, 123)
        assert not np.array_equal(a, tdo_ex.seeded_dropout(x, 0.5, 124))
        assert 0.4 < (a != 0).mean() < 0.6


# Block-scaled (MX) matmul with kl.dot_scaled: MXFP4 / MXFP8 operands made
# by the example's NumPy quantizer, against the float64 product of the same
# MX values, on ragged M and N; every pair of formats.
@pytest.mark.parametrize("fa,fb", [("e2m1", "e2m1"), ("e4m3", "e2m1"), ("e5m2", "e4m3"),
                                   ("e2m1", "e5m2")])
def test_mx_matmul(rng, fa, fb):
    M, N, K = 77, 45, 224   # (K a multiple of 32, not of the block's 64)
    x = rng.standard_normal((M, K)) * 3
    w = rng.standard_normal((K, N)) * 0.05
    ac, asc = mx_ex.quantize_mx(x, fa, 1)
    bc, bsc = mx_ex.quantize_mx(w, fb, 0)
    c = mx_ex.mx_matmul(ac, asc, fa, bc, bsc.T, fb, block=(32, 32, 64))
    assert_close(c, mx_ex.reference(ac, asc, fa, bc, bsc.T, fb), 1e-5, 1e-6)


# Triton's grouped GEMM tutorial: problems of ragged sizes found through
# tables of int64 addresses (kl.pointer_type), float16 in and out; every
# output poisoned first, programs striding over all groups' tiles.
def test_triton_grouped_gemm(rng):
    shapes = [(64, 80, 48), (100, 33, 70), (1, 129, 5), (128, 128, 128), (33, 1, 31)]
    As = [rng.standard_normal((m, k)).astype(np.float16) for m, n, k in shapes]
    Bs = [rng.standard_normal((k, n)).astype(np.float16) for m, n, k in shapes]
    Cs = [np.full((m, n), np.nan, np.float16) for m, n, k in shapes]
    grid, args, kw = tgg_ex.launch_args(As, Bs, Cs, num_sm=3, block=(32, 32, 32))
    tgg_ex.grouped_matmul_kernel[grid](*args, **kw)
    for a, b, c in zip(As, Bs, Cs):
        ref = a.astype(np.float64) @ b
        assert_close(c, ref, 1e-3, 1e-3 * np.abs(ref).max())


# FP8 GEMM with DeepSeek-V3-style block scales (1x128 activations, 128x128
# weights), float8e4nv tiles through kl.dot, on ragged M, N and K (K not a
# multiple of the 128 of a scale group: the last group is partial).
# Blocks of 64 rows put the dot on wgmma on emu-sm_90a, where the scaled
# accumulator is carried in the dot's registers (elementwiseCarry).
@pytest.mark.parametrize("shape", [(150, 300, 520), (1, 129, 128), (77, 64, 1000)])
@pytest.mark.parametrize("block", [(32, 64), (64, 64)])
def test_fp8_blockwise_matmul(rng, shape, block):
    M, N, K = shape
    ac, a_s = f8_ex.quantize_activations(rng.standard_normal((M, K)))
    wc, w_s = f8_ex.quantize_weights(rng.standard_normal((N, K)) * 0.02)
    c = np.full((M, N), np.nan, np.float32)
    grid, args, kw = f8_ex.launch_args(ac, a_s, wc, w_s, c, block)
    f8_ex.fp8_blockwise_matmul_kernel[grid](*args, **kw)
    ref = f8_ex.reference(ac, a_s, wc, w_s)
    assert_close(c, ref, 1e-5, 1e-6 * np.abs(ref).max())


# W4A16 (GPTQ-style int4 weights, group scales): ragged M, N and K (K not a
# multiple of 8: the last packed word is partly padding; not of the group
# either), float16 and bfloat16 activations. 64x64 blocks put the dot on
# wgmma on emu-sm_90a, mma.sync on emu-sm_80.
@pytest.mark.parametrize("shape", [(100, 130, 300), (1, 64, 129), (65, 200, 1000)])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("block", [(32, 64, 64), (64, 64, 64), (64, 128, 128)])
def test_w4a16_matmul(rng, shape, dtype, block):
    M, N, K = shape
    qw, s = w4_ex.quantize(rng.standard_normal((K, N)) * 0.05)
    x = rng.standard_normal((M, K))
    c = np.full((M, N), np.nan, np.float32)
    if dtype == "f16":
        a = x.astype(np.float16)
        ref = w4_ex.reference(a, qw, s)
        arg = a
    else:
        bits = to_bf16_bits(x)
        a = from_bf16_bits(bits).astype(np.float64)
        ref = w4_ex.reference(a, qw, s, round_weights=lambda w: from_bf16_bits(
            to_bf16_bits(w)).astype(np.float64))
        arg = kiln.bf16(bits)
    grid, args, kw = w4_ex.launch_args(arg, qw, s, c, block=block)
    w4_ex.w4a16_matmul_kernel[grid](*args, **kw)
    assert_close(c, ref, 1e-5, 1e-5 * (np.abs(a).astype(np.float64) @ np.abs(
        w4_ex.dequantize(qw, s, K))).max())


# W8A8 (int8 activations and weights, per-row and per-channel scales): the
# int32 sums must be exact, so the only error is the dequantization's float32
# rounding and the output's. Ragged M, N and K; 64x64 blocks put the dot on
# wgmma's s8 form on emu-sm_90a (K steps of 64 bytes by cp.async, of 128 by
# TMA into the 128B swizzle), mma.sync's s8 form on emu-sm_80; with w_kn the
# weights are W^T [K, N], copied transposed per K step on GPU targets; a
# 16-row block (decode-time M) is mma.sync's on sm_90a too (no wgmma tiling).
@pytest.mark.parametrize("shape", [(100, 130, 300), (1, 64, 129), (65, 200, 1000)])
@pytest.mark.parametrize("block", [(64, 64, 64), (64, 64, 128), (128, 64, 128), (16, 64, 64)])
@pytest.mark.parametrize("out", [np.float32, np.float16])
@pytest.mark.parametrize("w_kn", [False, True])
def test_w8a8_matmul(rng, shape, block, out, w_kn):
    M, N, K = shape
    a, sa = w8_ex.quantize(rng.standard_normal((M, K)))
    w, sw = w8_ex.quantize(rng.standard_normal((N, K)) * 0.05)
    # Every code, the extremes included, in A's first row.
    a[0, :min(K, 256)] = np.arange(-128, 128, dtype=np.int64)[:min(K, 256)].astype(np.int8)
    c = np.full((M, N), np.nan, out)
    wa = np.ascontiguousarray(w.T) if w_kn else w
    grid, args, kw = w8_ex.launch_args(a, sa, wa, sw, c, block=block, w_kn=w_kn)
    w8_ex.w8a8_matmul_kernel[grid](*args, **kw)
    ref = w8_ex.reference(a, sa, w, sw)
    eps = 1e-6 if out == np.float32 else 1e-3
    assert_close(c, ref, eps, eps * np.abs(ref).max())
