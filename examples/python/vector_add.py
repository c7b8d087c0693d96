"""Vector addition: the first Kiln kernel in Python."""
import numpy as np

import kiln
import kiln.language as kl


@kiln.jit
def add_kernel(x, y, out, n, BLOCK: kl.constexpr):
    pid = kl.program_id(0)
    offs = pid * BLOCK + kl.arange(0, BLOCK)
    mask = offs < n
    a = kl.load(x + offs, mask=mask)
    b = kl.load(y + offs, mask=mask)
    kl.store(out + offs, a + b, mask=mask)


def add(x, y, block=1024):
    out = np.empty_like(x)
    n = x.size
    add_kernel[(kiln.cdiv(n, block),)](x, y, out, n, BLOCK=block)
    return out


def main():
    n = 1_000_003
    x = np.random.rand(n).astype(np.float32)
    y = np.random.rand(n).astype(np.float32)
    out = add(x, y)
    ok = np.allclose(out, x + y)
    print(f"vector_add n={n}: {'matches numpy' if ok else 'MISMATCH'}")
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
