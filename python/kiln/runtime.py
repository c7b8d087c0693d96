"""Loading and launching precompiled bundles, with or without the compiler.

On a machine that only runs kernels, the runtime-only extension
(``kiln._kiln_runtime``, no LLVM inside) is enough; with the full extension
the same calls go through ``kiln._kiln``.
"""

from __future__ import annotations

import os

import numpy as np

try:
    from . import _kiln as _ext
except ImportError:  # a runtime-only installation
    from . import _kiln_runtime as _ext

# A launch the runtime refused or that failed (a RuntimeError), and its
# subclass for bundles it refuses to load (corrupt, another target).
LaunchError = _ext.LaunchError
BundleError = _ext.BundleError
DeviceAssertError = _ext.DeviceAssertError


class bf16:
    """Marks a uint16 numpy array as holding bfloat16 values (numpy has no
    bfloat16): ``kernel[grid](kiln.bf16(a), ...)``."""

    def __init__(self, array):
        array = np.asarray(array)
        if array.dtype != np.uint16:
            raise TypeError("kiln.bf16 wraps a uint16 array holding bfloat16 bits")
        self.array = array


class fp8:
    """Marks a uint8 (or int8) numpy array as holding 8-bit floats:
    ``kiln.fp8(bits, "e4m3")`` (kl.float8e4nv, OCP E4M3FN) or
    ``kiln.fp8(bits, "e5m2")`` (kl.float8e5). The kernel's parameter gets
    that dtype; the launch passes the bytes."""

    def __init__(self, array, format="e4m3"):
        array = np.asarray(array)
        if array.dtype not in (np.uint8, np.int8):
            raise TypeError("kiln.fp8 wraps a uint8 or int8 array holding 8-bit float bits")
        if format not in ("e4m3", "e5m2"):
            raise ValueError(f"kiln.fp8: format must be 'e4m3' or 'e5m2', got {format!r}")
        self.array = array.view(np.int8)
        self.format = format


_PLAIN_INT = frozenset(("i8", "i16", "i32", "i64", "u8"))
# The smallest magnitude float32 rounds to infinity: halfway between its
# largest finite value and 2^128 (a tie, rounded to the even 2^128).
_F32_OVERFLOW = 2.0**128 - 2.0**103


def _from_dlpack(obj, name):
    """A CPU array known by DLPack (a PyTorch CPU tensor) as a numpy view."""
    try:
        return np.from_dlpack(obj)
    except (RuntimeError, BufferError, TypeError) as e:
        raise ValueError(f"argument '{name}': cannot view it as a CPU array through "
                         f"DLPack ({e})") from None


