"""Random tile programs, compiled for $KILN_TARGET and checked against the
same source run in float64 (kernel_fuzz.py).

Each run draws fresh kernels (a GEMM-like or an attention-like loop with
random masks, row statistics, `if`s, casts and elementwise tails), fresh
inputs and, on GPU targets, a random warp count and stage count. Outputs
are poisoned with NaN before the launch; NaN fails. The seed is printed:
KILN_TEST_SEED=<seed> replays a run, and a failure prints the kernel's
source. KILN_FUZZ_KERNELS sets how many kernels a run draws.

On the host, a third of the kernels also go through the real GPU back end:
their kiln IR is compiled by kilnc to PTX for sm_80 and sm_90a (random warp
and stage counts) and assembled by ptxas (where the CUDA toolkit is).
"""
import importlib.util
import os
import subprocess

import numpy as np
import pytest

import kernel_fuzz
import kiln
from conftest import KILNC, assert_close, from_bf16_bits, to_bf16_bits
from test_gpu_compile import _assemble

KERNELS = int(os.environ.get("KILN_FUZZ_KERNELS", "24"))
HOST = os.environ.get("KILN_TARGET", "host") == "host"
BASE = int(os.environ.get("KILN_TEST_SEED", np.random.SeedSequence().entropy % (1 << 30)))


def _load(tmp_path, name, source):
    path = tmp_path / f"{name}.py"
    path.write_text("import kiln\nimport kiln.language as kl\n\n\n" +
                    source.replace("{name}", name))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


def assert_bf16_rounded(got, ref, window):
    """bf16 values against float64: each the nearest bf16 value, or the other
    neighbour where ref lies within `window` (per element) of the midpoint
    between them (its f32 value may have fallen on the other side)."""
    got = np.asarray(got, np.float64)
    assert not np.isnan(got).any(), f"{np.isnan(got).sum()} NaN elements"
    half_ulp = np.ldexp(1.0, np.frexp(ref)[1] - 9)   # |ref| in [2^(e-1), 2^e): ulp 2^(e-8)
    bad = np.abs(got - ref) > half_ulp + window
    assert not bad.any(), (f"{bad.sum()} of {bad.size} not rounded to nearest; e.g. "
                           f"{got[bad][:3]} for {ref[bad][:3]}")


def check_kernel(seed, tmp_path, target):
    source, spec = kernel_fuzz.generate(seed)
    name = f"fuzz_{spec['family']}_{seed}"
    rng = np.random.default_rng(seed)
    values = kernel_fuzz.inputs(spec, rng)   # bf16-exact float32
    args, ref_args = dict(spec["scalars"]), dict(spec["scalars"])
    for n, shape in spec["shapes"].items():
        stor = spec["storage"].get(n, "f32")
        if n in values:
            x = values[n].astype(np.float16) if stor == "f16" else values[n]
            ref_args[n] = x if x.dtype.kind == "i" else x.astype(np.float64)
            args[n] = kiln.bf16(to_bf16_bits(x)) if stor == "bf16" else x
        elif n in spec.get("zeroed", ()):   # an output that atomics add to
            ref_args[n], args[n] = np.zeros(shape), np.zeros(shape, np.float32)
        else:   # an output, poisoned
            ref_args[n] = np.full(shape, np.nan)
            args[n] = (kiln.bf16(np.full(shape, 0x7FC0, np.uint16)) if stor == "bf16" else
                       np.full(shape, np.nan, np.float32))
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
    kernel = _load(tmp_path, name, source)
    saved = {var: os.environ.get(var) for var in env}
    os.environ.update(env)
    try:
        kernel[spec["grid"]](*[args[n] for n in spec["order"]], **spec["constexprs"], **opts)
    finally:
        for var, v in saved.items():
            if v is None:
                os.environ.pop(var)
            else:
                os.environ[var] = v
    ref = kernel_fuzz.reference(source, name, spec["grid"],
                                [ref_args[n] for n in spec["order"]], spec["constexprs"])
    for o in spec["outputs"]:
        r = ref[spec["order"].index(o)].reshape(spec["shapes"][o])
        got = args[o]
        got = from_bf16_bits(got.array) if isinstance(got, kiln.bf16) else got
        scale = max(1.0, float(np.abs(r).max()))
        tol = spec["tol"].get(o, kernel_fuzz.EXACT)
        if o in spec.get("bf16_outputs", ()):
            assert_bf16_rounded(got, r, tol * (np.abs(r) + scale))
        else:
            assert_close(got, r, rtol=tol, atol=tol * scale)
    return kernel


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
        seed = BASE + i
        print(f"seed {BASE} (kernel {i})")
        kernel = check_kernel(seed, tmp_path, "host")
        ir = tmp_path / "k.mlir"
        ir.write_text(kernel.ir("kiln"))
        rng = np.random.default_rng(seed + 1)
        for chip in ("sm_80", "sm_90a"):
            warps, stages = int(rng.choice([2, 4, 8])), int(rng.choice([1, 2, 3]))
            out = tmp_path / f"k_{chip}.ptx"
            r = subprocess.run([KILNC, str(ir), "--target", chip, f"--num-warps={warps}",
                                f"--num-stages={stages}", "--emit", "ptx", "-o", str(out)],
                               capture_output=True, text=True, timeout=600)
            assert r.returncode == 0, f"{chip}, {warps} warps, {stages} stages: {r.stderr}"
            _assemble(str(out), chip, tmp_path)
