"""The kiln kernel language (``import kiln.language as kl``).

Everything here is used *inside* ``@kiln.jit`` functions. The functions are
not called at Python run time: the front end (``kiln.frontend``) parses the
kernel's source and, when it meets a call to one of them, builds the
corresponding IR. Calling them outside a kernel raises an error.
"""

from __future__ import annotations

import enum

import numpy as np

__all__ = [
    "dtype", "float16", "bfloat16", "float32", "float64", "int1", "int8",
    "int16", "int32", "int64", "constexpr", "program_id", "num_programs", "clock",
    "processor_id",
    "arange", "zeros", "full", "load", "store", "make_view", "gather",
    "scatter", "atomic_add", "dot", "sum", "max", "min", "argmax", "argmin",
    "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "tanh", "sin",
    "cos", "erf", "abs", "floor", "ceil", "where", "maximum", "minimum",
    "trans", "reshape", "broadcast_to", "expand_dims", "cdiv", "static_print",
    "range", "static_assert", "cumsum", "cumprod", "cummax", "cummin", "associative_scan",
    "reduce", "multiple_of", "max_contiguous", "max_constancy", "debug_barrier",
    "static_range", "zeros_like", "clamp", "permute", "ravel", "view",
    "make_block_ptr", "advance", "atomic_max", "atomic_min", "atomic_xchg",
    "atomic_and", "atomic_or", "atomic_xor", "atomic_cas", "assume", "fma", "histogram",
    "swizzle2d", "math", "join", "split", "interleave", "sort", "flip", "make_tensor_descriptor",
    "load_tensor_descriptor", "store_tensor_descriptor", "device_assert", "device_print",
    "umulhi", "randint", "randint4x", "rand", "rand4x", "randn", "randn4x",
    "uint_to_uniform_float", "pair_uniform_to_normal", "cat", "softmax", "extra",
    "dot_scaled", "pointer_type", "topk", "xor_sum", "cast", "float8e4nv", "float8e5",
    "PropagateNan",
]


class dtype:
    """An element type of tiles and pointers."""

    def __init__(self, name: str, ir: str, np_dtype, bits: int, is_float: bool):
        self.name = name
        self.ir = ir
        self.np = np_dtype
        self.bits = bits
        self.is_float = is_float
        self.fp8 = None   # float8e4nv / float8e5: "e4m3" / "e5m2" (stored as i8 bits)

    # Triton's dtype queries (kernels branch on them at compile time).
    def is_int(self) -> bool:
        return not self.is_float

    def is_floating(self) -> bool:
        return self.is_float

    def is_bool(self) -> bool:
        return self.bits == 1

    def is_int_signed(self) -> bool:
        return not self.is_float and self.bits > 1

    def is_fp16(self) -> bool:
        return self.name == "float16"

    def is_bf16(self) -> bool:
        return self.name == "bfloat16"

    def is_fp32(self) -> bool:
        return self.name == "float32"

    def is_fp64(self) -> bool:
        return self.name == "float64"

    def is_int1(self) -> bool:
        return self.name == "int1"

    def is_int8(self) -> bool:
        return self.name == "int8"

    def is_int16(self) -> bool:
        return self.name == "int16"

    def is_int32(self) -> bool:
        return self.name == "int32"

    def is_int64(self) -> bool:
        return self.name == "int64"

    def is_fp8(self) -> bool:
        return self.fp8 is not None

    def is_fp8e4nv(self) -> bool:
        return self.fp8 == "e4m3"

    def is_fp8e5(self) -> bool:
        return self.fp8 == "e5m2"

    @property
    def primitive_bitwidth(self) -> int:
        return self.bits

    @property
    def element_ty(self) -> "dtype":
        """Triton's pointer element type (`ptr.dtype.element_ty`): a Kiln
        pointer's dtype is already its element type."""
        return self

    @property
    def scalar(self) -> "dtype":
        return self

    def __repr__(self) -> str:
        return f"kl.{self.name}"

    def __reduce__(self):
        return self.name


