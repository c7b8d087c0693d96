"""The CPU micro-kernels of kl.dot on narrow floats: the FMA kernel on
operands widened to f32 once per dot (every x86-64 target), and AVX512-BF16's
vdpbf16ps (target x86-64-avx512-bf16, chosen explicitly). Against float64 on
fresh random inputs, with tile sizes that are not multiples of the vectors and
an odd K (the pairs' remainder step), outputs poisoned before each launch."""
import numpy as np
import pytest

import kiln
import kiln.language as kl
from conftest import assert_close, from_bf16_bits, to_bf16_bits
from kiln import runtime

FEATURES = set(runtime._ext.cpu_features().split())


@kiln.jit
def tiled_dot(a, b, c, m, n, k, BM: kl.constexpr, BN: kl.constexpr, BK: kl.constexpr,
              HALF: kl.constexpr):
    rows = kl.program_id(1) * BM + kl.arange(0, BM)
    cols = kl.program_id(0) * BN + kl.arange(0, BN)
    acc = kl.zeros((BM, BN), kl.float32)
    for k0 in range(0, k, BK):
        ks = k0 + kl.arange(0, BK)
        ta = kl.load(a + rows[:, None] * k + ks[None, :],
                     mask=(rows[:, None] < m) & (ks[None, :] < k), other=0.0)
        tb = kl.load(b + ks[:, None] * n + cols[None, :],
                     mask=(ks[:, None] < k) & (cols[None, :] < n), other=0.0)
        acc = kl.dot(ta, tb, acc)
    if HALF:
        acc = acc.to(kl.bfloat16).to(kl.float32)
    kl.store(c + rows[:, None] * n + cols[None, :], acc,
             mask=(rows[:, None] < m) & (cols[None, :] < n))


def operands(rng, dtype, m, n, k):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    if dtype == "bf16":
        ab, bb = to_bf16_bits(a), to_bf16_bits(b)
        return kiln.bf16(ab), kiln.bf16(bb), from_bf16_bits(ab), from_bf16_bits(bb)
    a16, b16 = a.astype(np.float16), b.astype(np.float16)
    return a16, b16, a16.astype(np.float32), b16.astype(np.float32)


def launch(a, b, m, n, k, **meta):
    c = np.full((m, n), np.nan, np.float32)
    grid = (kiln.cdiv(n, meta["BN"]), kiln.cdiv(m, meta["BM"]))
    tiled_dot[grid](a, b, c, m, n, k, **meta)
    return c


# (BM, BN, BK): 16 f32 lanes, 8 (BN 24: ymm), 4 (BN 12: xmm) and 2 (BN 6:
# scalar-ish, the FMA kernel under every target); BK odd, 2 and 1.
TILES = [(16, 64, 32), (13, 64, 33), (8, 24, 7), (6, 12, 5), (7, 6, 3), (5, 16, 2), (4, 16, 1)]


@pytest.mark.parametrize("target", ["host", "x86-64-avx512-bf16", "x86-64-avx2"])
@pytest.mark.parametrize("tile", TILES)
def test_narrow_dot_matches_float64(rng, monkeypatch, target, tile):
    needs = {"x86-64-avx512-bf16": "avx512bf16", "x86-64-avx2": "avx2"}.get(target)
    monkeypatch.setenv("KILN_TARGET", target)
    m, n, k = 45, 53, 71
    BM, BN, BK = tile
    for dtype in ("bf16", "f16"):
        a, b, af, bf = operands(rng, dtype, m, n, k)
        if needs and needs not in FEATURES:
            # Compiled, but refused at load by this machine, naming the feature.
            with pytest.raises((kiln.BundleError, kiln.LaunchError), match=needs):
                launch(a, b, m, n, k, BM=BM, BN=BN, BK=BK, HALF=False)
            return
        ref = af.astype(np.float64) @ bf.astype(np.float64)
        mag = np.abs(af).astype(np.float64) @ np.abs(bf).astype(np.float64)
        got = launch(a, b, m, n, k, BM=BM, BN=BN, BK=BK, HALF=False)
        assert not np.isnan(got).any()
        # f32 sums of exact products: within a few ulps of the magnitudes.
        assert (np.abs(got - ref) <= 4e-6 * mag + 1e-30).all()
        got = launch(a, b, m, n, k, BM=BM, BN=BN, BK=BK, HALF=True)
        assert_close(got, ref, 2 ** -8 + 1e-5, 1e-5 * mag.max())


