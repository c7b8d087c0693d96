"""TMA on sm_90a, run by the SIMT emulator (emu-sm_90a runs on any x86-64
host, so this file runs in every pytest suite).

Pipelined loads of views made before their loop load by TMA when the view
allows it at run time (16-byte aligned base and row strides), else by
cp.async: each GEMM runs at sizes of both kinds, with ragged edges (TMA's
zero fill), loops long enough for the mbarrier parity to wrap, 2 to 4
stages, one and two warpgroups, bf16 tiles in wgmma's core-matrix layout
(a TMA box per 8-column chunk) and f32 tiles in plain row-major buffers (one
box). The emulator checks the protocol (tensor-map release/acquire,
mbarrier phases, no read before the wait, no TMA into a stage still being
read) and aborts on a violation. Outputs are poisoned; references are
float64."""
import os
import re

import numpy as np
import pytest

import kiln
import kiln.language as kl
from conftest import assert_close, from_bf16_bits, to_bf16_bits


@pytest.fixture(autouse=True)
def emulated_sm90a(monkeypatch):
    monkeypatch.setenv("KILN_TARGET", "emu-sm_90a")


@kiln.jit
def gemm(a, b, c, m, n, k, BM: kl.constexpr, BN: kl.constexpr, BK: kl.constexpr):
    pid_n = kl.program_id(0)
    pid_m = kl.program_id(1)
    va = kl.make_view(a, (m, k), (k, 1))
    vb = kl.make_view(b, (k, n), (n, 1))
    vc = kl.make_view(c, (m, n), (n, 1))
    acc = kl.zeros((BM, BN), kl.float32)
    for kk in range(0, k, BK):
        ta = kl.load(va, offsets=(pid_m * BM, kk), shape=(BM, BK))
        tb = kl.load(vb, offsets=(kk, pid_n * BN), shape=(BK, BN))
        acc = kl.dot(ta, tb, acc)
    kl.store(vc, acc, offsets=(pid_m * BM, pid_n * BN))




def run(rng, dtype, m, n, k, bm, bn, bk, **launch):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    if dtype == "bf16":
        abits, bbits = to_bf16_bits(a), to_bf16_bits(b)
        a, b = from_bf16_bits(abits), from_bf16_bits(bbits)
        args = (kiln.bf16(abits), kiln.bf16(bbits))
    else:
        args = (a, b)
    c = np.full((m, n), np.nan, np.float32)
    grid = (kiln.cdiv(n, bn), kiln.cdiv(m, bm))
    gemm[grid](*args, c, m, n, k, BM=bm, BN=bn, BK=bk, **launch)
    assert_close(c, a.astype(np.float64) @ b, 1e-4, 1e-4 * np.sqrt(k))


# (m, n, k): rows of a (k elements) and b (n) 16-byte multiples -> TMA;
# otherwise the same loop falls back to cp.async.
BF16_TMA = [(100, 72, 200), (64, 64, 512), (129, 136, 48)]
BF16_FALLBACK = [(70, 65, 131), (64, 64, 250)]


@pytest.mark.parametrize("mnk", BF16_TMA + BF16_FALLBACK)
@pytest.mark.parametrize("stages", [2, 3])
def test_bf16_gemm_wgmma_operands(rng, mnk, stages):
    run(rng, "bf16", *mnk, 64, 64, 32, num_warps=4, num_stages=stages)


@pytest.mark.parametrize("mnk", [(130, 72, 200), (128, 70, 99)])
def test_bf16_gemm_two_warpgroups_four_stages(rng, mnk):
    run(rng, "bf16", *mnk, 128, 64, 16, num_warps=8, num_stages=4)


# At 3 and 4 stages the dot's wgmma groups stay in flight into the next
# iteration (wait_group 1) and the last iteration retires them itself: loops
# of no iteration (k = 0: zeros), one, two, and a partial one.
@pytest.mark.parametrize("k", [0, 16, 32, 40])
@pytest.mark.parametrize("stages", [3, 4])
def test_bf16_gemm_short_loops_in_flight(rng, k, stages):
    run(rng, "bf16", 72, 80, k, 64, 64, 16, num_warps=4, num_stages=stages)
    assert "@kiln_emu_wgmma_wait(i32 1)" in gemm.ir("llvm")


