"""Streaming stores: Triton's store hints `cache_modifier=".cs"` and
`eviction_policy="evict_first"` make a kiln.store {streaming}; on x86 a tile
whose rows start on vector boundaries is then written with non-temporal
stores and an sfence, any other tile as before. The values must not change:
aligned and misaligned destinations, ragged edges, gathered rows."""
import os

import numpy as np
import pytest

import kiln
import kiln.language as kl
from conftest import assert_close

TARGET = os.environ.get("KILN_TARGET", "host")


@kiln.jit
def scaled_copy(x, out, m, n, sx, so, BM: kl.constexpr, BN: kl.constexpr,
                HINT: kl.constexpr):
    rows = kl.program_id(0) * BM + kl.arange(0, BM)
    cols = kl.program_id(1) * BN + kl.arange(0, BN)
    mask = (rows[:, None] < m) & (cols[None, :] < n)
    v = kl.load(x + rows[:, None] * sx + cols[None, :], mask=mask, other=0.0)
    if HINT == 1:
        kl.store(out + rows[:, None] * so + cols[None, :], v * 2.0 + 1.0, mask=mask,
                 cache_modifier=".cs")
    elif HINT == 2:
        kl.store(out + rows[:, None] * so + cols[None, :], v * 2.0 + 1.0, mask=mask,
                 eviction_policy="evict_first")
    else:
        kl.store(out + rows[:, None] * so + cols[None, :], v * 2.0 + 1.0, mask=mask)


@kiln.jit
def row_gather(table, ids, out, n, dim, BR: kl.constexpr, BD: kl.constexpr):
    r0 = kl.program_id(0) * BR
    vt = kl.make_view(table, (4096, dim), (dim, 1))
    vo = kl.make_view(out, (n, dim), (dim, 1))
    idx = kl.load(ids + r0 + kl.arange(0, BR), mask=r0 + kl.arange(0, BR) < n, other=-1)
    tile = kl.gather(vt, idx, (kl.program_id(1) * BD,), shape=(BR, BD))
    kl.store(vo, tile, offsets=(r0, kl.program_id(1) * BD), cache_modifier=".cs")


def _buffer(shape, shift):
    """A float32 array of `shape` starting `shift` elements past a 64-byte
    boundary (so shift 1 misaligns every row for 32- and 64-byte vectors)."""
    n = int(np.prod(shape))
    raw = np.empty(n + 64, np.float32)
    start = (-raw.ctypes.data % 64) // 4 + shift
    a = raw[start:start + n].reshape(shape)
    a[...] = np.nan
    return a


@pytest.mark.parametrize("hint", [1, 2])
@pytest.mark.parametrize("m,n,shift,stride_pad,bn", [
    (64, 128, 0, 0, 64),   # every tile interior and aligned: non-temporal
    (77, 203, 0, 0, 64),   # ragged edges, rows of 203 elements: rows start
                           # at different distances from a boundary
    (64, 128, 1, 0, 64),   # one element past a boundary: 7 or 15 elements
                           # one by one, then aligned vectors, then the rest
    (64, 128, 4, 0, 64),   # 16 bytes past (numpy's large arrays)
    (50, 96, 0, 8, 64),    # rows padded to 104 elements, all aligned
    (32, 64, 3, 0, 8),     # tiles as narrow as a vector: one by one only
])
def test_streaming_store_values(rng, hint, m, n, shift, stride_pad, bn):
    x = rng.standard_normal((m, n)).astype(np.float32)
    so = n + stride_pad
    out = _buffer((m, so), shift)
    scaled_copy[(kiln.cdiv(m, 16), kiln.cdiv(n, bn))](x, out, m, n, n, so, BM=16, BN=bn,
                                                    HINT=hint)
    # (2x is exact, so 2x + 1 has one rounding, float32 as the kernel's)
    assert_close(out[:, :n], x * np.float32(2) + np.float32(1), 0, 0)
    if stride_pad:
        assert np.isnan(out[:, n:]).all(), "the padding columns were written"


