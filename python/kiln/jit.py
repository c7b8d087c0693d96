"""@kiln.jit, launching, specialization, inspection and autotuning."""

from __future__ import annotations

import enum
import hashlib
import inspect
import json
import math
import os
import threading
import time
import types

import numpy as np

from . import language as kl
from . import runtime as runtime_module
from .frontend import (PLAIN_TYPES, CodeGen, CompilationError, KilnError, Pointer, Tile,
                       WidenCarried, parse_function, same_value)
from .runtime import BundleError, _stream_handle, env_target
from .runtime import bf16, cuda_array_view, fp8  # noqa: F401  (kiln.bf16 lives with the runtime)


def refused_at_load(error, what):
    """A JIT compile whose bundle this machine's runtime refuses to load (a
    CPU feature the target needs and the host lacks: x86-64-avx512-bf16 on a
    machine without AVX512-BF16) compiled fine: raise the runtime's
    BundleError, naming the features, instead of a compile error."""
    msg = str(error)
    if msg.startswith("KILN_ERROR_MISSING_FEATURE"):
        raise BundleError(f"{what}: {msg}") from None


_jit_lock = threading.Lock()
_jits = {}
_gpu_target = None


def _get_jit(target=None):
    """The process-wide JIT for `target` (default: the host CPU, or
    $KILN_TARGET): the same compiler and caches as C++."""
    target = target or env_target()
    with _jit_lock:
        j = _jits.get(target)
        if j is None:
            from ._kiln import JIT
            j = _jits[target] = JIT.create(target, os.environ.get("KILN_CACHE_DIR", ""), 0)
        return j


def _env_int(name, default, lo, hi):
    v = os.environ.get(name, str(default))
    if not v.isdigit() or not lo <= int(v) <= hi:
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {v!r}")
    return int(v)


def default_num_warps():
    """Warps per thread block on GPU targets when a launch does not say
    (``num_warps=``): $KILN_NUM_WARPS, else 4."""
    return _env_int("KILN_NUM_WARPS", 4, 1, 32)


def tma_enabled():
    """sm_90a: pipelined loads go by TMA unless $KILN_TMA is 0 (read by the
    compiler at each compile; part of every kernel cache key)."""
    return os.environ.get("KILN_TMA", "1") != "0"


def swizzle_enabled():
    """Pipelined wgmma operand tiles of 128-byte rows use the 128B swizzle
    (sm_90a), and mma.sync operand tiles of whole 128-byte rows XOR-swizzled
    rows (else padded ones), unless $KILN_SWIZZLE is 0 (read by the compiler
    at each compile; part of every kernel cache key)."""
    return os.environ.get("KILN_SWIZZLE", "1") != "0"


def debug_env():
    """$KILN_DEBUG: 1 (or true, yes, on) compiles kl.device_assert checks into
    every @kiln.jit kernel that does not say `debug=` itself (part of every
    kernel cache key)."""
    return os.environ.get("KILN_DEBUG", "0").lower() in ("1", "true", "yes", "on")


def overlap_enabled():
    """sm_90a: loops marked for overlap (kl.range(overlap=True), attention's
    full-block loop with overlap=True) compute their scores an iteration ahead unless
    $KILN_OVERLAP is 0 (read by the compiler at each compile; part of every
    kernel cache key)."""
    return os.environ.get("KILN_OVERLAP", "1") != "0"


def host_maps_enabled():
    """sm_90a: tensor maps encoded by the runtime at launch (kernel
    parameters) unless $KILN_TMA_MAPS is "device": every program then builds
    its own (read by the compiler at each compile; part of every kernel
    cache key)."""
    return os.environ.get("KILN_TMA_MAPS", "host") != "device"


def pipeline_gathers_enabled():
    """GPU targets: gathers of rows in loops by loaded or computed indices are
    pipelined unless $KILN_PIPELINE_GATHERS is 0 (kilnc
    --no-pipelined-gathers; read by the compiler at each compile; part of
    every kernel cache key)."""
    return os.environ.get("KILN_PIPELINE_GATHERS", "1") != "0"


def fp8_wgmma_enabled():
    """sm_90a: fp8 dots whose operands are a load and the transpose of a load
    run on wgmma's e4m3 / e5m2 forms unless $KILN_FP8_WGMMA is 0 (kilnc
    --no-fp8-wgmma: decoded to bf16; read by the compiler at each compile;
    part of every kernel cache key)."""
    return os.environ.get("KILN_FP8_WGMMA", "1") != "0"


def pingpong_enabled():
    """sm_90a: in loops with a dot whose A operand is computed in registers
    (attention's key-block loops) the warpgroups take turns issuing their
    wgmma groups unless $KILN_PINGPONG is 0 (kilnc --no-pingpong; read by the
    compiler at each compile; part of every kernel cache key)."""
    return os.environ.get("KILN_PINGPONG", "1") != "0"


def default_num_stages():
    """Software pipelining depth of loads in loops on GPU targets when a
    launch does not say (``num_stages=``): $KILN_NUM_STAGES, else 2."""
    return _env_int("KILN_NUM_STAGES", 2, 1, 8)


def chip_for(major, minor, known):
    """The target for a device of compute capability major.minor: ``sm_90a``
    on Hopper, its own ``sm_XY`` when the compiler knows it, else the newest
    known chip of the same major version below it (code for sm_XY runs on
    every sm_XZ with Z >= Y: sm_103 runs sm_100 code), else ``sm_XY`` (the
    compiler then names the chips it knows)."""
    if (major, minor) == (9, 0):
        return "sm_90a"
    own = f"sm_{major}{minor}"
    if own in known:
        return own
    older = [c for c in known if not c.endswith("a") and c[3:-1] == str(major)
             and int(c[-1]) < minor]
    return max(older, key=lambda c: int(c[-1])) if older else own


def gpu_target():
    """The NVIDIA target of the CUDA device kernels run on (chip_for its
    compute capability), or $KILN_GPU_TARGET."""
    global _gpu_target
    if _gpu_target is None:
        env = os.environ.get("KILN_GPU_TARGET")
        if env:
            _gpu_target = env
        else:
            from ._kiln import cuda_compute_capability
            try:
                from ._kiln import gpu_chips
                known = gpu_chips()
            except ImportError:  # the runtime-only module: bundles name their chip
                known = []
            _gpu_target = chip_for(*cuda_compute_capability(), known)
    return _gpu_target


class DeviceArray:
    """A CUDA device buffer (a PyTorch CUDA tensor, ``__cuda_array_interface__``
    or a CUDA DLPack exporter; see kiln.runtime.cuda_array_view): its
    address, dtype and shape; `torch`: a PyTorch tensor (its launch goes on
    PyTorch's current stream, see JITFunction.run)."""

    torch = False

    def __init__(self, view, name):
        if view.dtype == "bfloat16":
            self.dtype = kl.bfloat16
        else:
            self.dtype = None if isinstance(view.dtype, str) else kl.from_numpy(view.dtype)
            if self.dtype is None:
                raise TypeError(f"argument '{name}' has dtype {view.dtype}, which kernels "
                                "cannot take")
        if not view.contiguous():
            raise ValueError(f"argument '{name}' is a non-contiguous device array; pass "
                             ".contiguous()")
        self.ptr, self.shape = view.ptr, view.shape


class _TorchDTypes(dict):
    """torch.dtype -> kl dtype, filled on first use (a dtype kernels cannot
    take maps to None: the general path reports it)."""

    def __missing__(self, key):
        name = str(key).replace("torch.", "")
        if name == "bfloat16":
            value = kl.bfloat16
        elif name in ("float8_e4m3fn", "float8_e5m2"):
            value = kl.float8e4nv if name == "float8_e4m3fn" else kl.float8e5
        else:
            try:
                value = kl.from_numpy(np.dtype(name))
            except TypeError:
                value = None
        self[key] = value
        return value