def test_vdpbf16ps_is_used_and_flushes_subnormals(monkeypatch):
    """x86-64-avx512-bf16 runs the dot on vdpbf16ps, and the instruction's
    semantics come with it: subnormal bf16 inputs count as zero (the FMA
    kernel keeps them). Inf and NaN propagate on both."""
    BM, BN, BK = 16, 64, 32
    m, n, k = 16, 64, 32
    a = np.zeros((m, k), np.float32)
    b = np.zeros((k, n), np.float32)
    a[0, 3], b[3, 0] = 2.0 ** -130, 2.0 ** 100      # a subnormal times a large
    a[1, 4], b[4, 1] = np.inf, 1.0
    a[2, 5], b[5, 2] = np.nan, 1.0
    a[3, 6], b[6, 3] = 3.0, 5.0
    ab, bb = kiln.bf16(to_bf16_bits(a)), kiln.bf16(to_bf16_bits(b))
    results = {}
    for target in ("x86-64-avx512", "x86-64-avx512-bf16"):
        monkeypatch.setenv("KILN_TARGET", target)
        ck = tiled_dot.warmup(ab, bb, np.zeros((m, n), np.float32), m, n, k,
                              BM=BM, BN=BN, BK=BK, HALF=False, grid=(1, 1))
        assert ("vdpbf16ps" in ck.asm) == target.endswith("bf16")
        if target.endswith("bf16") and "avx512bf16" not in FEATURES:
            continue
        if "avx512f" not in FEATURES:
            continue
        results[target] = launch(ab, bb, m, n, k, BM=BM, BN=BN, BK=BK, HALF=False)
    for target, c in results.items():
        assert c[0, 0] == (0.0 if target.endswith("bf16") else 2.0 ** -30)
        assert c[3, 3] == 15.0
        # Row 1 is inf times B's row 4: inf where that is 1, inf * 0 = NaN elsewhere.
        assert c[1, 1] == np.inf and np.isnan(np.delete(c[1], 1)).all()
        assert np.isnan(c[2]).all()
        rest = np.ones_like(c, bool)
        rest[[1, 2]] = False
        rest[0, 0] = rest[3, 3] = False
        assert (c[rest] == 0).all()


@kiln.jit
def transpose_tile(x, out, R: kl.constexpr, C: kl.constexpr):
    r = kl.arange(0, R)
    c = kl.arange(0, C)
    t = kl.load(x + r[:, None] * C + c[None, :])
    kl.store(out + c[:, None] * R + r[None, :], kl.trans(t))


@pytest.mark.parametrize("dtype", ["f32", "bf16", "i8", "f64"])
@pytest.mark.parametrize("shape", [(64, 64), (32, 48), (48, 16), (8, 12), (4, 4), (6, 10), (16, 1)])
def test_transpose_in_blocks_is_exact(rng, dtype, shape):
    """kl.trans of a 2-D tile: square blocks of the vector width transposed by
    shuffles (both dimensions multiples of 4 or more), per element otherwise.
    Bit-exact against numpy, NaN payloads and all."""
    R, C = shape
    if dtype == "bf16":
        bits = rng.integers(0, 1 << 16, (R, C), dtype=np.uint16)
        x, out = kiln.bf16(bits), kiln.bf16(np.zeros((C, R), np.uint16))
        transpose_tile[(1,)](x, out, R=R, C=C)
        assert np.array_equal(out.array, bits.T)
        return
    np_dtype = {"f32": np.float32, "i8": np.int8, "f64": np.float64}[dtype]
    if dtype == "i8":
        x = rng.integers(-128, 128, (R, C)).astype(np.int8)
    else:
        x = rng.standard_normal((R, C)).astype(np_dtype)
    out = np.full((C, R), 7, np_dtype)
    transpose_tile[(1,)](x, out, R=R, C=C)
    assert np.array_equal(out, x.T)


