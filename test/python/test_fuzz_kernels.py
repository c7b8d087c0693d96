"""Random tile programs, compiled for $KILN_TARGET and checked against the
same source run in float64 (kernel_fuzz.py).

Each run draws fresh kernels (GEMM-like and attention-like loops, gathers,
row kernels and scatters, with random masks, row statistics, `if`s, casts
and elementwise tails), fresh inputs (sometimes misaligned) and, on GPU
targets, a random warp count and stage count. Outputs are poisoned with NaN
before the launch; NaN fails, except where the reference leaves an element
poisoned, which must stay so. The seed is printed:
KILN_TEST_SEED=<seed> replays a run, and a failure prints the kernel's
source. KILN_FUZZ_KERNELS sets how many kernels a run draws, KILN_FUZZ_FAMILY
which families (kernel_fuzz.FAMILIES, comma-separated).

On the host, a third of the kernels also go through the real GPU back end:
their kiln IR is compiled by kilnc to PTX for sm_80 and sm_90a (random warp
and stage counts) and assembled by ptxas (where the CUDA toolkit is).
"""
import os
import subprocess

import numpy as np
import pytest

import kernel_fuzz
import kiln
from conftest import KILNC
from test_gpu_compile import _assemble

KERNELS = int(os.environ.get("KILN_FUZZ_KERNELS", "24"))
HOST = os.environ.get("KILN_TARGET", "host") == "host"
BASE = int(os.environ.get("KILN_TEST_SEED", np.random.SeedSequence().entropy % (1 << 30)))
# KILN_FUZZ_FAMILY=zoo (or gemm,scatter ...): only kernels of those families.
FAMILY = os.environ.get("KILN_FUZZ_FAMILY") or None
if FAMILY and not set(FAMILY.split(",")) <= set(kernel_fuzz.FAMILIES):
    raise ValueError(f"KILN_FUZZ_FAMILY={FAMILY}: the families are {kernel_fuzz.FAMILIES}")


def prepare(seed, tmp_path):
    """(source, spec, name, the @kiln.jit function, its arguments, the
    reference's, the seed's rng)."""
    source, spec = kernel_fuzz.generate(seed, FAMILY)
    name = f"fuzz_{spec['family']}_{seed}"
    rng = np.random.default_rng(seed)
    args, ref_args = kernel_fuzz.arguments(spec, rng, kiln.bf16, kiln.fp8)
    kernel = kernel_fuzz.load_kernel(str(tmp_path), name, source)
    return source, spec, name, kernel, args, ref_args, rng


def check_kernel(seed, tmp_path, target):
    source, spec, name, kernel, args, ref_args, rng = prepare(seed, tmp_path)
    opts, env = {}, {}
    if target.startswith("emu-") or target.startswith("sm_"):
        # Half the kernels take the suite's warp and stage counts; each draws
        # the lowering's switches (all read at each compile).
        if rng.random() < 0.5:
            opts = dict(num_warps=int(rng.choice([2, 4, 4, 8, 8])),
                        num_stages=int(rng.choice([1, 2, 3])))
        for var, p in (("KILN_TMA", 0.15), ("KILN_SWIZZLE", 0.15), ("KILN_PINGPONG", 0.25),
                       ("KILN_PIPELINE_GATHERS", 0.25)):
            if rng.random() < p:
                env[var] = "0"
        if rng.random() < 0.15:
            env["KILN_TMA_MAPS"] = "device"
    print(f"kernel seed {seed} ({spec['family']}, {opts}, {env}):\n"
          f"{source.replace('{name}', name)}"
          f"scalars {spec['scalars']}, constexprs {spec['constexprs']}, grid {spec['grid']}")
    saved = {var: os.environ.get(var) for var in env}
    os.environ.update(env)
    try:
        kernel[spec["grid"]](*args, **spec["constexprs"], **opts)
    finally:
        for var, v in saved.items():
            if v is None:
                os.environ.pop(var)
            else:
                os.environ[var] = v
    ref = kernel_fuzz.reference(source, name, spec["grid"], ref_args, spec["constexprs"])
    for o, problem in kernel_fuzz.check_outputs(spec, args, ref, kiln.bf16):
        assert problem is None, f"{o}: {problem}"


@pytest.mark.parametrize("i", range(KERNELS))
def test_random_kernel(i, tmp_path):
    print(f"seed {BASE} (kernel {i}): replay with KILN_TEST_SEED={BASE} and "
          f"-k 'test_random_kernel[{i}]', or print it: kernel_fuzz.py {BASE + i}")
    check_kernel(BASE + i, tmp_path, os.environ.get("KILN_TARGET", "host"))


# Defined on the host only (the emulated suites launch every kernel on the
# GPU lowering already).
if HOST:
    @pytest.mark.parametrize("i", range(0, KERNELS, 3))
    def test_random_kernel_assembles(i, tmp_path):
        # (test_random_kernel[i] runs it; here it is only specialized for
        # its arguments, not launched.)
        seed = BASE + i
        print(f"seed {BASE} (kernel {i}): kernel_fuzz.py {seed}")
        source, spec, name, kernel, args, _, _ = prepare(seed, tmp_path)
        ir = tmp_path / "k.mlir"
        ir.write_text(kernel.warmup(*args, grid=spec["grid"], **spec["constexprs"]).ir("kiln"))
        rng = np.random.default_rng(seed + 1)
        for chip in ("sm_80", "sm_90a"):
            warps, stages = int(rng.choice([2, 4, 8])), int(rng.choice([1, 2, 3]))
            out = tmp_path / f"k_{chip}.ptx"
            r = subprocess.run([KILNC, str(ir), "--target", chip, f"--num-warps={warps}",
                                f"--num-stages={stages}", "--emit", "ptx", "-o", str(out)],
                               capture_output=True, text=True, timeout=600)
            assert r.returncode == 0, f"{chip}, {warps} warps, {stages} stages: {r.stderr}"
            _assemble(str(out), chip, tmp_path)
