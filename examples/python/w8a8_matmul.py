"""W8A8 GEMM: int8 activations and weights, as SmoothQuant-style
quantization ships them: A [M, K] int8 with one scale per row (token), W
[N, K] int8 in a linear layer's layout with one scale per row (output
channel). The products are summed exactly in int32 (`kl.dot` of two int8
tiles into an int32 accumulator; exact for K up to 131071, where 128 * 128 *
K fits, so `launch_args` refuses longer K), then dequantized once:
C[m, n] = (sum_k A[m, k] W[n, k]) a_scale[m] w_scale[n], stored as C's
type (float16 or float32).

W's rows are transposed for the dot (`kl.dot(x, kl.trans(w))`), so both
operands are K-major: on sm_90a that is wgmma's s8 form
(`wgmma.mma_async...k32.s32.s8.s8`) on the bytes where TMA puts them, at
twice bf16's tensor-core rate and half its operand bytes; on sm_80 / sm_90
`mma.sync.m16n8k32.s8`. With W_KN the weights are stored transposed, W^T
[K, N] in rows of N, and each K step's tile is copied transposed in shared
memory first (neither instruction reads bytes N-major). The CPU sums the
products in int32.

`quantize` makes (codes, scales) from float rows in NumPy (symmetric, the
largest magnitude of a row maps to 127) and `reference` is the float64
product."""
import numpy as np

import kiln
import kiln.language as kl


@kiln.jit
def w8a8_matmul_kernel(a, a_scale, w, w_scale, c, M, N, K, BM: kl.constexpr, BN: kl.constexpr,
                       BK: kl.constexpr, W_KN: kl.constexpr):
    pid_m, pid_n = kl.program_id(0), kl.program_id(1)
    rm = pid_m * BM + kl.arange(0, BM)
    rn = pid_n * BN + kl.arange(0, BN)
    rk = kl.arange(0, BK)
    acc = kl.zeros((BM, BN), dtype=kl.int32)
    for k0 in range(0, K, BK):
        x = kl.load(a + rm[:, None] * K + (k0 + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0)
        if W_KN:
            wt = kl.load(w + (k0 + rk)[:, None] * N + rn[None, :],
                         mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0)
            acc = kl.dot(x, wt, acc)
        else:
            wk = kl.load(w + rn[:, None] * K + (k0 + rk)[None, :],
                         mask=(rn[:, None] < N) & ((k0 + rk)[None, :] < K), other=0)
            acc = kl.dot(x, kl.trans(wk), acc)
    sa = kl.load(a_scale + rm, mask=rm < M, other=0.0)
    sw = kl.load(w_scale + rn, mask=rn < N, other=0.0)
    out = acc.to(kl.float32) * sa[:, None] * sw[None, :]
    kl.store(c + rm[:, None] * N + rn[None, :], out.to(c.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def quantize(x):
    """x [R, K] float -> (codes [R, K] int8, scales [R] float32): symmetric
    per row, the largest magnitude of each row maps to 127."""
    s = (np.maximum(np.abs(x).max(1), 1e-8) / 127).astype(np.float32)
    q = np.clip(np.round(x / s.astype(np.float64)[:, None]), -127, 127).astype(np.int8)
    return q, s


def reference(a, a_scale, w, w_scale):
    """float64 (A Wᵀ) a_scale[:, None] w_scale[None, :]."""
    acc = a.astype(np.int64) @ w.astype(np.int64).T
    return acc * a_scale.astype(np.float64)[:, None] * w_scale.astype(np.float64)[None, :]


def launch_args(a, a_scale, w, w_scale, c, block=(128, 128, 128), w_kn=False):
    """(grid, args, constexpr kwargs) of w8a8_matmul_kernel for A [M, K] and
    W [N, K] (or, with `w_kn`, W^T [K, N]; NumPy int8 arrays or device
    tensors), C [M, N]."""
    M, K = a.shape
    if K > 131071:
        raise ValueError(f"w8a8_matmul: K = {K} could overflow the int32 sums (at most 131071)")
    N = w.shape[1] if w_kn else w.shape[0]
    bm, bn, bk = block
    return ((kiln.cdiv(M, bm), kiln.cdiv(N, bn)), (a, a_scale, w, w_scale, c, M, N, K),
            dict(BM=bm, BN=bn, BK=bk, W_KN=w_kn))


def w8a8_matmul(a, a_scale, w, w_scale, out_dtype=np.float16, block=(128, 128, 128)):
    """C = dequant(A Wᵀ) for NumPy int8 A [M, K], W [N, K]."""
    c = np.empty((a.shape[0], w.shape[0]), out_dtype)
    grid, args, kw = launch_args(a, a_scale, w, w_scale, c, block)
    w8a8_matmul_kernel[grid](*args, **kw)
    return c


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    M, N, K = 100, 300, 1000
    a, sa = quantize(rng.standard_normal((M, K)))
    w, sw = quantize(rng.standard_normal((N, K)) * 0.05)
    c = w8a8_matmul(a, sa, w, sw, np.float32)
    ref = reference(a, sa, w, sw)
    print(f"W8A8 GEMM {M}x{N}x{K}: max |error| {np.abs(c - ref).max():.3g} "
          f"(max |C| {np.abs(ref).max():.3g})")
