"""CPU lowering edge cases an adversarial review found: each failed to
compile or to load (an internal error or an undefined compiler-rt symbol)
before. Against float64 / exact references."""
import math

import numpy as np
import pytest

import kiln
import kiln.language as kl
from conftest import KILNC, assert_close, from_bf16_bits, to_bf16_bits


@kiln.jit
def bool_flags_as_mask(x, flags, out, n, B: kl.constexpr):
    offs = kl.program_id(0) * B + kl.arange(0, B)
    m = offs < n
    f = kl.load(flags + offs, mask=m, other=False)
    kl.store(out + offs, kl.where(f, kl.load(x + offs, mask=m), 0.0), mask=m)


def test_bool_load_with_a_false_padding(rng):
    """A bool load's padding is a byte in memory, as its elements are
    ('vector.maskedload' ... pass_thru of another type before)."""
    x = rng.random(37).astype(np.float32)
    flags = rng.random(37) > 0.5
    out = np.full(37, np.nan, np.float32)
    bool_flags_as_mask[(3,)](x, flags, out, 37, B=16)
    assert_close(out, np.where(flags, x, 0).astype(np.float64), 0, 0)


@kiln.jit
def to_f16(x, out, n, B: kl.constexpr):
    offs = kl.arange(0, B)
    m = offs < n
    kl.store(out + offs, kl.load(x + offs, mask=m).to(kl.float16), mask=m)


@kiln.jit
def to_bf16(x, out, n, B: kl.constexpr):
    offs = kl.arange(0, B)
    m = offs < n
    kl.store(out + offs, kl.load(x + offs, mask=m).to(kl.bfloat16), mask=m)


def test_float64_to_half_types_round_once(rng):
    """f64 -> f16/bf16 called compiler-rt's __truncdfhf2/__truncdfbf2,
    which the loader does not provide. They are now rounded through f32
    with round-to-odd, which gives the correctly rounded result where
    rounding twice to nearest would not (1 + 2^-11 + 2^-40 must round up
    in f16, 1 + 2^-8 + 2^-30 in bf16)."""
    x = np.concatenate([rng.standard_normal(40) * 1e3,
                        [65504.0, 65519.99, 65520.0, 1e300, -1e300, np.inf, -np.inf, 6e-8,
                         2.9802322387695312e-08, 1e-310, -0.0, 1 + 2**-11, 1 + 2**-11 + 2**-40,
                         -(1 + 2**-11 + 2**-40)]])
    out = np.full(x.size, np.nan, np.float16)
    with np.errstate(over="ignore"):
        ref = x.astype(np.float16)  # numpy rounds f64 to f16 directly
        to_f16[(1,)](x, out, x.size, B=64)
    assert np.array_equal(out.view(np.uint16), ref.view(np.uint16)), (out, ref)

    hard = np.array([1 + 2**-8 + 2**-30, -(1 + 2**-8 + 2**-30), 1 + 2**-8, 1 + 3 * 2**-8,
                     3.0, 1e-45, 1e39, np.nan])
    bits = np.zeros(hard.size, np.uint16)
    to_bf16[(1,)](hard, kiln.bf16(bits), hard.size, B=8)
    # 1 + 2^-8 is a tie (to even: 1.0); a hair above it rounds up to
    # 1 + 2^-7; 1e39 overflows to inf; 1e-45 to the smallest subnormal's
    # neighbour below half of it: 0.
    assert list(bits[:7]) == [0x3F81, 0xBF81, 0x3F80, 0x3F82, 0x4040, 0x0000, 0x7F80], \
        [hex(b) for b in bits]
    assert np.isnan(from_bf16_bits(bits[7:]))[0]


