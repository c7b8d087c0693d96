"""W4A16 GEMM: int4 weights as GPTQ stores them, float16 / bfloat16
activations. The weights W [K, N] are packed eight to an int32 along K
(`qweight[k // 8, n]` holds W[k, n] in bits 4 (k % 8) to 4 (k % 8) + 3, an
unsigned code q in [0, 15]), with one scale per group of G rows of K and
column (`scales[k // G, n]`) and a zero point of 8: W[k, n] = (q - 8) s.
C = A @ W in float32.

Each K step loads the packed words once ([BK / 8, BN] int32) and reads each
word's eight nibbles by index (a reshape that merges a broadcast's
dimensions stays deferred, as `kl.dot_scaled`'s fp4 does): on GPUs the
shifts, the masks and the scaling are one chain per element fused into the
write of the tensor-core operand, so shared memory holds the packed words
(4 KiB per stage at BK = 64, BN = 128), not W's 16-bit values twice.

`quantize` makes (qweight, scales) from float weights in NumPy and
`reference` is the float64 product with the dequantized weights rounded to
the activations' type once, as the kernel rounds them."""
import numpy as np

import kiln
import kiln.language as kl


@kiln.jit
def w4a16_matmul_kernel(a, qweight, scales, c, M, N, K, G: kl.constexpr, BM: kl.constexpr,
                        BN: kl.constexpr, BK: kl.constexpr):
    kl.static_assert(G % BK == 0 and BK % 8 == 0, "a K step is whole words of one scale group")
    pid_m, pid_n = kl.program_id(0), kl.program_id(1)
    rm = pid_m * BM + kl.arange(0, BM)
    rn = pid_n * BN + kl.arange(0, BN)
    rk = kl.arange(0, BK)
    acc = kl.zeros((BM, BN), dtype=kl.float32)
    for k0 in range(0, K, BK):
        x = kl.load(a + rm[:, None] * K + (k0 + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        # The step's packed words, each once, and their nibbles by index.
        rp = k0 // 8 + kl.arange(0, BK // 8)
        packed = kl.load(qweight + rp[:, None] * N + rn[None, :],
                         mask=(rp[:, None] < kl.cdiv(K, 8)) & (rn[None, :] < N), other=0)
        words = kl.reshape(kl.broadcast_to(packed[:, None, :], (BK // 8, 8, BN)), (BK, BN))
        q = (words >> ((rk % 8) * 4)[:, None]) & 0xF
        s = kl.load(scales + (k0 // G) * N + rn, mask=rn < N, other=0.0)
        # (q - 8) s exactly in float32, rounded once to the activations' type.
        w = ((q - 8).to(kl.float32) * s.to(kl.float32)[None, :]).to(x.dtype)
        acc = kl.dot(x, w, acc)
    kl.store(c + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def quantize(w, group=128):
    """w [K, N] float -> (qweight [ceil(K / 8), N] int32, scales
    [ceil(K / group), N] float16): symmetric, the largest magnitude of each
    group's column maps to 7."""
    k, n = w.shape
    groups = -(-k // group)
    pad = np.zeros((groups * group, n))
    pad[:k] = w
    g = pad.reshape(groups, group, n)
    s = (np.maximum(np.abs(g).max(1), 1e-8) / 7).astype(np.float16)
    q = np.clip(np.round(g / s.astype(np.float64)[:, None, :]), -8, 7).astype(np.int64) + 8
    q = q.reshape(groups * group, n)[:k]
    words = -(-k // 8)
    q = np.concatenate([q, np.full((words * 8 - k, n), 8, np.int64)])
    packed = np.zeros((words, n), np.int64)
    for j in range(8):
        packed |= q[j::8] << (4 * j)
    return packed.astype(np.uint32).view(np.int32), s


def dequantize(qweight, scales, k, group=128):
    """The float64 weights [k, N] that (qweight, scales) hold."""
    n = qweight.shape[1]
    p = qweight.view(np.uint32).astype(np.int64)
    q = np.stack([(p >> (4 * j)) & 0xF for j in range(8)], 1).reshape(-1, n)[:k]
    return (q - 8) * np.repeat(scales.astype(np.float64), group, 0)[:k]


def reference(a, qweight, scales, group=128, round_weights=None):
    """float64 A @ W, W rounded by `round_weights` (float64 -> float64: the
    activations' type; float16 when None)."""
    w = dequantize(qweight, scales, a.shape[1], group)
    w = w.astype(np.float16).astype(np.float64) if round_weights is None else round_weights(w)
    return a.astype(np.float64) @ w


def launch_args(a, qweight, scales, c, group=128, block=(64, 64, 64)):
    """(grid, args, constexpr kwargs) of w4a16_matmul_kernel for A [M, K]
    (a NumPy float16 array, a kiln.bf16 or a device tensor), C [M, N]."""
    shape = getattr(a, "array", a).shape
    M, K = shape
    N = qweight.shape[1]
    bm, bn, bk = block
    return ((kiln.cdiv(M, bm), kiln.cdiv(N, bn)), (a, qweight, scales, c, M, N, K),
            dict(G=group, BM=bm, BN=bn, BK=bk))


def w4a16_matmul(a, qweight, scales, group=128, block=(64, 64, 64)):
    """C = A @ dequant(W) (float32) for a NumPy float16 A."""
    c = np.empty((a.shape[0], qweight.shape[1]), np.float32)
    grid, args, kw = launch_args(a, qweight, scales, c, group, block)
    w4a16_matmul_kernel[grid](*args, **kw)
    return c


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    M, N, K = 100, 300, 1000
    a = rng.standard_normal((M, K)).astype(np.float16)
    qw, s = quantize(rng.standard_normal((K, N)) * 0.05)
    c = w4a16_matmul(a, qw, s)
    ref = reference(a, qw, s)
    print(f"W4A16 GEMM {M}x{N}x{K}: max |error| {np.abs(c - ref).max():.3g} "
          f"(max |C| {np.abs(ref).max():.3g})")
