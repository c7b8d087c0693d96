"""python -m kiln: prints what this installation can do, and where its JIT
keeps compiled kernels. `python -m kiln clear-cache` empties that cache
(compiled kernels, their temporary files and the autotuner's records)."""
import os
import sys

import kiln
from . import runtime


def _cache():
    """(directory, bound in bytes, entry files, their bytes) of the JIT's
    disk cache; None without the compiler."""
    if not kiln.HAS_COMPILER:
        return None
    from .jit import _get_jit
    jit = _get_jit("host")
    d = jit.cache_dir
    names = os.listdir(d) if d and os.path.isdir(d) else []
    entries = [os.path.join(d, n) for n in names if n.endswith(".kiln")]
    size = sum(os.path.getsize(p) for p in entries if os.path.isfile(p))
    return d, jit.cache_limit, entries, size


def _clear(d):
    removed = 0
    for sub in ("", "autotune"):
        folder = os.path.join(d, sub)
        if not os.path.isdir(folder):
            continue
        for n in os.listdir(folder):
            ours = (n.endswith(".kiln") or ".kiln.tmp." in n) if not sub else n.endswith(".json")
            if ours and os.path.isfile(os.path.join(folder, n)):
                os.remove(os.path.join(folder, n))
                removed += 1
    return removed


def main(argv):
    if argv not in ([], ["clear-cache"]):
        print("usage: python -m kiln [clear-cache]", file=sys.stderr)
        return 2
    cache = _cache()
    if argv == ["clear-cache"]:
        if cache is None or not cache[0]:
            print("kiln: no JIT cache in this installation", file=sys.stderr)
            return 1
        print(f"removed {_clear(cache[0])} files from {cache[0]}")
        return 0
    print("kiln", kiln.__version__)
    print("CPU features:", runtime._ext.cpu_features())
    ok, what = runtime._ext.cuda_device()
    print("CUDA device:", what if ok else f"none ({what})")
    if cache is None:
        print("JIT cache: none (a runtime-only installation)")
    else:
        d, limit, entries, size = cache
        bound = f"{limit / 2**20:.0f} MB" if limit else "unbounded"
        print(f"JIT cache: {d or '(none: no directory)'}, {len(entries)} kernels, "
              f"{size / 2**20:.1f} MB (bound {bound}, KILN_CACHE_MAX_MB)")
    return 0


sys.exit(main(sys.argv[1:]))
