"""Layer normalization with a loop over column chunks (loop-carried sums)."""
import numpy as np

import kiln
import kiln.language as kl


@kiln.jit
def layernorm_kernel(x, w, b, y, n_cols, eps, BLOCK: kl.constexpr):
    row = kl.program_id(0)
    base = row * n_cols
    s = 0.0
    ss = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + kl.arange(0, BLOCK)
        v = kl.load(x + base + cols, mask=cols < n_cols, other=0.0)
        s += kl.sum(v, axis=0)
        ss += kl.sum(v * v, axis=0)
    mean = s / n_cols
    var = kl.maximum(ss / n_cols - mean * mean, 0.0)
    rstd = kl.rsqrt(var + eps)
    for start in range(0, n_cols, BLOCK):
        cols = start + kl.arange(0, BLOCK)
        mask = cols < n_cols
        v = kl.load(x + base + cols, mask=mask, other=0.0)
        g = kl.load(w + cols, mask=mask, other=0.0)
        h = kl.load(b + cols, mask=mask, other=0.0)
        kl.store(y + base + cols, (v - mean) * rstd * g + h, mask=mask)


def layernorm(x, w, b, eps=1e-5, block=256):
    m, n = x.shape
    y = np.empty_like(x)
    layernorm_kernel[(m,)](x, w, b, y, n, eps, BLOCK=block)
    return y


def reference(x, w, b, eps=1e-5):
    x = x.astype(np.float64)
    mu = x.mean(axis=1, keepdims=True)
    var = x.var(axis=1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def main():
    x = np.random.randn(517, 1283).astype(np.float32)
    w = np.random.randn(1283).astype(np.float32)
    b = np.random.randn(1283).astype(np.float32)
    ok = np.allclose(layernorm(x, w, b), reference(x, w, b), rtol=1e-4, atol=1e-4)
    print(f"layernorm {x.shape}: {'matches numpy' if ok else 'MISMATCH'}")
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
