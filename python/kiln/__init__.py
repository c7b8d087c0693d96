"""Kiln: write tile kernels in Python, compile them with the Kiln compiler.

    import kiln
    import kiln.language as kl

    @kiln.jit
    def add(x, y, out, n, BLOCK: kl.constexpr):
        offs = kl.program_id(0) * BLOCK + kl.arange(0, BLOCK)
        mask = offs < n
        kl.store(out + offs, kl.load(x + offs, mask=mask) + kl.load(y + offs, mask=mask), mask=mask)

    add[(kiln.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)

A runtime-only installation (no compiler, no LLVM) provides load_bundle()
for kernels compiled ahead of time with kilnc. See docs/python.md.
"""

from .runtime import BundleError, DeviceAssertError, LaunchError, bf16, fp8, load_bundle

__version__ = "0.1.0"

try:
    from . import _kiln  # noqa: F401  (the compiler extension)
    HAS_COMPILER = True
    COMPILER_IMPORT_ERROR = None
except ImportError as e:  # a runtime-only installation, or a broken one
    HAS_COMPILER = False
    COMPILER_IMPORT_ERROR = e

__all__ = ["load_bundle", "bf16", "fp8", "cdiv", "next_power_of_2", "HAS_COMPILER", "LaunchError", "BundleError",
           "DeviceAssertError"]

if HAS_COMPILER:
    from .frontend import CompilationError
    from .jit import (Autotuner, CompiledKernel, Config, Heuristics, JITFunction,
                      TensorDescriptor, autotune, heuristics, jit)
    from . import ops

    __all__ += ["jit", "autotune", "heuristics", "Config", "CompilationError", "JITFunction",
                "CompiledKernel", "Autotuner", "cache_stats", "ops", "TensorDescriptor"]

    def cache_stats() -> dict:
        """Counters of the process's JIT: memory_hits, disk_hits, compiles,
        corrupt_entries, disk_write_failures, evictions (entries removed to
        keep the disk cache under KILN_CACHE_MAX_MB)."""
        from .jit import _get_jit
        return _get_jit().stats


def __getattr__(name):
    if not HAS_COMPILER and name in ("jit", "autotune", "heuristics", "Config",
                                     "CompilationError",
                                     "cache_stats", "ops", "TensorDescriptor"):
        raise AttributeError(
            f"kiln.{name} needs the compiler extension (kiln._kiln), which is not available: "
            f"{COMPILER_IMPORT_ERROR}. A runtime-only installation provides kiln.load_bundle.")
    raise AttributeError(f"module 'kiln' has no attribute '{name}'")


def cdiv(a: int, b: int) -> int:
    """Ceiling division, for computing grids."""
    return (a + b - 1) // b


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1), as triton.next_power_of_2:
    a block size covering n columns."""
    n = int(n)
    return 1 if n <= 1 else 1 << (n - 1).bit_length()