def test_streaming_hint_marks_the_store(rng):
    x = rng.standard_normal((16, 64)).astype(np.float32)
    out = np.empty((16, 64), np.float32)
    scaled_copy[(1, 1)](x, out, 16, 64, 64, 64, BM=16, BN=64, HINT=1)
    assert "{streaming}" in scaled_copy.ir("kiln")
    scaled_copy[(1, 1)](x, out, 16, 64, 64, 64, BM=16, BN=64, HINT=0)
    assert "{streaming}" not in scaled_copy.ir("kiln")
    # ir() follows the launch, also of a specialization compiled before.
    scaled_copy[(1, 1)](x, out, 16, 64, 64, 64, BM=16, BN=64, HINT=1)
    assert "{streaming}" in scaled_copy.ir("kiln")


@pytest.mark.skipif(not TARGET.startswith("host"), reason="x86 assembly")
def test_streaming_store_is_non_temporal_on_x86(rng):
    x = rng.standard_normal((16, 64)).astype(np.float32)
    out = np.empty((16, 64), np.float32)
    scaled_copy[(1, 1)](x, out, 16, 64, 64, 64, BM=16, BN=64, HINT=1)
    asm = scaled_copy.asm
    assert "vmovntps" in asm and "sfence" in asm
    scaled_copy[(1, 1)](x, out, 16, 64, 64, 64, BM=16, BN=64, HINT=0)
    assert "vmovnt" not in scaled_copy.asm


@pytest.mark.parametrize("dim,shift", [(256, 0), (200, 0), (256, 1), (256, 4), (72, 5)])
def test_streaming_gather_store(rng, dim, shift):
    """A gathered tile stored with the hint (the gather-store fusion's path);
    out-of-range ids read zeros."""
    table = rng.standard_normal((4096, dim)).astype(np.float32)
    n = 45
    ids = rng.integers(-3, 4100, n).astype(np.int32)
    out = _buffer((n, dim), shift)
    row_gather[(kiln.cdiv(n, 8), kiln.cdiv(dim, 64))](table, ids, out, n, dim, BR=8, BD=64)
    ok = (ids >= 0) & (ids < 4096)
    want = np.where(ok[:, None], table[np.clip(ids, 0, 4095)], 0.0)
    assert_close(out, want.astype(np.float64), 0, 0)


def test_large_gathers_stream(rng):
    """The row gathers write outputs of 8 MiB or more with streaming stores
    (ops._STREAM_BYTES): the values are those of the plain kernel's."""
    import kiln.ops as ops
    table = rng.standard_normal((3000, 1024)).astype(np.float32)
    ids = rng.integers(0, 3000, 2100).astype(np.int32)
    assert ids.size * 1024 * 4 >= ops._STREAM_BYTES
    assert_close(ops.embedding(table, ids), table[ids].astype(np.float64), 0, 0)
    src = rng.integers(-1, 3000, 2100).astype(np.int32)
    want = np.where((src >= 0)[:, None], table[np.clip(src, 0, None)], 0.0)
    assert_close(ops.moe_permute(table, src), want, 0, 0)
    cache = rng.standard_normal((300, 16, 1024)).astype(np.float32)
    tables = rng.permutation(300)[:288].reshape(2, 144).astype(np.int32)
    lens = np.array([2304, 1000], np.int32)
    out = ops.paged_kv_gather(cache, tables, lens)
    assert out.nbytes >= ops._STREAM_BYTES
    for b in range(2):
        t = np.arange(2304)
        want = np.where((t < lens[b])[:, None], cache[tables[b, t // 16], t % 16], 0.0)
        assert_close(out[b], want, 0, 0)


@kiln.jit
def block_ptr_copy(x, out, m, n, BM: kl.constexpr, BN: kl.constexpr):
    at = (kl.program_id(0) * BM, kl.program_id(1) * BN)
    src = kl.make_block_ptr(x, (m, n), (n, 1), at, (BM, BN), (1, 0))
    dst = kl.make_block_ptr(out, (m, n), (n, 1), at, (BM, BN), (1, 0))
    kl.store(dst, kl.load(src, boundary_check=(0, 1)) + 1.0, boundary_check=(0, 1),
             eviction_policy="evict_first")


def test_streaming_block_pointer_store(rng):
    m, n = 37, 136  # interior tiles (streamed) and edge tiles
    x = rng.standard_normal((m, n)).astype(np.float32)
    out = _buffer((m, n), 4)
    block_ptr_copy[(kiln.cdiv(m, 8), kiln.cdiv(n, 64))](x, out, m, n, BM=8, BN=64)
    assert "{streaming}" in block_ptr_copy.ir("kiln")
    assert_close(out, x + np.float32(1), 0, 0)
