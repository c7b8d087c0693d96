"""Kiln: write tile kernels in Python, compile them with the Kiln compiler.

    import kiln
    import kiln.language as kl

    @kiln.jit
    def add(x, y, out, n, BLOCK: kl.constexpr):
        offs = kl.program_id(0) * BLOCK + kl.arange(0, BLOCK)
        mask = offs < n
        kl.store(out + offs, kl.load(x + offs, mask=mask) + kl.load(y + offs, mask=mask), mask=mask)

    add[(kiln.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)

See docs/python.md.
"""

from .frontend import CompilationError
from .jit import Autotuner, CompiledKernel, Config, JITFunction, autotune, bf16, jit
from .runtime import load_bundle

__all__ = ["jit", "autotune", "Config", "CompilationError", "JITFunction",
           "CompiledKernel", "Autotuner", "bf16", "cdiv", "load_bundle", "cache_stats"]
__version__ = "0.1.0"


def cache_stats() -> dict:
    """Counters of the process's JIT: memory_hits, disk_hits, compiles,
    corrupt_entries, disk_write_failures."""
    from .jit import _get_jit
    return _get_jit().stats


def cdiv(a: int, b: int) -> int:
    """Ceiling division, for computing grids."""
    return (a + b - 1) // b
