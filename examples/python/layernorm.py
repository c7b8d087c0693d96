"""Layer normalization with a loop over column chunks (loop-carried sums).

Each chunk's mean and sum of squared deviations are computed from the tile
in registers and merged into the row's (Chan et al.'s pairwise update), so
the statistics take one pass over the row and cancel nothing: the plain
E[x²] - E[x]² lost the variance when the mean was large against the spread
(rows of randn + 1e4 came out wrong by 370), and sums shifted by the row's
first element lost it when that element was an outlier."""
import numpy as np

import kiln
import kiln.language as kl


@kiln.jit
def layernorm_kernel(x, w, b, y, n_cols, eps, BLOCK: kl.constexpr):
    row = kl.program_id(0)
    base = row * n_cols
    mean = 0.0
    m2 = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + kl.arange(0, BLOCK)
        mask = cols < n_cols
        v = kl.load(x + base + cols, mask=mask, other=0.0)
        cnt = kl.minimum(n_cols - start, BLOCK)   # this chunk's columns
        c_mean = kl.sum(v, axis=0) / cnt
        dv = kl.where(mask, v - c_mean, 0.0)
        delta = c_mean - mean
        # (start columns seen before; start + cnt after this chunk)
        mean += delta * (cnt / (start + cnt))
        m2 += kl.sum(dv * dv, axis=0) + delta * delta * (start * (cnt / (start + cnt)))
    var = m2 / n_cols
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
