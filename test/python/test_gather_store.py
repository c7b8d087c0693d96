"""The CPU's fused gather + store (KilnToCPU's lowerGatherStore): a gathered
tile whose only use is a store is copied row by row from the source to the
destination, with no tile in between. Three versions: the whole tile inside
both views; the part of a tile running past the destination (the last block
of a row or of the rows), copied in whole vectors and a masked last one,
when the source holds that part's columns; anything else through the
general gather and store. Exact values against numpy on fresh random
inputs, the destination poisoned with NaN (what a tile must not write stays
NaN), sizes that are not multiples of the blocks or the vectors."""
import numpy as np
import pytest

import kiln
import kiln.language as kl


@kiln.jit
def gather_rows(table, ids, out, n_ids, rows_t, dim_t, n_out, dim_out, row0, col0,
                BR: kl.constexpr, BD: kl.constexpr, STREAM: kl.constexpr,
                PAD: kl.constexpr):
    # Program (p, q): rows ids[p*BR .. +BR) of the table (an id outside it,
    # or past n_ids, reads PAD), columns col0 + q*BD .. +BD of the table
    # (outside it: PAD), stored at (row0 + p*BR, col0 + q*BD) of out.
    r0 = kl.program_id(0) * BR
    c0 = col0 + kl.program_id(1) * BD
    vt = kl.make_view(table, (rows_t, dim_t), (dim_t, 1))
    vo = kl.make_view(out, (n_out, dim_out), (dim_out, 1))
    at = r0 + kl.arange(0, BR)
    idx = kl.load(ids + at, mask=at < n_ids, other=-1)
    tile = kl.gather(vt, idx, (c0,), shape=(BR, BD), other=PAD)
    if STREAM:
        kl.store(vo, tile, offsets=(row0 + r0, c0), cache_modifier=".cs")
    else:
        kl.store(vo, tile, offsets=(row0 + r0, c0))


@kiln.jit
def gather_into_batch(table, ids, out, n_ids, rows_t, dim, batches, n_out, b,
                      BR: kl.constexpr, BD: kl.constexpr):
    # The gathered tile stored into batch b of out [batches, n_out, dim]
    # (a leading unit dimension: nothing stored for b outside [0, batches)).
    r0 = kl.program_id(0) * BR
    c0 = kl.program_id(1) * BD
    vt = kl.make_view(table, (rows_t, dim), (dim, 1))
    vo = kl.make_view(out, (batches, n_out, dim), (n_out * dim, dim, 1))
    at = r0 + kl.arange(0, BR)
    idx = kl.load(ids + at, mask=at < n_ids, other=-1)
    tile = kl.gather(vt, idx, (c0,), shape=(BR, BD))
    kl.store(vo, kl.reshape(tile, (1, BR, BD)), offsets=(b, r0, c0))


def reference(table, ids, out, n_ids, n_out, dim_out, row0, col0, grid, BR, BD, pad):
    """What gather_rows leaves in `out` (a copy; untouched elements keep
    theirs), in float64."""
    want = out.astype(np.float64)
    rows_t, dim_t = table.shape
    for p in range(grid[0]):
        for q in range(grid[1]):
            at = p * BR + np.arange(BR)
            idx = np.where(at < n_ids, ids[np.minimum(at, len(ids) - 1)], -1)
            cols = col0 + q * BD + np.arange(BD)
            tile = np.full((BR, BD), pad, np.float64)
            rok = (idx >= 0) & (idx < rows_t)
            cok = (cols >= 0) & (cols < dim_t)
            sel = np.ix_(rok, cok)
            tile[sel] = table.astype(np.float64)[np.ix_(idx[rok], cols[cok])]
            dr = row0 + at
            dok_r = (dr >= 0) & (dr < n_out)
            dok_c = (cols >= 0) & (cols < dim_out)
            want[np.ix_(dr[dok_r], cols[dok_c])] = tile[np.ix_(dok_r, dok_c)]
    return want


def run(rng, rows_t, dim_t, n_ids, n_out, dim_out, BR, BD, row0=0, col0=0, stream=0,
        pad=0.0, grid=None, dtype=np.float32):
    table = rng.standard_normal((rows_t, dim_t)).astype(dtype)
    ids = rng.integers(-2, rows_t + 2, max(n_ids, 1)).astype(np.int32)
    out = np.full((n_out, dim_out), np.nan, dtype)
    grid = grid or (kiln.cdiv(n_ids, BR), kiln.cdiv(max(dim_t, dim_out), BD))
    want = reference(table, ids, out, n_ids, n_out, dim_out, row0, col0, grid, BR, BD, pad)
    gather_rows[grid](table, ids, out, n_ids, rows_t, dim_t, n_out, dim_out, row0, col0,
                      BR=BR, BD=BD, STREAM=stream, PAD=pad)
    np.testing.assert_array_equal(out.astype(np.float64), want)