float16 = dtype("float16", "f16", np.float16, 16, True)
bfloat16 = dtype("bfloat16", "bf16", None, 16, True)
float32 = dtype("float32", "f32", np.float32, 32, True)
float64 = dtype("float64", "f64", np.float64, 64, True)
int1 = dtype("int1", "i1", np.bool_, 1, False)
int8 = dtype("int8", "i8", np.int8, 8, False)
int16 = dtype("int16", "i16", np.int16, 16, False)
int32 = dtype("int32", "i32", np.int32, 32, False)
int64 = dtype("int64", "i64", np.int64, 64, False)

ALL_DTYPES = [float16, bfloat16, float32, float64, int1, int8, int16, int32, int64]
BY_IR = {d.ir: d for d in ALL_DTYPES}

# Triton's 8-bit floats (OCP E4M3FN and E5M2), held as their bits in i8:
# loads, stores, conversions (.to; to fp8 rounds to nearest even and
# saturates to the largest finite value, as cvt.rn.satfinite), kl.dot
# (exactly through bfloat16); arithmetic promotes them to float32.
float8e4nv = dtype("float8e4nv", "i8", None, 8, True)
float8e4nv.fp8 = "e4m3"
float8e5 = dtype("float8e5", "i8", None, 8, True)
float8e5.fp8 = "e5m2"


_FROM_NUMPY = {}


def from_numpy(np_dtype) -> dtype | None:
    # (Memoized: every launch maps each array's dtype.)
    try:
        return _FROM_NUMPY[np_dtype]
    except (KeyError, TypeError):
        pass
    key = np.dtype(np_dtype)
    found = None
    for d in ALL_DTYPES:
        if d.np is not None and np.dtype(d.np) == key:
            found = d
            break
    try:
        _FROM_NUMPY[np_dtype] = found
    except TypeError:  # an unhashable dtype-like
        pass
    return found


class pointer_type:
    """Triton's `tl.pointer_type(T)`: `addr.to(kl.pointer_type(kl.float16))`
    makes a pointer from an int64 address (a table of pointers' entries)."""

    def __init__(self, element_ty, address_space=1, const=False):
        if not isinstance(element_ty, dtype):
            raise TypeError(f"pointer_type takes a kl dtype, got {element_ty!r}")
        self.element_ty = element_ty
        self.address_space = address_space
        self.const = const

    def __repr__(self):
        return f"pointer_type({self.element_ty.name})"


class constexpr:
    """Marks a kernel parameter as a compile-time constant
    (``BLOCK: kl.constexpr``): its value is part of the specialization and can
    be used where Python values are needed (tile shapes, ``range`` bounds)."""

    def __init__(self, value=None):
        self.value = value

    def __repr__(self):
        return f"constexpr({self.value!r})"

    # Compares as its value (`x.shape == (BM, 1)` in a kernel, where BM is
    # a constexpr parameter).
    def __eq__(self, other):
        if isinstance(other, constexpr):
            other = other.value
        return self.value == other

    def __hash__(self):
        return hash(self.value)


def builtin(fn):
    """Marks a function the front end implements; calling it outside a kernel
    is an error."""

    def outside(*args, **kwargs):
        raise RuntimeError(
            f"kl.{fn.__name__} can only be used inside a @kiln.jit kernel")

    outside.__name__ = fn.__name__
    outside.__doc__ = fn.__doc__
    outside._kiln_builtin = fn.__name__
    return outside


@builtin
def program_id(axis=0):
    """The id of this program instance along grid axis 0, 1 or 2 (int32)."""


@builtin
def num_programs(axis=0):
    """The number of program instances along grid axis 0, 1 or 2 (int32)."""


@builtin
def clock():
    """The cycle counter of the processor running the program (int64): the
    SM's %clock64 on NVIDIA GPUs, the time-stamp counter on the CPU. The
    difference of two readings in one program is how long the code between
    them took there; readings stay in place relative to loads and stores."""


@builtin
def processor_id():
    """Which processor runs the program (int32): the SM's number (%smid) on
    NVIDIA GPUs, the core of the running thread (sched_getcpu) on the CPU.
    kl.clock() readings are comparable within one processor."""


