"""Register loops on the CPU (KilnToCPU's lowerRegisterLoop): a loop that
carries only tiles, updated element by element from loads, gathers and
arithmetic, and writes no memory, runs inside the walk over the elements, its
tiles in vector registers. Against float64 on fresh random inputs, sizes that
are not multiples of the tiles or the vectors, outputs poisoned before each
launch; each kernel is also checked to have taken (or not taken) that path."""
import re

import numpy as np
import pytest

import kiln
import kiln.language as kl
import kiln.ops
from conftest import assert_close, from_bf16_bits, to_bf16_bits

# A loop header's block arguments in the LLVM dialect: the induction
# variable, then the carried f32 vectors (or scalars, for a last dimension of
# odd size), several per tile and step of the walk in these kernels. Tiles
# lowered the usual way live in buffers: no loop carries more than one vector
# (a masked edge is assembled lane by lane in one), and these kernels have no
# dot.
CARRIED_FLOATS = re.compile(r"\^bb\d+\(%\d+: i64(, %\d+: (vector<\d+xf32>|f32)){2,}\)")


def in_registers(kernel):
    """Whether the lowered kernel carries floats around a loop."""
    return bool(CARRIED_FLOATS.search(kernel.ir("llvm-mlir")))


@kiln.jit
def decayed_sum(x, out, m, n, steps, sxm, sxn, decay,
                BM: kl.constexpr, BN: kl.constexpr):
    # out = sum_s decay^(steps-1-s) * x[rows, cols + s], zeros outside x.
    rows = kl.program_id(0) * BM + kl.arange(0, BM)
    cols = kl.program_id(1) * BN + kl.arange(0, BN)
    acc = kl.full((BM, BN), 0.0, kl.float32)
    for s in range(0, steps):
        c = cols[None, :] + s
        t = kl.load(x + rows[:, None] * sxm + c * sxn,
                    mask=(rows[:, None] < m) & (c < n), other=0.0)
        acc = acc * decay + t
    kl.store(out + rows[:, None] * n + cols[None, :], acc,
             mask=(rows[:, None] < m) & (cols[None, :] < n))


def decayed_ref(x, steps, decay):
    m, n = x.shape
    xd = np.concatenate([x.astype(np.float64), np.zeros((m, steps))], axis=1)
    acc = np.zeros((m, n))
    for s in range(steps):
        acc = acc * decay + xd[:, s:s + n]
    return acc


@pytest.mark.parametrize("shape", [(37, 70), (5, 3), (64, 64)])
@pytest.mark.parametrize("tile", [(16, 64), (4, 48), (8, 8), (3, 5)])
def test_loop_over_shifted_windows(rng, shape, tile):
    m, n = shape
    BM, BN = tile
    steps, decay = 9, 0.75
    x = rng.standard_normal((m, n)).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    grid = (kiln.cdiv(m, BM), kiln.cdiv(n, BN))
    decayed_sum[grid](x, out, m, n, steps, n, 1, decay, BM=BM, BN=BN)
    assert not np.isnan(out).any()
    assert_close(out, decayed_ref(x, steps, decay), 1e-5, 1e-5)
    assert in_registers(decayed_sum)


def test_loop_over_a_strided_view(rng):
    """A last stride that is not 1 (every other column of a wider array):
    the version of the loop that tests every vector, lane by lane."""
    m, n, steps, decay = 21, 45, 5, 0.5
    wide = rng.standard_normal((m, 2 * n)).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    decayed_sum[(kiln.cdiv(m, 8), kiln.cdiv(n, 32))](
        wide, out, m, n, steps, 2 * n, 2, decay, BM=8, BN=32)
    assert_close(out, decayed_ref(wide[:, ::2], steps, decay), 1e-5, 1e-5)


def test_zero_trips_keep_the_init(rng):
    m, n = 10, 20
    x = rng.standard_normal((m, n)).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    decayed_sum[(1, 1)](x, out, m, n, 0, n, 1, 0.5, BM=16, BN=32)
    assert (out == 0).all()


