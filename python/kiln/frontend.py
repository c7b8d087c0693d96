"""Python AST -> kiln IR, through the C++ builder.

The front end walks the kernel's syntax tree once per specialization and
creates IR op by op with ``kiln._kiln.Builder``; every op carries the
file:line:col of the Python code that made it. Type and shape errors raise
``CompilationError`` naming that line.
"""

from __future__ import annotations

import ast
import builtins
import math
import types

from . import language as kl
from ._kiln import Builder, IRError

# Views with no natural extent (a bare pointer with offsets) get this size;
# element offsets stay far below it, so nothing is masked by it.
UNBOUNDED = 1 << 62
# Integer dtypes whose strided forms (Tile.strided) are tracked.
WIDE_INTS = (kl.int32, kl.int64)


class CompilationError(Exception):
    """A kernel could not be compiled. ``str(e)`` names the kernel's file and
    line, shows the line and a caret under the offending expression."""

    def __init__(self, message, filename=None, lineno=None, col=None, source_line=None):
        self.message = message
        self.filename = filename
        self.lineno = lineno
        self.col = col
        self.source_line = source_line
        text = message
        if filename is not None and lineno is not None:
            text = f"{filename}:{lineno}:{(col or 0) + 1}: {message}"
            if source_line is not None:
                stripped = source_line.rstrip("\n")
                text += "\n    " + stripped + "\n    " + " " * (col or 0) + "^"
        super().__init__(text)


class KilnError(Exception):
    """A language-level error raised while translating one node."""


class WidenCarried(Exception):
    """An integer carried through a loop or branch is assigned a wider
    integer (`s = 0; for i in range(n): s += i`: an int32 number, an int64
    index). The kernel is translated again with that variable carried at
    the wider type, `dtype`, from the start (CodeGen.widen), so no value
    wraps; where no retry is possible, `error` is raised instead."""

    def __init__(self, key, dtype, error):
        super().__init__(str(error))
        self.key, self.dtype, self.error = key, dtype, error


class LaunchGridError(ValueError):
    """The launch grid does not fit the kernel (raised as is, not as a
    CompilationError: the kernel is fine, the launch is not)."""


# --------------------------------------------------------------------------
# Values the front end manipulates
# --------------------------------------------------------------------------


class Tile:
    """An SSA value: a scalar (shape ()) or a tile, with its element dtype."""

    def __init__(self, value, dtype: kl.dtype, shape: tuple):
        self.value = value
        self.dtype = dtype
        self.shape = tuple(shape)
        # Set when the tile is `scalar + arange(0, n)` (a contiguous run):
        # (scalar base Tile or int, n). Lets loads through pointers use views.
        self.contiguous = None
        # Set when the tile is `offsets < bound`: (offsets Tile, bound).
        self.bound_mask = None
        # Set when an integer tile is `c + sum_d strides[d] * i_d` over its
        # indices i_d (built from aranges by +, -, * with scalars, `[:, None]`
        # and broadcasts): (c, strides), c and each stride a Python int or an
        # integer scalar Tile, a stride None where the tile is constant along
        # that dimension. Lets 2-D (and higher) pointer accesses become view
        # accesses instead of per-element gathers.
        self.strided = None
        # Set when a boolean tile is `all_d i_d < limits[d]` (a comparison of
        # such a strided tile with one unit-stride dimension against a scalar
        # bound, or `&` of those): a tuple with a limit (int or scalar Tile)
        # or None (no bound) per dimension.
        self.limits = None
        # Alongside `strided`, where the front end can tell: (rest, origins)
        # with c = rest + sum_d origins[d] * strides[d], origins[d] the first
        # index of dimension d (pid * BM in `pid * BM + arange(0, BM)`; None
        # for 0). And alongside `limits`, per dimension None or (size,
        # origin): `origin + i_d < size`. A pointer access whose mask bounds
        # the same origins its offsets have is then an access at
        # (origin_d)_d of a view of sizes (size_d)_d, which does not change
        # from one loop iteration to the next (the sizes do not depend on the
        # loop's index): it can be pipelined, and with rest 0 it needs no
        # flattened dimension (TMA, wgmma's operand layouts).
        self.coords = None
        self.bounds = None
        # Set when an integer tile of rank >= 2 is `G[i_0] * scale + c +
        # sum_{d >= 1} strides[d] * i_d`, G a 1-D integer tile of any values
        # (loaded indices: `table + ids[:, None] * D + cols[None, :]`):
        # (G, scale, c, strides), strides[0] None. A pointer access through
        # it is then a gather of rows (kiln.gather), not of single elements.
        self.rows = None
        # Set when a boolean tile of rank >= 2 is `m[i_0] & all_{d >= 1}
        # i_d < limits[d]`, m a 1-D boolean tile of any values (a loaded
        # index's validity: `ok[:, None] & (cols[None, :] < d)`): (m,
        # limits), limits a tuple of the tile's rank (None: no bound). A
        # gather of rows under it gives the rows where m is false the index
        # -1. The tile's own `limits` stay None: such a mask bounds no view
        # (a strided access under it took the limits and dropped m).
        self.row_mask = None
        # Whether an integer scalar is known not to be negative (program ids,
        # a loop index counting up from such a value, sums and products of
        # those): view offsets that are may take per-dimension bounds.
        self.nonneg = False
        # Whether a scalar is the same in every program of a launch: computed
        # from the kernel's scalar arguments and constants only (not program
        # ids, loop indices or loaded values). A view stride that is can go
        # into a tensor map the runtime encodes at launch.
        self.uniform = False
        # For an integer scalar where the front end can tell: (c, terms),
        # the value being c + sum(i * s for i, s in terms) with c uniform (an
        # int or a uniform Tile), each i known not to be negative and each s
        # uniform (`off_z * stride_z + off_h * stride_h`). The offset a
        # pointer access's indices do not own is then one view dimension per
        # term (stride s, offset i) instead of one flat dimension: the view
        # stays the same in every program, and TMA can take it.
        self.terms = None
        # For an integer scalar: (k, ((atom, m), ...)), the value being
        # k + sum(m * atom) with int coefficients, atoms scalar Tiles compared
        # by identity (a kernel argument, a loop index, a program id, any
        # value computed otherwise); None for an atom itself. Lets the front
        # end see that `(K - k * BK) + k * BK` is K, and that a pointer's
        # shift `k * (BK * stride)` moves the index of the dimension whose
        # stride is `stride` by k * BK (CodeGen.fold_terms).
        self.lin = None
        # For a scalar bool: the comparison it is, (ast op type, a, b), or
        # ("and", fact, fact), for kl.assume.
        self.fact = None

    @property
    def is_scalar(self):
        return self.shape == ()

    def __repr__(self):
        return f"Tile({self.dtype}, {self.shape})"


class Pointer:
    """A kernel pointer argument, possibly advanced by a scalar offset;
    `param`: the kernel parameter it comes from (stores through it are
    recorded in CodeGen.written)."""

    def __init__(self, value, dtype: kl.dtype, offset=None, param=None):
        self.value = value
        self.dtype = dtype
        self.offset = offset  # scalar Tile (int) or None
        self.param = param


class PointerTile:
    """``pointer + offsets``: a tile of addresses into one allocation."""

    def __init__(self, base: Pointer, offsets: Tile):
        self.base = base
        self.offsets = offsets
        # Set for a tile carried through a loop or branch: offsets ==
        # fixed + shift, `fixed` the offsets before the construct, `shift` an
        # int64 scalar (CodeGen.carry).
        self.fixed = None
        self.shift = None

    @property
    def shape(self):
        return self.offsets.shape


class View:
    def __init__(self, value, dtype: kl.dtype, rank: int, param=None):
        self.value = value
        self.dtype = dtype
        self.rank = rank
        self.param = param  # the kernel parameter it views


class BlockPointer:
    """Triton's block pointer (`kl.make_block_ptr`): a view, the block's
    offsets (int64 scalar Tiles or ints, one per dimension), its shape and
    the order hint. `flat`: the offsets (ints or scalar Tiles) of the view's
    leading dimensions that carry the base pointer's scalar offset
    (CodeGen.lead_dims), outermost first; () without one."""

    def __init__(self, view, offsets, block_shape, order, flat=(), swapped=None):
        self.view = view
        self.offsets = tuple(offsets)
        self.block_shape = tuple(block_shape)
        self.order = tuple(order)
        self.flat = flat
        # (d, view): when the block's last dimension is not the one of unit
        # stride but dimension d is (a transposed K in attention: shape
        # (HEAD_DIM, N_CTX), strides (1, stride_kn)), the view with d and the
        # last dimension exchanged; accesses go through it and a transpose.
        self.swapped = swapped

    @property
    def dtype(self):
        return self.view.dtype

    @property
    def param(self):
        return self.view.param

    def moved(self, offsets):
        return BlockPointer(self.view, offsets, self.block_shape, self.order, self.flat,
                            self.swapped)


class TensorDescriptor:
    """Triton's tensor descriptor (`kl.make_tensor_descriptor`): a block
    pointer at offsets 0 whose accesses name their offsets
    (`desc.load([m, 0])`): a view load or store of the block, every
    dimension bounded (zero padding, or NaN with padding_option='nan')."""

    def __init__(self, bp, padding):
        self.bp = bp
        self.padding = padding

    @property
    def dtype(self):
        return self.bp.dtype

    @property
    def param(self):
        return self.bp.param

    @property
    def block_shape(self):
        return self.bp.block_shape


# Triton's tensor member functions (`x.sum(0)`, `x.exp()`, ...): the kl.*
# builtin of that name with the tile as its first argument.
TILE_METHODS = frozenset((
    "abs", "argmax", "argmin", "associative_scan", "broadcast_to", "cast", "cdiv", "ceil",
    "clamp", "cos", "cumprod", "cumsum", "erf", "exp", "exp2", "expand_dims", "fdiv", "flip",
    "floor", "gather", "histogram", "interleave", "join", "log", "log2", "max", "min",
    "ravel", "reduce", "rsqrt", "sigmoid", "sin", "softmax", "sort", "split", "sqrt", "sum",
    "topk", "view", "xor_sum"))


class BoundMethod:
    def __init__(self, name, obj):
        self.name = name
        self.obj = obj


def broadcast_shapes(a, b):
    ra, rb = len(a), len(b)
    out = []
    for i in range(builtins.max(ra, rb)):
        da = a[i - builtins.max(ra, rb) + ra] if i - builtins.max(ra, rb) + ra >= 0 else 1
        db = b[i - builtins.max(ra, rb) + rb] if i - builtins.max(ra, rb) + rb >= 0 else 1
        if da != db and da != 1 and db != 1:
            raise KilnError(f"shapes {tuple(a)} and {tuple(b)} cannot be broadcast together")
        out.append(builtins.max(da, db))
    return tuple(out)


def promote(a: kl.dtype, b: kl.dtype) -> kl.dtype:
    if a is b:
        return a
    if a.is_float and b.is_float:
        if {a.name, b.name} == {"float16", "bfloat16"}:
            return kl.float32
        return a if a.bits >= b.bits else b
    if a.is_float:
        return a
    if b.is_float:
        return b
    return a if a.bits >= b.bits else b


# --------------------------------------------------------------------------
# The code generator
# --------------------------------------------------------------------------


# Python values compiled into a kernel as they are (compared by value).
PLAIN_TYPES = (bool, int, float, complex, str, bytes)


def _freeze(v):
    """A list's or dict's contents, recursively, as comparable tuples."""
    if type(v) is list:
        return ("list",) + tuple(_freeze(x) for x in v)
    if type(v) is dict:
        return ("dict",) + tuple((k, _freeze(x)) for k, x in v.items())
    return v


class _Frozen:
    """A list or dict a kernel read (a global's `len(SIZES)`), with its
    contents when read: changed in place, it is the same object, which the
    identity test of same_value took as unchanged."""

    __slots__ = ("obj", "snapshot")

    def __init__(self, obj):
        self.obj, self.snapshot = obj, _freeze(obj)

    def __repr__(self):
        return repr(self.snapshot)


def _recorded(value):
    """What a kernel's record of a value it read holds (same_value's `a`)."""
    return _Frozen(value) if type(value) in (list, dict) else value


def same_value(a, b):
    """Whether two compile-time values are the same for compiling: the same
    object, or an equal number, string, tuple or constexpr of the same type
    (2 and 2.0 differ: they compile differently); a recorded list or dict
    the same object with the same contents."""
    if isinstance(a, _Frozen):
        return a.obj is b and a.snapshot == _freeze(b)
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, kl.constexpr):
        return same_value(a.value, b.value)
    return isinstance(a, PLAIN_TYPES) and a == b



def _plain_value(v):
    """A number, string, None or tuple of them: a value compiled into a
    kernel."""
    if isinstance(v, tuple):
        return all(_plain_value(x) for x in v)
    return v is None or isinstance(v, PLAIN_TYPES)


class _CellValue:
    """A closure cell read as the globals dict is (used_globals' check)."""

    def __init__(self, cell):
        self.cell = cell

    def get(self, name, default):
        try:
            return self.cell.cell_contents
        except ValueError:
            return default


class _AttrValue:
    """An object's attributes read as the globals dict is."""

    def __init__(self, obj):
        self.obj = obj

    def get(self, name, default):
        return getattr(self.obj, name, default)


def _if_returns(stmts):
    """The return statements in `stmts` and in the ifs nested in them (not
    in loops)."""
    found = []
    for st in stmts:
        if isinstance(st, ast.Return):
            found.append(st)
        elif isinstance(st, ast.If):
            found += _if_returns(st.body) + _if_returns(st.orelse)
    return found


def _returns_value(r):
    """Whether a return statement gives a value (`return None` does not)."""
    return r.value is not None and not (isinstance(r.value, ast.Constant) and
                                        r.value.value is None)


def fold_early_returns(stmts):
    """`if c: ...; return` followed by more statements, as Triton kernels
    write a guard (`if pid >= n: return`): the statements after the `if`
    become the branches' continuation (each branch that does not return
    gets a copy), so every return ends its function. Only returns without a
    value, under ifs of the function's own body (a return in a loop is not
    folded: it would become a `continue`)."""
    inner = [r for st in stmts if isinstance(st, ast.If) for r in _if_returns([st])]
    if not inner or any(_returns_value(r) for r in inner):
        return stmts

    def fold(block):
        out = []
        for i, st in enumerate(block):
            if isinstance(st, ast.Return):
                # This path ends here, with its value if it has one (a
                # helper's `return a * 2` after a guard was dropped).
                return out + [st] if _returns_value(st) else out
            if isinstance(st, ast.If) and _if_returns([st]):
                rest = block[i + 1:]
                new = ast.If(test=st.test, body=fold(st.body + rest) or [ast.Pass()],
                             orelse=fold(st.orelse + rest))
                ast.copy_location(new, st)
                ast.fix_missing_locations(new)
                # Nothing follows it: its branches carry nothing out (they
                # tried to, and refused the statements after a guard that
                # change a name's type).
                new.kiln_tail = True
                return out + [new]
            out.append(st)
        return out

    return fold(list(stmts))


class _Gone:
    """What a name holds after a runtime loop or branch that bound it
    without carrying it out (it was not defined before, or it is the loop
    variable): using it is an error naming why. (It read the construct's
    region value, an invalid program, or a global of the same name.)"""

    __slots__ = ("why",)

    def __init__(self, why):
        self.why = why


# What a function that returned nothing (`return`, `return None`) returned:
# CodeGen.returned is None until a return ran.
_NOTHING = object()

# Builtins whose call in a runtime conditional expression could fault or
# has side effects (visit_IfExp evaluates both sides).
_EFFECTS = ("load", "store", "atomic", "scatter", "gather", "device_", "print",
            "debug_barrier", "desc_")

# Helper calls nested deeper than this are refused (unbounded recursion).
_MAX_HELPER_DEPTH = 64


