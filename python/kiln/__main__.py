"""python -m kiln: prints what this installation can do, and where its JIT
keeps compiled kernels. `python -m kiln clear-cache` empties that cache
(compiled kernels, their temporary files and the autotuner's records)."""
import os
import sys

import kiln
from . import runtime


def _cache():
    """The host JIT (its disk cache: directory, bound, usage); None
    without the compiler."""
    if not kiln.HAS_COMPILER:
        return None
    from .jit import _get_jit
    return _get_jit("host")


def _clear(jit):
    """The JIT's entries and temporaries (its own naming), then the
    autotuner's records (ours)."""
    removed = jit.clear_disk_cache()
    records = os.path.join(jit.cache_dir, "autotune")
    if os.path.isdir(records):
        for n in os.listdir(records):
            # (and `<record>.json.tmp.<pid>.<tid>`, a write a killed
            # tuning run left)
            if (n.endswith(".json") or ".json.tmp." in n) and \
                    os.path.isfile(os.path.join(records, n)):
                os.remove(os.path.join(records, n))
                removed += 1
    return removed


def main(argv):
    if argv not in ([], ["clear-cache"]):
        print("usage: python -m kiln [clear-cache]", file=sys.stderr)
        return 2
    try:
        jit = _cache()
    except RuntimeError as e:  # a malformed KILN_CACHE_MAX_MB, say: one line, no traceback
        print(f"kiln: {e}", file=sys.stderr)
        return 1
    if argv == ["clear-cache"]:
        if jit is None or not jit.cache_dir:
            print("kiln: no JIT cache in this installation", file=sys.stderr)
            return 1
        print(f"removed {_clear(jit)} files from {jit.cache_dir}")
        return 0
    print("kiln", kiln.__version__)
    print("CPU features:", runtime._ext.cpu_features())
    ok, what = runtime._ext.cuda_device()
    print("CUDA device:", what if ok else f"none ({what})")
    if jit is None:
        print("JIT cache: none (a runtime-only installation)")
    else:
        entries, size = jit.disk_cache_usage()
        bound = f"{jit.cache_limit / 2**20:.0f} MB" if jit.cache_limit else "unbounded"
        print(f"JIT cache: {jit.cache_dir or '(none: no directory)'}, {entries} kernels, "
              f"{size / 2**20:.1f} MB (bound {bound}, KILN_CACHE_MAX_MB)")
    return 0


sys.exit(main(sys.argv[1:]))