@kiln.jit
def moments(x, mean, var, m, n, steps, BM: kl.constexpr, BN: kl.constexpr):
    # Two carried tiles: over `steps` blocks of rows, the sum and the sum of
    # squares of x[s*m + rows, cols], in bf16 storage.
    rows = kl.program_id(0) * BM + kl.arange(0, BM)
    cols = kl.arange(0, BN)
    s1 = kl.zeros((BM, BN), kl.float32)
    s2 = kl.zeros((BM, BN), kl.float32)
    for s in range(0, steps):
        r = s * m + rows[:, None]
        t = kl.load(x + r * n + cols[None, :], mask=(rows[:, None] < m) & (cols[None, :] < n),
                    other=0.0).to(kl.float32)
        s1 += t
        s2 += t * t
    mu = s1 / steps
    mask = (rows[:, None] < m) & (cols[None, :] < n)
    kl.store(mean + rows[:, None] * n + cols[None, :], mu, mask=mask)
    kl.store(var + rows[:, None] * n + cols[None, :], s2 / steps - mu * mu, mask=mask)


def test_two_carried_tiles_from_bf16(rng):
    m, n, steps = 19, 40, 7
    bits = to_bf16_bits(rng.standard_normal((steps * m, n)).astype(np.float32))
    xs = from_bf16_bits(bits).astype(np.float64).reshape(steps, m, n)
    mean = np.full((m, n), np.nan, np.float32)
    var = np.full((m, n), np.nan, np.float32)
    moments[(kiln.cdiv(m, 8),)](kiln.bf16(bits), mean, var, m, n, steps, BM=8, BN=64)
    assert_close(mean, xs.mean(axis=0), 1e-5, 1e-5)
    assert_close(var, (xs * xs).mean(axis=0) - xs.mean(axis=0) ** 2, 1e-4, 1e-4)
    assert in_registers(moments)


@kiln.jit
def bag_of_rows(table, idx, out, rows_n, d, bags, per_bag, BB: kl.constexpr,
                BD: kl.constexpr):
    # out[b, :] = sum_j table[idx[b, j], :], a -1 (or out of range) index
    # reading zeros: gathers in the loop.
    b = kl.program_id(0) * BB + kl.arange(0, BB)
    cols = kl.program_id(1) * BD + kl.arange(0, BD)
    acc = kl.zeros((BB, BD), kl.float32)
    for j in range(0, per_bag):
        i = kl.load(idx + b * per_bag + j, mask=b < bags, other=-1)
        ok = (i >= 0) & (i < rows_n)
        acc += kl.load(table + i[:, None] * d + cols[None, :],
                       mask=ok[:, None] & (cols[None, :] < d), other=0.0)
    kl.store(out + b[:, None] * d + cols[None, :], acc,
             mask=(b[:, None] < bags) & (cols[None, :] < d))


@pytest.mark.parametrize("d,BD", [(50, 32), (16, 16), (7, 8)])
def test_gathers_in_the_loop(rng, d, BD):
    rows_n, bags, per_bag = 40, 23, 6
    table = rng.standard_normal((rows_n, d)).astype(np.float32)
    idx = rng.integers(-3, rows_n + 3, (bags, per_bag)).astype(np.int32)
    out = np.full((bags, d), np.nan, np.float32)
    bag_of_rows[(kiln.cdiv(bags, 8), kiln.cdiv(d, BD))](
        table, idx, out, rows_n, d, bags, per_bag, BB=8, BD=BD)
    ok = (idx >= 0) & (idx < rows_n)
    ref = (table.astype(np.float64)[np.where(ok, idx, 0)] * ok[..., None]).sum(axis=1)
    assert_close(out, ref, 1e-5, 1e-5)
    # (The row mask `ok[:, None]` makes the pointer load a gather of rows,
    # which the register loop reads in place.)
    assert in_registers(bag_of_rows)


@kiln.jit
def running_sum_stored(x, out, n, steps, B: kl.constexpr):
    # A store in the loop: not a register loop (the loop writes memory), and
    # each step reads what the one before stored.
    cols = kl.arange(0, B)
    acc = kl.zeros((B,), kl.float32)
    for s in range(0, steps):
        prev = kl.load(out + cols, mask=cols < n, other=0.0)
        acc = acc + kl.load(x + s * n + cols, mask=cols < n, other=0.0) + prev
        kl.store(out + cols, acc, mask=cols < n)


