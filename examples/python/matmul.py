"""Tiled matmul through views, autotuned over tile sizes."""
import numpy as np

import kiln
import kiln.language as kl


@kiln.autotune(
    configs=[kiln.Config({"BM": 64, "BN": 64, "BK": 128}),
             kiln.Config({"BM": 32, "BN": 64, "BK": 128}),
             kiln.Config({"BM": 64, "BN": 64, "BK": 64})],
    key=["m", "n", "k"])
@kiln.jit
def matmul_kernel(a, b, c, m, n, k, BM: kl.constexpr, BN: kl.constexpr, BK: kl.constexpr):
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


def matmul(a, b):
    m, k = a.shape
    _, n = b.shape
    c = np.empty((m, n), np.float32)
    grid = lambda meta: (kiln.cdiv(n, meta["BN"]), kiln.cdiv(m, meta["BM"]))
    matmul_kernel[grid](a, b, c, m, n, k)
    return c


def main():
    a = np.random.randn(301, 257).astype(np.float32)
    b = np.random.randn(257, 129).astype(np.float32)
    ok = np.allclose(matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    print(f"matmul {a.shape} x {b.shape}: {'matches numpy' if ok else 'MISMATCH'} "
          f"(autotuned: {matmul_kernel.last_config})")
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
