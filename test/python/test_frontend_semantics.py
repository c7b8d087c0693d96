"""Semantics of the Python front end that once gave silent wrong answers:
bool arithmetic, constexpr values carried through runtime control flow,
floor `//` and `%`, the specialization on 1, launch grids, and malformed
kernels (each refused with a CompilationError at its line)."""
import inspect
import os

import numpy as np
import pytest

import kiln
import kiln.language as kl

# -- bool (int1) tiles in arithmetic -----------------------------------------


@kiln.jit
def bool_arith(x, out, B: kl.constexpr):
    offs = kl.arange(0, B)
    v = kl.load(x + offs)
    kl.store(out + offs, (v > 0) * 2 - 1)
    kl.store(out + B + offs, (v > 0) + (v > -10))
    kl.store(out + 2 * B + offs, (v > 0) * 5)
    kl.store(out + 3 * B + offs, kl.sum((v > 0) * 3, axis=0) + offs * 0)
    kl.store(out + 4 * B + offs, -(v > 0))
    kl.store(out + 5 * B + offs, (v > 0) - (v > -10))
    kl.store(out + 6 * B + offs, (v > 0) // 2 + (v > 0) % 2 * 10)


def test_bool_arithmetic_counts_as_int32():
    x = np.array([1, -1, 2, -20], np.float32)
    out = np.full(28, -99, np.int32)
    bool_arith[(1,)](x, out, B=4)
    p = (x > 0).astype(np.int64)
    q = (x > -10).astype(np.int64)
    ref = np.concatenate([p * 2 - 1, p + q, p * 5, np.full(4, (p * 3).sum()), -p, p - q,
                          p // 2 + p % 2 * 10])
    assert np.array_equal(out, ref), (out, ref)


@kiln.jit
def bool_order(x, y, out, B: kl.constexpr):
    offs = kl.arange(0, B)
    a = kl.load(x + offs) > 0
    b = kl.load(y + offs) > 0
    kl.store(out + offs, kl.maximum(a, b))
    kl.store(out + B + offs, kl.minimum(a, b))
    kl.store(out + 2 * B + offs, a > b)
    kl.store(out + 3 * B + offs, a < b)
    kl.store(out + 4 * B + offs, a >= b)
    kl.store(out + 5 * B + offs, a == 2)       # a Python int is not a bool
    kl.store(out + 6 * B + offs, a < 5)
    kl.store(out + 7 * B + offs, kl.maximum(a, 3))
    kl.store(out + 8 * B + offs, (a & b) | (a ^ ~b))


def test_bool_comparisons_and_maximum_order_false_before_true():
    x = np.array([1, 1, -1, -1], np.float32)
    y = np.array([1, -1, 1, -1], np.float32)
    out = np.full(36, -99, np.int32)
    bool_order[(1,)](x, y, out, B=4)
    a, b = x > 0, y > 0
    ref = np.concatenate([a | b, a & b, a > b, a < b, a >= b, a == 2, a < 5,
                          np.maximum(a.astype(np.int64), 3), (a & b) | (a ^ ~b)])
    assert np.array_equal(out, ref.astype(np.int64)), (out, ref)


# -- constexpr values reassigned in runtime control flow ---------------------


@kiln.jit
def cx_for(out, n, START: kl.constexpr):
    total = START
    for i in range(0, n):
        total += 1
    kl.store(out, total)


@kiln.jit
def cx_if(out, flag, BLOCK: kl.constexpr):
    scale = BLOCK
    if flag > 0:
        scale = BLOCK * 2
    kl.store(out, scale)


@kiln.jit
def cx_if_offsets(x, out, BLOCK: kl.constexpr):
    pid = kl.program_id(0)
    start = BLOCK
    if pid == 0:
        start = 0
    offs = start + kl.arange(0, BLOCK)
    kl.store(out + pid * BLOCK + kl.arange(0, BLOCK), kl.load(x + offs))


@kiln.jit
def cx_while(out, n, START: kl.constexpr):
    i = START
    while i < n:
        i += 1
    kl.store(out, i)


def test_constexpr_reassigned_in_runtime_for_if_while_is_carried():
    o = np.full(1, -99, np.int64)
    cx_for[(1,)](o, 5, START=10)
    assert o[0] == 15
    for flag, ref in ((1, 16), (0, 8)):
        o[0] = -99
        cx_if[(1,)](o, flag, BLOCK=8)
        assert o[0] == ref, (flag, o[0])
    x = np.arange(32, dtype=np.float32)
    out = np.full(16, np.nan, np.float32)
    cx_if_offsets[(2,)](x, out, BLOCK=8)
    assert np.array_equal(out, np.concatenate([x[:8], x[8:16]])), out
    for n in (5, 0):
        o[0] = -99
        cx_while[(1,)](o, n, START=2)
        assert o[0] == max(n, 2), (n, o[0])


# -- the specialization on 1 keeps the argument's type -----------------------


@kiln.jit
def grow(out, n, iters):
    acc = n
    for i in range(0, iters):
        acc = acc * 1024
    kl.store(out, acc)


@kiln.jit
def neg_mod(out, n):
    kl.store(out, (0 - n) % 3)
    kl.store(out + 1, (0 - n) // 4)


def test_specialized_one_computes_like_other_values():
    for n in (1, 2):
        o = np.full(2, -99, np.int64)
        grow[(1,)](o, n, 4)
        assert o[0] == n * 1024 ** 4, (n, o[0])
        neg_mod[(1,)](o, n)
        assert list(o) == [(-n) % 3, (-n) // 4], (n, o)


# -- // and % round like Python and NumPy ------------------------------------


@kiln.jit
def divmod_kernel(a, b, q, r, B: kl.constexpr):
    offs = kl.arange(0, B)
    x = kl.load(a + offs)
    y = kl.load(b + offs)
    kl.store(q + offs, x // y)
    kl.store(r + offs, x % y)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
def test_floor_division_and_modulo_follow_numpy(dtype):
    a = np.array([7, -7, 7, -7, 6, -6, 1, -1, 0, 9, -9, 5, -5, 12, -12, 3], dtype)
    b = np.array([2, 2, -2, -2, 4, 4, 3, 3, -3, -3, 3, -7, 7, 5, -5, 3], dtype)
    if np.dtype(dtype).kind == "f":
        a = a * np.asarray(1.25, dtype)
        a[12] = np.asarray(1.0, dtype)
        b[12] = np.asarray(0.1, dtype)   # floor(1 / 0.1) == 10, but 1 // 0.1 == 9
        q, r = np.full(16, np.nan, dtype), np.full(16, np.nan, dtype)
    else:
        q, r = np.full(16, -99, dtype), np.full(16, -99, dtype)
    divmod_kernel[(1,)](a, b, q, r, B=16)
    a64, b64 = a.astype(np.float64 if a.dtype.kind == "f" else np.int64), \
        b.astype(np.float64 if a.dtype.kind == "f" else np.int64)
    if a.dtype.kind == "f":
        # Python's float floordiv/mod on the (exactly representable) inputs.
        ref_q = np.array([float(x) // float(y) for x, y in zip(a, b)])
        ref_r = np.array([float(x) % float(y) for x, y in zip(a, b)])
        assert np.array_equal(q.astype(np.float64), ref_q.astype(dtype).astype(np.float64)), q
        assert np.allclose(r.astype(np.float64), ref_r, rtol=0, atol=1e-6), (r, ref_r)
        # The result of % has the divisor's sign (or is zero).
        assert (np.sign(r[r != 0]) == np.sign(b[r != 0])).all(), r
    else:
        assert np.array_equal(q, a64 // b64), q
        assert np.array_equal(r, a64 % b64), r
        assert np.array_equal(q.astype(np.int64) * b64 + r, a64)


# -- launch grids --------------------------------------------------------------


@kiln.jit
def fill_ones(out, n, B: kl.constexpr):
    offs = kl.program_id(0) * B + kl.arange(0, B)
    kl.store(out + offs, kl.full((B,), 1.0, kl.float32), mask=offs < n)


@pytest.mark.parametrize("grid", [(3.9,), 2.0, (np.float64(4.0),), (True,), True, (2, 1.5),
                                  lambda m: (100 / m["B"],)],
                         ids=["tuple-float", "float", "np-float", "tuple-bool", "bool", "2d-float",
                              "callable-float"])
def test_non_integer_grids_are_refused(grid):
    out = np.full(100, np.nan, np.float32)
    with pytest.raises(ValueError, match="grid"):
        fill_ones[grid](out, 100, B=32)
    assert np.isnan(out).all()


def test_numpy_integer_grids_are_accepted():
    out = np.full(100, np.nan, np.float32)
    fill_ones[(np.int64(4),)](out, 100, B=32)
    assert (out == 1).all()
    out[:] = np.nan
    fill_ones[np.int32(4)](out, 100, B=32)
    assert (out == 1).all()


# -- malformed kernels: a CompilationError at the line (`# error: text`) --------


@kiln.jit
def store_none_pointer(x, out):
    offs = kl.arange(0, 4)
    v = None
    kl.store(out + offs, v)  # error: store needs a value


@kiln.jit
def store_none_view(x, out):
    view = kl.make_view(out, (4,), (1,))
    kl.store(view, None, offsets=(0,))  # error: store needs a value


@kiln.jit
def store_tile_through_scalar_pointer(x, out):
    v = kl.load(x + kl.arange(0, 4))
    kl.store(out, v)  # error: through a scalar pointer


@kiln.jit
def store_wider_tile(x, out):
    v = kl.load(x + kl.arange(0, 4))
    kl.store(out + kl.arange(0, 2), v)  # error: cannot broadcast shape (4,) to (2,)


@kiln.jit
def atomic_add_mask(x, out):
    offs = kl.arange(0, 4)
    view = kl.make_view(out, (4,), (1,))
    kl.atomic_add(view, kl.load(x + offs), mask=offs < 2, offsets=(0,))  # error: no mask=


@kiln.jit
def atomic_add_scalar(x, out):
    view = kl.make_view(out, (4,), (1,))
    kl.atomic_add(view, 1.0, offsets=(0,))  # error: needs a rank-1 tile


@kiln.jit
def to_bitcast(x, out):
    v = kl.load(x + kl.arange(0, 4))
    kl.store(out + kl.arange(0, 4), v.to(kl.int32, bitcast=True))  # error: bitcast=True


@kiln.jit
def to_unknown_keyword(x, out):
    v = kl.load(x + kl.arange(0, 4))
    kl.store(out + kl.arange(0, 4), v.to(kl.int32, rounding="rtz"))  # error: 'rounding'


@kiln.jit
def cdiv_by_zero(x, out, B: kl.constexpr = 0):
    kl.store(out, kl.cdiv(16, B) + 0.0)  # error: division by zero


@kiln.jit
def other_inf_on_ints(x, out):
    offs = kl.arange(0, 4)
    ints = kl.make_view(out, (4,), (1,))
    v = kl.load(x + offs, mask=offs < 2, other=float("-inf"))
    w = kl.load(ints, offsets=(0,), shape=(4,), other=float("inf"))  # error: inf has no int32
    kl.store(out + offs, v + w)


@kiln.jit
def full_inf_int(x, out):
    kl.store(out + kl.arange(0, 4), kl.full((4,), float("-inf"), kl.int32))  # error: -inf has no int32


@kiln.jit
def literal_beyond_int64(x, out):
    v = kl.load(out + kl.arange(0, 4))
    kl.store(out + kl.arange(0, 4), v & 0xFFFFFFFFFFFFFFFF)  # error: does not fit in 64 bits


@kiln.jit
def tuple_reassigned_in_branch(x, out):
    pair = (1.0, 2.0)
    if kl.program_id(0) == 0:
        pair = (3.0, 4.0)  # error: 'pair' (a tuple) is reassigned inside a runtime branch
    kl.store(x, pair[0] + pair[1])


@kiln.jit
def tuple_reassigned_in_loop(x, out):
    acc = (kl.zeros((4,), kl.float32), kl.zeros((4,), kl.float32))
    for i in range(0, kl.program_id(0) + 2):
        acc = (acc[0] + 1.0, acc[1])  # error: 'acc' (a tuple) is reassigned inside a runtime loop
    kl.store(x + kl.arange(0, 4), acc[0])


@kiln.jit
def none_reassigned_in_branch(x, out):
    v = None
    if kl.program_id(0) == 0:
        v = kl.load(x + kl.arange(0, 4))  # error: 'v' (a NoneType) is reassigned
    kl.store(x + kl.arange(0, 4), v)


BROKEN = [tuple_reassigned_in_branch, tuple_reassigned_in_loop, none_reassigned_in_branch,
          store_none_pointer, store_none_view, store_tile_through_scalar_pointer,
          store_wider_tile, atomic_add_mask, atomic_add_scalar, to_bitcast, to_unknown_keyword,
          cdiv_by_zero, other_inf_on_ints, full_inf_int, literal_beyond_int64]


def marker(fn):
    lines, start = inspect.getsourcelines(fn.fn)
    for i, line in enumerate(lines):
        if "# error:" in line:
            return inspect.getsourcefile(fn.fn), start + i, line.split("# error:")[1].strip()
    raise AssertionError(f"{fn.__name__} has no '# error:' marker")


@pytest.mark.parametrize("kernel", BROKEN, ids=[k.__name__ for k in BROKEN])
def test_malformed_kernel_is_refused_at_its_line(kernel):
    path, line, text = marker(kernel)
    x = np.zeros(4, np.float32)
    out = np.full(4, -99, np.int32)
    with pytest.raises(kiln.CompilationError) as info:
        kernel[(1,)](x, out)
    e = info.value
    assert text in e.message, e.message
    assert os.path.samefile(e.filename, path)
    assert e.lineno == line, str(e)
    assert (out == -99).all()


@kiln.jit
def atomic_add_where(x, out, B: kl.constexpr):
    offs = kl.arange(0, B)
    view = kl.make_view(out, (B,), (1,))
    v = kl.load(x + offs)
    kl.atomic_add(view, kl.where(offs < 2, v, 0.0), offsets=(0,))


def test_atomic_add_masked_through_where():
    x = np.arange(1, 5, dtype=np.float32)
    out = np.full(4, 10.0, np.float32)
    atomic_add_where[(3,)](x, out, B=4)
    assert np.array_equal(out, [13.0, 16.0, 10.0, 10.0]), out