_TORCH_DTYPES = _TorchDTypes()


class TensorDescriptor:
    """Triton's host-side tensor descriptor (`triton.tools.tensor_descriptor`):
    an array, its shape and strides (in elements) and the block shape its
    kernel loads; a kernel parameter that receives one is a descriptor in
    the kernel (`desc.load([m, k])`, as `kl.make_tensor_descriptor` makes).
    It is passed as the array's pointer and one int64 per size and stride,
    specialized as int arguments are (equal to 1, divisible by 16, not
    negative), the block shape and padding as constants."""

    def __init__(self, base, shape, strides, block_shape, padding="zero"):
        if padding not in ("zero", "nan"):
            raise ValueError(f"TensorDescriptor: padding must be 'zero' or 'nan', got "
                             f"{padding!r}")
        shape, strides, block_shape = list(shape), list(strides), list(block_shape)
        if not 1 <= len(shape) <= 5 or len(strides) != len(shape) or \
                len(block_shape) != len(shape):
            raise ValueError(f"TensorDescriptor: shape, strides and block_shape need one "
                             f"entry per dimension (1 to 5), got {len(shape)}, "
                             f"{len(strides)} and {len(block_shape)}")
        for what, xs in (("shape", shape), ("strides", strides), ("block_shape", block_shape)):
            if any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) for x in xs):
                raise TypeError(f"TensorDescriptor: {what} must be integers, got {xs}")
        if any(int(b) < 1 for b in block_shape):
            raise ValueError(f"TensorDescriptor: block_shape must be positive, got "
                             f"{block_shape}")
        self.base = base
        self.shape = [int(x) for x in shape]
        self.strides = [int(x) for x in strides]
        self.block_shape = [int(x) for x in block_shape]
        self.padding = padding

    @staticmethod
    def from_tensor(tensor, block_shape, padding="zero"):
        """A descriptor of a whole array (a PyTorch tensor, a numpy array,
        kiln.bf16 of one, or anything with __cuda_array_interface__)."""
        arr = tensor.array if isinstance(tensor, (bf16, fp8)) else tensor
        if hasattr(arr, "stride") and callable(arr.stride):  # PyTorch
            shape, strides = list(arr.shape), list(arr.stride())
        elif isinstance(arr, np.ndarray):
            shape, strides = list(arr.shape), _element_strides(arr.strides, arr.itemsize)
        else:
            cai = getattr(arr, "__cuda_array_interface__", None)
            if cai is None:
                raise TypeError("TensorDescriptor.from_tensor takes a PyTorch tensor, a "
                                "numpy array, kiln.bf16(array) or a CUDA array")
            shape, item = list(cai["shape"]), np.dtype(cai["typestr"]).itemsize
            strides = (_element_strides(cai["strides"], item) if cai.get("strides") else
                       [int(np.prod(shape[i + 1:])) for i in range(len(shape))])
        return TensorDescriptor(tensor, shape, strides, block_shape, padding)


def _layout_error(a, name, kernel):
    """The error for a host array kernels cannot take: not C-contiguous, or
    not aligned to its element size (np.frombuffer at an odd offset: the
    emulator stopped the process on its misaligned copies)."""
    what = "is not contiguous" if not a.flags["C_CONTIGUOUS"] else \
        f"is not aligned to its {a.itemsize}-byte elements"
    return ValueError(f"argument '{name}' of {kernel} {what}; pass np.ascontiguousarray("
                      f"{name}) (a copy: an output must be copied back)")


