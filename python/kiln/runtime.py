"""Loading and launching precompiled bundles, with or without the compiler.

On a machine that only runs kernels, the runtime-only extension
(``kiln._kiln_runtime``, no LLVM inside) is enough; with the full extension
the same calls go through ``kiln._kiln``.
"""

from __future__ import annotations

import numpy as np

try:
    from . import _kiln as _ext
except ImportError:  # a runtime-only installation
    from . import _kiln_runtime as _ext


class bf16:
    """Marks a uint16 numpy array as holding bfloat16 values (numpy has no
    bfloat16): ``kernel[grid](kiln.bf16(a), ...)``."""

    def __init__(self, array):
        array = np.asarray(array)
        if array.dtype != np.uint16:
            raise TypeError("kiln.bf16 wraps a uint16 array holding bfloat16 bits")
        self.array = array


class Bundle:
    """A kernel loaded from a .kiln bundle (``kilnc kernel.mlir -o k.kiln``)."""

    def __init__(self, kernel):
        self._kernel = kernel

    @property
    def name(self):
        return self._kernel.name

    @property
    def signature(self):
        return self._kernel.signature

    def __getitem__(self, grid):
        if isinstance(grid, int):
            grid = (grid,)
        if not isinstance(grid, (tuple, list)) or not 1 <= len(grid) <= 3:
            raise ValueError(f"the grid must be an int or a tuple of 1 to 3 ints, got {grid!r}")

        gpu = self._kernel.is_gpu

        def launch(*args):
            values = []
            for (name, kind, dtype), a in zip(self._kernel.signature, args):
                if kind == "ptr":
                    dev = _device_address(a)
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
                    if not isinstance(a, np.ndarray):
                        raise TypeError(f"argument '{name}' must be a numpy array "
                                        "(or a CUDA array for GPU bundles)")
                    if not a.flags["C_CONTIGUOUS"]:
                        raise ValueError(f"argument '{name}' is not contiguous")
                    values.append(a.ctypes.data)
                else:
                    values.append(a)
            self._kernel.launch(values, list(grid))

        return launch


def _device_address(a):
    """The device address of a CUDA array (``__cuda_array_interface__`` or a
    PyTorch CUDA tensor, bfloat16 included), else None."""
    if type(a).__module__.startswith("torch") and getattr(a, "is_cuda", False):
        if not a.is_contiguous():
            raise ValueError("a non-contiguous CUDA tensor; pass .contiguous()")
        return a.data_ptr()
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is not None:
        return int(cai["data"][0])
    return None


def load_bundle(path: str, num_threads: int = 0) -> Bundle:
    """Loads a bundle; refuses (with a message) one that is corrupt, for
    another target, or needs CPU features this machine lacks."""
    return Bundle(_ext.load_bundle(path, num_threads))