@builtin
def arange(start, end):
    """The 1-D int32 tile [start, end); start and end are compile-time ints."""


@builtin
def zeros(shape, dtype=float32):
    """A tile of zeros."""


@builtin
def full(shape, value, dtype=float32):
    """A tile with every element equal to value."""


@builtin
def make_block_ptr(base, shape, strides, offsets, block_shape, order):
    """Triton's block pointer: the block_shape block at `offsets` of the
    array `base` of `shape` and `strides` (elements). kl.load and kl.store
    take it (boundary_check=, padding_option='zero'|'nan'; every dimension is
    bounded), kl.advance moves it (also inside loops). It is a view
    (kl.make_view) and its offsets: loads of it take TMA on sm_90a when the
    base is the kernel's pointer itself."""


@builtin
def advance(base, offsets):
    """A block pointer moved by `offsets` (one integer per dimension)."""


@builtin
def load(pointer, mask=None, other=None, offsets=None, shape=None, boundary_check=(),
         padding_option="", cache_modifier="", eviction_policy="", volatile=False):
    """Loads from a tile of pointers (``ptr + offsets``; masked elements read
    ``other``), or, given a view, the tile of ``shape`` at ``offsets``
    (elements outside the view read ``other``)."""


@builtin
def store(pointer, value, mask=None, offsets=None, boundary_check=(), cache_modifier="",
          eviction_policy=""):
    """Stores to a tile of pointers (masked elements are not written), or into
    a view at ``offsets`` (elements outside the view are not written)."""


@builtin
def make_view(pointer, shape, strides):
    """A view of memory: a base pointer with a runtime shape and strides."""


@builtin
def gather(view, indices, offsets=(), shape=None, other=None, axis=None):
    """Rows ``indices`` of a view (first dimension), at ``offsets`` in the
    others; out-of-range indices (e.g. -1) read ``other``.

    ``gather(src, index, axis)`` of a tile (Triton's ``tl.gather``, with
    torch.gather's semantics): ``result[.., i, ..] = src[.., index[.., i, ..], ..]``
    along ``axis``; ``index`` has src's rank and sizes except along the
    axis, the result has index's shape; an index outside the axis reads 0.
    No memory access: a lookup table (a 16-entry FP4 / NF4 codebook)
    or a permutation of a tile's elements."""


@builtin
def scatter(view, value, indices, offsets=()):
    """Writes the rows of value to the view rows named by indices."""


@builtin
def atomic_add(pointer, value, mask=None, offsets=None, sem=None, scope=None):
    """Atomically adds value through a pointer or tile of pointers (as
    Triton's tl.atomic_add: ``kl.atomic_add(hist + bins, 1, mask=m)``; equal
    addresses all receive their additions), or into a view at ``offsets``
    (``kl.make_view``; elements outside the view are dropped, and a view
    takes no mask). Returns the values the additions read (each element's
    value just before its addition; 0 where masked off or outside the view),
    e.g. slot numbers when adding 1 to counters. float32, float64, int32 and
    int64 elements. ``sem`` and ``scope`` are Triton's hints, accepted and
    checked: the program's accesses before an atomic_add happen before it,
    and it before those after it (acq_rel, at GPU scope on GPUs; scope='sys'
    is refused)."""


@builtin
def atomic_max(pointer, value, mask=None, offsets=None, sem=None, scope=None):
    """kl.atomic_add with max (floats propagate NaN; integers signed)."""


@builtin
def atomic_min(pointer, value, mask=None, offsets=None, sem=None, scope=None):
    """kl.atomic_add with min (floats propagate NaN; integers signed)."""


@builtin
def atomic_xchg(pointer, value, mask=None, offsets=None, sem=None, scope=None):
    """Atomically stores value, returning what was there (kl.atomic_add's forms)."""


@builtin
def atomic_and(pointer, value, mask=None, offsets=None, sem=None, scope=None):
    """kl.atomic_add with bitwise and (int32, int64)."""


@builtin
def atomic_or(pointer, value, mask=None, offsets=None, sem=None, scope=None):
    """kl.atomic_add with bitwise or (int32, int64)."""


