"""A corpus of broken kernels. Each marks the line that must be reported with
`# error: <text the message must contain>`."""
import math

import kiln
import kiln.language as kl

BROKEN = []


def broken(fn):
    BROKEN.append(fn)
    return fn


@broken
@kiln.jit
def undefined_name(x, n):
    y = z + 1  # error: undefined name 'z'


@broken
@kiln.jit
def dot_inner_mismatch(x, n):
    a = kl.zeros((16, 8), kl.float32)
    b = kl.zeros((16, 8), kl.float32)
    c = kl.dot(a, b)  # error: inner dimensions differ


@broken
@kiln.jit
def dot_rank(x, n):
    a = kl.zeros((16,), kl.float32)
    c = kl.dot(a, a)  # error: dot needs 2-D tiles


@broken
@kiln.jit
def dot_dtypes(x, n):
    a = kl.zeros((16, 16), kl.float32)
    b = kl.zeros((16, 16), kl.int32)
    c = kl.dot(a, b)  # error: dot operands must have one dtype


@broken
@kiln.jit
def broadcast_mismatch(x, n):
    a = kl.zeros((16,), kl.float32)
    b = kl.zeros((8,), kl.float32)
    c = a + b  # error: cannot be broadcast together


@broken
@kiln.jit
def arange_runtime_bound(x, n):
    r = kl.arange(0, n)  # error: arange end must be a compile-time integer


@broken
@kiln.jit
def arange_empty(x, n):
    r = kl.arange(4, 4)  # error: arange needs end > start


@broken
@kiln.jit
def loop_type_change(x, n):
    acc = 0
    for i in range(0, n):
        acc = acc + 0.5  # error: loop-carried variable 'acc' changes type
    kl.store(x, acc)


@broken
@kiln.jit
def loop_shape_change(x, n):
    acc = kl.zeros((16,), kl.float32)
    for i in range(0, n):
        acc = kl.zeros((32,), kl.float32)  # error: changes type from float32[16] to float32[32]


@broken
@kiln.jit
def while_type_change(x, n):
    i = 0
    while i < n:
        i = i + 1.5  # error: loop-carried variable 'i' changes type


@broken
@kiln.jit
def if_branch_type_change(x, n):
    v = 1
    if n > 3:
        v = 2.0  # error: changes type from int32[] to float32[]


@broken
@kiln.jit
def unsupported_try(x, n):
    try:  # error: unsupported Python construct in a kernel: Try
        pass
    except Exception:
        pass


@broken
@kiln.jit
def unsupported_with(x, n):
    with open("f"):  # error: unsupported Python construct in a kernel: With
        pass


@broken
@kiln.jit
def unsupported_lambda(x, n):
    f = lambda a: a  # error: unsupported Python construct in a kernel: Lambda


@broken
@kiln.jit
def unsupported_listcomp(x, n):
    v = [i for i in range(3)]  # error: unsupported Python construct in a kernel: ListComp


@broken
@kiln.jit
def unsupported_nested_def(x, n):
    def inner():  # error: nested function definitions are not supported
        pass


@broken
@kiln.jit
def for_over_list(x, n):
    for i in [1, 2, 3]:  # error: kernels support 'for' over range(...) or kl.range(...) only
        pass


@broken
@kiln.jit
def for_else(x, n):
    for i in range(0, n):  # error: for ... else is not supported
        pass
    else:
        pass


@broken
@kiln.jit
def return_value(x, n):
    return n  # error: a kernel cannot return a value


@broken
@kiln.jit
def tile_if_condition(x, n):
    t = kl.arange(0, 16)
    if t > 3:  # error: an 'if' condition must be a scalar
        pass


@broken
@kiln.jit
def float_pointer_offset(x, n):
    v = kl.load(x + 1.5)  # error: pointer offsets must be integers


@broken
@kiln.jit
def pointer_times(x, n):
    p = x * 2  # error: pointers support only + and - with integer offsets


@broken
@kiln.jit
def bad_mask_dtype(x, n):
    offs = kl.arange(0, 16)
    v = kl.load(x + offs, mask=offs)  # error: mask must be a boolean tile


@broken
@kiln.jit
def view_rank_mismatch(x, n):
    v = kl.make_view(x, (n, n), (n, 1))
    t = kl.load(v, offsets=(0,), shape=(16, 16))  # error: a view of rank 2 needs 2 offsets