@kiln.jit
def bf16_rounding_ops(x, out, n, B: kl.constexpr):
    offs = kl.arange(0, B)
    m = offs < n
    v = kl.load(x + offs, mask=m)
    kl.store(out + offs, kl.floor(v) + kl.ceil(v) + v // 2.0, mask=m)


def test_bf16_floor_ceil_and_floor_division(rng):
    """floor/ceil on bf16 rounded their result back with __truncsfbf2
    (undefined when the kernel loaded); now computed in f32."""
    xb = to_bf16_bits(rng.standard_normal(20).astype(np.float32) * 10)
    out = np.zeros(20, np.uint16)
    bf16_rounding_ops[(1,)](kiln.bf16(xb), kiln.bf16(out), 20, B=32)
    v = from_bf16_bits(xb).astype(np.float64)
    # Each term is an integer below 2^8 in magnitude: exact in bf16; the
    # kernel rounds each sum in bf16 as the reference does in float32 then bf16.
    fl, ce, fd = (to_bf16_bits(t.astype(np.float32)) for t in
                  (np.floor(v), np.ceil(v), np.floor(v / 2)))
    s1 = to_bf16_bits((from_bf16_bits(fl) + from_bf16_bits(ce)).astype(np.float32))
    ref = to_bf16_bits((from_bf16_bits(s1) + from_bf16_bits(fd)).astype(np.float32))
    assert (out == ref).all(), (out, ref)


@kiln.jit
def erf_kernel(x, out, n, B: kl.constexpr):
    offs = kl.arange(0, B)
    m = offs < n
    kl.store(out + offs, kl.erf(kl.load(x + offs, mask=m)), mask=m)


def test_erf_in_float64():
    """math.erf on f64 had no lowering (a translation error); it calls libm."""
    x = np.linspace(-4, 4, 50)
    out = np.full(50, np.nan)
    erf_kernel[(1,)](x, out, 50, B=64)
    assert_close(out, np.array([math.erf(v) for v in x]), 1e-15, 1e-16)


@kiln.jit
def f16_to_bf16(x, out, B: kl.constexpr):
    offs = kl.arange(0, B)
    kl.store(out + offs, kl.load(x + offs).to(kl.bfloat16))


@kiln.jit
def bf16_to_f16(x, out, B: kl.constexpr):
    offs = kl.arange(0, B)
    kl.store(out + offs, kl.load(x + offs).to(kl.float16))


@kiln.jit
def to_bool(x, out, B: kl.constexpr):
    offs = kl.arange(0, B)
    kl.store(out + offs, kl.load(x + offs).to(kl.int1))


def test_half_type_conversions_and_bool_casts():
    """f16 <-> bf16 (both 16 bits) took a truncf between equal widths, a
    verifier error: now exactly to f32, then one rounding. A cast to bool is
    `!= 0` as NumPy's astype(bool) (NaN true), not an integer's low bit
    (2 was False) or a float converted to a 1-bit integer."""
    x = np.array([1.0, -2.5, 65504, 1e-7, 3.14159, 0.0, np.inf, np.nan], np.float16)
    out = np.zeros(8, np.uint16)
    f16_to_bf16[(1,)](x, kiln.bf16(out), B=8)
    assert (out == to_bf16_bits(x.astype(np.float32))).all()
    xb = to_bf16_bits(np.array([1.0, -2.5, 1e5, 1e-7, 3.14159, 0.0, -np.inf, 7e4], np.float32))
    out16 = np.zeros(8, np.float16)
    bf16_to_f16[(1,)](kiln.bf16(xb), out16, B=8)
    with np.errstate(over="ignore"):
        assert np.array_equal(out16, from_bf16_bits(xb).astype(np.float16))
    for dt, vals in ((np.float32, [0.0, 0.5, -0.0, np.nan, 2.0, 1e-30, -3, 0]),
                     (np.int32, [0, 1, 2, -1, 0, 256, 3, 0]),
                     (np.int16, [0, 1, 2, -1, 0, 256, 3, 0])):
        xs = np.array(vals, dt)
        got = np.zeros(8, np.bool_)
        to_bool[(1,)](xs, got, B=8)
        assert (got == xs.astype(bool)).all(), (dt, got)


F16_ADD = """
kiln.func @f16add(%a: !kiln.ptr<f16> {kiln.name = "a"}, %o: !kiln.ptr<f16> {kiln.name = "o"},
                  %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %va = kiln.make_view %a, [%n], [%c1] : !kiln.ptr<f16> -> !kiln.view<1xf16>
  %vo = kiln.make_view %o, [%n], [%c1] : !kiln.ptr<f16> -> !kiln.view<1xf16>
  %x = kiln.load %va[%c0] : !kiln.view<1xf16> -> tensor<8xf16>
  %y = arith.addf %x, %x : tensor<8xf16>
  kiln.store %y, %vo[%c0] : tensor<8xf16> -> !kiln.view<1xf16>
  kiln.return
}
"""

F16_DOT = """
kiln.func @f16dot(%a: !kiln.ptr<f16> {kiln.name = "a"}, %o: !kiln.ptr<f16> {kiln.name = "o"},
                  %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %va = kiln.make_view %a, [%n, %n], [%n, %c1] : !kiln.ptr<f16> -> !kiln.view<2xf16>
  %vo = kiln.make_view %o, [%n, %n], [%n, %c1] : !kiln.ptr<f16> -> !kiln.view<2xf16>
  %x = kiln.load %va[%c0, %c0] : !kiln.view<2xf16> -> tensor<3x8xf16>
  %w = kiln.load %va[%c0, %c0] : !kiln.view<2xf16> -> tensor<8x5xf16>
  %z = arith.constant dense<0.0> : tensor<3x5xf16>
  %y = kiln.dot %x, %w, %z : tensor<3x8xf16>, tensor<8x5xf16> -> tensor<3x5xf16>
  kiln.store %y, %vo[%c0, %c0] : tensor<3x5xf16> -> !kiln.view<2xf16>
  kiln.return
}
"""

BF16_ARGMAX = """
kiln.func @bf16argmax(%a: !kiln.ptr<bf16> {kiln.name = "a"}, %o: !kiln.ptr<i32> {kiln.name = "o"},
                      %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %va = kiln.make_view %a, [%n, %n], [%n, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %x = kiln.load %va[%c0, %c0] : !kiln.view<2xbf16> -> tensor<4x8xbf16>
  %r = kiln.reduce argmax %x [1] : tensor<4x8xbf16> -> tensor<4xi32>
  %vo = kiln.make_view %o, [%n], [%c1] : !kiln.ptr<i32> -> !kiln.view<1xi32>
  kiln.store %r, %vo[%c0] : tensor<4xi32> -> !kiln.view<1xi32>
  kiln.return
}
"""


def _bundle(tmp_path, name, text, target):
    import subprocess
    src, out = tmp_path / f"{name}.mlir", tmp_path / f"{name}-{target}.kiln"
    src.write_text(text)
    subprocess.run([KILNC, str(src), "--target", target, "-o", str(out)], check=True)
    return kiln.load_bundle(str(out))


def test_half_precision_without_conversion_instructions(rng, tmp_path):
    """Where x86 lacks an instruction (f16 on the x86-64-sse target, which
    has no F16C; bf16 rounding; an f16 FMA, which LLVM computes in f64), LLVM
    calls compiler-rt, which the loader does not provide: such bundles
    failed to load ("undefined symbol: __extendhfsf2"). Every CPU bundle now
    links Kiln's own conversions, and f16/bf16 dot accumulators are carried
    in f32. (x86-64-sse bundles run on any x86-64 machine.)"""
    x16 = rng.standard_normal(8).astype(np.float16)
    for target in ("x86-64-sse", "host"):
        out = np.full(8, np.nan, np.float16)
        _bundle(tmp_path, "f16add", F16_ADD, target)[(1,)](x16, out, 8)
        assert np.array_equal(out, x16 + x16), target
    a = (rng.standard_normal((8, 8)) * 0.5).astype(np.float16)
    for target in ("x86-64-sse", "host"):
        out = np.full((8, 8), np.nan, np.float16)
        _bundle(tmp_path, "f16dot", F16_DOT, target)[(1,)](a, out, 8)
        ref = a[:3].astype(np.float64) @ a[:, :5].astype(np.float64)
        assert_close(out[:3, :5], ref, 2e-3, 2e-3)  # one f16 rounding of an f32 sum
    bits = to_bf16_bits(rng.standard_normal((8, 8)).astype(np.float32))
    for target in ("host", "x86-64-sse"):
        out = np.full(8, -7, np.int32)
        _bundle(tmp_path, "bf16argmax", BF16_ARGMAX, target)[(1,)](kiln.bf16(bits), out, 8)
        assert (out[:4] == np.argmax(from_bf16_bits(bits[:4]), axis=1)).all(), target


SIN_COS = """
kiln.func @sincos(%x: !kiln.ptr<f32> {kiln.name = "x"}, %s: !kiln.ptr<f32> {kiln.name = "s"},
                  %c: !kiln.ptr<f32> {kiln.name = "c"}, %n: index {kiln.name = "n"}) {
  %c1 = arith.constant 1 : index
  %b = arith.constant 64 : index
  %pid = kiln.program_id x : i32
  %p = arith.index_cast %pid : i32 to index
  %o = arith.muli %p, %b : index
  %vx = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vs = kiln.make_view %s, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vc = kiln.make_view %c, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %t = kiln.load %vx[%o] : !kiln.view<1xf32> -> tensor<64xf32>
  %st = math.sin %t : tensor<64xf32>
  %ct = math.cos %t : tensor<64xf32>
  kiln.store %st, %vs[%o] : tensor<64xf32> -> !kiln.view<1xf32>
  kiln.store %ct, %vc[%o] : tensor<64xf32> -> !kiln.view<1xf32>
  kiln.return
}
"""


def test_sin_and_cos_of_large_arguments(rng, tmp_path):
    """f32 sin/cos reduce their argument exactly (in f64, pi/2 in three
    parts) before the polynomials: the upstream f32 reduction was off by
    7.6e-4 at 1e4 and 0.06 at 1e6 (rotary embeddings at a million
    positions), and past 1e8 gave values far outside [-1, 1]. Tiles with a
    lane past 1e7 take the f64 functions. Every CPU target and the GPU
    lowering (emulated) go through the same pass."""
    mags = np.repeat(10.0 ** rng.uniform(-3, 38.5, 40), 64)
    x = (rng.uniform(-1, 1, mags.size) * mags).astype(np.float32)
    # A tile of only moderate lanes (the reduced path), and the specials.
    x[:64] = rng.uniform(-3e6, 3e6, 64).astype(np.float32)
    x[64:64 + 8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e7, -1e7, np.pi / 2]
    n = x.size - 5  # a ragged last tile
    with np.errstate(invalid="ignore"):
        ref_s, ref_c = np.sin(x.astype(np.float64)), np.cos(x.astype(np.float64))
    for target in ("host", "x86-64-avx2", "x86-64-sse", "emu-sm_80"):
        k = _bundle(tmp_path, "sincos", SIN_COS, target)
        s, c = np.full_like(x, np.nan), np.full_like(x, np.nan)
        k[(math.ceil(n / 64),)](x, s, c, n)
        for got, ref in ((s, ref_s), (c, ref_c)):
            finite = np.isfinite(x[:n])
            assert np.abs(got[:n][finite] - ref[:n][finite]).max() < 4e-7, target
            assert np.isnan(got[:n][~finite]).all(), target
            assert np.isnan(got[n:]).all(), target


# An element of a tile at an index computed at run time (a hand-written
# kernel's tensor.extract): one outside the tile read another buffer's
# bytes. It now fails the launch as a kiln.assert does, and stores nothing.
PICK = """
kiln.func @pick(%x: !kiln.ptr<f32> {kiln.name = "x"}, %out: !kiln.ptr<f32> {kiln.name = "out"},
                %i: index {kiln.name = "i"}, %j: index {kiln.name = "j"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c5 = arith.constant 5 : index
  %c13 = arith.constant 13 : index
  %vx = kiln.make_view %x, [%c5, %c13], [%c13, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %vo = kiln.make_view %out, [%c1], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %t = kiln.load %vx[%c0, %c0] : !kiln.view<2xf32> -> tensor<8x16xf32>
  %s = tensor.extract %t[%i, %j] : tensor<8x16xf32>
  %o = kiln.splat %s : tensor<1xf32>
  kiln.store %o, %vo[%c0] : tensor<1xf32> -> !kiln.view<1xf32>
  kiln.return
}
"""


@pytest.mark.parametrize("target", ["host", "emu-sm_80"])
def test_extract_at_a_computed_index_outside_the_tile_fails(rng, tmp_path, target):
    k = _bundle(tmp_path, "pick", PICK, target)
    x = rng.standard_normal((5, 13)).astype(np.float32)
    for i, j in ((0, 0), (4, 12), (7, 15), (2, 14)):   # the last two: the tile's padding
        out = np.full(1, np.nan, np.float32)
        k[(1,)](x, out, i, j)
        want = x[i, j] if i < 5 and j < 13 else 0.0
        assert out[0] == want, (i, j)
    for i, j in ((8, 0), (0, 16), (-1, 3), (2, -1), (1 << 40, 0)):
        out = np.full(1, np.nan, np.float32)
        with pytest.raises(kiln.DeviceAssertError, match="index outside the tile"):
            k[(1,)](x, out, i, j)
        assert np.isnan(out[0]), (i, j)


FAR_STORE = """
kiln.func @far_store(%x: !kiln.ptr<f32> {kiln.name = "x"}, %n: index {kiln.name = "n"},
                     %off: index {kiln.name = "off"}) {
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %f = arith.constant 7.0 : f32
  %a = kiln.splat %f : tensor<16xf32>
  kiln.store %a, %v[%off] : tensor<16xf32> -> !kiln.view<1xf32>
  kiln.return
}
"""

FAR_LOAD = """
kiln.func @far_load(%x: !kiln.ptr<f32> {kiln.name = "x"}, %o: !kiln.ptr<f32> {kiln.name = "o"},
                    %n: index {kiln.name = "n"}, %off: index {kiln.name = "off"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %v = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vo = kiln.make_view %o, [%c16], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %a = kiln.load %v[%off] : !kiln.view<1xf32> -> tensor<16xf32>
  kiln.store %a, %vo[%c0] : tensor<16xf32> -> !kiln.view<1xf32>
  kiln.return
}
"""


@pytest.mark.parametrize("target", ["host", "emu-sm_80"])
def test_offsets_near_int64_max_stay_outside_the_view(tmp_path, target):
    """An offset near 2^63 wrapped `offset + 16 <= size` in the interior
    test: the tile was taken as inside, and a store wrote 8 elements before
    the array and 8 of it; a load read them. Elements outside a view read 0
    and are not written."""
    store = _bundle(tmp_path, "far_store", FAR_STORE, target)
    load = _bundle(tmp_path, "far_load", FAR_LOAD, target)
    for off in (2**63 - 1, 2**63 - 8, 2**63 - 16, 2**62 + 3, -2**63, -2**63 + 3, -5, 60):
        buf = np.zeros(128, np.float32)
        x = buf[32:96]
        store[(1,)](x, 64, off)
        ref = np.zeros(128, np.float32)
        ref[32 + max(off, 0):32 + min(off + 16, 64)] = 7 if -16 < off < 64 else 0
        assert np.array_equal(buf, ref), off
        src = np.arange(128, dtype=np.float32) + 1
        out = np.full(16, np.nan, np.float32)
        load[(1,)](src[32:96], out, 64, off)
        want = [src[32 + off + j] if 0 <= off + j < 64 else 0 for j in range(16)]
        assert np.array_equal(out, np.array(want, np.float32)), off


EMPTY_DOT = """
kiln.func @empty_dot(%a: !kiln.ptr<bf16> {kiln.name = "a"}, %c: !kiln.ptr<f32> {kiln.name = "c"},
                     %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %va = kiln.make_view %a, [%n, %n], [%n, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %vc = kiln.make_view %c, [%c16, %c16], [%c16, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %ta = kiln.load %va[%c0, %c0] : !kiln.view<2xbf16> -> tensor<16x0xbf16>
  %tb = kiln.load %va[%c0, %c0] : !kiln.view<2xbf16> -> tensor<0x16xbf16>
  %z = arith.constant dense<1.5> : tensor<16x16xf32>
  %r = kiln.dot %ta, %tb, %z : tensor<16x0xbf16>, tensor<0x16xbf16> -> tensor<16x16xf32>
  kiln.store %r, %vc[%c0, %c0] : tensor<16x16xf32> -> !kiln.view<2xf32>
  kiln.return
}
"""


@pytest.mark.parametrize("target", ["host", "emu-sm_80", "emu-sm_90a"])
def test_a_dot_over_an_empty_contraction_is_its_accumulator(tmp_path, target):
    """K = 0 passed the tensor-core dot's multiple-of-16 test, and the GPU
    lowering's operand layouts divided by it (SIGFPE in the compiler)."""
    k = _bundle(tmp_path, "empty_dot", EMPTY_DOT, target)
    c = np.full((16, 16), np.nan, np.float32)
    k[(1,)](np.zeros((4, 4), np.uint16), c, 4)
    assert (c == 1.5).all()


@kiln.jit
def int8_dot_nt(a, b, c, M: kl.constexpr, N: kl.constexpr, K: kl.constexpr,
                LOOP: kl.constexpr):
    m, n = kl.arange(0, M), kl.arange(0, N)
    if LOOP:
        acc = kl.zeros((M, N), kl.int32)
        for k0 in range(0, K, 32):
            kk = k0 + kl.arange(0, 32)
            acc = kl.dot(kl.load(a + m[:, None] * K + kk[None, :]),
                         kl.trans(kl.load(b + n[:, None] * K + kk[None, :])), acc)
    else:
        k = kl.arange(0, K)
        acc = kl.dot(kl.load(a + m[:, None] * K + k[None, :]),
                     kl.trans(kl.load(b + n[:, None] * K + k[None, :])))
    kl.store(c + m[:, None] * N + n[None, :], acc)


def test_int8_wgmma_dots_compile_for_the_emulator(rng, monkeypatch):
    """The emulator passed s32 wgmma accumulators through arith.bitcast, whose
    folder read the first wgmma's undef accumulator as an IntegerAttr: the
    compiler segfaulted on some runs (about one in three)."""
    monkeypatch.setenv("KILN_TARGET", "emu-sm_90a")
    M, N, K = 64, 64, 128
    a = rng.integers(-128, 128, (M, K)).astype(np.int8)
    b = rng.integers(-128, 128, (N, K)).astype(np.int8)
    ref = a.astype(np.int64) @ b.astype(np.int64).T
    for loop in (False, True):
        c = np.full((M, N), -1, np.int32)
        int8_dot_nt[(1,)](a, b, c, M=M, N=N, K=K, LOOP=loop)
        assert np.array_equal(c, ref)


# Float to integer conversions in hand-written IR (kilnc) and the operator
# library were arith.fptosi, poison out of range: 300.7 to i8 depended on the
# tile's width, and the store of a folded out-of-range constant was deleted.
# The pipelines now saturate every one, NaN giving 0, as the front end's.
TO_INT = """
kiln.func @to_int(%x: !kiln.ptr<f32> {kiln.name = "x"}, %s: !kiln.ptr<i8> {kiln.name = "s"},
                  %u: !kiln.ptr<i8> {kiln.name = "u"}, %w: !kiln.ptr<i32> {kiln.name = "w"},
                  %k: !kiln.ptr<i8> {kiln.name = "k"}, %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %b = arith.constant 32 : index
  %pid = kiln.program_id x : i32
  %p = arith.index_cast %pid : i32 to index
  %o = arith.muli %p, %b : index
  %vx = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vs = kiln.make_view %s, [%n], [%c1] : !kiln.ptr<i8> -> !kiln.view<1xi8>
  %vu = kiln.make_view %u, [%n], [%c1] : !kiln.ptr<i8> -> !kiln.view<1xi8>
  %vw = kiln.make_view %w, [%n], [%c1] : !kiln.ptr<i32> -> !kiln.view<1xi32>
  %c8 = arith.constant 8 : index
  %vk = kiln.make_view %k, [%c8], [%c1] : !kiln.ptr<i8> -> !kiln.view<1xi8>
  %t = kiln.load %vx[%o] : !kiln.view<1xf32> -> tensor<32xf32>
  %ts = arith.fptosi %t : tensor<32xf32> to tensor<32xi8>
  %tu = arith.fptoui %t : tensor<32xf32> to tensor<32xi8>
  %tw = arith.fptosi %t : tensor<32xf32> to tensor<32xi32>
  kiln.store %ts, %vs[%o] : tensor<32xi8> -> !kiln.view<1xi8>
  kiln.store %tu, %vu[%o] : tensor<32xi8> -> !kiln.view<1xi8>
  kiln.store %tw, %vw[%o] : tensor<32xi32> -> !kiln.view<1xi32>
  %big = arith.constant dense<-300.7> : tensor<4xf32>
  %kb = arith.fptosi %big : tensor<4xf32> to tensor<4xi8>
  kiln.store %kb, %vk[%c0] : tensor<4xi8> -> !kiln.view<1xi8>
  %nan = arith.constant dense<0x7FC00000> : tensor<4xf32>
  %kn = arith.fptosi %nan : tensor<4xf32> to tensor<4xi8>
  kiln.store %kn, %vk[%c4] : tensor<4xi8> -> !kiln.view<1xi8>
  kiln.return
}
"""


def test_float_to_int_in_hand_written_ir_saturates(rng, tmp_path):
    x = rng.uniform(-400, 400, 96).astype(np.float32)
    x[:12] = [300.7, -300.7, np.nan, np.inf, -np.inf, 3e9, -3e9, 127.9,
              -128.9, 255.5, -0.9, 2147483520.0]
    n = x.size - 7  # a ragged last tile
    with np.errstate(invalid="ignore"):
        t = np.trunc(x.astype(np.float64))
        nan = np.isnan(x)
        ref_s = np.where(nan, 0, np.clip(t, -128, 127)).astype(np.int8)
        ref_u = np.where(nan, 0, np.clip(t, 0, 255)).astype(np.uint8)
        ref_w = np.where(nan, 0, np.clip(t, -2**31, 2**31 - 1)).astype(np.int32)
    for target in ("host", "x86-64-sse", "emu-sm_80"):
        k = _bundle(tmp_path, "to_int", TO_INT, target)
        s, u = np.full(x.size, 99, np.int8), np.full(x.size, 99, np.int8)
        w, c = np.full(x.size, 99, np.int32), np.full(8, 99, np.int8)
        k[(math.ceil(n / 32),)](x, s, u, w, c, n)
        assert np.array_equal(s[:n], ref_s[:n]), target
        assert np.array_equal(u[:n].view(np.uint8), ref_u[:n]), target
        assert np.array_equal(w[:n], ref_w[:n]), target
        assert (s[n:] == 99).all() and (u[n:] == 99).all() and (w[n:] == 99).all(), target
        assert c.tolist() == [-128] * 4 + [0] * 4, target