@builtin
def atomic_xor(pointer, value, mask=None, offsets=None, sem=None, scope=None):
    """kl.atomic_add with bitwise xor (int32, int64)."""


@builtin
def dot(a, b, acc=None, out_dtype=None, allow_tf32=None, input_precision=None):
    """Tile matrix product a @ b (+ acc): f32, bf16/f16 -> f32, i8 -> i32.
    `allow_tf32` and `input_precision` ('ieee', 'tf32', 'tf32x3') are
    Triton's precision hints, accepted and checked: f32 dots compute in IEEE
    f32 on every target."""


@builtin
def multiple_of(x, values):
    """Triton's divisibility hint: returns x (Kiln specializes integer
    arguments on divisibility by 16 itself, docs/python.md)."""


@builtin
def atomic_cas(pointer, cmp, val, sem=None, scope=None):
    """Atomic compare-and-swap (Triton's): where an address holds `cmp`'s
    bits it gets `val`; returns what each address held. i32, i64, f32, f64;
    a scalar pointer (a lock) or ptr + offsets built from aranges."""


@builtin
def make_tensor_descriptor(base, shape, strides, block_shape, padding_option="zero"):
    """Triton's tensor descriptor: `desc.load([m, n])` reads the block of
    `block_shape` at those offsets of the array (shape, strides) at `base`,
    zero (or NaN) outside it; `desc.store([m, n], x)` writes the part inside;
    `desc.atomic_add(...)` (max, min, xchg, and, or, xor) too. A view and a
    tile: TMA on sm_90a where the view allows it."""


@builtin
def load_tensor_descriptor(desc, offsets):
    """desc.load(offsets)."""


@builtin
def store_tensor_descriptor(desc, offsets, value):
    """desc.store(offsets, value)."""


@builtin
def assume(cond):
    """Triton's assumption: the kernel promises `cond` (a scalar
    comparison, or `&` of comparisons) holds; a false one is undefined
    behaviour. Kiln uses `x >= 0` / `x > 0` (pid_m, pid_n after a grouped
    ordering): an index known not to be negative can be a view offset
    (docs/python.md, "pointer + offsets")."""


@builtin
def max_contiguous(x, values):
    """Triton's contiguity hint: returns x (Kiln finds contiguous and strided
    offsets from how they are built)."""


@builtin
def max_constancy(x, values):
    """Triton's constancy hint: returns x."""


@builtin
def debug_barrier():
    """Triton's block barrier: a no-op, since a Kiln program's ops never race
    with each other (the GPU target synchronizes its threads between them)."""


@builtin
def static_range(*args):
    """A loop unrolled at compile time (``for i in kl.static_range(4):``,
    compile-time bounds): the body sees each index as a constexpr."""


@builtin
def zeros_like(x):
    """A tile of zeros of x's shape and dtype."""


@builtin
def clamp(x, min, max, propagate_nan=None):
    """minimum(maximum(x, min), max), elementwise (NaN propagates)."""


@builtin
def permute(x, *dims):
    """kl.trans(x, dims): ``kl.permute(x, (1, 0))`` or ``kl.permute(x, 1, 0)``."""


@builtin
def ravel(x):
    """x as a 1-D tile (row-major)."""


@builtin
def view(x, *shape):
    """Triton's tl.view: kl.reshape(x, shape)."""


@builtin
def sum(x, axis=None, dtype=None, keep_dims=False):
    """Sum along an axis (all elements when axis is None). As Triton's
    tl.sum: bool, int8 and int16 tiles are summed in int32, float16 and
    bfloat16 in float32 (the result's dtype); dtype= converts the input to
    that dtype and sums in it. keep_dims=True keeps the axis (size 1)."""


@builtin
def max(x, axis=None, return_indices=False, return_indices_tie_break_left=True,
        keep_dims=False):
    """Maximum along an axis (NaN propagates); with return_indices, also the
    int32 position of the first maximum (a tuple)."""