@kiln.jit
def dot_then_overwrite(a, b, c, M: kl.constexpr, N: kl.constexpr, K: kl.constexpr):
    va = kl.make_view(a, (M, K), (K, 1))
    vb = kl.make_view(b, (K, N), (N, 1))
    vc = kl.make_view(c, (M, N), (N, 1))
    ta = kl.load(va, offsets=(0, 0), shape=(M, K))
    tb = kl.load(vb, offsets=(0, 0), shape=(K, N))
    kl.store(va, kl.zeros((M, K), kl.float32), offsets=(0, 0))   # after A's load
    kl.store(vc, kl.dot(ta, tb), offsets=(0, 0))


def test_dot_reads_its_lhs_tile_where_the_load_was(rng):
    """A dot's A tile may be read in place from the view (an interior tile
    loaded for the dot alone), but not past a store between the load and the
    dot: that A is the one loaded, not the zeros written over it."""
    M, N, K = 16, 32, 24
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    ref = a.astype(np.float64) @ b
    c = np.full((M, N), np.nan, np.float32)
    a_dev = a.copy()
    dot_then_overwrite[(1,)](a_dev, b, c, M=M, N=N, K=K)
    assert (a_dev == 0).all()
    assert_close(c, ref, 1e-5, 1e-5)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_conv2d_reads_gathered_pixels_in_place(rng, dtype):
    """kiln.ops.conv2d's A tile (input pixels gathered per tap, padding pixels
    reading zeros) feeds the dot straight from the input when its channels are
    inside it (C a multiple of block_c): rows of padding pixels are zeros, rows
    of image pixels the input's. Sizes leave ragged pixel tiles."""
    N, H, W, C, OC = 2, 9, 7, 64, 24
    x = rng.standard_normal((N, H, W, C)).astype(np.float32)
    w = rng.standard_normal((3, 3, C, OC)).astype(np.float32)
    if dtype == "bf16":
        xb, wb = to_bf16_bits(x), to_bf16_bits(w)
        args = kiln.bf16(xb), kiln.bf16(wb)
        x, w = from_bf16_bits(xb), from_bf16_bits(wb)
    else:
        args = x, w
    out = kiln.ops.conv2d(*args, None, stride=1, padding=1)
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    ref = np.zeros((N, H, W, OC))
    for ky in range(3):
        for kx in range(3):
            ref += xp[:, ky:ky + H, kx:kx + W] @ w[ky, kx].astype(np.float64)
    mag = np.zeros((N, H, W, OC))
    for ky in range(3):
        for kx in range(3):
            mag += np.abs(xp[:, ky:ky + H, kx:kx + W]) @ np.abs(w[ky, kx].astype(np.float64))
    assert not np.isnan(out).any()
    assert (np.abs(out - ref) <= 1e-5 * mag + 1e-6).all()


@kiln.jit
def dot_rhs_block(a, b, c, kb, nrows, stride, M: kl.constexpr, N: kl.constexpr,
                  K: kl.constexpr, OVERWRITE: kl.constexpr):
    va = kl.make_view(a, (M, K), (K, 1))
    vb = kl.make_view(b, (2, nrows, N), (nrows * stride, stride, 1))
    vc = kl.make_view(c, (M, N), (N, 1))
    tb = kl.reshape(kl.load(vb, offsets=(1, kb, 0), shape=(1, K, N)), (K, N))
    if OVERWRITE:  # a store between B's load and the dot: B is the tile loaded
        kl.store(vb, kl.zeros((1, K, N), kl.float32), offsets=(1, kb, 0))
    kl.store(vc, kl.dot(kl.load(va, offsets=(0, 0), shape=(M, K)), tb), offsets=(0, 0))