# Tiles whose rows are whole 128-byte lines (64 bf16 columns) are stages in
# the 128B swizzle: A [BM, 64], B [64, BN] N-major when each warpgroup's N
# block is whole 64-column slabs (64 x 128 at 4 warps: one warpgroup reads
# two slabs, LBO apart; at 8 warps each its own), B [BN, 64] K-major through
# a transpose.
# TMA writes them (one 2-d box per slab), and so do cp.async (16-byte
# chunks, when TMA is off or the view does not allow it) and the
# per-element edge path (unaligned rows). The emulator applies the swizzle
# to the boxes and to wgmma's reads by address bits.
@kiln.jit
def gemm_bt(a, b, c, m, n, k, BM: kl.constexpr, BN: kl.constexpr, BK: kl.constexpr):
    pid_n = kl.program_id(0)
    pid_m = kl.program_id(1)
    va = kl.make_view(a, (m, k), (k, 1))
    vb = kl.make_view(b, (n, k), (k, 1))
    vc = kl.make_view(c, (m, n), (n, 1))
    acc = kl.zeros((BM, BN), kl.float32)
    for kk in range(0, k, BK):
        ta = kl.load(va, offsets=(pid_m * BM, kk), shape=(BM, BK))
        tb = kl.load(vb, offsets=(pid_n * BN, kk), shape=(BN, BK))
        acc = kl.dot(ta, kl.trans(tb), acc)
    kl.store(vc, acc, offsets=(pid_m * BM, pid_n * BN))


def sm90a_ptx(fn, warps, stages, stage="asm"):
    from kiln._kiln import compile_stage
    ck = fn.last
    return compile_stage(ck.kiln_ir, ck.filename, stage, "sm_90a", warps, stages)


@pytest.mark.parametrize("mnk", BF16_TMA + BF16_FALLBACK)
@pytest.mark.parametrize("tile", [(64, 64, 64, 4), (64, 128, 64, 4), (64, 128, 64, 8),
                                  (128, 64, 64, 8)],
                         ids=lambda t: "x".join(map(str, t)))
def test_bf16_gemm_swizzled_stages(rng, mnk, tile):
    bm, bn, bk, warps = tile
    run(rng, "bf16", *mnk, bm, bn, bk, num_warps=warps, num_stages=3)
    assert swizzled_boxes(gemm, warps, 3) >= 2


@pytest.mark.parametrize("mnk", [(100, 72, 200), (70, 65, 131)])
@pytest.mark.parametrize("stages", [2, 3])
def test_bf16_gemm_swizzled_without_tma(rng, monkeypatch, mnk, stages):
    monkeypatch.setenv("KILN_TMA", "0")
    run(rng, "bf16", *mnk, 64, 64, 64, num_warps=4, num_stages=stages)


@pytest.mark.parametrize("mnk", BF16_TMA + BF16_FALLBACK)
def test_bf16_gemm_transposed_b_swizzled(rng, mnk):
    m, n, k = mnk
    abits = to_bf16_bits(rng.standard_normal((m, k)).astype(np.float32))
    bbits = to_bf16_bits(rng.standard_normal((n, k)).astype(np.float32))
    a, b = from_bf16_bits(abits), from_bf16_bits(bbits)
    c = np.full((m, n), np.nan, np.float32)
    gemm_bt[(kiln.cdiv(n, 64), kiln.cdiv(m, 64))](kiln.bf16(abits), kiln.bf16(bbits), c,
                                                  m, n, k, BM=64, BN=64, BK=64,
                                                  num_warps=4, num_stages=3)
    assert_close(c, a.astype(np.float64) @ b.T, 1e-4, 1e-4 * np.sqrt(k))
    assert swizzled_boxes(gemm_bt, 4, 3) >= 2