@broken
@kiln.jit
def view_sizes_strides(x, n):
    v = kl.make_view(x, (n, n), (1,))  # error: make_view: 2 sizes but 1 strides


@broken
@kiln.jit
def gather_float_indices(x, n):
    v = kl.make_view(x, (n, 16), (16, 1))
    idx = kl.zeros((8,), kl.float32)
    t = kl.gather(v, idx, offsets=(0,), shape=(8, 16))  # error: gather indices must be integers


@broken
@kiln.jit
def reshape_count(x, n):
    t = kl.zeros((4, 4), kl.float32)
    r = kl.reshape(t, (3, 5))  # error: cannot reshape a tile of shape (4, 4)


@broken
@kiln.jit
def trans_order(x, n):
    t = kl.zeros((4, 8), kl.float32)
    r = kl.trans(t, (0, 0))  # error: is not a permutation


@broken
@kiln.jit
def reduce_axis(x, n):
    t = kl.zeros((4, 8), kl.float32)
    r = kl.sum(t, axis=2)  # error: axis 2 is out of range


@broken
@kiln.jit
def program_id_axis(x, n):
    p = kl.program_id(3)  # error: program_id axis must be 0, 1 or 2


@broken
@kiln.jit
def zeros_runtime_shape(x, n):
    t = kl.zeros((n,), kl.float32)  # error: must be a compile-time integer


@broken
@kiln.jit
def call_unknown(x, n):
    v = math.gamma(n)  # error: cannot call 'gamma' in a kernel


@broken
@kiln.jit
def subscript_tile(x, n):
    t = kl.arange(0, 16)
    v = t[3]  # error: tiles support only ':', 'None' and slices with compile-time bounds ('a:b') in subscripts


@broken
@kiln.jit
def chained_compare(x, n):
    c = 0 < n < 5  # error: chained comparisons are not supported


@broken
@kiln.jit
def range_outside_for(x, n):
    r = range(0, n)  # error: range() is only supported as the iterable of a for loop


@broken
@kiln.jit
def store_to_scalar(x, n):
    kl.store(n + 1, 3.0)  # error: store expects a pointer


@broken
@kiln.jit
def tile_attribute(x, n):
    t = kl.arange(0, 16)
    v = t.size  # error: tiles have no attribute 'size'


@broken
@kiln.jit
def float_range(x, n):
    for i in range(0, 2.5):  # error: range() bounds must be integer scalars
        pass


@broken
@kiln.jit
def unpack_mismatch(x, n):
    a, b = (1, 2, 3)  # error: cannot unpack 3 values into 2 names


@kiln.jit
def helper_with_error(t):
    return kl.reshape(t, (7,))  # error: cannot reshape


@broken
@kiln.jit
def error_in_helper(x, n):
    t = kl.zeros((4, 4), kl.float32)
    helper_with_error(t)


@broken
@kiln.jit
def zero_division(x, n):
    v = 1 // 0  # error: division by zero


@broken
@kiln.jit
def index_a_scalar(x, n):
    s = kl.program_id(0)
    t = s[None]  # error: a scalar cannot be indexed


@broken
@kiln.jit
def trans_of_scalar(x, n):
    t = kl.trans(n)  # error: trans needs a tile


@broken
@kiln.jit
def reduce_a_scalar(x, n):
    t = kl.sum(n, axis=0)  # error: sum needs a tile


@broken
@kiln.jit
def integer_dot(x, n):
    t = kl.arange(0, 8)
    u = kl.dot(t[:, None], t[None, :])  # error: unsupported element types


@broken
@kiln.jit
def pointer_in_math(x, n):
    t = kl.exp(x)  # error: expected a number or a tile, got Pointer


@broken
@kiln.jit
def pointer_rebuilt_in_loop(x, n):
    # (Advancing it by a scalar, x = x + 1, is fine: the loop carries the
    # shift. A tile of offsets is another pointer.)
    for i in range(0, n):
        x = x + kl.arange(0, 4)  # error: pointer 'x' may only be advanced by scalars inside a loop


@broken
@kiln.jit
def store_shape_mismatch(x, n):
    kl.store(x + kl.arange(0, 4), kl.zeros((8,), kl.float32))  # error: cannot broadcast shape (8,) to (4,)