# (row stride of B's view beyond N, first row, rows in the view): in place
# (rows adjacent, inside), rows apart (copied), past the view's end (copied,
# zeros), before its start.
@pytest.mark.parametrize("gap,kb,nrows", [(0, 3, 40), (5, 3, 40), (0, 30, 40), (0, -4, 40)])
@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("M,N,K", [(13, 24, 17), (6, 64, 32)])
def test_dot_reads_its_rhs_block_in_place(rng, gap, kb, nrows, overwrite, M, N, K):
    """An f32 dot's B tile loaded for the dot alone is read from its view
    when it is interior and its rows are adjacent (row stride N: one block of
    memory, as attention's value tiles); otherwise from the tile loaded (rows
    apart, rows outside the view reading zeros, or a store after the load)."""
    S = N + gap
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((2, nrows, S)).astype(np.float32)
    block = np.zeros((K, N))
    for r in range(K):
        if 0 <= kb + r < nrows:
            block[r] = b[1, kb + r, :N]
    c = np.full((M, N), np.nan, np.float32)
    dot_rhs_block[(1,)](a, b, c, kb, nrows, S, M=M, N=N, K=K, OVERWRITE=int(overwrite))
    assert not np.isnan(c).any()
    assert_close(c, a.astype(np.float64) @ block, 1e-5, 1e-5)


@kiln.jit
def dot_rhs_rows(a, b, c, r0, c0, nr, nc, M: kl.constexpr, N: kl.constexpr, R: kl.constexpr,
                 C: kl.constexpr):
    va = kl.make_view(a, (M, R * C), (R * C, 1))
    vb = kl.make_view(b, (nr, nc, N), (nc * N, N, 1))
    vc = kl.make_view(c, (M, N), (N, 1))
    tb = kl.reshape(kl.load(vb, offsets=(r0, c0, 0), shape=(R, C, N)), (R * C, N))
    kl.store(vc, kl.dot(kl.load(va, offsets=(0, 0), shape=(M, R * C)), tb), offsets=(0, 0))


# (first row, first column, rows and columns of the view): the tile's rows
# one block of memory (in place; at the view's end too), the view's rows
# longer than the tile's (copied), past the view's end (copied, zeros).
@pytest.mark.parametrize("r0,c0,nr,nc", [(2, 0, 9, 5), (6, 0, 9, 5), (2, 0, 9, 7), (1, 2, 9, 7),
                                         (7, 0, 9, 5)])
def test_dot_reads_an_rhs_of_several_row_dimensions_in_place(rng, r0, c0, nr, nc):
    """An rhs [R, C, N] reshaped to [R C, N] (a convolution's R kernel rows
    of C channels) is read in place when it is one block of memory: the view's
    rows C long, the tile inside it."""
    M, N, R, C = 11, 24, 3, 5
    a = rng.standard_normal((M, R * C)).astype(np.float32)
    b = rng.standard_normal((nr, nc, N)).astype(np.float32)
    block = np.zeros((R, C, N))
    for i in range(R):
        for j in range(C):
            if r0 + i < nr and c0 + j < nc:
                block[i, j] = b[r0 + i, c0 + j]
    c = np.full((M, N), np.nan, np.float32)
    dot_rhs_rows[(1,)](a, b, c, r0, c0, nr, nc, M=M, N=N, R=R, C=C)
    assert not np.isnan(c).any()
    assert_close(c, a.astype(np.float64) @ block.reshape(R * C, N), 1e-5, 1e-5)