@builtin
def min(x, axis=None, return_indices=False, return_indices_tie_break_left=True,
        keep_dims=False):
    """Minimum along an axis (NaN propagates); with return_indices, also the
    int32 position of the first minimum (a tuple)."""


@builtin
def argmax(x, axis, tie_break_left=True, keep_dims=False):
    """int32 position of the first maximum along an axis."""


@builtin
def argmin(x, axis, tie_break_left=True, keep_dims=False):
    """int32 position of the first minimum along an axis."""


@builtin
def cumsum(x, axis=0, reverse=False, dtype=None):
    """Inclusive running sum along an axis (from the end when reverse): as
    Triton's tl.cumsum, with kl.sum's dtypes (bool, int8 and int16 sum in
    int32, float16 and bfloat16 in float32; dtype= converts the input first).
    A float sum may be associated in any order."""


@builtin
def cumprod(x, axis=0, reverse=False):
    """Inclusive running product along an axis (from the end when reverse),
    as Triton's tl.cumprod (bfloat16 in float32). A float product may be
    associated in any order."""


@builtin
def cummax(x, axis=0, reverse=False):
    """Inclusive running maximum along an axis (NaN propagates)."""


@builtin
def cummin(x, axis=0, reverse=False):
    """Inclusive running minimum along an axis (NaN propagates)."""


@builtin
def associative_scan(input, axis, combine_fn, reverse=False):
    """Triton's tl.associative_scan for the combiners Kiln has: combine_fn
    (a @kiln.jit function of two values) must return a + b, a * b,
    kl.maximum(a, b) or kl.minimum(a, b)."""


@builtin
def reduce(input, axis, combine_fn, keep_dims=False):
    """Triton's tl.reduce for the combiners Kiln has (see associative_scan):
    the same as kl.sum (without widening), a product, kl.max or kl.min."""


@builtin
def exp(x):
    """e**x, elementwise."""


@builtin
def exp2(x):
    """2**x, elementwise."""


@builtin
def log(x):
    """Natural logarithm, elementwise."""


@builtin
def log2(x):
    """Base-2 logarithm, elementwise."""


@builtin
def sqrt(x):
    """Square root, elementwise."""


@builtin
def rsqrt(x):
    """1 / sqrt(x), elementwise."""


@builtin
def sigmoid(x):
    """1 / (1 + exp(-x)), elementwise."""


@builtin
def tanh(x):
    """Hyperbolic tangent, elementwise."""


@builtin
def sin(x):
    """Sine, elementwise."""


@builtin
def cos(x):
    """Cosine, elementwise."""


@builtin
def erf(x):
    """The error function, elementwise."""


@builtin
def abs(x):
    """Absolute value, elementwise."""


@builtin
def floor(x):
    """Floor, elementwise."""


@builtin
def ceil(x):
    """Ceiling, elementwise."""


@builtin
def where(condition, x, y):
    """x where condition holds, else y (broadcast)."""


class PropagateNan(enum.Enum):
    """Triton's propagate_nan= values for maximum / minimum: Kiln's always
    propagate NaN (which NONE, no promise, allows)."""
    NONE = 0x0000
    ALL = 0xFFFF


@builtin
def maximum(x, y, propagate_nan=None):
    """Elementwise maximum (NaN propagates for floats; -0.0 < 0.0)."""


@builtin
def minimum(x, y, propagate_nan=None):
    """Elementwise minimum (NaN propagates for floats; -0.0 < 0.0)."""


@builtin
def trans(x, order=None):
    """Permutes the dimensions of a tile (reverses them by default)."""


@builtin
def reshape(x, shape):
    """The elements of x, row-major, as a tile of another shape."""


@builtin
def broadcast_to(x, shape):
    """x repeated along size-1 (or missing leading) dimensions."""


@builtin
def expand_dims(x, axis):
    """Inserts a size-1 dimension."""


@builtin
def cdiv(x, div):
    """Ceiling division (a + b - 1) // b."""


@builtin
def static_print(*args):
    """Prints compile-time values while the kernel is compiled."""


@builtin
def static_assert(cond, msg=""):
    """Fails the compilation (at this line) unless the compile-time `cond`
    holds."""


