"""Triton's low-memory dropout tutorial (04-low-memory-dropout.py) as it reads
upstream with `kl` for `tl`: dropout with a mask tensor, and seeded dropout,
whose keep mask is `kl.rand(seed, offsets) > p` (Triton's Philox generator)
and so needs no mask in memory: the same seed gives the same mask, on every
target and bit for bit as Triton's `tl.rand`. `philox_reference` is that
generator in NumPy."""
import numpy as np

import kiln
import kiln.language as kl


@kiln.jit
def _dropout(x_ptr, x_keep_ptr, output_ptr, n_elements, p, BLOCK_SIZE: kl.constexpr):
    pid = kl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + kl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    # Load data
    x = kl.load(x_ptr + offsets, mask=mask)
    x_keep = kl.load(x_keep_ptr + offsets, mask=mask)
    # The line below is the crucial part, described in the paragraph above!
    output = kl.where(x_keep, x / (1 - p), 0.0)
    # Write-back output
    kl.store(output_ptr + offsets, output, mask=mask)


@kiln.jit
def _seeded_dropout(x_ptr, output_ptr, n_elements, p, seed, BLOCK_SIZE: kl.constexpr):
    # compute memory offsets of elements handled by this instance
    pid = kl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + kl.arange(0, BLOCK_SIZE)
    # load data from x
    mask = offsets < n_elements
    x = kl.load(x_ptr + offsets, mask=mask)
    # randomly prune it
    random = kl.rand(seed, offsets)
    x_keep = random > p
    # write-back
    output = kl.where(x_keep, x / (1 - p), 0.0)
    kl.store(output_ptr + offsets, output, mask=mask)


def dropout(x, x_keep, p, block=1024):
    output = np.empty_like(x)
    n = x.size
    _dropout[(kiln.cdiv(n, block),)](x, x_keep, output, n, p, BLOCK_SIZE=block)
    return output


def seeded_dropout(x, p, seed, block=1024):
    output = np.empty_like(x)
    n = x.size
    _seeded_dropout[(kiln.cdiv(n, block),)](x, output, n, p, seed, BLOCK_SIZE=block)
    return output


def philox_reference(seed, offsets, n_rounds=10):
    """Triton's Philox (randint4x, Triton 3.4 and later) in NumPy: Philox
    4x32 of the counter (offset_lo, offset_hi, 0, 0), the high word an int64
    offset's (0 for int32 offsets), keyed by the seed's two 32-bit words;
    four int32 arrays of random bits."""
    offsets = np.asarray(offsets)
    bits, mask = 32, 0xffffffff
    ka, kb, ra, rb = 0x9E3779B9, 0xBB67AE85, 0xD2511F53, 0xCD9E8D57
    s = seed & ((1 << 64) - 1)
    k0, k1 = s & mask, (s >> 32) & mask
    wide = offsets.astype(np.int64).view(np.uint64).astype(object)  # exact products
    c0 = wide & mask
    c1 = (wide >> 32) if offsets.dtype == np.int64 else np.zeros_like(c0)
    c2 = c3 = np.zeros_like(c0)
    for _ in range(n_rounds):
        c0, c1, c2, c3 = ((rb * c2) >> bits) ^ c1 ^ k0, (rb * c2) & mask, \
            ((ra * c0) >> bits) ^ c3 ^ k1, (ra * c0) & mask
        k0, k1 = (k0 + ka) & mask, (k1 + kb) & mask
    return [np.array(c, dtype=np.uint32).view(np.int32) for c in (c0, c1, c2, c3)]


def uniform_reference(bits):
    """Triton's uint_to_uniform_float: random bits to float32 in [0, 1)."""
    scale = np.float32(4.6566127342e-10 if bits.dtype == np.int32 else 1.0842020432385337e-19)
    return np.where(bits < 0, ~bits, bits).astype(np.float32) * scale


def reference(x, p, seed):
    """The seeded dropout's exact output (float32, as the kernel computes)."""
    keep = uniform_reference(philox_reference(seed, np.arange(x.size, dtype=np.int32))[0]) > p
    scale = np.float32(1) - np.float32(p)  # as the kernel: p is a float32 argument
    return np.where(keep.reshape(x.shape), x / scale, np.float32(0)).astype(np.float32)


def main():
    x = np.random.randn(10_000).astype(np.float32)
    p = 0.5
    keep = np.random.rand(x.size) > p
    ok = np.array_equal(dropout(x, keep, p), np.where(keep, x / np.float32(1 - p), 0))
    a, b = seeded_dropout(x, p, seed=123), seeded_dropout(x, p, seed=123)
    c = seeded_dropout(x, p, seed=512)
    ok = ok and np.array_equal(a, b) and not np.array_equal(a, c)
    ok = ok and np.array_equal(a, reference(x, p, 123))
    kept = (a != 0).mean()
    print(f"Triton tutorial dropout ({x.size} elements, p={p}): kept {kept:.3f}, "
          f"{'matches numpy' if ok else 'MISMATCH'}")
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