@pytest.mark.parametrize("stream", [0, 1])
@pytest.mark.parametrize("dim,BD", [(576, 1024), (200, 64), (77, 32), (5, 16), (64, 64)])
@pytest.mark.parametrize("n,BR", [(45, 8), (16, 16), (3, 8)])
def test_blocks_past_the_destination(rng, stream, dim, BD, n, BR):
    """The last block of a row and of the rows run past the destination: the
    clipped copy (whole vectors, then a masked one; rows past the
    destination not written)."""
    run(rng, 300, dim, n, n, dim, BR, BD, stream=stream)


@pytest.mark.parametrize("pad", [0.0, -1.5])
def test_narrower_destination(rng, pad):
    """The destination narrower than the source: the clipped copy stops at
    its end; ids outside the table read the padding."""
    run(rng, 50, 100, 30, 30, 70, 8, 64, pad=pad)


@pytest.mark.parametrize("pad", [0.0, 2.5])
def test_narrower_source(rng, pad):
    """The source narrower than the destination: the columns past it read
    the padding (the general gather and store)."""
    run(rng, 50, 70, 30, 30, 100, 8, 64, pad=pad)


def test_negative_offsets(rng):
    """Blocks starting before column 0 and before row 0 of the destination:
    the general gather and store, each element where it belongs."""
    run(rng, 40, 90, 20, 24, 90, 8, 32, row0=-3, col0=-5,
        grid=(kiln.cdiv(20, 8), kiln.cdiv(95, 32)))


def test_more_rows_than_the_destination(rng):
    """Rows gathered past the destination's last row are not written, also
    when the destination's rows end inside a block."""
    run(rng, 60, 48, 40, 37, 48, 16, 32, row0=0)
    run(rng, 60, 48, 40, 45, 48, 16, 32, row0=6)


@pytest.mark.parametrize("dtype", [np.float16, np.int32, np.int8])
def test_element_types(rng, dtype):
    """Other element widths: vectors of 16, 8 and 32 elements on AVX2."""
    table = (rng.standard_normal((80, 150)) * 20).astype(dtype)
    ids = rng.integers(-1, 81, 29).astype(np.int32)
    out = np.zeros((29, 150), dtype) + 7
    grid = (kiln.cdiv(29, 8), kiln.cdiv(150, 64))
    gather_rows[grid](table, ids, out, 29, 80, 150, 29, 150, 0, 0, BR=8, BD=64, STREAM=0,
                      PAD=0)
    ok = (ids >= 0) & (ids < 80)
    want = np.where(ok[:, None], table[np.clip(ids, 0, 79)], 0).astype(dtype)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("b", [0, 2, 3, -1])
def test_leading_unit_dimension(rng, b):
    """A tile stored as [1, BR, BD] into batch b of a 3-D destination: a
    batch outside it (3, -1) stores nothing; partial blocks as above."""
    batches, n, dim = 3, 21, 90
    table = rng.standard_normal((40, dim)).astype(np.float32)
    ids = rng.integers(-1, 41, n).astype(np.int32)
    out = np.full((batches, n, dim), np.nan, np.float32)
    gather_into_batch[(kiln.cdiv(n, 8), kiln.cdiv(dim, 64))](
        table, ids, out, n, 40, dim, batches, n, b, BR=8, BD=64)
    want = np.full((batches, n, dim), np.nan)
    if 0 <= b < batches:
        ok = (ids >= 0) & (ids < 40)
        want[b] = np.where(ok[:, None], table.astype(np.float64)[np.clip(ids, 0, 39)], 0)
    np.testing.assert_array_equal(out.astype(np.float64), want)


@pytest.mark.parametrize("ids", [
    [0, 1, 2, 3, 4, 5, 6, 12],      # the last id names a row the tile overwrites first
    [15, 14, 13, 12, 11, 10, 9, 8],  # the tile's own rows, reversed
    [3, -1, 0, 7, 6, 30, 2, 5],      # rows before the tile's, one outside each way
    [1, 2, 3, 4, 5, 6, 7, 0],        # only rows before the tile's: copied row by row
])
def test_stored_over_its_table(rng, ids):
    """The gathered rows stored into the table they come from (rows 8..15):
    every row is read before any is written, as the program says. Whether
    the row-by-row copy may be used is decided from the rows the ids name;
    the first case fails when the last id is left out of that range."""
    table = rng.standard_normal((24, 64)).astype(np.float32)
    ids = np.array(ids, np.int32)
    want = reference(table, ids, table.copy(), 8, 24, 64, 8, 0, (1, 1), 8, 64, 0.0)
    gather_rows[(1, 1)](table, ids, table, 8, 24, 64, 24, 64, 8, 0, BR=8, BD=64, STREAM=0,
                        PAD=0.0)
    np.testing.assert_array_equal(table.astype(np.float64), want)