def _element_strides(byte_strides, itemsize):
    """Byte strides in elements: each must be a multiple of the element
    size (a field of a record array is not; floored, its rows were read
    from the wrong bytes)."""
    if any(s % itemsize for s in byte_strides):
        raise ValueError(f"TensorDescriptor.from_tensor: byte strides {tuple(byte_strides)} "
                         f"are not multiples of the element size {itemsize}; pass a copy "
                         "(np.ascontiguousarray)")
    return [s // itemsize for s in byte_strides]


try:
    from numpy.lib.array_utils import byte_bounds as _byte_bounds
except ImportError:  # numpy < 2
    _byte_bounds = np.byte_bounds


def _check_extent(d, array, name, device):
    """A descriptor must address only its array's memory: every element its
    shape and strides reach (the kernel's accesses stay inside the shape)
    lies inside the array's bytes. (One larger than its array read other
    memory, or crashed the process.) A device array is contiguous
    (DeviceArray refuses others): its elements are those of its shape."""
    if 0 in d.shape:
        return
    first = sum(min(0, (n - 1) * s) for n, s in zip(d.shape, d.strides))
    last = sum(max(0, (n - 1) * s) for n, s in zip(d.shape, d.strides))
    if device:
        size = math.prod(array.shape)
        inside = first >= 0 and last < size
    else:
        size, item = array.size, array.itemsize
        lo, hi = _byte_bounds(array)
        ptr = array.ctypes.data
        inside = ptr + first * item >= lo and ptr + (last + 1) * item <= hi
    if not inside:
        raise ValueError(f"argument '{name}': the TensorDescriptor's shape {tuple(d.shape)} "
                         f"and strides {tuple(d.strides)} reach elements {first}..{last} from "
                         f"its base, outside the array's {size} elements")


class _Same:
    """An object in a specialization key by identity, held: while the key
    is cached, its address cannot be reused by another object."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __hash__(self):
        return id(self.obj)

    def __eq__(self, other):
        return isinstance(other, _Same) and other.obj is self.obj


_VALUE_TYPES = (type(None),) + PLAIN_TYPES + (np.generic, np.dtype, kl.dtype)


def _attributes(v):
    """The attributes a kernel can read from a constexpr object, by name:
    a class's own and inherited class attributes (not methods or
    descriptors), and for an instance those of its class, then its
    __slots__ and __dict__ values. None for what is keyed by identity:
    functions, modules, and objects of types without __dict__ or
    __slots__ (arrays)."""
    cls = v if isinstance(v, type) else type(v)
    # (Enum members and classes are constants: by identity, as functions
    # and modules are.)
    if isinstance(v, (types.ModuleType, enum.Enum)) or issubclass(cls, enum.Enum) or \
            (callable(v) and not isinstance(v, type)):
        return None
    slots = [n for c in cls.__mro__ for n in
             ((c.__dict__.get("__slots__"),) if isinstance(c.__dict__.get("__slots__"), str)
              else c.__dict__.get("__slots__", ()))]
    if not isinstance(v, type) and getattr(v, "__dict__", None) is None and not slots:
        return None
    out = {}
    for c in reversed(cls.__mro__[:-1]):
        if c.__module__ in ("enum", "abc", "typing"):
            continue
        for k, x in vars(c).items():
            # (Data only: not methods, descriptors (properties, slots),
            # nor dunders; `_S`, which a kernel or a property can read, too.)
            if not (k.startswith("__") and k.endswith("__")) and not callable(x) and \
                    not hasattr(type(x), "__get__"):
                out[k] = x
    if not isinstance(v, type):
        for n in slots:
            if n not in ("__dict__", "__weakref__") and hasattr(v, n):
                out[n] = getattr(v, n)
        out.update(getattr(v, "__dict__", None) or {})
    return out


def _const_key(v, depth=0, memo=None):
    """A constexpr value's part of the specialization key. Numbers,
    strings and dtypes by their repr (2 and 2.0 differ: they compile
    differently), tuples and lists by their items; an object (a config,
    or a class passed itself) by its type and the keys of the attributes a
    kernel can read (_attributes: class attributes and __slots__ too), 8
    levels deep, so that one changed since a launch, or another of the
    same type and values, is keyed by what it holds; anything else
    (functions, @kiln.jit functions, arrays) by identity, held by the key. (An object's repr was the key, then its own __dict__ 3 levels
    deep: a slots dataclass, a class, a class attribute or a 4th level
    changed since the last launch reused a kernel compiled for the old
    values.)"""
    if isinstance(v, _VALUE_TYPES):
        return repr(v)
    if memo is None:
        memo = {}
    # An object or container met before (a cycle, or shared: an Enum's
    # members list each other) is keyed by when it was met, so the key stays
    # linear in the objects reached; past 8 levels or 4096 of them, by
    # identity.
    if id(v) in memo:
        return ("seen", memo[id(v)])
    if depth >= 8 or len(memo) >= 4096:
        return _Same(v)
    if type(v) in (tuple, list):
        memo[id(v)] = len(memo)
        return (type(v).__name__,) + tuple(_const_key(x, depth + 1, memo) for x in v)
    if isinstance(v, dict):   # (by its contents: one changed in place recompiles)
        memo[id(v)] = len(memo)
        return (_Same(type(v)),) + tuple(sorted(
            ((repr(k), _const_key(x, depth + 1, memo)) for k, x in v.items()),
            key=lambda kv: kv[0]))
    attrs = _attributes(v)
    if attrs is None:
        return _Same(v)
    memo[id(v)] = len(memo)
    return (_Same(v if isinstance(v, type) else type(v)),) + tuple(sorted(
        (k, _const_key(x, depth + 1, memo)) for k, x in attrs.items()))


class _Arg:
    """How one launch argument is passed and specialized."""

    __slots__ = ("kind", "dtype", "value", "key", "array")

    def __init__(self, kind, dtype, value, key, array=None):
        self.kind = kind      # 'ptr' | 'scalar' | 'const' | 'desc'
        self.dtype = dtype    # kl.dtype
        self.value = value    # address (ptr) or Python number
        self.key = key        # the specialization key part
        self.array = array


def _as_array(obj, name):
    # PyTorch CUDA tensors first, through their C methods (the launch path is
    # hot): as cuda_array_view would see them.
    if type(obj) in runtime_module._TORCH_TENSOR_TYPES and obj.is_cuda:
        dt = _TORCH_DTYPES[obj.dtype]
        if dt is not None:
            d = DeviceArray.__new__(DeviceArray)
            runtime_module._check_device(obj.get_device(), name)
            if not obj.is_contiguous():
                raise ValueError(f"argument '{name}' is a non-contiguous device array; pass "
                                 ".contiguous()")
            d.dtype, d.ptr, d.shape = dt, obj.data_ptr(), tuple(obj.shape)
            d.torch = True
            return d, dt
    if isinstance(obj, bf16):
        return obj.array, kl.bfloat16
    if isinstance(obj, fp8):
        return obj.array, kl.float8e4nv if obj.format == "e4m3" else kl.float8e5
    if isinstance(obj, DeviceArray):
        return obj, obj.dtype
    if not isinstance(obj, np.ndarray):
        view = cuda_array_view(obj, name)
        if view is not None:
            d = DeviceArray(view, name)
            # (A PyTorch tensor subclass: launched as PyTorch tensors are.)
            d.torch = type(obj).__module__.startswith("torch")
            return d, d.dtype
    if not isinstance(obj, np.ndarray) and hasattr(obj, "__dlpack__"):
        obj = runtime_module._from_dlpack(obj, name)
    if not isinstance(obj, np.ndarray):
        return None, None
    d = kl.from_numpy(obj.dtype)
    if d is None:
        raise TypeError(f"argument '{name}' has dtype {obj.dtype}, which kernels cannot take "
                        "(supported: float16/32/64, bool, int8/16/32/64, and kiln.bf16(uint16))")
    return obj, d


_MISSING = object()


# Whether a module global still holds the value a kernel was compiled with.
_same_global = same_value


def _check_globals(name, used):
    """Each value the kernel read by name or attribute (a global, a
    variable of the enclosing function, a config's attribute) and compiled
    in: (key, value, where it is read with .get(key, default), what to call
    it)."""
    for key, value, container, what in used:
        now = container.get(key, _MISSING)
        if not _same_global(value, now):
            now = "deleted" if now is _MISSING else repr(now)
            raise RuntimeError(f"{name}: {what} has changed since the kernel "
                               f"was compiled (from {value!r} to {now}); its value is compiled "
                               "into the kernel: pass it as an argument (a kl.constexpr) instead")


class CompiledKernel:
    """One specialization of a kernel: its IR at every stage and the loaded
    code."""

    written_args = ()  # see JITFunction.compile
    used_globals = ()

    def __init__(self, fn_name, source, filename, kernel, target, num_warps=4,
                 num_stages=2):
        self.name = fn_name
        self.kiln_ir = source
        self.filename = filename
        self.kernel = kernel
        self.target = target
        self.num_warps = num_warps    # GPU targets: as compiled
        self.num_stages = num_stages

    def ir(self, stage="kiln"):
        """The IR at `stage`: kiln (as built from Python), llvm-mlir (after
        kiln-cpu-pipeline), llvm (optimized LLVM IR), asm."""
        if stage == "kiln":
            return self.kiln_ir
        stages = self.__dict__.setdefault("_stages", {})   # each compiled once
        if stage not in stages:
            from ._kiln import compile_stage
            stages[stage] = compile_stage(self.kiln_ir, self.filename, stage, self.target,
                                          self.num_warps, self.num_stages)
        return stages[stage]

    @property
    def asm(self):
        return self.ir("asm")


class JITFunction:
    def __init__(self, fn, do_not_specialize=(), debug=None):
        self.fn = fn
        if debug is not None and not isinstance(debug, bool):
            raise TypeError(f"@kiln.jit kernel '{fn.__name__}': debug must be True, False "
                            "or None (None: $KILN_DEBUG)")
        self.debug = debug
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.signature = inspect.signature(fn)
        self.params = list(self.signature.parameters.values())
        for p in self.params:
            if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY):
                raise TypeError(f"@kiln.jit kernel '{fn.__name__}': *args, **kwargs and "
                                "keyword-only parameters are not supported")
        # (A string annotation naming constexpr, as Triton reads it: under
        # `from __future__ import annotations`, `tl.constexpr` was missed
        # and the value passed as a runtime float32.)
        self.constexprs = {p.name for p in self.params if p.annotation is kl.constexpr
                           or (isinstance(p.annotation, str) and "constexpr" in p.annotation)}
        names = {p.name for p in self.params}
        for n in do_not_specialize:
            if isinstance(n, int):
                if not -len(self.params) <= n < len(self.params):
                    raise TypeError(f"do_not_specialize: index {n} is past the "
                                    f"{len(self.params)} parameters of {fn.__name__}")
                n = self.params[n].name
            if n not in names:
                raise TypeError(f"do_not_specialize: '{n}' is not a parameter of {fn.__name__}")
        self.do_not_specialize = {self.params[n].name if isinstance(n, int) else n
                                  for n in do_not_specialize}
        self.names = [p.name for p in self.params]
        self.name_set = frozenset(self.names)
        # The bind fast path names parameters by keyword: not for
        # positional-only ones (Signature.bind refuses those by name).
        self._fast_bind = all(p.kind == p.POSITIONAL_OR_KEYWORD for p in self.params)
        self.cache = {}
        self._known = {}  # specialize()'s fast path: its key -> the cache's
        self.last = None
        self._parsed = None
        self._lock = threading.Lock()

    def parse(self):
        if self._parsed is None:
            self._parsed = parse_function(self.fn)
        return self._parsed

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"@kiln.jit function '{self.__name__}' must be launched as "
                           f"{self.__name__}[grid](...) (or called from another kernel)")

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    # -- binding and specialization ----------------------------------------------------

    def _arguments(self, args, kwargs):
        """name -> value of a launch's arguments: every parameter given once,
        positionally or by name (the common case, without inspect's bind), else
        through Signature.bind (defaults, and its error messages)."""
        names = self.names
        if self._fast_bind and len(args) + len(kwargs) == len(names) and \
                len(args) <= len(names):
            arguments = dict(zip(names, args))
            for k, v in kwargs.items():
                if k in arguments or k not in self.name_set:
                    break
                arguments[k] = v
            else:
                return arguments
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.__name__}: {e}") from None
        bound.apply_defaults()
        return bound.arguments

    def bind(self, args, kwargs):
        arguments = self._arguments(args, kwargs)
        out = []
        for p in self.params:
            name = p.name
            v = arguments[name]
            if name in self.constexprs:
                if isinstance(v, kl.constexpr):
                    v = v.value
                if isinstance(v, np.generic) and not isinstance(v, np.datetime64):
                    v = v.item()   # (BLOCK=np.int64(64): a Python int, as in the key)
                out.append(_Arg("const", None, v, ("c", _const_key(v))))
                continue
            tv = type(v)
            # (The common kinds first, by exact type: the launch path is hot.)
            if tv is int and name not in self.do_not_specialize:
                if not -(1 << 63) <= v < (1 << 63):
                    raise OverflowError(f"argument '{name}' = {v} does not fit in int64")
                out.append(_Arg("scalar", kl.int64, v,
                                ("s", "int64", v == 1, v % 16 == 0, v >= 0)))
                continue
            if tv is np.ndarray:
                dt = kl.from_numpy(v.dtype)
                if dt is None:
                    _as_array(v, name)  # (raises its error)
                if not v.flags.c_contiguous or not v.flags.aligned:
                    raise _layout_error(v, name, self.__name__)
                out.append(_Arg("ptr", dt, v.ctypes.data, ("p", dt.name), v))
                continue
            if isinstance(v, TensorDescriptor):
                out.append(self._bind_descriptor(v, name))
                continue
            array, dt = _as_array(v, name)
            if isinstance(array, DeviceArray):
                out.append(_Arg("ptr", dt, array.ptr, ("p", dt.name, "cuda"), array))
                continue
            if array is not None:
                if not array.flags["C_CONTIGUOUS"] or not array.flags["ALIGNED"]:
                    raise _layout_error(array, name, self.__name__)
                out.append(_Arg("ptr", dt, array.ctypes.data, ("p", dt.name), array))
                continue
            if isinstance(v, (bool, np.bool_)):
                out.append(_Arg("scalar", kl.int1, int(bool(v)), ("s", "int1")))
            elif isinstance(v, (int, np.integer)):
                iv = int(v)
                if not -(1 << 63) <= iv < (1 << 63):
                    raise OverflowError(f"argument '{name}' = {iv} does not fit in int64")
                if name in self.do_not_specialize:
                    key = ("s", "int64")
                else:
                    key = ("s", "int64", iv == 1, iv % 16 == 0, iv >= 0)
                out.append(_Arg("scalar", kl.int64, iv, key))
            elif isinstance(v, (float, np.floating)):
                # A Python float is a float32, as in Triton, and so is an
                # np.float64 (a subclass of float: `1 / np.sqrt(d)` is one);
                # np.longdouble a float64. One float32 cannot hold is refused
                # (it would arrive as inf), as Bundle launches refuse it.
                wide = isinstance(v, np.longdouble)
                dt = kl.float64 if wide else kl.float32
                if not wide and runtime_module._F32_OVERFLOW <= abs(float(v)) < float("inf"):
                    raise OverflowError(f"argument '{name}' of {self.__name__} = {v!r} "
                                        "overflows float32 (a Python float is passed as "
                                        "one): pass np.longdouble(x) for a float64 "
                                        "parameter")
                out.append(_Arg("scalar", dt, float(v), ("s", dt.name)))
            elif v is None:
                out.append(_Arg("const", None, None, ("c", "None")))
            else:
                raise TypeError(f"argument '{name}' of {self.__name__} has unsupported type "
                                f"{type(v).__name__} (pass numpy arrays, numbers, or "
                                "constexprs)")
        return out

    def _bind_descriptor(self, d, name):
        array, dt = _as_array(d.base, name)
        if array is None:
            raise TypeError(f"argument '{name}' of {self.__name__}: a TensorDescriptor's "
                            "base must be an array (numpy, kiln.bf16, or a CUDA array)")
        device = isinstance(array, DeviceArray)
        ptr = array.ptr if device else array.ctypes.data
        _check_extent(d, array, name, device)
        ints = d.shape + d.strides
        for x in ints:
            if not -(1 << 63) <= x < (1 << 63):
                raise OverflowError(f"argument '{name}': {x} does not fit in int64")
        key = ("d", dt.name, device, tuple(d.block_shape), d.padding) + tuple(
            (x == 1, x % 16 == 0, x >= 0) for x in ints)
        return _Arg("desc", dt, [ptr] + ints, key, array)

    def target_of(self, bound, warmup=False):
        """Where the arguments live picks the target: CUDA device arrays
        select the GPU's (``gpu_target()``), host arrays the JIT's default
        ($KILN_TARGET; a GPU's only for `warmup`, which launches nothing)."""
        on_device = [a.kind in ("ptr", "desc") and isinstance(a.array, DeviceArray)
                     for a in bound]
        ptrs = [d for a, d in zip(bound, on_device) if a.kind in ("ptr", "desc")]
        if any(ptrs) and not all(ptrs):
            raise ValueError(f"{self.__name__}: some array arguments live on a CUDA device "
                             "and some in host memory; pass all of them on one")
        if not any(ptrs):
            env = env_target()
            if ptrs and env.startswith("sm_") and not warmup:
                raise ValueError(f"{self.__name__}: KILN_TARGET={env} compiles for a GPU, but "
                                 "the array arguments are host (numpy) arrays, which its "
                                 "kernels cannot read; pass CUDA arrays (PyTorch CUDA "
                                 "tensors) or unset KILN_TARGET")
            return None
        try:
            return gpu_target()
        except RuntimeError as e:  # no driver, no device
            raise ValueError(f"{self.__name__}: the array arguments live on a CUDA device, "
                             f"but no CUDA device can run kernels here: {e}") from None

    def specialize(self, bound, grid_rank, num_warps=None, num_stages=None, warmup=False):
        # First by the arguments' keys and the raw compile environment (the
        # target and options as given); then by the resolved ones.
        fast = (grid_rank, num_warps, num_stages, runtime_module._compile_environment()) + \
            tuple(a.key for a in bound)
        key = self._known.get(fast)
        if key is not None:
            ck = self.cache.get(key)  # (clearing the cache forgets it)
            if ck is not None:
                return ck
        # The key names the target actually compiled for: host arrays take
        # $KILN_TARGET as it is now (a kernel specialized for one target is
        # not reused after it changes).
        target = self.target_of(bound, warmup) or env_target()
        num_warps = num_warps or default_num_warps()
        num_stages = num_stages or default_num_stages()
        key = (grid_rank, target, num_warps, num_stages, tma_enabled(),
               swizzle_enabled(), overlap_enabled(), host_maps_enabled(),
               pipeline_gathers_enabled(), fp8_wgmma_enabled(), pingpong_enabled(),
               self.debug_on()) + \
            tuple(a.key for a in bound)
        with self._lock:
            ck = self.cache.get(key)
        if ck is None and warmup and target.startswith("sm_"):
            # Compiled, not loaded (no driver or device needed), and not
            # cached: a launch would need the loaded kernel.
            return self.compile(bound, grid_rank, target, num_warps, num_stages, load=False)
        if ck is None:
            try:
                ck = self.compile(bound, grid_rank, target, num_warps, num_stages)
            except BundleError:
                if not warmup:
                    raise
                # A CPU target this machine cannot run (a feature it lacks):
                # the warmup still compiles it, unloaded and not cached.
                return self.compile(bound, grid_rank, target, num_warps, num_stages,
                                    load=False)
            with self._lock:
                self.cache[key] = ck
        if not warmup:  # (a warmup's GPU target for host arrays is no launch's)
            with self._lock:
                self._known[fast] = key
        return ck

    def debug_on(self):
        """Whether kl.device_assert is checked: `debug=` of @kiln.jit, else
        $KILN_DEBUG."""
        return self.debug if self.debug is not None else debug_env()

    def compile(self, bound, grid_rank, target=None, num_warps=4, num_stages=2, load=True):
        # An integer a loop or branch carries that is assigned a wider one:
        # translated again with it wide from the start (WidenCarried).
        widen = {}
        while True:
            try:
                return self._compile(bound, grid_rank, target, num_warps, num_stages, load,
                                     widen)
            except WidenCarried as w:
                if len(widen) >= 64:
                    raise w.error from None
                widen[w.key] = w.dtype

    def _compile(self, bound, grid_rank, target, num_warps, num_stages, load, widen):
        from ._kiln import Builder, IRError
        tree, first_line, source, filename = self.parse()
        b = Builder()
        cg = CodeGen(self.fn, b, filename, first_line, source, grid_rank)
        cg.debug = self.debug_on()
        cg.widen = widen
        cg.static_prints = prints = []

        def flush_prints():
            for args, kwargs in prints:
                print(*args, **kwargs)
        fdef = tree.body[0]
        arg_types, arg_names, runtime_params = [], [], []
        for p, a in zip(self.params, bound):
            if a.kind == "desc":
                # The array's pointer, then its sizes and strides.
                rank = (len(a.value) - 1) // 2
                arg_types.append(b.ptr_type(b.scalar_type(a.dtype.ir)))
                arg_types += [b.scalar_type("i64")] * (2 * rank)
                arg_names += [p.name] + [f"{p.name}_shape{i}" for i in range(rank)] + \
                    [f"{p.name}_stride{i}" for i in range(rank)]
                runtime_params.append((p, a))
                continue
            if a.kind == "ptr":
                arg_types.append(b.ptr_type(b.scalar_type(a.dtype.ir)))
            elif a.kind == "scalar":
                arg_types.append(b.scalar_type(a.dtype.ir))
            else:
                continue
            arg_names.append(p.name)
            runtime_params.append((p, a))
        b.set_loc(filename, first_line + fdef.lineno - 1, fdef.col_offset + 1)
        values = b.begin_kernel(self.fn.__name__, arg_types, arg_names, grid_rank)
        it = iter(values)
        for p, a in zip(self.params, bound):
            if a.kind == "const":
                cg.assign(p.name, kl.constexpr(a.value) if a.value is not None else None)
                continue
            v = next(it)
            if a.kind == "desc":
                rank = (len(a.value) - 1) // 2
                ints = []
                for spec in a.key[5:]:
                    w = next(it)
                    if spec[0]:
                        ints.append(cg.const(1, kl.int64))
                        continue
                    t = Tile(w, kl.int64, ())
                    t.uniform, t.nonneg = True, spec[2]
                    ints.append(t)
                try:
                    desc = cg.builtin_make_tensor_descriptor(
                        Pointer(v, a.dtype, param=p.name), tuple(ints[:rank]),
                        tuple(ints[rank:]), tuple(a.key[3]), a.key[4])
                except KilnError as e:
                    raise CompilationError(f"argument '{p.name}' (a TensorDescriptor): {e}",
                                           filename, first_line + fdef.lineno - 1, 0) from None
                cg.assign(p.name, desc)
                continue
            if a.kind == "ptr":
                cg.assign(p.name, Pointer(v, a.dtype, param=p.name))
            elif len(a.key) > 2 and a.key[2]:
                # Specialized on being 1: the constant 1, of the argument's
                # dtype (not a Python int, which would take other operands'
                # dtypes or be carried through loops as int32, so that the
                # specialized kernel computed in other types than the
                # general one).
                cg.assign(p.name, cg.const(1, a.dtype))
            else:
                t = Tile(v, a.dtype, ())
                # The same in every program; specialized on its sign, an int
                # known not to be negative (sizes, strides, head counts:
                # `pid // H`, `pid % H` are then too).
                t.uniform = True
                t.nonneg = len(a.key) > 4 and a.key[4]
                cg.assign(p.name, t)
        retry = False
        try:
            cg.visit_body(fdef.body)
            b.end_kernel()
        except WidenCarried:
            retry = True   # (translated again: its prints are the next translation's)
            raise
        except CompilationError:
            raise
        except IRError as e:
            msg = str(e)
            if "grid axis" in msg:
                raise ValueError(f"{self.__name__}: the launch grid has {grid_rank} "
                                 f"dimension(s), but the kernel uses a program id axis "
                                 f"beyond it ({msg})") from None
            raise CompilationError(msg, filename, first_line + fdef.lineno - 1, 0,
                                   source.splitlines()[fdef.lineno - 1]) from None
        finally:
            if not retry:
                flush_prints()
        text = b.text(True)
        try:
            if load:
                kernel = _get_jit(target).compile(text, filename, num_warps, num_stages)
                resolved = _get_jit(target).target
            else:  # (a warmup for a GPU, or a CPU this host cannot run: nothing loaded)
                from ._kiln import compile_stage
                compile_stage(text, filename, "asm", target, num_warps, num_stages)
                kernel, resolved = None, target
        except IRError as e:
            refused_at_load(e, f"kernel '{self.__name__}'")
            raise CompilationError(f"kernel '{self.__name__}' failed to compile:\n{e}",
                                   filename, first_line + fdef.lineno - 1, 0) from None
        ck = CompiledKernel(self.__name__, text, filename, kernel, resolved,
                            num_warps, num_stages)
        ck.runtime_params = runtime_params
        # Checked at each launch of this specialization (run): the array
        # arguments it stores to (by position in bind's list) refuse
        # read-only arrays, and the module globals it read must not have
        # changed since (their values are compiled in).
        ck.written_args = tuple(i for i, (p, a) in enumerate(zip(self.params, bound))
                                if a.kind in ("ptr", "desc") and p.name in cg.written)
        ck.used_globals = tuple(cg.used_globals.values())
        self.last = ck
        return ck

    def run(self, *args, grid, **kwargs):
        return self._run(args, kwargs, grid, True)

    def warmup(self, *args, grid, **kwargs):
        """Compiles the specialization a launch with these arguments would
        use, without launching (Triton's `kernel.warmup`); returns its
        CompiledKernel. With KILN_TARGET naming a GPU, host arrays stand for
        device ones of the same dtype (nothing runs), so a machine without a
        GPU can compile, inspect (`.ir("kiln")`, `.asm`) and record GPU
        kernels."""
        return self._run(args, kwargs, grid, False)

    def _run(self, args, kwargs, grid, launch):
        kwargs = dict(kwargs)
        # Triton's launch options: warps per thread block and pipelining depth
        # on GPU targets (ignored on CPUs), unless the kernel has parameters
        # of those names.
        options = {}
        names = self.name_set
        for opt, hi in (("num_warps", 32), ("num_stages", 8)):
            if opt in kwargs and opt not in names:
                v = kwargs.pop(opt)
                if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= hi:
                    raise ValueError(f"{self.__name__}: {opt} must be an integer in "
                                     f"[1, {hi}], got {v!r}")
                options[opt] = int(v)
        # wait=False (GPU targets): queue the kernel on the runtime's stream and
        # return, as bundle launches can (kernel.synchronize() waits).
        # stream= (GPU targets): queue on the caller's CUDA stream instead
        # (a torch.cuda.Stream, anything with __cuda_stream__, or a handle),
        # without waiting unless wait=True.
        stream = None
        if "stream" in kwargs and "stream" not in names:
            stream = kwargs.pop("stream")
            if stream is not None:
                stream = _stream_handle(stream)
        wait = None
        if "wait" in kwargs and "wait" not in names:
            wait = kwargs.pop("wait")
            if not isinstance(wait, bool):
                raise ValueError(f"{self.__name__}: wait must be True or False, got {wait!r}")
        bound = self.bind(args, kwargs)
        # PyTorch tensors and no stream: Triton's way, on PyTorch's current
        # stream of the device (_launch_on_torch), waited for only if wait.
        on_torch = stream is None and any(
            a.kind in ("ptr", "desc") and isinstance(a.array, DeviceArray) and
            getattr(a.array, "torch", False)
            for a in bound)
        if callable(grid):
            # Triton's meta: every argument by name (not only the
            # constexprs: meta["n"] was a KeyError) and the launch options.
            meta = self.signature.bind(*args, **kwargs)
            meta.apply_defaults()
            grid = grid(dict(meta.arguments, **options))
        if isinstance(grid, (int, np.integer)) and not isinstance(grid, (bool, np.bool_)):
            grid = (grid,)
        # Ints only: a float (n / BLOCK instead of kiln.cdiv) or a bool is
        # refused rather than truncated by int().
        if not isinstance(grid, (tuple, list)) or not 1 <= len(grid) <= 3 or any(
                isinstance(g, (bool, np.bool_)) or not isinstance(g, (int, np.integer))
                for g in grid):
            raise ValueError(f"{self.__name__}: the grid must be an int or a tuple of 1 to 3 "
                             f"ints, got {grid!r}")
        grid = tuple(int(g) for g in grid)
        if any(not 0 <= g < 2**63 for g in grid):
            raise ValueError(f"{self.__name__}: every grid dimension must be in [0, 2^63), "
                             f"got {grid}")
        ck = self.specialize(bound, len(grid), options.get("num_warps"),
                             options.get("num_stages"), warmup=not launch)
        # ir() and asm describe the specialization just launched, also when
        # it came from the cache (they showed the last one compiled).
        self.last = ck
        if not launch:
            return ck
        if ck.used_globals:
            _check_globals(self.__name__, ck.used_globals)
        for i in ck.written_args:
            array = bound[i].array
            if isinstance(array, np.ndarray) and not array.flags.writeable:
                raise ValueError(f"argument '{self.params[i].name}' of {self.__name__} is a "
                                 "read-only array, but the kernel stores to it; pass a "
                                 "writeable array")
        if 0 in grid:
            # No programs (an empty batch, an expert without tokens): as
            # Triton, nothing is launched once the arguments are checked and
            # the kernel compiled.
            return ck
        values = []
        for a in bound:
            if a.kind == "desc":
                values += a.value
            elif a.kind != "const":
                values.append(a.value)
        if not ck.kernel.is_gpu:
            ck.kernel.launch(values, list(grid), True)
        elif on_torch:
            runtime_module._launch_on_torch(ck.kernel, values, list(grid), bool(wait),
                                            self.__name__)
        elif stream is not None:
            ck.kernel.launch(values, list(grid), bool(wait), stream)
        else:
            ck.kernel.launch(values, list(grid), wait is None or wait)
        return ck

    def synchronize(self):
        """Waits for this kernel's GPU launches made with wait=False on the
        runtime's stream of each GPU target it was compiled for (not those
        on a caller's or PyTorch's stream: synchronize that stream); raises
        LaunchError if one failed."""
        with self._lock:
            kernels = list(self.cache.values())
        seen = set()
        for ck in kernels:
            if ck.kernel.is_gpu and ck.target not in seen:
                seen.add(ck.target)
                ck.kernel.synchronize()

    # -- inspection -------------------------------------------------------------------

    def ir(self, stage="kiln"):
        """The IR at `stage` of the specialization the latest launch (or
        warmup) ran."""
        if self.last is None:
            raise RuntimeError(f"{self.__name__} has not been compiled yet; launch it first")
        return self.last.ir(stage)

    @property
    def asm(self):
        return self.ir("asm")


def jit(fn=None, *, do_not_specialize=(), debug=None, noinline=False):
    """Turns a Python function into a Kiln kernel (launch with ``k[grid](...)``)
    or a helper that kernels call (inlined). `debug=True` checks the kernel's
    kl.device_assert (and `assert`) at run time; None leaves it to
    $KILN_DEBUG. `noinline=` (Triton's) is accepted: Kiln inlines every
    helper call."""
    if not isinstance(noinline, bool):
        raise TypeError(f"jit: noinline must be a bool, got {noinline!r}")
    if fn is None:
        return lambda f: JITFunction(f, do_not_specialize=do_not_specialize, debug=debug)
    return JITFunction(fn, do_not_specialize=do_not_specialize, debug=debug)


# --------------------------------------------------------------------------
# Autotuning
# --------------------------------------------------------------------------


class Config:
    """One autotuning candidate: constexpr values for the kernel, and as in
    Triton's `triton.Config`, the launch's `num_warps` and `num_stages` (GPU
    targets; None: the defaults) and a `pre_hook(args)` called before each
    launch with this config. `maxnreg` (a register cap) is accepted and
    unused; `num_ctas` must be 1 (no thread-block clusters)."""

    def __init__(self, kwargs, num_warps=None, num_stages=None, num_ctas=1, maxnreg=None,
                 pre_hook=None):
        self.kwargs = dict(kwargs)
        for name, v, hi in (("num_warps", num_warps, 32), ("num_stages", num_stages, 8)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))
                                  or not 1 <= v <= hi):
                raise ValueError(f"Config: {name} must be None or an integer in [1, {hi}], "
                                 f"got {v!r}")
        if num_ctas not in (None, 1):
            raise ValueError(f"Config: num_ctas={num_ctas!r}: thread-block clusters are not "
                             "supported (num_ctas must be 1)")
        if pre_hook is not None and not callable(pre_hook):
            raise TypeError("Config: pre_hook must be callable")
        self.num_warps = None if num_warps is None else int(num_warps)
        self.num_stages = None if num_stages is None else int(num_stages)
        self.num_ctas = 1
        self.maxnreg = maxnreg
        self.pre_hook = pre_hook

    def all_kwargs(self):
        """The constexprs and the launch options a launch with it passes."""
        out = dict(self.kwargs)
        for name in ("num_warps", "num_stages"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    def __repr__(self):
        extra = "".join(f", {n}={getattr(self, n)}" for n in ("num_warps", "num_stages")
                        if getattr(self, n) is not None)
        return f"Config({self.kwargs}{extra})"


def _zero_array(v):
    """Zeroes an array argument in place (numpy, kiln.bf16, PyTorch)."""
    if hasattr(v, "zero_"):
        v.zero_()
    elif hasattr(v, "array"):
        v.array[...] = 0
    else:
        v[...] = 0


def _copy_array(v):
    return v.clone() if hasattr(v, "clone") else (
        v.array.copy() if hasattr(v, "array") else np.array(v, copy=True))


def _restore_array(v, saved):
    if hasattr(v, "copy_"):
        v.copy_(saved)
    elif hasattr(v, "array"):
        v.array[...] = saved
    else:
        v[...] = saved


# Keyword arguments a launch takes that are not the kernel's (JITFunction._run).
_LAUNCH_OPTIONS = ("num_warps", "num_stages", "stream", "wait")


def _tune_key(v):
    """An autotuning key's value: arrays and tensors (kiln.bf16 / kiln.fp8
    wrappers and tensor descriptors included) by shape and type: a
    tensor's repr reads its values back from the device, and a wrapper's
    default repr is its address (every call re-tuned, and an address reused
    by another shape took its config). Others by value."""
    if isinstance(v, (bf16, fp8)):
        return ("array", (tuple(v.array.shape), type(v).__name__ + getattr(v, "format", ""),
                          _on_device(v.array)))
    if isinstance(v, np.generic):   # (a NumPy scalar has a shape and a dtype too)
        return v.item()
    if isinstance(v, TensorDescriptor):
        return ("descriptor", tuple(v.shape), tuple(v.strides), tuple(v.block_shape),
                _tune_key(v.base))
    if isinstance(v, np.ndarray) or (hasattr(v, "shape") and hasattr(v, "dtype")):
        return ("array", (tuple(v.shape), str(v.dtype), _on_device(v)))
    return v


def _on_device(a):
    """Whether an array lives on a CUDA device (its kernels compile for the
    GPU, not for $KILN_TARGET)."""
    if isinstance(a, np.ndarray):
        return False
    if isinstance(a, DeviceArray):
        return True
    is_cuda = getattr(a, "is_cuda", None)   # (PyTorch: no view built per call)
    if isinstance(is_cuda, bool):
        return is_cuda
    return cuda_array_view(a) is not None


class Autotuner:
    def __init__(self, fn, configs, key, warmup=1, rep=3, reset_to_zero=None,
                 restore_value=None, prune_configs_by=None, pre_hook=None, post_hook=None,
                 do_bench=None):
        if not configs:
            raise ValueError("autotune needs at least one Config")
        for what, v, lo in (("warmup", warmup, 0), ("rep", rep, 1)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
                raise ValueError(f"autotune: {what} must be an integer >= {lo}, got {v!r}")
        self.fn = fn
        self.configs = list(configs)
        # The names the configs set (a call passing one is refused).
        self._tuned = set().union(*(c.kwargs for c in self.configs))
        self.key = list(key)
        self.warmup_launches = warmup
        self.rep = rep
        self.best = {}
        self.__name__ = fn.__name__
        names = {p.name for p in fn.params}
        for k in self.key:
            if k not in names:
                raise ValueError(f"autotune key '{k}' is not a parameter of {fn.__name__}")
        self.reset_to_zero = list(reset_to_zero or ())
        self.restore_value = list(restore_value or ())
        for what, ns in (("reset_to_zero", self.reset_to_zero),
                         ("restore_value", self.restore_value)):
            for n in ns:
                if n not in names:
                    raise ValueError(f"autotune {what}: '{n}' is not a parameter of "
                                     f"{fn.__name__}")
        prune = dict(prune_configs_by or {})
        unknown = set(prune) - {"early_config_prune", "perf_model", "top_k"}
        if unknown:
            raise ValueError(f"autotune prune_configs_by: unknown keys {sorted(unknown)}")
        self.early_config_prune = prune.get("early_config_prune")
        self.perf_model = prune.get("perf_model")
        self.top_k = prune.get("top_k")
        self.pre_hook, self.post_hook, self.do_bench = pre_hook, post_hook, do_bench

    def _named(self, args, kwargs):
        """name -> value of a call's arguments (defaults filled in); the
        launch options a kernel takes (num_warps, stream, wait, ...) are not
        arguments, unless the kernel has parameters of those names."""
        kwargs = {k: v for k, v in kwargs.items()
                  if k in self.fn.name_set or k not in _LAUNCH_OPTIONS}
        bound = self.fn.signature.bind_partial(*args, **kwargs)
        named = dict(bound.arguments)
        for p in self.fn.params:
            if p.name not in named and p.default is not p.empty:
                named[p.name] = p.default
        return named

    def _candidates(self, named, kwargs):
        """The configs to time: Triton's prune_configs_by."""
        configs = self.configs
        if self.early_config_prune:
            configs = list(self.early_config_prune(configs, named, **kwargs))
            if not configs:
                raise ValueError(f"{self.__name__}: early_config_prune left no config")
        if self.perf_model and self.top_k:
            k = self.top_k if isinstance(self.top_k, int) else int(len(configs) * self.top_k)
            est = [(self.perf_model(**dict(named, **c.all_kwargs())), i)
                   for i, c in enumerate(configs)]
            configs = [configs[i] for _, i in sorted(est)[:max(1, k)]]
        return configs

    def _launch(self, c, args, grid, call, named):
        if c.pre_hook is not None:
            c.pre_hook(dict(named, **c.all_kwargs()))
        return self.fn.run(*args, grid=grid, **call)

    def _disk_path(self):
        cache = _get_jit().cache_dir
        if not cache:
            return None
        tree, _, source, _ = self.fn.parse()
        h = hashlib.sha256((source + repr([c.all_kwargs() for c in self.configs]) +
                            _get_jit().target).encode()).hexdigest()[:32]
        return os.path.join(cache, "autotune", f"{self.fn.__name__}-{h}.json")

    def _load_disk(self):
        path = self._disk_path()
        if not path or not os.path.exists(path):
            return {}
        try:
            with open(path) as f:
                table = json.load(f)
        except (OSError, ValueError):
            return {}  # a corrupt record is only a lost tuning result
        # (Valid JSON of another shape, `[1, 2]` or {key: "1"}, raised a
        # TypeError at every launch, in every later process.)
        if not isinstance(table, dict):
            return {}
        return {k: v for k, v in table.items()
                if type(v) is int and 0 <= v < len(self.configs)}

    def _save_disk(self, table):
        path = self._disk_path()
        if not path:
            return
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.tmp.{os.getpid()}.{threading.get_ident()}"
            with open(tmp, "w") as f:
                json.dump(table, f)
            os.replace(tmp, path)
        except OSError:
            pass  # an unwritable cache keeps the result in memory only

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    def warmup(self, *args, grid, **kwargs):
        """Triton's `Autotuner.warmup`: compiles every (pruned) config for
        these arguments, launching nothing; returns their CompiledKernels.
        (The warmup launch count, once this attribute's name, hid it.)"""
        named = self._named(args, kwargs)
        return [self.fn.warmup(*args, grid=grid, **dict(kwargs, **c.all_kwargs()))
                for c in self._candidates(named, kwargs)]

    @property
    def last(self):
        """The specialization the last launch or warmup used."""
        return self.fn.last

    def run(self, *args, grid, **kwargs):
        bound = self._named(args, kwargs)
        clash = sorted(self._tuned.intersection(kwargs))
        if clash:
            raise ValueError(f"{self.__name__}: conflicting meta-parameters: "
                                 f"{', '.join(clash)} are given and tuned; make sure that "
                                 "you don't re-define auto-tuned symbols (as Triton)")
        # The key's values, then (as Triton's) every array argument's dtype:
        # a config tuned for float32 was reused for float16.
        # And the target the kernel compiles for: a config tuned on the host
        # was reused for an emulated or CUDA launch (the disk record is per
        # $KILN_TARGET; CUDA arrays compile for the GPU's).
        keys = [_tune_key(bound.get(k)) for k in self.key]
        keyvals = [repr(t) for t in keys]
        device = False
        for n, v in bound.items():
            t = _tune_key(v) if n not in self.key else keys[self.key.index(n)]
            if type(t) is tuple and t[0] == "descriptor":
                t = t[4]
            if type(t) is tuple and t[0] == "array":
                device = device or t[1][2]
                if n not in self.key:
                    keyvals.append(repr(t[1][1]))
        keyvals.append(gpu_target() if device else env_target())
        key = "|".join(keyvals)
        cfg = self.best.get(key)
        if cfg is None and self._empty_grid(grid, bound):
            # Nothing would run (a zero grid dimension): nothing to time, and
            # a choice made on it would stand for every later call of this
            # key. The first config checks the arguments and launches nothing.
            self.last_config = self.configs[0]
            return self._launch(self.configs[0], args, grid,
                                dict(kwargs, **self.configs[0].all_kwargs()), bound)
        if cfg is None:
            table = self._load_disk()
            if key in table:
                cfg = self.configs[table[key]]
            else:
                cfg = self._tune(args, kwargs, grid, bound)
                # (A config early_config_prune made itself is not recorded:
                # the table names configs by their index.)
                index = next((i for i, c in enumerate(self.configs) if c is cfg), None)
                if index is not None:
                    table = self._load_disk()
                    table[key] = index
                    self._save_disk(table)
            self.best[key] = cfg
        self.last_config = cfg
        return self._launch(cfg, args, grid, dict(kwargs, **cfg.all_kwargs()), bound)

    def _tune(self, args, kwargs, grid, named):
        """Times the candidate configs; returns the fastest. reset_to_zero
        arrays are zeroed before each timed launch, restore_value arrays put
        back after each config and at the end. Hooks see the call's
        arguments with the config's values; a config's pre_hook runs before
        the autotuner's, post_hook after each launch (with the exception of
        one that failed to compile)."""
        for n in tuple(self.restore_value) + tuple(self.reset_to_zero):
            if n not in named:
                raise TypeError(f"{self.fn.__name__}: missing a required argument: '{n}'")
        saved = {n: _copy_array(named[n]) for n in self.restore_value}
        timings, failures = [], []
        try:
            for order, c in enumerate(self._candidates(named, kwargs)):
                call = dict(kwargs, **c.all_kwargs())
                full = dict(named, **c.all_kwargs())
                # Timed to the kernel's end (launches on PyTorch tensors
                # are otherwise only queued).
                if "wait" not in self.fn.name_set:
                    call["wait"] = True

                def once():
                    for n in self.reset_to_zero:
                        _zero_array(named[n])
                    if c.pre_hook is not None:
                        c.pre_hook(full)
                    if self.pre_hook is not None:
                        self.pre_hook(full)
                    self.fn.run(*args, grid=grid, **call)
                    if self.post_hook is not None:
                        self.post_hook(full, exception=None)
                try:
                    if self.do_bench is not None:
                        timings.append((float(self.do_bench(once)), order, c))
                    else:
                        for _ in range(self.warmup_launches):
                            once()
                        samples = []
                        for _ in range(self.rep):
                            t0 = time.perf_counter()
                            once()
                            samples.append(time.perf_counter() - t0)
                        timings.append((sorted(samples)[len(samples) // 2], order, c))
                except CompilationError as e:
                    # a config that does not compile is skipped
                    failures.append((c, e))
                    if self.post_hook is not None:
                        self.post_hook(full, exception=e)
                finally:
                    for n, v in saved.items():
                        _restore_array(named[n], v)
        finally:
            for n, v in saved.items():
                _restore_array(named[n], v)
        if not timings:
            # (The first config's error: every config failing usually has
            # one cause, the arguments'.)
            first = f"; the first, {failures[0][0]}, failed with:\n{failures[0][1]}" \
                if failures else ""
            raise CompilationError(f"no autotuning config of {self.fn.__name__} compiled"
                                   + first)
        # The launch that follows starts from zero too (as Triton's).
        for n in self.reset_to_zero:
            _zero_array(named[n])
        return min(timings, key=lambda t: t[:2])[2]

    def _empty_grid(self, grid, bound):
        """Whether `grid` has a zero dimension under any config (a callable
        grid sees the call's arguments and the config's values). Malformed
        grids are left to JITFunction.run's errors."""
        for c in self.configs:
            g = grid
            try:
                if callable(g):
                    g = g(dict(bound, **c.all_kwargs()))
                g = (g,) if isinstance(g, (int, np.integer)) else tuple(g)
                if any(int(x) == 0 for x in g):
                    return True
            except Exception:  # noqa: BLE001 - reported by the launch itself
                return False
        return False

    def ir(self, stage="kiln"):
        return self.fn.ir(stage)

    @property
    def asm(self):
        return self.fn.ir("asm")


def autotune(configs, key, prune_configs_by=None, reset_to_zero=None, restore_value=None,
             pre_hook=None, post_hook=None, warmup=1, rep=3, do_bench=None):
    """Benchmarks ``configs`` the first time a value of ``key`` is seen, keeps
    the fastest in memory and on disk (reused across processes). As Triton's
    `triton.autotune`: `reset_to_zero` names array arguments zeroed before
    each timed launch (kernels that accumulate with atomics), `restore_value`
    ones put back after tuning, `prune_configs_by` takes
    `early_config_prune(configs, named_args, **kwargs)` and `perf_model` /
    `top_k`, `pre_hook(args)` / `post_hook(args, exception)` run around each
    timed launch, `do_bench(fn)` replaces the timing. `warmup` and `rep` are
    launch counts (Triton's are milliseconds)."""

    def wrap(fn):
        if not isinstance(fn, (JITFunction, Heuristics)):
            raise TypeError("@kiln.autotune goes above @kiln.jit (or @kiln.heuristics)")
        return Autotuner(fn, configs, key, warmup=warmup, rep=rep, reset_to_zero=reset_to_zero,
                         restore_value=restore_value, prune_configs_by=prune_configs_by,
                         pre_hook=pre_hook, post_hook=post_hook, do_bench=do_bench)

    return wrap


class Heuristics:
    """A kernel whose listed constexprs are computed from the other
    arguments at each launch (Triton's `triton.heuristics`): `values` maps a
    parameter name to a function of the dict of the call's arguments."""

    def __init__(self, fn, values):
        if not isinstance(fn, (JITFunction, Heuristics)):
            raise TypeError("@kiln.heuristics goes above @kiln.jit")
        for name, f in values.items():
            if name not in fn.name_set:
                raise ValueError(f"heuristics: '{name}' is not a parameter of {fn.__name__}")
            if not callable(f):
                raise TypeError(f"heuristics: the value of '{name}' must be a function of the "
                                "arguments")
        self.fn = fn
        self.values = dict(values)
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__

    def __getattr__(self, name):   # params, signature, name_set, parse, ir, cache, ...
        return getattr(self.fn, name)

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    def _kwargs(self, args, kwargs):
        named = dict(zip(self.fn.names, args))
        named.update(kwargs)
        for p in self.fn.params:
            if p.name not in named and p.default is not p.empty:
                named[p.name] = p.default
        kwargs = dict(kwargs)
        for name, f in self.values.items():
            v = f(named)
            kwargs[name] = v
            named[name] = v
        return kwargs

    def run(self, *args, grid, **kwargs):
        return self.fn.run(*args, grid=grid, **self._kwargs(args, kwargs))

    def warmup(self, *args, grid, **kwargs):
        return self.fn.warmup(*args, grid=grid, **self._kwargs(args, kwargs))


def heuristics(values):
    """Decorator (Triton's `triton.heuristics`): above @kiln.jit, below
    @kiln.autotune."""
    return lambda fn: Heuristics(fn, values)