def swizzled_boxes(fn, warps, stages):
    """The 2-d boxes of a kernel whose tensor maps take the 128B swizzle:
    maps the runtime encodes ("swizzled" tensor_map lines, the default) or,
    with KILN_TMA_MAPS=device, maps built with swizzle mode 3."""
    ptx = sm90a_ptx(fn, warps, stages)
    if os.environ.get("KILN_TMA_MAPS") == "device":
        assert re.search(r"swizzle_mode\.shared::cta\.b1024\.b32\s+\[[^]]+\], 3;", ptx)
    else:
        assert "tensormap.replace" not in ptx
        assert re.search(r'kiln\.tensor_maps\.\w+ = \[[^]]*"swizzled 2 ',
                         sm90a_ptx(fn, warps, stages, "mlir"))
    return ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global")


def test_device_built_maps_compute_the_same(rng, monkeypatch):
    # KILN_TMA_MAPS=device: every program builds its maps (tensormap.replace
    # in shared memory, copied to the scratch, released and acquired), the
    # path before the runtime encoded them; part of the specialization key.
    monkeypatch.setenv("KILN_TMA_MAPS", "device")
    run(rng, "bf16", 100, 72, 200, 64, 64, 64, num_warps=4, num_stages=3)
    assert swizzled_boxes(gemm, 4, 3) >= 2
    ptx = sm90a_ptx(gemm, 4, 3)
    assert "fence.proxy.tensormap::generic.release.gpu" in ptx
    assert ".param .align 64 .b8" not in ptx


def test_kiln_swizzle_0_keeps_core_tiles(rng, monkeypatch):
    # The escape hatch: KILN_SWIZZLE=0 lays the same stages out as core
    # matrices (3-d boxes), and is part of the specialization key.
    run(rng, "bf16", 100, 72, 200, 64, 64, 64, num_warps=4, num_stages=2)
    assert "cp.async.bulk.tensor.2d.shared::cluster.global" in sm90a_ptx(gemm, 4, 2)
    monkeypatch.setenv("KILN_SWIZZLE", "0")
    run(rng, "bf16", 100, 72, 200, 64, 64, 64, num_warps=4, num_stages=2)
    ptx = sm90a_ptx(gemm, 4, 2)
    assert "cp.async.bulk.tensor.2d.shared::cluster.global" not in ptx
    assert "cp.async.bulk.tensor.3d.shared::cluster.global" in ptx


# f32: plain row-major stage buffers, one box per tile (rows of 32 f32).
@pytest.mark.parametrize("mnk", [(50, 36, 100), (33, 68, 260), (50, 35, 99)])
def test_f32_gemm_plain_tiles(rng, mnk):
    run(rng, "f32", *mnk, 32, 32, 32, num_warps=4, num_stages=2)