@builtin
def device_assert(cond, msg="", mask=None):
    """Fails the launch unless every element of `cond` holds (Triton's
    `tl.device_assert`; a Python `assert` on a runtime value is the same).
    Only kernels compiled with debug on check it: ``@kiln.jit(debug=True)``
    or ``KILN_DEBUG=1``; otherwise it compiles to nothing. Elements where
    `mask` is false are not checked. On the CPU and the GPU emulator the
    failing program stops at the assert and the launch raises
    `kiln.DeviceAssertError` naming `msg`, the line and the program; on an
    NVIDIA GPU the kernel aborts (CUDA's device-side assert: the CUDA
    context is unusable afterwards)."""


@builtin
def device_print(prefix, *args, hex=False):
    """Prints every element of each argument (tiles or scalars) at run time,
    one line each: ``pid (x, y, z) idx (i, j) PREFIX VALUE`` (Triton's
    `tl.device_print`; `print("x", x)` with a runtime value is the same).
    Floats print with 9 significant digits (float64: 17; the value reads
    back exactly), integers in decimal, or all of them as hexadecimal bits
    with ``hex=True``. On a GPU
    each thread prints its elements and the driver writes them out at the
    next synchronization; lines of different programs come in any order."""


@builtin
def range(*args, overlap=False, num_stages=None, loop_unroll_factor=None,  # noqa: A001
          warp_specialize=False, disallow_acc_multi_buffer=False, flatten=False):
    """`for j in kl.range(start, stop, step, overlap=True)`: a loop like
    `range(...)`, with a hint for the compiler. `overlap` (a compile-time
    bool): on sm_90a, compute the loop's first tensor-core dot from a constant
    accumulator (attention's scores) one iteration ahead, so that it runs on
    the tensor cores while the rest of the iteration (the softmax) runs on
    the other units. It costs one more such dot per loop; other targets
    ignore it. See docs/gpu.md, "Overlap". Triton's other hints
    (`num_stages`, `loop_unroll_factor`, `warp_specialize`,
    `disallow_acc_multi_buffer`, `flatten`) are checked and otherwise unused:
    the pipelining depth is the launch's num_stages."""


@builtin
def fma(x, y, z):
    """x * y + z with one rounding (the targets' fused multiply-add)."""


@builtin
def div_rn(x, y):
    """x / y rounded to nearest (IEEE division, as `/`)."""


@builtin
def fdiv(x, y, ieee_rounding=False):
    """x / y (Kiln's division is IEEE's on every target)."""


@builtin
def sqrt_rn(x):
    """sqrt(x) rounded to nearest (IEEE, as kl.sqrt)."""


@builtin
def histogram(input, num_bins, mask=None):
    """Triton's: int32 counts of the values 0 .. num_bins - 1 in a 1-D integer
    tile (values outside are not counted; with `mask`, only kept elements)."""


@builtin
def join(a, b):
    """Triton's: a and b side by side in a new last dimension of 2."""


@builtin
def split(a):
    """Triton's: the two halves (a[..., 0], a[..., 1]) of a last dimension of 2."""


@builtin
def sort(x, dim=None, descending=False):
    """Triton's: x sorted along its last dimension (a power of two), by a
    bitonic network; a permutation of the values."""


@builtin
def flip(x, dim=None):
    """Triton's: x reversed along its last dimension (a power of two)."""


@builtin
def interleave(a, b):
    """Triton's: a and b's elements alternating along the last dimension."""


@builtin
def swizzle2d(i, j, size_i, size_j, size_g):
    """Triton's: (i, j) of a size_i x size_j grid renumbered column-major in
    groups of size_g rows (an L2-friendly program order); returns (i, j)."""


@builtin
def dot_scaled(lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format, acc=None,
               fast_math=False, lhs_k_pack=True, rhs_k_pack=True, out_dtype=None):
    """Triton's: the product of two blocks in microscaling formats ("e2m1"
    (fp4, two per byte, the first in the low nibble), "e4m3", "e5m2" (fp8
    bytes), "bf16", "fp16"), int8 tiles holding the bits; `lhs_scale`
    [M, K // 32] and `rhs_scale` [N, K // 32] are e8m0 bytes (2^(s - 127))
    or None. Computed as Triton emulates it without MX tensor cores: decoded,
    scaled, rounded to bfloat16 (exact for MX values) and kl.dot into
    float32."""