def test_a_loop_that_stores_is_not_in_registers(rng):
    n, steps = 37, 5
    x = rng.standard_normal((steps, n)).astype(np.float32)
    out = np.zeros(n, np.float32)
    running_sum_stored[(1,)](x, out, n, steps, B=64)
    acc = np.zeros(n)
    o = np.zeros(n)
    for s in range(steps):
        acc = acc + x[s] + o
        o = acc.copy()
    assert_close(out, o, 1e-5, 1e-5)
    assert not in_registers(running_sum_stored)


def depthwise_ref(x, w, b, stride, pad, dil):
    n, h, wd, c = x.shape
    kh, kw, _ = w.shape
    oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    xp = np.pad(x.astype(np.float64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    out = np.zeros((n, oh, ow, c)) + b
    for i in range(kh):
        for j in range(kw):
            hs, ws = i * dil, j * dil
            out += xp[:, hs:hs + stride * (oh - 1) + 1:stride,
                      ws:ws + stride * (ow - 1) + 1:stride, :] * w[i, j]
    return out


@pytest.mark.parametrize("k,stride,pad,dil", [(3, 1, 1, 1), (7, 1, 3, 1), (3, 2, 1, 1),
                                              (5, 1, 4, 2), (3, 1, 0, 1), (1, 1, 0, 1)])
@pytest.mark.parametrize("c,bw,bc", [(20, 32, 64), (64, 8, 16), (5, 3, 4)])
def test_depthwise_against_float64(rng, k, stride, pad, dil, c, bw, bc):
    """The depthwise kernel's column loop runs in registers (stride 1 reads
    windows of the image row, other strides gather): channels and widths not
    multiples of the blocks, two images (rows of one never read for the
    other), padding larger than the kernel's reach."""
    x = rng.standard_normal((2, 11, 13, c)).astype(np.float32)
    w = rng.standard_normal((k, k, c)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    got = kiln.ops.depthwise_conv2d(x, w, b, stride=stride, padding=pad, dilation=dil,
                                    block_w=bw, block_c=bc)
    assert not np.isnan(got).any()
    assert_close(got, depthwise_ref(x, w, b, stride, pad, dil), 1e-5, 1e-5)


@kiln.jit
def shared_chain(x, out, n, steps, DEPTH: kl.constexpr, B: kl.constexpr):
    # Each link uses the one before twice: a DAG of 2^DEPTH paths, which the
    # register loop computes once per value.
    cols = kl.arange(0, B)
    acc = kl.zeros((B,), kl.float32)
    for s in range(0, steps):
        t = kl.load(x + s * n + cols, mask=cols < n, other=0.0)
        for _ in kl.static_range(DEPTH):
            t = t * 0.5 + t * t * 0.0625
        acc += t
    kl.store(out + cols, acc, mask=cols < n)


def test_shared_subexpressions_are_computed_once(rng):
    n, steps, depth = 50, 3, 40
    x = rng.uniform(-1, 1, (steps, n)).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    shared_chain[(1,)](x, out, n, steps, DEPTH=depth, B=64)
    t = x.astype(np.float64)
    for _ in range(depth):
        t = t * 0.5 + t * t * 0.0625
    assert_close(out, t.sum(axis=0), 1e-5, 1e-6)
    assert in_registers(shared_chain)
    assert len(shared_chain.ir("llvm-mlir")) < 2_000_000


@kiln.jit
def padded_row_sums(x, out, m, n, steps, BM: kl.constexpr, BN: kl.constexpr,
                    PAD: kl.constexpr):
    # out[r] = sum over the tile's BN columns and `steps` blocks of rows of
    # x[s*m + r, c], PAD outside x: the padding is summed too, so lanes
    # past the columns (and rows past m) must read it.
    rows = kl.program_id(0) * BM + kl.arange(0, BM)
    cols = kl.program_id(1) * BN + kl.arange(0, BN)
    acc = kl.zeros((BM, BN), kl.float32)
    for s in range(0, steps):
        t = kl.load(x + (s * m + rows[:, None]) * n + cols[None, :],
                    mask=(rows[:, None] < m) & (cols[None, :] < n), other=PAD)
        acc += t * 0.5
    kl.store(out + kl.program_id(1) * m * 2 + rows, kl.sum(acc, axis=1), mask=rows < m * 2)


@pytest.mark.parametrize("m,n,BM,BN", [(13, 20, 4, 64), (8, 70, 8, 32), (5, 9, 2, 8),
                                       (6, 64, 3, 32)])
def test_a_tile_past_its_columns_reads_the_padding(rng, m, n, BM, BN):
    """A tile whose columns run past its view's (a block past the row, the
    last block partial): the loop's version with masked reads, the padding in
    the lanes outside (summed here, so each one shows), and in rows past m."""
    steps, pad = 3, 1.25
    x = rng.standard_normal((steps * m, n)).astype(np.float32)
    gm, gn = kiln.cdiv(m, BM), kiln.cdiv(n, BN)
    out = np.full((gn, 2 * m), np.nan, np.float32)
    padded_row_sums[(gm, gn)](x, out, m, n, steps, BM=BM, BN=BN, PAD=pad)
    xs = x.astype(np.float64).reshape(steps, m, n)
    wide = np.full((steps, gm * BM, gn * BN), pad)
    wide[:, :m, :n] = xs
    ref = np.full((gn, 2 * m), np.nan)
    sums = (wide.sum(axis=0) * 0.5).reshape(gm * BM, gn, BN).sum(axis=2).T
    ref[:, :gm * BM] = sums[:, :2 * m] if gm * BM > 2 * m else sums
    written = np.zeros((gn, 2 * m), bool)
    written[:, :min(gm * BM, 2 * m)] = True
    assert not np.isnan(out[written]).any()
    assert_close(out[written], ref[written], 1e-5, 1e-5)
    assert in_registers(padded_row_sums)


@kiln.jit
def row_sums_by_column(x, out, m, n, B: kl.constexpr):
    # out[r] = sum_s x[r, s] * 0.5: each step loads a [B, 1] column and reads
    # it as [B] (a reshape dropping a trailing unit dimension: its vectors
    # along B are lanes of the column, read one by one).
    rows = kl.program_id(0) * B + kl.arange(0, B)
    acc = kl.zeros((B,), kl.float32)
    for s in range(0, n):
        t = kl.load(x + rows[:, None] * n + s, mask=rows[:, None] < m, other=0.0)
        acc += kl.reshape(t, (B,)) * 0.5
    kl.store(out + rows, acc, mask=rows < m)


@pytest.mark.parametrize("m,n,B", [(37, 11, 16), (8, 5, 16), (70, 3, 64)])
def test_unit_dimension_dropped_in_the_loop(rng, m, n, B):
    x = rng.standard_normal((m, n)).astype(np.float32)
    out = np.full(m, np.nan, np.float32)
    row_sums_by_column[(kiln.cdiv(m, B),)](x, out, m, n, B=B)
    assert_close(out, x.astype(np.float64).sum(axis=1) * 0.5, 1e-5, 1e-5)
    assert in_registers(row_sums_by_column)


@kiln.jit
def gathered_sums(table, idx, out, rows_n, d, bags, per_bag, width,
                  BB: kl.constexpr, BD: kl.constexpr, PAD: kl.constexpr):
    # out[b, c] = sum_j table[idx[b, j], c] for the columns c of the tile
    # (PAD for a row outside the table or a column past d), written whole
    # into an output `width` >= d wide, so the padded columns show.
    b0 = kl.program_id(0) * BB
    c0 = kl.program_id(1) * BD
    vt = kl.make_view(table, (rows_n, d), (d, 1))
    vo = kl.make_view(out, (bags, width), (width, 1))
    at = b0 + kl.arange(0, BB)
    acc = kl.zeros((BB, BD), kl.float32)
    for j in range(0, per_bag):
        i = kl.load(idx + at * per_bag + j, mask=at < bags, other=-1)
        acc += kl.gather(vt, i, (c0,), shape=(BB, BD), other=PAD)
    kl.store(vo, acc, offsets=(b0, c0))


@pytest.mark.parametrize("d,BD", [(50, 32), (20, 64), (64, 32)])
def test_gathers_past_the_columns_in_the_loop(rng, d, BD):
    """kiln.gather in a register loop, its tile running past the table's
    columns (the masked version), rows outside the table: the padding in
    every lane outside."""
    rows_n, bags, per_bag, pad = 30, 21, 5, -0.75
    gn = kiln.cdiv(d, BD)
    width = gn * BD
    table = rng.standard_normal((rows_n, d)).astype(np.float32)
    idx = rng.integers(-2, rows_n + 2, (bags, per_bag)).astype(np.int32)
    out = np.full((bags, width), np.nan, np.float32)
    gathered_sums[(kiln.cdiv(bags, 8), gn)](table, idx, out, rows_n, d, bags, per_bag, width,
                                            BB=8, BD=BD, PAD=pad)
    wide = np.full((rows_n + 1, width), pad)
    wide[:rows_n, :d] = table
    ok = (idx >= 0) & (idx < rows_n)
    ref = wide[np.where(ok, idx, rows_n)].sum(axis=1)
    assert_close(out, ref, 1e-5, 1e-5)
    assert in_registers(gathered_sums)


# A register loop's result whose store follows it (through elementwise ops
# and a cast) is computed and stored per vector in the walk, with no tile
# buffer; where the store may overlap a view the loop reads, the vectors go
# to a tile stored after the walk, so that every read comes first.
@kiln.jit
def window_sum_bias_f16(x, bias, out, m, n, steps, BM: kl.constexpr, BN: kl.constexpr):
    rows = kl.program_id(0) * BM + kl.arange(0, BM)
    cols = kl.program_id(1) * BN + kl.arange(0, BN)
    acc = kl.zeros((BM, BN), kl.float32)
    for s in range(0, steps):
        c = cols[None, :] + s
        acc += kl.load(x + rows[:, None] * n + c, mask=(rows[:, None] < m) & (c < n), other=0.0)
    b = kl.load(bias + cols, mask=cols < n, other=0.0)
    kl.store(out + rows[:, None] * n + cols[None, :], (acc * 0.5 + b[None, :]).to(kl.float16),
             mask=(rows[:, None] < m) & (cols[None, :] < n))


@pytest.mark.parametrize("m,n,BM,BN", [(37, 70, 16, 64), (5, 3, 8, 8), (33, 48, 4, 48)])
def test_an_epilogue_stored_from_registers(rng, m, n, BM, BN):
    """A bias loaded after the loop, a scale and a cast to f16 stored from
    the walk: partial tiles in rows and columns."""
    steps = 4
    x = rng.standard_normal((m, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    out = np.full((m, n), np.nan, np.float16)
    window_sum_bias_f16[(kiln.cdiv(m, BM), kiln.cdiv(n, BN))](x, bias, out, m, n, steps,
                                                              BM=BM, BN=BN)
    assert not np.isnan(out).any()
    ref = decayed_ref(x, steps, 1.0) * 0.5 + bias.astype(np.float64)
    assert_close(out.astype(np.float64), ref, 2e-3, 2e-3)
    assert in_registers(window_sum_bias_f16)


@pytest.mark.parametrize("m,n", [(16, 64), (13, 50)])
def test_a_result_stored_over_its_input(rng, m, n):
    """out is x one row down (one program holds the whole array): row r's
    sum is stored over the row r + 1 that the next rows' sums read, so
    storing each vector as it is computed would change what later ones
    read. The tile overlaps the loop's view: stored after the walk."""
    steps, decay = 6, 0.5
    both = np.zeros((m + 1, n), np.float32)
    both[:m] = rng.standard_normal((m, n))
    ref = decayed_ref(both[:m], steps, decay)
    decayed_sum[(1, 1)](both[:m], both[1:], m, n, steps, n, 1, decay, BM=16, BN=64)
    assert_close(both[1:], ref, 1e-5, 1e-5)
    assert in_registers(decayed_sum)


@kiln.jit
def sum_then_clear(x, out, m, n, steps, BM: kl.constexpr, BN: kl.constexpr):
    # x is cleared between the loop that reads it and the store of the sum:
    # the loop must not move past that store.
    rows = kl.arange(0, BM)
    cols = kl.arange(0, BN)
    inside = (rows[:, None] < m) & (cols[None, :] < n)
    acc = kl.zeros((BM, BN), kl.float32)
    for s in range(0, steps):
        c = cols[None, :] + s
        acc += kl.load(x + rows[:, None] * n + c, mask=(rows[:, None] < m) & (c < n), other=0.0)
    kl.store(x + rows[:, None] * n + cols[None, :], kl.zeros((BM, BN), kl.float32), mask=inside)
    kl.store(out + rows[:, None] * n + cols[None, :], acc, mask=inside)


def test_a_store_between_the_loop_and_its_store(rng):
    m, n, steps = 11, 45, 5
    x = rng.standard_normal((m, n)).astype(np.float32)
    ref = decayed_ref(x, steps, 1.0)
    out = np.full((m, n), np.nan, np.float32)
    sum_then_clear[(1,)](x, out, m, n, steps, BM=16, BN=64)
    assert_close(out, ref, 1e-5, 1e-5)
    assert (x == 0).all()
    assert in_registers(sum_then_clear)


def test_sums_of_rows_stored_over_their_table(rng):
    """out is the table itself (one program holds every bag): bag b's sum is
    stored over row b, which other bags read. The pointer view's rows are
    unknown in number (the front end's 2^62), so no byte range shows the
    store apart from the reads: the sums go to a tile stored after the
    walk, every read first, as written."""
    bags = rows_n = 8
    d, per_bag = 32, 3
    table = rng.standard_normal((rows_n, d)).astype(np.float32)
    idx = rng.integers(0, rows_n, (bags, per_bag)).astype(np.int32)
    ref = table.astype(np.float64)[idx].sum(axis=1)
    bag_of_rows[(1, 1)](table, idx, table, rows_n, d, bags, per_bag, BB=8, BD=32)
    assert_close(table, ref, 1e-5, 1e-5)
    assert in_registers(bag_of_rows)


@kiln.jit
def rows_window_sum(x, out, m, n, steps, PAD: kl.constexpr, BM: kl.constexpr,
                    BN: kl.constexpr):
    # out[r, c] = sum_s x[r + s - 2, c] (PAD for rows outside x), summed in f32.
    r0 = kl.program_id(0) * BM
    c0 = kl.program_id(1) * BN
    vx = kl.make_view(x, (m, n), (n, 1))
    acc = kl.full((BM, BN), 0.0, kl.float32)
    for s in range(0, steps):
        t = kl.load(vx, offsets=(r0 + s - 2, c0), shape=(BM, BN), other=PAD)
        acc = acc + t.to(kl.float32)
    kl.store(kl.make_view(out, (m, n), (n, 1)), acc, offsets=(r0, c0))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.int32])
@pytest.mark.parametrize("pad", [0, 3])
def test_rows_outside_the_view_read_the_padding(rng, dtype, pad):
    """Rows above and below the array (every step shifts the window by a
    row): the version that reads whole vectors takes such a row's from a row
    of the padding value, per element type (1, 2 and 4 bytes)."""
    m, n, steps, BM, BN = 19, 96, 5, 8, 32
    x = (rng.standard_normal((m, n)) * 20).astype(dtype)
    out = np.full((m, n), np.nan, np.float32)
    rows_window_sum[(kiln.cdiv(m, BM), kiln.cdiv(n, BN))](x, out, m, n, steps, PAD=pad, BM=BM,
                                                           BN=BN)
    xp = np.concatenate([np.full((2, n), pad), x.astype(np.float64),
                         np.full((steps + BM, n), pad)])
    want = sum(xp[s:s + m] for s in range(steps))
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-3)
    assert in_registers(rows_window_sum)
