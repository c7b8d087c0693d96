"""Block-scaled (microscaling, OCP MX) matrix multiplication with
`kl.dot_scaled`, Triton's: A in MXFP4 (e2m1 values, two per byte, one e8m0
scale per 32 of K) or MXFP8 (e4m3 / e5m2), B likewise, C = A @ B in float32.
The weights of recent open models (MXFP4 experts) are stored this way.

`kl.dot_scaled` decodes both operands exactly, scales them, rounds them to
bfloat16 (exact for MX values in range) and multiplies on the tensor cores
(mma.sync, wgmma) or the CPU's vector units, as Triton emulates it on GPUs
without MX tensor-core instructions (anything before sm_100).

MX data arrive as int8 arrays (the bytes; numpy uint8 data through
`.view(np.int8)`). `quantize_mx` makes them from float arrays in NumPy, and
`decode_mx` is the reference decoding."""
import numpy as np

import kiln
import kiln.language as kl

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


@kiln.jit
def mx_matmul_kernel(a, a_scale, b, b_scale, c, M, N, K, FMT_A: kl.constexpr,
                     FMT_B: kl.constexpr, BM: kl.constexpr, BN: kl.constexpr,
                     BK: kl.constexpr):
    kl.static_assert(BK % 32 == 0, "BK must be a multiple of 32 (one scale per 32 of K)")
    pid_m, pid_n = kl.program_id(0), kl.program_id(1)
    rm = pid_m * BM + kl.arange(0, BM)
    rn = pid_n * BN + kl.arange(0, BN)
    PACK_A: kl.constexpr = 2 if FMT_A == "e2m1" else 1   # values per byte along K
    PACK_B: kl.constexpr = 2 if FMT_B == "e2m1" else 1
    acc = kl.zeros((BM, BN), dtype=kl.float32)
    for k in range(0, K, BK):
        ka = k // PACK_A + kl.arange(0, BK // PACK_A)
        kb = k // PACK_B + kl.arange(0, BK // PACK_B)
        ks = k // 32 + kl.arange(0, BK // 32)
        # K is a multiple of 32, not necessarily of BK: the last step's
        # codes past K read 0 (+0 in every format), its scales 127 (2^0).
        x = kl.load(a + rm[:, None] * (K // PACK_A) + ka[None, :],
                    mask=(rm[:, None] < M) & (ka[None, :] < K // PACK_A), other=0)
        y = kl.load(b + kb[:, None] * N + rn[None, :],
                    mask=(kb[:, None] < K // PACK_B) & (rn[None, :] < N), other=0)
        xs = kl.load(a_scale + rm[:, None] * (K // 32) + ks[None, :],
                     mask=(rm[:, None] < M) & (ks[None, :] < K // 32), other=127)
        ys = kl.load(b_scale + rn[:, None] * (K // 32) + ks[None, :],
                     mask=(rn[:, None] < N) & (ks[None, :] < K // 32), other=127)
        acc = kl.dot_scaled(x, xs, FMT_A, y, ys, FMT_B, acc)
    kl.store(c + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def decode_mx(bits, fmt):
    """float64 values of MX element bits (one code per array element)."""
    bits = np.asarray(bits).astype(np.int64) & 0xFF
    if fmt == "e2m1":
        return E2M1[bits & 15]
    if fmt == "e5m2":
        return (bits << 8).astype(np.uint16).view(np.float16).astype(np.float64)
    sign = np.where(bits >> 7, -1.0, 1.0)
    e, m = (bits >> 3) & 15, bits & 7
    v = np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (e - 7.0))
    return sign * np.where((e == 15) & (m == 7), np.nan, v)


def quantize_mx(x, fmt, axis):
    """x (float, K along `axis`, a multiple of 32) as MX codes and e8m0
    scales: each block of 32 along K gets the power of two that brings its
    largest magnitude to the format's top binade, and each value the nearest
    code (ties to the smaller magnitude). Returns (codes as int64, scales as
    int64 in [0, 254], both with K along `axis`)."""
    x = np.moveaxis(np.asarray(x, np.float64), axis, -1)
    blocks = x.reshape(x.shape[:-1] + (x.shape[-1] // 32, 32))
    top = {"e2m1": 2, "e4m3": 8, "e5m2": 15}[fmt]
    amax = np.abs(blocks).max(-1, keepdims=True)
    s = np.where(amax > 0, np.floor(np.log2(np.maximum(amax, 1e-300))) - top, -127)
    s = np.clip(s, -127, 127)
    scaled = blocks / 2.0 ** s
    codes = np.arange(256 if fmt != "e2m1" else 16)
    vals = decode_mx(codes, fmt)
    ok = np.isfinite(vals)
    codes, vals = codes[ok], vals[ok]
    best = np.abs(scaled[..., None] - vals).argmin(-1)
    out = codes[best].reshape(x.shape)
    return np.moveaxis(out, -1, axis), np.moveaxis((s[..., 0] + 127).astype(np.int64), -1, axis)


def pack(codes, fmt, axis):
    """Codes as the kernel's bytes (int8): e2m1 two per byte along `axis`,
    the first in the low nibble."""
    codes = np.asarray(codes)
    if fmt == "e2m1":
        lo = np.take(codes, np.arange(0, codes.shape[axis], 2), axis)
        hi = np.take(codes, np.arange(1, codes.shape[axis], 2), axis)
        codes = lo | (hi << 4)
    return np.ascontiguousarray(codes.astype(np.uint8).view(np.int8))


def mx_matmul(a_codes, a_scale, fmt_a, b_codes, b_scale, fmt_b, block=(64, 64, 64)):
    """C [M, N] float32 of A codes [M, K] and B codes [K, N] with scales
    [M, K // 32] and [N, K // 32]."""
    (M, K), N = a_codes.shape, b_codes.shape[1]
    c = np.empty((M, N), np.float32)
    bm, bn, bk = block
    mx_matmul_kernel[(kiln.cdiv(M, bm), kiln.cdiv(N, bn))](
        pack(a_codes, fmt_a, 1), np.ascontiguousarray(a_scale.astype(np.uint8).view(np.int8)),
        pack(b_codes, fmt_b, 0), np.ascontiguousarray(b_scale.astype(np.uint8).view(np.int8)),
        c, M, N, K, FMT_A=fmt_a, FMT_B=fmt_b, BM=bm, BN=bn, BK=bk)
    return c


def scale_values(s):
    """e8m0 scales: 2^(s - 127); 255 is NaN."""
    s = np.asarray(s)
    return np.where(s == 255, np.nan, 2.0 ** (s.astype(np.float64) - 127))


def reference(a_codes, a_scale, fmt_a, b_codes, b_scale, fmt_b, magnitude=False):
    """float64 C of the same operands (with `magnitude`, |A| @ |B|: what a
    float32 sum's error scales with)."""
    a = decode_mx(a_codes, fmt_a) * np.repeat(scale_values(a_scale), 32, axis=1)
    b = decode_mx(b_codes, fmt_b) * np.repeat(scale_values(b_scale), 32, axis=1).T
    return np.abs(a) @ np.abs(b) if magnitude else a @ b


def main():
    rng = np.random.default_rng(0)
    M, N, K = 200, 150, 256
    x = rng.standard_normal((M, K))
    w = rng.standard_normal((K, N)) * 0.05
    ok = True
    for fa, fb in (("e4m3", "e2m1"), ("e2m1", "e2m1"), ("e5m2", "e4m3")):
        ac, asc = quantize_mx(x, fa, 1)
        bc, bsc = quantize_mx(w, fb, 0)
        c = mx_matmul(ac, asc, fa, bc, bsc.T, fb)
        ref = reference(ac, asc, fa, bc, bsc.T, fb)
        err = np.abs(c - ref).max() / np.abs(ref).max()
        quant = np.abs(ref - x @ w).max() / np.abs(x @ w).max()
        print(f"MX matmul {M}x{N}x{K} {fa} x {fb}: relative error {err:.1e} against the "
              f"exact product of the MX operands ({quant:.1e} from the unquantized one)")
        ok = ok and err < 1e-5
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
