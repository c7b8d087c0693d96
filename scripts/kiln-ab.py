#!/usr/bin/env python3
"""kiln-ab: time two builds of one kernel against each other, interleaved.

This machine class's timings drift by up to 2x between minutes, so two
benchmark runs taken one after the other compare the minutes as much as the
kernels. kiln-ab loads two bundles of the same kernel (compiled by two
compilers, or with two settings) into one process and launches them
alternately on the same inputs; the figure is the median of the per-round
time ratios (B / A: below 1 means B is faster), with each side's best time.
Before timing, both run once on the same inputs and every pointer argument
must come out the same (exactly, or within --rtol): a faster wrong kernel is
refused.

  kiln-ab.py A.kiln B.kiln --grid 32,32 --arg randn:2048x2048 \\
      --arg randn:2048x2048 --arg zeros:2048x2048 --arg 2048 --arg 2048 --arg 2048

  # the same source through two compilers (anything kilnc takes after the
  # source: an op, a target, a kernel name):
  kiln-ab.py --kilnc-a /tmp/old/kilnc --kilnc-b build/bin/kilnc \\
      --source examples/matmul.mlir --grid 32,32 --arg ...
  kiln-ab.py --kilnc-a OLD --kilnc-b NEW --op dsa_topk --op-arg=--k=2048 \\
      --grid 128 --arg randn:128x4096 --arg zeros:128x2048:int32 --arg 128 --arg 4096

Arguments, in the kernel's order:
  randn:SHAPE[:DTYPE]       standard normal values (float32 by default)
  uniform:LO:HI:SHAPE[:DTYPE]
  randint:LO:HI:SHAPE[:DTYPE]  integers in [LO, HI) (int32 by default)
  zeros:SHAPE[:DTYPE]       an output (poisoned with NaN / -1 before each
                            checked launch, so a store it misses shows)
  INTEGER                   an integer scalar
  NUMBER                    a float scalar (0.05, 1e-3: float32)
SHAPE is dimensions joined by x (4096 or 128x4096).

Run it with the build's Python module on the path:
  PYTHONPATH=build/python build/venv/bin/python scripts/kiln-ab.py ...
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__[__doc__.index("\n\n") + 2:])
    p.add_argument("bundles", nargs="*", help="two bundles, A and B (or use --kilnc-a/-b)")
    p.add_argument("--kilnc-a", help="the compiler of side A")
    p.add_argument("--kilnc-b", help="the compiler of side B")
    p.add_argument("--source", help="an MLIR file both compilers compile")
    p.add_argument("--op", help="an operator both compilers build (kilnc op NAME)")
    p.add_argument("--op-arg", action="append", default=[],
                   help="passed to `kilnc op` (as --op-arg=--k=2048)")
    p.add_argument("--kilnc-arg", action="append", default=[],
                   help="passed to kilnc after the source (as --kilnc-arg=--kernel=NAME)")
    p.add_argument("--grid", required=True, help="the launch grid: X[,Y[,Z]]")
    p.add_argument("--arg", action="append", default=[], help="an argument (see below)")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--threads", type=int, default=1, help="the runtime's threads")
    p.add_argument("--rtol", type=float, default=0.0,
                   help="outputs may differ by this much, relative (0: exactly equal)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def compile_bundle(kilnc, opts, path):
    if opts.source:
        cmd = [kilnc, opts.source, *opts.kilnc_arg, "-o", path]
    else:
        cmd = [kilnc, "op", opts.op, *opts.op_arg, "-o", path]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"kiln-ab: `{' '.join(cmd)}` failed:\n{r.stderr}")


def make_arg(spec, rng):
    """A numpy array (and whether it is an output) or a scalar, from a spec."""
    try:
        return int(spec), False
    except ValueError:
        pass
    try:
        return np.float32(float(spec)), False   # 0.05, 1e-3: a float scalar
    except ValueError:
        pass
    parts = spec.split(":")
    kind = parts[0]
    try:
        if kind in ("randn", "zeros"):
            shape, dtype = parts[1], parts[2] if len(parts) > 2 else None
        elif kind in ("uniform", "randint"):
            lo, hi, shape = float(parts[1]), float(parts[2]), parts[3]
            dtype = parts[4] if len(parts) > 4 else None
        else:
            raise ValueError(kind)
        dims = tuple(int(d) for d in shape.split("x"))
    except (IndexError, ValueError):
        sys.exit(f"kiln-ab: cannot read the argument {spec!r} (see --help)")
    dt = np.dtype(dtype or ("int32" if kind == "randint" else "float32"))
    if kind == "randn":
        return rng.standard_normal(dims).astype(dt), False
    if kind == "uniform":
        return rng.uniform(lo, hi, dims).astype(dt), False
    if kind == "randint":
        return rng.integers(int(lo), int(hi), dims).astype(dt), False
    return np.zeros(dims, dt), True


def aligned_copy(a):
    """A copy of `a` starting on a 64-byte boundary (kiln.ops' output
    allocation). Each side gets its own arrays, and numpy places them at
    different distances from a cache line: the same depthwise bundle on both
    sides timed B / A 1.24."""
    import kiln.ops

    out = kiln.ops._empty(a.shape, a.dtype)
    out[...] = a
    return out


def poison(a):
    a.fill(np.nan if a.dtype.kind == "f" else -1)


def main(argv=None):
    opts = parse_args(argv if argv is not None else sys.argv[1:])
    import kiln

    tmp = tempfile.TemporaryDirectory()  # the compiled bundles, removed at exit
    if opts.kilnc_a or opts.kilnc_b:
        if not (opts.kilnc_a and opts.kilnc_b) or bool(opts.source) == bool(opts.op):
            sys.exit("kiln-ab: --kilnc-a and --kilnc-b need one of --source or --op")
        paths = [os.path.join(tmp.name, "a.kiln"), os.path.join(tmp.name, "b.kiln")]
        compile_bundle(opts.kilnc_a, opts, paths[0])
        compile_bundle(opts.kilnc_b, opts, paths[1])
    elif len(opts.bundles) == 2:
        paths = opts.bundles
    else:
        sys.exit("kiln-ab: give two bundles, or --kilnc-a and --kilnc-b")
    kernels = [kiln.load_bundle(p, opts.threads) for p in paths]

    grid = tuple(int(g) for g in opts.grid.split(","))
    rng = np.random.default_rng(opts.seed)
    made = [make_arg(s, rng) for s in opts.arg]
    args = [[aligned_copy(a) if isinstance(a, np.ndarray) else a for a, _ in made]
            for _ in kernels]

    def launch(side):
        t = time.perf_counter()
        kernels[side][grid](*args[side])
        kernels[side].synchronize()
        return time.perf_counter() - t

    # Both once on the same inputs, outputs poisoned: every array must agree.
    for side in (0, 1):
        for (_, out), a in zip(made, args[side]):
            if out:
                poison(a)
        launch(side)
    for i, (a, b) in enumerate(zip(*args)):
        if not isinstance(a, np.ndarray):
            continue
        same = (np.allclose(a, b, rtol=opts.rtol, atol=0, equal_nan=False) if opts.rtol
                else np.array_equal(a, b))
        if not same or (a.dtype.kind == "f" and np.isnan(a).any()):
            print(f"kiln-ab: argument {i} ({opts.arg[i]}) differs between A and B "
                  f"(or holds NaN): not timed", file=sys.stderr)
            return 1

    ratios, best = [], [float("inf"), float("inf")]
    for r in range(opts.rounds):
        order = (0, 1) if r % 2 == 0 else (1, 0)  # neither side always goes first
        t = {}
        for side in order:
            t[side] = launch(side)
            best[side] = min(best[side], t[side])
        ratios.append(t[1] / t[0])
    ratios.sort()
    q = lambda f: ratios[min(len(ratios) - 1, int(f * len(ratios)))]
    print(f"A {kernels[0].name}: best {best[0] * 1e3:.3f} ms   "
          f"B {kernels[1].name}: best {best[1] * 1e3:.3f} ms")
    print(f"time B / A: median {q(0.5):.3f} (quartiles {q(0.25):.3f}-{q(0.75):.3f}, "
          f"{opts.rounds} interleaved rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