@kiln.jit
def dot_of_regrouped_tile(a, b, c, R: kl.constexpr, S: kl.constexpr, N: kl.constexpr):
    va = kl.make_view(a, (2 * R, S), (S, 1))
    vb = kl.make_view(b, (S // 2, N), (N, 1))
    vc = kl.make_view(c, (2 * R, N), (N, 1))
    t = kl.load(va, offsets=(R, 0), shape=(R, S))            # rows R .. 2R of a
    lhs = kl.reshape(t, (2 * R, S // 2))                      # each row split in two
    kl.store(vc, kl.dot(lhs, kl.load(vb, offsets=(0, 0), shape=(S // 2, N))), offsets=(0, 0))


@kiln.jit
def dot_of_unit_reshaped_tile(a, b, c, M: kl.constexpr, K: kl.constexpr, N: kl.constexpr):
    va = kl.make_view(a, (2, M, K), (M * K, K, 1))
    vb = kl.make_view(b, (K, N), (N, 1))
    vc = kl.make_view(c, (M, N), (N, 1))
    lhs = kl.reshape(kl.load(va, offsets=(1, 0, 0), shape=(1, M, K)), (M, K))
    kl.store(vc, kl.dot(lhs, kl.load(vb, offsets=(0, 0), shape=(K, N))), offsets=(0, 0))


def test_dot_of_a_reshaped_load(rng):
    """A dot's lhs that is a reshape of a load: read in place only when the
    reshape drops unit dimensions ([1, M, K] -> [M, K]); a reshape that
    regroups elements ([R, S] -> [2R, S/2]) goes through the loaded tile."""
    R, S, N = 16, 32, 16
    a = rng.standard_normal((2 * R, S)).astype(np.float32)
    b = rng.standard_normal((S // 2, N)).astype(np.float32)
    c = np.full((2 * R, N), np.nan, np.float32)
    dot_of_regrouped_tile[(1,)](a, b, c, R=R, S=S, N=N)
    assert_close(c, a[R:].reshape(2 * R, S // 2).astype(np.float64) @ b, 1e-5, 1e-5)
    M, K = 16, 32
    a3 = rng.standard_normal((2, M, K)).astype(np.float32)
    b3 = rng.standard_normal((K, N)).astype(np.float32)
    c3 = np.full((M, N), np.nan, np.float32)
    dot_of_unit_reshaped_tile[(1,)](a3, b3, c3, M=M, K=K, N=N)
    assert_close(c3, a3[1].astype(np.float64) @ b3, 1e-5, 1e-5)


@kiln.jit
def gathered_nt_dot(q, kv, idx, c, out, m, n_rows, k, BM: kl.constexpr, BN: kl.constexpr,
                    BK: kl.constexpr, ACC: kl.constexpr):
    """q [m, k] times the transpose of kv's rows idx[0:BN] ([BN, k]): the
    shape of DeepSeek sparse attention's q . k^T over gathered key rows."""
    rows = kl.arange(0, BM)
    ks = kl.arange(0, BK)
    cols = kl.arange(0, BN)
    tq = kl.load(q + rows[:, None] * k + ks[None, :],
                 mask=(rows[:, None] < m) & (ks[None, :] < k), other=0.0)
    r = kl.load(idx + cols)
    tk = kl.load(kv + r[:, None] * k + ks[None, :],
                 mask=(r[:, None] < n_rows) & (ks[None, :] < k), other=0.0)
    if ACC:
        acc = kl.load(c + rows[:, None] * BN + cols[None, :], mask=rows[:, None] < m, other=0.0)
    else:
        acc = kl.zeros((BM, BN), kl.float32)
    s = kl.dot(tq, kl.trans(tk), acc)
    kl.store(out + rows[:, None] * BN + cols[None, :], s, mask=rows[:, None] < m)


def nt_operands(rng, dtype, *shapes):
    """Random operands of `shapes` in `dtype` (f32, bf16 or f16): the launch's
    arguments and their values as float32 (rounded to the type)."""
    values = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    if dtype == "bf16":
        bits = [to_bf16_bits(v) for v in values]
        return [kiln.bf16(b) for b in bits], [from_bf16_bits(b) for b in bits]
    if dtype == "f16":
        args = [v.astype(np.float16) for v in values]
        return args, [a.astype(np.float32) for a in args]
    return values, values


# (BM, BN, BK): blocks of rows and of key rows with remainders (2 x 4 on
# AVX2, 4 x 4 on AVX-512), K a multiple of the vectors and >= 8 BM.
@pytest.mark.parametrize("tile", [(16, 64, 576), (3, 5, 64), (7, 13, 128), (1, 1, 32)])
@pytest.mark.parametrize("acc", [False, True])
@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
def test_dot_of_a_transposed_tile_reads_its_rows(rng, tile, acc, dtype):
    """dot(a, trans(x)) with x not a plain load (here gathered rows) and K
    long against a's rows is computed without transposing x: each element a
    dot product of two rows read along K (emitDotNT), summed across lanes;
    bf16 and f16 operands widened to f32 first."""
    BM, BN, BK = tile
    m, n_rows, k = BM - (BM > 1), 300, BK - 8 * (BK > 32)   # ragged m and k
    (q_arg, kv_arg), (q, kv) = nt_operands(rng, dtype, (m, k), (n_rows, k))
    idx = rng.integers(0, n_rows, BN).astype(np.int32)
    idx[-1] = n_rows + 5                                   # a row outside: zeros
    c = rng.standard_normal((BM, BN)).astype(np.float32)
    out = np.full((BM, BN), np.nan, np.float32)
    gathered_nt_dot[(1,)](q_arg, kv_arg, idx, c, out, m, n_rows, k, BM=BM, BN=BN, BK=BK, ACC=acc)
    rows = np.where((idx < n_rows)[:, None], kv[np.minimum(idx, n_rows - 1)], 0.0)
    ref = q.astype(np.float64) @ rows.astype(np.float64).T
    if acc:
        ref = ref + c[:m]
    mag = np.abs(q).astype(np.float64) @ np.abs(rows).astype(np.float64).T
    got = out[:m]
    assert not np.isnan(got).any()
    assert (np.abs(got - ref) <= 4e-6 * (mag + np.abs(c[:m]) * acc) + 1e-30).all()
    # (That no transpose is made: test/Conversion/KilnToCPU/dot-nt.mlir.)


@kiln.jit
def loaded_nt_dot(q, kv, out, scratch, m, n_rows, k, r0, BM: kl.constexpr, BN: kl.constexpr,
                  BK: kl.constexpr, STORE: kl.constexpr):
    """q [m, k] times the transpose of kv's rows r0 .. r0 + BN ([BN, k], a
    plain load: decoding attention's key tile). STORE: a store between the
    load and the dot (the rows are then not read in place)."""
    rows = kl.arange(0, BM)
    ks = kl.arange(0, BK)
    cols = r0 + kl.arange(0, BN)
    tq = kl.load(q + rows[:, None] * k + ks[None, :],
                 mask=(rows[:, None] < m) & (ks[None, :] < k), other=0.0)
    tk = kl.load(kv + cols[:, None] * k + ks[None, :],
                 mask=(cols[:, None] < n_rows) & (ks[None, :] < k), other=0.0)
    if STORE:
        kl.store(scratch + rows, rows)
    s = kl.dot(tq, kl.trans(tk), kl.zeros((BM, BN), kl.float32))
    kl.store(out + rows[:, None] * BN + kl.arange(0, BN)[None, :], s, mask=rows[:, None] < m)


# BM <= 4 rows read each key row once, from its view where the tile lies
# inside kv (r0 = 7: rows 7 .. 7 + BN), else from the load's tile (r0 near
# the end: rows past it read zeros); BM = 6 and a store between the load and
# the dot take the copy.
@pytest.mark.parametrize("BM,BN,BK", [(1, 64, 128), (2, 5, 64), (3, 13, 128), (4, 64, 128),
                                      (6, 16, 128)])
@pytest.mark.parametrize("r0", [7, 290])
@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("store", [0, 1])
def test_dot_of_a_transposed_load_reads_its_rows_in_place(rng, BM, BN, BK, r0, dtype, store):
    m, n_rows, k = BM, 300, BK
    (q_arg, kv_arg), (q, kv) = nt_operands(rng, dtype, (m, k), (n_rows, k))
    out = np.full((BM, BN), np.nan, np.float32)
    scratch = np.zeros(BM, np.int32)
    loaded_nt_dot[(1,)](q_arg, kv_arg, out, scratch, m, n_rows, k, r0, BM=BM, BN=BN, BK=BK,
                        STORE=store)
    idx = r0 + np.arange(BN)
    rows = np.where((idx < n_rows)[:, None], kv[np.minimum(idx, n_rows - 1)], 0.0)
    ref = q.astype(np.float64) @ rows.astype(np.float64).T
    mag = np.abs(q).astype(np.float64) @ np.abs(rows).astype(np.float64).T
    assert not np.isnan(out).any()
    assert (np.abs(out - ref) <= 4e-6 * mag + 1e-30).all()
    assert (scratch == np.arange(BM) * store).all()