@builtin
def topk(x, k, dim=None):
    """Triton's: the k largest elements along the last dimension (a power of
    two), largest first."""


@builtin
def xor_sum(input, axis=None, keep_dims=False):
    """Triton's: the xor of the integer elements along `axis`."""


@builtin
def cast(input, dtype, fp_downcast_rounding=None, bitcast=False):
    """Triton's: `input.to(dtype, bitcast=)`; `dtype` may be a
    `kl.pointer_type` (an int64 address as a pointer)."""


@builtin
def cat(input, other, can_reorder=False):
    """Triton's: the two tiles one after the other along the first dimension
    (in order, whatever `can_reorder` says)."""


@builtin
def softmax(x, dim=None, keep_dims=False, ieee_rounding=False):
    """Triton's: exp(x - max(x)) / sum along `dim` (0 when None)."""


@builtin
def umulhi(x, y):
    """Triton's: the high 32 (int64: 64) bits of the unsigned product of two
    int32 (int64) values."""


@builtin
def randint4x(seed, offset, n_rounds=10):
    """Triton's Philox generator: four int32 tiles of random bits, of the
    offsets' shape, from an integer `seed` and int32 or int64 offsets (Philox
    4x32 of the counter (offset_lo, offset_hi, 0, 0)). The same seed and
    offsets give the same bits as Triton's `tl.randint4x` (3.4 and later), on
    every target."""


@builtin
def randint(seed, offset, n_rounds=10):
    """Triton's: the first tile of `randint4x`."""


@builtin
def rand(seed, offset, n_rounds=10):
    """Triton's: float32 in [0, 1) from `randint` (`uint_to_uniform_float`),
    bit for bit as `tl.rand`."""


@builtin
def rand4x(seed, offsets, n_rounds=10):
    """Triton's: four float32 tiles in [0, 1) from `randint4x`."""


@builtin
def randn(seed, offset, n_rounds=10):
    """Triton's: float32 N(0, 1) by the Box-Muller transform of the first two
    tiles of `randint4x` (its log, sqrt, sin and cos are the target's, so
    values agree with Triton's to a few float32 ulps, not bit for bit)."""


@builtin
def randn4x(seed, offset, n_rounds=10):
    """Triton's: four float32 N(0, 1) tiles (two Box-Muller pairs)."""


@builtin
def uint_to_uniform_float(x):
    """Triton's: random int32 / int64 bits to float32 in [0, 1)."""


@builtin
def pair_uniform_to_normal(u1, u2):
    """Triton's Box-Muller transform: two N(0, 1) tiles from two uniform
    ones."""


def _named_builtin(name, doc):
    """A kl.* function the front end implements (CodeGen.builtin_<name>),
    from its name and doc: what @builtin makes of a documented def."""
    def marker(*args):
        """(Replaced by builtin: calling it outside a kernel raises.)"""
    marker.__name__ = name
    marker.__doc__ = doc
    return builtin(marker)


