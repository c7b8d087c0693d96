"""FP8 GEMM with block-wise scales, as DeepSeek-V3 stores its weights:
activations in e4m3 with one float32 scale per row and 128 columns (1×128),
weights [N, K] in e4m3 with one scale per 128×128 block; C = A @ W^T in
float32. Each K step multiplies the fp8 tiles exactly and applies both
scales to the step's partial product: on sm_90a with wgmma's e4m3 form (A's
rows and W's rows are both K-major, `kl.dot(x, kl.trans(wk))`), elsewhere
with the operands decoded to bfloat16 (a few bit operations per element).

`quantize_activations` and `quantize_weights` make the operands in NumPy (the
largest magnitude of each group maps to 448, e4m3's largest value), and
`reference` is the float64 product of the quantized operands."""
import numpy as np

import kiln
import kiln.language as kl
from mx_matmul import decode_mx

GROUP = 128


@kiln.jit
def fp8_blockwise_matmul_kernel(a, a_s, w, w_s, c, M, N, K, BM: kl.constexpr,
                                BN: kl.constexpr, BK: kl.constexpr):
    kl.static_assert(BK == 128, "one scale per 128 of K")
    pid_m, pid_n = kl.program_id(0), kl.program_id(1)
    rm = pid_m * BM + kl.arange(0, BM)
    rn = pid_n * BN + kl.arange(0, BN)
    rk = kl.arange(0, BK)
    steps = kl.cdiv(K, BK)
    acc = kl.zeros((BM, BN), dtype=kl.float32)
    for i in range(0, steps):
        k0 = i * BK
        x = kl.load(a + rm[:, None] * K + (k0 + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        wk = kl.load(w + rn[:, None] * K + (k0 + rk)[None, :],          # W's rows [BN, BK]
                     mask=(rn[:, None] < N) & ((k0 + rk)[None, :] < K), other=0.0)
        sa = kl.load(a_s + rm * steps + i, mask=rm < M, other=0.0)
        sw = kl.load(w_s + (rn // 128) * steps + i, mask=rn < N, other=0.0)
        # (W's rows transposed: both operands K-major, as wgmma's fp8 forms
        # need them on sm_90a.)
        acc += kl.dot(x, kl.trans(wk)) * sa[:, None] * sw[None, :]
    kl.store(c + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


E4M3 = decode_mx(np.arange(256), "e4m3")   # the value of every code
_FINITE = np.arange(256)[np.isfinite(E4M3)]


_ORDER = _FINITE[np.argsort(E4M3[_FINITE], kind="stable")]
_SORTED = E4M3[_ORDER]


def to_e4m3(x):
    """Nearest e4m3 codes (uint8) of float64 values within ±448 (ties: the
    lower neighbour; the kernel's own conversion is not used here)."""
    x = np.asarray(x, np.float64)
    hi = np.clip(np.searchsorted(_SORTED, x), 1, len(_SORTED) - 1)
    lo = hi - 1
    pick = np.where(np.abs(_SORTED[hi] - x) < np.abs(x - _SORTED[lo]), hi, lo)
    return _ORDER[pick].astype(np.uint8)


def quantize_activations(x):
    """x [M, K] -> (e4m3 codes [M, K], float32 scales [M, ceil(K / 128)])."""
    m, k = x.shape
    steps = -(-k // GROUP)
    pad = np.zeros((m, steps * GROUP))
    pad[:, :k] = x
    g = pad.reshape(m, steps, GROUP)
    s = np.maximum(np.abs(g).max(-1), 1e-30) / 448.0
    codes = to_e4m3(g / s[..., None]).reshape(m, steps * GROUP)[:, :k]
    return codes, s.astype(np.float32)


def quantize_weights(w):
    """w [N, K] -> (e4m3 codes [N, K], float32 scales [ceil(N/128), ceil(K/128)])."""
    n, k = w.shape
    bn, bk = -(-n // GROUP), -(-k // GROUP)
    pad = np.zeros((bn * GROUP, bk * GROUP))
    pad[:n, :k] = w
    blocks = pad.reshape(bn, GROUP, bk, GROUP)
    s = np.maximum(np.abs(blocks).max((1, 3)), 1e-30) / 448.0
    q = blocks / s[:, None, :, None]
    codes = to_e4m3(q).reshape(bn * GROUP, bk * GROUP)[:n, :k]
    return codes, s.astype(np.float32)


def dequantize(codes, scales, rows_per_scale):
    """float64 values of quantized codes (scales per rows_per_scale rows and
    128 columns)."""
    v = E4M3[codes.astype(np.int64)]
    s = np.repeat(np.repeat(scales.astype(np.float64), rows_per_scale, 0), GROUP, 1)
    return v * s[:v.shape[0], :v.shape[1]]


def reference(a_codes, a_s, w_codes, w_s):
    return dequantize(a_codes, a_s, 1) @ dequantize(w_codes, w_s, GROUP).T


def launch_args(a_codes, a_s, w_codes, w_s, c, block=(64, 64)):
    (M, K), N = a_codes.shape, w_codes.shape[0]
    grid = (kiln.cdiv(M, block[0]), kiln.cdiv(N, block[1]))
    args = (kiln.fp8(np.ascontiguousarray(a_codes, np.uint8), "e4m3"), a_s,
            kiln.fp8(np.ascontiguousarray(w_codes, np.uint8), "e4m3"), w_s, c, M, N, K)
    return grid, args, dict(BM=block[0], BN=block[1], BK=128)


def fp8_matmul(a_codes, a_s, w_codes, w_s, block=(64, 64)):
    c = np.empty((a_codes.shape[0], w_codes.shape[0]), np.float32)
    grid, args, kw = launch_args(a_codes, a_s, w_codes, w_s, c, block)
    fp8_blockwise_matmul_kernel[grid](*args, **kw)
    return c


def main():
    rng = np.random.default_rng(0)
    M, N, K = 150, 300, 520
    x = rng.standard_normal((M, K))
    w = rng.standard_normal((N, K)) * 0.02
    ac, a_s = quantize_activations(x)
    wc, w_s = quantize_weights(w)
    c = fp8_matmul(ac, a_s, wc, w_s)
    ref = reference(ac, a_s, wc, w_s)
    err = np.abs(c - ref).max() / np.abs(ref).max()
    quant = np.abs(ref - x @ w.T).max() / np.abs(x @ w.T).max()
    print(f"FP8 block-scaled GEMM {M}x{N}x{K}: relative error {err:.1e} against the exact "
          f"product of the fp8 operands ({quant:.1e} from the unquantized one)")
    return err < 1e-5


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