def test_misaligned_base_falls_back(rng):
    # A view whose base is 2 bytes off a 16-byte boundary cannot be a tensor
    # map: the kernel takes cp.async for it, with the same results.
    m, n, k = 64, 64, 64
    a = rng.standard_normal((m, k + 1)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    abits = to_bf16_bits(a).ravel()[1:1 + m * k]
    a = from_bf16_bits(abits).reshape(m, k)
    bbits = to_bf16_bits(b)
    b = from_bf16_bits(bbits)
    c = np.full((m, n), np.nan, np.float32)
    gemm[(1, 1)](kiln.bf16(abits), kiln.bf16(bbits), c, m, n, k, BM=64, BN=64, BK=32)
    assert_close(c, a.astype(np.float64) @ b, 1e-4, 1e-4 * np.sqrt(k))


@kiln.jit
def gemm_shifted(a, b, c, m, n, k, s, BM: kl.constexpr, BN: kl.constexpr, BK: kl.constexpr):
    # C = A[:, s:s + k] @ B, A with k + s columns: A's boxes start at column
    # kk + s.
    pid_n = kl.program_id(0)
    pid_m = kl.program_id(1)
    va = kl.make_view(a, (m, k + s), (k + s, 1))
    vb = kl.make_view(b, (k, n), (n, 1))
    vc = kl.make_view(c, (m, n), (n, 1))
    acc = kl.zeros((BM, BN), kl.float32)
    for kk in range(0, k, BK):
        ta = kl.load(va, offsets=(pid_m * BM, kk + s), shape=(BM, BK))
        tb = kl.load(vb, offsets=(kk, pid_n * BN), shape=(BK, BN))
        acc = kl.dot(ta, tb, acc)
    kl.store(vc, acc, offsets=(pid_m * BM, pid_n * BN))


@pytest.mark.parametrize("s", [3, 8])
def test_column_offsets_off_a_chunk_take_cp_async(rng, s):
    # A core-matrix tile's box starts on an 8-column chunk: with s = 3 every
    # fill of A takes cp.async (while B's still go by TMA and arm the same
    # mbarriers), with s = 8 both go by TMA (k + s = 96: A rows of 192 bytes).
    m, n, k = 70, 64, 96 - s
    a = rng.standard_normal((m, k + s)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    abits, bbits = to_bf16_bits(a), to_bf16_bits(b)
    a, b = from_bf16_bits(abits), from_bf16_bits(bbits)
    c = np.full((m, n), np.nan, np.float32)
    gemm_shifted[(1, 2)](kiln.bf16(abits), kiln.bf16(bbits), c, m, n, k, s, BM=64, BN=64, BK=32)
    assert_close(c, a[:, s:s + k].astype(np.float64) @ b, 1e-4, 1e-4 * np.sqrt(k))


def test_kiln_tma_0_compiles_cp_async_loads(rng, monkeypatch):
    # The escape hatch: KILN_TMA=0 compiles pipelined loads with cp.async
    # (same results); by default the same kernel has TMA loads. The same
    # shapes both times: $KILN_TMA is part of the specialization key.
    run(rng, "f32", 64, 48, 80, 32, 16, 16, num_warps=4, num_stages=2)
    assert "kiln_emu_tma_load" in gemm.last.ir("llvm")
    monkeypatch.setenv("KILN_TMA", "0")
    run(rng, "f32", 64, 48, 80, 32, 16, 16, num_warps=4, num_stages=2)
    assert "kiln_emu_tma_load" not in gemm.last.ir("llvm")
    assert "kiln_emu_cp_async" in gemm.last.ir("llvm")


# Triton-style pointers with a batch and head offset no index owns
# (`Q + off_z * stride_qz + off_h * stride_qh + rows[:, None] * stride_qm +
# cols[None, :]`): each term is a view dimension of its own (stride_qz at
# off_z, stride_qh at off_h), so the view is the same in every program and
# its loads take TMA (maps encoded at launch), as the library's attention
# does. Before, one flat first dimension of stride 1 carried the whole
# offset, which a tensor map cannot take.

@kiln.jit
def triton_attention(Q, K, V, Out, sm_scale, stride_qz, stride_qh, stride_qm, H, N_CTX,
                     BLOCK_M: kl.constexpr, BLOCK_N: kl.constexpr, D: kl.constexpr):
    start_m = kl.program_id(0)
    off_hz = kl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    qvk_offset = off_z.to(kl.int64) * stride_qz + off_h.to(kl.int64) * stride_qh
    offs_m = start_m * BLOCK_M + kl.arange(0, BLOCK_M)
    offs_n = kl.arange(0, BLOCK_N)
    offs_d = kl.arange(0, D)
    q = kl.load(Q + qvk_offset + offs_m[:, None] * stride_qm + offs_d[None, :],
                mask=offs_m[:, None] < N_CTX)
    m_i = kl.zeros((BLOCK_M,), kl.float32) - float("inf")
    l_i = kl.zeros((BLOCK_M,), kl.float32)
    acc = kl.zeros((BLOCK_M, D), kl.float32)
    for start_n in range(0, N_CTX, BLOCK_N):
        kn = start_n + offs_n
        k = kl.load(K + qvk_offset + kn[:, None] * stride_qm + offs_d[None, :],
                    mask=kn[:, None] < N_CTX)
        v = kl.load(V + qvk_offset + kn[:, None] * stride_qm + offs_d[None, :],
                    mask=kn[:, None] < N_CTX)
        qk = kl.dot(q, kl.trans(k)) * sm_scale
        qk = kl.where(kn[None, :] < N_CTX, qk, float("-inf"))
        m_ij = kl.maximum(m_i, kl.max(qk, 1))
        p = kl.exp(qk - m_ij[:, None])
        alpha = kl.exp(m_i - m_ij)
        l_i = l_i * alpha + kl.sum(p, 1)
        acc = acc * alpha[:, None] + kl.dot(p.to(v.dtype), v)
        m_i = m_ij
    kl.store(Out + qvk_offset + offs_m[:, None] * stride_qm + offs_d[None, :],
             acc / l_i[:, None], mask=offs_m[:, None] < N_CTX)


@pytest.mark.parametrize("batch_pad", [0, 3])
def test_triton_attention_batch_head_offsets_take_tma(rng, batch_pad):
    # batch_pad 3: a batch stride of 3 elements more than H * N * D, so not a
    # multiple of 16 bytes: the maps are refused at launch and the same
    # kernel loads by cp.async, with the same results.
    Z, H, N, D = 2, 3, 77, 64
    zs = H * N * D + batch_pad

    def make():
        x = rng.standard_normal(Z * zs).astype(np.float32)
        bits = to_bf16_bits(x)
        return bits, from_bf16_bits(bits)

    (qb, qf), (kb, kf), (vb, vf) = make(), make(), make()
    o = np.full(Z * zs, np.nan, np.float32)

    def heads(x):
        return np.stack([x[z * zs:z * zs + H * N * D].reshape(H, N, D)
                         for z in range(Z)]).astype(np.float64)

    triton_attention[(kiln.cdiv(N, 64), Z * H)](
        kiln.bf16(qb), kiln.bf16(kb), kiln.bf16(vb), o, 0.125, zs, N * D, D, H, N,
        BLOCK_M=64, BLOCK_N=64, D=D, num_warps=4)
    q, k, v = heads(qf), heads(kf), heads(vf)
    s = np.einsum("zhmd,zhnd->zhmn", q, k) * 0.125
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = np.einsum("zhmn,zhnd->zhmd", p / p.sum(-1, keepdims=True), v)
    assert_close(heads(o), ref, 2e-2, 2e-2)
    if batch_pad:  # the padding between batches stays unwritten
        assert np.isnan(o[H * N * D:zs]).all()
    ir = triton_attention.last.ir("kiln")
    assert "kiln.gather" not in ir and "!kiln.view<4xbf16>" in ir
    assert "kiln_emu_tma_load" in triton_attention.last.ir("llvm")


@kiln.jit
def block_ptr_batched_matmul(a, b, c, M, N, K, stride_ab, stride_cb,
                             BM: kl.constexpr, BN: kl.constexpr, BK: kl.constexpr):
    # Block pointers over a batch offset (`a + pid_b * stride_ab`): the
    # offset is a view dimension of its own too.
    pid_b = kl.program_id(2)
    a_bp = kl.make_block_ptr(a + pid_b * stride_ab, (M, K), (K, 1),
                             (kl.program_id(1) * BM, 0), (BM, BK), (1, 0))
    b_bp = kl.make_block_ptr(b, (K, N), (N, 1), (0, kl.program_id(0) * BN), (BK, BN), (1, 0))
    acc = kl.zeros((BM, BN), kl.float32)
    for k in range(0, K, BK):
        acc = kl.dot(kl.load(a_bp, boundary_check=(0, 1)), kl.load(b_bp, boundary_check=(0, 1)),
                     acc)
        a_bp = kl.advance(a_bp, (0, BK))
        b_bp = kl.advance(b_bp, (BK, 0))
    c_bp = kl.make_block_ptr(c + pid_b * stride_cb, (M, N), (N, 1),
                             (kl.program_id(1) * BM, kl.program_id(0) * BN), (BM, BN), (1, 0))
    kl.store(c_bp, acc, boundary_check=(0, 1))


def test_block_pointer_batch_offset_takes_tma(rng):
    B, M, N, K = 3, 70, 72, 96
    a = rng.standard_normal((B, M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    abits, bbits = to_bf16_bits(a), to_bf16_bits(b)
    a, b = from_bf16_bits(abits), from_bf16_bits(bbits)
    c = np.full((B, M, N), np.nan, np.float32)
    block_ptr_batched_matmul[(kiln.cdiv(N, 64), kiln.cdiv(M, 64), B)](
        kiln.bf16(abits), kiln.bf16(bbits), c, M, N, K, M * K, M * N, BM=64, BN=64, BK=32)
    assert_close(c, a.astype(np.float64) @ b, 1e-4, 1e-4 * np.sqrt(K))
    ll = block_ptr_batched_matmul.last.ir("llvm")
    assert "kiln_emu_tma_load" in ll and "kiln_emu_tma_store" in ll


# Triton's tutorial matmul as it is written upstream: grouped program
# ordering with `kl.assume(pid_m >= 0)` (what the tutorial asserts for its
# integer analysis), pointers advanced by `a_ptrs += BLOCK_SIZE_K *
# stride_ak` and masks against the remaining K (`offs_k < K - k *
# BLOCK_SIZE_K`). The front end sees that the shift moves the K index by
# k * BLOCK_SIZE_K, so the loads are views of (M, K) and (K, N) at the
# moving index, the same in every iteration: pipelined, and TMA copies with
# maps encoded at launch. Before, a flat first dimension carried the shift
# (cp.async only).

@kiln.jit
def tutorial_gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, STYLE: kl.constexpr, BLOCK_SIZE_M: kl.constexpr,
                  BLOCK_SIZE_N: kl.constexpr, BLOCK_SIZE_K: kl.constexpr,
                  GROUP_SIZE_M: kl.constexpr):
    pid = kl.program_id(axis=0)
    num_pid_m = kl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = kl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    kl.assume(pid_m >= 0)
    kl.assume(pid_n >= 0)
    kl.assume((stride_am > 0) & (stride_ak > 0))
    offs_am = pid_m * BLOCK_SIZE_M + kl.arange(0, BLOCK_SIZE_M)
    offs_bn = pid_n * BLOCK_SIZE_N + kl.arange(0, BLOCK_SIZE_N)
    offs_k = kl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = kl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=kl.float32)
    if STYLE == 0:
        for k in range(0, kl.cdiv(K, BLOCK_SIZE_K)):
            a = kl.load(a_ptrs, mask=(offs_am[:, None] < M) &
                        (offs_k[None, :] < K - k * BLOCK_SIZE_K), other=0.0)
            b = kl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_SIZE_K) &
                        (offs_bn[None, :] < N), other=0.0)
            accumulator = kl.dot(a, b, accumulator)
            a_ptrs += BLOCK_SIZE_K * stride_ak
            b_ptrs += BLOCK_SIZE_K * stride_bk
    else:
        # The other common spelling: k counts elements, `p = p + step`.
        for k in range(0, K, BLOCK_SIZE_K):
            a = kl.load(a_ptrs, mask=(offs_am[:, None] < M) & (offs_k[None, :] < K - k),
                        other=0.0)
            b = kl.load(b_ptrs, mask=(offs_k[:, None] < K - k) & (offs_bn[None, :] < N),
                        other=0.0)
            accumulator = kl.dot(a, b, accumulator)
            a_ptrs = a_ptrs + BLOCK_SIZE_K * stride_ak
            b_ptrs = b_ptrs + BLOCK_SIZE_K * stride_bk
    offs_cm = pid_m * BLOCK_SIZE_M + kl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + kl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    kl.store(c_ptrs, accumulator, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


@pytest.mark.parametrize("style", [0, 1])
@pytest.mark.parametrize("mnk", [(130, 72, 200), (70, 65, 131)])
def test_triton_tutorial_matmul_takes_tma(rng, style, mnk):
    # (70, 65, 131): rows of 131 and 65 bf16 elements are not 16-byte
    # multiples, so the maps are refused at launch: cp.async, same results.
    M, N, K = mnk
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    abits, bbits = to_bf16_bits(a), to_bf16_bits(b)
    a, b = from_bf16_bits(abits), from_bf16_bits(bbits)
    c = np.full((M, N), np.nan, np.float32)
    grid = (kiln.cdiv(M, 64) * kiln.cdiv(N, 64),)
    tutorial_gemm[grid](kiln.bf16(abits), kiln.bf16(bbits), c, M, N, K, K, 1, N, 1, N, 1,
                        STYLE=style, BLOCK_SIZE_M=64, BLOCK_SIZE_N=64, BLOCK_SIZE_K=64,
                        GROUP_SIZE_M=2, num_stages=3)
    assert_close(c, a.astype(np.float64) @ b, 1e-4, 1e-4 * np.sqrt(K))
    ir = tutorial_gemm.last.ir("kiln")
    # Views of the arrays' own rank: no flat dimension, no gather.
    assert "kiln.gather" not in ir and "!kiln.view<3x" not in ir
    assert "kiln_emu_tma_load" in tutorial_gemm.last.ir("llvm")


# Triton's tensor descriptors (`kl.make_tensor_descriptor`, `desc.load([m,
# k])`): a view and a block, so TMA as with kl.make_view, maps encoded at
# launch. The 3-d one (heads as the first dimension) bounds each head's rows.

@kiln.jit
def desc_gemm(a, b, c, M, N, K, BM: kl.constexpr, BN: kl.constexpr, BK: kl.constexpr):
    da = kl.make_tensor_descriptor(a, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    db = kl.make_tensor_descriptor(b, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    dc = kl.make_tensor_descriptor(c, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    pm = kl.program_id(1) * BM
    pn = kl.program_id(0) * BN
    acc = kl.zeros((BM, BN), kl.float32)
    for k in range(0, K, BK):
        acc = kl.dot(da.load([pm, k]), kl.load_tensor_descriptor(db, [k, pn]), acc)
    dc.store([pm, pn], acc)


@kiln.jit
def desc_head_scale(x, o, HS, S, D: kl.constexpr, BS: kl.constexpr):
    dx = kl.make_tensor_descriptor(x, [HS, S, D], [S * D, D, 1], [1, BS, D])
    do = kl.make_tensor_descriptor(o, [HS, S, D], [S * D, D, 1], [1, BS, D])
    h = kl.program_id(1)
    s0 = kl.program_id(0) * BS
    t = dx.load([h, s0, 0])
    kl.store_tensor_descriptor(do, [h, s0, 0], t * 2.0)


def test_tensor_descriptors(rng):
    M, N, K = 100, 72, 200
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    abits, bbits = to_bf16_bits(a), to_bf16_bits(b)
    a, b = from_bf16_bits(abits), from_bf16_bits(bbits)
    c = np.full((M, N), np.nan, np.float32)
    desc_gemm[(kiln.cdiv(N, 64), kiln.cdiv(M, 64))](kiln.bf16(abits), kiln.bf16(bbits), c, M, N,
                                                    K, BM=64, BN=64, BK=64)
    assert_close(c, a.astype(np.float64) @ b, 1e-4, 1e-4 * np.sqrt(K))
    ll = desc_gemm.last.ir("llvm")
    assert "kiln_emu_tma_load" in ll and "kiln_emu_tma_store" in ll

    HS, S, D = 3, 50, 32
    x = rng.standard_normal((HS, S, D)).astype(np.float32)
    o = np.full_like(x, np.nan)
    desc_head_scale[(kiln.cdiv(S, 16), HS)](x, o, HS, S, D=D, BS=16)
    assert_close(o, 2.0 * x.astype(np.float64), 0, 0)


# A key block read transposed through pointers (`K + offs_d[:, None] +
# offs_n[None, :] * stride`: the unit stride on the first dimension): the
# view takes that dimension last and a transpose feeds the dot, so the loads
# are rows (TMA boxes) and the dot's B operand K-major, as the library's
# attention reads keys. Before, the tile's last dimension had stride
# `stride`, which a tensor map cannot take (unit innermost stride).

@kiln.jit
def transposed_key_scores(Q, K, O, N, stride_n, D: kl.constexpr, BM: kl.constexpr,
                          BN: kl.constexpr):
    offs_m = kl.program_id(0) * BM + kl.arange(0, BM)
    offs_d = kl.arange(0, D)
    q = kl.load(Q + offs_m[:, None] * stride_n + offs_d[None, :], mask=offs_m[:, None] < N)
    acc = kl.zeros((BM, D), kl.float32)
    for start in kl.range(0, N, BN, num_stages=3, loop_unroll_factor=1):
        offs_n = start + kl.arange(0, BN)
        kt = kl.load(K + offs_d[:, None] + offs_n[None, :] * stride_n, mask=offs_n[None, :] < N)
        s = kl.dot(q, kt)
        v = kl.load(K + offs_n[:, None] * stride_n + offs_d[None, :], mask=offs_n[:, None] < N)
        acc = kl.dot(s.to(v.dtype), v, acc)
    kl.store(O + offs_m[:, None] * D + offs_d[None, :], acc, mask=offs_m[:, None] < N)


def test_transposed_pointer_loads_read_rows(rng):
    N, D = 150, 64
    qb, kb = (to_bf16_bits(rng.standard_normal((N, D)).astype(np.float32) * 0.1)
              for _ in range(2))
    q, k = from_bf16_bits(qb).astype(np.float64), from_bf16_bits(kb).astype(np.float64)
    o = np.full((N, D), np.nan, np.float32)
    transposed_key_scores[(kiln.cdiv(N, 64),)](kiln.bf16(qb), kiln.bf16(kb), o, N, D, D=D,
                                               BM=64, BN=64)
    s = from_bf16_bits(to_bf16_bits((q @ k.T).astype(np.float32))).astype(np.float64)
    assert_close(o, s @ k, 1e-2, 1e-3)
    ir = transposed_key_scores.last.ir("kiln")
    assert "kiln.gather" not in ir and "kiln.trans" in ir
    assert "kiln_emu_tma_load" in transposed_key_scores.last.ir("llvm")


@kiln.jit
def desc_arg_gemm(a_desc, b_desc, c_desc, K, BM: kl.constexpr, BN: kl.constexpr,
                  BK: kl.constexpr):
    pm = kl.program_id(1) * BM
    pn = kl.program_id(0) * BN
    acc = kl.zeros((BM, BN), kl.float32)
    for k in range(0, K, BK):
        acc = kl.dot(a_desc.load([pm, k]), b_desc.load([k, pn]), acc)
    c_desc.store([pm, pn], acc)


def test_tensor_descriptor_arguments_take_tma(rng):
    # kiln.TensorDescriptor arguments (Triton's host-side descriptors): maps
    # encoded at launch from the passed sizes and strides.
    M, N, K = 100, 72, 200
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    abits, bbits = to_bf16_bits(a), to_bf16_bits(b)
    a, b = from_bf16_bits(abits), from_bf16_bits(bbits)
    c = np.full((M, N), np.nan, np.float32)
    TD = kiln.TensorDescriptor
    desc_arg_gemm[(kiln.cdiv(N, 64), kiln.cdiv(M, 64))](
        TD.from_tensor(kiln.bf16(abits), [64, 64]), TD.from_tensor(kiln.bf16(bbits), [64, 64]),
        TD.from_tensor(c, [64, 64]), K, BM=64, BN=64, BK=64)
    assert_close(c, a.astype(np.float64) @ b, 1e-4, 1e-4 * np.sqrt(K))
    ll = desc_arg_gemm.last.ir("llvm")
    assert "kiln_emu_tma_load" in ll and "kiln_emu_tma_store" in ll
