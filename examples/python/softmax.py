"""Fused row softmax: one program per row, the whole row in one tile."""
import numpy as np

import kiln
import kiln.language as kl


@kiln.jit
def softmax_kernel(x, out, n_cols, BLOCK: kl.constexpr):
    row = kl.program_id(0)
    cols = kl.arange(0, BLOCK)
    mask = cols < n_cols
    v = kl.load(x + row * n_cols + cols, mask=mask, other=float("-inf"))
    v = v - kl.max(v, axis=0)
    e = kl.exp(v)
    kl.store(out + row * n_cols + cols, e / kl.sum(e, axis=0), mask=mask)


def next_pow2(n):
    p = 1
    while p < n:
        p *= 2
    return p


def softmax(x):
    m, n = x.shape
    out = np.empty_like(x)
    softmax_kernel[(m,)](x, out, n, BLOCK=max(16, next_pow2(n)))
    return out


def reference(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main():
    x = np.random.randn(1823, 781).astype(np.float32)
    ok = np.allclose(softmax(x), reference(x), rtol=1e-5, atol=1e-6)
    print(f"softmax {x.shape}: {'matches numpy' if ok else 'MISMATCH'}")
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