# C / CUDA math beyond Triton's tl.math (Triton's libdevice names; see `extra`).
asin = _named_builtin("asin", "arcsine (a float32 polynomial; bf16/f16 through float32)")
acos = _named_builtin("acos", "arccosine (float32)")
atan = _named_builtin("atan", "arctangent (float32)")
atan2 = _named_builtin("atan2", "atan2(y, x) (float32)")
sinh = _named_builtin("sinh", "hyperbolic sine (float32)")
cosh = _named_builtin("cosh", "hyperbolic cosine (float32)")
tan = _named_builtin("tan", "tangent (float32)")
log1p = _named_builtin("log1p", "log(1 + x), exact near 0 (float32)")
expm1 = _named_builtin("expm1", "exp(x) - 1, exact near 0 (float32)")
cbrt = _named_builtin("cbrt", "cube root (float32)")
erfc = _named_builtin("erfc", "1 - erf(x) (float32)")
log10 = _named_builtin("log10", "base-10 logarithm (float32)")
round = _named_builtin("round", "to the nearest integer, half away from zero")  # noqa: A001
rint = _named_builtin("rint", "to the nearest integer, half to even")
trunc = _named_builtin("trunc", "toward zero")
copysign = _named_builtin("copysign", "|x| with y's sign")
fmax = _named_builtin("fmax", "C's fmax: a NaN operand gives the other")
fmin = _named_builtin("fmin", "C's fmin: a NaN operand gives the other")
fmod = _named_builtin("fmod", "C's fmod: the sign of x")
pow = _named_builtin("pow", "x ** y")  # noqa: A001
isnan = _named_builtin("isnan", "bool: x is NaN")
isinf = _named_builtin("isinf", "bool: x is +-inf")
isfinite = _named_builtin("isfinite", "bool: x is neither NaN nor inf")
signbit = _named_builtin("signbit", "bool: the sign bit is set (-0.0 too)")

import sys as _sys  # noqa: E402
import types as _types  # noqa: E402

# Triton's `triton.language.extra.libdevice` (and `.extra.cuda.libdevice`):
# `from kiln.language.extra import libdevice` then `libdevice.asin(x)`, on
# every target (the functions are Kiln's, not CUDA's libdevice: no library
# is linked).
extra = _types.ModuleType(__name__ + ".extra")
extra.libdevice = _types.ModuleType(__name__ + ".extra.libdevice")
for _n, _f in dict(
        abs=abs, fabs=abs, acos=acos, asin=asin, atan=atan, atan2=atan2, cbrt=cbrt, ceil=ceil,
        copysign=copysign, cos=cos, cosh=cosh, erf=erf, erfc=erfc, exp=exp, exp2=exp2,
        expm1=expm1, fast_expf=exp, fast_logf=log, floor=floor, fma=fma, fmax=fmax,
        fmin=fmin, fmod=fmod, isinf=isinf, isnan=isnan, isfinited=isfinite, log=log,
        log10=log10, log1p=log1p, log2=log2, nearbyint=rint, pow=pow, rint=rint,
        round=round, rsqrt=rsqrt, signbit=signbit, sin=sin, sinh=sinh, sqrt=sqrt, tan=tan,
        tanh=tanh, trunc=trunc, div_rn=div_rn, sqrt_rn=sqrt_rn).items():
    setattr(extra.libdevice, _n, _f)
extra.cuda = _types.ModuleType(__name__ + ".extra.cuda")
extra.cuda.libdevice = extra.libdevice
extra.cuda.smid = processor_id  # Triton's tl.extra.cuda.smid()
_sys.modules[extra.__name__] = extra
_sys.modules[extra.libdevice.__name__] = extra.libdevice
_sys.modules[extra.cuda.__name__] = extra.cuda
_sys.modules[extra.cuda.__name__ + ".libdevice"] = extra.libdevice

# Triton's tl.math: the same functions under the names Triton code calls
# (`tl.math.exp2(x)` ports as `kl.math.exp2(x)`).
math = _types.SimpleNamespace(
    abs=abs, ceil=ceil, cos=cos, div_rn=div_rn, erf=erf, exp=exp, exp2=exp2, fdiv=fdiv,
    floor=floor, fma=fma, log=log, log2=log2, rsqrt=rsqrt, sin=sin, sqrt=sqrt,
    sqrt_rn=sqrt_rn, sigmoid=sigmoid, tanh=tanh, cdiv=cdiv, maximum=maximum, minimum=minimum,
    umulhi=umulhi, softmax=softmax, asin=asin, acos=acos, atan=atan, atan2=atan2, sinh=sinh,
    cosh=cosh, tan=tan, log1p=log1p, expm1=expm1, cbrt=cbrt, erfc=erfc, log10=log10,
    round=round, rint=rint, trunc=trunc, copysign=copysign, pow=pow, isnan=isnan,
    isinf=isinf, signbit=signbit)
