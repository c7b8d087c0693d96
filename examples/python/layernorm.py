"""Layer normalization with a loop over column chunks (loop-carried sums).

The sums are of x minus the row's first element: the plain sum of squares
minus the squared mean cancels when the mean is large against the spread
(rows of randn + 1000 came out 0.15 off, randn + 1e4 wrong by 370); shifted
by a value of the row, it keeps the spread's digits in one pass."""
import numpy as np

import kiln
import kiln.language as kl


@kiln.jit
def layernorm_kernel(x, w, b, y, n_cols, eps, BLOCK: kl.constexpr):
    row = kl.program_id(0)
    base = row * n_cols
    shift = kl.load(x + base, mask=n_cols > 0, other=0.0)
    s = 0.0
    ss = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + kl.arange(0, BLOCK)
        mask = cols < n_cols
        v = kl.where(mask, kl.load(x + base + cols, mask=mask, other=0.0) - shift, 0.0)
        s += kl.sum(v, axis=0)
        ss += kl.sum(v * v, axis=0)
    d = s / n_cols
    mean = shift + d
    var = kl.maximum(ss / n_cols - d * d, 0.0)
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