class CodeGen(ast.NodeVisitor):
    def __init__(self, fn, builder: Builder, filename: str, first_line: int, source: str,
                 grid_rank: int = 3):
        self.fn = fn
        self.grid_rank = grid_rank
        self.b = builder
        self.carried_pointers = {}  # (carry: the construct being entered)
        self.filename = filename
        self.first_line = first_line
        self.source_lines = source.splitlines()
        self.source_text = source
        # The source was dedented (a kernel defined in a function or class):
        # columns in the file are that much further right.
        import linecache
        raw = linecache.getline(filename, first_line) if filename else ""
        self.indent = len(raw) - len(raw.lstrip(" \t")) if raw.strip() else 0
        # kl.device_assert is checked (debug=True, KILN_DEBUG=1)
        self.debug = False
        self.scopes = [{}]
        self.globals = fn.__globals__
        # The kernel's free variables (a kernel defined in a function):
        # looked up before the globals, as Python does.
        self.closure = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
        self.returned = None
        # widen_key (the construct's site and occurrence, the variable's
        # name) -> the integer dtype the construct carries that variable at
        # (WidenCarried), shared with the helpers it inlines; None where a
        # widening cannot be retried.
        self.widen = None
        # For widen keys (construct_site): the helper call sites that led
        # here, and how often each construct was entered in this
        # translation (shared with helpers) and which entry is current.
        self.context = ()
        self.visits = {}
        self.occurrence = {}
        # Where compile-time prints go while a translation may be retried
        # (a list, printed once it succeeds); None: printed at once.
        self.static_prints = None
        # A return in the taken branch of a compile-time `if`: the
        # statements after the if are dead code (visit_stmts skips them).
        self.returned_in_constant_branch = False
        self.in_helper = 0
        # The statement that last assigned each name (for loop-carried type
        # errors, which point at the assignment that changed the type).
        self.sites = {}
        self.stmt = None
        # The kernel parameters stored to (kl.store, kl.scatter,
        # kl.atomic_add through a pointer or a view of it): a launch refuses
        # read-only arrays for them.
        self.written = set()
        # The module globals the body read: (name, globals dict) -> value,
        # checked at each launch (a changed global would otherwise be
        # silently ignored: its value is compiled in).
        self.used_globals = {}

    # -- locations and errors ------------------------------------------------

    def error_at(self, node, message):
        lineno = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0)
        line = self.source_lines[lineno - 1] if 0 < lineno <= len(self.source_lines) else None
        if line is not None:
            line = " " * self.indent + line
        return CompilationError(message, self.filename, lineno + self.first_line - 1,
                                col + self.indent, line)

    def visit(self, node):
        if hasattr(node, "lineno"):
            self.b.set_loc(self.filename, node.lineno + self.first_line - 1,
                           node.col_offset + 1 + self.indent)
        try:
            return super().visit(node)
        except (CompilationError, LaunchGridError):
            raise
        except (KilnError, IRError) as e:
            raise self.error_at(node, str(e)) from None
        except RecursionError:
            raise
        except (TypeError, ValueError, IndexError, KeyError, AttributeError,
                OverflowError) as e:
            raise self.error_at(node, f"{type(e).__name__}: {e}") from None

    def generic_visit(self, node):
        raise KilnError(f"unsupported Python construct in a kernel: {type(node).__name__}")

    # -- scopes ---------------------------------------------------------------

    def lookup(self, name, node):
        for scope in reversed(self.scopes):
            if name in scope:
                value = scope[name]
                if isinstance(value, _Gone):
                    raise KilnError(value.why)
                return value
        cell = self.closure.get(name)
        if cell is not None:
            try:
                value = cell.cell_contents
            except ValueError:
                raise KilnError(f"free variable '{name}' is referenced before it is "
                                "assigned in the enclosing function") from None
            if not isinstance(value, types.ModuleType):
                self.used_globals[(name, id(cell))] = (name, _recorded(value), _CellValue(cell),
                                                       f"variable '{name}' of the enclosing "
                                                       "function")
            return value
        if name in self.globals:
            value = self.globals[name]
            if not isinstance(value, types.ModuleType):
                self.used_globals[(name, id(self.globals))] = (name, _recorded(value),
                                                               self.globals,
                                                               f"global variable '{name}'")
            return value
        if hasattr(builtins, name) and name in ("range", "min", "max", "abs", "int",
                                                 "float", "bool", "len", "print",
                                                 "True", "False", "None", "isinstance",
                                                 "tuple", "list"):
            return getattr(builtins, name)
        raise KilnError(f"undefined name '{name}'")

    def assign(self, name, value):
        self.scopes[-1][name] = value
        if self.stmt is not None and isinstance(self.stmt, (ast.Assign, ast.AugAssign,
                                                            ast.AnnAssign)):
            self.sites[name] = self.stmt

    def defined(self, name):
        return any(name in s and not isinstance(s[name], _Gone) for s in self.scopes)

    def defined_here(self):
        """The names of the current scope that hold values."""
        return {n for n, v in self.scopes[-1].items() if not isinstance(v, _Gone)}

    # -- materialization ----------------------------------------------------------

    def ir_type(self, dtype, shape=()):
        t = self.b.scalar_type(dtype.ir)
        if shape:
            return self.b.tile_type(list(shape), t)
        return t

    def py_value(self, value, dtype):
        """A Python number as a constant of `dtype` (float, bool or int), or a
        KilnError when it has no such value (inf or NaN as an integer, an
        integer beyond int64) rather than a raw OverflowError."""
        if dtype.is_float:
            try:
                return float(value)
            except OverflowError:
                raise KilnError(f"{value} is too large for {dtype.name}") from None
        if dtype is kl.int1:
            return bool(value)
        if isinstance(value, float) and not math.isfinite(value):
            raise KilnError(f"{value} has no {dtype.name} value")
        value = int(value)
        if not -(1 << 63) <= value < (1 << 63):
            raise KilnError(f"integer constant {value} does not fit in 64 bits")
        if not self.fits(value, dtype):
            # (It would wrap: int8 + 300 is not 44. NumPy 2 raises too.)
            raise KilnError(f"{value} does not fit in {dtype.name} (it would wrap); widen "
                            "the other operand first, e.g. x.to(kl.int64)")
        return value

    @staticmethod
    def fits(value, dtype):
        half = 1 << (dtype.bits - 1)
        return -half <= value < half

    def const(self, value, dtype):
        if dtype.fp8 is not None:
            t = self.const(fp8_bits(float(value), dtype.fp8), kl.int8)
            return Tile(t.value, dtype, ())
        value = self.py_value(value, dtype)
        t = Tile(self.b.constant(value, self.ir_type(dtype)), dtype, ())
        t.uniform = True
        t.nonneg = dtype.is_int() and dtype is not kl.int1 and value >= 0
        if dtype.is_int() and dtype is not kl.int1:
            t.lin = (int(value), ())
        return t

    def memory_value(self, value, dtype):
        """A value stored to (or combined into) `dtype` elements: a Python
        number converted once, as kl.full's (a float rounded once, not
        through float32: 0.1 into float64 was 0.10000000149; an int the
        dtype cannot hold refused, not wrapped); a tile as it is (the store
        converts it, as Triton's)."""
        if isinstance(value, kl.constexpr):
            value = value.value
        if isinstance(value, (int, float)):   # (bool is an int)
            if isinstance(value, int) and not isinstance(value, bool) and \
                    dtype.is_int_signed() and not self.fits(value, dtype):
                raise KilnError(f"{value} does not fit in {dtype.name} elements (storing it "
                                "would wrap)")
            return self.builtin_full((), value, dtype)
        return self.to_tile(value)

    def to_tile(self, x, like: Tile | None = None):
        """Turns Python numbers into scalar Tiles (typed like `like`)."""
        if isinstance(x, Tile):
            return x
        if isinstance(x, kl.constexpr):
            x = x.value
        if isinstance(x, bool):
            return self.const(x, kl.int1)
        if isinstance(x, int):
            # (Beside a bool tile an int is an int32, and the bools widen to
            # it, as in Triton and NumPy: `c & 2` is 0, not `c & True`.)
            if like is not None and like.dtype is not kl.int1:
                return self.const(x, like.dtype)
            if -(1 << 31) <= x < (1 << 31):
                return self.const(x, kl.int32)
            return self.const(x, kl.int64)
        if isinstance(x, float):
            if like is not None and like.dtype.is_float:
                return self.const(x, like.dtype)
            # A float32 unless it is finite, not 0 and outside float32's
            # normal range (1e300 was inf): then a float64, as in Triton.
            big = abs(x)
            if big != 0.0 and big != math.inf and x == x and \
                    not 2.0 ** -126 <= big <= (2 - 2.0 ** -23) * 2.0 ** 127:
                return self.const(x, kl.float64)
            return self.const(x, kl.float32)
        raise KilnError(f"expected a number or a tile, got {type(x).__name__}")

    def cast(self, t: Tile, dtype: kl.dtype) -> Tile:
        if t.dtype is dtype:
            return t
        if t.dtype.fp8 is not None:   # fp8 bits -> float32 values first
            t = Tile(self.decode_mx(Tile(t.value, kl.int8, t.shape), t.dtype.fp8, True, True,
                                    "an fp8 value").value, kl.float32, t.shape)
            if dtype is kl.float32:
                return t
        if dtype.fp8 is not None:
            if t.dtype is kl.float64:
                return self.encode_fp8(self.round_to_odd_f32(t), dtype)
            return self.encode_fp8(self.cast(t, kl.float32), dtype)
        out = Tile(self.b.cast(t.value, self.ir_type(dtype, t.shape)), dtype, t.shape)
        # (Widening only: a narrowing cast may wrap the values.)
        if t.strided is not None and dtype in WIDE_INTS and dtype.bits >= t.dtype.bits:
            out.strided = t.strided
            out.coords = t.coords
        if t.rows is not None and dtype in WIDE_INTS and dtype.bits >= t.dtype.bits:
            out.rows = t.rows
        out.nonneg = t.nonneg and dtype.is_int() and dtype is not kl.int1 and \
            dtype.bits >= t.dtype.bits
        out.uniform = t.uniform and t.is_scalar
        if dtype in WIDE_INTS and dtype.bits >= t.dtype.bits and t.is_scalar and \
                t.dtype.is_int() and t.dtype is not kl.int1:
            out.terms = t.terms
            out.lin = self.lin_of(t)
        return out

    def gather_elements(self, src, index, axis):
        """Triton's tl.gather: result[.., i, ..] = src[.., index[.., i, ..], ..]
        along `axis` (kiln.gather_elements; an index outside the axis reads 0)."""
        if isinstance(axis, kl.constexpr):
            axis = axis.value
        src = self.to_tile(src)
        index = self.to_tile(index.value if isinstance(index, kl.constexpr) else index)
        if src.is_scalar:
            raise KilnError("gather(src, index, axis): src must be a tile")
        if not index.dtype.is_int() or index.dtype is kl.int1:
            raise KilnError(f"gather indices must be integers, got {index.dtype.name}")
        if not isinstance(axis, int) or isinstance(axis, bool):
            raise KilnError("gather's axis must be a compile-time int")
        rank = len(src.shape)
        if axis < 0:
            axis += rank
        if not 0 <= axis < rank:
            raise KilnError(f"gather axis {axis} is out of range for a rank-{rank} tile")
        if len(index.shape) != rank:
            raise KilnError(f"gather: the index tile must have the source's rank ({rank}), "
                            f"got shape {index.shape}")
        for d in builtins.range(rank):
            if d != axis and index.shape[d] != src.shape[d]:
                raise KilnError(f"gather: index shape {index.shape} and source shape "
                                f"{src.shape} differ outside the axis ({axis})")
        return Tile(self.b.gather_elements(src.value, index.value, axis,
                                           self.ir_type(src.dtype, index.shape)),
                    src.dtype, index.shape)

    def int_to_pointer(self, t, dtype: kl.dtype) -> Pointer:
        """An int64 scalar address as a pointer to `dtype` elements (Triton's
        `addr.to(tl.pointer_type(T))`; kiln.int_to_ptr). The address is the
        caller's promise, as a pointer argument's is."""
        if isinstance(t, (Pointer, PointerTile)):
            raise KilnError("a pointer is already a pointer (index it with its own dtype)")
        t = self.to_tile(t)
        if not t.is_scalar or t.dtype not in (kl.int64,):
            raise KilnError(f"a pointer is made from an int64 scalar address, got "
                            f"{t.dtype.name} of shape {t.shape} (tiles of pointers are not "
                            "supported; load one address at a time)")
        ptr = self.b.int_to_ptr(t.value, self.b.ptr_type(self.b.scalar_type(dtype.ir)))
        return Pointer(ptr, dtype)

    def bitcast(self, t, dtype: kl.dtype) -> Tile:
        """The same bits as another dtype of the same width (Triton's
        `x.to(dtype, bitcast=True)`)."""
        if isinstance(t, (Pointer, PointerTile, BlockPointer, View)):
            raise KilnError("bitcast of pointers is not supported (bitcast values; index "
                            "the array with its own dtype)")
        t = self.to_tile(t)
        if t.dtype is dtype:
            return t
        if kl.int1 in (t.dtype, dtype):
            raise KilnError(f"cannot bitcast {t.dtype.name} to {dtype.name} (bool has no "
                            "bit layout; compare, or convert with .to())")
        if t.dtype.bits != dtype.bits:
            raise KilnError(f"cannot bitcast {t.dtype.name} ({t.dtype.bits} bits) to "
                            f"{dtype.name} ({dtype.bits} bits): the widths differ")
        return Tile(self.b.bitcast(t.value, self.ir_type(dtype, t.shape)), dtype, t.shape)

    def broadcast_to(self, t: Tile, shape) -> Tile:
        shape = tuple(shape)
        if t.shape == shape:
            return t
        if t.is_scalar:
            return Tile(self.b.splat(t.value, self.ir_type(t.dtype, shape)), t.dtype, shape)
        if len(t.shape) > len(shape):
            raise KilnError(f"cannot broadcast shape {t.shape} to {shape}")
        v = t
        while len(v.shape) < len(shape):
            v = Tile(self.b.expand_dims(v.value, 0), v.dtype, (1,) + v.shape)
        for a, b_ in zip(v.shape, shape):
            if a != b_ and a != 1:
                raise KilnError(f"cannot broadcast shape {t.shape} to {shape}")
        out = Tile(self.b.broadcast(v.value, self.ir_type(v.dtype, shape)), v.dtype, shape)
        # (Only dimensions of size 1 grow, and those have no stride or limit.)
        out.strided = self.strided_of(t, len(shape))
        out.limits = self.limits_of(t, len(shape))
        if t.rows is not None and len(t.shape) == len(shape) and t.shape[0] == shape[0]:
            out.rows = t.rows
        if t.row_mask is not None and len(t.shape) == len(shape) and t.shape[0] == shape[0]:
            out.row_mask = t.row_mask
        if t.coords is not None:
            out.coords = self.coords_of(t, len(shape))
        out.bounds = self.bounds_of(t, len(shape))
        return out

    def unify(self, a, b):
        """Brings two operands to one dtype and shape (NumPy-style)."""
        if not isinstance(a, Tile) and not isinstance(b, Tile):
            raise KilnError("internal: unify on two Python values")
        # (fp8 values compute in float32, as on GPUs without fp8 arithmetic;
        # first, so that a Python number beside one is not rounded to fp8.)
        if isinstance(a, Tile) and a.dtype.fp8 is not None:
            a = self.cast(a, kl.float32)
        if isinstance(b, Tile) and b.dtype.fp8 is not None:
            b = self.cast(b, kl.float32)
        if not isinstance(a, Tile):
            a = self.to_tile(a, b if not (isinstance(a, float) and b.dtype.is_int()) else None)
        if not isinstance(b, Tile):
            b = self.to_tile(b, a if not (isinstance(b, float) and a.dtype.is_int()) else None)
        dt = promote(a.dtype, b.dtype)
        a, b = self.cast(a, dt), self.cast(b, dt)
        shape = broadcast_shapes(a.shape, b.shape)
        return self.broadcast_to(a, shape), self.broadcast_to(b, shape)

    # -- statements ---------------------------------------------------------------

    def visit_Module(self, node):
        for s in node.body:
            self.visit(s)

    def visit_FunctionDef(self, node):
        raise KilnError("nested function definitions are not supported in kernels")

    def visit_body(self, stmts):
        """A function's body, its early returns folded (fold_early_returns)."""
        self.visit_stmts(fold_early_returns(stmts))

    def visit_stmts(self, stmts):
        for s in stmts:
            if self.returned is not None:
                if self.returned_in_constant_branch:
                    break           # dead code, as in Python
                raise self.error_at(s, "code after 'return' is not supported")
            outer, self.stmt = self.stmt, s
            self.visit(s)
            self.stmt = outer

    def visit_Expr(self, node):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # docstring
        self.visit(node.value)

    def visit_Pass(self, node):
        pass

    def visit_Assign(self, node):
        value = self.visit(node.value)
        for target in node.targets:
            self.bind_target(target, value)

    def bind_target(self, target, value):
        if isinstance(target, ast.Name):
            if isinstance(value, (list,)):
                value = tuple(value)
            self.assign(target.id, value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, kl.constexpr) and isinstance(value.value, (tuple, list)):
                value = value.value
            if isinstance(value, list):
                value = tuple(value)
            if not isinstance(value, tuple) or len(value) != len(target.elts):
                what = (f"{len(value)} values" if isinstance(value, tuple) else
                        f"a {type(value).__name__}")
                raise KilnError(f"cannot unpack {what} into {len(target.elts)} names")
            for t, v in zip(target.elts, value):
                self.bind_target(t, v)
        else:
            raise KilnError(f"unsupported assignment target: {type(target).__name__}")

    def visit_AnnAssign(self, node):
        if node.value is None:
            raise KilnError("annotated names need a value in kernels")
        self.bind_target(node.target, self.visit(node.value))

    def visit_AugAssign(self, node):
        if not isinstance(node.target, ast.Name):
            raise KilnError("augmented assignment supports plain names only")
        cur = self.lookup(node.target.id, node)
        self.assign(node.target.id, self.binop(node.op, cur, self.visit(node.value)))

    def visit_Return(self, node):
        # (self.returned None means "not returned": a return of nothing,
        # `return None` included, is _NOTHING. `return None` was taken as
        # no return at all, and the code after it ran.)
        value = self.visit(node.value) if node.value is not None else None
        if isinstance(value, kl.constexpr) and value.value is None:
            value = None
        if not self.in_helper:
            if value is not None:
                raise KilnError("a kernel cannot return a value; store results to memory")
            self.returned = _NOTHING
            return
        self.returned = _NOTHING if value is None else value

    def visit_Assert(self, node):
        """`assert cond, msg`: kl.device_assert (checked only with debug on;
        a compile-time condition too, since the assert may sit in a branch
        taken at run time)."""
        cond = self.visit(node.test)
        msg = ""
        if node.msg is not None:
            msg = self.visit(node.msg)
            if isinstance(msg, kl.constexpr):
                msg = msg.value
            if not isinstance(msg, str):
                raise KilnError("an assert's message must be a compile-time string")
        if isinstance(cond, kl.constexpr):
            cond = cond.value
        if not isinstance(cond, (Tile, Pointer, PointerTile, View)):
            if cond:
                return None
            cond = False
        if not msg:
            msg = ast.get_source_segment(self.source_text, node.test) or ""
        self.builtin_device_assert(cond, msg)

    # -- control flow ---------------------------------------------------------------

    def assigned_names(self, stmts):
        names = []
        for s in stmts:
            for n in ast.walk(s):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    if n.id not in names:
                        names.append(n.id)
        return names

    def construct_site(self, node):
        """A loop or branch's place: the chain of helper calls that inlined
        this code, the statement's position, and the how-many-th time this
        translation met it there (a helper loop under static_range)."""
        return (self.context, self.filename, self.first_line + node.lineno, node.col_offset)

    def enter_construct(self, node):
        site = self.construct_site(node)
        self.occurrence[site] = self.visits.get(site, 0)
        self.visits[site] = self.occurrence[site] + 1

    def widen_key(self, node, name):
        site = self.construct_site(node)
        return site + (self.occurrence.get(site, 0), name)

    def carry(self, names, node):
        """The loop-carried names: assigned in the body and defined before.
        Python numbers among them become IR scalars so the loop can carry them;
        pointers are carried as their scalar shift (self.carried_pointers,
        this construct's: name -> the pointer before it). Integers the
        construct assigns wider ones to start wide (WidenCarried)."""
        self.enter_construct(node)
        self.carried_pointers = {}
        out = []
        for name in names:
            if not self.defined(name):
                continue
            v = self.lookup(name, None)
            if isinstance(v, View):
                raise KilnError(f"view '{name}' is reassigned inside a loop or branch; "
                                "make each view once, before it")
            if isinstance(v, BlockPointer):
                # (kl.advance in a loop: each offset is carried, under a name
                # no Python code can use.)
                offs = tuple(self.cast(self.to_tile(o), kl.int64) for o in v.offsets)
                v = v.moved(offs)
                self.assign(name, v)
                for d, o in enumerate(offs):
                    hidden = f"{name}\x00{d}"
                    self.assign(hidden, o)
                    self.carried_pointers[hidden] = (name, d, v)
                    out.append(hidden)
                continue
            if isinstance(v, (Pointer, PointerTile)):
                # A pointer advanced by scalars (`a_ptrs += BK * stride`): the
                # construct carries the scalar shift from a fixed root.
                v = self.shiftable(v)
                self.assign(name, v)
                self.carried_pointers[name] = v
                out.append(name)
                continue
            # A constexpr (or a Python number) reassigned at run time becomes
            # a runtime scalar holding its value, so the loop or branch can
            # carry it.
            if isinstance(v, kl.constexpr) and isinstance(v.value, (int, float, bool)):
                v = v.value
            if isinstance(v, (int, float, bool)) and not isinstance(v, kl.dtype):
                v = self.to_tile(v)
                self.assign(name, v)
            wide = self.widen.get(self.widen_key(node, name)) if self.widen else None
            # (Only a narrower integer: the same loop translated again, in a
            # helper called twice, may carry a float under that name.)
            if isinstance(v, Tile) and wide is not None and v.dtype.is_int_signed() and \
                    v.dtype.bits < wide.bits:
                v = self.cast(v, wide)
                self.assign(name, v)
            if isinstance(v, Tile):
                out.append(name)
        return out

    # -- pointers carried through loops and branches ------------------------------------

    def shiftable(self, v):
        """`v` as a root and a scalar shift: a Pointer's offset, or a pointer
        tile's `fixed` offsets tile plus `shift`."""
        if isinstance(v, Pointer):
            return v
        if v.fixed is not None:
            return v
        out = PointerTile(v.base, v.offsets)
        out.fixed = v.offsets
        out.shift = self.const(0, kl.int64)
        return out

    def pointer_shift(self, v):
        """The int64 scalar a carried pointer's construct carries."""
        if isinstance(v, Pointer):
            return self.const(0, kl.int64) if v.offset is None else self.cast(
                self.to_tile(v.offset), kl.int64)
        return self.cast(v.shift, kl.int64)

    def carried_start(self, name, node, ptrs):
        if name in ptrs and not isinstance(ptrs[name], tuple):
            return self.pointer_shift(ptrs[name])
        return self.lookup(name, node)

    def carried_end(self, name, node, ptrs):
        if name not in ptrs:
            return self.lookup(name, node)
        if isinstance(ptrs[name], tuple):
            bp_name, d, root = ptrs[name]
            v = self.lookup(bp_name, node)
            if not isinstance(v, BlockPointer) or v.view is not root.view:
                raise self.error_at(
                    self.sites.get(bp_name, node),
                    f"block pointer '{bp_name}' may only be moved (kl.advance) inside a loop "
                    "or branch, not rebuilt")
            return self.cast(self.to_tile(v.offsets[d]), kl.int64)
        root, v = ptrs[name], self.lookup(name, node)
        same = (isinstance(root, Pointer) and isinstance(v, Pointer) and v.value is root.value) or \
            (isinstance(root, PointerTile) and isinstance(v, PointerTile) and
             v.fixed is root.fixed and v.base.value is root.base.value)
        if not same:
            raise self.error_at(
                self.sites.get(name, node),
                f"pointer '{name}' may only be advanced by scalars inside a loop or branch "
                f"(`{name} += step`), not rebuilt; carry an integer offset instead")
        return self.pointer_shift(v)

    def bind_carried(self, name, shift: Tile, ptrs):
        if name not in ptrs:
            self.assign(name, shift)
            return
        root = ptrs[name]
        if isinstance(root, tuple):
            bp_name, d, bp = root
            self.assign(name, shift)
            cur = self.lookup(bp_name, None)
            offs = list(cur.offsets if isinstance(cur, BlockPointer) else bp.offsets)
            offs[d] = shift
            self.assign(bp_name, bp.moved(offs))
            return
        if isinstance(root, Pointer):
            self.assign(name, Pointer(root.value, root.dtype, shift, root.param))
            return
        out = PointerTile(root.base, self.binop(ast.Add(), root.fixed, shift))
        out.fixed, out.shift = root.fixed, shift
        self.assign(name, out)

    SHIFT_NODES = (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Add, ast.Sub,
                   ast.Mult, ast.FloorDiv, ast.USub, ast.Load)

    def pointer_steps(self, node, names, ptrs):
        """For a `for` loop: the pointers its body advances by the same
        amount in every iteration, evaluated before the loop: one statement
        of the body's own (not in a branch) `p += step` or `p = p + step`, no
        other assignment to p, and `step` arithmetic on names the body does
        not assign (Triton's `a_ptrs += BLOCK_K * stride_ak`). The body has
        no break or continue (kernels have none), so the shift in iteration
        t is the one before the loop plus t * step (bind_stepped)."""
        out = {}
        for name, root in ptrs.items():
            if isinstance(root, tuple):
                continue
            found = []
            for stmt in node.body:
                e = None
                if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add) and \
                        isinstance(stmt.target, ast.Name) and stmt.target.id == name:
                    e = stmt.value
                elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and \
                        isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == name \
                        and isinstance(stmt.value, ast.BinOp) and \
                        isinstance(stmt.value.op, ast.Add):
                    for x, y in ((stmt.value.left, stmt.value.right),
                                 (stmt.value.right, stmt.value.left)):
                        if isinstance(x, ast.Name) and x.id == name:
                            e = y
                            break
                if e is not None:
                    found.append(e)
            stores = sum(1 for stmt in node.body for n in ast.walk(stmt)
                         if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and
                         n.id == name)
            if len(found) != 1 or stores != 1:
                continue
            e = found[0]
            if not all(isinstance(n, self.SHIFT_NODES) for n in ast.walk(e)):
                continue
            used = [n.id for n in ast.walk(e) if isinstance(n, ast.Name)]
            if any(u in names or u == node.target.id or u == name or not self.defined(u)
                   for u in used):
                continue
            try:
                c = self.visit(e)
            except KilnError:
                continue
            if isinstance(c, kl.constexpr):
                c = c.value
            if self.is_int_scalar(c):
                out[name] = c
        return out

    def bind_stepped(self, name, start, c, i, lb, st, ptrs):
        """Rebinds pointer `name`, advanced by `c` in every iteration of the
        loop whose index `i` runs from `lb` by the int `st`, to its shift as a
        function of the index: start + (i - lb) * (c / st) where c's linear
        form divides by st (`a_ptrs += BK * stride` in `range(0, K, BK)`),
        else start + ((i - lb) // st) * c. The carried shift is then only
        yielded; the index form has the terms a view's dimensions can take."""
        if isinstance(lb, kl.constexpr):
            lb = lb.value
        t = i if isinstance(lb, int) and lb == 0 else self.binop(ast.Sub(), i, lb)
        t.nonneg = True  # (i >= lb inside a loop of positive step)
        lc = self.lin_of(c)
        if st != 1:
            if lc is not None and lc[0] % st == 0 and all(m % st == 0 for _, m in lc[1]):
                c = self.lin_value((lc[0] // st, tuple((a, m // st) for a, m in lc[1])))
            else:
                t = self.binop(ast.FloorDiv(), t, st)
                t.nonneg = True
        shift = self.binop(ast.Add(), self.cast(self.to_tile(start), kl.int64),
                           self.binop(ast.Mult(), t, self.cast(self.to_tile(c), kl.int64)))
        root = ptrs[name]
        if isinstance(root, Pointer):
            self.assign(name, Pointer(root.value, root.dtype, shift, root.param))
            return
        out = PointerTile(root.base, self.binop(ast.Add(), root.fixed, shift))
        out.fixed, out.shift = root.fixed, shift
        self.assign(name, out)

    def fixed_values(self, names, carried):
        """The compile-time values (tuples, None, dtypes, ...) of names the
        body assigns that a loop or branch cannot carry."""
        moved = {p[0] for p in self.carried_pointers.values() if isinstance(p, tuple)}
        return {n: self.lookup(n, None) for n in names
                if self.defined(n) and n not in carried and n not in moved}

    def check_fixed(self, node, fixed, where):
        """A name holding a value that cannot be carried must not change in
        a runtime loop or branch (it would silently keep its old value)."""
        for n, v in fixed.items():
            if not same_value(v, self.lookup(n, node)):
                raise self.error_at(
                    self.sites.get(n, node),
                    f"'{n}' (a {type(v).__name__}) is reassigned inside a runtime {where}, "
                    "which can carry only tiles and numbers (give each tile its own name, "
                    "bound to a tile or number before)")

    def check_carried(self, node, name, before: Tile, after):
        if not isinstance(after, Tile):
            v = after.value if isinstance(after, kl.constexpr) else after
            half = 1 << (before.dtype.bits - 1)
            if isinstance(v, int) and not isinstance(v, bool) and before.dtype.is_int_signed() \
                    and not -half <= v < half:
                after = self.to_tile(v)   # (too wide for before's type: widened below)
            else:
                after = self.to_tile(after, before)
        if after.dtype is before.dtype and after.shape == before.shape:
            return after
        ints = after.shape == before.shape and all(
            t.dtype.is_int_signed() for t in (before, after))
        if ints and after.dtype.bits < before.dtype.bits:
            return self.cast(after, before.dtype)   # (exact)
        what = "variable" if isinstance(node, ast.If) else "loop-carried variable"
        error = self.error_at(
            self.sites.get(name, node),
            f"{what} '{name}' changes type from "
            f"{before.dtype.name}{list(before.shape)} to {after.dtype.name}{list(after.shape)}")
        key = self.widen_key(node, name)
        if ints and self.widen is not None and \
                self.widen.get(key, before.dtype).bits < after.dtype.bits:
            raise WidenCarried(key, after.dtype, error)
        raise error

    def visit_For(self, node):
        if node.orelse:
            raise KilnError("for ... else is not supported")
        it = node.iter
        fn = self.visit(it.func) if isinstance(it, ast.Call) else None
        if getattr(fn, "_kiln_builtin", None) == "static_range":
            return self.static_for(node, it)
        is_kl_range = getattr(fn, "_kiln_builtin", None) == "range"
        if not (fn is builtins.range or is_kl_range):
            raise KilnError("kernels support 'for' over range(...) or kl.range(...) only")
        overlap = False
        # Triton's tl.range hints, checked and otherwise unused: the pipeline
        # depth is the launch's num_stages, and Kiln neither unrolls by
        # request nor specializes warps.
        hints = {"num_stages": int, "loop_unroll_factor": int, "warp_specialize": bool,
                 "disallow_acc_multi_buffer": bool, "flatten": bool}
        for k in it.keywords:
            if not is_kl_range or (k.arg != "overlap" and k.arg not in hints):
                raise KilnError("range() takes no keyword arguments; kl.range() takes "
                                "overlap= and Triton's num_stages=, loop_unroll_factor=, "
                                "warp_specialize=, disallow_acc_multi_buffer=, flatten=")
            v = self.visit(k.value)
            v = v.value if isinstance(v, kl.constexpr) else v
            if k.arg in hints:
                want = hints[k.arg]
                if want is bool and not isinstance(v, bool) or want is int and (
                        isinstance(v, bool) or not isinstance(v, int) or v < 0):
                    raise KilnError(f"kl.range({k.arg}=...) must be a compile-time "
                                    f"{'bool' if want is bool else 'int >= 0'}")
                continue
            if not isinstance(v, bool):
                raise KilnError("kl.range(overlap=...) must be a compile-time bool")
            overlap = v
        args = [self.visit(a) for a in it.args]
        if not 1 <= len(args) <= 3:
            raise KilnError("range expects 1 to 3 arguments")
        if len(args) == 1:
            args = [0, args[0], 1]
        elif len(args) == 2:
            args = [args[0], args[1], 1]
        step_value = args[2].value if isinstance(args[2], kl.constexpr) else args[2]
        if isinstance(step_value, int) and step_value == 0:
            raise KilnError("range() step must not be zero")
        bounds = []
        for a in args:
            t = self.to_tile(a)
            if t.dtype.is_float or not t.is_scalar:
                raise KilnError("range() bounds must be integer scalars")
            bounds.append(self.cast(t, kl.int64))
        # A runtime step may be negative or zero, which scf.for (a positive
        # step) cannot run: the loop counts Python's number of iterations,
        # len(range(lb, ub, step)) = max(0, cdiv(ub - lb, step)), and
        # i = lb + t * step. A zero step runs no iterations (Python raises
        # ValueError; a kernel cannot).
        # (A negative constant step, `range(K, 0, -BK)`, counts the same way.)
        # So does a constant step whose last increment would pass int64's
        # maximum (scf.for's induction variable wrapped and the loop never
        # ended: `range(0, 2**63 - 1, 2**62)`).
        ub_value = args[1].value if isinstance(args[1], kl.constexpr) else args[1]
        runtime_step = isinstance(step_value, Tile) or step_value < 0 or (
            isinstance(ub_value, int) and ub_value > (1 << 63) - step_value)
        if runtime_step:
            lb64, ub64, st64 = bounds
            zero_step = self.compare(ast.Eq(), st64, 0)
            divisor = self.where(zero_step, 1, st64)
            trips = self.binop(ast.Sub(), 0, self.binop(
                ast.FloorDiv(), self.binop(ast.Sub(), lb64, ub64), divisor))
            trips = self.where(zero_step, 0, self.builtin_maximum(trips, 0))
            bounds = [self.to_tile(0, st64), trips, self.to_tile(1, st64)]
        lb, ub, st = [Tile(self.b.cast(t.value, self.b.scalar_type("index")), kl.int64, ())
                      for t in bounds]
        if not isinstance(node.target, ast.Name):
            raise KilnError("the loop variable must be a single name")
        names = self.assigned_names(node.body)
        carried = self.carry(names, node)
        ptrs = self.carried_pointers
        before = {n: self.carried_start(n, node, ptrs) for n in carried}
        fixed = self.fixed_values([n for n in names if n != node.target.id], carried)
        outer_names = self.defined_here()
        steps = {} if runtime_step else self.pointer_steps(node, names, ptrs)
        iv, iters = self.b.for_begin(lb.value, ub.value, st.value,
                                     [before[n].value for n in carried], overlap)
        for n, v in zip(carried, iters):
            self.bind_carried(n, Tile(v, before[n].dtype, before[n].shape), ptrs)
        i = Tile(self.b.cast(iv, self.b.scalar_type("i64")), kl.int64, ())
        if runtime_step:
            i = self.binop(ast.Add(), lb64, self.binop(ast.Mult(), i, st64))
        else:
            # (lb, lb + step, ...: never below a start that is not negative.)
            i.nonneg = self.is_nonneg(args[0])
        self.assign(node.target.id, i)
        for n, c in steps.items():
            self.bind_stepped(n, before[n], c, i, args[0], step_value, ptrs)
        self.visit_stmts(node.body)
        if self.returned is not None:
            raise KilnError("'return' inside a loop is not supported")
        self.check_fixed(node, fixed, "loop")
        yields = [self.check_carried(node, n, before[n], self.carried_end(n, node, ptrs)).value
                  for n in carried]
        results = self.b.for_end(yields)
        self.drop_inner(outer_names, carried, "loop", node.target.id)
        for n, r in zip(carried, results):
            self.bind_carried(n, Tile(r, before[n].dtype, before[n].shape), ptrs)

    def static_for(self, node, it):
        """`for i in kl.static_range(...)`: the body once per index, the index
        a constexpr (Triton's compile-time unrolling)."""
        if it.keywords:
            raise KilnError("kl.static_range() takes no keyword arguments")
        args = [self.const_int(self.visit(a), "a static_range bound") for a in it.args]
        if not 1 <= len(args) <= 3:
            raise KilnError("kl.static_range expects 1 to 3 arguments")
        if len(args) == 3 and args[2] == 0:
            raise KilnError("kl.static_range() step must not be zero")
        if not isinstance(node.target, ast.Name):
            raise KilnError("the loop variable must be a single name")
        values = builtins.range(*args)
        if len(values) > 4096:
            raise KilnError(f"kl.static_range unrolls {len(values)} iterations; at most 4096")
        for v in values:
            self.assign(node.target.id, kl.constexpr(v))
            self.visit_stmts(node.body)
            if self.returned is not None:
                raise KilnError("'return' inside a loop is not supported")

    def visit_While(self, node):
        if node.orelse:
            raise KilnError("while ... else is not supported")
        names = self.assigned_names(node.body)
        carried = self.carry(names, node)
        ptrs = self.carried_pointers
        before = {n: self.carried_start(n, node, ptrs) for n in carried}
        fixed = self.fixed_values(names, carried)
        outer_names = self.defined_here()
        args = self.b.while_begin([before[n].value for n in carried])
        for n, v in zip(carried, args):
            self.bind_carried(n, Tile(v, before[n].dtype, before[n].shape), ptrs)
        cond = self.to_tile(self.visit(node.test))
        if not cond.is_scalar:
            raise KilnError("a while condition must be a scalar")
        cond = self.truth(cond)
        body_args = self.b.while_body(cond.value, [
            self.check_carried(node, n, before[n], self.carried_end(n, node, ptrs)).value
            for n in carried])
        for n, v in zip(carried, body_args):
            self.bind_carried(n, Tile(v, before[n].dtype, before[n].shape), ptrs)
        self.visit_stmts(node.body)
        if self.returned is not None:
            raise KilnError("'return' inside a loop is not supported")
        self.check_fixed(node, fixed, "loop")
        yields = [self.check_carried(node, n, before[n], self.carried_end(n, node, ptrs)).value
                  for n in carried]
        results = self.b.while_end(yields)
        self.drop_inner(outer_names, carried, "loop")
        for n, r in zip(carried, results):
            self.bind_carried(n, Tile(r, before[n].dtype, before[n].shape), ptrs)

    def drop_inner(self, outer_names, carried, where, loop_var=None, assigned=()):
        """Names first bound inside a runtime loop or branch (in the scope,
        or among `assigned`: a branch's scope is restored after it) hold
        values of its region: they do not exist after it (unlike in Python),
        nor does a loop's variable; using one is an error naming why (a
        global of the same name was read)."""
        scope = self.scopes[-1]
        for n in list(scope) + [n for n in assigned if n not in scope]:
            if n == loop_var:
                scope[n] = _Gone(f"the loop variable '{n}' is not defined after its runtime "
                                 "loop (the loop does not carry it out); keep what you need "
                                 "in a variable defined before the loop")
            elif n not in outer_names and n not in carried and \
                    not isinstance(scope.get(n), _Gone):
                scope[n] = _Gone(f"'{n}' is assigned inside a runtime {where} but not defined "
                                 f"before it, so it does not exist after it; assign it before "
                                 f"the {where} (kernels carry out only names defined before)")

    def truth(self, t: Tile) -> Tile:
        if t.dtype is kl.int1:
            return t
        zero = self.to_tile(0.0 if t.dtype.is_float else 0, t)
        return self.compare(ast.NotEq(), t, zero)

    def visit_If(self, node):
        cond = self.visit(node.test)
        if isinstance(cond, kl.constexpr):
            cond = cond.value
        if not isinstance(cond, Tile):
            # A compile-time condition: only the taken branch exists.
            self.visit_stmts(node.body if cond else node.orelse)
            if self.returned is not None:
                self.returned_in_constant_branch = True
            return
        if not cond.is_scalar:
            raise KilnError("an 'if' condition must be a scalar; use kl.where for tiles")
        cond = self.truth(cond)
        names = self.assigned_names(node.body + node.orelse)
        outer_names = self.defined_here()
        tail = getattr(node, "kiln_tail", False)
        carried = [] if tail else self.carry(names, node)
        ptrs = {} if tail else self.carried_pointers
        before = {n: self.carried_start(n, node, ptrs) for n in carried}
        fixed = {} if tail else self.fixed_values(names, carried)
        types = [self.ir_type(before[n].dtype, before[n].shape) for n in carried]
        self.b.if_begin(cond.value, types)
        saved = dict(self.scopes[-1])
        self.visit_stmts(node.body)
        if self.returned is not None:
            raise KilnError("'return' inside an if is supported only without a value and "
                            "outside loops")
        self.check_fixed(node, fixed, "branch")
        then_vals = [self.check_carried(node, n, before[n], self.carried_end(n, node, ptrs)).value
                     for n in carried]
        self.scopes[-1] = dict(saved)
        self.b.if_else(then_vals)
        self.visit_stmts(node.orelse)
        if self.returned is not None:
            raise KilnError("'return' inside an if is supported only without a value and "
                            "outside loops")
        self.check_fixed(node, fixed, "branch")
        else_vals = [self.check_carried(node, n, before[n], self.carried_end(n, node, ptrs)).value
                     for n in carried]
        self.scopes[-1] = saved
        results = self.b.if_end(else_vals)
        for n, r in zip(carried, results):
            self.bind_carried(n, Tile(r, before[n].dtype, before[n].shape), ptrs)
        # Names first defined inside a branch do not exist after the if.
        self.drop_inner(outer_names, carried, "if", assigned=names)

    # -- expressions -------------------------------------------------------------------

    def visit_Constant(self, node):
        if isinstance(node.value, (int, float, bool, str)) or node.value is None:
            return node.value
        raise KilnError(f"unsupported constant {node.value!r}")

    def visit_Name(self, node):
        return self.lookup(node.id, node)

    def visit_Tuple(self, node):
        return tuple(self.visit(e) for e in node.elts)

    def visit_List(self, node):
        return tuple(self.visit(e) for e in node.elts)

    def visit_Attribute(self, node):
        obj = self.visit(node.value)
        attr = node.attr
        if isinstance(obj, Tile):
            if attr == "shape":
                return obj.shape
            if attr == "dtype":
                return obj.dtype
            if attr == "T":
                if len(obj.shape) != 2:
                    raise KilnError(f".T transposes a 2-D tile, got shape {obj.shape}")
                return self.builtin_trans(obj)
            if attr in ("to", "reshape", "trans", "permute") or attr in TILE_METHODS:
                return BoundMethod(attr, obj)
            if attr == "numel":   # (Triton's: a compile-time int)
                return math.prod(obj.shape)
            raise KilnError(f"tiles have no attribute '{attr}'")
        if isinstance(obj, kl.constexpr):
            obj = obj.value
        if isinstance(obj, TensorDescriptor):
            if attr == "dtype":
                return obj.dtype
            if attr == "block_shape":
                return tuple(kl.constexpr(d) for d in obj.block_shape)
            if attr in ("load", "store"):
                return BoundMethod("desc_" + attr, obj)
            for kind, name in self.ATOMIC_NAMES.items():
                if attr == name:
                    return BoundMethod("desc_" + kind, obj)
            raise KilnError(f"tensor descriptors have no attribute '{attr}'")
        if isinstance(obj, BlockPointer) and attr == "advance":   # (Triton's member form)
            return BoundMethod("advance", obj)
        if isinstance(obj, (Pointer, PointerTile, View)):
            if attr == "dtype":
                return obj.dtype
            raise KilnError(f"pointers have no attribute '{attr}'")
        try:
            value = getattr(obj, attr)
        except AttributeError:
            if obj is kl:
                raise KilnError(f"kiln.language has no '{attr}' (docs/python.md lists what "
                                "kernels can call)") from None
            raise KilnError(f"'{type(obj).__name__}' object has no attribute '{attr}'") from None
        # A number, string or tuple read from an object or module reached
        # from a global or an enclosing function's variable (a config's
        # `C.BLOCK`) is compiled in: checked at each launch, as the globals
        # are. (Functions, dtypes and modules are not: kl.float32, kl.sum.
        # Nor what is reached from a constexpr argument: the specialization
        # key holds its attributes.)
        root = node.value
        while isinstance(root, ast.Attribute):
            root = root.value
        if _plain_value(value) and obj is not kl and isinstance(root, ast.Name) and \
                not self.defined(root.id):
            self.used_globals[(attr, id(obj))] = (attr, value, _AttrValue(obj),
                                                  f"attribute '{ast.unparse(node)}'")
        return value

    def visit_Subscript(self, node):
        obj = self.visit(node.value)
        idx = node.slice
        items = idx.elts if isinstance(idx, ast.Tuple) else [idx]
        if isinstance(obj, kl.constexpr) and isinstance(obj.value, (tuple, list, dict)):
            obj = obj.value     # (a tuple passed as a constexpr)
        if isinstance(obj, (tuple, list, dict)):   # (lists and dicts: globals)
            key = self.visit(idx)
            if isinstance(key, kl.constexpr):
                key = key.value
            if isinstance(obj, dict) and not isinstance(key, (int, float, str, bool, tuple)):
                raise KilnError(f"a dict is indexed by compile-time keys, got "
                                f"{type(key).__name__}")
            return obj[key]
        if not isinstance(obj, Tile):
            what = ("a pointer plus offsets: index or slice the offsets before adding "
                    "them to the pointer" if isinstance(obj, PointerTile) else
                    f"got {type(obj).__name__}")
            raise KilnError(f"only tiles can be indexed (x[:, None], x[a:b]); {what}")
        if obj.is_scalar:
            raise KilnError("a scalar cannot be indexed; use kl.full((1,), x) for a tile")
        # x[:, None] / x[None, :]: insert size-1 dimensions. x[a:b, :c]
        # with compile-time bounds: a block of the tile (one
        # tensor.extract_slice after the insertions; docs/python.md).
        result = obj
        dim = 0
        blocks = {}  # dimension of the result -> (start, stop)
        for it in items:
            if isinstance(it, ast.Constant) and it.value is None:
                result = self.inserted_dim(result, Tile(
                    self.b.expand_dims(result.value, dim), result.dtype,
                    result.shape[:dim] + (1,) + result.shape[dim:]), dim)
                dim += 1
            elif isinstance(it, ast.Slice):
                if dim >= len(result.shape):
                    raise KilnError(f"too many subscripts for a tile of shape {result.shape}")
                n = result.shape[dim]
                step = self.slice_bound(it.step, n, 1, "step")
                if step != 1:
                    raise KilnError(f"tile slices take a step of 1, got {step}")
                lo = self.slice_bound(it.lower, n, 0, "start")
                hi = self.slice_bound(it.upper, n, n, "stop")
                if not 0 <= lo < hi <= n:
                    raise KilnError(f"the slice {lo}:{hi} of a dimension of {n} is empty "
                                    f"or outside it (tile shape {result.shape})")
                if (lo, hi) != (0, n):
                    blocks[dim] = (lo, hi)
                dim += 1
            else:
                raise KilnError("tiles support only ':', 'None' and slices with "
                                "compile-time bounds ('a:b') in subscripts")
        if blocks:
            offsets = [blocks.get(d, (0, n))[0] for d, n in enumerate(result.shape)]
            sizes = [blocks[d][1] - blocks[d][0] if d in blocks else n
                     for d, n in enumerate(result.shape)]
            result = Tile(self.b.slice(result.value, offsets, sizes), result.dtype,
                          tuple(sizes))
        return result

    def slice_bound(self, node, n, default, what):
        """A tile slice's start, stop or step: a compile-time integer
        (negative counts from the end, as in Python)."""
        if node is None:
            return default
        v = self.visit(node)
        if isinstance(v, kl.constexpr):
            v = v.value
        if isinstance(v, bool) or not isinstance(v, int):
            raise KilnError(f"a tile slice's {what} must be a compile-time integer "
                            f"(a literal or kl.constexpr), got {v!r}")
        return v + n if v < 0 and what != "step" else v

    def visit_UnaryOp(self, node):
        v = self.visit(node.operand)
        if isinstance(v, kl.constexpr):
            v = v.value
        if not isinstance(v, (Tile,)):
            if isinstance(node.op, ast.USub):
                return -v
            if isinstance(node.op, ast.UAdd):
                return +v
            if isinstance(node.op, ast.Not):
                return not v
            if isinstance(node.op, ast.Invert):
                return ~v
        if isinstance(node.op, ast.USub):
            if v.dtype.fp8 is not None:
                v = self.cast(v, kl.float32)
            if v.dtype.is_float:
                return Tile(self.b.unary("negf", v.value), v.dtype, v.shape)
            return self.binop(ast.Sub(), 0, v)
        if isinstance(node.op, ast.UAdd):
            return v
        if isinstance(node.op, ast.Not):
            return self.compare(ast.Eq(), self.truth(v), False)
        if isinstance(node.op, ast.Invert):
            if v.dtype.is_float:
                raise KilnError("~ needs an integer tile")
            return self.binop(ast.BitXor(), v, -1 if v.dtype is not kl.int1 else True)
        raise KilnError("unsupported unary operator")

    def visit_BinOp(self, node):
        return self.binop(node.op, self.visit(node.left), self.visit(node.right))

    def visit_BoolOp(self, node):
        # Compile-time operands short-circuit as in Python (`bias is not
        # None and kl.load(bias)` with bias None; `N > 0 and 10 // N`); once
        # one is a runtime value, every later operand is evaluated and
        # combined (as Triton does: no branch).
        values = []
        for operand in node.values:
            v = self.visit(operand)
            v = v.value if isinstance(v, kl.constexpr) else v
            values.append(v)
            if all(not isinstance(x, Tile) for x in values) and \
                    (not v if isinstance(node.op, ast.And) else v):
                return v
        if all(not isinstance(v, Tile) for v in values):
            result = values[0]
            for v in values[1:]:
                result = (result and v) if isinstance(node.op, ast.And) else (result or v)
            return result
        op = ast.BitAnd() if isinstance(node.op, ast.And) else ast.BitOr()
        result = self.truth(self.to_tile(values[0]))
        for v in values[1:]:
            result = self.binop(op, result, self.truth(self.to_tile(v)))
        return result

    def visit_Compare(self, node):
        if len(node.ops) != 1:
            raise KilnError("chained comparisons are not supported")
        return self.compare(node.ops[0], self.visit(node.left), self.visit(node.comparators[0]))

    def visit_IfExp(self, node):
        cond = self.visit(node.test)
        if isinstance(cond, kl.constexpr):
            cond = cond.value
        if not isinstance(cond, Tile):
            return self.visit(node.body) if cond else self.visit(node.orelse)
        # Both sides are evaluated and one selected: a side that loads,
        # stores, calls a helper, ... would run (or fault) whatever the
        # condition (an atomic counted, a load past the array crashed).
        for side in (node.body, node.orelse):
            for call in (n for n in ast.walk(side) if isinstance(n, ast.Call)):
                root = call.func
                while isinstance(root, ast.Attribute):
                    root = root.value
                if not isinstance(root, ast.Name):
                    continue    # (a computed callee: visiting it would build it)
                fn = self.visit(call.func)
                from .jit import JITFunction  # noqa: avoid an import cycle
                name = fn.name if isinstance(fn, BoundMethod) else \
                    getattr(fn, "_kiln_builtin", None) or ""
                if isinstance(fn, JITFunction) or name.startswith(_EFFECTS):
                    raise KilnError(
                        "a conditional expression on a runtime value evaluates both sides, "
                        f"and this side calls {ast.unparse(call.func)}, which loads, stores "
                        "or may have effects: use an if statement, or a masked load "
                        "(kl.load(p, mask=cond, other=0))")
        return self.where(cond, self.visit(node.body), self.visit(node.orelse))

    def visit_Call(self, node):
        fn = self.visit(node.func)
        if isinstance(fn, kl.constexpr) and callable(fn.value):
            fn = fn.value   # (a function passed as a constexpr: `ACT: kl.constexpr`)
        args = [self.visit(a) for a in node.args]
        kwargs = {k.arg: self.visit(k.value) for k in node.keywords if k.arg}
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise KilnError("*args and **kwargs are not supported in kernels")
        if isinstance(fn, BoundMethod):
            return self.call_method(fn, args, kwargs)
        name = getattr(fn, "_kiln_builtin", None)
        if name is not None:
            impl = getattr(self, "builtin_" + name)
            # A dtype passed as a constexpr parameter (`ACC: kl.constexpr`,
            # Triton's out_dtype=ACC) is the dtype: kl.zeros(s, ACC) and
            # kl.dot(out_dtype=ACC) refused the wrapper.
            args = [a.value if isinstance(a, kl.constexpr) and isinstance(a.value, kl.dtype)
                    else a for a in args]
            kwargs = {k: v.value if isinstance(v, kl.constexpr) and
                      isinstance(v.value, kl.dtype) else v for k, v in kwargs.items()}
            import inspect
            try:
                inspect.signature(impl).bind(*args, **kwargs)
            except TypeError as e:
                raise KilnError(f"kl.{name}(): {e}") from None
            return impl(*args, **kwargs)
        from .jit import JITFunction  # noqa: avoid an import cycle
        if isinstance(fn, JITFunction):
            return self.inline(fn, args, kwargs, node)
        if isinstance(getattr(fn, "__self__", None), kl.dtype):
            # Triton's dtype queries: x.dtype.is_floating(), ...
            return fn(*args, **kwargs)
        if fn is kl.pointer_type:   # a compile-time type, for .to()
            return kl.pointer_type(*[a.value if isinstance(a, kl.constexpr) else a
                                     for a in args], **kwargs)
        if isinstance(fn, kl.dtype):
            if len(args) != 1:
                raise KilnError(f"{fn.name}(x) takes one argument")
            return self.cast(self.to_tile(args[0]), fn)
        if fn in (builtins.min, builtins.max, builtins.abs, builtins.int, builtins.float,
                  builtins.bool, builtins.len, builtins.isinstance, builtins.tuple,
                  builtins.print, math.sqrt, math.log2, math.ceil, math.floor):
            plain = [a.value if isinstance(a, kl.constexpr) else a for a in args]
            if any(isinstance(a, (Tile, Pointer, PointerTile, View)) for a in plain):
                if fn is builtins.print:
                    # print("x", x): device_print (Triton's), the leading
                    # strings as its prefix.
                    lead = 0
                    while lead < len(plain) and isinstance(plain[lead], str):
                        lead += 1
                    return self.builtin_device_print(" ".join(plain[:lead]), *plain[lead:])
                if fn in (builtins.min, builtins.max) and len(plain) == 2:
                    return self.builtin_minimum(*plain) if fn is builtins.min else self.builtin_maximum(*plain)
                raise KilnError(f"{fn.__name__}() works on compile-time values only; use kl.* on tiles")
            if fn is builtins.print:
                return self.compile_time_print(*plain, **kwargs)
            return fn(*plain, **kwargs)
        if fn is builtins.range:
            raise KilnError("range() is only supported as the iterable of a for loop")
        raise KilnError(f"cannot call '{getattr(fn, '__name__', fn)}' in a kernel "
                        "(only kl.* builtins, @kiln.jit functions and compile-time math)")

    def inline(self, fn, args, kwargs, node):
        """Calls a @kiln.jit helper by translating its body in place."""
        import inspect
        sig = inspect.signature(fn.fn)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise KilnError(f"in call to {fn.fn.__name__}: {e}") from None
        bound.apply_defaults()
        tree, first_line, source, filename = fn.parse()
        if self.in_helper >= _MAX_HELPER_DEPTH:
            raise KilnError(f"helper calls nested deeper than {_MAX_HELPER_DEPTH} "
                            f"(calling {fn.fn.__name__}): unbounded recursion?")
        sub = CodeGen(fn.fn, self.b, filename, first_line, source, self.grid_rank)
        sub.in_helper = self.in_helper + 1
        sub.debug = self.debug
        sub.written = self.written
        sub.used_globals = self.used_globals
        sub.widen = self.widen
        sub.static_prints = self.static_prints
        sub.context = self.context + ((self.filename, self.first_line + getattr(node, "lineno", 0),
                                       getattr(node, "col_offset", 0)),)   # (None: a combine_fn)
        sub.visits, sub.occurrence = self.visits, self.occurrence
        for name, value in bound.arguments.items():
            sub.assign(name, value)
        fdef = tree.body[0]
        sub.visit_body(fdef.body)
        return None if sub.returned is _NOTHING else sub.returned

    def call_method(self, m: BoundMethod, args, kwargs):
        if m.name == "to":
            unknown = sorted(set(kwargs) - {"dtype", "bitcast", "fp_downcast_rounding"})
            if unknown:
                raise KilnError(f".to() got an unexpected keyword argument '{unknown[0]}'")
            if len(args) > 1 or (args and "dtype" in kwargs):
                raise KilnError(".to() takes one dtype (and bitcast=, fp_downcast_rounding=)")
            dtype = args[0] if args else kwargs.get("dtype")
            if isinstance(dtype, kl.constexpr):
                dtype = dtype.value
            if isinstance(dtype, kl.pointer_type):
                return self.int_to_pointer(m.obj, dtype.element_ty)
            if not isinstance(dtype, kl.dtype):
                raise KilnError(".to() expects a kl dtype")
            bitcast = kwargs.get("bitcast", False)
            if isinstance(bitcast, kl.constexpr):
                bitcast = bitcast.value
            if not isinstance(bitcast, bool):
                raise KilnError(".to(bitcast=...) must be a compile-time bool")
            if bitcast:
                return self.bitcast(m.obj, dtype)
            rounding = kwargs.get("fp_downcast_rounding")
            if isinstance(rounding, kl.constexpr):
                rounding = rounding.value
            return self.rounded_cast(m.obj, dtype, rounding)
        if m.name in ("reshape", "trans", "permute"):
            allowed = {"can_reorder"} if m.name == "reshape" else set()
            unknown = sorted(set(kwargs) - allowed)
            if unknown:
                raise KilnError(f".{m.name}() got an unexpected keyword argument '{unknown[0]}'")
            return getattr(self, "builtin_" + m.name)(m.obj, *args, **kwargs)
        if m.name in TILE_METHODS or m.name == "advance":
            impl = getattr(self, "builtin_" + m.name)
            args = [a.value if isinstance(a, kl.constexpr) and isinstance(a.value, kl.dtype)
                    else a for a in args]
            kwargs = {k: v.value if isinstance(v, kl.constexpr) and
                      isinstance(v.value, kl.dtype) else v for k, v in kwargs.items()}
            import inspect
            try:
                inspect.signature(impl).bind(m.obj, *args, **kwargs)
            except TypeError as e:
                raise KilnError(f".{m.name}(): {e}") from None
            return impl(m.obj, *args, **kwargs)
        if m.name.startswith("desc_"):
            op = m.name[len("desc_"):]
            if op == "load":
                return self.builtin_load_tensor_descriptor(m.obj, *args, **kwargs)
            if op == "store":
                return self.builtin_store_tensor_descriptor(m.obj, *args, **kwargs)
            return self.descriptor_atomic(op, m.obj, *args, **kwargs)
        raise KilnError(f"unknown method {m.name}")

    # -- arithmetic ----------------------------------------------------------------------

    BIN = {
        ast.Add: ("addf", "addi"), ast.Sub: ("subf", "subi"), ast.Mult: ("mulf", "muli"),
        ast.Div: ("divf", None), ast.FloorDiv: (None, "floordivsi"), ast.Mod: ("remf", "remsi"),
        ast.BitAnd: (None, "andi"), ast.BitOr: (None, "ori"), ast.BitXor: (None, "xori"),
        ast.LShift: (None, "shli"), ast.RShift: (None, "shrsi"), ast.Pow: ("powf", None),
    }

    # Arithmetic: bool operands count as int32 0 and 1 (as in Triton).
    ARITH = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
             ast.LShift, ast.RShift)

    def widen_bools(self, a, b, pairs=True):
        """Bool (i1) tiles as int32 0/1 where their 1-bit arithmetic would be
        wrong: beside a Python number (which would otherwise become a bool
        too), or beside another bool when `pairs` (arithmetic; comparisons
        of two bools compare them as unsigned instead). Beside a typed
        tile, unify's zero extension already does it."""
        def is_bool(x):
            return isinstance(x, Tile) and x.dtype is kl.int1

        def widen(x, y):
            if not is_bool(x) or (isinstance(y, Tile) and y.dtype is not kl.int1):
                return x
            if not pairs and (is_bool(y) or isinstance(y, bool)):
                return x
            return self.cast(x, kl.int32)
        return widen(a, b), widen(b, a)

    def binop(self, op, a, b):
        if isinstance(a, kl.constexpr):
            a = a.value
        if isinstance(b, kl.constexpr):
            b = b.value
        out = self._binop(op, a, b)
        if isinstance(op, ast.BitAnd) and isinstance(out, Tile) and out.is_scalar and \
                isinstance(a, Tile) and isinstance(b, Tile) and a.fact and b.fact:
            out.fact = ("and", a.fact, b.fact)
        # What scalar integer arithmetic keeps known (Tile.uniform, nonneg,
        # terms).
        if isinstance(out, Tile) and out.is_scalar and out.dtype in WIDE_INTS and \
                self.is_int_scalar(a) and self.is_int_scalar(b):
            if self.is_uniform(a) and self.is_uniform(b):
                out.uniform = True
            if isinstance(op, ast.FloorDiv) and self.is_nonneg(a) and self.is_nonneg(b):
                out.nonneg = True  # (floor division by 0 is an error)
            elif isinstance(op, ast.Mod) and self.is_nonneg(b):
                out.nonneg = True  # (Python's %: the divisor's sign)
            if isinstance(op, (ast.Add, ast.Sub, ast.Mult)) and not out.uniform:
                try:
                    out.terms = self.terms_binop(op, a, b)
                except KilnError:  # a coefficient past int64
                    out.terms = None
            la, lb = self.lin_of(a), self.lin_of(b)
            if la is not None and lb is not None:
                if isinstance(op, (ast.Add, ast.Sub)):
                    out.lin = self.lin_add(la, lb, 1 if isinstance(op, ast.Add) else -1)
                elif isinstance(op, ast.Mult) and not lb[1]:
                    out.lin = self.lin_scale(la, lb[0])
                elif isinstance(op, ast.Mult) and not la[1]:
                    out.lin = self.lin_scale(lb, la[0])
            # (N + BN - 1: atoms not negative, coefficients and constant not
            # negative.)
            if not out.nonneg and out.lin is not None and out.lin[0] >= 0 and \
                    all(m > 0 and x.nonneg for x, m in out.lin[1]):
                out.nonneg = True
        return out

    def _binop(self, op, a, b):
        if not isinstance(a, (Tile, Pointer, PointerTile)) and not isinstance(b, (Tile, Pointer, PointerTile)):
            return self.python_binop(op, a, b)
        # Pointer arithmetic: pointer + integer offsets.
        if isinstance(a, (Pointer, PointerTile)) or isinstance(b, (Pointer, PointerTile)):
            if isinstance(b, (Pointer, PointerTile)) and isinstance(op, ast.Add):
                a, b = b, a
            if not isinstance(op, (ast.Add, ast.Sub)) or isinstance(b, (Pointer, PointerTile)):
                raise KilnError("pointers support only + and - with integer offsets")
            off = self.to_tile(b)
            if off.dtype.is_float:
                raise KilnError("pointer offsets must be integers, got " + off.dtype.name)
            if isinstance(op, ast.Sub):
                off = self.binop(ast.Sub(), 0, off)
            if isinstance(a, Pointer):
                if off.is_scalar:
                    # (Summed as addresses are, in int64: two int8 offsets
                    # must not wrap.)
                    total = off if a.offset is None else self.binop(
                        ast.Add(), self.cast(a.offset, kl.int64), self.cast(off, kl.int64))
                    return Pointer(a.value, a.dtype, total, a.param)
                offsets = off if a.offset is None else self.binop(ast.Add(), off, a.offset)
                if off.contiguous is not None and a.offset is not None:
                    base, n = off.contiguous
                    offsets.contiguous = (self.contiguous_base(base, a.offset, offsets.dtype), n)
                return PointerTile(Pointer(a.value, a.dtype, param=a.param), offsets)
            out = PointerTile(a.base, self.binop(ast.Add(), a.offsets, off))
            if a.fixed is not None and off.is_scalar:
                out.fixed = a.fixed
                out.shift = self.binop(ast.Add(), self.cast(a.shift, kl.int64),
                                       self.cast(off, kl.int64))
            return out
        orig_a, orig_b = a, b
        if isinstance(op, self.ARITH):
            a, b = self.widen_bools(a, b)
        if isinstance(op, ast.Div):
            a, b = self.unify(a, b)
            if a.dtype.is_int():
                a, b = self.cast(a, kl.float32), self.cast(b, kl.float32)
        else:
            a, b = self.unify(a, b)
        fl, it = self.BIN[type(op)]
        name = fl if a.dtype.is_float else it
        if name is None:
            if isinstance(op, ast.FloorDiv) and a.dtype.is_float:
                return self.float_floordiv(a, b)
            raise KilnError(f"operator {type(op).__name__} is not defined for {a.dtype.name}")
        if name in ("shli", "shrsi"):
            return self.shift(name, a, b, orig_b)
        result = Tile(self.b.binary(name, a.value, b.value), a.dtype, a.shape)
        if isinstance(op, ast.Mod):
            return self.floor_mod(result, b)
        if a.dtype is kl.int1 and isinstance(op, ast.BitAnd):
            result.limits = self.and_limits(orig_a, orig_b, len(result.shape))
            result.bounds = self.and_bounds(orig_a, orig_b, len(result.shape))
            result.row_mask = self.and_row_mask(orig_a, orig_b, result)
        elif a.dtype in WIDE_INTS and isinstance(op, (ast.Add, ast.Sub, ast.Mult)):
            result.strided = self.strided_binop(op, orig_a, orig_b, result.shape)
            if result.strided is not None:
                result.coords = self.coords_binop(op, orig_a, orig_b, result)
            else:
                result.rows = self.rows_binop(op, orig_a, orig_b, result.shape)
        if a.dtype in WIDE_INTS and isinstance(op, (ast.Add, ast.Mult)) and \
                self.is_nonneg(orig_a) and self.is_nonneg(orig_b):
            result.nonneg = True
        # Track `scalar + arange(...)`: contiguous offsets let loads and stores
        # through pointers become view accesses (masked vector code).
        if isinstance(op, ast.Add) and a.dtype.is_int():
            for x, y in ((orig_a, orig_b), (orig_b, orig_a)):
                if isinstance(x, Tile) and x.contiguous is not None and \
                        (not isinstance(y, Tile) or y.is_scalar):
                    base, n = x.contiguous
                    result.contiguous = (self.contiguous_base(base, y, result.dtype), n)
                    break
        return result

    def shift(self, name, a, b, count):
        """a << b or a >> b (arithmetic; a and b unified), as NumPy's: a
        count at or past the width, or negative, gives 0 (<<) or the sign
        bits, -1 or 0 (>>). LLVM's shift is poison there: a constant count,
        a scalar one and a tile of them gave three different answers. A
        constant count below the width is one plain shift; a negative
        constant is an error, as in Python."""
        width = a.dtype.bits
        if isinstance(count, kl.constexpr):
            count = count.value
        constant = isinstance(count, int) and not isinstance(count, bool)
        if constant and count < 0:
            raise KilnError(f"negative shift count {count}")
        if constant and count < width:
            return Tile(self.b.binary(name, a.value, b.value), a.dtype, a.shape)
        past = self.binop(ast.RShift(), a, width - 1) if name == "shrsi" else \
            self.binop(ast.BitAnd(), a, 0)
        if constant:
            return past
        out = self.binop(ast.BitOr(), self.compare(ast.GtE(), b, width),
                         self.compare(ast.Lt(), b, 0))
        return self.where(out, past, Tile(self.b.binary(name, a.value, b.value), a.dtype,
                                          a.shape))

    def contiguous_base(self, base, y, dtype):
        """The start of the run `y + (base + arange)`: computed in the
        offsets' dtype (`dtype`), not in a narrower scalar's (an int8 `y`
        must not wrap `128 + y`)."""
        if isinstance(base, int) and isinstance(y, int) and not isinstance(y, bool):
            return base + y
        base = self.cast(base, dtype) if isinstance(base, Tile) else base
        y = self.cast(y, dtype) if isinstance(y, Tile) else y
        if not isinstance(base, Tile) and not isinstance(y, Tile):
            return self.binop(ast.Add(), self.to_tile(y, Tile(None, dtype, ())), base)
        return self.binop(ast.Add(), y, base)

    # -- linear forms of integer scalars (Tile.lin) ------------------------------------

    MAX_ATOMS = 8

    def lin_of(self, x):
        if isinstance(x, kl.constexpr):
            x = x.value
        if isinstance(x, bool):
            return None
        if isinstance(x, int):
            return (x, ())
        if not self.is_int_scalar(x):
            return None
        return x.lin if x.lin is not None else (0, ((x, 1),))

    def lin_add(self, p, q, k=1):
        """p + k * q, or None past MAX_ATOMS."""
        atoms = list(p[1])
        for a, m in q[1]:
            for j, (b, n) in enumerate(atoms):
                if b is a:
                    atoms[j] = (b, n + k * m)
                    break
            else:
                atoms.append((a, k * m))
        atoms = tuple((a, m) for a, m in atoms if m != 0)
        return (p[0] + k * q[0], atoms) if len(atoms) <= self.MAX_ATOMS else None

    @staticmethod
    def lin_scale(p, k):
        if k == 0:
            return (0, ())
        return (p[0] * k, tuple((a, m * k) for a, m in p[1]))

    def lin_value(self, p):
        """A linear form's value: an int, or an int64 scalar Tile (the atom
        itself for a lone atom of coefficient 1)."""
        out = p[0]
        for a, m in p[1]:
            out = self.s_op(ast.Add(), out, self.s_op(ast.Mult(), self.cast(a, kl.int64), m))
        return 0 if out is None else out

    def lin_ratio(self, x, y):
        """The int m > 0 with x == m * y (as linear forms), or None."""
        lx, ly = self.lin_of(x), self.lin_of(y)
        if lx is None or ly is None:
            return None
        if ly[1]:
            a0, m0 = ly[1][0]
            mx = next((m for a, m in lx[1] if a is a0), 0)
        else:
            m0, mx = ly[0], lx[0]
        if m0 == 0 or mx % m0:
            return None
        m = mx // m0
        if m <= 0 or self.lin_add(lx, ly, -m) != (0, ()):
            return None
        return m

    def fold_terms(self, terms, strides, origins, bounds):
        """Moves each term (i, s) of a pointer access's scalar part whose
        stride is a positive multiple m of a dimension's (a pointer shifted
        by `k * (BK * stride_ak)`: i = k, s = BK * stride_ak, m = BK along
        the dimension of stride stride_ak) into that dimension's origin
        (+ i * m) and its mask bound's size (+ i * m: `j < K - k * BK` at the
        old origin is `j + k * BK < K` at the new one). Returns the terms
        left, the origins and the bounds."""
        origins, bounds, kept = list(origins), list(bounds), []
        for i, s in terms:
            for d, st in enumerate(strides):
                if st is None:
                    continue
                m = self.lin_ratio(s, st)
                if m is None or (bounds[d] is not None and
                                 not self.same_origin(origins[d], bounds[d][1])):
                    continue
                try:
                    move = self.s_op(ast.Mult(), self.cast(self.to_tile(i), kl.int64)
                                     if isinstance(i, Tile) else i, m)
                    origin = self.s_op(ast.Add(), origins[d], move)
                    if bounds[d] is not None:
                        size = self.lin_add(self.lin_of(bounds[d][0]), self.lin_of(move))
                        bounds[d] = (self.lin_value(size) if size is not None else
                                     self.s_op(ast.Add(), bounds[d][0], move), origin)
                except KilnError:  # past int64
                    continue
                origins[d] = origin
                break
            else:
                kept.append((i, s))
        return tuple(kept), tuple(origins), tuple(bounds)

    # -- scalar offsets as sums of index x stride terms (Tile.terms) -------------------

    @staticmethod
    def is_uniform(x):
        if isinstance(x, kl.constexpr):
            x = x.value
        if isinstance(x, int):
            return True
        return isinstance(x, Tile) and x.uniform

    MAX_TERMS = 4

    def terms_of(self, x):
        """x as (c, terms) (Tile.terms), or None: a uniform value is all c;
        a value known not to be negative, one term (x, 1)."""
        if isinstance(x, kl.constexpr):
            x = x.value
        if not self.is_int_scalar(x):
            return None
        if self.is_uniform(x):
            lx = self.lin_of(x)
            return (lx[0], ()) if lx is not None and not lx[1] else (x, ())
        if x.terms is not None:
            return x.terms
        if self.is_nonneg(x):
            return (0, ((x, 1),))
        return None

    def terms_binop(self, op, a, b):
        """The terms of a op b (+, -, *), or None."""
        ta, tb = self.terms_of(a), self.terms_of(b)
        if ta is None or tb is None:
            return None
        if isinstance(op, ast.Mult):
            # (c + sum i * s) * k with k uniform: (c * k) + sum i * (s * k).
            for (c, terms), k in ((ta, b), (tb, a)):
                if self.is_uniform(k) and terms:
                    if isinstance(k, int) and k < 0:
                        return None
                    return (self.s_op(op, c, k) or 0,
                            tuple((i, self.s_op(op, s, k) or 0) for i, s in terms))
            return None
        if isinstance(op, ast.Sub) and tb[1]:
            return None
        terms = ta[1] + tb[1]
        if not terms or len(terms) > self.MAX_TERMS:
            return None
        return (self.s_op(op, ta[0], tb[0]) or 0, terms)

    def lead_dims(self, rest):
        """The view dimensions (size, stride, offset; ints or scalar Tiles)
        that carry a scalar offset `rest` of a pointer access no index owns
        (a batch or head offset), outermost first, or None: one per term
        (unbounded, stride s, offset i: an offset that is not negative is
        never masked), and for a nonzero uniform c one more (size 2, stride
        c, offset 1)."""
        if isinstance(rest, int) and rest == 0:
            return []
        t = rest if isinstance(rest, tuple) else self.terms_of(rest)
        if t is None:
            return None
        c, terms = t
        dims = []
        for i, s in terms:
            if (isinstance(s, int) and s < 0) or not self.is_nonneg(i):
                return None
            dims.append((UNBOUNDED, s, i))
        if isinstance(c, int) and c < 0:
            return None  # (a view's constant strides are not negative)
        if not (isinstance(c, int) and c == 0):
            dims.append((2, c, 1))
        return dims

    # -- strided integer tiles and bound masks (Tile.strided, Tile.limits) --------------

    @staticmethod
    def is_int_scalar(x):
        if isinstance(x, Tile):
            return x.is_scalar and x.dtype.is_int() and x.dtype is not kl.int1
        return isinstance(x, int) and not isinstance(x, bool)

    def s_op(self, op, x, y):
        """x op y for strided coefficients (ints, or integer scalar Tiles,
        computed in int64); None is 0."""
        if isinstance(op, ast.Mult):
            if x is None or y is None or (isinstance(x, int) and x == 0) or \
                    (isinstance(y, int) and y == 0):
                return None
            if isinstance(x, int) and x == 1:
                return y
            if isinstance(y, int) and y == 1:
                return x
        else:
            if y is None or (isinstance(y, int) and y == 0):
                return x
            if x is None or (isinstance(x, int) and x == 0):
                if isinstance(op, ast.Add):
                    return y
                x = 0
        if isinstance(x, int) and isinstance(y, int):
            r = {ast.Add: x + y, ast.Sub: x - y, ast.Mult: x * y}[type(op)]
            if -(1 << 63) <= r < (1 << 63):
                return r
        x = self.cast(x, kl.int64) if isinstance(x, Tile) else self.const(x, kl.int64)
        y = self.cast(y, kl.int64) if isinstance(y, Tile) else self.const(y, kl.int64)
        return self.binop(op, x, y)

    def strided_of(self, x, rank):
        """x's (c, strides) over `rank` dimensions (NumPy's alignment: the
        last ones), a scalar's being (x, no strides); None if x is neither."""
        if self.is_int_scalar(x):
            return (x, (None,) * rank)
        if isinstance(x, Tile) and x.strided is not None and len(x.shape) <= rank:
            c, strides = x.strided
            return (c, (None,) * (rank - len(strides)) + strides)
        return None

    def limits_of(self, x, rank):
        if isinstance(x, Tile) and x.limits is not None and len(x.shape) <= rank:
            return (None,) * (rank - len(x.limits)) + x.limits
        return None

    def mask_limits(self, mask, rank):
        """The per-dimension limits an access's mask gives (none without a
        mask), or None when the mask bounds no index (limits_of)."""
        return (None,) * rank if mask is None else self.limits_of(mask, rank)

    def inserted_dim(self, src: Tile, out: Tile, dim):
        """`out`, src with a size-1 dimension inserted at `dim`, with src's
        strides and limits moved over it."""
        if src.rows is not None and dim >= 1:
            g, scale, c, strides = src.rows
            out.rows = (g, scale, c, strides[:dim] + (None,) + strides[dim:])
        elif src.strided is None and len(src.shape) == 1 and dim == 1 and \
                src.dtype in WIDE_INTS:
            # `ids[:, None]`: the values of a 1-D tile along the rows.
            out.rows = (src, 1, 0, (None, None))
        elif len(src.shape) == 1 and dim == 1 and src.dtype is kl.int1 and src.limits is None:
            # `ok[:, None]`: a boolean per row.
            out.row_mask = (src, (None, None))
        if src.row_mask is not None and dim >= 1:
            m, lim = src.row_mask
            out.row_mask = (m, lim[:dim] + (None,) + lim[dim:])
        if src.strided is not None:
            c, strides = src.strided
            out.strided = (c, strides[:dim] + (None,) + strides[dim:])
        if src.limits is not None:
            out.limits = src.limits[:dim] + (None,) + src.limits[dim:]
        if src.coords is not None:
            rest, origins = src.coords
            out.coords = (rest, origins[:dim] + (None,) + origins[dim:])
        if src.bounds is not None:
            out.bounds = src.bounds[:dim] + (None,) + src.bounds[dim:]
        return out

    def rows_binop(self, op, x, y, shape):
        """Tile.rows of x op y (+, -, *) when one side has rows and the other
        is a scalar or a strided tile constant along dimension 0, or None."""
        try:
            return self._rows_binop(op, x, y, shape)
        except KilnError:  # a coefficient past int64
            return None

    def _rows_binop(self, op, x, y, shape):
        rank = len(shape)
        rx = x.rows if isinstance(x, Tile) else None
        ry = y.rows if isinstance(y, Tile) else None
        if rank < 2 or (rx is None) == (ry is None):
            return None
        if ry is not None:
            if isinstance(op, ast.Sub):
                return None  # (-G is not a row index)
            x, y, rx = y, x, ry
        g, scale, c, strides = rx
        if len(x.shape) != rank or g.shape != (shape[0],):
            return None
        other = self.strided_of(y, rank)
        if other is None or other[1][0] is not None:
            return None
        k, ks = other
        if isinstance(op, ast.Mult):
            if any(s is not None for s in ks):
                return None
            return (g, self.s_op(op, scale, k), self.s_op(op, c, k),
                    (None,) + tuple(self.s_op(op, s, k) for s in strides[1:]))
        return (g, scale, self.s_op(op, c, k),
                (None,) + tuple(self.s_op(op, s, t) for s, t in zip(strides[1:], ks[1:])))

    def strided_binop(self, op, x, y, shape):
        """The strides of x op y (+, -, *), or None. (Tracked in int32 and
        int64 tiles only, whose wrapping would make the kernel's addresses
        wrong anyway; int8 and int16 arithmetic wraps in practice.)"""
        try:
            return self._strided_binop(op, x, y, shape)
        except KilnError:  # a coefficient past int64: no view
            return None

    def _strided_binop(self, op, x, y, shape):
        rank = len(shape)
        sx, sy = self.strided_of(x, rank), self.strided_of(y, rank)
        if rank == 0 or sx is None or sy is None:
            return None
        if isinstance(op, ast.Mult):
            if all(s is None for s in sy[1]):
                (c, strides), k = sx, sy[0]
            elif all(s is None for s in sx[1]):
                (c, strides), k = sy, sx[0]
            else:
                return None
            c, strides = self.s_op(op, c, k), tuple(self.s_op(op, s, k) for s in strides)
        else:
            c = self.s_op(op, sx[0], sy[0])
            strides = tuple(self.s_op(op, u, v) for u, v in zip(sx[1], sy[1]))
        strides = tuple(None if n == 1 else s for s, n in zip(strides, shape))
        return (0 if c is None else c, strides)

    def bound_limits(self, op, a, b, rank):
        """The limits of `a < b` (<=, >, >= too) when one side is a strided
        tile varying along one dimension with stride 1 and the other an
        integer scalar: `c + i_d < bound` is `i_d < bound - c`."""
        if isinstance(op, (ast.Gt, ast.GtE)):
            a, b = b, a
        elif not isinstance(op, (ast.Lt, ast.LtE)):
            return None
        if not isinstance(a, Tile) or a.is_scalar or not self.is_int_scalar(b):
            return None
        s = self.strided_of(a, rank)
        if s is None:
            return None
        c, strides = s
        axes = [d for d, st in enumerate(strides) if st is not None]
        if len(axes) != 1 or not (isinstance(strides[axes[0]], int) and strides[axes[0]] == 1):
            return None
        limit = self.s_op(ast.Sub(), b, c)
        if isinstance(op, (ast.LtE, ast.GtE)):
            limit = self.s_op(ast.Add(), limit, 1)
        return tuple(limit if d == axes[0] else None for d in range(rank))

    def row_mask_of(self, x, rank):
        """(m, limits) when x is a row mask (Tile.row_mask) of that rank,
        limits a tuple (all None: no bound), else None."""
        if not isinstance(x, Tile) or x.row_mask is None or len(x.shape) != rank:
            return None
        return x.row_mask

    def and_row_mask(self, x, y, result):
        """Tile.row_mask of x & y (result): a row mask and a bound mask, or
        two row masks (their rows' masks combined)."""
        rank = len(result.shape)
        rx, ry = self.row_mask_of(x, rank), self.row_mask_of(y, rank)
        if rx is None and ry is None:
            return None
        if rx is None or ry is None:
            (m, lm), other = (rx, y) if ry is None else (ry, x)
            lo = self.limits_of(other, rank)
            if lo is None:
                return None
        else:
            m = self.binop(ast.BitAnd(), rx[0], ry[0])
            lm, lo = rx[1], ry[1]
        return m, self.and_limit_tuples(lm, lo)

    def and_limits(self, x, y, rank):
        lx, ly = self.limits_of(x, rank), self.limits_of(y, rank)
        if lx is None or ly is None:
            return None
        return self.and_limit_tuples(lx, ly)

    def and_limit_tuples(self, lx, ly):
        out = []
        for u, v in zip(lx, ly):
            if u is None or v is None:
                out.append(v if u is None else u)
            elif isinstance(u, int) and isinstance(v, int):
                out.append(min(u, v))
            else:
                out.append(self.builtin_minimum(*(w if isinstance(w, int) else
                                                  self.cast(w, kl.int64) for w in (u, v))))
        return tuple(out)

    @staticmethod
    def is_nonneg(x):
        if isinstance(x, kl.constexpr):
            x = x.value
        if x is None:
            return True
        if isinstance(x, bool):
            return False
        if isinstance(x, int):
            return x >= 0
        return isinstance(x, Tile) and x.nonneg

    @staticmethod
    def same_origin(u, v):
        """Whether two origins are provably equal: both 0 (None), equal ints,
        or the same scalar value."""
        u = None if isinstance(u, int) and u == 0 else u
        v = None if isinstance(v, int) and v == 0 else v
        if u is None or v is None:
            return u is None and v is None
        if isinstance(u, int) or isinstance(v, int):
            return isinstance(u, int) and isinstance(v, int) and u == v
        return u is v

    def coords_of(self, x, rank):
        """x's (rest, origins) over `rank` dimensions, a scalar's being
        (x, no origins); None if unknown."""
        if self.is_int_scalar(x):
            return (x, (None,) * rank)
        if isinstance(x, Tile) and x.coords is not None and len(x.shape) <= rank:
            rest, origins = x.coords
            return (rest, (None,) * (rank - len(origins)) + origins)
        return None

    def bounds_of(self, x, rank):
        if isinstance(x, Tile) and x.bounds is not None and len(x.shape) <= rank:
            return (None,) * (rank - len(x.bounds)) + x.bounds
        return None

    def coords_binop(self, op, x, y, result):
        try:
            return self._coords_binop(op, x, y, result)
        except KilnError:  # a coefficient past int64
            return None

    def _coords_binop(self, op, x, y, result):
        """The coords of x op y (+, -, *) whose strided form is `result`'s."""
        rank = len(result.shape)
        cx, cy = self.coords_of(x, rank), self.coords_of(y, rank)
        sx, sy = self.strided_of(x, rank), self.strided_of(y, rank)
        if cx is None or cy is None:
            return None
        flat_x = all(st is None for st in sx[1])
        flat_y = all(st is None for st in sy[1])
        if isinstance(op, ast.Mult):
            if flat_y:
                rest, origins = self.s_op(op, cx[0], sy[0]), cx[1]
            elif flat_x:
                rest, origins = self.s_op(op, cy[0], sx[0]), cy[1]
            else:
                return None
        else:
            # An index (one dimension, stride 1: `pid * BM + arange(0, BM)`,
            # `kk + rk`) plus or minus a scalar moves its origin.
            def index_axis(st):
                axes = [d for d, v in enumerate(st) if v is not None]
                if len(axes) == 1 and isinstance(st[axes[0]], int) and st[axes[0]] == 1:
                    return axes[0]
                return None
            d = index_axis(sx[1]) if flat_y else None
            if d is not None:
                origins = list(cx[1])
                origins[d] = self.s_op(op, origins[d], cy[0])
                rest, origins = cx[0], tuple(origins)
            elif isinstance(op, ast.Add) and flat_x and index_axis(sy[1]) is not None:
                d = index_axis(sy[1])
                origins = list(cy[1])
                origins[d] = self.s_op(op, origins[d], cx[0])
                rest, origins = cy[0], tuple(origins)
            else:
                rest = self.s_op(op, cx[0], cy[0])
                origins = []
                for u, v, ou, ov in zip(sx[1], sy[1], cx[1], cy[1]):
                    if v is None:
                        origins.append(ou if u is not None else None)
                    elif u is None:
                        origins.append(ov)
                    elif self.same_origin(ou, ov):
                        origins.append(ou)
                    else:
                        return None
                origins = tuple(origins)
        # A dimension whose stride vanished (size 1, or a zero product) must
        # not keep an origin: its part of c would be lost.
        strides = result.strided[1]
        for o, st in zip(origins, strides):
            if st is None and not self.same_origin(o, None):
                return None
        return (0 if rest is None else rest, origins)

    def bound_bounds(self, op, a, b, rank):
        """The bounds of `a < b` (<=, >, >=), as bound_limits: with a's
        coords, `rest + origin + i_d < bound` is `origin + i_d < bound - rest`."""
        if isinstance(op, (ast.Gt, ast.GtE)):
            a, b = b, a
        elif not isinstance(op, (ast.Lt, ast.LtE)):
            return None
        if not isinstance(a, Tile) or a.is_scalar or not self.is_int_scalar(b):
            return None
        s, co = self.strided_of(a, rank), self.coords_of(a, rank)
        if s is None or co is None:
            return None
        axes = [d for d, st in enumerate(s[1]) if st is not None]
        if len(axes) != 1 or not (isinstance(s[1][axes[0]], int) and s[1][axes[0]] == 1):
            return None
        size = self.s_op(ast.Sub(), b, co[0])
        if isinstance(op, (ast.LtE, ast.GtE)):
            size = self.s_op(ast.Add(), size, 1)
        return tuple((size, co[1][axes[0]]) if d == axes[0] else None for d in range(rank))

    def and_bounds(self, x, y, rank):
        bx, by = self.bounds_of(x, rank), self.bounds_of(y, rank)
        if bx is None or by is None:
            return None
        out = []
        for u, v in zip(bx, by):
            if u is None or v is None:
                out.append(v if u is None else u)
            elif not self.same_origin(u[1], v[1]):
                return None
            elif isinstance(u[0], int) and isinstance(v[0], int):
                out.append((min(u[0], v[0]), u[1]))
            else:
                out.append((self.builtin_minimum(*(w if isinstance(w, int) else
                                                   self.cast(w, kl.int64)
                                                   for w in (u[0], v[0]))), u[1]))
        return tuple(out)

    def origin_view(self, ptr: Pointer, offsets: Tile, mask, shape):
        """The view access for `ptr + offsets` under `mask` when the mask
        bounds each varying index at the origin the offsets have (Tile.coords,
        Tile.bounds), or None: a view of the mask's sizes at the origins;
        with a rest (a scalar part of the offsets no dimension owns, as a
        batch offset), dimensions before them carry it (lead_dims).
        Returns (view, offsets, the number of those dimensions, and the
        permutation of the tile's dimensions the view takes, or None)."""
        rank = len(shape)
        s, co = self.strided_of(offsets, rank), self.coords_of(offsets, rank)
        if s is None or co is None or rank + 1 > 8:
            return None
        _, strides = s
        rest, origins = co
        if any(isinstance(st, int) and st < 0 for st in strides):
            return None
        bounds = (None,) * rank
        if mask is not None:
            bounds = self.bounds_of(mask, rank)
            if bounds is None:
                return None
        # Every offset must be known not to be negative: a view's dimension
        # drops indices below 0, where the pointer the kernel computed may
        # still lie inside its array (another term, or the rest, adding
        # back what the index took away). Otherwise: strided_view, whose
        # one offset is the whole of c. The rest goes into dimensions of its
        # own (lead_dims), or as before into one flat dimension.
        t = self.terms_of(rest) if not (isinstance(rest, int) and rest == 0) else None
        if t is not None and t[1]:
            kept, origins, bounds = self.fold_terms(t[1], strides, origins, bounds)
            t = (t[0], kept)
            rest = t[0] if not kept else t
        lead = self.lead_dims(rest)
        if lead is not None and rank + len(lead) > 8:
            lead = None
        if lead is None and not self.is_nonneg(rest):
            return None
        for st, o, bd in zip(strides, origins, bounds):
            if not self.is_nonneg(bd[1] if bd is not None else o if st is not None else None):
                return None
        idx = self.b.scalar_type("index")
        sizes, strs, offs = [], [], []
        for st, o, bd in zip(strides, origins, bounds):
            if bd is not None:
                size, bo = bd
                if st is not None and not self.same_origin(o, bo):
                    return None
                o = bo
            if bd is None:
                sizes.append(self.b.constant(UNBOUNDED, idx))
            elif isinstance(bd[0], int):
                sizes.append(self.b.constant(max(bd[0], 0), idx))
            else:
                sizes.append(self.index(self.builtin_maximum(bd[0], 0), "a bound"))
            strs.append(self.b.constant(0, idx) if st is None else self.index(st, "a stride"))
            offs.append(self.b.constant(0, idx) if o is None or (isinstance(o, int) and o == 0)
                        else self.index(o, "an offset"))
        if lead is None:
            lead = [(UNBOUNDED, 1, rest)]
        sizes[:0] = [self.b.constant(size, idx) for size, _, _ in lead]
        strs[:0] = [self.index_value(st, "a stride") for _, st, _ in lead]
        offs[:0] = [self.index_value(o, "an offset") for _, _, o in lead]
        # Rows along the unit stride: when the last dimension's stride is not
        # 1 but another's is (`k + offs_d[:, None] + offs_n[None, :] * D`, a
        # transposed key block), the view takes that dimension last, so its
        # loads read rows (cp.async chunks, TMA boxes, wgmma's K-major
        # operand through the transpose).
        perm = None
        unit = [d for d, st in enumerate(strides) if st is not None and
                self.lin_of(st) == (1, ())]
        if rank >= 2 and unit and unit[-1] != rank - 1 and shape[unit[-1]] > 1 and \
                strides[-1] is not None and self.lin_of(strides[-1]) != (1, ()):
            d, L = unit[-1], len(lead)
            perm = list(range(rank))
            perm[d], perm[rank - 1] = rank - 1, d
            for xs in (sizes, strs, offs):
                xs[L + d], xs[L + rank - 1] = xs[L + rank - 1], xs[L + d]
        view = self.b.make_view(ptr.value, sizes, strs,
                                self.b.view_type(len(sizes), self.b.scalar_type(ptr.dtype.ir)))
        return view, offs, len(lead), perm

    def limit_size(self, lim):
        """A view dimension's size (index) for a mask's limit on its index
        (`i < lim`): unbounded without one, never below 0."""
        idx = self.b.scalar_type("index")
        if lim is None:
            return self.b.constant(UNBOUNDED, idx)
        if isinstance(lim, int):
            return self.b.constant(max(lim, 0), idx)
        return self.index(self.builtin_maximum(lim, 0), "a bound")

    def strided_view(self, ptr: Pointer, offsets: Tile, mask, shape):
        """A view access for `ptr + offsets` under `mask` when the offsets
        are strided (c + sum_d s_d * i_d) and the mask bounds each index
        (i_d < L_d), or None: a view of rank r + 1 whose first dimension
        (stride 1, offset c, one element of the tile) carries c, and whose
        others have the strides s_d and the sizes L_d (unbounded without a
        bound), all at offset 0. Element 0 has the lowest address when the
        strides are not negative; it is valid whenever any element is, and
        then its address ptr + c must be inside the array, so a view
        dimension that masks c < 0 changes nothing a correct kernel reads."""
        rank = len(shape)
        s = self.strided_of(offsets, rank)
        if s is None or rank + 1 > 8:
            return None
        c, strides = s
        if any(isinstance(st, int) and st < 0 for st in strides):
            return None  # (a view's constant strides are not negative)
        limits = self.mask_limits(mask, rank)
        if limits is None:
            return None
        idx = self.b.scalar_type("index")
        sizes = [self.b.constant(UNBOUNDED, idx)] + [self.limit_size(lim) for lim in limits]
        strs = [self.b.constant(1, idx)] + [
            self.b.constant(0, idx) if st is None else self.index(st, "a stride")
            for st in strides]
        view = self.b.make_view(ptr.value, sizes, strs,
                                self.b.view_type(rank + 1, self.b.scalar_type(ptr.dtype.ir)))
        zero = self.b.constant(0, idx)
        return view, [self.index(c, "an offset")] + [zero] * rank

    def floor_mod(self, r: Tile, b: Tile) -> Tile:
        """Python's (and NumPy's) `%` from the truncating remainder r of a by
        b: a nonzero remainder takes the divisor's sign (r + b when their
        signs differ), so `%` agrees with `//` (which floors) and with
        compile-time folding. A float zero takes the divisor's sign too."""
        zero = self.to_tile(0.0 if r.dtype.is_float else 0, r)
        r_neg = self.compare(ast.Lt(), r, zero)
        b_neg = self.compare(ast.Lt(), b, zero)
        nonzero = self.compare(ast.NotEq(), r, zero)
        fix = self.binop(ast.BitAnd(), nonzero, self.binop(ast.BitXor(), r_neg, b_neg))
        out = Tile(self.b.select(fix.value, self.binop(ast.Add(), r, b).value, r.value),
                   r.dtype, r.shape)
        if r.dtype.is_float:
            signed_zero = self.where(b_neg, -0.0, 0.0)
            out = self.where(nonzero, out, self.broadcast_to(self.cast(signed_zero, r.dtype),
                                                                r.shape))
            out = Tile(out.value, r.dtype, r.shape)
        return out

    def float_floordiv(self, a: Tile, b: Tile) -> Tile:
        """Python's (and NumPy's) float `//`, the quotient that goes with `%`
        (CPython's float_divmod): floor(a / b) can be one more, when a / b
        rounds up to an integer (1.0 // 0.1 is 9.0)."""
        if a.dtype.bits < 32:
            # In float32 and rounded once, as NumPy's half `//`: each step
            # rounded to 16 bits gave 558 for -263.25 // -0.4707 (559).
            wide = self.float_floordiv(self.cast(a, kl.float32), self.cast(b, kl.float32))
            return self.cast(wide, a.dtype)
        def t(v):
            return Tile(v, a.dtype, a.shape)
        zero = self.to_tile(0.0, a)
        q = t(self.b.binary("divf", a.value, b.value))
        mod = t(self.b.binary("remf", a.value, b.value))
        div = self.binop(ast.Div(), self.binop(ast.Sub(), a, mod), b)
        fix = self.binop(ast.BitAnd(), self.compare(ast.NotEq(), mod, zero),
                         self.binop(ast.BitXor(), self.compare(ast.Lt(), b, zero),
                                    self.compare(ast.Lt(), mod, zero)))
        div = self.where(fix, self.binop(ast.Sub(), div, 1.0), div)
        fl = t(self.b.unary("floor", div.value))
        up = self.compare(ast.Gt(), self.binop(ast.Sub(), div, fl), 0.5)
        fl = self.where(up, self.binop(ast.Add(), fl, 1.0), fl)
        # A zero quotient has the sign of a / b; b == 0 gives a / b (inf, NaN).
        fl = self.where(self.compare(ast.Eq(), div, zero), self.binop(ast.Mult(), q, 0.0), fl)
        return self.where(self.compare(ast.Eq(), b, zero), q, fl)

    def python_binop(self, op, a, b):
        ops = {
            ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
            ast.Div: lambda: a / b, ast.FloorDiv: lambda: a // b, ast.Mod: lambda: a % b,
            ast.Pow: lambda: a ** b, ast.BitAnd: lambda: a & b, ast.BitOr: lambda: a | b,
            ast.BitXor: lambda: a ^ b, ast.LShift: lambda: a << b, ast.RShift: lambda: a >> b,
        }
        try:
            return ops[type(op)]()
        except ZeroDivisionError:
            raise KilnError("division by zero in a compile-time expression") from None
        except OverflowError as e:
            raise KilnError(f"a compile-time expression overflows: {e}") from None

    CMP = {
        ast.Lt: ("olt", "slt"), ast.LtE: ("ole", "sle"), ast.Gt: ("ogt", "sgt"),
        ast.GtE: ("oge", "sge"), ast.Eq: ("oeq", "eq"), ast.NotEq: ("une", "ne"),
    }

    def compare(self, op, a, b):
        if isinstance(a, kl.constexpr):
            a = a.value
        if isinstance(b, kl.constexpr):
            b = b.value
        if not isinstance(a, Tile) and not isinstance(b, Tile):
            import operator
            fns = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
                   ast.GtE: operator.ge, ast.Eq: operator.eq, ast.NotEq: operator.ne,
                   ast.Is: operator.is_, ast.IsNot: operator.is_not}
            if type(op) not in fns:
                raise KilnError("unsupported comparison")
            return fns[type(op)](a, b)
        if isinstance(op, (ast.Is, ast.IsNot)) and (a is None or b is None):
            # `mask is not None` on a tile (Triton's optional arguments): a
            # compile-time answer, a tile being no None.
            return isinstance(op, ast.IsNot)
        if type(op) not in self.CMP:
            raise KilnError("unsupported comparison on tiles")
        # A Python int beyond the tile's integer type compares as a number
        # (int8 tile < 300 is all True, as in NumPy 2): in int64.
        for x, y in ((a, b), (b, a)):
            if isinstance(x, Tile) and x.dtype.is_int() and x.dtype is not kl.int1 and \
                    isinstance(y, int) and not isinstance(y, bool) and \
                    not self.fits(y, x.dtype) and -(1 << 63) <= y < (1 << 63):
                if x is a:
                    a = self.cast(a, kl.int64)
                else:
                    b = self.cast(b, kl.int64)
        ta, tb = self.unify(*self.widen_bools(a, b, pairs=False))
        pred = self.CMP[type(op)][0 if ta.dtype.is_float else 1]
        if ta.dtype is kl.int1 and pred[0] == "s":
            pred = "u" + pred[1:]  # False < True (signed, True would be -1)
        result = Tile(self.b.cmp(pred, ta.value, tb.value), kl.int1, ta.shape)
        if result.is_scalar:
            result.fact = (type(op), a, b)
        if isinstance(op, ast.Lt) and isinstance(a, Tile) and not a.is_scalar:
            result.bound_mask = (a, b)
        try:
            result.limits = self.bound_limits(op, a, b, len(result.shape))
            result.bounds = self.bound_bounds(op, a, b, len(result.shape))
        except KilnError:  # a bound past int64: no view
            pass
        return result

    def where(self, c, x, y):
        c = self.to_tile(c)
        if c.dtype is not kl.int1:
            c = self.truth(c)
        if not isinstance(x, Tile) and not isinstance(y, Tile):
            x = self.to_tile(x)
        if isinstance(x, Tile) and isinstance(y, Tile) and x.dtype is y.dtype and \
                x.dtype.fp8 is not None:
            # Two fp8 tiles of one format: a select of their bits (exact,
            # the result stays fp8).
            shape = broadcast_shapes(broadcast_shapes(c.shape, x.shape), y.shape)
            xi, yi = (self.broadcast_to(Tile(t.value, kl.int8, t.shape), shape) for t in (x, y))
            c = self.broadcast_to(c, shape)
            return Tile(self.b.select(c.value, xi.value, yi.value), x.dtype, shape)
        x, y = self.unify(x, y)
        shape = broadcast_shapes(c.shape, x.shape)
        c, x, y = self.broadcast_to(c, shape), self.broadcast_to(x, shape), self.broadcast_to(y, shape)
        return Tile(self.b.select(c.value, x.value, y.value), x.dtype, shape)

    # -- builtins ------------------------------------------------------------------------

    def const_int(self, v, what):
        if isinstance(v, kl.constexpr):
            v = v.value
        if not isinstance(v, int) or isinstance(v, bool):
            if isinstance(v, Tile):
                raise KilnError(f"{what} must be a compile-time integer, got a runtime "
                                f"{v.dtype.name} value; a kernel parameter it comes from "
                                "needs the annotation `: kl.constexpr` (and is then passed "
                                "by name)")
            raise KilnError(f"{what} must be a compile-time integer (a constexpr), got "
                            f"{type(v).__name__}")
        return v

    def const_shape(self, shape, what="shape"):
        if isinstance(shape, kl.constexpr):
            shape = shape.value
        if isinstance(shape, int):
            shape = (shape,)
        if not isinstance(shape, tuple):
            raise KilnError(f"{what} must be a tuple of compile-time integers")
        out = tuple(self.const_int(d, f"each {what} dimension") for d in shape)
        for d in out:
            if d <= 0:
                raise KilnError(f"{what} dimensions must be positive, got {out}")
        return out

    def check_grid_axis(self, axis):
        if axis >= self.grid_rank:
            raise LaunchGridError(
                f"{self.fn.__name__}: the launch grid has {self.grid_rank} dimension(s), but "
                f"the kernel uses grid axis {axis} (line "
                f"{getattr(self.stmt, 'lineno', 0) + self.first_line - 1})")

    def builtin_program_id(self, axis=0):
        axis = self.const_int(axis, "axis")
        if axis not in (0, 1, 2):
            raise KilnError("program_id axis must be 0, 1 or 2")
        self.check_grid_axis(axis)
        t = Tile(self.b.program_id(axis), kl.int32, ())
        t.nonneg = True
        return t

    def builtin_num_programs(self, axis=0):
        axis = self.const_int(axis, "axis")
        if axis not in (0, 1, 2):
            raise KilnError("num_programs axis must be 0, 1 or 2")
        self.check_grid_axis(axis)
        t = Tile(self.b.num_programs(axis), kl.int32, ())
        t.nonneg = True
        return t

    def builtin_clock(self):
        return Tile(self.b.clock(), kl.int64, ())

    def builtin_processor_id(self):
        t = Tile(self.b.processor_id(), kl.int32, ())
        t.nonneg = True
        return t

    def builtin_range(self, *args, **kwargs):
        raise KilnError("kl.range() is only supported as the iterable of a for loop")

    def builtin_arange(self, start, end=None):
        if end is None:
            start, end = 0, start
        start = self.const_int(start, "arange start")
        end = self.const_int(end, "arange end")
        if end <= start:
            raise KilnError(f"arange needs end > start, got [{start}, {end})")
        t = Tile(self.b.arange(start, end, self.ir_type(kl.int32, (end - start,))), kl.int32,
                 (end - start,))
        t.contiguous = (start, end - start)
        t.strided = (start, (1,) if end - start > 1 else (None,))
        t.coords = (0, (start,)) if end - start > 1 else (start, (None,))
        return t

    def builtin_zeros(self, shape, dtype=kl.float32):
        return self.builtin_full(shape, 0, dtype)

    def builtin_full(self, shape, value, dtype=kl.float32):
        shape = self.const_shape(shape)
        if not isinstance(dtype, kl.dtype):
            raise KilnError("dtype must be a kl dtype")
        if isinstance(value, kl.constexpr):
            value = value.value
        if isinstance(value, (int, float, bool)):
            if dtype.fp8 is not None:     # (the value's bits)
                v = fp8_bits(float(value), dtype.fp8)
            else:
                v = self.py_value(value, dtype) if dtype is not kl.int1 else int(bool(value))
            return Tile(self.b.constant(v, self.ir_type(dtype, shape)), dtype, shape)
        return self.broadcast_to(self.cast(self.to_tile(value), dtype), shape)

    def index_value(self, x, what):
        """An index Value of an int (a constant) or an integer scalar Tile."""
        if isinstance(x, int):
            return self.b.constant(x, self.b.scalar_type("index"))
        return self.index(x, what)

    def index(self, x, what):
        t = self.to_tile(x)
        if t.dtype.is_float or not t.is_scalar:
            raise KilnError(f"{what} must be an integer scalar")
        return self.b.cast(t.value, self.b.scalar_type("index"))

    def builtin_make_view(self, pointer, shape, strides):
        if not isinstance(pointer, Pointer):
            raise KilnError("make_view needs a pointer argument of the kernel")
        if isinstance(shape, kl.constexpr):
            shape = shape.value
        if isinstance(strides, kl.constexpr):
            strides = strides.value
        if not isinstance(shape, tuple):
            shape = (shape,)
        if not isinstance(strides, tuple):
            strides = (strides,)
        if len(shape) != len(strides):
            raise KilnError(f"make_view: {len(shape)} sizes but {len(strides)} strides")
        if not 1 <= len(shape) <= 8:
            raise KilnError("a view has 1 to 8 dimensions")
        sizes = [self.index(s, "a view size") for s in shape]
        strs = [self.index(s, "a view stride") for s in strides]
        if pointer.offset is not None:
            raise KilnError("make_view needs the kernel's pointer argument itself "
                            "(fold the offset into the view's offsets)")
        v = self.b.make_view(pointer.value, sizes, strs,
                             self.b.view_type(len(shape), self.b.scalar_type(pointer.dtype.ir)))
        return View(v, pointer.dtype, len(shape), pointer.param)

    def padding_value(self, other, dtype):
        if other is None:
            return None
        if isinstance(other, kl.constexpr):
            other = other.value
        if isinstance(other, (int, float, bool)):
            if dtype.fp8 is not None:       # (the padding's bits)
                return fp8_bits(float(other), dtype.fp8)
            try:
                return self.py_value(other, dtype) if dtype is not kl.int1 else int(bool(other))
            except KilnError as e:
                raise KilnError(f"other={other!r} for {dtype.name} elements: {e}") from None
        return "tile"

    def flat_view(self, ptr: Pointer, size=None):
        one = self.b.constant(1, self.b.scalar_type("index"))
        n = size if size is not None else self.b.constant(UNBOUNDED, self.b.scalar_type("index"))
        return self.b.make_view(ptr.value, [n], [one],
                                self.b.view_type(1, self.b.scalar_type(ptr.dtype.ir)))

    @staticmethod
    def memory_hints(cache_modifier="", eviction_policy="", volatile=False):
        """Triton's cache hints, accepted and checked. Kiln's loads choose
        their own (cp.async.cg and TMA on GPUs); a store's ".cs" or
        "evict_first" makes it streaming (builtin_store)."""
        for name, v, ok in (("cache_modifier", cache_modifier, ("", ".ca", ".cg", ".cv", ".cs",
                                                                  ".wb", ".wt")),
                            ("eviction_policy", eviction_policy, ("", "evict_first",
                                                                  "evict_last", "evict_normal"))):
            if isinstance(v, kl.constexpr):
                v = v.value
            if v not in ok:
                raise KilnError(f"{name}= must be one of {', '.join(repr(o) for o in ok)}, "
                                f"got {v!r}")
        if isinstance(volatile, kl.constexpr):
            volatile = volatile.value
        if not isinstance(volatile, bool):
            raise KilnError("volatile= must be a compile-time bool")
        return volatile

    def block_offsets(self, bp):
        """The view offsets of block pointer bp's block: its leading
        dimensions' (bp.flat), then the block's."""
        return [self.index_value(o, "an offset") for o in bp.flat] + \
            [self.index(o, "a block offset") for o in bp.offsets]

    def block_access(self, bp, value, boundary_check, padding_option):
        """A load (value None) or store through a block pointer: a view
        access of the block at its offsets. Every dimension is bounded (a
        superset of boundary_check=, which Triton needs to be safe)."""
        rank = len(bp.block_shape)
        if isinstance(boundary_check, kl.constexpr):
            boundary_check = boundary_check.value
        if not isinstance(boundary_check, tuple):
            boundary_check = (boundary_check,)
        for d in boundary_check:
            d = d.value if isinstance(d, kl.constexpr) else d
            if not isinstance(d, int) or not 0 <= d < rank:
                raise KilnError(f"boundary_check= names dimensions of a rank-{rank} block "
                                f"pointer, got {boundary_check}")
        if isinstance(padding_option, kl.constexpr):
            padding_option = padding_option.value
        if padding_option not in ("", "zero", "nan"):
            raise KilnError(f"padding_option= must be 'zero' or 'nan', got {padding_option!r}")
        dtype = bp.dtype
        pad = None
        if padding_option == "nan":
            if not dtype.is_float:
                raise KilnError(f"padding_option='nan' needs float elements, not {dtype.name}")
            pad = float("nan")
        offs = self.block_offsets(bp)
        shape = bp.block_shape
        view, perm = bp.view.value, None
        if bp.swapped is not None:
            d, sv = bp.swapped
            view, L = sv.value, len(bp.flat)
            perm = list(range(rank))
            perm[d], perm[rank - 1] = rank - 1, d
            offs[L + d], offs[L + rank - 1] = offs[L + rank - 1], offs[L + d]
            shape = tuple(shape[p] for p in perm)
        wide = (1,) * len(bp.flat) + shape
        if value is None:
            t = self.b.load(view, offs, self.ir_type(dtype, wide),
                            None if pad is None else (fp8_bits(float(pad), dtype.fp8)
                                                      if dtype.fp8 is not None
                                                      else self.py_value(pad, dtype)))
            if wide != shape:
                t = self.b.reshape(t, self.ir_type(dtype, shape))
            if perm is not None:
                t = self.b.trans(t, perm, self.ir_type(dtype, bp.block_shape))
            return Tile(t, dtype, bp.block_shape)
        value = self.broadcast_to(self.cast(self.memory_value(value, dtype), dtype),
                                  bp.block_shape)
        v = value.value
        if perm is not None:
            v = self.b.trans(v, perm, self.ir_type(dtype, shape))
        if wide != shape:
            v = self.b.reshape(v, self.ir_type(dtype, wide))
        self.b.store(v, view, offs, self.streaming_store)
        return None

    def builtin_make_block_ptr(self, base, shape, strides, offsets, block_shape, order):
        if not isinstance(base, Pointer):
            raise KilnError("make_block_ptr needs a pointer (a kernel argument, possibly plus "
                            "a scalar offset)")
        vals = []
        for what, t in (("shape", shape), ("strides", strides), ("offsets", offsets),
                        ("block_shape", block_shape), ("order", order)):
            if isinstance(t, kl.constexpr):
                t = t.value
            if not isinstance(t, tuple):
                t = (t,)
            vals.append(t)
        shape, strides, offsets, block_shape, order = vals
        rank = len(shape)
        if not 1 <= rank <= 7 or any(len(t) != rank for t in vals):
            raise KilnError(f"make_block_ptr: shape, strides, offsets, block_shape and order "
                            f"need one entry per dimension (1 to 7), got "
                            f"{', '.join(str(len(t)) for t in vals)}")
        block_shape = self.const_shape(block_shape, "block_shape")
        order = tuple(self.const_int(o, "order") for o in order)
        if sorted(order) != list(range(rank)):
            raise KilnError(f"make_block_ptr: order {order} is not a permutation of the "
                            f"{rank} dimensions")
        idx = self.b.scalar_type("index")
        sizes = [self.index(self.builtin_maximum(self.cast(self.to_tile(x), kl.int64), 0)
                            if isinstance(x, Tile) else max(int(self.const_int(x, "a size")), 0),
                            "a block pointer size") for x in shape]
        strs = [self.index(x, "a block pointer stride") for x in strides]
        lead = []
        if base.offset is not None:
            # The pointer's own offset: view dimensions of its own
            # (lead_dims), else one more of stride 1.
            lead = self.lead_dims(base.offset)
            if lead is None or rank + len(lead) > 8:
                lead = [(UNBOUNDED, 1, base.offset)]
        sizes[:0] = [self.b.constant(size, idx) for size, _, _ in lead]
        strs[:0] = [self.index_value(st, "a stride") for _, st, _ in lead]
        flat = tuple(o for _, _, o in lead)
        v = self.b.make_view(base.value, sizes, strs,
                             self.b.view_type(len(sizes), self.b.scalar_type(base.dtype.ir)))
        view = View(v, base.dtype, len(sizes), base.param)
        swapped = None
        unit = [d for d, x in enumerate(strides) if self.lin_of(x) == (1, ())]
        if rank >= 2 and unit and unit[-1] != rank - 1 and block_shape[unit[-1]] > 1:
            # Rows along the unit stride: the view with that dimension last,
            # so its loads are row loads (cp.async chunks, TMA boxes) and
            # the block a transpose of the tile read.
            d, L = unit[-1], len(lead)
            ssz, sst = list(sizes), list(strs)
            ssz[L + d], ssz[L + rank - 1] = ssz[L + rank - 1], ssz[L + d]
            sst[L + d], sst[L + rank - 1] = sst[L + rank - 1], sst[L + d]
            sv = self.b.make_view(base.value, ssz, sst,
                                  self.b.view_type(len(ssz), self.b.scalar_type(base.dtype.ir)))
            swapped = (d, View(sv, base.dtype, len(ssz), base.param))
        offs = []
        for o in offsets:
            if isinstance(o, kl.constexpr):
                o = o.value
            if not (self.is_int_scalar(o)):
                raise KilnError("make_block_ptr offsets must be integer scalars")
            offs.append(o)
        return BlockPointer(view, offs, block_shape, order, flat, swapped)

    def builtin_make_tensor_descriptor(self, base, shape, strides, block_shape,
                                       padding_option="zero"):
        if isinstance(padding_option, kl.constexpr):
            padding_option = padding_option.value
        if padding_option not in ("zero", "nan"):
            raise KilnError(f"make_tensor_descriptor: padding_option= must be 'zero' or "
                            f"'nan', got {padding_option!r}")
        for what, t in (("shape", shape), ("strides", strides), ("block_shape", block_shape)):
            if isinstance(t, kl.constexpr):
                t = t.value
            if not isinstance(t, tuple):
                raise KilnError(f"make_tensor_descriptor: {what}= must be a list or tuple")
        rank = len(shape.value if isinstance(shape, kl.constexpr) else shape)
        if padding_option == "nan" and isinstance(base, Pointer) and not base.dtype.is_float:
            raise KilnError(f"padding_option='nan' needs float elements, not {base.dtype.name}")
        bp = self.builtin_make_block_ptr(base, shape, strides, (0,) * rank, block_shape,
                                         tuple(reversed(range(rank))))
        return TensorDescriptor(bp, "" if padding_option == "zero" else "nan")

    def descriptor_offsets(self, desc, offsets, what):
        if not isinstance(desc, TensorDescriptor):
            raise KilnError(f"{what} needs a tensor descriptor (kl.make_tensor_descriptor)")
        if isinstance(offsets, kl.constexpr):
            offsets = offsets.value
        if not isinstance(offsets, tuple):
            offsets = (offsets,)
        rank = len(desc.block_shape)
        if len(offsets) != rank:
            raise KilnError(f"{what}: a rank-{rank} descriptor needs {rank} offsets, got "
                            f"{len(offsets)}")
        offs = []
        for o in offsets:
            if isinstance(o, kl.constexpr):
                o = o.value
            if not self.is_int_scalar(o):
                raise KilnError(f"{what}: offsets must be integer scalars")
            offs.append(o)
        return desc.bp.moved(offs), tuple(range(rank))

    def builtin_load_tensor_descriptor(self, desc, offsets):
        bp, dims = self.descriptor_offsets(desc, offsets, "a descriptor load")
        return self.block_access(bp, None, dims, desc.padding)

    def builtin_store_tensor_descriptor(self, desc, offsets, value):
        bp, dims = self.descriptor_offsets(desc, offsets, "a descriptor store")
        if isinstance(value, kl.constexpr):
            value = value.value
        self.note_write(desc)
        return self.block_access(bp, value, dims, "")

    def descriptor_atomic(self, kind, desc, offsets, value):
        """desc.atomic_add(offsets, value) (and max, min, xchg, and, or, xor):
        the view atomic of the block, dropping what lies outside; returns the
        values it read (zero outside)."""
        bp, _ = self.descriptor_offsets(desc, offsets, f"a descriptor {kind}")
        view = bp.view
        if isinstance(value, kl.constexpr):
            value = value.value
        value = self.broadcast_to(self.cast(self.memory_value(value, bp.dtype), bp.dtype),
                                  bp.block_shape)
        wide = (1,) * len(bp.flat) + bp.block_shape
        offs = self.block_offsets(bp)
        v = value.value if wide == bp.block_shape else self.b.reshape(
            value.value, self.ir_type(bp.dtype, wide))
        dtype = bp.dtype
        name = self.ATOMIC_NAMES[kind]
        if kind in ("and", "or", "xor"):
            if dtype not in (kl.int32, kl.int64):
                raise KilnError(f"{name} supports int32 and int64 elements, got {dtype.name}")
        elif dtype not in (kl.float32, kl.float64, kl.int32, kl.int64):
            raise KilnError(f"{name} supports float32, float64, int32 and int64 elements, "
                            f"got {dtype.name}")
        self.note_write(view)
        old = self.view_atomic(kind, v, view.value, offs)
        if wide != bp.block_shape:
            old = self.b.reshape(old, self.ir_type(dtype, bp.block_shape))
        return Tile(old, dtype, bp.block_shape)

    def builtin_advance(self, base, offsets):
        if not isinstance(base, BlockPointer):
            raise KilnError("advance moves a block pointer (kl.make_block_ptr)")
        if isinstance(offsets, kl.constexpr):
            offsets = offsets.value
        if not isinstance(offsets, tuple):
            offsets = (offsets,)
        if len(offsets) != len(base.offsets):
            raise KilnError(f"advance of a rank-{len(base.offsets)} block pointer needs "
                            f"{len(base.offsets)} offsets, got {len(offsets)}")
        moved = []
        for o, d in zip(base.offsets, offsets):
            if isinstance(d, kl.constexpr):
                d = d.value
            if not self.is_int_scalar(d):
                raise KilnError("advance offsets must be integer scalars")
            if isinstance(d, int) and d == 0:
                moved.append(o)
                continue
            if isinstance(o, int) and isinstance(d, int):
                moved.append(o + d)
                continue
            a = self.cast(self.to_tile(o), kl.int64)
            moved.append(self.binop(ast.Add(), a, self.cast(self.to_tile(d, a), kl.int64)))
        return base.moved(moved)

    def builtin_load(self, pointer, mask=None, other=None, offsets=None, shape=None,
                     boundary_check=(), padding_option="", cache_modifier="",
                     eviction_policy="", volatile=False):
        volatile = self.memory_hints(cache_modifier, eviction_policy, volatile)
        if volatile and not isinstance(pointer, (Pointer, PointerTile)):
            raise KilnError("volatile=True loads go through a pointer (ptr or ptr + offsets), "
                            "not a block pointer or a view")
        if isinstance(pointer, BlockPointer):
            if mask is not None or other is not None or offsets is not None or shape is not None:
                raise KilnError("a block pointer load takes boundary_check= and "
                                "padding_option=, not mask=, other=, offsets= or shape=")
            return self.block_access(pointer, None, boundary_check, padding_option)
        if boundary_check not in ((), None) or padding_option not in ("", None):
            raise KilnError("boundary_check= and padding_option= are for block pointers "
                            "(kl.make_block_ptr)")
        if isinstance(pointer, View):
            if offsets is None or shape is None:
                raise KilnError("loading from a view needs offsets=(...) and shape=(...)")
            if mask is not None:
                raise KilnError("a view load masks its edges itself; mask= is for pointer loads")
            return self.view_load(pointer, offsets, shape, other)
        if isinstance(pointer, Pointer):
            pointer = PointerTile(Pointer(pointer.value, pointer.dtype, param=pointer.param),
                                  pointer.offset if pointer.offset is not None else self.to_tile(0))
        if not isinstance(pointer, PointerTile):
            raise KilnError("load expects a pointer (ptr + offsets) or a view")
        if volatile:
            return self.volatile_load(pointer, mask, other)
        return self.pointer_access(pointer, None, mask, other)

    def volatile_load(self, pointer, mask, other):
        """Triton's volatile=True: every execution reads memory (a flag that
        another program sets, read in a spin loop). A plain load may be
        hoisted, or removed with a loop that does nothing else (LLVM deleted
        `while kl.load(flag, volatile=True) == 0: pass`); this is an atomic
        that leaves memory as it is (`| 0`, `+ -0.0`) and returns what it
        read, so the array must be writable."""
        dtype = pointer.base.dtype
        if dtype in (kl.int32, kl.int64):
            kind, identity = "or", 0
        elif dtype in (kl.float32, kl.float64):
            kind, identity = "add", -0.0
        else:
            raise KilnError(f"volatile=True loads take int32, int64, float32 or float64 "
                            f"elements (they are atomics), got {dtype.name}")
        if isinstance(other, kl.constexpr):
            other = other.value
        self.note_write(pointer)
        old = self.pointer_access(pointer, identity, mask, None, atomic=kind)
        if mask is not None and other is not None:
            old = self.where(mask, old, self.cast(self.to_tile(other), dtype))
        return old

    def view_load(self, view: View, offsets, shape, other):
        if isinstance(offsets, kl.constexpr):
            offsets = offsets.value
        if not isinstance(offsets, tuple):
            offsets = (offsets,)
        shape = self.const_shape(shape)
        if len(offsets) != view.rank or len(shape) != view.rank:
            raise KilnError(f"a view of rank {view.rank} needs {view.rank} offsets and a "
                            f"rank-{view.rank} shape, got {len(offsets)} offsets and {shape}")
        offs = [self.index(o, "a view offset") for o in offsets]
        pad = self.padding_value(other, view.dtype)
        if pad == "tile":
            raise KilnError("other= for a view load must be a compile-time number")
        v = self.b.load(view.value, offs, self.ir_type(view.dtype, shape), pad)
        return Tile(v, view.dtype, shape)

    def view_layout(self, dtype, shape, lead, perm):
        """A tile of `shape` as an origin_view / strided_view holds it: its
        dimensions exchanged by `perm` (an involution, or None) when the
        unit stride is not the last one's, after `lead` unit dimensions.
        Returns (the view's tile shape, to_view(IR value), from_view(IR
        value) -> Tile)."""
        vshape = shape if perm is None else tuple(shape[i] for i in perm)
        wide = (1,) * lead + vshape

        def to_view(v):
            if perm is not None:
                v = self.b.trans(v, list(perm), self.ir_type(dtype, vshape))
            return self.b.reshape(v, self.ir_type(dtype, wide)) if lead else v

        def from_view(t):
            if lead:
                t = self.b.reshape(t, self.ir_type(dtype, vshape))
            if perm is not None:
                t = self.b.trans(t, list(perm), self.ir_type(dtype, shape))
            return Tile(t, dtype, shape)

        return wide, to_view, from_view

    def pointer_access(self, p: PointerTile, value, mask, other, atomic=None):
        """Loads (value is None) or stores through a tile of pointers; with
        `atomic` (a combiner: 'add', 'max', ...), combines `value` atomically
        and returns what the operations read (0 where masked off)."""
        offsets = p.offsets
        dtype = p.base.dtype
        if offsets.dtype.is_float:
            raise KilnError("pointer offsets must be integers")
        if mask is not None:
            mask = self.to_tile(mask)
            if mask.dtype is not kl.int1:
                raise KilnError("mask must be a boolean tile (a comparison)")
        shape = offsets.shape
        if value is not None:
            value = self.memory_value(value, dtype)
            if shape == () and value.shape != ():
                # (As in Triton: every element would go to the same address.)
                raise KilnError(f"cannot store a tile of shape {value.shape} through a scalar "
                                "pointer; the pointer needs one address per element "
                                "(ptr + offsets of the value's shape)")
            # (A value of more elements than addresses is refused too.)
            value = self.broadcast_to(self.cast(value, dtype), shape)
        if mask is not None:
            mshape = broadcast_shapes(shape, mask.shape)
            if mshape != shape:
                offsets = self.broadcast_to(offsets, mshape)
                shape = mshape
                if value is not None:
                    value = self.broadcast_to(value, mshape)
            mask = self.broadcast_to(mask, shape)
        scalar = shape == ()
        if scalar:
            offsets = self.broadcast_to(offsets, (1,))
            if mask is not None:
                mask = self.broadcast_to(mask, (1,))
            if value is not None:
                value = self.broadcast_to(value, (1,))
            shape = (1,)
        pad = self.padding_value(other, dtype)
        if pad == "tile" and mask is None:
            raise KilnError("other= without a mask: it would never be read (as Triton: "
                            "`other` cannot be provided without `mask`)")
        # Fast path: contiguous offsets (scalar + arange) with no mask or the
        # mask `offsets < bound`: a view load or store at one offset.
        # The mask may bound a different contiguous run than the offsets
        # (`ptr + row * n + cols` with `cols < n`): element i is valid iff
        # mbase + i < bound, i.e. obase + i < bound - mbase + obase.
        mask_run = None
        if mask is not None and mask.bound_mask is not None:
            mt, bound = mask.bound_mask
            if isinstance(mt, Tile) and mt.contiguous is not None and \
                    isinstance(bound, (Tile, int)) and not isinstance(bound, bool) and \
                    (not isinstance(bound, Tile) or (bound.is_scalar and bound.dtype.is_int())):
                mask_run = (mt.contiguous, bound)
        if len(shape) == 1 and offsets.contiguous is not None and pad != "tile" and (
                mask is None or (mask_run is not None and mask_run[0][1] == offsets.contiguous[1])):
            base, n = offsets.contiguous
            start = self.cast(self.to_tile(base), kl.int64)
            if mask is not None:
                (mbase, _), bound = mask_run
                size = self.cast(self.to_tile(bound, start), kl.int64)
                size = self.binop(ast.Add(), self.binop(ast.Sub(), size,
                                                        self.cast(self.to_tile(mbase), kl.int64)),
                                  start)
                view = self.flat_view(p.base, self.index(size, "a bound"))
            else:
                view = self.flat_view(p.base)
            off = self.index(start, "an offset")
            if value is None:
                t = Tile(self.b.load(view, [off], self.ir_type(dtype, shape), pad), dtype, shape)
                return self.squeeze(t, scalar)
            if atomic:
                return self.squeeze(Tile(self.view_atomic(atomic, value.value, view, [off]),
                                         dtype, shape), scalar)
            self.b.store(value.value, view, [off], self.streaming_store)
            return None
        # Strided offsets under bound masks (`ptr + rows[:, None] * stride +
        # cols[None, :]`, `mask=(rows[:, None] < m) & (cols[None, :] < n)`):
        # a view access, as a view load or store would be written.
        if not scalar and pad != "tile":
            sv = self.origin_view(p.base, offsets, mask, shape)
            if sv is None:
                sv = self.strided_view(p.base, offsets, mask, shape)
                if sv is not None:
                    sv = sv + (1, None)
            if sv is not None:
                view, offs, lead, perm = sv
                wide, to_view, from_view = self.view_layout(dtype, shape, lead, perm)
                if value is None:
                    return from_view(self.b.load(view, offs, self.ir_type(dtype, wide), pad))
                v = to_view(value.value)
                if atomic:
                    return from_view(self.view_atomic(atomic, v, view, offs))
                self.b.store(v, view, offs, self.streaming_store)
                return None
        # Rows named by a tile of indices (`table + ids[:, None] * D +
        # cols[None, :]`, a paged cache's `blocks[:, None] * stride + ...`):
        # a gather or scatter of rows.
        if not scalar and pad != "tile" and not atomic and offsets.rows is not None:
            r = self.row_access(p.base, offsets, mask, shape, value, pad)
            if r is not False:
                return r
        # General path: a gather/scatter of single elements; masked-off
        # elements get the index -1, which reads padding / is not written.
        n = 1
        for d in shape:
            n *= d
        flat = (n,)
        idx = self.cast(offsets, kl.int64)
        if len(shape) != 1:
            idx = Tile(self.b.reshape(idx.value, self.ir_type(kl.int64, flat)), kl.int64, flat)
        if mask is not None:
            m = mask
            if len(shape) != 1:
                m = Tile(self.b.reshape(mask.value, self.ir_type(kl.int1, flat)), kl.int1, flat)
            idx = self.where(m, idx, -1)
        view = self.flat_view(p.base)
        if value is None:
            g = self.b.gather(view, idx.value, [], self.ir_type(dtype, flat),
                              None if pad == "tile" else pad)
            t = Tile(g, dtype, flat)
            if len(shape) != 1:
                t = Tile(self.b.reshape(t.value, self.ir_type(dtype, shape)), dtype, shape)
            if pad == "tile":   # (converted to the element type, as Triton's)
                t = self.where(mask, t, self.cast(self.to_tile(other), dtype))
            return self.squeeze(t, scalar)
        v = value
        if len(shape) != 1:
            v = Tile(self.b.reshape(value.value, self.ir_type(dtype, flat)), dtype, flat)
        if atomic:
            t = Tile(self.b.scatter_add(v.value, view, idx.value, []) if atomic == "add" else
                     self.b.scatter_rmw(atomic, v.value, view, idx.value, []), dtype, flat)
            if len(shape) != 1:
                t = Tile(self.b.reshape(t.value, self.ir_type(dtype, shape)), dtype, shape)
            return self.squeeze(t, scalar)
        self.b.scatter(v.value, view, idx.value, [])
        return None

    def row_access(self, ptr: Pointer, offsets: Tile, mask, shape, value, pad):
        """`ptr + offsets` through Tile.rows (G[i_0] * scale + c + sum_{d >= 1}
        s_d * i_d) under a mask that bounds each index (i_d < L_d), as a
        kiln.gather (value None) or kiln.scatter of the rows G: a view of
        rows `scale` elements apart, its other dimensions the strides s_d and
        the sizes L_d at offset 0, but for c: the last dimension's offset
        when c is known not to be negative (that dimension's stride must be
        1), else view dimensions of its own after the rows' (lead_dims: a
        head offset `h * stride_h`), unit dimensions of the gathered tile
        that a reshape drops. A row whose i_0 is past L_0 gets the index -1
        (not read, not written). False when the access has another form
        (the caller gathers single elements)."""
        g, scale, c, strides = offsets.rows
        scale = 0 if scale is None else scale
        c = 0 if c is None else c
        rank = len(shape)
        if offsets.shape != tuple(shape) or strides[-1] != 1 or \
                any(isinstance(x, int) and x < 0 for x in (scale,) + strides[1:]):
            return False
        lead = []
        if not self.is_nonneg(c):
            lead = self.lead_dims(c)
            if lead is None or rank + len(lead) > 8:
                return False
            c = 0
        row_mask = self.row_mask_of(mask, rank)
        limits = row_mask[1] if row_mask is not None else self.mask_limits(mask, rank)
        if limits is None:
            return False
        idx = self.b.scalar_type("index")
        sizes = [self.b.constant(UNBOUNDED, idx)] + [self.b.constant(size, idx)
                                                     for size, _, _ in lead]
        strs = [self.index_value(st, "a stride") for st in [scale] + [st for _, st, _ in lead]]
        for d in range(1, rank):
            lim = limits[d]
            if d == rank - 1 and lim is not None:
                lim = self.s_op(ast.Add(), c, lim)  # the column offset c is in the view
            sizes.append(self.limit_size(lim))
            strs.append(self.index_value(0 if strides[d] is None else strides[d], "a stride"))
        dtype = ptr.dtype
        view = self.b.make_view(ptr.value, sizes, strs,
                                self.b.view_type(len(sizes), self.b.scalar_type(dtype.ir)))
        rows = g
        if limits[0] is not None:
            inside = self.compare(ast.Lt(), self.builtin_arange(0, shape[0]),
                                  self.to_tile(limits[0]))
            rows = self.where(inside, rows, -1)
        if row_mask is not None:
            rows = self.where(row_mask[0], rows, -1)
        offs = [self.index_value(o, "an offset")
                for o in [o for _, _, o in lead] + [0] * (rank - 2) + [c]]
        wide = (shape[0],) + (1,) * len(lead) + tuple(shape[1:])
        if value is None:
            t = self.b.gather(view, rows.value, offs, self.ir_type(dtype, wide), pad)
            if lead:
                t = self.b.reshape(t, self.ir_type(dtype, shape))
            return Tile(t, dtype, shape)
        v = value.value
        if lead:
            v = self.b.reshape(v, self.ir_type(dtype, wide))
        self.b.scatter(v, view, rows.value, offs)
        return None

    def squeeze(self, t: Tile, scalar: bool):
        if not scalar:
            return t
        zero = self.b.constant(0, self.b.scalar_type("index"))
        return Tile(self.b.extract(t.value, [zero]), t.dtype, ())

    def note_write(self, pointer):
        param = getattr(pointer, "param", None)
        if param is None and isinstance(pointer, PointerTile):
            param = pointer.base.param
        if param is not None:
            self.written.add(param)

    # Set while a store with Triton's streaming hints is emitted: its
    # kiln.store is {streaming} (non-temporal stores on x86).
    streaming_store = False

    def builtin_store(self, pointer, value, mask=None, offsets=None, boundary_check=(),
                      cache_modifier="", eviction_policy=""):
        self.memory_hints(cache_modifier, eviction_policy)
        hints = [h.value if isinstance(h, kl.constexpr) else h
                 for h in (cache_modifier, eviction_policy)]
        self.streaming_store = hints[0] == ".cs" or hints[1] == "evict_first"
        try:
            return self.store_hinted(pointer, value, mask, offsets, boundary_check)
        finally:
            self.streaming_store = False

    def store_hinted(self, pointer, value, mask, offsets, boundary_check):
        if isinstance(value, kl.constexpr):
            value = value.value
        if value is None:
            raise KilnError("store needs a value (got None)")
        self.note_write(pointer)
        if isinstance(pointer, BlockPointer):
            if mask is not None or offsets is not None:
                raise KilnError("a block pointer store takes boundary_check=, not mask= or "
                                "offsets=")
            return self.block_access(pointer, value, boundary_check, "")
        if boundary_check not in ((), None):
            raise KilnError("boundary_check= is for block pointers (kl.make_block_ptr)")
        if isinstance(pointer, View):
            if offsets is None:
                raise KilnError("storing into a view needs offsets=(...)")
            if mask is not None:
                raise KilnError("a view store masks its edges itself; mask= is for pointer stores")
            if isinstance(offsets, kl.constexpr):
                offsets = offsets.value
            if not isinstance(offsets, tuple):
                offsets = (offsets,)
            value = self.to_tile(value)
            if value.is_scalar or len(value.shape) != pointer.rank:
                raise KilnError(f"storing into a view of rank {pointer.rank} needs a rank-"
                                f"{pointer.rank} tile, got shape {value.shape}")
            value = self.cast(value, pointer.dtype)
            offs = [self.index(o, "a view offset") for o in offsets]
            if len(offs) != pointer.rank:
                raise KilnError(f"a view of rank {pointer.rank} needs {pointer.rank} offsets")
            self.b.store(value.value, pointer.value, offs, self.streaming_store)
            return None
        if isinstance(pointer, Pointer):
            pointer = PointerTile(Pointer(pointer.value, pointer.dtype, param=pointer.param),
                                  pointer.offset if pointer.offset is not None else self.to_tile(0))
        if not isinstance(pointer, PointerTile):
            raise KilnError("store expects a pointer (ptr + offsets) or a view")
        return self.pointer_access(pointer, value, mask, None)

    def builtin_gather(self, view, indices, offsets=(), shape=None, other=None, axis=None):
        if isinstance(view, kl.constexpr):
            view = view.value
        if not isinstance(view, (View, Pointer, PointerTile, BlockPointer)):
            # Triton's tl.gather(src, index, axis): inside a tile.
            if axis is None and (shape is not None or other is not None):
                raise KilnError("gather(src, index, axis) of a tile takes no shape= or other=")
            return self.gather_elements(view, indices, offsets if axis is None else axis)
        if not isinstance(view, View):
            raise KilnError("gather reads from a view (kl.make_view)")
        indices = self.to_tile(indices)
        if indices.dtype.is_float:
            raise KilnError(f"gather indices must be integers, got {indices.dtype.name}")
        if len(indices.shape) != 1:
            raise KilnError("gather indices must be a 1-D tile")
        if isinstance(offsets, kl.constexpr):
            offsets = offsets.value
        if not isinstance(offsets, tuple):
            offsets = (offsets,)
        if len(offsets) != view.rank - 1:
            raise KilnError(f"gather from a rank-{view.rank} view needs {view.rank - 1} offsets")
        if shape is None:
            if view.rank != 1:
                raise KilnError("gather needs shape=(rows, ...) for views of rank > 1")
            shape = indices.shape
        shape = self.const_shape(shape)
        if shape[0] != indices.shape[0]:
            raise KilnError(f"gather shape {shape} must start with the number of indices "
                            f"({indices.shape[0]})")
        pad = self.padding_value(other, view.dtype)
        if pad == "tile":
            raise KilnError("other= for gather must be a compile-time number")
        offs = [self.index(o, "an offset") for o in offsets]
        return Tile(self.b.gather(view.value, indices.value, offs, self.ir_type(view.dtype, shape),
                                  pad), view.dtype, shape)

    def builtin_scatter(self, view, value, indices, offsets=()):
        if not isinstance(view, View):
            raise KilnError("scatter writes to a view (kl.make_view)")
        indices = self.to_tile(indices)
        if indices.dtype.is_float or len(indices.shape) != 1:
            raise KilnError("scatter indices must be a 1-D integer tile")
        if isinstance(offsets, kl.constexpr):
            offsets = offsets.value
        if not isinstance(offsets, tuple):
            offsets = (offsets,)
        value = self.cast(self.memory_value(value, view.dtype), view.dtype)
        offs = [self.index(o, "an offset") for o in offsets]
        self.note_write(view)
        self.b.scatter(value.value, view.value, indices.value, offs)

    # Triton's atomics: kiln.atomic_add / scatter_add, and kiln.atomic_rmw /
    # scatter_rmw for the other combiners.
    ATOMIC_NAMES = {"add": "atomic_add", "max": "atomic_max", "min": "atomic_min",
                    "xchg": "atomic_xchg", "and": "atomic_and", "or": "atomic_or",
                    "xor": "atomic_xor"}

    def atomic_order(self, name, sem, scope):
        # Triton's memory-order hints: every target's atomics are acq_rel
        # for the whole program (CPUs: locked RMWs; GPUs: fences at GPU scope
        # around them), at least as strong as any sem asks, but not ordered
        # for the host or other devices (scope='sys').
        if isinstance(sem, kl.constexpr):
            sem = sem.value
        if isinstance(scope, kl.constexpr):
            scope = scope.value
        if sem not in (None, "relaxed", "acquire", "release", "acq_rel"):
            raise KilnError(f"{name}(sem=...) must be 'relaxed', 'acquire', 'release' or "
                            f"'acq_rel', got {sem!r}")
        if scope == "sys":
            raise KilnError(f"{name}(scope='sys') is not supported: Kiln's GPU atomics are "
                            "ordered at GPU scope ('gpu' or 'cta')")
        if scope not in (None, "cta", "gpu"):
            raise KilnError(f"{name}(scope=...) must be 'cta' or 'gpu', got {scope!r}")

    def atomic(self, kind, pointer, value, mask, offsets, sem, scope):
        name = self.ATOMIC_NAMES[kind]
        self.atomic_order(name, sem, scope)
        if isinstance(pointer, Pointer):
            pointer = PointerTile(Pointer(pointer.value, pointer.dtype, param=pointer.param),
                                  pointer.offset if pointer.offset is not None else self.to_tile(0))
        if isinstance(pointer, (PointerTile, View)):
            dtype = pointer.base.dtype if isinstance(pointer, PointerTile) else pointer.dtype
            if kind in ("and", "or", "xor"):
                if dtype not in (kl.int32, kl.int64):
                    raise KilnError(f"{name} supports int32 and int64 elements, got "
                                    f"{dtype.name}")
            elif dtype not in (kl.float32, kl.float64, kl.int32, kl.int64):
                raise KilnError(f"{name} supports float32, float64, int32 and int64 "
                                f"elements, got {dtype.name}")
        if isinstance(pointer, PointerTile):
            if offsets is not None:
                raise KilnError(f"offsets= is for {name} into a view; a pointer carries its "
                                "offsets (ptr + offsets)")
            if isinstance(value, kl.constexpr):
                value = value.value
            self.note_write(pointer)
            return self.pointer_access(pointer, value, mask, None, atomic=kind)
        if not isinstance(pointer, View):
            raise KilnError(f"{name} needs a pointer (ptr + offsets) or a view")
        if mask is not None:
            # The view ops have no mask: the view drops its out-of-range
            # elements, every other element takes part.
            raise KilnError(f"{name} into a view takes no mask= (elements outside the "
                            "view are dropped); for a pointer access with a mask, use "
                            "ptr + offsets")
        if offsets is None:
            raise KilnError(f"{name} into a view needs offsets=(...)")
        if isinstance(offsets, kl.constexpr):
            offsets = offsets.value
        if not isinstance(offsets, tuple):
            offsets = (offsets,)
        value = self.to_tile(value)
        if value.is_scalar or len(value.shape) != pointer.rank:
            raise KilnError(f"{name} into a view of rank {pointer.rank} needs a rank-"
                            f"{pointer.rank} tile, got shape {value.shape}")
        value = self.cast(value, pointer.dtype)
        offs = [self.index(o, "an offset") for o in offsets]
        self.note_write(pointer)
        # The values the atomics read (zero outside the view).
        return Tile(self.view_atomic(kind, value.value, pointer.value, offs), value.dtype,
                    value.shape)

    def builtin_atomic_cas(self, pointer, cmp, val, sem=None, scope=None):
        """Triton's atomic compare-and-swap: for each address, if it holds
        `cmp`'s bits it gets `val`; returns what each read. Scalar pointers
        (a lock: `while kl.atomic_cas(lock, 0, 1) == 1: pass`) and pointer
        tiles whose offsets are a view's (strided); no mask, as in Triton."""
        self.atomic_order("atomic_cas", sem, scope)
        if isinstance(pointer, Pointer):
            pointer = PointerTile(Pointer(pointer.value, pointer.dtype, param=pointer.param),
                                  pointer.offset if pointer.offset is not None else self.to_tile(0))
        if not isinstance(pointer, PointerTile):
            raise KilnError("atomic_cas needs a pointer (ptr or ptr + offsets)")
        dtype = pointer.base.dtype
        if dtype not in (kl.float32, kl.float64, kl.int32, kl.int64):
            raise KilnError(f"atomic_cas supports float32, float64, int32 and int64 elements, "
                            f"got {dtype.name}")
        offsets = pointer.offsets
        if offsets.dtype.is_float:
            raise KilnError("pointer offsets must be integers")
        shape = offsets.shape
        c = cmp.value if isinstance(cmp, kl.constexpr) else cmp
        if isinstance(c, float) and not dtype.is_float and not c.is_integer():
            # (Truncated, 0.5 matched a stored 0: compared as a number, it
            # matches no integer.)
            raise KilnError(f"atomic_cas: cmp={c!r} is not a value of {dtype.name}")
        cmp, val = (self.cast(self.memory_value(x, dtype), dtype) for x in (cmp, val))
        if shape == () and (cmp.shape != () or val.shape != ()):
            raise KilnError("atomic_cas through a scalar pointer takes scalar cmp and val")
        cmp, val = self.broadcast_to(cmp, shape), self.broadcast_to(val, shape)
        self.note_write(pointer)
        if shape == ():
            one = (1,)
            view = self.flat_view(pointer.base)
            off = self.index(self.cast(offsets, kl.int64), "an offset")
            old = self.b.atomic_cas(self.broadcast_to(cmp, one).value,
                                    self.broadcast_to(val, one).value, view, [off])
            return self.squeeze(Tile(old, dtype, one), True)
        sv = None
        if len(shape) == 1 and offsets.contiguous is not None:
            base, _ = offsets.contiguous
            sv = (self.flat_view(pointer.base),
                  [self.index(self.cast(self.to_tile(base), kl.int64), "an offset")], 0, None)
        if sv is None:
            sv = self.origin_view(pointer.base, offsets, None, shape)
        if sv is None:
            sv = self.strided_view(pointer.base, offsets, None, shape)
            if sv is not None:
                sv = sv + (1, None)
        if sv is None:
            raise KilnError("atomic_cas takes a scalar pointer or ptr + offsets built from "
                            "aranges (a view); these offsets are gathered")
        view, offs, lead, perm = sv
        _, to_view, from_view = self.view_layout(dtype, shape, lead, perm)
        return from_view(self.b.atomic_cas(to_view(cmp.value), to_view(val.value), view, offs))

    def view_atomic(self, kind, value, view, offs):
        if kind == "add":
            return self.b.atomic_add(value, view, offs)
        return self.b.atomic_rmw(kind, value, view, offs)

    def builtin_atomic_add(self, pointer, value, mask=None, offsets=None, sem=None,
                           scope=None):
        return self.atomic("add", pointer, value, mask, offsets, sem, scope)

    def builtin_atomic_max(self, pointer, value, mask=None, offsets=None, sem=None,
                           scope=None):
        return self.atomic("max", pointer, value, mask, offsets, sem, scope)

    def builtin_atomic_min(self, pointer, value, mask=None, offsets=None, sem=None,
                           scope=None):
        return self.atomic("min", pointer, value, mask, offsets, sem, scope)

    def builtin_atomic_xchg(self, pointer, value, mask=None, offsets=None, sem=None,
                            scope=None):
        return self.atomic("xchg", pointer, value, mask, offsets, sem, scope)

    def builtin_atomic_and(self, pointer, value, mask=None, offsets=None, sem=None,
                           scope=None):
        return self.atomic("and", pointer, value, mask, offsets, sem, scope)

    def builtin_atomic_or(self, pointer, value, mask=None, offsets=None, sem=None,
                          scope=None):
        return self.atomic("or", pointer, value, mask, offsets, sem, scope)

    def builtin_atomic_xor(self, pointer, value, mask=None, offsets=None, sem=None,
                           scope=None):
        return self.atomic("xor", pointer, value, mask, offsets, sem, scope)

    def builtin_dot(self, a, b, acc=None, out_dtype=None, allow_tf32=None,
                    input_precision=None):
        # Triton's precision hints: f32 dots are IEEE f32 on every target (no
        # TF32), as precise as any of them asks.
        if isinstance(allow_tf32, kl.constexpr):
            allow_tf32 = allow_tf32.value
        if isinstance(input_precision, kl.constexpr):
            input_precision = input_precision.value
        if allow_tf32 is not None and not isinstance(allow_tf32, bool):
            raise KilnError("dot(allow_tf32=...) must be a compile-time bool")
        if input_precision is not None and input_precision not in ("ieee", "tf32", "tf32x3"):
            raise KilnError(f"dot(input_precision=...) must be 'ieee', 'tf32' or 'tf32x3', got "
                            f"{input_precision!r}")
        a, b = self.to_tile(a), self.to_tile(b)
        if acc is not None and out_dtype is not None and self.to_tile(acc).dtype is not out_dtype:
            # (As Triton asserts: out_dtype was ignored for acc's.)
            raise KilnError(f"dot(acc=..., out_dtype=...): acc is {self.to_tile(acc).dtype.name} "
                            f"and out_dtype {getattr(out_dtype, 'name', out_dtype)}; they must "
                            "agree (the result has acc's dtype)")
        native = (a.dtype.fp8 is not None and b.dtype.fp8 is not None and
                  len(a.shape) == 2 and len(b.shape) == 2 and
                  out_dtype in (None, kl.float32) and
                  (acc is None or self.to_tile(acc).dtype is kl.float32))
        if native:
            # Two fp8 tiles: one kiln.dot on their bits (lhs_fp8 / rhs_fp8),
            # which sm_90a multiplies with wgmma's e4m3 / e5m2 forms where
            # it can and every target otherwise decodes to bfloat16 exactly
            # (expandFp8Dots: this function's fp8_dot_operand, in C++).
            if a.shape[1] != b.shape[0]:
                raise KilnError(f"dot: inner dimensions differ: {a.shape} @ {b.shape}")
            shape = (a.shape[0], b.shape[1])
            acc = self.builtin_zeros(shape, kl.float32) if acc is None else self.to_tile(acc)
            if acc.shape != shape:
                raise KilnError(f"dot accumulator has shape {acc.shape}, expected {shape}")
            return Tile(self.b.dot_fp8(a.value, b.value, acc.value, a.dtype.fp8, b.dtype.fp8),
                        kl.float32, shape)
        if a.dtype.fp8 is not None or b.dtype.fp8 is not None:
            # fp8 values are exact in bfloat16 and float16: both fp8 take
            # bfloat16 (kl.dot_scaled's emulation); beside another float
            # type, the fp8 operand takes that one.
            # (Into a float16 accumulator, both take float16: every fp8
            # value is one, and f16 x f16 -> f16 is a dot; bf16 has none.)
            other = [t.dtype for t in (a, b) if t.dtype.fp8 is None]
            wants16 = out_dtype is kl.float16 or (
                acc is not None and self.to_tile(acc).dtype is kl.float16)
            to = (other[0] if other and other[0].is_float else
                  kl.float16 if wants16 else kl.bfloat16)
            a, b = (self.fp8_dot_operand(t, to) if t.dtype.fp8 is not None else t
                    for t in (a, b))
        if len(a.shape) == 3 and len(b.shape) == 3:
            return self.batched_dot(a, b, acc, out_dtype)
        if len(a.shape) != 2 or len(b.shape) != 2:
            raise KilnError(f"dot needs 2-D tiles (or 3-D ones, batched), got shapes {a.shape} "
                            f"and {b.shape}")
        if a.shape[1] != b.shape[0]:
            raise KilnError(f"dot: inner dimensions differ: {a.shape} @ {b.shape}")
        if a.dtype is not b.dtype:
            raise KilnError(f"dot operands must have one dtype, got {a.dtype.name} and {b.dtype.name}")
        if out_dtype is None:
            out_dtype = {"int8": kl.int32, "float64": kl.float64}.get(a.dtype.name, kl.float32)
        if isinstance(out_dtype, kl.dtype) and out_dtype.fp8 is not None:
            # Accumulated in float32, converted at the end.
            if acc is not None:
                acc = self.cast(self.to_tile(acc), kl.float32)
            return self.cast(self.builtin_dot(a, b, acc, kl.float32), out_dtype)
        shape = (a.shape[0], b.shape[1])
        if acc is None:
            acc = self.builtin_zeros(shape, out_dtype)
        else:
            acc = self.to_tile(acc)
            if acc.shape != shape:
                raise KilnError(f"dot accumulator has shape {acc.shape}, expected {shape}")
            out_dtype = acc.dtype
        return Tile(self.b.dot(a.value, b.value, acc.value), out_dtype, shape)

    def batched_dot(self, a, b, acc, out_dtype):
        """Triton's 3-D dot: [B, M, K] @ [B, K, N] -> [B, M, N], one 2-D dot
        per batch element (static slices of the operands and accumulator),
        the results put together by selects on the batch index (exact)."""
        if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
            raise KilnError(f"dot: batched shapes do not match: {a.shape} @ {b.shape}")
        nb, m, n = a.shape[0], a.shape[1], b.shape[2]
        if acc is not None:
            acc = self.to_tile(acc)
            if acc.shape != (nb, m, n):
                raise KilnError(f"dot accumulator has shape {acc.shape}, expected {(nb, m, n)}")

        def item(t, i):
            sizes = (1,) + t.shape[1:]
            sl = Tile(self.b.slice(t.value, [i, 0, 0], list(sizes)), t.dtype, sizes)
            return self.builtin_reshape(sl, t.shape[1:])

        out = None
        batch = self.builtin_arange(0, nb) if nb > 1 else None
        for i in builtins.range(nb):
            d = self.builtin_dot(item(a, i), item(b, i),
                                 None if acc is None else item(acc, i), out_dtype)
            d = self.broadcast_to(self.builtin_reshape(d, (1, m, n)), (nb, m, n))
            if out is None:
                out = d
                continue
            at = self.broadcast_to(self.builtin_reshape(batch, (nb, 1, 1)), (nb, m, n))
            out = self.where(self.compare(ast.Eq(), at, self.i32(i)), d, out)
        return out

    # -- microscaling (MX) formats: Triton's tl.dot_scaled --------------------------

    MX_FORMATS = ("e2m1", "e4m3", "e5m2", "bf16", "fp16")

    def i32(self, v):
        return self.const(v, kl.int32)

    def f32_from_bits(self, bits):
        return self.bitcast(bits, kl.float32)

    def round_to_odd_f32(self, x):
        """float64 -> float32 rounded to odd: toward zero, the last bit set
        where the value was inexact. A second rounding to a format with at
        least 2 bits less precision (fp8) then rounds as one rounding from
        float64 would; through a nearest-even float32 it was rounded twice
        (1 + 2^-4 + 2^-40 gave e4m3 0x38, not 0x39)."""
        f = self.cast(x, kl.float32)
        back = self.cast(f, kl.float64)
        inexact = self.binop(ast.BitAnd(), self.compare(ast.NotEq(), back, x),
                             self.compare(ast.Eq(), x, x))          # (NaN stays)
        away = self.compare(ast.Gt(), self.builtin_abs(back), self.builtin_abs(x))
        bits = self.bitcast(f, kl.int32)
        bits = self.where(self.binop(ast.BitAnd(), inexact, away),
                          self.binop(ast.Sub(), bits, 1), bits)
        bits = self.where(inexact, self.binop(ast.BitOr(), bits, 1), bits)
        return self.bitcast(bits, kl.float32)

    def encode_fp8(self, x, dtype):
        """float32 tile -> fp8 bits (an int8 tile of `dtype`): round to
        nearest even, saturating to the largest finite value (infinities
        too, as cvt.rn.satfinite), NaN to 0x7F."""
        e4 = dtype.fp8 == "e4m3"
        band = lambda a, m: self.binop(ast.BitAnd(), a, m)          # noqa: E731
        shr = lambda a, n: self.binop(ast.RShift(), a, n)           # noqa: E731
        bits = self.bitcast(x, kl.int32)
        sign = band(shr(bits, 24), 0x80)
        a = band(bits, 0x7FFFFFFF)
        mant = 20 if e4 else 21                 # the f32 bit of the last kept mantissa bit
        rounded = self.binop(ast.Add(), self.binop(ast.Add(), a, (1 << (mant - 1)) - 1),
                             band(shr(a, mant), 1))
        code = self.binop(ast.Sub(), shr(rounded, mant), (127 - (7 if e4 else 15)) << (3 if e4 else 2))
        top = 0x7E if e4 else 0x7B
        code = self.builtin_minimum(code, top)
        # Below the smallest normal (2^-6, 2^-14): multiples of 2^-9 / 2^-16.
        small = self.compare(ast.Lt(), a, 0x3C800000 if e4 else 0x38800000)
        q = self.builtin_rint(self.binop(ast.Mult(), self.bitcast(a, kl.float32),
                                         512.0 if e4 else 65536.0))
        code = self.where(small, self.cast(q, kl.int32), code)
        code = self.binop(ast.BitOr(), code, sign)
        code = self.where(self.compare(ast.Gt(), a, 0x7F800000), 0x7F, code)
        out = self.cast(code, kl.int8)
        return Tile(out.value, dtype, out.shape)

    def fp8_dot_operand(self, x, to):
        """An fp8 tile as `to` values for a dot: exact for bfloat16 and
        float16 (every e4m3 and e5m2 value is one of theirs), through
        float32 (decode_mx) otherwise.

        The 16-bit forms are a chain of bit operations on the loaded bytes,
        each result used once, so that a GPU lowering fuses the chain into
        whatever writes the dot's operand (no intermediate tile; the float32
        decode keeps several, 32 KiB each for a 64×128 operand): the
        magnitude bits shifted into the 16-bit exponent and mantissa, then
        scaled by a power of two (exact, subnormals included), and e4m3's
        NaN (S.1111.111) selected from the bytes."""
        if to not in (kl.bfloat16, kl.float16):
            return self.cast(x, to)
        e4 = x.dtype.fp8 == "e4m3"
        raw = Tile(x.value, kl.int8, x.shape)
        wide = self.cast(raw, kl.int16)          # sign-extended: bit 15 is the sign
        shl = lambda a, n: self.binop(ast.LShift(), a, n)           # noqa: E731
        band = lambda a, m: self.binop(ast.BitAnd(), a, m)          # noqa: E731
        if not e4:
            # e5m2 is a float16's top byte.
            v = self.bitcast(shl(wide, 8), kl.float16)
            return v if to is kl.float16 else self.cast(v, to)
        if to is kl.bfloat16:
            # S.EEEE.MMM -> S.000EEEE.MMM0000: a bfloat16 of 2^-120 times the value.
            v = self.bitcast(band(shl(wide, 4), -0x7801), kl.bfloat16)
            v = self.binop(ast.Mult(), v, self.const(2.0 ** 120, kl.bfloat16))
        else:
            # S.EEEE.MMM -> S.0EEEE.MMM0000000: a float16 of 2^-8 times the value.
            v = self.bitcast(band(shl(wide, 7), -0x4001), kl.float16)
            v = self.binop(ast.Mult(), v, self.const(256.0, kl.float16))
        nan = self.compare(ast.Eq(), band(raw, 0x7F), 0x7F)
        return self.where(nan, self.const(float("nan"), to), v)

    def decode_mx(self, x, fmt, k_pack, is_lhs, what):
        """Operand `x` of dot_scaled in format `fmt` as float32 values of the
        logical [M, K] (lhs) or [K, N] (rhs) shape: fp8 and fp4 bytes decoded
        exactly (int8 tiles holding the bits), fp4 unpacked (first element in
        the low nibble, along K, or along M / N without k_pack)."""
        if fmt in ("bf16", "fp16"):
            want = kl.bfloat16 if fmt == "bf16" else kl.float16
            if x.dtype is not want:
                raise KilnError(f"dot_scaled: {what} in format '{fmt}' must be a {want.name} "
                                f"tile, got {x.dtype.name}")
            return self.cast(x, kl.float32)
        self.check_mx_bits(x, fmt, what)
        band = lambda a, m: self.binop(ast.BitAnd(), a, m)          # noqa: E731
        shr = lambda a, n: self.binop(ast.RShift(), a, n)           # noqa: E731
        shl = lambda a, n: self.binop(ast.LShift(), a, n)           # noqa: E731
        bor = lambda a, b: self.binop(ast.BitOr(), a, b)            # noqa: E731
        eq = lambda a, b: self.compare(ast.Eq(), a, b)              # noqa: E731
        b = band(self.cast(x, kl.int32), 0xFF)
        if fmt == "e2m1":
            lo, hi = band(b, 0xF), shr(b, 4)
            j = self.builtin_join(lo, hi)                          # [r, c, 2]
            r, c = x.shape
            if is_lhs == k_pack:     # packed along the last dimension (K of lhs, N of rhs)
                b = self.builtin_reshape(j, (r, 2 * c))
            else:                    # along the first (M of lhs, K of rhs)
                b = self.builtin_reshape(self.builtin_permute(j, (0, 2, 1)), (2 * r, c))
            sign = shl(shr(b, 3), 31)
            e, m = band(shr(b, 1), 3), band(b, 1)
            normal = self.f32_from_bits(bor(sign, bor(shl(self.binop(ast.Add(), e, 126), 23),
                                                      shl(m, 22))))
            sub = self.builtin_copysign(self.binop(ast.Mult(), self.cast(m, kl.float32), 0.5),
                                        self.f32_from_bits(bor(sign, 0x3F800000)))
            return self.where(eq(e, 0), sub, normal)
        if fmt == "e5m2":
            # The top byte of a float16 (same exponent, two mantissa bits).
            h = self.cast(shl(b, 8), kl.int16)
            return self.cast(self.bitcast(h, kl.float16), kl.float32)
        # e4m3 (OCP E4M3FN): bias 7, no infinities, S.1111.111 is NaN.
        sign = shl(shr(b, 7), 31)
        e, m = band(shr(b, 3), 0xF), band(b, 7)
        normal = self.f32_from_bits(bor(sign, bor(shl(self.binop(ast.Add(), e, 120), 23),
                                                  shl(m, 20))))
        sub = self.builtin_copysign(self.binop(ast.Mult(), self.cast(m, kl.float32), 2.0 ** -9),
                                    self.f32_from_bits(bor(sign, 0x3F800000)))
        v = self.where(eq(e, 0), sub, normal)
        nan = self.binop(ast.BitAnd(), eq(e, 15), eq(m, 7))
        return self.where(nan, float("nan"), v)

    def mx_scale(self, s, what, to=kl.float32):
        """e8m0 bytes (an int8 tile of the bits) as 2^(s - 127) in float32 or
        bfloat16 (the same exponent field: exact); 255 is NaN."""
        s = self.to_tile(s)
        if s.dtype not in (kl.int8, kl.int16, kl.int32):
            raise KilnError(f"dot_scaled: {what} holds e8m0 bits as int8, got {s.dtype.name}")
        b = self.binop(ast.BitAnd(), self.cast(s, kl.int32), 0xFF)
        v = self.f32_from_bits(self.binop(ast.LShift(), b, 23))
        v = self.where(self.compare(ast.Eq(), b, 0), self.f32_from_bits(self.i32(0x00400000)), v)
        v = self.where(self.compare(ast.Eq(), b, 255), float("nan"), v)
        return v if to is kl.float32 else self.cast(v, to)

    def e2m1_bf16(self, x, k_pack, is_lhs):
        """Bytes of two e2m1 codes each (int8 [r, c]; the first code in the
        low nibble) as bfloat16 values, unpacked along the last dimension
        (K of lhs, N of rhs) or, without k_pack, the first. One chain per
        element, with no unpacked tile: element i along the packed dimension
        reads byte i // 2 (a broadcast of the bytes over a new dimension of
        2, merged into the packed one: an index division in the lowering)
        and moves its nibble (the low one for even i) to the top of an
        int16 (its sign bit); an arithmetic shift right puts it into
        bfloat16's exponent and mantissa, a mask keeps those, and 2^126
        scales them (exact: E.M gives 2^(E-127) x 1.M, subnormal 0.M)."""
        r, c = x.shape
        d = 1 if is_lhs == k_pack else 0          # the packed dimension
        shape = (r, 2 * c) if d == 1 else (2 * r, c)
        pair = (r, c, 2) if d == 1 else (r, 2, c)
        wide = self.cast(self.builtin_reshape(
            self.broadcast_to(self.builtin_expand_dims(x, d + 1), pair), shape), kl.int16)
        # 12 for the low nibble (even i), 8 for the high one.
        i = self.builtin_arange(0, shape[d])
        shift = self.binop(ast.Sub(), 12, self.binop(ast.Mult(), self.binop(ast.BitAnd(), i, 1), 4))
        shift = self.broadcast_to(self.builtin_expand_dims(self.cast(shift, kl.int16), 1 - d), shape)
        top = self.binop(ast.LShift(), wide, shift)
        bits = self.binop(ast.BitAnd(), self.binop(ast.RShift(), top, 6), -0x7E40)
        return self.binop(ast.Mult(), self.bitcast(bits, kl.bfloat16),
                          self.const(2.0 ** 126, kl.bfloat16))

    def check_mx_bits(self, x, fmt, what):
        if x.dtype not in (kl.int8, kl.int16, kl.int32):
            raise KilnError(f"dot_scaled: {what} in format '{fmt}' holds the bits as int8 "
                            f"(load uint8 data through an int8 view), got {x.dtype.name}")

    def mx_operand(self, x, fmt, k_pack, is_lhs, what, chain):
        """An operand of dot_scaled, unscaled: with `chain`, fp8 bytes by
        fp8_dot_operand's chain straight to bfloat16; else decode_mx's
        float32."""
        if chain:
            self.check_mx_bits(x, fmt, what)
            if x.dtype is not kl.int8:
                x = self.cast(x, kl.int8)
            if fmt == "e2m1":
                return self.e2m1_bf16(x, k_pack, is_lhs)
            fp8 = kl.float8e4nv if fmt == "e4m3" else kl.float8e5
            return self.fp8_dot_operand(Tile(x.value, fp8, x.shape), kl.bfloat16)
        return self.decode_mx(x, fmt, k_pack, is_lhs, what)

    def builtin_dot_scaled(self, lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format,
                           acc=None, fast_math=False, lhs_k_pack=True, rhs_k_pack=True,
                           out_dtype=kl.float32):
        """Triton's tl.dot_scaled, as Triton emulates it where the tensor cores
        have no microscaling instructions: both operands decoded, scaled by
        their e8m0 factors per 32 elements of K, rounded to bfloat16 (exact
        for fp4 / fp8 values times a power of two in range; float32 when an
        operand is fp16) and multiplied by kl.dot into float32."""
        vals = {}
        for name, v in (("lhs_format", lhs_format), ("rhs_format", rhs_format),
                        ("fast_math", fast_math), ("lhs_k_pack", lhs_k_pack),
                        ("rhs_k_pack", rhs_k_pack), ("out_dtype", out_dtype)):
            vals[name] = v.value if isinstance(v, kl.constexpr) else v
        lf, rf = vals["lhs_format"], vals["rhs_format"]
        for name, fmt in (("lhs_format", lf), ("rhs_format", rf)):
            if fmt not in self.MX_FORMATS:
                raise KilnError(f"dot_scaled: {name} must be one of {', '.join(self.MX_FORMATS)}, "
                                f"got {fmt!r}")
        for name in ("lhs_k_pack", "rhs_k_pack", "fast_math"):
            if not isinstance(vals[name], bool):
                raise KilnError(f"dot_scaled: {name} must be a compile-time bool")
        if vals["out_dtype"] not in (kl.float32, kl.float16, kl.bfloat16):
            # (Anything else fell through to float32, or was a conversion.)
            raise KilnError(f"dot_scaled: out_dtype must be kl.float32, kl.float16 or "
                            f"kl.bfloat16, got {vals['out_dtype']!r}")
        lhs, rhs = self.to_tile(lhs), self.to_tile(rhs)
        if len(lhs.shape) != 2 or len(rhs.shape) != 2:
            raise KilnError(f"dot_scaled needs 2-D tiles, got shapes {lhs.shape} and {rhs.shape}")
        compute = kl.float32 if "fp16" in (lf, rf) else kl.bfloat16
        # fp8 operands: decoded to bfloat16 by fp8_dot_operand's chain and
        # scaled there (a chain per element, no intermediate tile); the
        # others in float32, rounded to `compute` once scaled.
        chain = {f: f in ("e4m3", "e5m2", "e2m1") and compute is kl.bfloat16 for f in (lf, rf)}
        a = self.mx_operand(lhs, lf, vals["lhs_k_pack"], True, "lhs", chain[lf])
        b = self.mx_operand(rhs, rf, vals["rhs_k_pack"], False, "rhs", chain[rf])
        (m, k), (k2, n) = a.shape, b.shape
        if k != k2:
            raise KilnError(f"dot_scaled: inner dimensions differ: [{m}, {k}] @ [{k2}, {n}] "
                            "(after unpacking fp4)")
        for what, sc, rows in (("lhs_scale", lhs_scale, m), ("rhs_scale", rhs_scale, n)):
            if sc is None or (isinstance(sc, kl.constexpr) and sc.value is None):
                continue
            if k % 32:
                raise KilnError(f"dot_scaled: scales cover 32 elements of K, and K = {k}")
            sc = self.to_tile(sc)
            if sc.shape != (rows, k // 32):
                raise KilnError(f"dot_scaled: {what} must have shape {(rows, k // 32)}, got "
                                f"{sc.shape}")
            if what == "lhs_scale" and chain[lf]:
                # Each scale over its 32 elements of K as a tile of the
                # operand's shape (a broadcast of the small scale tile), so
                # that decode and scaling stay one chain per element.
                f = self.builtin_reshape(self.broadcast_to(self.builtin_reshape(
                    self.mx_scale(sc, what, kl.bfloat16), (m, k // 32, 1)),
                    (m, k // 32, 32)), (m, k))
                a = self.binop(ast.Mult(), a, f)
            elif what == "lhs_scale":
                a3 = self.builtin_reshape(a, (m, k // 32, 32))
                a = self.builtin_reshape(self.binop(ast.Mult(), a3, self.builtin_reshape(
                    self.mx_scale(sc, what), (m, k // 32, 1))), (m, k))
            elif chain[rf]:
                f = self.builtin_reshape(self.broadcast_to(self.builtin_reshape(
                    self.mx_scale(self.builtin_trans(sc), what, kl.bfloat16), (k // 32, 1, n)),
                    (k // 32, 32, n)), (k, n))
                b = self.binop(ast.Mult(), b, f)
            else:
                b3 = self.builtin_reshape(b, (k // 32, 32, n))
                ft = self.builtin_reshape(self.mx_scale(self.builtin_trans(sc), what),
                                          (k // 32, 1, n))
                b = self.builtin_reshape(self.binop(ast.Mult(), b3, ft), (k, n))
        od = vals["out_dtype"]
        if acc is not None and not (isinstance(acc, kl.constexpr) and acc.value is None):
            acc = self.cast(self.to_tile(acc), kl.float32)
        else:
            acc = None
        r = self.builtin_dot(self.cast(a, compute), self.cast(b, compute), acc,
                             out_dtype=kl.float32)
        return self.cast(r, od) if isinstance(od, kl.dtype) else r

    def reduce(self, kind, x, axis, widen=True):
        x = self.to_tile(x)
        if x.dtype.fp8 is not None:     # (on the values, in float32)
            x = self.cast(x, kl.float32)
        if x.is_scalar:
            raise KilnError(f"{kind} needs a tile")
        if axis is None:
            if len(x.shape) > 1:
                n = 1
                for d in x.shape:
                    n *= d
                x = Tile(self.b.reshape(x.value, self.ir_type(x.dtype, (n,))), x.dtype, (n,))
            axis = 0
        axis = self.const_int(axis, "axis")
        if axis < 0:
            axis += len(x.shape)
        if not 0 <= axis < len(x.shape):
            raise KilnError(f"axis {axis} is out of range for a tile of shape {x.shape}")
        out_shape = x.shape[:axis] + x.shape[axis + 1:]
        if kind == "sum" and widen and x.dtype.bits < 32 and x.dtype is not kl.int1:
            # As Triton's tl.sum: bools and narrow integers are summed in
            # int32, float16 and bfloat16 in float32 (the result's dtype).
            x = self.cast(x, kl.float32 if x.dtype.is_float else kl.int32)
        out_dtype = kl.int32 if kind in ("argmax", "argmin") else x.dtype
        if x.dtype is kl.int1:
            x = self.cast(x, kl.int32)
            out_dtype = kl.int32
        return Tile(self.b.reduce(kind, x.value, axis, self.ir_type(out_dtype, out_shape)),
                    out_dtype, out_shape)

    def keep_dims(self, r, x, axis, keep):
        """Triton's keep_dims=True: the reduced axis back, of size 1."""
        if isinstance(keep, kl.constexpr):
            keep = keep.value
        if not isinstance(keep, bool):
            raise KilnError("keep_dims= must be a compile-time bool")
        if not keep:
            return r
        x = self.to_tile(x)
        if axis is None:
            if r.is_scalar:  # (a reshape takes tiles)
                return self.broadcast_to(r, (1,) * len(x.shape))
            return self.builtin_reshape(r, (1,) * len(x.shape))
        axis = self.const_int(axis, "axis")
        if axis < 0:
            axis += len(x.shape)
        if r.is_scalar:
            return self.builtin_reshape(self.broadcast_to(r, (1,)), (1,))
        return self.builtin_expand_dims(r, axis)

    @staticmethod
    def tie_break_left(v):
        if isinstance(v, kl.constexpr):
            v = v.value
        if v is not True:
            raise KilnError("only tie_break_left=True is supported (the first extreme's "
                            "position, as Triton's default)")

    def builtin_sum(self, x, axis=None, dtype=None, keep_dims=False):
        if isinstance(dtype, kl.constexpr):
            dtype = dtype.value
        src = x
        if dtype is not None:
            # (Triton's dtype=: the input is converted first.)
            if not isinstance(dtype, kl.dtype):
                raise KilnError("sum(dtype=...) must be a kl dtype")
            x = self.cast(self.to_tile(x), dtype)
        return self.keep_dims(self.reduce("sum", x, axis, widen=dtype is None), src, axis,
                              keep_dims)

    def extreme(self, kind, x, axis, return_indices, tie_break_left, keep_dims):
        if isinstance(return_indices, kl.constexpr):
            return_indices = return_indices.value
        if not isinstance(return_indices, bool):
            raise KilnError("return_indices= must be a compile-time bool")
        r = self.keep_dims(self.reduce(kind, x, axis), x, axis, keep_dims)
        if not return_indices:
            return r
        self.tie_break_left(tie_break_left)
        if axis is None:
            raise KilnError(f"{kind}(return_indices=True) needs an axis")
        i = self.keep_dims(self.reduce("arg" + kind, x, axis), x, axis, keep_dims)
        return (r, i)

    def builtin_max(self, x, axis=None, return_indices=False,
                    return_indices_tie_break_left=True, keep_dims=False):
        return self.extreme("max", x, axis, return_indices, return_indices_tie_break_left,
                            keep_dims)

    def builtin_min(self, x, axis=None, return_indices=False,
                    return_indices_tie_break_left=True, keep_dims=False):
        return self.extreme("min", x, axis, return_indices, return_indices_tie_break_left,
                            keep_dims)

    def builtin_argmax(self, x, axis, tie_break_left=True, keep_dims=False):
        self.tie_break_left(tie_break_left)
        return self.keep_dims(self.reduce("argmax", x, axis), x, axis, keep_dims)

    def builtin_argmin(self, x, axis, tie_break_left=True, keep_dims=False):
        self.tie_break_left(tie_break_left)
        return self.keep_dims(self.reduce("argmin", x, axis), x, axis, keep_dims)

    # -- Triton's hints and conveniences --------------------------------------------------

    def hint_values(self, name, values):
        if isinstance(values, kl.constexpr):
            values = values.value
        vals = values if isinstance(values, (tuple, list)) else (values,)
        for v in vals:
            v = v.value if isinstance(v, kl.constexpr) else v
            if not isinstance(v, int) or isinstance(v, bool):
                raise KilnError(f"{name}(x, values): values must be compile-time integers")

    def builtin_multiple_of(self, x, values):
        self.hint_values("multiple_of", values)
        return x

    def builtin_max_contiguous(self, x, values):
        self.hint_values("max_contiguous", values)
        return x

    def builtin_max_constancy(self, x, values):
        self.hint_values("max_constancy", values)
        return x

    def builtin_assume(self, cond):
        if isinstance(cond, kl.constexpr):
            cond = cond.value
        if isinstance(cond, bool):
            if not cond:
                raise KilnError("assume(): the condition is False at compile time")
            return None
        if not isinstance(cond, Tile) or not cond.is_scalar or cond.dtype is not kl.int1:
            raise KilnError("assume() takes a scalar condition (a comparison, or & of "
                            "comparisons)")
        self.assume_fact(cond.fact)
        return None

    def assume_fact(self, f):
        """What kl.assume(cond) lets the front end know: an integer scalar
        not negative (`x >= 0`, `x > 0`, `x >= n` with n not negative, and
        mirrored), for pointer accesses' view offsets. Other conditions are
        accepted and not used (an assumption, like Triton's, is the
        kernel's promise: a false one is undefined behaviour)."""
        if not f:
            return
        if f[0] == "and":
            self.assume_fact(f[1])
            self.assume_fact(f[2])
            return
        op, a, b = f
        if op in (ast.Lt, ast.LtE):
            op, a, b = (ast.Gt if op is ast.Lt else ast.GtE), b, a
        if op not in (ast.Gt, ast.GtE) or not self.is_int_scalar(a) or not isinstance(a, Tile):
            return
        if isinstance(b, kl.constexpr):
            b = b.value
        if self.is_nonneg(b) or (op is ast.Gt and isinstance(b, int) and
                                 not isinstance(b, bool) and b >= -1):
            a.nonneg = True

    def builtin_debug_barrier(self):
        return None

    def builtin_device_assert(self, cond, msg="", mask=None):
        if isinstance(msg, kl.constexpr):
            msg = msg.value
        if not isinstance(msg, str):
            raise KilnError(f"device_assert: msg must be a compile-time string, got "
                            f"{type(msg).__name__}")
        if isinstance(cond, kl.constexpr):
            cond = cond.value
        if isinstance(cond, (Pointer, PointerTile, View)):
            raise KilnError("device_assert needs a condition (a bool tile or scalar), "
                            "not a pointer or view")
        if not self.debug:
            return None
        cond = self.to_tile(cond)
        if cond.dtype is not kl.int1:
            cond = self.compare(ast.NotEq(), cond, 0)
        if mask is not None:
            if isinstance(mask, kl.constexpr):
                mask = mask.value
            mask = self.to_tile(mask)
            if mask.dtype is not kl.int1:
                mask = self.compare(ast.NotEq(), mask, 0)
            cond = self.where(mask, cond, True)
        # Reported at its statement (not at its last argument).
        if self.stmt is not None and hasattr(self.stmt, "lineno"):
            self.b.set_loc(self.filename, self.stmt.lineno + self.first_line - 1,
                           self.stmt.col_offset + 1 + self.indent)
        self.b.device_assert(cond.value, msg)
        return None

    def builtin_device_print(self, prefix, *args, hex=False):
        if isinstance(prefix, kl.constexpr):
            prefix = prefix.value
        if isinstance(hex, kl.constexpr):
            hex = hex.value
        if not isinstance(prefix, str):
            raise KilnError(f"device_print: the prefix must be a compile-time string, got "
                            f"{type(prefix).__name__}")
        if not isinstance(hex, bool):
            raise KilnError("device_print: hex must be a compile-time bool")
        values = []
        for a in args:
            if isinstance(a, kl.constexpr):
                a = a.value
            if isinstance(a, (Pointer, PointerTile, View, BlockPointer)) or \
                    not isinstance(a, (Tile, bool, int, float)):
                raise KilnError(f"device_print prints tiles and numbers, not "
                                f"{type(a).__name__}")
            t = self.to_tile(a)
            if t.dtype.fp8 is not None:     # (its values, not its bits)
                t = self.cast(t, kl.float32)
            values.append(t.value)
        # (Triton's spacing: a prefix is followed by a space before values.)
        if args and prefix and not prefix.endswith(" "):
            prefix += " "
        self.b.device_print(prefix, values, hex)
        return None

    def builtin_static_range(self, *args):
        raise KilnError("kl.static_range() is only supported as the iterable of a for loop")

    def builtin_zeros_like(self, x):
        x = self.to_tile(x)
        return self.builtin_full(x.shape, 0, x.dtype)

    def builtin_clamp(self, x, min, max, propagate_nan=None):
        if propagate_nan is not None:
            self.propagate_nan(propagate_nan)
        return self.builtin_minimum(self.builtin_maximum(x, min), max)

    def builtin_permute(self, x, *dims):
        if not dims:
            raise KilnError("permute needs the order of the dimensions")
        return self.builtin_trans(x, *dims)

    def builtin_ravel(self, x):
        x = self.to_tile(x)
        n = 1
        for d in x.shape:
            n *= d
        return self.builtin_reshape(x, (n,))

    def builtin_view(self, x, *dims, shape=None):
        return self.builtin_reshape(x, *dims, shape=shape)

    def scan(self, kind, x, axis, reverse, widen=True):
        x = self.to_tile(x)
        if x.dtype.fp8 is not None:     # (on the values, in float32)
            x = self.cast(x, kl.float32)
        if x.is_scalar:
            raise KilnError(f"a {kind} scan needs a tile")
        axis = self.const_int(axis, "axis")
        if axis < 0:
            axis += len(x.shape)
        if not 0 <= axis < len(x.shape):
            raise KilnError(f"axis {axis} is out of range for a tile of shape {x.shape}")
        if isinstance(reverse, kl.constexpr):
            reverse = reverse.value
        if not isinstance(reverse, bool):
            raise KilnError("reverse= must be a compile-time bool")
        if x.dtype is kl.int1 or (kind == "sum" and widen and x.dtype.bits < 32):
            x = self.cast(x, kl.float32 if x.dtype.is_float else kl.int32)
        return Tile(self.b.scan(kind, x.value, axis, reverse), x.dtype, x.shape)

    def builtin_cumsum(self, x, axis=0, reverse=False, dtype=None):
        if isinstance(dtype, kl.constexpr):
            dtype = dtype.value
        if dtype is not None:
            if not isinstance(dtype, kl.dtype):
                raise KilnError("cumsum(dtype=...) must be a kl dtype")
            x = self.cast(self.to_tile(x), dtype)
        return self.scan("sum", x, axis, reverse, widen=dtype is None)

    def builtin_cumprod(self, x, axis=0, reverse=False):
        # (As Triton's: bfloat16 is multiplied in float32.)
        x = self.to_tile(x)
        if x.dtype is kl.bfloat16:
            x = self.cast(x, kl.float32)
        return self.scan("prod", x, axis, reverse)

    def builtin_cummax(self, x, axis=0, reverse=False):
        return self.scan("max", x, axis, reverse)

    def builtin_cummin(self, x, axis=0, reverse=False):
        return self.scan("min", x, axis, reverse)

    def combiner(self, fn, what):
        """The kiln combiner ('sum', 'prod', 'max', 'min') a Triton combine_fn
        computes: a @kiln.jit function of two parameters returning a + b,
        a * b, kl.maximum(a, b) or kl.minimum(a, b) (either order)."""
        from .jit import JITFunction  # noqa: avoid an import cycle
        if isinstance(fn, kl.constexpr):
            fn = fn.value
        if not isinstance(fn, JITFunction):
            raise KilnError(f"{what}: combine_fn must be a @kiln.jit function of two values")
        tree, _, _, _ = fn.parse()
        fdef = tree.body[0]
        params = [a.arg for a in fdef.args.args]
        body = [st for st in fdef.body
                if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant))]
        expected = (f"{what}: combine_fn {fn.fn.__name__} must return a + b, a * b, "
                    "kl.maximum(a, b) or kl.minimum(a, b) of its two parameters (Kiln's scans "
                    "and reductions combine with sum, prod, max or min)")
        if len(params) != 2 or len(body) != 1 or not isinstance(body[0], ast.Return) \
                or body[0].value is None:
            raise KilnError(expected)
        e = body[0].value

        def operands(args):
            # (Not names: `a + b + 1`, the generic path; sorting a None
            # beside a name raised a TypeError.)
            names = [a.id if isinstance(a, ast.Name) else "" for a in args]
            return len(names) == 2 and sorted(names) == sorted(params)

        if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Mult)) and \
                operands([e.left, e.right]):
            return "sum" if isinstance(e.op, ast.Add) else "prod"
        if isinstance(e, ast.Call) and not e.keywords and operands(e.args):
            try:
                target = eval(compile(ast.Expression(e.func), "<combine_fn>", "eval"),
                              fn.fn.__globals__)
            except Exception:
                raise KilnError(expected) from None
            name = getattr(target, "_kiln_builtin", None)
            if name == "maximum" or target is builtins.max:
                return "max"
            if name == "minimum" or target is builtins.min:
                return "min"
        raise KilnError(expected)

    def builtin_associative_scan(self, input, axis, combine_fn, reverse=False):
        if isinstance(reverse, kl.constexpr):
            reverse = reverse.value
        if not isinstance(input, tuple):
            try:
                kind = self.combiner(combine_fn, "associative_scan")
            except KilnError:
                kind = None
            if kind is not None:
                return self.scan(kind, input, axis, reverse, widen=False)
        return self.generic_scan(input, axis, combine_fn, reverse)

    def builtin_reduce(self, input, axis, combine_fn, keep_dims=False):
        if isinstance(keep_dims, kl.constexpr):
            keep_dims = keep_dims.value
        if not isinstance(input, tuple):
            try:
                kind = self.combiner(combine_fn, "reduce")
            except KilnError:
                kind = None
            if kind is not None:
                out = self.reduce(kind, input, axis, widen=False)
                a = axis.value if isinstance(axis, kl.constexpr) else axis
                rank = len(self.to_tile(input).shape)
                if keep_dims and a is not None:
                    out = self.builtin_expand_dims(out, a % rank)
                elif keep_dims:     # (every dimension kept, of size 1)
                    out = self.broadcast_to(out, (1,) * rank)
                return out
        return self.generic_reduce(input, axis, combine_fn, keep_dims)

    # Any associative combine_fn (Triton's tl.reduce / tl.associative_scan
    # with other functions than + * max min, and on tuples: a Mamba-style
    # scan's (a, b) pairs), by tile ops on the whole tile: log2(n) steps.

    def combine_inputs(self, input, axis, combine_fn, what):
        from .jit import JITFunction  # noqa: avoid an import cycle
        if isinstance(combine_fn, kl.constexpr):
            combine_fn = combine_fn.value
        internal = getattr(combine_fn, "_kiln_combine", False)   # (xor_sum's)
        if not isinstance(combine_fn, JITFunction) and not internal:
            raise KilnError(f"{what}: combine_fn must be a @kiln.jit function")
        # Nothing can check associativity in general; the usual mistakes can be.
        tree = combine_fn.parse()[0] if not internal else ast.parse("def f(): pass")
        body = [st for st in tree.body[0].body
                if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant))]
        params = [a.arg for a in tree.body[0].args.args]
        if len(body) == 1 and isinstance(body[0], ast.Return) and \
                isinstance(body[0].value, ast.BinOp) and \
                isinstance(body[0].value.op, (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)) \
                and all(isinstance(x, ast.Name) and x.id in params
                        for x in (body[0].value.left, body[0].value.right)):
            sym = {ast.Sub: "-", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
                   ast.Pow: "**"}[type(body[0].value.op)]
            raise KilnError(f"{what}: combine_fn {combine_fn.fn.__name__} returns a {sym} b, "
                            f"and a {sym} b is not associative (scans and reductions combine "
                            "in any grouping)")
        tiles = [self.to_tile(t) for t in (input if isinstance(input, tuple) else (input,))]
        if not tiles or any(t.is_scalar for t in tiles):
            raise KilnError(f"{what} needs tiles")
        shape = tiles[0].shape
        if any(t.shape != shape for t in tiles):
            raise KilnError(f"{what}: the inputs' shapes differ: {[t.shape for t in tiles]}")
        if isinstance(axis, kl.constexpr):
            axis = axis.value
        if axis is None:
            n = 1
            for d in shape:
                n *= d
            tiles = [self.builtin_reshape(t, (n,)) for t in tiles]
            shape, axis = (n,), 0
        if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
            raise KilnError(f"{what}: axis {axis} is out of range for shape {shape}")
        return combine_fn, tiles, shape, axis % len(shape)

    def call_combine(self, fn, left, right, count, what):
        if getattr(fn, "_kiln_combine", False):
            out = fn(*left, *right)
        else:
            out = self.inline(fn, list(left) + list(right), {}, None)
        out = out if isinstance(out, tuple) else (out,)
        if len(out) != count or not all(isinstance(o, Tile) for o in out):
            raise KilnError(f"{what}: combine_fn {getattr(fn, '__name__', 'fn')} must return {count} "
                            f"value{'s' if count > 1 else ''}, one per input")
        return [self.to_tile(o) for o in out]

    def generic_scan(self, input, axis, combine_fn, reverse):
        """Inclusive scan (Hillis-Steele): at step d each element combines
        with the one d before it (after it when `reverse`), read with
        kiln.gather_elements. The neighbour's range is combine_fn's left
        operand, so the function need not commute: forward, the earlier
        elements come first; reversed, the later ones (as Triton's, a
        reverse scan is the forward scan of the flipped axis)."""
        fn, vals, shape, axis = self.combine_inputs(input, axis, combine_fn, "associative_scan")
        n = shape[axis]
        pos = self.builtin_arange(0, n) if n > 1 else None
        if pos is not None:
            pos = self.builtin_reshape(pos, tuple(n if d == axis else 1
                                                  for d in builtins.range(len(shape))))
            pos = self.broadcast_to(pos, shape)
        d = 1
        while d < n:
            if not reverse:
                src = self.builtin_maximum(self.binop(ast.Sub(), pos, d), 0)
                valid = self.compare(ast.GtE(), pos, d)
            else:
                src = self.builtin_minimum(self.binop(ast.Add(), pos, d), n - 1)
                valid = self.compare(ast.Lt(), pos, n - d)
            other = [self.gather_elements(v, src, axis) for v in vals]
            combined = self.call_combine(fn, other, vals, len(vals), "associative_scan")
            vals = [self.where(valid, c, v) for c, v in zip(combined, vals)]
            d *= 2
        return tuple(vals) if isinstance(input, tuple) else vals[0]

    def generic_reduce(self, input, axis, combine_fn, keep_dims):
        """A tree: neighbours (even, odd) combined in order, halving the axis
        each step (a power of two); other sizes take the last element of the
        inclusive scan."""
        rank = len(self.to_tile(input[0] if isinstance(input, tuple) else input).shape)
        all_axes = (axis.value if isinstance(axis, kl.constexpr) else axis) is None
        fn, vals, shape, axis = self.combine_inputs(input, axis, combine_fn, "reduce")
        n = shape[axis]
        if n & (n - 1):
            scanned = self.generic_scan(tuple(vals), axis, fn, False)
            last = self.broadcast_to(self.const(n - 1, kl.int32), tuple(
                1 if d == axis else s for d, s in enumerate(shape)))
            vals = [self.gather_elements(v, last, axis) for v in scanned]
        else:
            while n > 1:
                pairs = [self.builtin_reshape(v, shape[:axis] + (n // 2, 2) + shape[axis + 1:])
                         for v in vals]
                halves = [self.pair_halves(p, axis + 1) for p in pairs]
                vals = self.call_combine(fn, [h[0] for h in halves], [h[1] for h in halves],
                                         len(vals), "reduce")
                n //= 2
                shape = shape[:axis] + (n,) + shape[axis + 1:]
        out_shape = shape[:axis] + shape[axis + 1:] if not keep_dims else \
            shape[:axis] + (1,) + shape[axis + 1:]
        if keep_dims and all_axes:
            out_shape = (1,) * rank
        # (To a scalar: the one element, its dtype kept, bool and fp8 too.)
        vals = [self.builtin_reshape(v, out_shape) if out_shape else
                self.squeeze(self.builtin_reshape(v, (1,)), True) for v in vals]
        return tuple(vals) if isinstance(input, tuple) else vals[0]

    def float_unary(self, name, x):
        x = self.to_tile(x)
        if x.dtype.is_int() or x.dtype.fp8 is not None:
            x = self.cast(x, kl.float32)
        return Tile(self.b.unary(name, x.value), x.dtype, x.shape)

    def builtin_exp(self, x):
        return self.float_unary("exp", x)

    # Functions whose only lowering is an f32 polynomial or expansion
    # (ApproximateMath.cpp): bf16 / f16 computed in f32, f64 refused.
    F32_MATH = ("asin", "acos", "atan", "sinh", "cosh", "tan", "log1p", "expm1", "erfc",
                "log10")

    def f32_math(self, name, x):
        x = self.to_tile(x.value if isinstance(x, kl.constexpr) else x)
        if x.dtype.is_int() or x.dtype.fp8 is not None:
            x = self.cast(x, kl.float32)
        if x.dtype is kl.float64:
            raise KilnError(f"{name} of float64 is not supported (its only lowering is a "
                            "float32 approximation); convert to float32")
        dt = x.dtype
        x = self.cast(x, kl.float32)
        return self.cast(Tile(self.b.unary(name, x.value), kl.float32, x.shape), dt)

    def float_binary(self, name, x, y):
        x, y = (self.to_tile(v.value if isinstance(v, kl.constexpr) else v) for v in (x, y))
        x, y = self.unify(x, y)
        if x.dtype.is_int():
            x, y = self.cast(x, kl.float32), self.cast(y, kl.float32)
        shape = broadcast_shapes(x.shape, y.shape)
        x, y = self.broadcast_to(x, shape), self.broadcast_to(y, shape)
        return Tile(self.b.binary(name, x.value, y.value), x.dtype, shape)

    def builtin_round(self, x):
        """Half away from zero (C's round)."""
        return self.float_unary("round", x)

    def builtin_rint(self, x):
        """Half to even (C's rint / nearbyint in the default rounding mode)."""
        return self.float_unary("roundeven", x)

    def builtin_trunc(self, x):
        """Toward zero: ceil below zero, floor above (exact)."""
        x = self.to_tile(x.value if isinstance(x, kl.constexpr) else x)
        if x.dtype.is_int():
            return x
        return self.where(self.compare(ast.Lt(), x, 0.0), self.builtin_ceil(x),
                          self.builtin_floor(x))

    def builtin_copysign(self, x, y):
        return self.float_binary("copysign", x, y)

    def builtin_fmax(self, x, y):
        """C's fmax: a NaN operand gives the other one."""
        return self.float_binary("maxnumf", x, y)

    def builtin_fmin(self, x, y):
        return self.float_binary("minnumf", x, y)

    def builtin_fmod(self, x, y):
        """C's fmod: the remainder of x / y truncated, the sign of x (Python's
        % on floats has the sign of y)."""
        return self.float_binary("remf", x, y)

    def builtin_atan2(self, y, x):
        """C's atan2. The polynomial (math.atan2) gets zeros, infinities and
        signs wrong (NaN at (0, 0) and (inf, inf), +pi for (-0, -1) and
        (-1, -inf)): a zero y takes 0 or pi by x's sign bit, two infinities
        pi/4 or 3pi/4, and the result y's sign."""
        y, x = self.unify(self.to_tile(y), self.to_tile(x))
        if y.dtype is kl.float64:
            raise KilnError("atan2 of float64 is not supported (its only lowering is a "
                            "float32 approximation); convert to float32")
        dt = y.dtype if y.dtype.is_float else kl.float32
        y, x = self.cast(y, kl.float32), self.cast(x, kl.float32)
        shape = broadcast_shapes(x.shape, y.shape)
        y, x = self.broadcast_to(y, shape), self.broadcast_to(x, shape)
        r = self.float_binary("atan2", y, x)
        on_axis = self.where(self.builtin_signbit(x), math.pi, 0.0)
        zero_y = self.binop(ast.BitAnd(), self.compare(ast.Eq(), y, 0.0),
                            self.compare(ast.Eq(), x, x))
        r = self.where(zero_y, self.broadcast_to(self.cast(self.to_tile(on_axis), kl.float32),
                                                 shape), r)
        both_inf = self.binop(ast.BitAnd(), self.builtin_isinf(y), self.builtin_isinf(x))
        corner = self.where(self.builtin_signbit(x), 3 * math.pi / 4, math.pi / 4)
        r = self.where(both_inf, self.broadcast_to(self.cast(self.to_tile(corner), kl.float32),
                                                   shape), r)
        return self.cast(self.builtin_copysign(self.builtin_abs(r), y), dt)

    def builtin_cbrt(self, x):
        """The polynomial (math.cbrt) and a Newton step, with infinities kept
        and subnormals scaled by 2^24 first (cbrt(2^24 x) = 2^8 cbrt(x))."""
        x = self.to_tile(x.value if isinstance(x, kl.constexpr) else x)
        if x.dtype.is_int() or x.dtype.fp8 is not None:
            x = self.cast(x, kl.float32)
        if x.dtype is kl.float64:
            raise KilnError("cbrt of float64 is not supported (its only lowering is a "
                            "float32 approximation); convert to float32")
        dt = x.dtype
        x = self.cast(x, kl.float32)
        tiny = self.compare(ast.Lt(), self.builtin_abs(x), 1.1754943508222875e-38)
        scaled = self.where(tiny, self.binop(ast.Mult(), x, 16777216.0), x)
        r = Tile(self.b.unary("cbrt", scaled.value), kl.float32, x.shape)
        # One Newton step on r^3 = x (the polynomial is off by up to 12 ulp):
        # r - (r^2 r - x) / (3 r^2), the residual by one fma. Zeros (and NaN)
        # keep the polynomial's value.
        r2 = self.binop(ast.Mult(), r, r)
        e = self.builtin_fma(r2, r, Tile(self.b.unary("negf", scaled.value), kl.float32,
                                         scaled.shape))
        step = self.binop(ast.Div(), e, self.binop(ast.Mult(), r2, 3.0))
        r = self.where(self.compare(ast.Eq(), r, 0.0), r, self.binop(ast.Sub(), r, step))
        r = self.where(tiny, self.binop(ast.Mult(), r, 0.00390625), r)
        return self.cast(self.where(self.builtin_isinf(x), x, r), dt)

    def builtin_pow(self, x, y):
        return self.binop(ast.Pow(), x, y)

    def builtin_isnan(self, x):
        x = self.to_tile(x.value if isinstance(x, kl.constexpr) else x)
        return self.compare(ast.NotEq(), x, x)

    def builtin_isinf(self, x):
        return self.compare(ast.Eq(), self.builtin_abs(x), float("inf"))

    def builtin_isfinite(self, x):
        return self.compare(ast.Lt(), self.builtin_abs(x), float("inf"))

    def builtin_signbit(self, x):
        """The sign bit (true for -0.0 and negative NaNs too)."""
        x = self.to_tile(x.value if isinstance(x, kl.constexpr) else x)
        if x.dtype.fp8 is not None:
            return self.compare(ast.Lt(), Tile(x.value, kl.int8, x.shape), 0)
        if not x.dtype.is_float:
            return self.compare(ast.Lt(), x, 0)
        ints = {16: kl.int16, 32: kl.int32, 64: kl.int64}[x.dtype.bits]
        return self.compare(ast.Lt(), self.bitcast(x, ints), 0)

    def builtin_fma(self, x, y, z):
        """x * y + z rounded once (math.fma: the targets' fused multiply-add)."""
        x, y, z = (self.to_tile(v.value if isinstance(v, kl.constexpr) else v) for v in (x, y, z))
        x, y = self.unify(x, y)
        x, z = self.unify(x, z)
        x, y = self.unify(x, y)
        if not x.dtype.is_float:
            raise KilnError(f"fma takes floats, got {x.dtype.name}")
        shape = broadcast_shapes(broadcast_shapes(x.shape, y.shape), z.shape)
        x, y, z = (self.broadcast_to(v, shape) for v in (x, y, z))
        return Tile(self.b.fma(x.value, y.value, z.value), x.dtype, shape)

    def builtin_umulhi(self, x, y):
        """The high 32 (64) bits of the unsigned product of int32 (int64)
        values: Triton's `tl.umulhi`."""
        x, y = (v.value if isinstance(v, kl.constexpr) else v for v in (x, y))
        # A Python int beside an int32 (int64) tile has its width, and one
        # past the signed range is an unsigned constant's bits (Philox's
        # 0xD2511F53, as Triton's uint32): widened to int64, the product's
        # high half was the wrong one.
        like = x if isinstance(x, Tile) else y if isinstance(y, Tile) else None
        if like is not None and like.dtype in (kl.int32, kl.int64):
            bits = like.dtype.bits
            x, y = (self.wrapped_const(v, like.dtype)
                    if isinstance(v, int) and not isinstance(v, bool) and
                    (1 << (bits - 1)) <= v < (1 << bits) else v for v in (x, y))
        x, y = self.unify(self.to_tile(x, like), self.to_tile(y, like))
        if x.dtype not in (kl.int32, kl.int64):
            raise KilnError(f"umulhi takes int32 or int64 values, got {x.dtype.name}")
        shape = broadcast_shapes(x.shape, y.shape)
        x, y = self.broadcast_to(x, shape), self.broadcast_to(y, shape)
        return Tile(self.b.umulhi(x.value, y.value), x.dtype, shape)

    # -- random numbers: Triton's Philox 4x32 (4x64 for int64 offsets) -------------

    def wrapped_const(self, value, dtype):
        """An unsigned constant's bits as a signed `dtype` constant."""
        bits = dtype.bits
        value &= (1 << bits) - 1
        if value >= 1 << (bits - 1):
            value -= 1 << bits
        return self.const(value, dtype)

    def philox(self, seed, offset, n_rounds):
        """Triton's randint4x: Philox 4x32 of the counter (offset, 0, 0, 0),
        an int64 offset's high word second (offset_lo, offset_hi, 0, 0), keyed
        by the seed's two words; four int32 tiles of the offset's shape.
        (Triton 3.4 and later: before, int64 offsets ran Philox 4x64 into
        int64 results, and the bits of an offset below 2^32 depended on its
        dtype.)"""
        if isinstance(n_rounds, kl.constexpr):
            n_rounds = n_rounds.value
        if not isinstance(n_rounds, int) or isinstance(n_rounds, bool) or n_rounds < 0:
            raise KilnError("n_rounds must be a compile-time non-negative int")
        if isinstance(seed, kl.constexpr):
            seed = seed.value
        if isinstance(offset, kl.constexpr):
            offset = offset.value
        if isinstance(seed, int) and not isinstance(seed, bool):
            if not -(1 << 63) <= seed < (1 << 64):
                raise KilnError(f"seed {seed} does not fit in 64 bits")
            seed = self.wrapped_const(seed, kl.int64)
        seed = self.to_tile(seed) if not isinstance(seed, Tile) else seed
        offset = self.to_tile(offset) if not isinstance(offset, Tile) else offset
        if not seed.is_scalar or not seed.dtype.is_int() or seed.dtype is kl.int1:
            raise KilnError("the seed must be an integer scalar")
        if offset.dtype not in (kl.int32, kl.int64):
            raise KilnError(f"random offsets must be int32 or int64, got {offset.dtype.name}")
        dt = kl.int32
        seed = self.cast(seed, kl.int64)
        keys = (0x9E3779B9, 0xBB67AE85)
        rounds = (0xD2511F53, 0xCD9E8D57)

        def high_word(x):
            shifted = self.b.binary("shrui", x.value,
                                    self.broadcast_to(self.const(32, kl.int64), x.shape).value)
            return self.cast(Tile(shifted, kl.int64, x.shape), kl.int32)

        k0, k1 = self.cast(seed, kl.int32), high_word(seed)
        shape = offset.shape
        ka, kb = (self.wrapped_const(k, dt) for k in keys)
        ra, rb = (self.broadcast_to(self.wrapped_const(r, dt), shape) for r in rounds)
        zero = self.broadcast_to(self.const(0, dt), shape)

        def xor(a, b):
            return Tile(self.b.binary("xori", a.value, self.broadcast_to(b, shape).value), dt, shape)

        def mul(a, b):
            return Tile(self.b.binary("muli", a.value, b.value), dt, shape)

        c0, c1, c2, c3 = self.broadcast_to(offset, shape), zero, zero, zero
        if offset.dtype is kl.int64:
            c0, c1 = self.cast(c0, kl.int32), high_word(c0)
        for _ in builtins.range(n_rounds):
            _c0, _c2 = c0, c2
            c0 = xor(xor(self.builtin_umulhi(rb, _c2), c1), k0)
            c2 = xor(xor(self.builtin_umulhi(ra, _c0), c3), k1)
            c1 = mul(rb, _c2)
            c3 = mul(ra, _c0)
            k0 = Tile(self.b.binary("addi", k0.value, ka.value), dt, ())
            k1 = Tile(self.b.binary("addi", k1.value, kb.value), dt, ())
        return c0, c1, c2, c3

    def builtin_randint4x(self, seed, offset, n_rounds=10):
        return self.philox(seed, offset, n_rounds)

    def builtin_randint(self, seed, offset, n_rounds=10):
        return self.philox(seed, offset, n_rounds)[0]

    def builtin_uint_to_uniform_float(self, x):
        """Triton's: random bits (int32 or int64) to float32 in [0, 1)."""
        x = self.to_tile(x.value if isinstance(x, kl.constexpr) else x)
        if x.dtype not in (kl.int32, kl.int64):
            raise KilnError(f"uint_to_uniform_float takes int32 or int64, got {x.dtype.name}")
        scale = 4.6566127342e-10 if x.dtype is kl.int32 else 1.0842020432385337e-19
        neg = self.compare(ast.Lt(), x, 0)
        # -x - 1 is ~x (no overflow at the minimum)
        flipped = Tile(self.b.binary("xori", x.value, self.broadcast_to(
            self.const(-1, x.dtype), x.shape).value), x.dtype, x.shape)
        x = self.where(neg, flipped, x)
        return self.binop(ast.Mult(), self.cast(x, kl.float32), self.const(scale, kl.float32))

    def builtin_rand(self, seed, offset, n_rounds=10):
        return self.builtin_uint_to_uniform_float(self.builtin_randint(seed, offset, n_rounds))

    def builtin_rand4x(self, seed, offsets, n_rounds=10):   # (Triton's name: offsets)
        return tuple(self.builtin_uint_to_uniform_float(i)
                     for i in self.philox(seed, offsets, n_rounds))

    def builtin_pair_uniform_to_normal(self, u1, u2):
        """Triton's Box-Muller transform of two uniform float32 tiles."""
        u1 = self.builtin_maximum(1.0e-7, u1)
        th = self.binop(ast.Mult(), 6.283185307179586, u2)
        r = self.builtin_sqrt(self.binop(ast.Mult(), -2.0, self.builtin_log(u1)))
        return (self.binop(ast.Mult(), r, self.builtin_cos(th)),
                self.binop(ast.Mult(), r, self.builtin_sin(th)))

    def builtin_randn(self, seed, offset, n_rounds=10):
        i1, i2, _, _ = self.philox(seed, offset, n_rounds)
        return self.builtin_pair_uniform_to_normal(self.builtin_uint_to_uniform_float(i1),
                                                   self.builtin_uint_to_uniform_float(i2))[0]

    def builtin_randn4x(self, seed, offset, n_rounds=10):
        u1, u2, u3, u4 = self.builtin_rand4x(seed, offset, n_rounds)
        return self.builtin_pair_uniform_to_normal(u1, u2) + \
            self.builtin_pair_uniform_to_normal(u3, u4)

    def builtin_div_rn(self, x, y):
        return self.binop(ast.Div(), x, y)  # (IEEE division rounds to nearest)

    def builtin_fdiv(self, x, y, ieee_rounding=False):
        return self.binop(ast.Div(), x, y)

    def builtin_sqrt_rn(self, x):
        return self.builtin_sqrt(x)  # (IEEE sqrt rounds to nearest)

    def builtin_histogram(self, input, num_bins, mask=None):
        """Triton's: int32 counts of the values 0 .. num_bins - 1 in an
        integer tile (values outside are not counted; with `mask`, only the
        elements it keeps): a comparison against every bin and a sum."""
        num_bins = self.const_int(num_bins, "num_bins")
        x = self.to_tile(input)
        if not x.dtype.is_int() or x.dtype is kl.int1 or x.is_scalar or len(x.shape) != 1:
            raise KilnError("histogram takes a 1-D integer tile")
        if not 1 <= num_bins <= 1 << 16:
            raise KilnError(f"histogram: num_bins must be in [1, 65536], got {num_bins}")
        bins = self.builtin_arange(0, num_bins)
        # (Compared in int32 at least: bins cast to int8 wrapped, counting
        # -1 in bin 255.)
        if x.dtype.bits < 32:
            x = self.cast(x, kl.int32)
        hit = self.compare(ast.Eq(), self.builtin_expand_dims(x, 1),
                           self.builtin_expand_dims(self.cast(bins, x.dtype), 0))
        if mask is not None:
            m = self.to_tile(mask)
            hit = self.binop(ast.BitAnd(), hit, self.builtin_expand_dims(
                self.broadcast_to(m, x.shape), 1))
        ones = self.where(hit, 1, 0)
        return self.builtin_sum(self.cast(ones, kl.int32), axis=0)

    def builtin_cat(self, input, other, can_reorder=False):
        """Triton's tl.cat: input and other one after the other along the
        first dimension (in order, whatever `can_reorder` says): a join in a
        new last dimension moved first, then a reshape; exact."""
        if isinstance(can_reorder, kl.constexpr):
            can_reorder = can_reorder.value
        a, b = self.to_tile(input), self.to_tile(other)
        if a.is_scalar or a.shape != b.shape:
            raise KilnError(f"cat takes two tiles of one shape, got {a.shape} and {b.shape}")
        a, b = self.unify(a, b)
        j = self.builtin_join(a, b)                           # [..., 2]
        rank = len(a.shape)
        j = self.builtin_permute(j, (rank,) + tuple(builtins.range(rank)))   # [2, ...]
        return self.builtin_reshape(j, (2 * a.shape[0],) + a.shape[1:])

    def builtin_softmax(self, x, dim=None, keep_dims=False, ieee_rounding=False):
        """Triton's tl.softmax: exp(x - max) / sum along `dim` (0 when None),
        the result of x's shape (`keep_dims` is accepted: the result keeps
        every dimension either way, as softmax's does)."""
        if isinstance(dim, kl.constexpr):
            dim = dim.value
        x = self.to_tile(x)
        if not x.dtype.is_float:
            raise KilnError(f"softmax takes floats, got {x.dtype.name}")
        d = 0 if dim is None else dim
        z = self.binop(ast.Sub(), x, self.builtin_max(x, d, keep_dims=True))
        num = self.builtin_exp(z)
        return self.binop(ast.Div(), num, self.builtin_sum(num, d, keep_dims=True))

    def builtin_join(self, a, b):
        """Triton's: a and b (broadcast together) side by side in a new
        last dimension of 2: a select, exact for every value."""
        a, b = self.to_tile(a), self.to_tile(b)
        if not (a.dtype is b.dtype and a.dtype.fp8 is not None):   # (fp8 pairs: their bits)
            a, b = self.unify(a, b)
        shape = broadcast_shapes(a.shape, b.shape)
        if not shape:   # two scalars: a tile of shape (2,), as Triton's
            a, b = self.broadcast_to(a, (1,)), self.broadcast_to(b, (1,))
            return self.builtin_reshape(self.pair_join(a, b, 1), (2,))
        return self.pair_join(self.broadcast_to(a, shape), self.broadcast_to(b, shape),
                              len(shape))

    def builtin_split(self, a):
        """Triton's: the two halves of a last dimension of 2 (pair_halves:
        exact for every value, -0.0 and NaN included)."""
        a = self.to_tile(a)
        if not a.shape or a.shape[-1] != 2:
            raise KilnError(f"split takes a tile whose last dimension is 2, got shape {a.shape}")
        return self.pair_halves(a, len(a.shape) - 1)

    def pair_halves(self, x, axis):
        """x's two halves along `axis` (of size 2), that axis dropped: two
        slices, each reshaped (copies of the elements: exact for every
        value and dtype, -0.0, NaN and fp8 bytes included)."""
        rank = len(x.shape)
        out_shape = x.shape[:axis] + x.shape[axis + 1:]
        halves = []
        for k in (0, 1):
            sizes = tuple(1 if d == axis else n for d, n in enumerate(x.shape))
            h = Tile(self.b.slice(x.value, [k if d == axis else 0 for d in range(rank)],
                                  list(sizes)), x.dtype, sizes)
            # (To a scalar: the one element.)
            halves.append(self.builtin_reshape(h, out_shape) if out_shape else
                          self.squeeze(h, True))
        return tuple(halves)

    def pair_join(self, a, b, axis):
        """a and b as the two halves of a new axis `axis` of size 2 (a select)."""
        shape = a.shape[:axis] + (2,) + a.shape[axis:]
        idx = self.builtin_reshape(self.builtin_arange(0, 2),
                                   tuple(2 if d == axis else 1 for d in range(len(shape))))
        first = self.broadcast_to(self.compare(ast.Eq(), idx, 0), shape)
        return self.where(first, self.broadcast_to(self.builtin_expand_dims(a, axis), shape),
                          self.broadcast_to(self.builtin_expand_dims(b, axis), shape))

    def last_dim_pow2(self, x, what):
        x = self.to_tile(x)
        if x.is_scalar:
            raise KilnError(f"{what} takes a tile")
        n = x.shape[-1]
        if n & (n - 1):
            raise KilnError(f"{what} works along the last dimension, whose size must be a "
                            f"power of two, got {x.shape}")
        return x, n

    def builtin_flip(self, x, dim=None):
        """Triton's: x reversed along its last dimension (a power of two):
        log2(n) exchanges of halves, exact."""
        x, n = self.last_dim_pow2(x, "flip")
        if dim is not None and self.const_int(dim, "dim") not in (-1, len(x.shape) - 1):
            raise KilnError("flip works along the last dimension")
        lead = x.shape[:-1]
        j = n // 2
        while j >= 1:
            t = self.builtin_reshape(x, lead + (n // (2 * j), 2, j))
            lo, hi = self.pair_halves(t, len(lead) + 1)
            x = self.builtin_reshape(self.pair_join(hi, lo, len(lead) + 1), lead + (n,))
            j //= 2
        return x

    def builtin_sort(self, x, dim=None, descending=False):
        """Triton's: x sorted along its last dimension (a power of two) by a
        bitonic network of compare-exchanges; a permutation of the values
        (NaNs compare false, so they stay where the network leaves them)."""
        x, n = self.last_dim_pow2(x, "sort")
        if dim is not None and self.const_int(dim, "dim") not in (-1, len(x.shape) - 1):
            raise KilnError("sort works along the last dimension")
        if isinstance(descending, kl.constexpr):
            descending = descending.value
        if not isinstance(descending, bool):
            raise KilnError("sort(descending=...) must be a compile-time bool")
        lead = x.shape[:-1]
        size = 2
        while size <= n:
            j = size // 2
            while j >= 1:
                blocks = n // (2 * j)
                t = self.builtin_reshape(x, lead + (blocks, 2, j))
                lo, hi = self.pair_halves(t, len(lead) + 1)
                # Block b's elements start at b * 2j: they sort up where
                # (b * 2j) // size is even (down for the last merge when
                # descending), else down.
                b = self.builtin_arange(0, blocks)
                up = self.compare(ast.Eq(), self.binop(ast.Mod(), self.binop(
                    ast.FloorDiv(), self.binop(ast.Mult(), b, 2 * j), size), 2), 0)
                if descending:
                    up = self.compare(ast.Eq(), up, False)
                up = self.broadcast_to(self.builtin_reshape(
                    up, (1,) * len(lead) + (blocks, 1)), lo.shape)
                swap = self.where(up, self.compare(ast.Gt(), lo, hi),
                                  self.compare(ast.Lt(), lo, hi))
                first = self.where(swap, hi, lo)
                second = self.where(swap, lo, hi)
                x = self.builtin_reshape(self.pair_join(first, second, len(lead) + 1),
                                         lead + (n,))
                j //= 2
            size *= 2
        return x

    def builtin_topk(self, x, k, dim=None):
        """Triton's tl.topk: the k largest elements along the last dimension
        (a power of two), largest first: the bitonic sort, then its first k
        (kiln.gather_elements)."""
        k = self.const_int(k, "k")
        x = self.to_tile(x)
        if x.is_scalar:
            raise KilnError("topk needs a tile")
        n = x.shape[-1]
        if not 1 <= k <= n:
            raise KilnError(f"topk: k = {k} must be in [1, {n}] (the last dimension)")
        s = self.builtin_sort(x, dim, descending=True)
        lead = x.shape[:-1]
        idx = self.builtin_reshape(self.builtin_arange(0, k), (1,) * len(lead) + (k,))
        return self.gather_elements(s, self.broadcast_to(idx, lead + (k,)), len(lead))

    def builtin_xor_sum(self, input, axis=None, keep_dims=False):
        """Triton's tl.xor_sum: the xor of the elements along `axis` (all
        when None); integers."""
        t = self.to_tile(input)
        if not t.dtype.is_int():
            raise KilnError(f"xor_sum takes integers, got {t.dtype.name}")
        if isinstance(keep_dims, kl.constexpr):
            keep_dims = keep_dims.value
        xor = lambda a, b: self.binop(ast.BitXor(), a, b)   # noqa: E731
        xor._kiln_combine = True
        return self.generic_reduce(t, axis, xor, keep_dims)

    def builtin_cast(self, input, dtype, fp_downcast_rounding=None, bitcast=False):
        """Triton's tl.cast: input.to(dtype, bitcast=, fp_downcast_rounding=)
        (rounded_cast)."""
        for name in ("dtype", "fp_downcast_rounding", "bitcast"):
            v = locals()[name]
            if isinstance(v, kl.constexpr):
                if name == "dtype":
                    dtype = v.value
                elif name == "bitcast":
                    bitcast = v.value
                else:
                    fp_downcast_rounding = v.value
        if isinstance(dtype, kl.pointer_type):
            return self.int_to_pointer(input, dtype.element_ty)
        if not isinstance(dtype, kl.dtype):
            raise KilnError("cast expects a kl dtype")
        if bitcast:
            return self.bitcast(input, dtype)
        return self.rounded_cast(self.to_tile(input), dtype, fp_downcast_rounding)

    FLOAT_BITS = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}

    def rounded_cast(self, x, dtype, rounding):
        """x.to(dtype) with Triton's fp_downcast_rounding: None or 'rtne'
        (to nearest even, every conversion's), or 'rtz' (toward zero) for a
        narrowing float conversion: the nearest-even result, stepped one unit
        in the last place toward zero where it is larger in magnitude than x
        (sign and magnitude: its bits minus one; an overflow to infinity
        becomes the largest finite value; NaN stays NaN)."""
        if rounding not in (None, "rtne", "rtz"):
            raise KilnError(f"fp_downcast_rounding must be 'rtne', 'rtz' or None, got "
                            f"{rounding!r}")
        src = x.dtype
        narrowing = (src.name in self.FLOAT_BITS and dtype.name in self.FLOAT_BITS and
                     self.FLOAT_BITS[dtype.name] <= self.FLOAT_BITS[src.name] and
                     src is not dtype)
        if rounding is not None and not narrowing:
            raise KilnError(f"fp_downcast_rounding applies to narrowing float conversions, "
                            f"not {src.name} to {dtype.name}")
        r = self.cast(x, dtype)
        if rounding != "rtz":
            return r
        back = self.cast(r, src)
        larger = self.compare(ast.Gt(), self.builtin_abs(back), self.builtin_abs(x))
        ity = {16: kl.int16, 32: kl.int32, 64: kl.int64}[self.FLOAT_BITS[dtype.name]]
        bits = self.bitcast(r, ity)
        toward0 = self.bitcast(self.binop(ast.Sub(), bits, self.const(1, ity)), dtype)
        return self.where(larger, toward0, r)

    def builtin_interleave(self, a, b):
        """Triton's: a and b's elements alternating along the last
        dimension (join, then that dimension and the new one merged)."""
        j = self.builtin_join(a, b)
        if len(j.shape) == 1:
            return j
        return self.builtin_reshape(j, j.shape[:-2] + (j.shape[-2] * 2,))

    def builtin_swizzle2d(self, i, j, size_i, size_j, size_g):
        """Triton's: the row-major index (i, j) of a size_i x size_j grid,
        renumbered column-major in groups of size_g rows."""
        ij = self.binop(ast.Add(), self.binop(ast.Mult(), i, size_j), j)
        size_gj = self.binop(ast.Mult(), size_g, size_j)
        group_id = self.binop(ast.FloorDiv(), ij, size_gj)
        off_i = self.binop(ast.Mult(), group_id, size_g)
        size_g = self.builtin_minimum(self.binop(ast.Sub(), size_i, off_i), size_g)
        ij = self.binop(ast.Mod(), ij, size_gj)
        new_i = self.binop(ast.Add(), off_i, self.binop(ast.Mod(), ij, size_g))
        new_j = self.binop(ast.FloorDiv(), ij, size_g)
        return new_i, new_j

    def builtin_exp2(self, x):
        return self.float_unary("exp2", x)

    def builtin_log(self, x):
        return self.float_unary("log", x)

    def builtin_log2(self, x):
        return self.float_unary("log2", x)

    def builtin_sqrt(self, x):
        return self.float_unary("sqrt", x)

    def builtin_rsqrt(self, x):
        return self.float_unary("rsqrt", x)

    def builtin_tanh(self, x):
        return self.float_unary("tanh", x)

    def builtin_sin(self, x):
        return self.float_unary("sin", x)

    def builtin_cos(self, x):
        return self.float_unary("cos", x)

    def builtin_erf(self, x):
        return self.float_unary("erf", x)

    def builtin_floor(self, x):
        return self.float_unary("floor", x)

    def builtin_ceil(self, x):
        return self.float_unary("ceil", x)

    def builtin_sigmoid(self, x):
        x = self.to_tile(x)
        if x.dtype.is_int() or x.dtype.fp8 is not None:
            x = self.cast(x, kl.float32)
        neg = Tile(self.b.unary("negf", x.value), x.dtype, x.shape)
        e = self.float_unary("exp", neg)
        return self.binop(ast.Div(), 1.0, self.binop(ast.Add(), 1.0, e))

    def builtin_abs(self, x):
        x = self.to_tile(x)
        if x.dtype.fp8 is not None:
            x = self.cast(x, kl.float32)
        return Tile(self.b.unary("absf" if x.dtype.is_float else "absi", x.value), x.dtype, x.shape)

    def builtin_where(self, condition, x, y):
        return self.where(condition, x, y)

    @staticmethod
    def propagate_nan(v):
        """Triton's propagate_nan= (kl.PropagateNan.NONE or ALL): accepted;
        Kiln's maximum and minimum always propagate NaN, which NONE (no
        promise) allows."""
        if isinstance(v, kl.constexpr):
            v = v.value
        if not isinstance(v, kl.PropagateNan):
            raise KilnError("propagate_nan= takes kl.PropagateNan.NONE or kl.PropagateNan.ALL")

    @staticmethod
    def number_extreme(x, y, largest):
        """maximum / minimum of two compile-time numbers as on tiles: NaN
        propagates (Python's max(1.0, nan) is 1.0), and -0.0 < 0.0."""
        x, y = (v.value if isinstance(v, kl.constexpr) else v for v in (x, y))
        if isinstance(x, float) or isinstance(y, float):   # (-0.0 beside 0)
            x, y = float(x), float(y)
        for v in (x, y):
            if isinstance(v, float) and math.isnan(v):
                return v
        if x == y and isinstance(x, float) and isinstance(y, float):
            return x if (math.copysign(1, x) > math.copysign(1, y)) == largest else y
        return builtins.max(x, y) if largest else builtins.min(x, y)

    def builtin_maximum(self, x, y, propagate_nan=None):
        if propagate_nan is not None:
            self.propagate_nan(propagate_nan)
        x, y = self.unify(*self.widen_bools(x, y, pairs=False)) \
            if isinstance(x, Tile) or isinstance(y, Tile) else (x, y)
        if not isinstance(x, Tile):
            return self.number_extreme(x, y, True)
        # Two bools: False < True (maxsi would read True as -1).
        name = "maximumf" if x.dtype.is_float else "ori" if x.dtype is kl.int1 else "maxsi"
        out = Tile(self.b.binary(name, x.value, y.value), x.dtype, x.shape)
        if name == "maxsi" and out.is_scalar:
            out.nonneg = self.is_nonneg(x) or self.is_nonneg(y)
            out.uniform = self.is_uniform(x) and self.is_uniform(y)
        return out

    def builtin_minimum(self, x, y, propagate_nan=None):
        if propagate_nan is not None:
            self.propagate_nan(propagate_nan)
        x, y = self.unify(*self.widen_bools(x, y, pairs=False)) \
            if isinstance(x, Tile) or isinstance(y, Tile) else (x, y)
        if not isinstance(x, Tile):
            return self.number_extreme(x, y, False)
        name = "minimumf" if x.dtype.is_float else "andi" if x.dtype is kl.int1 else "minsi"
        out = Tile(self.b.binary(name, x.value, y.value), x.dtype, x.shape)
        if name == "minsi" and out.is_scalar:
            out.nonneg = self.is_nonneg(x) and self.is_nonneg(y)
            out.uniform = self.is_uniform(x) and self.is_uniform(y)
        return out

    @staticmethod
    def shape_args(args):
        """Triton's `*shape` / `*dims` parameters: one sequence, or its
        elements one by one (`reshape(x, (2, 4))`, `reshape(x, 2, 4)`)."""
        if len(args) == 1:
            one = args[0].value if isinstance(args[0], kl.constexpr) else args[0]
            if one is None or isinstance(one, (tuple, list)):
                return None if one is None else tuple(one)
        return tuple(args)

    def builtin_trans(self, x, *dims):
        x = self.to_tile(x)
        rank = len(x.shape)
        order = self.shape_args(dims) if dims else None
        if order is None:
            order = tuple(reversed(range(rank)))
        order = tuple(self.const_int(o, "order") for o in order)
        if sorted(order) != list(range(rank)):
            raise KilnError(f"trans order {order} is not a permutation of the {rank} dimensions")
        shape = tuple(x.shape[o] for o in order)
        return Tile(self.b.trans(x.value, list(order), self.ir_type(x.dtype, shape)), x.dtype, shape)

    def shape_or_dims(self, dims, shape):
        """`*dims` (Triton's `*shape`) or a `shape=` keyword (Kiln's older
        spelling), one of them."""
        if shape is not None:
            if dims:
                raise KilnError("pass the shape once: as arguments or as shape=")
            return self.const_shape(shape)
        return self.const_shape(self.shape_args(dims))

    def builtin_reshape(self, x, *dims, shape=None, can_reorder=False):
        """Triton's: x's elements in row-major order in a tile of `shape`
        (in order, whatever `can_reorder` says)."""
        x = self.to_tile(x)
        shape = self.shape_or_dims(dims, shape)
        n1 = 1
        for d in x.shape:
            n1 *= d
        n2 = 1
        for d in shape:
            n2 *= d
        if n1 != n2:
            raise KilnError(f"cannot reshape a tile of shape {x.shape} ({n1} elements) to {shape}")
        return Tile(self.b.reshape(x.value, self.ir_type(x.dtype, shape)), x.dtype, shape)

    def builtin_broadcast_to(self, x, *dims, shape=None):
        return self.broadcast_to(self.to_tile(x), self.shape_or_dims(dims, shape))

    def builtin_expand_dims(self, x, axis):
        """Triton's: a dimension of size 1 at `axis`, or at each of a
        sequence of axes (positions in the result); a scalar becomes a tile."""
        x = self.to_tile(x)
        if isinstance(axis, kl.constexpr):
            axis = axis.value
        if isinstance(axis, (tuple, list)):
            rank = len(x.shape) + len(axis)
            axes = [self.const_int(a, "axis") for a in axis]
            axes = sorted(a + rank if a < 0 else a for a in axes)
            if len(set(axes)) != len(axes) or any(not 0 <= a < rank for a in axes):
                raise KilnError(f"expand_dims axes {tuple(axis)} are out of range or repeated "
                                f"for a result of {rank} dimensions")
            for a in axes:
                x = self.builtin_expand_dims(x, a)
            return x
        axis = self.const_int(axis, "axis")
        if x.is_scalar and axis in (0, -1):
            return self.broadcast_to(x, (1,))
        if axis < 0:
            axis += len(x.shape) + 1
        if not 0 <= axis <= len(x.shape):
            raise KilnError(f"expand_dims axis {axis} is out of range")
        return self.inserted_dim(x, Tile(self.b.expand_dims(x.value, axis), x.dtype,
                                         x.shape[:axis] + (1,) + x.shape[axis:]), axis)

    def builtin_cdiv(self, x, div):   # (Triton's names)
        a, b = x, div
        if isinstance(a, kl.constexpr):
            a = a.value
        if isinstance(b, kl.constexpr):
            b = b.value
        if not isinstance(a, Tile) and not isinstance(b, Tile):
            if b == 0:
                raise KilnError("cdiv: division by zero in a compile-time expression")
            return (a + b - 1) // b
        return self.binop(ast.FloorDiv(), self.binop(ast.Sub(), self.binop(ast.Add(), a, b), 1), b)

    def builtin_static_print(self, *args):
        self.compile_time_print(*[a.value if isinstance(a, kl.constexpr) else a for a in args])

    def compile_time_print(self, *args, **kwargs):
        """print() at compile time: once per translation that succeeds."""
        if self.static_prints is None:
            print(*args, **kwargs)
        else:
            self.static_prints.append((args, kwargs))

    def builtin_static_assert(self, cond, msg=""):
        if isinstance(cond, kl.constexpr):
            cond = cond.value
        if isinstance(msg, kl.constexpr):
            msg = msg.value
        if isinstance(cond, (Tile, Pointer, PointerTile, View)):
            raise KilnError("static_assert needs a compile-time condition, got a runtime value")
        if not cond:
            raise KilnError(f"static_assert failed{': ' + str(msg) if msg else ''}")


for _name in CodeGen.F32_MATH:
    setattr(CodeGen, "builtin_" + _name,
            lambda self, x, _name=_name: self.f32_math(_name, x))


def fp8_value(code, fmt):
    """The float value of 8-bit float bits (0..255)."""
    sign = -1.0 if code & 0x80 else 1.0
    if fmt == "e4m3":
        e, m = (code >> 3) & 15, code & 7
        if e == 15 and m == 7:
            return math.nan
        return sign * (m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    e, m = (code >> 2) & 31, code & 3
    if e == 31:
        return sign * math.inf if m == 0 else math.nan
    return sign * (m / 4 * 2.0 ** -14 if e == 0 else (1 + m / 4) * 2.0 ** (e - 15))


def fp8_bits(value, fmt):
    """The fp8 bits (as a signed int8 value) nearest `value`: ties to the
    even code, saturating to the largest finite value, NaN 0x7F."""
    if math.isnan(value):
        return 0x7F
    top = 0x7E if fmt == "e4m3" else 0x7B
    if math.isinf(value) or abs(value) >= fp8_value(top, fmt):   # saturated (satfinite)
        code = top | (0x80 if value < 0 else 0)
        return code - 256 if code >= 128 else code
    best = None
    for code in builtins.range(0, 128):
        v = fp8_value(code, fmt)
        if math.isnan(v) or math.isinf(v):
            continue
        d = abs(abs(value) - v)
        if best is None or d < best[0] or (d == best[0] and code % 2 == 0):
            best = (d, code)
    code = best[1] | (0x80 if math.copysign(1.0, value) < 0 else 0)
    return code - 256 if code >= 128 else code


def _dedent(source):
    """The function's source without its first line's indentation (a kernel
    defined in a function or class). textwrap.dedent removes only what every
    line shares, so a comment or a string's line at column 0 inside the body
    left the source indented: an IndentationError. Such comment lines become
    blank; other lines with less indentation (inside a string) stay."""
    lines = source.splitlines(keepends=True)
    first = lines[0] if lines else ""
    prefix = first[:len(first) - len(first.lstrip(" \t"))]
    if not prefix:
        return source
    return "".join(line[len(prefix):] if line.startswith(prefix) else
                   "\n" if not line.strip() or line.lstrip().startswith("#") else line
                   for line in lines)


def parse_function(fn):
    """Returns (module AST, first line, dedented source, file name)."""
    import inspect
    try:
        source = inspect.getsource(fn)
        filename = inspect.getsourcefile(fn) or "<kernel>"
        first_line = fn.__code__.co_firstlineno
    except (OSError, TypeError) as e:
        raise CompilationError(f"cannot read the source of {fn.__name__}: {e}") from None
    source = _dedent(source)
    tree = ast.parse(source)
    fdef = tree.body[0]
    # Drop decorators: they are not part of the kernel.
    if isinstance(fdef, ast.FunctionDef):
        first_line += 0
    return tree, first_line, source, filename
