"""The operator library from Python (``kiln.ops``).

Each function builds (once per configuration) the C++-generated kernel of the
operator, compiles it through the JIT and its caches, and launches it on numpy
arrays, or on PyTorch CUDA tensors (compiled for their GPU; outputs allocated
by PyTorch). Semantics, shapes and configuration: docs/ops.md.
"""

from __future__ import annotations

import math
import os
import threading

import numpy as np

from .runtime import (_HOST_TYPES, _compile_environment, _ext, bf16, env_target, fp8,
                      host_address, is_cuda_array)

__all__ = ["list_ops", "kernel", "mod_source", "embedding", "paged_kv_gather", "moe_route", "moe_permute",
           "moe_unpermute", "block_mask", "block_sparse_attention", "dsa_indexer", "dsa_topk",
           "dsa_sparse_attention", "conv", "conv2d", "patch_embed", "depthwise_conv2d",
           "set_kernel_provider"]

_lock = threading.Lock()
_kernels = {}
_provider = None
# kernel()'s fast path: (name, mods, target, warps, config as given, the
# compile environment) -> the kernel.
_known = {}


def list_ops():
    """[(name, summary, {param: default})] of every operator."""
    from . import _kiln
    return _kiln.list_ops()


class _Launcher:
    """A JIT-compiled operator kernel: launch(values, grid) with numpy arrays
    (or PyTorch CUDA tensors, for GPU kernels) for pointers."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.scratch_bytes = kernel.scratch_bytes
        # (name, element type, written) per parameter: a numpy array passed
        # for a pointer is checked as kiln.runtime.Bundle checks it (its
        # address alone would read a strided view, or int64 ids as pairs of
        # int32, silently); an int is an address the operators computed.
        self._params = [(n, dtype if kind == "ptr" else None, w)
                        for (n, kind, dtype), w in zip(kernel.signature, kernel.written)]

    def _address(self, i, v):
        if i >= len(self._params):
            return v.ctypes.data  # (the kernel's launch refuses the count)
        name, dtype, written = self._params[i]
        if dtype is None:
            raise TypeError(f"argument '{name}' of kernel '{self.kernel.name}' is a scalar, "
                            "got an array")
        return host_address(v, name, dtype, written, self.kernel.name)

    def launch(self, values, grid, wait=True, stream=None):
        values = [self._address(i, v) if isinstance(v, np.ndarray)
                  else v.data_ptr() if hasattr(v, "data_ptr") else v
                  for i, v in enumerate(values)]
        if stream is None:
            self.kernel.launch(values, grid, wait)
        else:
            self.kernel.launch(values, grid, wait, stream)


def set_kernel_provider(provider):
    """Routes the operator functions' kernels through `provider(name, mods,
    config)` instead of the JIT; it returns an object whose launch(values,
    grid, wait=True, stream=None) takes numpy arrays (or, for operators
    called on them, PyTorch CUDA tensors) for pointers; on PyTorch tensors
    the operators pass wait=False and the current stream's handle, unless
    the object's optional `scratch_bytes` is nonzero (then no stream: see
    _Torch.launch). With it the operators run without
    the compiler, on kernels compiled ahead of time, on any device the
    provider stages arrays to (test/gpu/check.py). None restores the JIT."""
    global _provider
    with _lock:
        _provider = provider
        _kernels.clear()
        _known.clear()


def kernel(name, mods="", _target=None, _num_warps=None, **config):
    """The compiled kernel of operator `name` with `config` (cached); `mods`
    is IR of functions fused into it (see mod_source). `_target`: a GPU
    target (the operators on PyTorch CUDA tensors), else the JIT's default;
    `_num_warps`: instead of $KILN_NUM_WARPS."""
    if _provider is not None:
        return _provider(name, mods, {k: str(v) for k, v in config.items()})
    # (Types too: 1, True and 1.0 are equal keys but distinct settings.)
    fast = (name, mods, _target, _num_warps, _compile_environment(),
            tuple((k, type(v), v) for k, v in config.items()))
    try:
        k = _known.get(fast)
    except TypeError:  # an unhashable setting: the slow path only
        fast = None
        k = None
    if k is not None:
        return k
    from . import _kiln
    from .jit import (_get_jit, default_num_stages, default_num_warps, host_maps_enabled,
                      refused_at_load,
                      pipeline_gathers_enabled, fp8_wgmma_enabled, pingpong_enabled,
                      overlap_enabled, swizzle_enabled, tma_enabled)
    target = _target or env_target()
    if target.startswith("sm_") and _target is None:
        raise ValueError(f"kiln.ops on host (numpy) arrays runs on the host, and "
                         f"KILN_TARGET={target} compiles for a GPU whose kernels cannot read "
                         "them; unset KILN_TARGET (emu-sm_XY runs the GPU lowering on the "
                         "host), or pass PyTorch CUDA tensors")
    # Everything the compiled code depends on: after $KILN_TARGET, $KILN_TMA,
    # $KILN_SWIZZLE, $KILN_OVERLAP, $KILN_TMA_MAPS, $KILN_PIPELINE_GATHERS,
    # $KILN_FP8_WGMMA or $KILN_PINGPONG change, a kernel compiled before is not
    # reused.
    warps = _num_warps or default_num_warps()
    key = (name, mods, _get_jit(_target).target, warps, default_num_stages(),
           tma_enabled(), swizzle_enabled(), overlap_enabled(), host_maps_enabled(),
           pipeline_gathers_enabled(), fp8_wgmma_enabled(), pingpong_enabled(),
           tuple(sorted((k, str(v)) for k, v in config.items())))
    with _lock:
        k = _kernels.get(key)
    if k is None:
        src = _kiln.build_op_source(name, {k: str(v) for k, v in config.items()}, mods)
        try:
            k = _Launcher(_get_jit(_target).compile(src, f"op:{name}", warps,
                                                    default_num_stages()))
        except _kiln.IRError as e:
            refused_at_load(e, f"operator '{name}'")
            raise
        with _lock:
            _kernels[key] = k
    if fast is not None:
        with _lock:
            _known[fast] = k
    return k


def _refuse_cuda(public, arguments):
    """The host side of operator `public` takes host (numpy) arrays: a CUDA
    array in `arguments` ({name: value}; also inside a dict value, as the
    mask) is refused with a TypeError naming the operator and the argument,
    before numpy would try to convert it (anything with
    __cuda_array_interface__, as PyTorch CUDA tensors and CuPy arrays have,
    or a DLPack exporter on a CUDA device)."""
    first = next(iter(arguments), None)
    for name, v in arguments.items():
        values = v.values() if isinstance(v, dict) else (v,)
        if not any(is_cuda_array(x) for x in values):
            continue
        if name == first:
            raise TypeError(f"kiln.ops.{public}: argument '{name}' is a CUDA device array "
                            "but not a PyTorch tensor; kiln.ops takes host (numpy) arrays or "
                            "PyTorch CUDA tensors (a @kiln.jit kernel launches on any CUDA "
                            "array)")
        raise TypeError(f"kiln.ops.{public}: argument '{name}' is a CUDA device array, and "
                        f"'{first}' is a host array: pass host (numpy) arrays, or PyTorch "
                        f"CUDA tensors from '{first}' on")


# Argument types that are never CUDA arrays (kiln.bf16 and kiln.fp8 wrap
# numpy arrays).
_HOST_ARGS = _HOST_TYPES | {bf16, fp8}


def _host_values(values):
    """Whether every value is of a type that is never a CUDA array (numpy
    arrays, Python scalars, None, kiln.bf16 / kiln.fp8 wrappers of numpy
    arrays), or a dict (a block mask) of such values: _refuse_cuda would pass
    them. Exact types, no probing: anything else takes the full check."""
    for v in values:
        t = type(v)
        if t in _HOST_ARGS:
            continue
        if t is not dict:
            return False
        for x in v.values():
            if type(x) not in _HOST_ARGS:
                return False
    return True


def _host_only(fn):
    """A host-side helper of an operator: CUDA arrays refused (_refuse_cuda)."""
    import functools
    import inspect
    sig = inspect.signature(fn)
    # The public name (block_sparse_attention's host path is a helper).
    public = fn.__name__[1:-len("_host")] if fn.__name__.endswith("_host") else fn.__name__

    params = list(sig.parameters.values())
    positional = [p.name for p in params
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    simple = all(p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY, p.VAR_KEYWORD)
                 for p in params)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _host_values(args) and _host_values(kwargs.values()):
            return fn(*args, **kwargs)  # (the common case: nothing to refuse)
        if simple and len(args) <= len(positional):
            # (Signature.bind_partial's arguments, in the signature's order,
            # without its cost: the launch path is hot. Bad arguments are
            # fn's TypeError below.)
            given = dict(zip(positional, args))
            given.update(kwargs)
            arguments = {p.name: given.pop(p.name) for p in params if p.name in given}
            arguments.update(given)
        else:
            arguments = sig.bind_partial(*args, **kwargs).arguments
        _refuse_cuda(public, arguments)
        return fn(*args, **kwargs)
    return wrapper


def _f32(a, name, what="kiln.ops"):
    """A float32 operand (a kiln.bf16 wrapper's values decoded; integers and
    other floats converted). Complex, object and other non-numeric arrays
    are refused: numpy's conversion would drop an imaginary part (with only
    a warning) or turn None into NaN."""
    if isinstance(a, bf16):
        bits = np.asarray(a.array, np.uint16)
        return np.ascontiguousarray((bits.astype(np.uint32) << 16).view(np.float32))
    kind = np.asarray(a).dtype.kind
    if kind not in "fiub":
        raise TypeError(f"{what}: {name} must hold real numbers, got {np.asarray(a).dtype}")
    out = np.ascontiguousarray(a, dtype=np.float32)
    return out if out.shape == np.shape(a) else out.reshape(np.shape(a))  # (0-d stays 0-d)


def _i32(a, wide=-2, name="indices", what=None):
    """int32 indices; a value outside int32's range (from a wider integer
    type) becomes `wide` rather than wrapping into range: by default -2,
    which every index check counts as bad. Float, bool or other arrays are
    refused (as numpy's indexing does), empty ones excepted (np.asarray([])
    is float64). `what`: the operator, named in the error."""
    a = np.asarray(a)
    if a.dtype.kind not in "iu" and a.size:
        raise TypeError(f"{what or 'kiln.ops'}: {name} must be integers, got {a.dtype}")
    if a.dtype.kind in "iu" and a.dtype.itemsize >= 4 and a.dtype != np.int32 and a.size:
        a = np.where((a < -2**31) | (a > 2**31 - 1), wide, a)
    out = np.ascontiguousarray(a, dtype=np.int32)
    return out if out.shape == a.shape else out.reshape(a.shape)  # (0-d stays 0-d)


def _positive(name, **values):
    """Block sizes and other counts: positive integers, else a ValueError
    naming the parameter (before a grid divides by one, or a kernel is
    built with an empty tile)."""
    for k, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name}: {k} must be a positive integer, got {v!r}")


def _positive_given(name, **values):
    """_positive for the values given: None is the default, chosen later."""
    _positive(name, **{k: v for k, v in values.items() if v is not None})


def _rank(name, arg, a, rank, layout):
    """a's shape, which must have `rank` dimensions (`layout` names them:
    "[rows, dim]"); else a ValueError naming the argument."""
    shape = tuple(a.shape) if hasattr(a, "shape") else np.shape(a)
    if len(shape) != rank:
        raise ValueError(f"{name}: {arg} must be {layout}, got shape {shape}")
    return shape


def _same_type(what, exact=False, **arrays):
    """([contiguous arrays], dtype name) for inputs that share one element
    type: all kiln.bf16-wrapped uint16 ("bf16"), all float16 ("f16"), or
    other real numbers converted to float32 ("f32", _f32). With `exact`
    (gathers, which copy elements: out has the input's type) only float32
    is converted so: a float64 or integer table would come back changed."""
    names, values = list(arrays), list(arrays.values())
    wrapped = [isinstance(x, bf16) for x in values]
    if any(wrapped):
        if not all(wrapped):
            listed = ", ".join(names[:-1]) + " and " + names[-1]
            quantifier = "both" if len(names) == 2 else "all"
            raise TypeError(f"{what}: {listed} must {quantifier} be kiln.bf16, or none of them")
        return [np.ascontiguousarray(x.array) for x in values], "bf16"
    values = [np.asarray(x) for x in values]
    if all(x.dtype == np.float16 for x in values):
        return [np.ascontiguousarray(x) for x in values], "f16"
    for n, x in zip(names, values):
        if exact and x.size and x.dtype != np.float32:
            raise TypeError(f"{what}: {n} must be float32, float16 or kiln.bf16 (a gather "
                            f"copies its elements), got {x.dtype}")
    return [_f32(x, n, what) for n, x in zip(names, values)], "f32"


def _empty(shape, dtype=np.float32):
    """An output array starting on a 64-byte boundary, as PyTorch places CPU
    tensors. numpy's start 16 bytes past one, so half the 32-byte vector
    stores of each channels-last row crossed a cache line (a depthwise
    convolution with its output aligned: 0.90-0.93x the time;
    docs/performance.md)."""
    dtype = np.dtype(dtype)
    shape = tuple(int(d) for d in shape)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def _ptr(a):
    """A pointer argument: the (contiguous) array itself; the launcher
    passes its address, or a device copy's."""
    assert isinstance(a, np.ndarray) and a.flags["C_CONTIGUOUS"]
    return a


def _cdiv(a, b):
    return (a + b - 1) // b


def _even_blocks(n, most, multiple=1):
    """The block size that splits n into the fewest blocks of at most
    `most`, evenly, rounded up to a multiple of `multiple` (the host's
    default blocks: a block that runs past its rows or columns computes
    padding there, or copies less per step, so the blocks should fit the
    sizes)."""
    return max(multiple, _cdiv(_cdiv(n, max(1, _cdiv(n, most))), multiple) * multiple)


# ---------------------------------------------------------------------------
# The two sides an operator runs on: host (numpy) arrays, PyTorch CUDA tensors
# ---------------------------------------------------------------------------

_NP_TYPES = {"f32": np.float32, "bf16": np.uint16, "f16": np.float16, "i32": np.int32}


class _Host:
    """An operator's host side: numpy arrays (kiln.bf16-wrapped uint16 for
    bf16), CUDA arrays refused (_refuse_cuda), kernels from the JIT's default
    target (or the kernel provider), launched synchronously."""
    target = None

    def __init__(self, name, arguments):
        _refuse_cuda(name, arguments)
        self.name = name

    def same_type(self, exact=False, **arrays):
        return _same_type(self.name, exact, **arrays)

    def ints(self, a, n, wide=-2):
        return _i32(a, wide, n, self.name)

    def f32(self, a, n):
        return _f32(a, n)

    data32 = f32

    def empty(self, shape, dtype="f32"):
        return _empty(shape, _NP_TYPES[dtype])

    def wrap(self, a, dtype):
        return bf16(a) if dtype == "bf16" else a

    def errors(self, errors):
        if errors is None:
            return np.zeros(1, np.int32)
        if not (isinstance(errors, np.ndarray) and errors.dtype == np.int32 and errors.size and
                errors.flags["C_CONTIGUOUS"] and errors.flags["WRITEABLE"]):
            raise TypeError(f"{self.name}: errors must be a writable contiguous int32 numpy "
                            "array with at least one element (the count is added to its "
                            "first)")
        return errors

    def count(self, word):
        return int(word.reshape(-1)[0])

    def maximum(self, a):
        a = np.asarray(a)
        return int(a.max()) if a.size else 0

    def launch(self, kern, values, grid):
        kern.launch(values, grid)


def _is_torch_cuda(x):
    from . import runtime
    return type(x) in runtime._TORCH_TENSOR_TYPES and getattr(x, "is_cuda", False)


class _Torch:
    """An operator's PyTorch CUDA side: its inputs checked and made
    contiguous on the device of the first one (the runtime's), its outputs
    allocated there by PyTorch, its kernel compiled for that GPU and queued
    on PyTorch's current stream (see launch). _Host is the same interface
    over numpy arrays."""

    def __init__(self, name, first, first_name="the first array"):
        import torch
        from . import runtime
        self.torch, self.name, self.dev = torch, name, first.device
        runtime._check_device(first.get_device(), first_name)
        # (A kernel provider brings kernels compiled for its own GPU; .jit
        # needs the compiler extension, which a runtime-only install lacks.)
        if _provider:
            self.target = None
        else:
            from .jit import gpu_target
            self.target = gpu_target()
        self.types = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}

    def same_type(self, exact=False, **tensors):
        """([contiguous tensors], dtype name): all bfloat16, float16 or
        float32 PyTorch CUDA tensors on this device (`exact` adds nothing:
        no other type is taken)."""
        torch = self.torch
        values = list(tensors.values())
        for n, t in tensors.items():
            if not (isinstance(t, torch.Tensor) and t.is_cuda and t.device == self.dev):
                raise TypeError(f"{self.name}: '{n}' must be a PyTorch CUDA tensor on "
                                f"{self.dev}, like the first array")
        dt = values[0].dtype
        if dt not in self.types or any(t.dtype != dt for t in values):
            raise TypeError(f"{self.name}: " + ", ".join(tensors) + " must all be bfloat16, "
                            "float16 or float32, got " + ", ".join(str(t.dtype) for t in values))
        return [t.contiguous() for t in values], self.types[dt]

    def f32(self, a, n):
        """A float32 operand (numpy, or a PyTorch tensor) on the device."""
        torch = self.torch
        if isinstance(a, torch.Tensor):
            return a.to(device=self.dev, dtype=torch.float32).contiguous()
        return torch.from_numpy(_f32(a, n)).to(self.dev)

    def ints(self, a, n, wide=-2):
        """An int32 index operand (a PyTorch tensor of any integer type, as
        torch.topk's int64, or numpy) on the device; int64 values outside
        int32's range become `wide` (see _i32), not wrapped."""
        torch = self.torch
        if isinstance(a, torch.Tensor):
            if a.is_cuda and a.device != self.dev:
                raise TypeError(f"{self.name}: '{n}' is on {a.device}, the data on {self.dev}")
            if a.dtype in _torch_non_integer(torch):
                raise TypeError(f"{self.name}: {n} must be integers, got {a.dtype}")
            if a.dtype is torch.int64:
                a = torch.where((a < -2**31) | (a > 2**31 - 1), wide, a)
            return a.to(device=self.dev, dtype=torch.int32).contiguous()
        return torch.from_numpy(_i32(a, wide, n, self.name)).to(self.dev)

    def data32(self, a, n):
        """A float32 data operand: a PyTorch CUDA tensor on the device, of
        any floating type (converted)."""
        torch = self.torch
        if not (isinstance(a, torch.Tensor) and a.is_cuda and a.device == self.dev):
            raise TypeError(f"{self.name}: '{n}' must be a PyTorch CUDA tensor on {self.dev}, "
                            "like the first array")
        return a.to(dtype=torch.float32).contiguous()

    def empty(self, shape, dtype="f32"):
        return self.torch.empty(tuple(shape), device=self.dev, dtype=self._dtype(dtype))

    def _dtype(self, name):
        torch = self.torch
        return {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16,
                "i32": torch.int32}[name]

    def wrap(self, a, dtype):
        return a

    def errors(self, errors):
        """The int32 word a kernel adds its count of bad indices to: a new
        zero, or the caller's `errors` (its first element)."""
        torch = self.torch
        if errors is None:
            return torch.zeros(1, device=self.dev, dtype=torch.int32)
        if not (isinstance(errors, torch.Tensor) and errors.is_cuda and
                errors.device == self.dev and errors.dtype is torch.int32 and
                errors.numel() >= 1 and errors.is_contiguous()):
            raise TypeError(f"{self.name}: errors must be a contiguous int32 PyTorch CUDA "
                            f"tensor on {self.dev} with at least one element (the count is "
                            "added to its first)")
        return errors

    def count(self, word):
        """The count in an errors word (waits for the kernel: the word's
        copy to the host is queued on the stream that launched it, or
        after it)."""
        return int(word.item())

    def maximum(self, a):
        """max(a) for a shape: read back from a CUDA tensor (a wait)."""
        if not isinstance(a, self.torch.Tensor):
            return _Host.maximum(self, a)
        return int(a.max().item()) if a.numel() else 0

    def launch(self, kern, values, grid):
        # Queued on PyTorch's current stream, nothing waited for (a kernel
        # with scratch memory: see _launch_on_torch).
        from .runtime import _launch_on_torch
        _launch_on_torch(kern, values, grid, False, self.name)


def _torch_non_integer(torch):
    """PyTorch's floating, complex and bool dtypes (index arrays of those are
    refused rather than truncated)."""
    return {t for t in (getattr(torch, n, None) for n in (
        "float16", "bfloat16", "float32", "float64", "bool", "complex64", "complex128"))
        if t is not None}


def _side(name, arguments):
    """_Torch when the operator's first array (the first entry of
    `arguments`, {name: value}) is a PyTorch CUDA tensor, else _Host."""
    first, value = next(iter(arguments.items()))
    if _is_torch_cuda(value):
        return _Torch(name, value, first)
    return _Host(name, arguments)


def _bad_indices(side, word, errors, message, partial=None):
    """Raises IndexError(message(count)) when the kernel counted bad
    indices in `word` and the caller passed no `errors` of its own (with
    one, the count is the caller's to read, and nothing is waited for)."""
    if errors is not None:
        return
    n = side.count(word)
    if n:
        e = IndexError(message(n))
        if partial is not None:
            e.partial = partial
        raise e


# ---------------------------------------------------------------------------
# Index gathers
# ---------------------------------------------------------------------------


# The gathers and DSA operators take an optional `errors`: with None, a
# count of out-of-range indices raises IndexError (on PyTorch tensors that
# waits for the kernel); with an int32 array, or CUDA tensor, the count is
# added to its first element and nothing is raised or waited for.


def embedding(weight, ids, block_n=8, block_d=None, errors=None):
    """out[i...] = weight[ids[i...]], of shape ids.shape + (dim,) (as
    weight[ids] and torch.nn.functional.embedding); an id outside [0, vocab)
    reads zeros and raises IndexError (with the output as `e.partial`), or is
    counted in `errors`. weight: float32, float16 or kiln.bf16 (out has its
    type), or a PyTorch CUDA tensor (bfloat16, float16, float32; ids then a
    CUDA tensor of any integer type, or numpy)."""
    return _gather_rows("embedding", dict(weight=weight, ids=ids), errors,
                        dict(block_n=block_n, block_d=block_d),
                        lambda c, rows: f"embedding: {c} id(s) outside [0, {rows})",
                        keep_shape=True)


# Outputs of the row gathers at least this large are written with streaming
# stores on the CPU (kiln.store {streaming}: non-temporal, so the
# destination's cache lines are not read first; 1.2x faster for a 32 MiB
# embedding on an AVX2 machine, docs/performance.md). Smaller ones stay in
# the cache, where the next kernel will read them.
_STREAM_BYTES = 8 << 20


def _row_block(side, width, block):
    """A row gather's columns per program: `block` if given; else 1024 on
    GPU targets, and on the host the row in the fewest blocks of at most
    2048, split evenly and rounded up to vectors of 8. The fixed 1024 took
    1.9x the time of 768 for a 768-wide embedding, of 1000 for 1000, when a
    block past the row took the general gather and store; 1.0-1.4x since
    the CPU lowering copies the part inside (docs/performance.md)."""
    if block is not None:
        return block
    if _gpu_target(side.target):
        return 1024
    return _even_blocks(width, 2048, 8)


def _streaming(side, out):
    return int(isinstance(side, _Host) and out.nbytes >= _STREAM_BYTES)


def _gather_rows(name, arrays, errors, blocks, message, keep_shape=False):
    """The row gathers' common body (embedding, moe_permute): `arrays` is
    {table name: table [rows, dim], index name: index}, `blocks` the
    kernel's {row block name: size, column block name: size}; out[r] =
    table[index.reshape(-1)[r]], in the table's type (`keep_shape`: of
    shape index.shape + (dim,)). `message(count, rows)`: the IndexError's,
    which carries the output as `e.partial`."""
    (table_name, table), (index_name, index) = arrays.items()
    _positive_given(name, **blocks)
    side = _side(name, dict(arrays, errors=errors))
    (table,), dtype = side.same_type(exact=True, **{table_name: table})
    index = side.ints(index, index_name)
    index_shape = tuple(index.shape)
    index = index.reshape(-1)
    table_rows, dim = _rank(name, table_name, table, 2, "[rows, columns]")
    cols_name = list(blocks)[1]
    blocks = dict(blocks, **{cols_name: _row_block(side, dim, blocks[cols_name])})
    rows = index.shape[0]
    out = side.empty((rows, dim), dtype)
    word = side.errors(errors)
    block_rows, block_cols = blocks.values()
    if rows:   # (rows of no columns: one column block, to count bad indices)
        side.launch(kernel(name, _target=side.target, dtype=dtype,
                           streaming=_streaming(side, out), **blocks),
                    [table, index, out, word, rows, table_rows, dim],
                    [_cdiv(rows, block_rows), max(_cdiv(dim, block_cols), 1)])
    if keep_shape:
        out = out.reshape(index_shape + (dim,))
    out = side.wrap(out, dtype)
    _bad_indices(side, word, errors, lambda c: message(c, table_rows), out)
    return out


def paged_kv_gather(cache, block_table, seq_lens, max_len=None, block_t=8, block_w=None,
                    errors=None):
    """Contiguous [batch, max_len, ...] from a paged cache [num_blocks,
    block_size, ...]: out[b, t] = cache[block_table[b, t // block_size],
    t % block_size] for t < seq_lens[b], zeros beyond. A token whose page
    is past the table or outside the cache reads zeros and raises
    IndexError (the output as `e.partial`), or is counted in `errors`.
    cache: float32, float16 or kiln.bf16 (out has its type), or a PyTorch
    CUDA tensor (block_table and
    seq_lens then CUDA tensors of any integer type, or numpy). max_len
    defaults to max(seq_lens), which on PyTorch waits for the device."""
    name = "paged_kv_gather"
    _positive_given(name, block_t=block_t, block_w=block_w)
    side = _side(name, dict(cache=cache, block_table=block_table, seq_lens=seq_lens,
                            errors=errors))
    (cache,), dtype = side.same_type(exact=True, cache=cache)
    if len(cache.shape) < 2:
        raise ValueError(f"{name}: cache must be [num_blocks, block_size, ...], got shape "
                         f"{tuple(cache.shape)}")
    _rank(name, "block_table", block_table, 2, "[batch, max_blocks]")
    if isinstance(side, _Host) and (np.asarray(seq_lens) < 0).any():
        raise ValueError(f"{name}: seq_lens must be >= 0")
    if max_len is None:
        max_len = side.maximum(seq_lens)
        if max_len < 0:
            raise ValueError(f"{name}: seq_lens must be >= 0")
    elif isinstance(max_len, bool) or not isinstance(max_len, (int, np.integer)) or \
            max_len < 0:
        raise ValueError(f"{name}: max_len must be an integer >= 0, got {max_len!r}")
    # (A length past int32 is capped: its tokens past the table are counted.)
    block_table = side.ints(block_table, "block_table")
    seq_lens = side.ints(seq_lens, "seq_lens", wide=2**31 - 1)
    num_blocks, block_size = cache.shape[:2]
    row_shape = tuple(cache.shape[2:])
    width = int(np.prod(row_shape)) if row_shape else 1
    block_w = _row_block(side, width, block_w)
    batch, max_blocks = block_table.shape
    if tuple(seq_lens.shape) != (batch,):
        raise ValueError(f"paged_kv_gather: seq_lens has shape {tuple(seq_lens.shape)}, "
                         f"expected ({batch},)")
    out = side.empty((batch, max_len) + row_shape, dtype)
    word = side.errors(errors)
    if batch and max_len:   # (no width: one block, to count bad tokens)
        side.launch(kernel("paged_kv_gather", _target=side.target, block_size=block_size,
                           block_t=block_t, block_w=block_w, dtype=dtype,
                           streaming=_streaming(side, out)),
                    [cache, block_table, seq_lens, out, word, batch, max_blocks, num_blocks,
                     max_len, width],
                    [_cdiv(max_len, block_t), max(_cdiv(width, block_w), 1), batch])
    out = side.wrap(out, dtype)
    _bad_indices(side, word, errors,
                 lambda c: f"paged_kv_gather: {c} token(s) map to pages outside the table or "
                           "the cache", out)
    return out


def moe_route(topk_ids, num_experts, errors=None):
    """Groups the (token, k) slots by expert (stable): returns src_rows [rows]
    (token of each grouped row), slot_rows [tokens, k] (row of each slot) and
    expert_offsets [num_experts + 1] (expert e's rows are offsets[e] to
    offsets[e + 1]), all int32. An id outside [0, num_experts) raises
    IndexError (the three as `e.partial`), or is counted in `errors` (its rows then lie outside
    offsets[0] to offsets[num_experts]). topk_ids: numpy, or a PyTorch CUDA
    tensor of any integer type (as torch.topk returns): then computed by
    PyTorch on its device, and the results are CUDA tensors."""
    side = _side("moe_route", dict(topk_ids=topk_ids, errors=errors))
    if isinstance(num_experts, bool) or not isinstance(num_experts, (int, np.integer)) or \
            not 0 <= num_experts < 2**31:
        raise ValueError(f"moe_route: num_experts must be an integer >= 0 and below 2^31 (the "
                         f"offsets are int32), got {num_experts!r}")
    if isinstance(side, _Host):
        topk_ids = np.asarray(topk_ids)
        if topk_ids.dtype.kind not in "iu" and topk_ids.size:
            raise TypeError(f"moe_route: topk_ids must be integers, got {topk_ids.dtype}")
    elif topk_ids.dtype in _torch_non_integer(side.torch):
        raise TypeError(f"moe_route: topk_ids must be integers, got {topk_ids.dtype}")
    tokens, k = _rank("moe_route", "topk_ids", topk_ids, 2, "[tokens, k]")
    word = side.errors(errors)
    if isinstance(side, _Host):
        flat = topk_ids.reshape(-1)
        order = np.argsort(flat, kind="stable")
        word.reshape(-1)[:1] += np.count_nonzero((flat < 0) | (flat >= num_experts))
        src_rows = (order // k).astype(np.int32)
        slot_rows = np.empty(flat.size, np.int32)
        slot_rows[order] = np.arange(flat.size, dtype=np.int32)
        offsets = np.searchsorted(flat[order], np.arange(num_experts + 1)).astype(np.int32)
    else:
        torch = side.torch
        flat = topk_ids.reshape(-1).to(torch.int64)
        order = torch.argsort(flat, stable=True)
        word.view(-1)[:1].add_(((flat < 0) | (flat >= num_experts)).sum().to(torch.int32))
        src_rows = (order // k).to(torch.int32)
        slot_rows = torch.empty(flat.shape[0], device=side.dev, dtype=torch.int32)
        slot_rows[order] = torch.arange(flat.shape[0], device=side.dev, dtype=torch.int32)
        offsets = torch.searchsorted(flat[order].contiguous(), torch.arange(
            num_experts + 1, device=side.dev, dtype=torch.int64)).to(torch.int32)
    routed = src_rows, slot_rows.reshape(tokens, k), offsets
    _bad_indices(side, word, errors,
                 lambda c: f"moe_route: {c} expert id(s) outside [0, {num_experts})", routed)
    return routed


def moe_permute(x, src_rows, block_r=8, block_h=None, errors=None):
    """out[r] = x[src_rows[r]] (rows grouped by expert; -1 rows are zero; a
    row outside [-1, tokens) reads zeros and raises IndexError, with the
    output as `e.partial`, or is counted in `errors`). x: float32, float16 or kiln.bf16 (out has its
    type), or a PyTorch CUDA tensor (src_rows then any integer CUDA tensor,
    or numpy)."""
    return _gather_rows("moe_permute", dict(x=x, src_rows=src_rows), errors,
                        dict(block_r=block_r, block_h=block_h),
                        lambda c, rows: f"moe_permute: {c} source row(s) outside [-1, {rows})")


def _unpermute_blocks(side, hidden, block_t, block_h):
    """moe_unpermute's blocks: those given; else 16 tokens x 128 columns on
    GPU targets, and on the host the row in the fewest blocks of at most
    4096 columns (whole vectors of 8) over 16, 8 or 4 tokens (a tile of at
    most 16384 elements). 2048 tokens x top-4 on AVX2, against 16 x 128:
    0.42x the time at 7168 columns (4 x 3584), 0.31x at 2880, 0.38x at 1000
    (with the kernel's register loop); each gathered row read in 512-byte
    pieces was the cost (docs/performance.md)."""
    if _gpu_target(side.target):
        return block_t or 16, block_h or 128
    block_h = block_h or _even_blocks(hidden, 4096, 8)
    return block_t or (16 if block_h <= 1024 else 8 if block_h <= 2048 else 4), block_h


def moe_unpermute(y, slot_rows, weights, block_t=None, block_h=None, errors=None):
    """out[t] = sum_k weights[t, k] * y[slot_rows[t, k]] (f32 accumulation;
    -1 slots are skipped; a slot outside [-1, rows) is skipped too and
    raises IndexError, the output as `e.partial`, or is counted in
    `errors`). y: float32, float16 or
    kiln.bf16 (out has its type), or a PyTorch CUDA tensor; weights are
    float32 (converted). Blocks: _unpermute_blocks."""
    name = "moe_unpermute"
    _positive_given(name, block_t=block_t, block_h=block_h)
    side = _side(name, dict(y=y, slot_rows=slot_rows, weights=weights, errors=errors))
    (y,), dtype = side.same_type(y=y)
    slot_rows, weights = side.ints(slot_rows, "slot_rows"), side.f32(weights, "weights")
    rows, hidden = _rank(name, "y", y, 2, "[rows, hidden]")
    tokens, k = _rank(name, "slot_rows", slot_rows, 2, "[tokens, k]")
    if tuple(weights.shape) != (tokens, k):
        raise ValueError(f"moe_unpermute: weights has shape {tuple(weights.shape)}, expected "
                         f"{(tokens, k)} like slot_rows")
    out = side.empty((tokens, hidden), dtype)
    word = side.errors(errors)
    block_t, block_h = _unpermute_blocks(side, hidden, block_t, block_h)
    if tokens:   # (no hidden columns: one column block, to count bad slots)
        side.launch(kernel("moe_unpermute", _target=side.target, block_t=block_t,
                           block_h=block_h, dtype=dtype),
                    [y, slot_rows, weights, out, word, tokens, k, rows, hidden],
                    [_cdiv(tokens, block_t), max(_cdiv(hidden, block_h), 1)])
    out = side.wrap(out, dtype)
    _bad_indices(side, word, errors,
                 lambda c: f"moe_unpermute: {c} slot(s) outside [-1, {rows})", out)
    return out


# ---------------------------------------------------------------------------
# Block-sparse attention
# ---------------------------------------------------------------------------


def mod_source(block, mask_mod=None, score_mod=None, block_kv=None):
    """IR (one module) of the @kiln.jit functions to fuse, see _add_mod.
    `block` query rows by `block_kv` keys (default: `block`)."""
    from . import _kiln
    b = _kiln.Builder()
    shape = (block, block_kv or block)
    if mask_mod is not None:
        _add_mod(b, mask_mod, "mask_mod", shape)
    if score_mod is not None:
        _add_mod(b, score_mod, "score_mod", shape)
    return b.text(True)


def _add_mod(b, fn, kind, shape):
    """IR of a @kiln.jit mask_mod(b, h, q_idx, kv_idx) or
    score_mod(score, b, h, q_idx, kv_idx), built by the front end as a
    function the attention generator inlines into its kernel. For a
    (block, block_kv) `shape`: q_idx is a [block, 1] int32 tile, kv_idx
    [1, block_kv], b and h int32 scalars, score a [block, block_kv] float32
    tile; mask_mod returns booleans, score_mod scores."""
    from . import language as kl
    from .frontend import CodeGen, CompilationError, KilnError, Tile
    from .jit import JITFunction
    if not isinstance(fn, JITFunction):
        raise TypeError(f"{kind} must be a @kiln.jit function")
    params = list(fn.signature.parameters)
    want = 4 if kind == "mask_mod" else 5
    if len(params) != want:
        raise TypeError(f"{kind} takes {want} parameters "
                        f"({'b, h, q_idx, kv_idx' if want == 4 else 'score, b, h, q_idx, kv_idx'}),"
                        f" {fn.__name__} has {len(params)}")
    tree, first, source, filename = fn.parse()
    cg = CodeGen(fn.fn, b, filename, first, source)
    cg.in_helper = 1
    i32 = b.scalar_type("i32")
    f32 = b.scalar_type("f32")
    specs = [("b", i32, kl.int32, ()), ("h", i32, kl.int32, ()),
             ("q_idx", b.tile_type([shape[0], 1], i32), kl.int32, (shape[0], 1)),
             ("kv_idx", b.tile_type([1, shape[1]], i32), kl.int32, (1, shape[1]))]
    if kind == "score_mod":
        specs.insert(0, ("score", b.tile_type(list(shape), f32), kl.float32, shape))
    fdef = tree.body[0]
    b.set_loc(filename, first + fdef.lineno - 1, fdef.col_offset + 1)
    args = b.begin_function(kind, [s[1] for s in specs])
    for name, v, spec in zip(params, args, specs):
        cg.assign(name, Tile(v, spec[2], spec[3]))
    cg.visit_stmts(fdef.body)
    result = cg.returned
    if not isinstance(result, (Tile, int, float, bool)):
        raise CompilationError(f"{kind} {fn.__name__} must return a tile", filename,
                               first + fdef.lineno - 1, 0)
    try:
        result = cg.to_tile(result)
        if kind == "mask_mod":
            result = cg.broadcast_to(cg.truth(result), shape)
        else:
            result = cg.broadcast_to(cg.cast(result, kl.float32), shape)
    except KilnError as e:
        raise CompilationError(f"{kind} {fn.__name__}: {e}", filename,
                               first + fdef.lineno - 1, 0) from None
    b.end_function([result.value])


def _block_sizes(block, block_kv, name="block_mask"):
    block_kv = block if block_kv is None else block_kv
    for what, v in (("block", block), ("block_kv", block_kv)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"{name}: {what} must be a positive integer, got {v!r}")
    return int(block), int(block_kv)


# Marks a block mask whose arrays block_mask() checked and copied to a CUDA
# device: block_sparse_attention trusts those without copying them back.
_CHECKED_ON_DEVICE = object()


def block_mask(mask_mod, batch, heads, seq_q, seq_kv, block=None, block_kv=None, device=None):
    """FlexAttention-style block mask from ``mask_mod(b, h, q_idx, kv_idx)``:
    a @kiln.jit function (evaluated by a kernel, the same code the attention
    kernel fuses) or a numpy-vectorized Python function returning booleans.
    Query blocks have `block` rows (default 64, and 128 for a mask built
    for a Hopper GPU, `device` with the sm_90a target, as flex_attention's
    default: there block 128 at 8 warps measured 0.65x SDPA against 0.50x
    at block 64 and 4 warps, docs/performance.md; on the host, fewer than
    64 queries take the next power of two, keys then in blocks of 64), key
    blocks `block_kv` keys (default `block`); block_sparse_attention runs
    with the same sizes. Returns a dict of the kernel's kv_num/kv_idx (partial blocks)
    and full_num/full_idx (fully visible), int32 numpy arrays; with `device` (a torch.device,
    "cuda:N" or an index), checked once and copied there as PyTorch tensors,
    so that block_sparse_attention on PyTorch tensors of exactly this shape
    copies and checks nothing per call (a host mask is copied to the device
    by each call, and PyTorch's copy from pageable memory waits for the
    stream)."""
    if block is None:
        block = 64
        if device is not None:
            from .jit import gpu_target
            if gpu_target() == "sm_90a":
                block = 128
        elif 0 < seq_q < 64 and isinstance(seq_q, (int, np.integer)) and \
                not _gpu_target(None):
            # Few queries (decoding: one per sequence) on the host: a query
            # block of the next power of two, keys still in blocks of 64. A
            # block of 64 computed 63 rows of padding for each query: GQA
            # decoding (32 query heads, 8 KV heads, 4096 keys, D 128) took
            # 72 ms, 9.5 ms with a block of 1 (docs/performance.md).
            block = 1 << (int(seq_q) - 1).bit_length()
            if block_kv is None:
                block_kv = 64
    block, block_kv = _block_sizes(block, block_kv)
    if not callable(mask_mod):
        raise TypeError(f"block_mask: mask_mod must be a @kiln.jit or Python function of "
                        f"(b, h, q_idx, kv_idx), got {type(mask_mod).__name__}")
    for n, v in (("batch", batch), ("heads", heads), ("seq_q", seq_q), ("seq_kv", seq_kv)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"block_mask: {n} must be an integer >= 0, got {v!r}")
    if min(batch, heads, seq_q, seq_kv) == 0:
        # No query or key block: nothing for mask_mod to decide (and no
        # program for its kernel to run).
        mask = _block_mask_on_host(lambda *a: True, batch, heads, seq_q, seq_kv, block,
                                   block_kv)
    elif type(mask_mod).__name__ == "JITFunction":
        mask = _block_mask_by_kernel(mask_mod, batch, heads, seq_q, seq_kv, block, block_kv)
    else:
        mask = _block_mask_on_host(mask_mod, batch, heads, seq_q, seq_kv, block, block_kv)
    mask.update(zip(_MASK_SIZES, (batch, heads, seq_q, seq_kv)))
    mask["mask_mod"] = mask_mod
    if device is None:
        return mask
    import torch
    if not hasattr(device, "type"):
        device = torch.device(f"cuda:{device}" if isinstance(device, int) else device)
    if device.type != "cuda":
        raise ValueError(f"block_mask: device must be a CUDA device, got {device}")
    _check_mask("block_mask", mask, batch * heads, seq_q, seq_kv)
    for n in _MASK_ARRAYS:
        mask[n] = torch.from_numpy(mask[n]).to(device)
    mask["_checked"] = _CHECKED_ON_DEVICE
    return mask


_MASK_ARRAYS = ("kv_num", "kv_idx", "full_num", "full_idx")
_MASK_SIZES = ("batch", "heads", "seq_q", "seq_kv")


def _block_mask_on_host(mask_mod, batch, heads, seq_q, seq_kv, block, block_kv):
    nqb, nkb = _cdiv(seq_q, block), _cdiv(seq_kv, block_kv)
    maxb = max(nkb, 1)
    kv_num = np.zeros((batch * heads, nqb), np.int32)
    full_num = np.zeros((batch * heads, nqb), np.int32)
    kv_idx = np.full((batch * heads, nqb, maxb), -1, np.int32)
    full_idx = np.full((batch * heads, nqb, maxb), -1, np.int32)
    q = np.arange(nqb * block)[:, None]
    kv = np.arange(nkb * block_kv)[None, :]
    inside = (q < seq_q) & (kv < seq_kv)
    hides = False
    for b in range(batch):
        for h in range(heads):
            vis = np.asarray(mask_mod(b, h, q, kv), dtype=bool)
            vis = np.broadcast_to(vis, inside.shape) & inside
            blocks = vis.reshape(nqb, block, nkb, block_kv)
            seen = blocks.sum(axis=(1, 3))
            total = inside.reshape(nqb, block, nkb, block_kv).sum(axis=(1, 3))
            hides = hides or bool(((seen > 0) & (seen < total)).any())
            row = b * heads + h
            for qb in range(nqb):
                for kb in range(nkb):
                    if seen[qb, kb] == 0:
                        continue
                    full = seen[qb, kb] == total[qb, kb] and (kb + 1) * block_kv <= seq_kv
                    if full:
                        full_idx[row, qb, full_num[row, qb]] = kb
                        full_num[row, qb] += 1
                    else:
                        kv_idx[row, qb, kv_num[row, qb]] = kb
                        kv_num[row, qb] += 1
    return {"kv_num": kv_num, "kv_idx": kv_idx, "full_num": full_num, "full_idx": full_idx,
            "block": block, "block_kv": block_kv, "nqb": nqb, "maxb": maxb,
            "hides_keys": hides}


def _kv_config(block, block_kv):
    """The kernels' block_kv setting: absent for square blocks, so their
    cache keys (and recorded bundles) do not depend on how it was spelled."""
    return {} if block_kv == block else {"block_kv": block_kv}


def _block_mask_by_kernel(mask_mod, batch, heads, seq_q, seq_kv, block, block_kv):
    nqb, nkb = _cdiv(seq_q, block), _cdiv(seq_kv, block_kv)
    counts = np.zeros((batch * heads, nqb, nkb), np.int32)
    kernel("block_mask_counts", mods=mod_source(block, mask_mod=mask_mod, block_kv=block_kv),
           block=block, **_kv_config(block, block_kv)).launch(
        [_ptr(counts), heads, seq_q, seq_kv, nqb, nkb], [nqb, nkb, batch * heads])
    qn = np.minimum(block, seq_q - np.arange(nqb) * block)
    kn = np.minimum(block_kv, seq_kv - np.arange(nkb) * block_kv)
    total = qn[:, None] * kn[None, :]
    maxb = max(nkb, 1)
    full = (counts == total[None]) & ((np.arange(nkb) + 1) * block_kv <= seq_kv)[None, None, :]
    partial = (counts > 0) & ~full
    out = {"block": block, "block_kv": block_kv, "nqb": nqb, "maxb": maxb,
           "hides_keys": bool(((counts > 0) & (counts < total[None])).any())}
    for name, sel in (("kv", partial), ("full", full)):
        num = sel.sum(axis=2).astype(np.int32)
        idx = np.full((batch * heads, nqb, maxb), -1, np.int32)
        rows, qbs, kbs = np.nonzero(sel)
        pos = np.zeros_like(num)
        for r, qb_, kb_ in zip(rows, qbs, kbs):
            idx[r, qb_, pos[r, qb_]] = kb_
            pos[r, qb_] += 1
        out[f"{name}_num"] = num
        out[f"{name}_idx"] = idx
    return out


def _scale_number(name, scale, default):
    """An attention's `scale` as a Python float (`default` for None); a
    string, array or bool is refused (float("0.5") was taken as 0.5)."""
    if scale is None:
        return float(default)
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, (int, float, np.number)):
        raise TypeError(f"{name}: scale must be a number, got {type(scale).__name__}")
    return float(scale)


def _check_mask(name, mask, rows, S, Skv):
    """(block, block_kv, nqb, maxb, arrays) of a host block mask for `rows`
    (batch x heads) query heads of S rows and Skv keys, its arrays checked:
    every listed key block inside the keys, full blocks not cut by their
    end; `arrays` the four as contiguous int32 numpy arrays."""
    missing = [n for n in ("block", "nqb", "maxb") + _MASK_ARRAYS if n not in mask]
    if missing:
        raise ValueError(f"{name}: the mask lacks {', '.join(missing)}: pass block_mask()'s "
                         "dict")
    block, block_kv = _block_sizes(mask["block"], mask.get("block_kv"), name)
    nqb, maxb = mask["nqb"], mask["maxb"]
    for n, v in (("nqb", nqb), ("maxb", maxb)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0:
            raise ValueError(f"{name}: mask[{n!r}] must be an integer >= 0, got {v!r}")
    if nqb != _cdiv(S, block) or maxb < _cdiv(Skv, block_kv):
        raise ValueError(f"{name}: the block mask was built for another shape "
                         f"({nqb} query blocks of {block}, {maxb} key blocks of {block_kv}); "
                         f"q has {S} rows and k {Skv}")
    for n in _MASK_ARRAYS:
        want = (rows, nqb) + ((maxb,) if n.endswith("idx") else ())
        if np.shape(mask[n]) != want:
            raise ValueError(f"{name}: mask[{n!r}] has shape "
                             f"{np.shape(mask[n])}, expected {want} (batch x heads, ...)")
    nkb = _cdiv(Skv, block_kv)
    arrays = [_i32(mask[n], name=f"mask[{n!r}]", what=name) for n in _MASK_ARRAYS]
    # (One pass in C++: the same checks in numpy took 35 us per call.)
    bad = _ext.check_block_mask(*arrays, rows, nqb, maxb, nkb, block_kv, Skv)
    if bad == "full_end":
        # Full blocks skip the key mask: one cut by the sequence end would
        # read keys past it (block_mask lists those as partial).
        raise ValueError(f"{name}: mask['full_idx'] lists a key block "
                         f"that ends past seq_kv {Skv} (the mask was built for "
                         f"another key length); it must be partial")
    if bad == "twice":
        raise ValueError(f"{name}: the block mask lists a key block twice for one query "
                         f"block (in kv_idx and full_idx, or twice in one): its keys would "
                         f"count twice in the softmax")
    if bad is not None:  # a count outside 0..maxb, or a block outside the keys
        raise ValueError(f"{name}: mask[{bad.split('_')[0] + '_idx'!r}] lists a key "
                         f"block outside 0..{nkb - 1}")
    return block, block_kv, nqb, maxb, arrays


def _device_mask(name, mask, rows, device):
    """The arrays of a block mask already on the device: only one that
    block_mask(device=...) checked and copied, used at the shape it was
    built for, on q's device."""
    if mask.get("_checked") is not _CHECKED_ON_DEVICE:
        raise ValueError(f"{name}: a block mask with device arrays must come from "
                         "block_mask(..., device=...), which checks them; pass host "
                         "(numpy) arrays otherwise")
    arrays = [mask[n] for n in _MASK_ARRAYS]
    # (The sizes it was built for are compared by _attention_plan: they
    # must be there.)
    if any(mask.get(n) is None for n in _MASK_SIZES):
        raise ValueError(f"{name}: the device block mask lacks the sizes it was built for "
                         f"({', '.join(_MASK_SIZES)}): pass block_mask(..., device=...)'s "
                         "dict as it came")
    if arrays[0].shape[0] != rows:
        raise ValueError(f"{name}: the block mask's arrays have {arrays[0].shape[0]} rows; "
                         f"q has {rows} heads (batch x heads)")
    if any(a.device != device for a in arrays):
        raise ValueError(f"{name}: the block mask is on {arrays[0].device}, q on {device}")
    return arrays


def _attention_plan(name, shapes, mask, mask_kind, doc_shape, scale, out_dtype, device=None):
    """The checks kiln.ops.block_sparse_attention makes on the host, for numpy
    and PyTorch inputs alike: (block, block_kv, nqb, maxb, the four block-mask
    arrays: contiguous int32 numpy ones, or the PyTorch tensors of a mask
    block_mask() put on `device`, the float32 scale). `shapes`: q's, k's,
    v's."""
    # (doc_ids is read by the document mask only: without them it would
    # see one document, and with another mask they would be ignored.)
    if (mask_kind == "document") != (doc_shape is not None):
        raise ValueError(f"{name}: mask_kind 'document' needs doc_ids" if doc_shape is None
                         else f"{name}: doc_ids is read by mask_kind 'document' only, "
                              f"got mask_kind {mask_kind!r}")
    if out_dtype not in ("f32", "bf16", "f16"):
        raise ValueError(f"{name}: out_dtype must be one of f32, bf16, f16, got {out_dtype!r}")
    if not isinstance(mask, dict):
        # (None too: a dense attention is block_mask(lambda b, h, q, k: q >= 0, ...).)
        raise TypeError(f"{name}: mask must be block_mask()'s dict, got "
                        f"{type(mask).__name__}")
    qs, ks, vs = (tuple(x) for x in shapes)
    if len(qs) != 4 or len(ks) != 4 or ks != vs or qs[0] != ks[0] or qs[3] != ks[3]:
        raise ValueError(f"{name}: q [B, Hq, S, D], k and v [B, Hkv, Skv, D] expected, got "
                         f"{qs}, {ks}, {vs}")
    (B, Hq, S, D), (_, Hkv, Skv, _) = qs, ks
    if D < 1:
        raise ValueError(f"{name}: the head dim must be positive, got {D}")
    if (Hq % Hkv if Hkv else Hq):
        raise ValueError(f"{name}: query heads ({Hq}) must be a multiple of key/value heads "
                         f"({Hkv})")
    if doc_shape is not None and tuple(doc_shape) != (B, max(S, Skv)):
        raise ValueError(f"{name}: doc_ids has shape {tuple(doc_shape)}, expected "
                         f"(batch, max(seq_q, seq_kv)) = {(B, max(S, Skv))}")
    # (block_mask() records the sizes it was built for: checked, since one
    # built for another split of batch x heads, or another sequence length
    # with as many blocks, has the right array shapes and wrong lists. A
    # dict made by hand may leave them out.)
    built = {n: mask[n] for n in _MASK_SIZES if mask.get(n) is not None}
    used = dict(zip(_MASK_SIZES, (B, Hq, S, Skv)))
    if any(used[n] != v for n, v in built.items()):
        raise ValueError(f"{name}: the block mask was built for another shape ("
                         + ", ".join(f"{n} {v}" for n, v in built.items()) + "); q and k have "
                         + ", ".join(f"{n} {used[n]}" for n in built))
    if device is not None and any(hasattr(mask[n], "data_ptr") for n in _MASK_ARRAYS):
        arrays = _device_mask(name, mask, B * Hq, device)
        block, nqb, maxb = mask["block"], mask["nqb"], mask["maxb"]
        block_kv = mask.get("block_kv", block)
    else:
        block, block_kv, nqb, maxb, arrays = _check_mask(name, mask, B * Hq, S, Skv)
    scale = _scale_number(name, scale, 1.0 / np.sqrt(D))
    # The kernel takes it as a float32 and multiplies it by log2(e): checked
    # as one, and that product must be finite too (inf * 0 gave NaN rows).
    with np.errstate(over="ignore", under="ignore"):
        scale32 = np.float32(scale)
        finite = np.isfinite(scale32 * np.float32(math.log2(math.e)))
    if not (finite and scale32 > 0):
        raise ValueError(f"{name}: scale must be a positive float below "
                         f"{np.finfo(np.float32).max / math.log2(math.e):.4g} "
                         f"(as a float32), got {scale}")
    return block, block_kv, nqb, maxb, arrays, float(scale32)


def _doc_ids(name, doc_ids):
    """Host doc_ids as int32: integers that fit (labels are compared, so
    wider ones cannot be mapped to an error value as indices are)."""
    d = np.asarray(doc_ids)
    if d.dtype.kind not in "iu" and d.size:
        raise TypeError(f"{name}: doc_ids must be integers, got {d.dtype}")
    if d.size and (d.min() < -2**31 or d.max() > 2**31 - 1):
        raise ValueError(f"{name}: doc_ids must fit in int32")
    return np.ascontiguousarray(d, dtype=np.int32)


def _attention_kernel(block, block_kv, D, mask_kind, window, prefix, group, softcap, dtype,
                      overlap, out_dtype, mask_mod, score_mod, target=None, num_warps=None,
                      profile=False, one_loop=False, pack_gqa=False):
    mods = ""
    if mask_mod is not None or score_mod is not None:
        mods = mod_source(block, mask_mod=mask_mod, score_mod=score_mod, block_kv=block_kv)
    return kernel("block_sparse_attention", mods=mods, _target=target, _num_warps=num_warps,
                  head_dim=D,
                  block=block, **_kv_config(block, block_kv), mask=mask_kind, window=window,
                  prefix=prefix, gqa_group=group, softcap=softcap, dtype=dtype,
                  **({"overlap": 1} if overlap else {}),
                  **({"profile": 1} if profile else {}),
                  **({"one_loop": 1} if one_loop else {}),
                  **({"pack_gqa": 1} if pack_gqa else {}),
                  **({"out_dtype": out_dtype} if out_dtype != "f32" else {}))


def _packs_gqa(arrays, group, block, mask_mod, score_mod, profile):
    """Whether a host attention takes each GQA group's query heads in one
    program (the kernel's pack_gqa): few query rows (block x group <= 64, as
    decoding's), nothing that depends on the head (no mask_mod or
    score_mod), and the same block lists for every head of a group (those of
    the group's first head are read). Its keys and values are then read once
    per group: GQA decoding (32 query heads over 8 KV heads, 4096 keys) took
    0.55x the time (docs/performance.md)."""
    if group == 1 or block * group > 64 or mask_mod is not None or score_mod is not None \
            or profile:
        return False
    return _ext.groups_share_rows(arrays, group)


def _block_sparse_attention_torch(q, k, v, mask, mask_kind="none", window=256, prefix=0,
                                  doc_ids=None, softcap=0.0, scale=None, mask_mod=None,
                                  score_mod=None, overlap=False, out_dtype="f32",
                                  profile=False, one_loop=False):
    """kiln.ops.block_sparse_attention on PyTorch CUDA tensors: the kernel
    compiled for the device's GPU (as @kiln.jit does), outputs allocated by
    PyTorch on q's device, the host-built block mask copied there."""
    name = "block_sparse_attention"
    tb = _Torch(name, q, "q")
    torch = tb.torch
    for n, t in (("k", k), ("v", v)):
        if not (isinstance(t, torch.Tensor) and t.is_cuda and t.device == q.device):
            raise TypeError(f"{name}: q is a PyTorch CUDA tensor, so '{n}' must be one on "
                            f"the same device ({q.device})")
    dtypes = tb.types
    if q.dtype not in dtypes or k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"{name}: q, k and v must all be bfloat16, float16 or float32, got "
                        f"{q.dtype}, {k.dtype}, {v.dtype}")
    doc_shape = (None if doc_ids is None else tuple(doc_ids.shape)
                 if hasattr(doc_ids, "shape") else np.shape(doc_ids))
    block, block_kv, nqb, maxb, arrays, scale = _attention_plan(
        name, (q.shape, k.shape, v.shape), mask, mask_kind, doc_shape, scale, out_dtype,
        device=q.device)
    mask_mod = _mask_rule(name, mask, mask_kind, mask_mod)
    B, Hq, S, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    dev = q.device
    out = torch.empty((B, Hq, S, D), device=dev, dtype={
        "f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[out_dtype])
    lse = torch.empty((B, Hq, S), device=dev, dtype=torch.float32)
    stamps = (torch.full((nqb * B * Hq, 6), -1, device=dev, dtype=torch.int64) if profile
              else None)
    if lse.numel() == 0:  # no batch, heads or queries: no programs
        return (out, lse, stamps) if profile else (out, lse)
    target = tb.target
    # bf16/f16 query blocks of 128 rows on sm_90a: two warpgroups (8 warps),
    # the fastest shape measured on an H200 (docs/ops.md), unless
    # $KILN_NUM_WARPS says otherwise.
    warps = 8 if (target == "sm_90a" and block >= 128 and dtypes[q.dtype] != "f32"
                  and "KILN_NUM_WARPS" not in os.environ) else None
    kern = _attention_kernel(block, block_kv, D, mask_kind, window, prefix, Hq // Hkv,
                             softcap, dtypes[q.dtype], overlap, out_dtype, mask_mod,
                             score_mod, target=target, num_warps=warps, profile=profile,
                             one_loop=one_loop)
    marr = [a if isinstance(a, torch.Tensor) else torch.from_numpy(a).to(dev) for a in arrays]
    if doc_ids is None:
        docs = torch.zeros((B, max(S, Skv)), device=dev, dtype=torch.int32)
    elif isinstance(doc_ids, torch.Tensor):
        if doc_ids.dtype in _torch_non_integer(torch):
            raise TypeError(f"{name}: doc_ids must be integers, got {doc_ids.dtype}")
        # Labels past int32 would wrap into other documents' (a wait, for
        # int64 ids only: pass int32 to skip it).
        if doc_ids.dtype is torch.int64 and doc_ids.numel() and int(
                ((doc_ids < -2**31) | (doc_ids > 2**31 - 1)).sum().item()):
            raise ValueError(f"{name}: doc_ids must fit in int32")
        docs = doc_ids.to(device=dev, dtype=torch.int32).contiguous()
    else:
        docs = torch.from_numpy(_doc_ids(name, doc_ids)).to(dev)
    tb.launch(kern, [q.contiguous(), k.contiguous(), v.contiguous(), out, lse, *marr, docs,
                     B, Hq, S, Skv, nqb, maxb, scale] + ([stamps] if profile else []),
              [nqb, B * Hq])
    return (out, lse, stamps) if profile else (out, lse)


def _mask_rule(name, mask, mask_kind, mask_mod):
    """The mask_mod a block-sparse attention applies inside partial blocks:
    the one passed, or without one, that of the block mask (as
    flex_attention takes block_mask.mask_mod) when one of its partial blocks
    hides keys inside the sequence, with the mask_kind if one is passed too
    (a kind alone dropped the rule's other terms: a dilated causal mask run
    as "causal" was off by 2.2). Those blocks would otherwise be computed
    without the rule, a wrong answer. A plain Python rule cannot be fused
    into the kernel: with a mask_kind the kind stands for it, without one
    the mask is refused."""
    if mask_mod is not None or not isinstance(mask, dict) or not mask.get("hides_keys"):
        return mask_mod
    rule = mask.get("mask_mod")
    if type(rule).__name__ == "JITFunction":
        return rule
    if mask_kind != "none":
        return None
    raise ValueError(f"{name}: the block mask was built from a rule that hides keys inside "
                     f"its partial blocks, and neither mask_kind nor mask_mod was passed: "
                     f"pass the rule ({getattr(rule, '__name__', rule)!r} is a plain Python "
                     f"function, which the kernel cannot apply; build the mask from a "
                     f"@kiln.jit mask_mod, or pass the matching mask_kind)")


def block_sparse_attention(q, k, v, mask, mask_kind="none", window=256, prefix=0,
                           doc_ids=None, softcap=0.0, scale=None, mask_mod=None,
                           score_mod=None, overlap=False, out_dtype="f32", profile=False,
                           one_loop=False):
    """q [B, Hq, S, D], k/v [B, Hkv, Skv, D] (Hq a multiple of Hkv: GQA/MQA),
    `mask` from block_mask(). Inside partial blocks the kernel applies the
    built-in `mask_kind` (none, causal, sliding_window, prefix_lm, document)
    and/or a @kiln.jit `mask_mod(b, h, q_idx, kv_idx)`: they must be the rule
    the block mask was built from. Without a mask_mod, the block mask's own
    @kiln.jit mask_mod is applied (with the mask_kind, if one is passed) when
    a partial block hides keys inside the sequence (as flex_attention
    applies block_mask.mask_mod); a mask built from a plain Python rule that
    does so is refused (ValueError) unless a mask_kind stands for it, since
    those blocks would be computed unmasked. A row that sees no key gives
    out 0 and lse -inf; NaN in v at a key hidden inside a computed block
    makes the rows that see keys in that block NaN, as in FlashAttention. A @kiln.jit `score_mod(score, b, h, q_idx,
    kv_idx)` rewrites scores (before soft-capping). Both are fused into the
    kernel. q, k and v are float32, float16, or all three kiln.bf16-wrapped
    uint16 arrays; scores, softmax and the outputs are float32. `doc_ids`
    [B, max(S, Skv)] int32 is the document of each position, queries' and
    keys' alike (mask_kind "document"). `scale` (default 1 / sqrt(D)) must be
    a positive float. `overlap`: on sm_90a, compute the next full block's
    scores during this one's softmax (off by default: it measured slower on
    an H200, docs/performance.md). `out_dtype`: "f32" (default), "bf16" (out
    a kiln.bf16-wrapped uint16 array) or "f16": the normalized float32
    output rounded once, as flex_attention returns it for bf16 inputs.
    Returns (out [B, Hq, S, D], lse [B, Hq, S] float32).

    `profile=True` also returns where each program's time went: stamps, int64
    [nqb * B * Hq, 6], row i the i-th program in launch order (query block
    nqb - 1 - i // (B * Hq), batch x head i % (B * Hq)): its processor's
    cycle counter (kl.clock) at entry, before and after the partial blocks'
    loop, after the full blocks' loop and after lse's store (before out's,
    whose TMA store would otherwise wait for its writes), then that
    processor (kl.processor_id: the SM). The kernel is otherwise the same
    (the same results, bit for bit). `one_loop=True`: the partial and the
    full blocks in one loop, the mask under a branch (one pipeline fill per
    program instead of two; the same results, bit for bit; not measured on
    a GPU yet, and not combined with `overlap`).

    q, k and v may instead all be PyTorch CUDA tensors (bfloat16, float16 or
    float32; non-contiguous ones are copied): the kernel runs on their GPU
    and out and lse are PyTorch tensors there (out in `out_dtype`: bf16 is
    torch.bfloat16). The mask is block_mask()'s dict: host arrays are checked
    and copied per call, block_mask(..., device=...) puts them on the device
    once (on an H100/H200 with block=128 by default: 8 warps are then
    used)."""
    if _is_torch_cuda(q):
        return _block_sparse_attention_torch(q, k, v, mask, mask_kind, window, prefix, doc_ids,
                                             softcap, scale, mask_mod, score_mod, overlap,
                                             out_dtype, profile, one_loop)
    return _block_sparse_attention_host(q, k, v, mask, mask_kind, window, prefix, doc_ids,
                                        softcap, scale, mask_mod, score_mod, overlap, out_dtype,
                                        profile, one_loop)


@_host_only
def _block_sparse_attention_host(q, k, v, mask, mask_kind="none", window=256, prefix=0,
                                 doc_ids=None, softcap=0.0, scale=None, mask_mod=None,
                                 score_mod=None, overlap=False, out_dtype="f32",
                                 profile=False, one_loop=False):
    name = "block_sparse_attention"
    (q, k, v), dtype = _same_type(name, q=q, k=k, v=v)
    if doc_ids is not None:
        doc_ids = _doc_ids(name, doc_ids)
    block, block_kv, nqb, maxb, arrays, scale = _attention_plan(
        name, (q.shape, k.shape, v.shape), mask, mask_kind,
        None if doc_ids is None else doc_ids.shape, scale, out_dtype)
    mask_mod = _mask_rule(name, mask, mask_kind, mask_mod)
    B, Hq, S, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    if doc_ids is None:
        doc_ids = np.zeros((B, max(S, Skv)), np.int32)
    out_types = {"f32": np.float32, "bf16": np.uint16, "f16": np.float16}
    out = _empty(q.shape, out_types[out_dtype])
    lse = _empty((B, Hq, S))
    stamps = np.full((nqb * B * Hq, 6), -1, np.int64)
    result = ((bf16(out) if out_dtype == "bf16" else out), lse) + ((stamps,) if profile else ())
    if lse.size == 0:  # no batch, heads or queries: no programs
        return result
    group = Hq // Hkv
    pack = _packs_gqa(arrays, group, block, mask_mod, score_mod, profile)
    kern = _attention_kernel(block, block_kv, D, mask_kind, window, prefix, group, softcap,
                             dtype, overlap, out_dtype, mask_mod, score_mod, profile=profile,
                             one_loop=one_loop, pack_gqa=pack)
    kern.launch([_ptr(q), _ptr(k), _ptr(v), _ptr(out), _ptr(lse)] + [_ptr(a) for a in arrays] +
                [_ptr(doc_ids), B, Hq, S, Skv, nqb, maxb, scale] +
                ([_ptr(stamps)] if profile else []),
                [nqb, B * (Hkv if pack else Hq)])
    return result


# ---------------------------------------------------------------------------
# DeepSeek sparse attention
# ---------------------------------------------------------------------------


def _indexer_types(side, q, k, k_scale):
    """(q, k, k_scale or None, dtype) for dsa_indexer: both kiln.bf16 /
    float16 / e4m3 fp8 (kiln.fp8(bits, "e4m3"); torch.float8_e4m3fn) as
    they are, anything else converted to float32. k_scale (float32 [S],
    ones when None) goes with e4m3 keys only."""
    def kind(x):
        if isinstance(x, bf16):
            return "bf16"
        if isinstance(x, fp8):
            return "e4m3" if x.format == "e4m3" else "e5m2"
        dt = getattr(x, "dtype", None)
        if _is_torch_cuda(x):
            torch = side.torch
            return {torch.bfloat16: "bf16", torch.float16: "f16"}.get(
                dt, "e4m3" if dt == getattr(torch, "float8_e4m3fn", None) else "f32")
        return "f16" if dt == np.float16 else "f32"
    kq, kk = kind(q), kind(k)
    if "e5m2" in (kq, kk) or ("e4m3" in (kq, kk) and kq != kk):
        raise TypeError(f"dsa_indexer: fp8 q and k must both be e4m3, got {kq} and {kk}")
    if k_scale is not None and kq != "e4m3":
        raise TypeError("dsa_indexer: k_scale goes with e4m3 (fp8) q and k")
    if kq != kk or kq == "f32":
        return side.data32(q, "q"), side.data32(k, "k"), None, "f32"
    if kq == "e4m3":
        if _is_torch_cuda(q):
            for n_, t in (("q", q), ("k", k)):
                if not (_is_torch_cuda(t) and t.device == side.dev):
                    raise TypeError(f"dsa_indexer: '{n_}' must be a PyTorch CUDA tensor on "
                                    f"{side.dev}, like the first array")
            q, k = (t.contiguous().view(side.torch.int8) for t in (q, k))
        else:
            q, k = np.ascontiguousarray(q.array), np.ascontiguousarray(k.array)
        S = k.shape[0]
        scale = side.f32(np.ones(S, np.float32) if k_scale is None else k_scale, "k_scale")
        if tuple(scale.shape) != (S,):
            raise ValueError(f"dsa_indexer: k_scale must be [S] = [{S}], got "
                             f"{tuple(scale.shape)}")
        return q, k, scale, "e4m3"
    (q, k), dtype = side.same_type(q=q, k=k)
    return q, k, None, dtype


def dsa_indexer(q, w, k, q_offset=0, causal=True, block_t=None, block_s=64, k_scale=None):
    """I[t, s] = sum_j w[t, j] * relu(q[t, j] . k[s]); -inf for s > q_offset + t
    when causal; float32. q and k: both float16, both kiln.bf16, or both
    e4m3 fp8 (kiln.fp8(bits, "e4m3"), torch.float8_e4m3fn; the scores are
    then multiplied by k_scale[s], float32 [S], and q's scale belongs in w,
    as DeepSeek-V3.2 keeps them), taken as they are (f32 sums); anything
    else is converted to float32. On PyTorch CUDA tensors the result is
    one. block_t: 16 for float32 (and inputs converted to it), 64 for the
    narrow types (wgmma's rows)."""
    side = _side("dsa_indexer", dict(q=q, w=w, k=k, k_scale=k_scale))
    q, k, k_scale, dtype = _indexer_types(side, q, k, k_scale)
    if block_t is None:
        block_t = 16 if dtype == "f32" else 64
    _positive("dsa_indexer", block_t=block_t, block_s=block_s)
    w = side.data32(w, "w")
    if len(q.shape) != 3 or len(k.shape) != 2 or tuple(w.shape) != tuple(q.shape[:2]) or \
            k.shape[1] != q.shape[2]:
        raise ValueError(f"dsa_indexer: q [T, H, D], w [T, H] and k [S, D] expected, got "
                         f"{tuple(q.shape)}, {tuple(w.shape)}, {tuple(k.shape)}")
    T, H, D = q.shape
    S = k.shape[0]
    # The kernel compares s with q_offset + t in int32.
    if isinstance(q_offset, bool) or not isinstance(q_offset, (int, np.integer)) or \
            not -2**31 <= q_offset <= 2**31 - 1 - max(T - 1, 0):
        raise ValueError(f"dsa_indexer: q_offset must be an integer with q_offset + T - 1 in "
                         f"int32's range, got {q_offset!r} (T = {T})")
    out = side.empty((T, S))
    if T and S and not (H and D):
        # No heads or no channels: every sum is empty, 0 (-inf past the
        # causal limit); the kernel takes at least one of each.
        scores = np.zeros((T, S), np.float32)
        if causal:
            scores[np.arange(S)[None, :] > q_offset + np.arange(T)[:, None]] = -np.inf
        if isinstance(out, np.ndarray):
            out[...] = scores
        else:
            out.copy_(side.torch.from_numpy(scores))
    elif T and S:
        side.launch(kernel("dsa_indexer", _target=side.target, dtype=dtype, index_heads=H,
                           index_dim=D, causal=int(causal), block_t=block_t, block_s=block_s),
                    [q, w, k] + ([k_scale] if dtype == "e4m3" else []) +
                    [out, T, S, q_offset], [_cdiv(T, block_t), _cdiv(S, block_s)])
    return out


def dsa_topk(scores, k, block=256):
    """Indices (int32) of the k largest scores per row that are finite or +inf
    (NaN and -inf never count), in ascending index order; ties to the lower
    index; -1 padding. scores: float32
    (other types are converted), or a PyTorch CUDA tensor."""
    _positive("dsa_topk", block=block)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"dsa_topk: k must be an integer >= 0, got {k!r}")
    side = _side("dsa_topk", dict(scores=scores))
    scores = side.data32(scores, "scores")
    T, S = _rank("dsa_topk", "scores", scores, 2, "[T, S]")
    out = side.empty((T, k), "i32")
    if T and k:
        side.launch(kernel("dsa_topk", _target=side.target, k=k, block=block),
                    [scores, out, T, S], [T])
    return out


def dsa_sparse_attention(q, kv, indices, d_v, scale=None, heads_block=16, block_k=64,
                         errors=None):
    """q [Sq, Hq, Dqk], kv [Skv, Dqk] (values: first d_v columns), indices
    [Sq, topk] (-1 skipped) -> (out [Sq, Hq, d_v], lse [Sq, Hq]) in float32.
    An index outside [-1, Skv) is skipped too and raises IndexError ((out,
    lse) as `e.partial`), or is counted in `errors`. q and kv are float32, both float16, or both
    kiln.bf16 (f32 accumulation; P rounded to their type before P @ V); or
    both PyTorch CUDA tensors (indices then any integer CUDA tensor, as
    torch.topk's, or numpy)."""
    name = "dsa_sparse_attention"
    _positive(name, d_v=d_v, heads_block=heads_block, block_k=block_k)
    side = _side(name, dict(q=q, kv=kv, indices=indices, errors=errors))
    (q, kv), dtype = side.same_type(q=q, kv=kv)
    indices = side.ints(indices, "indices")
    if len(q.shape) != 3 or len(kv.shape) != 2 or len(indices.shape) != 2 or \
            kv.shape[1] != q.shape[2] or indices.shape[0] != q.shape[0]:
        raise ValueError(f"{name}: q [Sq, Hq, Dqk], kv [Skv, Dqk] and indices "
                         f"[Sq, topk] expected, got {tuple(q.shape)}, {tuple(kv.shape)}, "
                         f"{tuple(indices.shape)}")
    Sq, Hq, Dqk = q.shape
    Skv = kv.shape[0]
    topk = indices.shape[1]
    scale = _scale_number(name, scale, 1.0 / np.sqrt(max(Dqk, 1)))
    # The kernel takes it as a float32: checked as one.
    with np.errstate(over="ignore"):
        if not np.isfinite(np.float32(scale)):
            raise ValueError(f"{name}: scale must be finite (as a float32), got {scale}")
    out = side.empty((Sq, Hq, d_v))
    lse = side.empty((Sq, Hq))
    word = side.errors(errors)
    if Sq:   # (no heads: one head block, to count bad indices)
        side.launch(kernel("dsa_sparse_attention", _target=side.target, d_qk=Dqk, d_v=d_v,
                           heads_block=heads_block, block_k=block_k, dtype=dtype),
                    [q, kv, indices, out, lse, word, Sq, Hq, Skv, topk, scale],
                    [Sq, max(_cdiv(Hq, heads_block), 1)])
    _bad_indices(side, word, errors,
                 lambda c: f"dsa_sparse_attention: {c} index(es) outside [-1, {Skv})",
                 (out, lse))
    return out, lse


# ---------------------------------------------------------------------------
# Vision convolutions
# ---------------------------------------------------------------------------


def _spatial(name, what, v, n, minimum):
    """A stride, padding or dilation: one integer or n of them (a tuple,
    list or numpy array), each >= minimum; else a ValueError naming it."""
    vals = tuple(np.asarray(v).reshape(-1).tolist()) if not isinstance(
        v, (int, np.integer)) else (v,) * n
    if len(vals) != n or any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) or
                             not minimum <= x < 2**31 for x in vals):
        raise ValueError(f"{name}: {what} must be an integer >= {minimum} and below 2^31 (the "
                         f"kernels index in int32), or {n} of them, got {v!r}")
    return tuple(int(x) for x in vals)


def _specialized(shape, specialize):
    """The bucketing rule: `specialize` is True (this shape), False (never),
    or a collection of shapes to specialize (any other shape runs the generic
    kernel, which serves every size)."""
    if specialize is True or specialize is False or specialize is None:
        return bool(specialize)
    return tuple(shape) in {tuple(s) for s in specialize}


def _index(a, key):
    """a[key], keeping a kiln.bf16 wrapper."""
    return bf16(a.array[key]) if isinstance(a, bf16) else np.asarray(a)[key]


def _shape(a):
    return a.array.shape if isinstance(a, bf16) else np.shape(a)


def _check_pixels(name, inputs, outputs):
    """The convolutions index pixels in int32: N T H W input pixels and
    N OT OH OW output pixels below 2^31 (past that the index wrapped and read
    another pixel, a wrong answer returned silently)."""
    if max(inputs, outputs) >= 2**31:
        raise ValueError(f"{name}: {inputs} input and {outputs} output pixels; the kernels "
                         "index pixels in int32, so both must be below 2^31 (split the batch)")


def _conv_dims(name, xshape, wshape, groups, stride, padding, dilation):
    if len(xshape) != 5 or len(wshape) != 5:
        raise ValueError(f"{name}: x [N, T, H, W, C] and w [KT, KH, KW, C/groups, OC] "
                         f"expected, got {tuple(xshape)} and {tuple(wshape)}")
    N, T, H, W, C = xshape
    KT, KH, KW, Cg, OC = wshape
    _positive(name, groups=groups)
    if Cg * groups != C or OC % groups:
        raise ValueError(f"{name}: channels must divide into groups (w is [KT, KH, KW, "
                         "C/groups, OC])")
    st, sh, sw = _spatial(name, "stride", stride, 3, 1)
    pt, ph, pw = _spatial(name, "padding", padding, 3, 0)
    dt, dh, dw = _spatial(name, "dilation", dilation, 3, 1)
    OT = (T + 2 * pt - dt * (KT - 1) - 1) // st + 1
    OH = (H + 2 * ph - dh * (KH - 1) - 1) // sh + 1
    OW = (W + 2 * pw - dw * (KW - 1) - 1) // sw + 1
    if min(OT, OH, OW) <= 0:
        raise ValueError(f"{name}: the output would be empty")
    _check_pixels(name, N * T * H * W, N * OT * OH * OW)
    return (st, sh, sw), (pt, ph, pw), (dt, dh, dw), (OT, OH, OW)


def _gpu_target(target):
    """Whether kernel(_target=target) compiles for a GPU (or the GPU lowering's
    emulation)."""
    return (target or env_target()).startswith(("sm_", "emu-"))


def _conv_block_c(cg):
    """The host's channels per step for cg channels per group: all of them up
    to 64, else the fewest blocks of at most 64, split evenly. A step pads its
    block to block_c channels, so the old fixed 32 multiplied a 3-channel stem
    convolution's work by 10.7 (6.6x the time measured); a deeper step
    shortens the loop around the dot (64 channels: 0.95x the time of 32; a
    ViT patch row of 48: 0.85x the time of 16)."""
    return _even_blocks(cg, 64)


def _conv_block_n(og):
    """The host's output channels per program for og per group: the fewest
    blocks of at most 64, split evenly and rounded up to 16 (two vectors of
    the dot micro-kernel's columns). The fixed 64 computed 128 columns for
    72 or 96, 64 for 24: time with this rule, 3x3 convolutions over 64
    channels (AVX2), 0.57x at 24, 0.76-0.78x at 40-144."""
    return _even_blocks(og, 64, 16)


# The channels (KW C) of the wide tap steps _conv_host takes (measured on
# AVX2, time against one tap a step: 3 channels 7x7 stride 2 0.69-0.80x, 5x5
# 0.68x; 8 channels 3x3 0.79-0.82x; 4 channels 4x4 stride 4 0.84x; but 3
# channels 3x3 1.08-1.09x, and 16-21 channels 3x3 1.00x).
_WIDE_TAPS = (12, 48)


# The most channels a step of row_block kernel rows takes on the host (K of
# its dot): every row of a 7x7 stride-2 stem's (7 x 21 = 147; time against
# a row a step, AVX2: 0.90-0.94x), 3 rows of 3x3 convolutions over 8 or 16
# channels (0.94x, 0.99x), 5 of 5x5 over 3 (0.88x), 4 of a ViT-B/16 patch
# embedding's 16 rows of 48 (0.97x; 2-8 rows measured alike, all 16 1.01x).
_ROW_BLOCK_K = 192


def _conv_row_block(kh, block_c):
    """Kernel rows per step: the most that divide kh with at most
    _ROW_BLOCK_K channels in the step."""
    return max(r for r in range(1, kh + 1) if kh % r == 0 and (r == 1 or r * block_c <= _ROW_BLOCK_K))


def _conv_block_m(m):
    """The host's output pixels per program for m of them: the size that
    pads m the least among 64 and the multiples of 6 from 48 to 96 (the dot
    micro-kernel's register block is 6 rows), 64 on a tie. A ViT-B/16 patch
    embedding's 196 patches: 66 (3 programs, 198 rows) where 64 computed 256
    rows, 0.81x the time; 56x56 pixels: 64, as before."""
    sizes = [64] + list(range(48, 97, 6))
    return min(sizes, key=lambda bm: (_cdiv(m, bm) * bm, bm != 64))


def _conv_launch(x, w, b, out, dtype, xshape, wshape, groups, stride, padding, dilation,
                 has_bias, block_m, block_n, block_c, specialize, target=None, launch=None,
                 wide=False, rows=False):
    """One conv launch on x [N, T, H, W, C] and w [KT, KH, KW, C/groups, OC]
    (contiguous, of these shapes whatever their own: a 4-d NHWC array is a
    5-d one with T = 1), into out [N, OT, OH, OW, OC] f32. `wide`: the
    kernel's wide_taps (no padding along the width). `rows`: steps of
    several kernel rows (row_block, _conv_row_block; one group, no padding
    along the height, one contiguous run of channels per kernel row)."""
    N, T, H, W, C = xshape
    KT, KH, KW, _, OC = wshape
    (st, sh, sw), (pt, ph, pw), (dt, dh, dw), (OT, OH, OW) = _conv_dims(
        "conv", xshape, wshape, groups, stride, padding, dilation)
    M = N * OT * OH * OW
    if M == 0 or OC == 0:  # an empty output (no batch or no output channels): no programs
        return
    gpu = _gpu_target(target)
    if block_c is None:
        block_c = 32 if gpu else _conv_block_c(C // groups * (KW if wide else 1))
    if block_m is None:
        block_m = 64 if gpu else _conv_block_m(M)
    if block_n is None:
        block_n = 64 if gpu else _conv_block_n(OC // groups)
    row_block = _conv_row_block(KH, block_c) if rows else 1
    statics = {}
    if _specialized(xshape, specialize):
        statics = {f"static.{k}": v for k, v in dict(
            n=N, t=T, h=H, w=W, c=C, oc=OC, ot=OT, oh=OH, ow=OW).items()}
    kern = kernel("conv", _target=target, kt=KT, kh=KH, kw=KW, st=st, sh=sh, sw=sw, pt=pt,
                  ph=ph, pw=pw, dt=dt, dh=dh, dw=dw, groups=groups, bias=int(has_bias),
                  block_m=block_m, block_n=block_n, block_c=block_c, dtype=dtype,
                  **({"wide_taps": 1} if wide else {}),
                  **({"row_block": row_block} if row_block > 1 else {}), **statics)
    (launch or (lambda k, v, g: k.launch(v, g)))(
        kern, [x, w, b, out, N, T, H, W, C, OC, OT, OH, OW],
        [_cdiv(M, block_m), groups * _cdiv(OC // groups, block_n)])


def _conv_torch(name, x, w, bias, xshape, wshape, outshape, groups, stride, padding, dilation,
                block_m=None, block_n=None, block_c=None, specialize=False):
    """The convolutions on PyTorch CUDA tensors (x and w reinterpreted as
    `xshape`, `wshape`; the output allocated as `outshape`, f32)."""
    tb = _Torch(name, x)
    (x, w), dtype = tb.same_type(x=x, w=w)
    if x.numel() != int(np.prod(xshape)) or w.numel() != int(np.prod(wshape)):
        raise ValueError(f"{name}: x has shape {tuple(x.shape)} and w {tuple(w.shape)}")
    OC = wshape[-1]
    b = tb.f32(bias, "bias") if bias is not None else tb.torch.zeros(
        OC, device=tb.dev, dtype=tb.torch.float32)
    if tuple(b.shape) != (OC,):
        raise ValueError(f"{name}: bias has shape {tuple(b.shape)}, expected ({OC},)")
    _, _, _, (OT, OH, OW) = _conv_dims(name, xshape, wshape, groups, stride, padding, dilation)
    out = tb.empty(outshape)
    _conv_launch(x, w, b, out, dtype, xshape, wshape, groups, stride, padding, dilation,
                 bias is not None, block_m, block_n, block_c, specialize, tb.target, tb.launch)
    return out


def conv(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1,
         block_m=None, block_n=None, block_c=None, specialize=False):
    """N-D convolution, channels last: x [N, T, H, W, C], w [KT, KH, KW, C/groups,
    OC] -> [N, OT, OH, OW, OC] (f32). x and w are float32, both float16, or
    both kiln.bf16 (f32 accumulation and output); or both PyTorch CUDA tensors
    (bfloat16, float16 or float32; the output a float32 PyTorch tensor on
    their device, bias numpy or PyTorch). `specialize` (True, or a set of
    input shapes: the bucketing helper) compiles a kernel with the sizes
    fixed."""
    if _is_torch_cuda(x):
        _, _, _, (OT, OH, OW) = _conv_dims("conv", tuple(x.shape), tuple(w.shape), groups,
                                           stride, padding, dilation)
        return _conv_torch("conv", x, w, bias, tuple(x.shape), tuple(w.shape),
                           (x.shape[0], OT, OH, OW, w.shape[-1]), groups, stride, padding,
                           dilation, block_m, block_n, block_c, specialize)
    return _conv_host(x, w, bias, stride, padding, dilation, groups, block_m, block_n, block_c,
                      specialize)


@_host_only
def _conv_host(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1,
               block_m=None, block_n=None, block_c=None, specialize=False):
    (x, w), dtype = _same_type("conv", x=x, w=w)
    _, pads, dils, (OT, OH, OW) = _conv_dims("conv", x.shape, w.shape, groups, stride, padding,
                                             dilation)
    # Few channels (a stem's 3): a kernel row's taps as one step of KW C
    # contiguous channels (the kernel's wide_taps), on an input padded along
    # the width here.
    KW, cg = w.shape[2], w.shape[3]
    H, W = x.shape[2], x.shape[3]
    # (Not where the padded copy would be more than about twice the input:
    # a padding of 2^20 around an 8x8 image asked for 64 TiB.)
    wide = (groups == 1 and dils[2] == 1 and KW > 1 and _WIDE_TAPS[0] <= KW * cg <= _WIDE_TAPS[1]
            and (H + 2 * pads[1]) * (W + 2 * pads[2]) <= 2 * H * W + 4096
            and not _gpu_target(None))
    # ... and (steps of several kernel rows, which read a pixel's rows as a
    # whole) along the height too, where the width's padding copies anyway.
    if wide:
        if pads[1] or pads[2]:
            x = np.pad(x, ((0, 0), (0, 0), (pads[1], pads[1]), (pads[2], pads[2]), (0, 0)))
        padding = (pads[0], 0, 0)
    # A kernel row is one contiguous run of channels for wide taps, and for a
    # kernel one pixel wide (a patch embedding's wide pixels).
    rows = (groups == 1 and (wide or KW == 1) and (wide or pads[1] == 0) and w.shape[1] > 1
            and not _gpu_target(None))
    has_bias = bias is not None
    b = _f32(bias, "bias") if has_bias else np.zeros(w.shape[-1], np.float32)
    if b.shape != (w.shape[-1],):
        raise ValueError(f"conv: bias has shape {b.shape}, expected ({w.shape[-1]},)")
    out = _empty((x.shape[0], OT, OH, OW, w.shape[-1]))
    _conv_launch(_ptr(x), _ptr(w), _ptr(b), _ptr(out), dtype, x.shape, w.shape, groups,
                 stride, padding, dilation, has_bias, block_m, block_n, block_c, specialize,
                 wide=wide, rows=rows)
    return out


def conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, specialize=False,
           **blocks):
    """NHWC conv2d: x [N, H, W, C], w [KH, KW, C/groups, OC] -> [N, OH, OW, OC]
    (numpy arrays, or PyTorch CUDA tensors as for conv)."""
    s = _spatial("conv2d", "stride", stride, 2, 1)
    p = _spatial("conv2d", "padding", padding, 2, 0)
    d = _spatial("conv2d", "dilation", dilation, 2, 1)
    if _is_torch_cuda(x):
        # A contiguous NHWC tensor is an NTHWC one with T = 1.
        if len(x.shape) != 4 or len(w.shape) != 4:
            raise ValueError(f"conv2d: x [N, H, W, C] and w [KH, KW, C/groups, OC] expected, "
                             f"got {tuple(x.shape)} and {tuple(w.shape)}")
        xs, ws = (x.shape[0], 1) + tuple(x.shape[1:]), (1,) + tuple(w.shape)
        _, _, _, (_, OH, OW) = _conv_dims("conv2d", xs, ws, groups, (1,) + tuple(s),
                                          (0,) + tuple(p), (1,) + tuple(d))
        return _conv_torch("conv2d", x, w, bias, xs, ws, (x.shape[0], OH, OW, w.shape[-1]),
                           groups, (1,) + tuple(s), (0,) + tuple(p), (1,) + tuple(d),
                           specialize=_specialized(tuple(x.shape), specialize), **blocks)
    return _conv2d_host(x, w, bias, s, p, d, groups, specialize, **blocks)


@_host_only
def _conv2d_host(x, w, bias, s, p, d, groups, specialize, **blocks):
    spec = _specialized(_shape(x), specialize)
    out = conv(_index(x, (slice(None), None)), _index(w, None), bias, (1,) + tuple(s),
               (0,) + tuple(p), (1,) + tuple(d), groups, specialize=spec, **blocks)
    return out[:, 0]


def patch_embed(x, w, bias=None, patch=16, temporal_patch=1, **blocks):
    """Patch embedding: a convolution with kernel = stride = patch (and a
    temporal patch for video, Qwen2-VL-style). x [N, T, H, W, C], w
    [temporal_patch, patch, patch, C, OC] -> [N, T/tp, H/p, W/p, OC] (numpy
    arrays, or PyTorch CUDA tensors as for conv)."""
    _positive("patch_embed", patch=patch, temporal_patch=temporal_patch)
    xs, ws = tuple(_shape(x)), tuple(_shape(w))
    if len(xs) != 5 or len(ws) != 5 or ws[:4] != (temporal_patch, patch, patch, xs[4]):
        raise ValueError(f"patch_embed: x [N, T, H, W, C] and w [temporal_patch, patch, patch, "
                         f"C, OC] expected (temporal_patch {temporal_patch}, patch {patch}), "
                         f"got {xs} and {ws}")
    if _is_torch_cuda(x):
        N, T, H, W, C = x.shape
        OC = w.shape[-1]
        outshape = (N, T // temporal_patch, H // patch, W // patch, OC)
        stride = (temporal_patch, patch, patch)
        if W % patch == 0 and T % temporal_patch == 0 and H % patch == 0:
            # As on the host: patch rows are contiguous "wide pixels".
            blocks.setdefault("block_c", 16)
            return _conv_torch("patch_embed", x, w, bias, (N, T, H, W // patch, patch * C),
                               (temporal_patch, patch, 1, patch * C, OC), outshape, 1,
                               (temporal_patch, patch, 1), 0, 1, **blocks)
        _, _, _, dims = _conv_dims("patch_embed", tuple(x.shape), tuple(w.shape), 1, stride,
                                   0, 1)
        return _conv_torch("patch_embed", x, w, bias, tuple(x.shape), tuple(w.shape),
                           (N,) + dims + (OC,), 1, stride, 0, 1, **blocks)
    return _patch_embed_host(x, w, bias, patch, temporal_patch, **blocks)


@_host_only
def _patch_embed_host(x, w, bias=None, patch=16, temporal_patch=1, **blocks):
    N, T, H, W, C = _shape(x)
    if W % patch == 0 and T % temporal_patch == 0 and H % patch == 0:
        # Each patch row (patch pixels x C channels) is contiguous: run a
        # (tp, patch, 1) convolution over "wide pixels" of patch*C channels
        # (in the operands' type, as conv takes them).
        (x, w), _ = _same_type("patch_embed", x=x, w=w)
        xw = x.reshape(N, T, H, W // patch, patch * C)
        ww = w.reshape(temporal_patch, patch, 1, patch * C, -1)
        if x.dtype == np.uint16:  # kiln.bf16 operands, unwrapped by _same_type
            xw, ww = bf16(xw), bf16(ww)
        if _gpu_target(None):  # the GPU's K-step (the host's default: the whole row)
            blocks.setdefault("block_c", 16)
        return conv(xw, ww, bias, (temporal_patch, patch, 1), 0, 1, 1, **blocks)
    return conv(x, w, bias, (temporal_patch, patch, patch), 0, 1, 1, **blocks)


def _depthwise_block_c(c):
    """The host's channels per program for c channels: the fewest blocks of
    at most 64, split evenly and rounded up to whole vectors of 8. A channel
    block running past C multiplies padding there (with masked reads): the
    fixed 64 took 11x the time at 32 channels (112x112, 3x3) and 4x at 144
    (56x56) when every vector of such a block was tested, still 2.5x and
    1.3x with the masked reads, where 32 and 48 fill their blocks. With
    256-bit vectors, a multiple of 48 channels takes blocks of 48: the
    register loop's steps are then two pixels of 6 vectors, where 64 took
    one of 8 (3x3 over 192, 384 and 576 channels: 0.90-0.94x the time)."""
    if c > 64 and c % 48 == 0 and _host_vector_bits() < 512:
        return 48
    return _even_blocks(c, 64, 8)


_VECTOR_BITS = {}


def _host_vector_bits():
    """The vector width host kernels are compiled for ($KILN_TARGET, or the
    CPU's features for the default target)."""
    target = env_target()
    if target not in _VECTOR_BITS:
        if target in ("host", "x86-64"):
            features = _ext.cpu_features().split()
            bits = 512 if "avx512f" in features else 256 if "avx2" in features else 128
        else:
            bits = 512 if "avx512" in target else 128 if "sse" in target else 256
        _VECTOR_BITS[target] = bits
    return _VECTOR_BITS[target]


def _depthwise_block_w(ow):
    """The host's output pixels per program for rows of ow: the fewest
    segments of at most 64, split evenly. A segment running past the row
    computes padding for its pixels past it: the fixed 32 took 2.1x
    the time of 14 at 14x14x576 (3x3), 4.1x the time of 7 at 7x7x960, and
    1.2x that of 56 at 56x56x256."""
    return _even_blocks(ow, 64)


def depthwise_conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, block_w=None,
                     block_c=None):
    """x [N, H, W, C], w [KH, KW, C] -> [N, OH, OW, C], float32 (numpy arrays,
    or PyTorch CUDA tensors: converted to float32 on their device, the output
    a PyTorch tensor there). Blocks: by default 32 pixels x 64 channels on
    GPUs; on the host, an output row's pixels and the channels each split
    evenly into blocks of at most 64 (_depthwise_block_w, _depthwise_block_c)."""
    _positive_given("depthwise_conv2d", block_w=block_w, block_c=block_c)
    tb = None
    if _is_torch_cuda(x):
        tb = _Torch("depthwise_conv2d", x)
        if not (isinstance(w, tb.torch.Tensor) and w.is_cuda and w.device == tb.dev):
            raise TypeError(f"depthwise_conv2d: 'w' must be a PyTorch CUDA tensor on "
                            f"{tb.dev}, like the first array")
        x, w = tb.f32(x, "x"), tb.f32(w, "w")
        return _depthwise_conv2d(x, w, bias, stride, padding, dilation, block_w, block_c, tb)
    return _depthwise_conv2d_host(x, w, bias, stride, padding, dilation, block_w, block_c)


@_host_only
def _depthwise_conv2d_host(x, w, bias=None, stride=1, padding=0, dilation=1, block_w=None,
                           block_c=None):
    return _depthwise_conv2d(x, w, bias, stride, padding, dilation, block_w, block_c, None)


def _depthwise_conv2d(x, w, bias, stride, padding, dilation, block_w, block_c, tb):
    if tb is None:
        x, w = _f32(x, "x"), _f32(w, "w")
    if len(x.shape) != 4 or len(w.shape) != 3 or w.shape[2] != x.shape[3]:
        raise ValueError(f"depthwise_conv2d: x [N, H, W, C] and w [KH, KW, C] expected, got "
                         f"{tuple(x.shape)} and {tuple(w.shape)}")
    N, H, W, C = x.shape
    KH, KW, _ = w.shape
    sh, sw = _spatial("depthwise_conv2d", "stride", stride, 2, 1)
    ph, pw = _spatial("depthwise_conv2d", "padding", padding, 2, 0)
    dh, dw = _spatial("depthwise_conv2d", "dilation", dilation, 2, 1)
    OH = (H + 2 * ph - dh * (KH - 1) - 1) // sh + 1
    OW = (W + 2 * pw - dw * (KW - 1) - 1) // sw + 1
    if min(OH, OW) <= 0:
        raise ValueError("depthwise_conv2d: the output would be empty")
    _check_pixels("depthwise_conv2d", N * H * W, N * OH * OW)
    has_bias = bias is not None
    if tb is None:
        b = _f32(bias, "bias") if has_bias else np.zeros(C, np.float32)
        out = _empty((N, OH, OW, C))
        x, w, b, out_arg = _ptr(x), _ptr(w), _ptr(b), _ptr(out)
    else:
        b = tb.f32(bias, "bias") if has_bias else tb.torch.zeros(
            C, device=tb.dev, dtype=tb.torch.float32)
        out = out_arg = tb.empty((N, OH, OW, C))
    if tuple(b.shape) != (C,):
        raise ValueError(f"depthwise_conv2d: bias has shape {tuple(b.shape)}, expected ({C},)")
    host = tb is None and not _gpu_target(None)
    if block_c is None:
        block_c = _depthwise_block_c(C) if host else 64
    if block_w is None:
        block_w = _depthwise_block_w(OW) if host else 32
    # On the host, 3 kernel rows or fewer over whole-register channel blocks
    # take each kernel column's taps of all rows in one step (row_taps):
    # 0.89-0.95x the time at 96-960 channels; 1.1-1.4x at 16-32 channels,
    # 1.18x at 5x5 and 1.23-1.27x at 7x7 over 512 (AVX2).
    row_taps = int(host and KH <= 3 and block_c >= 48)
    kern = kernel("depthwise_conv2d", _target=tb.target if tb else None, kh=KH, kw=KW, sh=sh,
                  sw=sw, ph=ph, pw=pw, dh=dh, dw=dw, bias=int(has_bias), block_w=block_w,
                  block_c=block_c, row_taps=row_taps)
    values = [x, w, b, out_arg, N, H, W, C, OH, OW]
    grid = [N * OH * _cdiv(C, block_c), _cdiv(OW, block_w), 1]
    if N == 0 or C == 0:  # an empty output (no batch or no channels): no programs
        return out
    if tb is None:
        kern.launch(values, grid)
    else:
        tb.launch(kern, values, grid)
    return out