def _scalar(a, dtype, name, kernel):
    """A bundle's scalar argument as the runtime takes it: integers for
    integer types (a float is refused, not truncated), floats for f32/f64
    (refused where float32 would overflow), and for f16/bf16 the value's
    bits, rounded to nearest (a np.uint16 is taken as bits already)."""
    def refuse(why):
        return TypeError(f"argument '{name}' of kernel '{kernel}' is a scalar {dtype}; {why}")
    if isinstance(a, (bool, np.bool_)) and dtype != "i1":
        raise refuse(f"got a bool ({a!r})")
    if dtype in _PLAIN_INT or dtype == "i1":
        if not isinstance(a, (int, np.integer, np.bool_)):
            raise refuse(f"got {a!r}, not an integer")
        v = int(a)
        bits = int(dtype[1:])
        lo, hi = (0, (1 << bits) - 1) if dtype in ("i1", "u8") else \
            (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
        if not lo <= v <= hi:
            raise refuse(f"{v} is outside [{lo}, {hi}]")
        return v
    if not isinstance(a, (int, float, np.integer, np.floating)):
        raise refuse(f"got {type(a).__name__}")
    if dtype in ("f16", "bf16") and isinstance(a, np.uint16):
        return int(a)  # the bits themselves
    try:
        x = float(a)
    except OverflowError:   # (an int past any float: 10**400)
        raise refuse(f"an int of {len(str(abs(a)))} digits overflows it") from None
    if dtype == "f64":
        return x
    if dtype == "f32":  # (no numpy here: bundle launches are a hot path)
        if _F32_OVERFLOW <= abs(x) < float("inf"):
            raise refuse(f"{a!r} overflows it")
        return x
    with np.errstate(over="ignore"):
        v = np.float16(x) if dtype == "f16" else np.float32(x)
    if np.isinf(v) and np.isfinite(x):
        raise refuse(f"{a!r} overflows it")
    if dtype == "f16":
        return int(v.view(np.uint16))  # (numpy rounds f64 to f16 once)
    # bf16: to f32 rounded to odd, then to nearest-even 16 bits (one rounding).
    b = int(v.view(np.uint32))
    if np.isnan(v):
        return (b >> 16) | 0x40
    if float(v) != x:
        if abs(float(v)) > abs(x):
            b -= 1
        b |= 1
    r = ((b + 0x7fff + ((b >> 16) & 1)) >> 16) & 0xffff
    if (r & 0x7fff) == 0x7f80 and np.isfinite(x):
        raise refuse(f"{a!r} overflows it")
    return r


# The numpy element types a pointer argument of each runtime dtype takes
# (bf16: raw uint16 bits, or a kiln.bf16 wrapper; i1: bool or bytes).
_NP_DTYPES = {"f32": ("float32",), "f64": ("float64",), "f16": ("float16",),
              "bf16": ("uint16",), "i8": ("int8",), "i16": ("int16",),
              "i32": ("int32",), "i64": ("int64",), "u8": ("uint8",),
              "i1": ("bool", "uint8", "int8")}


def _wrong_type(name, kernel_name, dtype, got):
    return TypeError(f"argument '{name}' of kernel '{kernel_name}' points to {dtype} "
                     f"elements, got an array of {got}")


def host_address(a, name, dtype, written, kernel_name):
    """The address of numpy array `a` passed for pointer parameter `name`
    (of runtime dtype `dtype`; `written`: the kernel may write through it)
    of kernel `kernel_name`, checked: the element type (in native byte
    order: the kernel reads the machine's), C-contiguous, writeable if
    written. (Bundle launches and kiln.ops' operator kernels.)"""
    if a.dtype.name not in _NP_DTYPES.get(dtype, ()) or not a.dtype.isnative:
        raise _wrong_type(name, kernel_name, dtype, a.dtype)
    if not a.flags["C_CONTIGUOUS"]:
        raise ValueError(f"argument '{name}' is not contiguous")
    if not a.flags["ALIGNED"]:
        raise ValueError(f"argument '{name}' is not aligned to its {a.itemsize}-byte elements; "
                         "pass a copy (np.ascontiguousarray)")
    # (The kernel reads an i1 element's low bit: as bytes, 2 would be false.)
    if dtype == "i1" and a.dtype.name != "bool" and a.size and a.view(np.uint8).max() > 1:
        raise ValueError(f"argument '{name}' of kernel '{kernel_name}' points to i1 elements, "
                         "and its bytes hold values other than 0 and 1: pass a bool array "
                         "(x != 0)")
    if written and not a.flags["WRITEABLE"]:
        raise ValueError(f"argument '{name}' is a read-only array, and kernel "
                         f"'{kernel_name}' writes through it")
    return a.ctypes.data


class Bundle:
    """A kernel loaded from a .kiln bundle (``kilnc kernel.mlir -o k.kiln``)."""
    _TORCH_DTYPES = {"f32": ("float32",), "f64": ("float64",), "f16": ("float16",),
                     "bf16": ("bfloat16",), "i8": ("int8",), "i16": ("int16",),
                     "i32": ("int32",), "i64": ("int64",), "u8": ("uint8",),
                     "i1": ("bool", "uint8", "int8")}

    def __init__(self, kernel):
        self._kernel = kernel
        # (name, kind, dtype) per parameter, read once: the launch path is hot.
        self._signature = [(name, kind, dtype) for name, kind, dtype in kernel.signature]
        # True where the kernel may write through an argument (None: the
        # bundle predates the manifest's `writes` line and does not say).
        self._written = list(kernel.written)
        self._torch_ok = {}  # torch dtype -> accepted, per argument index

    @property
    def name(self):
        return self._kernel.name

    @property
    def signature(self):
        return self._kernel.signature

    @property
    def target(self):
        """The target the bundle was compiled for (x86-64-avx2, sm_90a, ...)."""
        return self._kernel.target

    @property
    def features(self):
        """The CPU features its code needs (empty for GPU bundles)."""
        return self._kernel.features

    @property
    def grid_rank(self):
        return self._kernel.grid_rank

    def __getitem__(self, grid):
        if isinstance(grid, (int, np.integer)) and not isinstance(grid, (bool, np.bool_)):
            grid = (grid,)
        # Ints of int64 only, as @kiln.jit's grid: (True,) ran as 1, and a
        # float or 2^63 reached pybind's "incompatible function arguments".
        if not isinstance(grid, (tuple, list)) or not 1 <= len(grid) <= 3 or any(
                isinstance(g, (bool, np.bool_)) or not isinstance(g, (int, np.integer)) or
                not 0 <= g < 2**63 for g in grid):
            raise ValueError(f"the grid must be an int or a tuple of 1 to 3 ints in "
                             f"[0, 2^63), got {grid!r}")
        grid = tuple(int(g) for g in grid)

        gpu = self._kernel.is_gpu
        kernel = self._kernel
        signature = self._signature
        written = self._written

        def launch(*args, wait=None, stream=None):
            """wait=False (GPU bundles): the kernel is queued on the runtime's
            stream, which is ordered with the legacy default stream (PyTorch's
            default), and the call returns; the arrays must stay alive until
            it ran. Bundle.synchronize() waits and reports its errors.
            stream: the caller's CUDA stream instead (a torch.cuda.Stream,
            anything with __cuda_stream__, or a CUstream handle as an int;
            0 is the legacy default stream): the kernel is only queued there
            (and can be captured into a CUDA graph), unless wait=True, which
            waits for that stream. Bundle.synchronize() does not wait for
            it. A GPU kernel with scratch memory refuses a stream."""
            if stream is not None:
                stream = _stream_handle(stream)
            if wait is None:
                wait = stream is None
            if len(args) != len(signature):
                raise TypeError(f"kernel '{kernel.name}' takes {len(signature)} arguments, "
                                f"got {len(args)}")
            values = []
            device = None  # read once per launch, at the first CUDA array
            for i, ((name, kind, dtype), a) in enumerate(zip(signature, args)):
                if kind == "ptr":
                    # The common case first: a PyTorch CUDA tensor, read
                    # through its C methods (about 1 µs, against 5 µs
                    # through cuda_array_view; docs/performance.md).
                    if type(a) in _TORCH_TENSOR_TYPES and a.is_cuda:
                        if device is None:
                            device = _kiln_device()
                        if a.get_device() != device:
                            _check_device(a.get_device(), name)
                        if not a.is_contiguous():
                            raise ValueError(f"argument '{name}' is a non-contiguous CUDA "
                                             "array; pass .contiguous()")
                        ok = self._torch_ok.get((i, a.dtype))
                        if ok is None:
                            ok = str(a.dtype).rpartition(".")[2] in self._TORCH_DTYPES.get(
                                dtype, ())
                            self._torch_ok[(i, a.dtype)] = ok
                        if not ok:
                            raise _wrong_type(name, kernel.name, dtype, a.dtype)
                        if not gpu:
                            raise TypeError(f"argument '{name}' is a CUDA device array, "
                                            f"and this kernel runs on the host "
                                            f"({kernel.target}): pass a numpy array")
                        values.append(a.data_ptr())
                        continue
                    dev = _device_address(a, name)
                    if dev is not None:  # a CUDA array, for GPU bundles
                        if not gpu:
                            raise TypeError(f"argument '{name}' is a CUDA device array, "
                                            f"and this kernel runs on the host "
                                            f"({self._kernel.target}): pass a numpy array")
                        values.append(dev)
                        continue
                    if gpu:
                        raise TypeError(f"argument '{name}' is a host array, and this "
                                        f"kernel runs on the GPU ({self._kernel.target}): "
                                        "pass a CUDA array (a PyTorch CUDA tensor, or "
                                        "anything with __cuda_array_interface__)")
                    if isinstance(a, bf16) and dtype == "bf16":
                        a = a.array
                    elif isinstance(a, fp8) and dtype in ("i8", "u8"):
                        a = a.array      # (a kernel's fp8 parameters are "ptr i8")
                    if not isinstance(a, np.ndarray) and hasattr(a, "__dlpack__"):
                        a = _from_dlpack(a, name)   # (a CPU tensor, as @kiln.jit takes)
                    if not isinstance(a, np.ndarray):
                        raise TypeError(f"argument '{name}' must be a numpy array "
                                        "(or a CUDA array for GPU bundles)")
                    values.append(host_address(a, name, dtype, written[i], kernel.name))
                else:
                    # (The common cases first: an int for an integer, a
                    # float32-sized float for f32.)
                    if type(a) is int and dtype in _PLAIN_INT or \
                            type(a) is float and dtype == "f32" and abs(a) < _F32_OVERFLOW:
                        values.append(a)
                    else:
                        values.append(_scalar(a, dtype, name, kernel.name))
            if stream is None:
                kernel.launch(values, list(grid), wait)
            else:
                kernel.launch(values, list(grid), wait, stream)

        return launch

    def synchronize(self):
        """Waits for this bundle's runtime's GPU kernels launched with
        wait=False (not those given a stream); raises LaunchError if one
        failed."""
        self._kernel.synchronize()


class CudaArrayView:
    """What a launch needs of a CUDA array: its device address, shape,
    byte strides (None: contiguous) and element type (a numpy dtype, or
    "bfloat16", which numpy lacks)."""

    __slots__ = ("ptr", "shape", "strides", "dtype", "itemsize")

    def __init__(self, ptr, shape, strides, dtype, itemsize):
        self.ptr, self.shape, self.strides = ptr, tuple(shape), strides
        self.dtype, self.itemsize = dtype, itemsize

    def contiguous(self):
        if self.strides is None:
            return True
        step = self.itemsize
        for n, s in zip(reversed(self.shape), reversed(self.strides)):
            if n > 1 and s != step:
                return False
            step *= n
        return True


_KDL_CUDA, _KDL_CUDA_MANAGED = 2, 13  # DLPack device types on the GPU


_DEVICES = {}  # raw $KILN_CUDA_DEVICE -> its ordinal (read at every launch)


def _kiln_device():
    """The CUDA device ordinal the runtime launches on (KILN_CUDA_DEVICE,
    default 0; the runtime refuses anything but a non-negative integer)."""
    import os
    data = getattr(os.environ, "_data", None)
    if os.name == "posix" and isinstance(data, dict):
        raw = data.get(b"KILN_CUDA_DEVICE")
        raw = raw.decode(errors="replace") if raw is not None else None
    else:
        raw = os.environ.get("KILN_CUDA_DEVICE")
    device = _DEVICES.get(raw)
    if device is None:
        value = raw or "0"
        if not (value.isascii() and value.isdigit()):
            raise ValueError(f"KILN_CUDA_DEVICE is '{value}', must be a device ordinal "
                             "(0, 1, ...)")
        device = _DEVICES[raw] = int(value)
    return device


def _torch_tensor_types():
    """PyTorch's tensor classes (torch.Tensor and nn.Parameter), if torch is
    already imported; the fast path of a launch recognizes exactly these.
    Subclasses take the general path (cuda_array_view)."""
    import sys
    torch = sys.modules["torch"]
    return frozenset(t for t in (getattr(torch, "Tensor", None),
                                 getattr(getattr(torch, "nn", None), "Parameter", None))
                     if isinstance(t, type))


class _NoTorch:
    """Membership tests against PyTorch's tensor types before torch is
    imported: a tensor's type is looked up (and torch's types cached) the
    first time one is seen."""

    def __contains__(self, t):
        global _TORCH_TENSOR_TYPES
        import sys
        if not t.__module__.startswith("torch") or "torch" not in sys.modules:
            return False
        _TORCH_TENSOR_TYPES = _torch_tensor_types()
        return t in _TORCH_TENSOR_TYPES


_TORCH_TENSOR_TYPES = _NoTorch()


# The environment variables a kernel's compilation depends on (target,
# launch shape, sm_90a features): the JIT's and kiln.ops' caches key their
# fast paths on their raw values.
_COMPILE_ENV = ("KILN_TARGET", "KILN_NUM_WARPS", "KILN_NUM_STAGES", "KILN_TMA",
                "KILN_SWIZZLE", "KILN_OVERLAP", "KILN_TMA_MAPS", "KILN_DEBUG",
                "KILN_PIPELINE_GATHERS", "KILN_FP8_WGMMA", "KILN_PINGPONG")
_COMPILE_ENV_BYTES = tuple(k.encode() for k in _COMPILE_ENV)


def env_target():
    """$KILN_TARGET, or "host" where it is unset or empty (as an empty
    variable reads in a shell)."""
    import os
    return os.environ.get("KILN_TARGET") or "host"


def _compile_environment():
    """The raw values of _COMPILE_ENV (None where unset). os.environ costs
    about 0.8 us per variable; its mapping of encoded names (CPython on
    POSIX) is read directly where it exists."""
    import os
    data = getattr(os.environ, "_data", None)
    if os.name == "posix" and isinstance(data, dict):
        return tuple(map(data.get, _COMPILE_ENV_BYTES))
    return tuple(map(os.environ.get, _COMPILE_ENV))


def _torch_current_stream():
    """The handle of PyTorch's current CUDA stream on the runtime's device
    (PyTorch is imported: a tensor of its was passed)."""
    import sys
    torch = sys.modules["torch"]
    device = _kiln_device()
    raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return int(raw(device))
    return int(torch.cuda.current_stream(device).cuda_stream)


def _launch_on_torch(kernel, values, grid, wait, name):
    """Launches a GPU `kernel` (anything with launch(values, grid, wait,
    stream) and, optionally, scratch_bytes) for PyTorch tensors, as
    PyTorch's own kernels run: queued on its current stream of the runtime's
    device, waited for only if `wait`; capturable into a CUDA graph. A
    kernel with scratch memory (tensor maps built on the device,
    KILN_TMA_MAPS=device) runs on the runtime's stream, which is ordered
    with the legacy default stream: under another stream, that stream is
    waited for first, and the kernel too; under a capture it is refused."""
    if not getattr(kernel, "scratch_bytes", 0):
        kernel.launch(values, grid, wait, _torch_current_stream())
        return
    import sys
    torch = sys.modules["torch"]
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError(f"{name}: this kernel uses scratch memory (tensor maps built on "
                           "the device, KILN_TMA_MAPS=device), which runs on the runtime's "
                           "stream and cannot be captured into a CUDA graph")
    device = _kiln_device()
    stream = torch.cuda.current_stream(device)
    on_default = stream == torch.cuda.default_stream(device)
    if not on_default:
        stream.synchronize()
    kernel.launch(values, grid, wait or not on_default)


def _stream_handle(stream):
    """A CUDA stream's handle (its CUstream as an int) from an int, a
    PyTorch stream (`.cuda_stream`; its device must be the runtime's) or an
    object with `__cuda_stream__` (CUDA Python's protocol: a (version,
    handle) pair, or a method returning one)."""
    if isinstance(stream, (int, np.integer)) and not isinstance(stream, bool):
        if not 0 <= stream < 2**64:
            raise ValueError(f"stream must be a CUstream handle (>= 0), got {stream}")
        return int(stream)
    handle = getattr(stream, "cuda_stream", None)
    if handle is not None:
        index = getattr(getattr(stream, "device", None), "index", None)
        if index is not None:
            _check_device(index, "stream")
    elif hasattr(stream, "__cuda_stream__"):
        pair = stream.__cuda_stream__
        pair = pair() if callable(pair) else pair
        handle = pair[1] if isinstance(pair, tuple) and len(pair) == 2 else None
    if isinstance(handle, (int, np.integer)) and not isinstance(handle, bool) and \
            0 <= handle < 2**64:
        return int(handle)
    raise TypeError("stream must be a CUDA stream: a torch.cuda.Stream, an object with "
                    f"__cuda_stream__, or a CUstream handle (int); got {type(stream).__name__}")


def _check_device(index, name):
    if index is not None and index != _kiln_device():
        raise ValueError(f"argument '{name}' is on CUDA device {index}, and kiln launches on "
                         f"device {_kiln_device()} (KILN_CUDA_DEVICE)")


def _dlpack_view(obj, name):
    """A CUDA array exported through DLPack (``__dlpack__``): the legacy
    ``dltensor`` capsule is read, not consumed (its destructor still frees
    it; `obj` keeps the memory alive)."""
    import ctypes

    class DLTensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                    ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                    ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                    ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                    ("strides", ctypes.POINTER(ctypes.c_int64)),
                    ("byte_offset", ctypes.c_uint64)]

    capsule = obj.__dlpack__()
    # Private prototypes: setting argtypes on ctypes.pythonapi's functions
    # would change them for the whole process.
    get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi))
    valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_IsValid", ctypes.pythonapi))
    if not valid(capsule, b"dltensor"):
        raise ValueError(f"argument '{name}': __dlpack__ did not return a DLPack tensor")
    t = DLTensor.from_address(get(capsule, b"dltensor"))
    if t.device_type not in (_KDL_CUDA, _KDL_CUDA_MANAGED):
        return None
    _check_device(t.device_id, name)
    if t.lanes != 1:
        raise TypeError(f"argument '{name}' is a vector-typed DLPack array")
    kinds = {0: "i", 1: "u", 2: "f", 6: "b"}
    if t.code == 4 and t.bits == 16:
        dtype = "bfloat16"
    elif t.code in kinds and t.bits % 8 == 0:
        dtype = np.dtype("bool" if t.code == 6 else f"{kinds[t.code]}{t.bits // 8}")
    else:
        raise TypeError(f"argument '{name}' has a DLPack type (code {t.code}, {t.bits} bits) "
                        "kernels cannot take")
    itemsize = max(1, t.bits // 8)
    shape = [t.shape[i] for i in range(t.ndim)]
    strides = None if not t.strides else [t.strides[i] * itemsize for i in range(t.ndim)]
    return CudaArrayView((t.data or 0) + t.byte_offset, shape, strides, dtype, itemsize)


# Types that are never CUDA arrays.
_HOST_TYPES = frozenset({np.ndarray, int, float, bool, str, type(None)})


def _has_cai(obj):
    # PyTorch raises (not AttributeError) for tensors that need grad or whose
    # dtype has no typestr: those are still CUDA arrays.
    try:
        return hasattr(obj, "__cuda_array_interface__")
    except Exception:  # noqa: BLE001
        return True


def _dlpack_device_id(obj):
    """The CUDA device of a DLPack exporter (None if not one, or unknown)."""
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is None or isinstance(obj, np.ndarray):
        return None
    try:
        kind, index = dev()
    except Exception:  # noqa: BLE001 - not a usable exporter
        return None
    return index if kind in (_KDL_CUDA, _KDL_CUDA_MANAGED) else None


def is_cuda_array(obj):
    """Whether `obj` is a CUDA array (see cuda_array_view), without reading it."""
    if type(obj) in _HOST_TYPES:  # (the common case first: it is asked per argument)
        return False
    if type(obj).__module__.startswith("torch") and getattr(obj, "is_cuda", False):
        return True
    if _has_cai(obj):
        return True
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is None or isinstance(obj, np.ndarray):
        return False
    try:
        return dev()[0] in (_KDL_CUDA, _KDL_CUDA_MANAGED)
    except Exception:  # noqa: BLE001 - not a usable exporter
        return False


def cuda_array_view(obj, name="array"):
    """The CudaArrayView of a CUDA array (a PyTorch CUDA tensor, anything with
    ``__cuda_array_interface__``, or a DLPack exporter whose device is a
    CUDA GPU), else None. A tensor on another device than the runtime's is
    refused."""
    if type(obj).__module__.startswith("torch") and getattr(obj, "is_cuda", False):
        _check_device(obj.device.index, name)
        size = obj.element_size()
        dtype = str(obj.dtype).replace("torch.", "")
        if dtype != "bfloat16":
            try:
                dtype = np.dtype(dtype)
            except TypeError:
                pass  # a type numpy lacks (float8, ...): named, refused by kernels
        return CudaArrayView(obj.data_ptr(), obj.shape, [s * size for s in obj.stride()],
                             dtype, size)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        # The interface has no device; CuPy and Numba arrays also export DLPack.
        _check_device(_dlpack_device_id(obj), name)
        dtype = np.dtype(cai["typestr"])
        return CudaArrayView(int(cai["data"][0]), cai["shape"], cai.get("strides"), dtype,
                             dtype.itemsize)
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is not None and hasattr(obj, "__dlpack__"):
        try:
            kind, _ = dev()
        except Exception:  # noqa: BLE001 - not a usable exporter: not a CUDA array
            return None
        if kind in (_KDL_CUDA, _KDL_CUDA_MANAGED):
            return _dlpack_view(obj, name)
    return None


def _device_address(a, name="array"):
    """The device address of a CUDA array (see cuda_array_view), else None."""
    view = cuda_array_view(a, name)
    if view is None:
        return None
    if not view.contiguous():
        raise ValueError(f"argument '{name}' is a non-contiguous CUDA array; pass "
                         ".contiguous()")
    return view.ptr


def load_bundle(path: str, num_threads: int = 0) -> Bundle:
    """Loads a bundle; refuses (with a message) one that is corrupt, for
    another target, or needs CPU features this machine lacks."""
    path = os.fspath(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if "\0" in path:  # (the C API would read the path up to it, as open() refuses)
        raise ValueError(f"load_bundle: the path {path!r} holds an embedded null byte")
    return Bundle(_ext.load_bundle(path, num_threads))
