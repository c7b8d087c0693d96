"""Kiln's device check: every example and every library operator from bundles
compiled ahead of time, against float64 numpy references, then (on a GPU)
benchmarks against PyTorch with a table printed last.

    python test/gpu/check.py [--record] BUNDLE_DIR

The bundles' target is in BUNDLE_DIR/TARGET:

* ``sm_XY``: on an NVIDIA GPU with PyTorch, and only the runtime (no LLVM):
  inputs are made with numpy, staged to the device with PyTorch, and results
  copied back for the checks; then the benchmarks.
* ``emu-sm_XY``: the same kernels on the CPU under the SIMT emulator. CI runs
  this (with --record) so that the script itself is tested.

``--record`` (where the compiler lives: ``make gpu-bundles``) first compiles
every bundle the checks launch that is not in BUNDLE_DIR yet, with kilnc.
For GPU targets it then stops: nothing can run here.

The operators run through ``kiln.ops``, the same wrappers users call, with a
kernel provider that loads the recorded bundles (kiln.ops.set_kernel_provider),
so the argument lists and grids are the library's own. Every output is
poisoned (NaN, or garbage for integers) before its launch; sizes are not
multiples of the tile sizes.
"""

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

import kiln
import kiln.ops as ops
from gemm_variants import GEMM_VARIANTS, gemm_name, gemm_source

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

parser = argparse.ArgumentParser()
parser.add_argument("bundles", nargs="?", default=os.path.join(ROOT, "build", "gpu-bundles"))
parser.add_argument("--record", action="store_true",
                    help="compile missing bundles with kilnc first (KILN_GPU_TARGET)")
parser.add_argument("--target", default=os.environ.get("KILN_GPU_TARGET", "sm_90a"),
                    help="with --record: the target of a new bundle folder")
parser.add_argument("--section", choices=["all", "notma", "examples", "ops", "gemm", "bench",
                                          "opbench"],
                    default="all",
                    help="run only this part (run_gpu_checks.sh runs each in its own "
                         "process, so a fault or hang in one loses nothing else)")
opts = parser.parse_args()
BUNDLES = opts.bundles
KILNC = os.environ.get("KILNC", os.path.join(ROOT, "build", "bin", "kilnc"))
os.makedirs(BUNDLES, exist_ok=True)
target_file = os.path.join(BUNDLES, "TARGET")
if opts.record and not os.path.exists(target_file):
    with open(target_file, "w") as f:
        f.write(opts.target + "\n")
TARGET = open(target_file).read().strip()
EMULATED = TARGET.startswith("emu-")
RUN = EMULATED or not opts.record  # a GPU target is recorded, not run, here
if RUN and not EMULATED:
    import torch
    dev = torch.device("cuda")
rng = np.random.default_rng(1234)
if not RUN:
    np.seterr(all="ignore")  # recording: outputs of unlaunched kernels are garbage
failures, rows = [], []
ACTIVE = True  # the current section runs (see section())


def selected(name):
    return opts.record or opts.section in ("all", name)


def section(name):
    """Starts a part of the script: it launches and checks only if selected
    (recording always compiles everything)."""
    global ACTIVE
    ACTIVE = selected(name)


# -- bundles and launches ----------------------------------------------------------------

def compile_bundle(path, args):
    """Records a bundle. For a GPU, the examples hold PTX (the driver JIT-
    compiles it at load: that path is checked too) and every other kernel a
    cubin assembled here by ptxas, so the device run spends no time in the
    driver's PTX compiler (about a second per attention kernel on this
    machine's ptxas, for some 30 of them in the benchmark part)."""
    if os.path.exists(path):
        return
    if not opts.record:
        sys.exit(f"missing bundle {path}: run `make gpu-bundles` where the compiler lives")
    if not TARGET.startswith("emu-") and not os.path.basename(path).startswith("example-"):
        args = [*args, "--cubin"]
    subprocess.run([KILNC, *args, "--target", TARGET, "-o", path], check=True)


_loaded = {}


def load(path):
    if path not in _loaded:
        _loaded[path] = kiln.load_bundle(path)
    return _loaded[path]


_captured = None  # a list while the op benchmarks capture kiln.ops' launches


def to_dev(a):
    """A numpy array as a PyTorch CUDA tensor; uint16 arrays are bf16 bits
    (kernels' bf16 arguments take torch.bfloat16 tensors only). An array
    whose address is not 16-byte aligned (the random kernels' misaligned
    arguments) gets a device address with the same offset from a 16-byte
    boundary, so the kernel takes the same unaligned paths on the GPU."""
    a = np.ascontiguousarray(a)
    if a.dtype == np.uint16:
        t = torch.from_numpy(a.view(np.int16)).to(dev).view(torch.bfloat16)
    else:
        t = torch.from_numpy(a).to(dev)
    skew = a.ctypes.data % 16
    if skew and skew % a.itemsize == 0 and t.numel():
        # (PyTorch's allocations are at least 256-byte aligned.)
        k = skew // a.itemsize
        buf = torch.empty(t.numel() + k, dtype=t.dtype, device=dev)
        moved = buf[k:].view(t.shape)
        if moved.data_ptr() % 16 == skew:   # (else the aligned copy: never fail here)
            moved.copy_(t)
            t = moved
    return t


def to_host(t):
    """A PyTorch CUDA tensor as numpy (bfloat16 as uint16 bits)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).cpu().numpy().view(np.uint16)
    return t.cpu().numpy()


def launch(path, grid, values):
    """Launches a bundle on numpy arrays (pointers) and scalars: directly on
    the emulator; on a GPU through device copies, copied back afterwards.
    (While the op benchmarks capture, it only records the launch.)"""
    if _captured is not None:
        _captured.append((path, tuple(int(g) for g in grid), list(values)))
        return
    if not RUN or not ACTIVE:
        return
    bundle = load(path)
    grid = tuple(int(g) for g in grid)
    if EMULATED:
        bundle[grid](*values)
        return
    staged, args = [], []
    for v in values:
        if isinstance(v, np.ndarray):
            t = to_dev(v)
            staged.append((v, t))
            args.append(t)
        else:
            args.append(v)
    bundle[grid](*args)
    torch.cuda.synchronize()
    for v, t in staged:
        np.copyto(v, to_host(t))


def example(name):
    path = os.path.join(BUNDLES, f"example-{name}.kiln")
    compile_bundle(path, [os.path.join(ROOT, "examples", name + ".mlir")])
    return path


class _OpKernel:
    def __init__(self, path):
        self.path = path

    def launch(self, values, grid, wait=True, stream=None):
        # (On the runtime's stream, after the device's queued work, and
        # waited for: staged numpy arrays are copied back.)
        if RUN and not EMULATED and _captured is None and ACTIVE:
            torch.cuda.synchronize()
        launch(self.path, grid, values)


def provider(name, mods, config, warps=None, stages=None, swizzle=True, overlap=True,
             device_maps=False, gathers=True, pingpong=True):
    """kiln.ops' kernels from recorded bundles (`warps`, `stages`, `swizzle`,
    `overlap`, `device_maps`, `gathers`, `pingpong`: a non-default num_warps /
    num_stages / --no-swizzle / --no-overlap / --device-maps /
    --no-pipelined-gathers / --no-pingpong, for the benchmarks' variants)."""
    if mods:
        raise RuntimeError("fused mask_mod/score_mod need the compiler; not in the device check")
    key = hashlib.sha1(json.dumps(sorted(config.items())).encode()).hexdigest()[:12]
    suffix = ((f"-w{warps}" if warps else "") + (f"-s{stages}" if stages else "")
              + ("" if swizzle else "-noswizzle") + ("" if overlap else "-nooverlap")
              + ("-devmaps" if device_maps else "") + ("" if gathers else "-nogathers")
              + ("" if pingpong else "-nopingpong"))
    path = os.path.join(BUNDLES, f"op-{name}-{key}{suffix}.kiln")
    args = ["op", name]
    for k, v in sorted(config.items()):
        args += [f"--{k}", v]
    if warps:
        args += ["--num-warps", str(warps)]
    if stages:
        args += ["--num-stages", str(stages)]
    if not swizzle:
        args += ["--no-swizzle"]
    if not overlap:
        args += ["--no-overlap"]
    if device_maps:
        args += ["--device-maps"]
    if not gathers:
        args += ["--no-pipelined-gathers"]
    if not pingpong:
        args += ["--no-pingpong"]
    compile_bundle(path, args)
    return _OpKernel(path)


ops.set_kernel_provider(provider)


def check(name, got, ref, rtol, atol):
    if not RUN or not ACTIVE:
        return
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    ok = got.shape == ref.shape and not np.isnan(got).any()
    if ok:
        fin = np.isfinite(ref)
        ok = np.array_equal(got[~fin], ref[~fin]) and bool(
            np.all(np.abs(got[fin] - ref[fin]) <= atol + rtol * np.abs(ref[fin])))
    both = np.isfinite(got) & np.isfinite(ref) if got.shape == ref.shape else None
    err = float(np.abs(got - ref)[both].max()) if both is not None and both.any() else 0.0
    print(f"{'PASS' if ok else 'FAIL'} {name}: max abs error {err:.3g}", flush=True)
    if not ok:
        failures.append(name)


def poisoned(shape, dtype=np.float32):
    return np.full(shape, np.nan, dtype)


def bf16_bits(x):
    """float32 -> bfloat16 bits (round to nearest even) and the rounded values."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32)


def cdiv(a, b):
    return (a + b - 1) // b


# -- the examples ---------------------------------------------------------------------
section("examples")

n = 100_003
x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
out = poisoned(n)
launch(example("vector_add"), (cdiv(n, 1024),), [x, y, out, n])
check("example vector_add", out, x.astype(np.float64) + y, 1e-6, 1e-6)



def refused(name, fn, exc, words):
    """A bad launch or bundle must raise `exc` with a message holding `words`."""
    try:
        fn()
    except exc as e:
        ok = all(w.lower() in str(e).lower() for w in words)
        print(f"{'PASS' if ok else 'FAIL'} {name}: refused: {e}", flush=True)
        if not ok:
            failures.append(name)
        return
    print(f"FAIL {name}: accepted", flush=True)
    failures.append(name)


# Bad input on the device: a cubin for another architecture (recorded for
# sm_80) is refused at load; host arrays for a GPU kernel are refused before
# the launch (the kernel would fault on host pointers).
other_arch = os.path.join(BUNDLES, "refuse-sm_80-vector_add.kiln")
if opts.record and not EMULATED and not os.path.exists(other_arch):
    subprocess.run([KILNC, os.path.join(ROOT, "examples", "vector_add.mlir"), "--target",
                    "sm_80", "--cubin", "-o", other_arch], check=True)
if RUN and not EMULATED and ACTIVE:
    if not os.path.exists(other_arch):
        sys.exit(f"missing bundle {other_arch}: run `make gpu-bundles` where the compiler lives")
    if torch.cuda.get_device_capability() != (8, 0):  # on an A100 it is this GPU's
        refused("sm_80 cubin on this GPU", lambda: kiln.load_bundle(other_arch), Exception,
                ["compiled for sm_80", "the device is"])
    refused("host arrays for a GPU kernel",
            lambda: load(example("vector_add"))[(cdiv(n, 1024),)](x, y, out, n), TypeError,
            ["host array", "runs on the GPU"])

m, k = 37, 1000
xs = (rng.standard_normal((m, k)) * 4).astype(np.float32)
out = poisoned((m, k))
launch(example("softmax"), (m,), [xs, out, m, k])
e = np.exp(xs - xs.max(axis=1, keepdims=True).astype(np.float64))
check("example softmax", out, e / e.sum(axis=1, keepdims=True), 1e-4, 1e-6)

w, b = rng.standard_normal(k).astype(np.float32), rng.standard_normal(k).astype(np.float32)
out = poisoned((m, k))
launch(example("layernorm"), (m,), [xs, w, b, out, m, k, 1e-5])
xd = xs.astype(np.float64)
mu, var = xd.mean(axis=1, keepdims=True), xd.var(axis=1, keepdims=True)
check("example layernorm", out, (xd - mu) / np.sqrt(var + 1e-5) * w + b, 1e-4, 1e-4)

M, N, K = 200, 130, 300
a, bm = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
c = poisoned((M, N))
launch(example("matmul"), (cdiv(N, 64), cdiv(M, 64)), [a, bm, c, M, N, K])
check("example matmul f32", c, a.astype(np.float64) @ bm, 1e-4, 1e-3)

# The bf16 GEMM at other block tiles, warp counts and pipeline depths
# (gemm_variants.py), so one device run says which shape wins: on sm_90a these
# run on wgmma with one or two warpgroups.
def gemm_variant(bm_, bn_, bk_, warps, stages, how=""):
    """`how`: "" (the defaults), "notma" (--no-tma), "noswizzle"
    (--no-swizzle), "devicemaps" (--device-maps: every program builds its
    tensor maps), "bf16out" (C in bf16, as torch.matmul's) or "grouped"
    (the GROUP_M program order, gemm_variants.py)."""
    name = gemm_name(bm_, bn_, bk_, warps, stages) + (f"-{how}" if how else "")
    path = os.path.join(BUNDLES, name + ".kiln")
    if not os.path.exists(path) and opts.record:
        src = os.path.join(BUNDLES, name + ".mlir")
        with open(src, "w") as f:
            f.write(gemm_source(bm_, bn_, bk_, "bf16" if how == "bf16out" else "f32",
                                grouped=how == "grouped"))
        flags = ([f"--no-{how[2:]}"] if how in ("notma", "noswizzle")
                 else ["--device-maps"] if how == "devicemaps" else [])
        compile_bundle(path, [src, "--num-warps", str(warps), "--num-stages", str(stages)]
                       + flags)
    return path


# On sm_90a the GEMM loads go by TMA into 128B-swizzled stages; the example's
# shape and the largest one are also recorded with cp.async loads (--no-tma)
# and with no-swizzle core-matrix stages (--no-swizzle), so one run separates
# TMA and the swizzle from wgmma: checked here, timed side by side in the
# gemm section.
ALT_SHAPES = [GEMM_VARIANTS[0], (128, 256, 64, 8, 3)] if TARGET.endswith("sm_90a") else []
# On mma.sync targets (sm_80, sm_90) --no-swizzle gives padded operand rows
# instead of XOR-swizzled ones: the example's shape is timed both ways.
NOSWIZZLE_SHAPES = ALT_SHAPES if TARGET.endswith("sm_90a") else [GEMM_VARIANTS[0]]
# The largest shape also writes C in bf16, like torch.matmul (half the
# epilogue's bytes of the f32 C of the others).
# And in the GROUP_M program order (L2 reuse between the programs resident
# at once; the launch grid is the same).
GEMM_RUNS = ([v + ("",) for v in GEMM_VARIANTS] + [v + ("notma",) for v in ALT_SHAPES]
             + [v + ("noswizzle",) for v in NOSWIZZLE_SHAPES]
             + [v + ("devicemaps",) for v in ALT_SHAPES] + [GEMM_VARIANTS[-1] + ("bf16out",)]
             + [GEMM_VARIANTS[-1] + ("grouped",)])
GEMM_LABEL = {"": "", "notma": ", cp.async (no TMA)", "noswizzle": ", no swizzle",
              "devicemaps": ", maps built per program",
              "bf16out": ", bf16 C", "grouped": ", grouped order"}


# Two shapes: rows of 600 and 260 bytes (not 16-byte multiples: every load
# takes cp.async, even on sm_90a), and of 592 and 272 bytes (TMA on sm_90a),
# both ragged against every tile.
for M, N, K, how in ((200, 130, 300, ""), (200, 136, 296, " [TMA sizes]")):
    a = rng.standard_normal((M, K)).astype(np.float32)
    bm = rng.standard_normal((K, N)).astype(np.float32)
    a16, ar = bf16_bits(a)
    b16, br = bf16_bits(bm)
    c = poisoned((M, N))
    launch(example("matmul_bf16"), (cdiv(N, 64), cdiv(M, 64)), [a16, b16, c, M, N, K])
    check("example matmul bf16 (tensor cores)" + how, c, ar.astype(np.float64) @ br, 1e-4, 1e-2)
    for bm_, bn_, bk_, warps, stages, alt in GEMM_RUNS[1:]:
        # The cp.async variants are their own part ("notma", run first): if
        # a TMA kernel faults, which ends the process's CUDA context, wgmma
        # without TMA is still checked.
        ACTIVE = selected("notma" if alt == "notma" else "examples")
        c = (np.full((M, N), 0x7FC0, np.uint16) if alt == "bf16out"  # NaN bits
             else poisoned((M, N)))
        launch(gemm_variant(bm_, bn_, bk_, warps, stages, alt), (cdiv(N, bn_), cdiv(M, bm_)),
               [a16, b16, c, M, N, K])
        if alt == "bf16out":  # the f32 sums rounded to bf16: 2^-8 relative
            c = (c.astype(np.uint32) << 16).view(np.float32)
        check(f"gemm bf16 {bm_}x{bn_}x{bk_}, {warps} warps, {stages} stages"
              + GEMM_LABEL[alt] + how, c, ar.astype(np.float64) @ br,
              1e-2 if alt == "bf16out" else 1e-4, 1e-2)
    ACTIVE = selected("examples")

# The grouped program order over more row blocks than a group (10 of 64
# rows: one whole group of 8 and a partial one) and 4 column blocks, with
# the example's tile, so every program's remapped tile is checked.
M, N, K = 600, 200, 128
a = rng.standard_normal((M, K)).astype(np.float32)
bm = rng.standard_normal((K, N)).astype(np.float32)
a16, ar = bf16_bits(a)
b16, br = bf16_bits(bm)
c = poisoned((M, N))
launch(gemm_variant(64, 64, 128, 4, 2, "grouped"), (cdiv(N, 64), cdiv(M, 64)),
       [a16, b16, c, M, N, K])
check("gemm bf16 64x64x128, grouped order, 10 x 4 tiles", c, ar.astype(np.float64) @ br,
      1e-4, 1e-2)


def attention_reference(q, k, v, visible, scale):
    """q [.., S, D], k/v [.., Skv, D], visible [.., S, Skv] -> (out, lse)."""
    s = np.einsum("...id,...jd->...ij", q.astype(np.float64), k.astype(np.float64)) * scale
    s = np.where(visible, s, -np.inf)
    mx = s.max(axis=-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0)
    p = np.exp(s - mx)
    l = p.sum(axis=-1, keepdims=True)
    o = np.einsum("...ij,...jd->...id", p, v.astype(np.float64)) / np.where(l > 0, l, 1)
    lse = np.where(l[..., 0] > 0, np.log(np.where(l[..., 0] > 0, l[..., 0], 1)) + mx[..., 0],
                   -np.inf)
    return o, lse


bh, s, d, blk = 3, 200, 64, 64
nqb = cdiv(s, blk)
q, kk, v = (rng.standard_normal((bh, s, d)).astype(np.float32) for _ in range(3))
num = np.zeros((bh, nqb), np.int32)
idx = np.zeros((bh, nqb, nqb), np.int32)
visible = np.zeros((bh, s, s), bool)
for h in range(bh):
    for qb in range(nqb):
        blocks = [j for j in range(nqb) if j == qb or rng.random() < 0.5]
        num[h, qb] = len(blocks)
        idx[h, qb, :len(blocks)] = blocks
        for j in blocks:
            visible[h, qb * blk:(qb + 1) * blk, j * blk:(j + 1) * blk] = True
out, lse = poisoned((bh, s, d)), poisoned((bh, s))
launch(example("block_sparse_attention"), (nqb, bh),
       [q, kk, v, out, lse, num, idx, bh, s, nqb, nqb, 0.125])
ro, rl = attention_reference(q, kk, v, visible, 0.125)
check("example block_sparse_attention", out, ro, 1e-4, 1e-5)
check("example block_sparse_attention lse", lse, rl, 1e-5, 1e-5)

# -- the operators (kiln.ops, on the recorded bundles) ---------------------------------
# -- Triton's tutorials as Triton users write them (examples/python/triton_*.py) ----
# @kiln.jit kernels: recorded through JITFunction.warmup for this target (the
# kiln IR of the specialization these launches take, compiled by kilnc with
# its warps and stages), run from their bundles. Recording and running build
# the same arguments (port_args), so the recorded specialization (ints equal
# to 1, divisible by 16, not negative) is the one launched.
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
if not kiln.HAS_COMPILER:
    # (The device's runtime-only module: these kernels run from bundles, and
    # the examples' decorator only has to leave their functions importable.)
    kiln.jit = lambda fn=None, **_: fn if fn is not None else (lambda f: f)
import triton_attention as tfa_ex  # noqa: E402
import triton_matmul as tmm_ex  # noqa: E402


def port_bundle(name, kernel, grid, args, kw, flags=()):
    """The bundle of `kernel[grid](*args, **kw)` (args: what the kernel takes,
    kiln.bf16 wrappers for bf16 arrays; `flags`: more kilnc options)."""
    path = os.path.join(BUNDLES, f"port-{name}.kiln")
    if not os.path.exists(path) and opts.record:
        saved = os.environ.get("KILN_TARGET")
        os.environ["KILN_TARGET"] = TARGET
        try:
            ck = kernel.warmup(*args, grid=grid, **kw)
        finally:
            if saved is None:
                del os.environ["KILN_TARGET"]
            else:
                os.environ["KILN_TARGET"] = saved
        src = path[:-len(".kiln")] + ".mlir"
        with open(src, "w") as f:
            f.write(ck.ir("kiln"))
        compile_bundle(path, [src, "--num-warps", str(kw.get("num_warps", 4)),
                              "--num-stages", str(kw.get("num_stages", 2)), *flags])
    return path


def port_values(args):
    """The bundle's arguments for the kernel's: bf16 and fp8 wrappers as their
    bits."""
    return [a.array if isinstance(a, (kiln.bf16, kiln.fp8)) else a for a in args]


def port_matmul(m, n, k, a, b, c, tag):
    """(bundle, grid, arguments) of the tutorial matmul on a [m, k], b [k, n],
    c [m, n]; `tag` names the specialization (the same where it is recorded,
    with numpy arrays, and where it runs, with them or with device tensors)."""
    grid, args, kw = tmm_ex.launch_args(a, b, c, m, n, k, tmm_ex.GPU_CONFIG)
    return port_bundle("matmul-" + tag, tmm_ex.matmul_kernel, grid, args, kw), grid, args


def port_attention(shape, causal, q, k, v, o, lse, tag, block=(64, 64), warps=4, stages=2):
    Z, H, N, D = shape
    grid, args, kw = tfa_ex.launch_args(q, k, v, o, lse, Z, H, N, D, causal, *block,
                                        num_warps=warps, num_stages=stages)
    tag = (f"{'causal' if causal else 'dense'}-d{D}-b{block[0]}x{block[1]}-w{warps}"
           f"-s{stages}-{tag}")
    return port_bundle("attention-" + tag, tfa_ex._attn_fwd, grid, args, kw), grid, args


# The tutorial matmul at bf16, rows of 592 and 272 bytes (TMA on sm_90a) and
# of 600 and 260 (cp.async), ragged against its 128 x 256 x 64 tiles.
for M, N, K in ((200, 136, 296), (200, 130, 300)):
    a = rng.standard_normal((M, K)).astype(np.float32)
    bm = rng.standard_normal((K, N)).astype(np.float32)
    a16, ar = bf16_bits(a)
    b16, br = bf16_bits(bm)
    c = poisoned((M, N))
    path, grid, args = port_matmul(M, N, K, kiln.bf16(a16), kiln.bf16(b16), c, f"{N}x{K}")
    launch(path, grid, port_values(args))
    check(f"Triton tutorial matmul bf16 {M}x{N}x{K}", c, ar.astype(np.float64) @ br, 1e-4, 1e-2)

# The tutorial attention at bf16 (float32 output), dense and causal, a length
# that is not a multiple of the blocks, two heads; at 64 x 64 with 4 warps and
# at the benchmark's 128 x 64 with 8 warps (on sm_90a two warpgroups of 64 rows
# that take turns at the tensor cores: docs/gpu.md, "Pingpong").
for causal, block, warps in ((False, (64, 64), 4), (True, (64, 64), 4),
                             (False, (128, 64), 8), (True, (128, 64), 8)):
    shape = (1, 2, 300 if warps == 8 else 150, 64)
    q, k, v = (bf16_bits(rng.standard_normal(shape).astype(np.float32)) for _ in range(3))
    o = poisoned(shape)
    lse = poisoned((2, shape[2]))
    path, grid, args = port_attention(shape, causal, *(kiln.bf16(t[0]) for t in (q, k, v)), o,
                                      lse, "check", block, warps)
    launch(path, grid, port_values(args))
    ro, rl = tfa_ex.reference(q[1], k[1], v[1], causal)
    what = ("causal" if causal else "dense") + ("" if warps == 4 else
                                                f" {block[0]}x{block[1]} w{warps}")
    check(f"Triton tutorial attention bf16 {what}", o, ro, 2e-2, 2e-2)
    check(f"Triton tutorial attention log-sum-exp {what}", lse, rl, 1e-3, 1e-3)


# The Python examples (examples/python/*.py, @kiln.jit kernels; the MLIR ones
# ran above), recorded the same way, at ragged sizes.
import block_sparse_attention as bsa_ex  # noqa: E402
import flash_attention as fa_ex  # noqa: E402
import layernorm as ln_ex  # noqa: E402
import matmul as mm_ex  # noqa: E402
import softmax as sm_ex  # noqa: E402
import vector_add as va_ex  # noqa: E402


def py_example(name, kernel, grid, args, kw):
    """Launches an example kernel from its bundle (recorded through warmup)."""
    launch(port_bundle("pyex-" + name, kernel, grid, args, kw), grid, port_values(args))


n = 100_003
x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
out = poisoned(n)
py_example("vector_add", va_ex.add_kernel, (cdiv(n, 1024),), (x, y, out, n), dict(BLOCK=1024))
check("python example vector_add", out, x.astype(np.float64) + y, 1e-6, 1e-6)

m, k = 37, 1000
xs = (rng.standard_normal((m, k)) * 4).astype(np.float32)
out = poisoned((m, k))
py_example("softmax", sm_ex.softmax_kernel, (m,), (xs, out, k),
           dict(BLOCK=sm_ex.next_pow2(k)))
check("python example softmax", out, sm_ex.reference(xs), 1e-4, 1e-6)

w, b = rng.standard_normal(k).astype(np.float32), rng.standard_normal(k).astype(np.float32)
out = poisoned((m, k))
py_example("layernorm", ln_ex.layernorm_kernel, (m,), (xs, w, b, out, k, 1e-5),
           dict(BLOCK=256))
check("python example layernorm", out, ln_ex.reference(xs, w, b), 1e-4, 1e-4)

M, N, K = 200, 130, 300
a, bm = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
c = poisoned((M, N))
# (The example autotunes; one of its configurations here.)
py_example("matmul", mm_ex.matmul_kernel.fn, (cdiv(N, 64), cdiv(M, 64)), (a, bm, c, M, N, K),
           dict(BM=64, BN=64, BK=64))
check("python example matmul", c, a.astype(np.float64) @ bm, 1e-4, 1e-3)

heads, seq, d = 2, 150, 64
q, k_, v = (rng.standard_normal((heads, seq, d)).astype(np.float32) for _ in range(3))
for causal in (False, True):
    out = poisoned((heads, seq, d))
    py_example("flash_attention" + ("-causal" if causal else ""), fa_ex.attention_kernel,
               (cdiv(seq, 64), heads), (q, k_, v, out, seq, 1.0 / np.sqrt(d)),
               dict(CAUSAL=causal, D=d, BM=64, BN=64))
    check(f"python example flash_attention{' causal' if causal else ''}", out,
          fa_ex.reference(q, k_, v, causal), 1e-4, 1e-5)

kv_num, kv_idx = bsa_ex.random_block_mask(heads, seq, density=0.5, seed=7)
out, lse = poisoned((heads, seq, d)), poisoned((heads, seq))
nqb = cdiv(seq, 64)
py_example("block_sparse_attention", bsa_ex.bsa_kernel, (nqb, heads),
           (q, k_, v, out, lse, kv_num, kv_idx, seq, nqb, kv_idx.shape[-1], 1.0 / np.sqrt(d)),
           dict(D=d, BLOCK=64))
ro, rl = bsa_ex.reference(q, k_, v, kv_num, kv_idx)
check("python example block_sparse_attention", out, ro, 1e-4, 1e-5)
check("python example block_sparse_attention lse", lse, rl, 1e-5, 1e-5)

# Triton's layer-norm tutorial: forward, and backward whose programs take
# spin locks (kl.atomic_cas) to add their partial dw / db into 8 groups.
import triton_layernorm as tln_ex  # noqa: E402
M, N = 130, 1000
x = rng.standard_normal((M, N)).astype(np.float32)
w, b = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
dy = rng.standard_normal((M, N)).astype(np.float32)
y, mean, rstd = poisoned((M, N)), poisoned(M), poisoned(M)
py_example("triton_layernorm-fwd", tln_ex._layer_norm_fwd_fused, (M,),
           (x, y, w, b, mean, rstd, N, N, 1e-5), dict(BLOCK_SIZE=256))
locks = np.zeros(16, np.int32)
dw_part, db_part = np.zeros((8, N), np.float32), np.zeros((8, N), np.float32)
dx = poisoned((M, N))
py_example("triton_layernorm-bwd-dx", tln_ex._layer_norm_bwd_dx_fused, (M,),
           (dx, dy, dw_part, db_part, x, w, mean, rstd, locks, N, N),
           dict(GROUP_SIZE_M=8, BLOCK_SIZE_N=tln_ex.next_pow2(N)))
dw, db = poisoned(N), poisoned(N)
py_example("triton_layernorm-bwd-dwdb", tln_ex._layer_norm_bwd_dwdb, (cdiv(N, 64),),
           (dw_part, db_part, dw, db, 8, N), dict(BLOCK_SIZE_M=32, BLOCK_SIZE_N=64))
ry, rdx, rdw, rdb = tln_ex.reference(x, w, b, dy)
check("Triton tutorial layer norm forward", y, ry, 1e-4, 1e-4)
check("Triton tutorial layer norm dx", dx, rdx, 1e-4, 1e-3)
check("Triton tutorial layer norm dw (locked partial sums)", dw, rdw, 1e-4, 1e-2)
check("Triton tutorial layer norm db (locked partial sums)", db, rdb, 1e-4, 1e-2)

# Block-scaled (MX) matmul: kl.dot_scaled's decode and scaling feeding the
# tensor cores, MXFP8 (e4m3) activations times MXFP4 (e2m1) weights.
import mx_matmul as mx_ex  # noqa: E402
M, N, K = 200, 150, 256
ac, asc = mx_ex.quantize_mx(rng.standard_normal((M, K)), "e4m3", 1)
bc, bsc = mx_ex.quantize_mx(rng.standard_normal((K, N)) * 0.05, "e2m1", 0)
c = poisoned((M, N))
py_example("mx_matmul-e4m3-e2m1", mx_ex.mx_matmul_kernel, (cdiv(M, 64), cdiv(N, 64)),
           (mx_ex.pack(ac, "e4m3", 1), asc.astype(np.uint8).view(np.int8), mx_ex.pack(bc, "e2m1", 0),
            np.ascontiguousarray(bsc.T.astype(np.uint8).view(np.int8)), c, M, N, K),
           dict(FMT_A="e4m3", FMT_B="e2m1", BM=64, BN=64, BK=64))
check("MX matmul e4m3 x e2m1 (dot_scaled)", c, mx_ex.reference(ac, asc, "e4m3", bc, bsc.T, "e2m1"),
      1e-5, 1e-6)

# Triton's grouped GEMM tutorial: matrices found through tables of
# addresses (kl.pointer_type). The tables hold where the matrices live: host
# addresses on the emulator, the device copies' data_ptr() on a GPU.
import triton_grouped_gemm as tgg_ex  # noqa: E402
shapes = [(64, 80, 48), (100, 33, 70), (17, 129, 64), (128, 128, 128)]
As = [rng.standard_normal((m, k)).astype(np.float16) for m, n, k in shapes]
Bs = [rng.standard_normal((k, n)).astype(np.float16) for m, n, k in shapes]
Cs = [poisoned((m, n), np.float16) for m, n, k in shapes]
grid, gg_args, gg_kw = tgg_ex.launch_args(As, Bs, Cs, num_sm=8, block=(64, 64, 32))
gg_path = port_bundle("pyex-triton_grouped_gemm", tgg_ex.grouped_matmul_kernel, grid,
                      gg_args, gg_kw)
if RUN and ACTIVE and not EMULATED and _captured is None:
    dA, dB, dC = ([to_dev(x) for x in xs] for xs in (As, Bs, Cs))
    _, dev_args, _ = tgg_ex.launch_args(dA, dB, dC, num_sm=8, block=(64, 64, 32))
    load(gg_path)[grid](*[to_dev(v) if isinstance(v, np.ndarray) else v for v in dev_args])
    torch.cuda.synchronize()
    for c, t in zip(Cs, dC):
        np.copyto(c, to_host(t))
else:
    launch(gg_path, grid, port_values(gg_args))
for i, (a, b, c) in enumerate(zip(As, Bs, Cs)):
    ref = a.astype(np.float64) @ b
    check(f"Triton tutorial grouped GEMM, problem {i} (pointer tables)", c, ref, 1e-3,
          1e-3 * np.abs(ref).max())

# FP8 GEMM with DeepSeek-V3-style block scales: float8e4nv tiles (decoded
# exactly), 1x128 activation and 128x128 weight scales.
import fp8_blockwise_matmul as f8_ex  # noqa: E402
M, N, K = 150, 300, 520
ac, a_s = f8_ex.quantize_activations(rng.standard_normal((M, K)))
wc, w_s = f8_ex.quantize_weights(rng.standard_normal((N, K)) * 0.02)
c = poisoned((M, N))
grid, f8_args, f8_kw = f8_ex.launch_args(ac, a_s, wc, w_s, c, block=(64, 64))
py_example("fp8_blockwise_matmul", f8_ex.fp8_blockwise_matmul_kernel, grid, f8_args, f8_kw)
ref = f8_ex.reference(ac, a_s, wc, w_s)
# (On sm_90a the dot runs on wgmma's e4m3 form, whose sums over each K step
# of 128 are not float32's: DeepSeek-V3 reports about 14 bits kept on the
# H800. Hence 2^-12 of the sum of the products' magnitudes, where float32
# sums, the emulator's and the decoded forms', stay within 1e-6 of |C|.)
mag = (np.abs(f8_ex.dequantize(ac, a_s, 1)) @ np.abs(f8_ex.dequantize(wc, w_s, 128)).T).max()
check("FP8 block-scaled GEMM (float8e4nv)", c, ref, 1e-5,
      2.0 ** -12 * mag if TARGET.endswith("sm_90a") and not EMULATED
      else 1e-6 * np.abs(ref).max())

# examples/matmul_fp8.mlir: kiln.dot on e4m3 x e5m2 bytes (lhs_fp8 /
# rhs_fp8), W's rows transposed: wgmma's fp8 form on sm_90a, decoded to bf16
# elsewhere. No NaN codes, no e5m2 infinities.
M, N, K = 150, 130, 300
a8 = rng.integers(0, 256, (M, K)).astype(np.uint8)
a8[(a8 & 0x7F) == 0x7F] = 0x38
w8 = rng.integers(0, 256, (N, K)).astype(np.uint8)
w8[(w8 & 0x7C) == 0x7C] = 0x3C
c = poisoned((M, N))
launch(example("matmul_fp8"), (cdiv(N, 64), cdiv(M, 64)),
       [a8.view(np.int8), w8.view(np.int8), c, M, N, K])
da, dw = mx_ex.decode_mx(a8, "e4m3"), mx_ex.decode_mx(w8, "e5m2")
check("example matmul fp8 (e4m3 x e5m2)", c, da @ dw.T, 1e-5,
      (2.0 ** -12 if TARGET.endswith("sm_90a") and not EMULATED else 1e-6)
      * (np.abs(da) @ np.abs(dw).T).max())

# W4A16 GEMM: GPTQ-style int4 weights (packed along K, group scales of 128),
# float16 activations; K not a multiple of 8 or of the group.
import w4a16_matmul as w4_ex  # noqa: E402
M, N, K = 150, 200, 520
qw, ws = w4_ex.quantize(rng.standard_normal((K, N)) * 0.05)
a = rng.standard_normal((M, K)).astype(np.float16)
c = poisoned((M, N))
grid, w4_args, w4_kw = w4_ex.launch_args(a, qw, ws, c)
py_example("w4a16_matmul", w4_ex.w4a16_matmul_kernel, grid, w4_args, w4_kw)
ref = w4_ex.reference(a, qw, ws)
check("W4A16 GEMM (GPTQ int4 weights)", c, ref, 1e-5,
      1e-5 * (np.abs(a).astype(np.float64) @ np.abs(w4_ex.dequantize(qw, ws, K))).max())

# W8A8 GEMM: int8 activations and weights (per-row and per-channel scales),
# exact int32 sums, float16 output; M, N and K not multiples of the blocks.
import w8a8_matmul as w8_ex  # noqa: E402
M, N, K = 150, 200, 520
a8q, a8s = w8_ex.quantize(rng.standard_normal((M, K)))
w8q, w8s = w8_ex.quantize(rng.standard_normal((N, K)) * 0.05)
c = poisoned((M, N), np.float16)
grid, w8_args, w8_kw = w8_ex.launch_args(a8q, a8s, w8q, w8s, c, block=(64, 64, 128))
py_example("w8a8_matmul", w8_ex.w8a8_matmul_kernel, grid, w8_args, w8_kw)
ref = w8_ex.reference(a8q, a8s, w8q, w8s)
check("W8A8 GEMM (int8 x int8 -> int32, dequantized to f16)", c, ref, 1e-3,
      1e-3 * np.abs(ref).max())
c = poisoned((M, N), np.float16)
grid, w8_args, w8_kw = w8_ex.launch_args(a8q, a8s, np.ascontiguousarray(w8q.T), w8s, c,
                                         block=(64, 64, 128), w_kn=True)
py_example("w8a8_matmul_kn", w8_ex.w8a8_matmul_kernel, grid, w8_args, w8_kw)
check("W8A8 GEMM, weights W^T [K, N] (copied transposed)", c, ref, 1e-3,
      1e-3 * np.abs(ref).max())

# Triton's low-memory dropout tutorial: the seeded kernel's keep mask is
# kl.rand (Philox on the device), the same bits as NumPy's reference.
import triton_dropout as tdo_ex  # noqa: E402
n = 100_003
x = rng.standard_normal(n).astype(np.float32)
out = poisoned(n)
py_example("triton_dropout-seeded", tdo_ex._seeded_dropout, (cdiv(n, 1024),),
           (x, out, n, 0.5, 987654321), dict(BLOCK_SIZE=1024))
check("Triton tutorial seeded dropout (Philox bits exact)", out,
      tdo_ex.reference(x, 0.5, 987654321), 0, 0)


# Random tile programs (test/python/kernel_fuzz.py: GEMM-like, attention-like,
# gathers and row kernels with random masks, casts, views and tails), at fixed
# seeds so that recording and running draw the same kernels, inputs, warps
# and stages: on a GPU they check the real math (ex2.approx, cvt.rn.bf16x2,
# the hardware's mma/wgmma sums) against the same source run in float64.
sys.path.insert(0, os.path.join(ROOT, "test", "python"))
import kernel_fuzz  # noqa: E402

FUZZ_SEED, FUZZ_KERNELS = 20261206, 24
for seed in range(FUZZ_SEED, FUZZ_SEED + FUZZ_KERNELS):
    fz_source, fz_spec = kernel_fuzz.generate(seed)
    fz_name = f"fuzz_{fz_spec['family']}_{seed}"
    fz_kernel = kernel_fuzz.load_kernel(BUNDLES, fz_name, fz_source)
    fz_rng = np.random.default_rng(seed)
    fz_args, fz_ref_args = kernel_fuzz.arguments(fz_spec, fz_rng, kiln.bf16, kiln.fp8)
    fz_kw = dict(fz_spec["constexprs"], num_warps=int(fz_rng.choice([4, 8])),
                 num_stages=int(fz_rng.choice([1, 2, 3])))
    py_example(fz_name, fz_kernel, fz_spec["grid"], fz_args, fz_kw)
    if RUN and ACTIVE:
        fz_ref = kernel_fuzz.reference(fz_source, fz_name, fz_spec["grid"], fz_ref_args,
                                       fz_spec["constexprs"])
        for o, problem in kernel_fuzz.check_outputs(fz_spec, fz_args, fz_ref, kiln.bf16):
            print(f"{'PASS' if problem is None else 'FAIL'} random kernel {seed} "
                  f"({fz_spec['family']}, w{fz_kw['num_warps']} s{fz_kw['num_stages']}) "
                  f"{o}{': ' + problem if problem else ''}",
                  flush=True)
            if problem:
                failures.append(f"random kernel {seed} {o}")


section("ops")


def op_case(name, fn):
    """Runs one operator case; a GPU target being recorded only compiles."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001  (reported, counted, the run goes on)
        if (not RUN or not ACTIVE) and isinstance(e, (IndexError, ValueError)):
            return  # outputs of unlaunched kernels are garbage
        print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
        failures.append(name)


def case_embedding():
    vocab, dim, n_ids = 1000, 300, 77
    weight = rng.standard_normal((vocab, dim)).astype(np.float32)
    ids = rng.integers(0, vocab, n_ids).astype(np.int32)
    check("op embedding f32", ops.embedding(weight, ids), weight[ids], 0, 0)
    bits, _ = bf16_bits(weight)
    got = ops.embedding(kiln.bf16(bits), ids)
    if RUN and ACTIVE:
        check("op embedding bf16 (bit copy)", got.array.view(np.int16), bits[ids].view(np.int16),
              0, 0)
    bad = ids.copy()
    bad[5] = vocab + 3
    try:
        ops.embedding(weight, bad)
        if RUN and ACTIVE:
            print("FAIL op embedding: an out-of-range id was not reported")
            failures.append("embedding range")
    except IndexError as e:
        ref = weight[np.clip(bad, 0, vocab - 1)]
        ref[5] = 0
        check("op embedding out-of-range id (zeros, IndexError)", e.partial, ref, 0, 0)


def on_torch(torch_in):
    """(to, back) for a case run on numpy arrays (identity) or, torch_in, on
    PyTorch CUDA tensors (GPU runs only: None, the numpy case recorded the
    same kernels)."""
    if not torch_in:
        return (lambda a: a), (lambda a: a)
    if EMULATED or not RUN or not ACTIVE:
        return None
    return to_dev, to_host


def case_embedding_torch():
    """embedding on PyTorch CUDA tensors: int64 ids, two out of range (zeros;
    an IndexError after reading the count back, or the count added to the
    caller's errors tensor without a wait)."""
    if on_torch(True) is None:
        return
    to, back = on_torch(True)
    vocab, dim = 1000, 300
    weight = rng.standard_normal((vocab, dim)).astype(np.float32)
    ids = rng.integers(0, vocab, 77)
    ids[5], ids[9] = vocab + 3, -2
    errors = torch.zeros(2, dtype=torch.int32, device=dev)
    got = ops.embedding(to(weight), to(ids), errors=errors)
    ref = weight[np.clip(ids, 0, vocab - 1)]
    ref[[5, 9]] = 0
    check("op embedding on PyTorch tensors (int64 ids, 2 out of range)", back(got), ref, 0, 0)
    check("op embedding on PyTorch tensors: errors count", back(errors), [2, 0], 0, 0)
    try:
        ops.embedding(to(weight), to(ids))
        print("FAIL op embedding on PyTorch tensors: out-of-range ids were not raised")
        failures.append("embedding torch range")
    except IndexError as e:
        if "2 id(s)" not in str(e):
            print(f"FAIL op embedding on PyTorch tensors: {e}")
            failures.append("embedding torch range")


def case_paged_kv(torch_in=False):
    if on_torch(torch_in) is None:
        return
    to, back = on_torch(torch_in)
    nb, bs, heads, hd = 23, 16, 2, 40
    cache = rng.standard_normal((nb, bs, heads, hd)).astype(np.float32)
    lens = np.array([37, 5, 100], np.int32)
    table = np.stack([rng.permutation(nb)[:7] for _ in lens]).astype(np.int32)
    # On PyTorch: an int64 table, and max_len read from the device's lens.
    got = ops.paged_kv_gather(to(cache), to(table.astype(np.int64)) if torch_in else table,
                              to(lens))
    ref = np.zeros((3, 100, heads, hd))
    for bi, ln in enumerate(lens):
        for t in range(ln):
            ref[bi, t] = cache[table[bi, t // bs], t % bs]
    check("op paged_kv_gather" + (" on PyTorch tensors" if torch_in else ""), back(got), ref,
          0, 0)


def case_moe(torch_in=False):
    if on_torch(torch_in) is None:
        return
    to, back = on_torch(torch_in)
    where = " on PyTorch tensors" if torch_in else ""
    tokens, hidden, experts, topk = 45, 200, 6, 2
    xt = rng.standard_normal((tokens, hidden)).astype(np.float32)
    ids = np.stack([rng.choice(experts, topk, replace=False) for _ in range(tokens)])
    src, slots, offsets = ops.moe_route(to(ids), experts)
    if torch_in:  # routed by PyTorch on the device: the host's grouping
        for name, g, w in zip(("src_rows", "slot_rows", "offsets"), (src, slots, offsets),
                              ops.moe_route(ids, experts)):
            check(f"op moe_route{where} {name}", back(g), w, 0, 0)
    perm = ops.moe_permute(to(xt), src)
    hsrc = back(src)
    check("op moe_permute" + where, back(perm), xt[hsrc], 0, 0)
    y = (back(perm) * 2 + 1).astype(np.float32)
    wts = rng.random((tokens, topk)).astype(np.float32)
    got = ops.moe_unpermute(to(y), slots, to(wts))
    ref = (y.astype(np.float64)[back(slots)] * wts[..., None]).sum(axis=1)
    check("op moe_unpermute" + where, back(got), ref, 1e-5, 1e-5)


def block_sizes(block):
    """An attention block: 64 (square) or (query block, key block)."""
    return block if isinstance(block, tuple) else (block, block)


def case_attention(dtype, mask_kind, heads=(2, 1), seq=150, window=64, block=64,
                   out_dtype="f32"):
    B, Hq, Hkv, S, D = 2, heads[0], heads[1], seq, 64
    q = rng.standard_normal((B, Hq, S, D)).astype(np.float32)
    k = rng.standard_normal((B, Hkv, S, D)).astype(np.float32)
    v = rng.standard_normal((B, Hkv, S, D)).astype(np.float32)
    rules = {"none": lambda b_, h_, qi, ki: np.ones_like(qi + ki, bool),
             "causal": lambda b_, h_, qi, ki: ki <= qi,
             "sliding_window": lambda b_, h_, qi, ki: (ki <= qi) & (qi - ki < window)}
    bq, bkv = block_sizes(block)
    mask = ops.block_mask(rules[mask_kind], B, Hq, S, S, block=bq, block_kv=bkv)
    if dtype == "bf16":
        bits = [bf16_bits(a) for a in (q, k, v)]
        args = [kiln.bf16(bb) for bb, _ in bits]
        q, k, v = (r for _, r in bits)
    elif dtype == "f16":
        args = [a.astype(np.float16) for a in (q, k, v)]
        q, k, v = (a.astype(np.float32) for a in args)
    else:
        args = [q, k, v]
    out, lse = ops.block_sparse_attention(*args, mask, mask_kind, window=window,
                                          out_dtype=out_dtype)
    if out_dtype == "bf16":
        out = (out.array.astype(np.uint32) << 16).view(np.float32)
    g = Hq // Hkv
    kr, vr = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    qi, ki = np.arange(S)[:, None], np.arange(S)[None, :]
    vis = np.broadcast_to(rules[mask_kind](0, 0, qi, ki), (B, Hq, S, S))
    ro, rl = attention_reference(q, kr, vr, vis, 1 / math.sqrt(D))
    # The kernel rounds P to the input type before P @ V (the reference does
    # not): bf16's 8-bit significand is up to 2^-9 of each p, a few 1e-3 of
    # the output at unit-variance v (0.0022 and 0.0028 seen at two seeds).
    tol = {"f32": 1e-4, "f16": 2e-3, "bf16": 1e-2}[dtype]
    if out_dtype == "bf16":  # and the output's rounding: 2^-9 relative
        tol = max(tol, 1e-2)
    name = (f"op block_sparse_attention {dtype} {mask_kind} blocks {bq}x{bkv}"
            + (f" out {out_dtype}" if out_dtype != "f32" else ""))
    check(f"{name} (Hq {Hq}, Hkv {Hkv})", out, ro, tol, tol)
    check(f"{name} lse", lse, rl, tol, tol)


def case_dsa(torch_in=False):
    """The indexer, top-k and token-sparse attention (f32), on numpy arrays
    or PyTorch CUDA tensors (int64 indices there, as torch.topk returns)."""
    if on_torch(torch_in) is None:
        return
    to, back = on_torch(torch_in)
    where = " on PyTorch tensors" if torch_in else ""
    T, S, H, Dq, topk = 37, 150, 4, 32, 20
    qi_ = rng.standard_normal((T, H, Dq)).astype(np.float32)
    w_ = rng.random((T, H)).astype(np.float32)
    k_ = rng.standard_normal((S, Dq)).astype(np.float32)
    off = S - T
    scores = back(ops.dsa_indexer(to(qi_), to(w_), to(k_), q_offset=off))
    ref = np.einsum("th,tsh->ts", w_.astype(np.float64),
                    np.maximum(np.einsum("thd,sd->tsh", qi_.astype(np.float64), k_), 0))
    ref[np.arange(S)[None, :] > off + np.arange(T)[:, None]] = -np.inf
    check("op dsa_indexer" + where, scores, ref, 1e-4, 1e-4)
    ref_scores = ref.astype(np.float32) if RUN and ACTIVE else scores
    sel = back(ops.dsa_topk(to(ref_scores), topk))
    rsel = np.full((T, topk), -1, np.int64)
    for t in range(T):
        fin = np.nonzero(np.isfinite(ref_scores[t]))[0]
        order = fin[np.lexsort((fin, -ref_scores[t][fin]))][:topk]
        rsel[t, :len(order)] = np.sort(order)
    check("op dsa_topk" + where, sel, rsel, 0, 0)
    Hq, Dqk, Dv = 5, 48, 32
    q = rng.standard_normal((T, Hq, Dqk)).astype(np.float32)
    kv = rng.standard_normal((S, Dqk)).astype(np.float32)
    use = rsel.astype(np.int32)
    out, lse = ops.dsa_sparse_attention(to(q), to(kv), to(use.astype(np.int64)) if torch_in
                                        else use, Dv, block_k=16)
    out, lse = back(out), back(lse)
    scale = 1 / math.sqrt(Dqk)
    ro, rl = np.zeros((T, Hq, Dv)), np.zeros((T, Hq))
    for t in range(T):
        keys = use[t][use[t] >= 0]
        sc = q[t].astype(np.float64) @ kv[keys].T * scale
        mx = sc.max(axis=1, keepdims=True)
        p = np.exp(sc - mx)
        ro[t] = p @ kv[keys, :Dv] / p.sum(axis=1, keepdims=True)
        rl[t] = np.log(p.sum(axis=1)) + mx[:, 0]
    check("op dsa_sparse_attention (block_k 16)" + where, out, ro, 1e-4, 1e-4)
    check("op dsa_sparse_attention lse" + where, lse, rl, 1e-4, 1e-4)


def case_dsa_indexer(dtype):
    """The lightning indexer on e4m3 q and k with per-key scales (DeepSeek-
    V3.2's) or bf16 ones, kiln.ops picking 64 queries per program (sm_90a:
    wgmma); T and S not multiples of the blocks, causal."""
    T, S, H, D = 100, 300, 8, 128
    w_ = rng.random((T, H)).astype(np.float32)
    if dtype == "e4m3":
        qc = rng.integers(0, 256, (T, H, D)).astype(np.uint8)
        kc = rng.integers(0, 256, (S, D)).astype(np.uint8)
        qc[(qc & 0x7F) == 0x7F] = 0x38   # no NaN
        kc[(kc & 0x7F) == 0x7F] = 0x38
        ks = (rng.random(S) + 0.5).astype(np.float32)
        qv, kv = mx_ex.decode_mx(qc, "e4m3"), mx_ex.decode_mx(kc, "e4m3")
        I = ops.dsa_indexer(kiln.fp8(qc, "e4m3"), w_, kiln.fp8(kc, "e4m3"), q_offset=S - T,
                            k_scale=ks)
    else:
        (qb, qv), (kb, kv) = bf16_bits(rng.standard_normal((T, H, D))), \
            bf16_bits(rng.standard_normal((S, D)))
        ks = np.ones(S)
        I = ops.dsa_indexer(kiln.bf16(qb), w_, kiln.bf16(kb), q_offset=S - T)
    qv, kv = qv.astype(np.float64), kv.astype(np.float64)
    ref = np.einsum("th,tsh->ts", w_.astype(np.float64),
                    np.maximum(np.einsum("thd,sd->tsh", qv, kv), 0)) * ks[None, :]
    mag = np.einsum("th,tsh->ts", w_, np.einsum("thd,sd->tsh", np.abs(qv), np.abs(kv))) * ks
    ref[np.arange(S)[None, :] > S - T + np.arange(T)[:, None]] = -np.inf
    # (fp8 wgmma keeps about 14 bits in its sums; bf16 and the emulator f32's.)
    tol = (2.0 ** -12 if dtype == "e4m3" and TARGET.endswith("sm_90a") and not EMULATED
           else 1e-6) * mag.max()
    check(f"op dsa_indexer {dtype}", I, ref, 1e-5, tol)


def case_dsa_bf16():
    """bf16 token-sparse attention at DeepSeek's MLA shape (d_qk 576, d_v 512):
    tensor cores, P rounded to bf16 before P @ V (as in the reference)."""
    Sq, Hq, Skv, Dqk, Dv, topk = 4, 32, 300, 576, 512, 90
    q, qr = bf16_bits(rng.standard_normal((Sq, Hq, Dqk)).astype(np.float32))
    kv, kvr = bf16_bits(rng.standard_normal((Skv, Dqk)).astype(np.float32))
    use = np.full((Sq, topk), -1, np.int32)
    for t, n in enumerate((90, 61, 1, 0)):
        use[t, :n] = rng.choice(Skv, n, replace=False)
    out, lse = ops.dsa_sparse_attention(kiln.bf16(q), kiln.bf16(kv), use, Dv, block_k=32)
    ro, rl = np.zeros((Sq, Hq, Dv)), np.full((Sq, Hq), -np.inf)
    for t in range(Sq):
        keys = use[t][use[t] >= 0]
        if keys.size == 0:
            continue
        sc = qr[t].astype(np.float64) @ kvr[keys].T.astype(np.float64) / math.sqrt(Dqk)
        mx = sc.max(axis=1, keepdims=True)
        p = np.exp(sc - mx)
        pr = bf16_bits(p.astype(np.float32))[1].astype(np.float64)
        ro[t] = pr @ kvr[keys, :Dv] / p.sum(axis=1, keepdims=True)
        rl[t] = np.log(p.sum(axis=1)) + mx[:, 0]
    check("op dsa_sparse_attention bf16 (d_qk 576, d_v 512)", out, ro, 1e-2, 1e-2)
    check("op dsa_sparse_attention bf16 lse", lse, rl, 1e-4, 1e-4)


def conv_reference(x, w, bias, stride, pad):
    """NHWC x [N, H, W, C], w [KH, KW, C, OC]."""
    N, H, W, C = x.shape
    KH, KW, _, OC = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    OH, OW = (H + 2 * pad - KH) // stride + 1, (W + 2 * pad - KW) // stride + 1
    out = np.zeros((N, OH, OW, OC)) + bias
    for i in range(KH):
        for j in range(KW):
            patch = xp[:, i:i + stride * OH:stride, j:j + stride * OW:stride, :]
            out += patch @ w[i, j].astype(np.float64)
    return out


def case_conv(dtype):
    N, H, W, C, OC = 2, 19, 23, 12, 20
    x = rng.standard_normal((N, H, W, C)).astype(np.float32)
    w = (rng.standard_normal((3, 3, C, OC)) * 0.2).astype(np.float32)
    bias = rng.standard_normal(OC).astype(np.float32)
    if dtype == "bf16":
        (xb, x), (wb, w) = bf16_bits(x), bf16_bits(w)
        got = ops.conv2d(kiln.bf16(xb), kiln.bf16(wb), bias, stride=2, padding=1)
    else:
        got = ops.conv2d(x, w, bias, stride=2, padding=1)
    check(f"op conv2d {dtype} (stride 2, pad 1)", got, conv_reference(x, w, bias, 2, 1),
          1e-4, 1e-3)


def depthwise_reference(x, w, bias):
    """A 3x3 depthwise convolution, stride 1, padding 1, in float64."""
    N, H, W, C = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    ref = np.zeros((N, H, W, C)) + bias
    for i in range(3):
        for j in range(3):
            ref += xp[:, i:i + H, j:j + W, :] * w[i, j]
    return ref


def case_depthwise():
    N, H, W, C = 2, 17, 21, 70
    x = rng.standard_normal((N, H, W, C)).astype(np.float32)
    w = rng.standard_normal((3, 3, C)).astype(np.float32)
    bias = rng.standard_normal(C).astype(np.float32)
    got = ops.depthwise_conv2d(x, w, bias, stride=1, padding=1)
    ref = depthwise_reference(x, w, bias)
    check("op depthwise_conv2d", got, ref, 1e-4, 1e-4)


def case_patch_embed():
    N, T, H, W, C, P, OC = 1, 1, 32, 48, 3, 16, 24
    x = rng.standard_normal((N, T, H, W, C)).astype(np.float32)
    w = (rng.standard_normal((1, P, P, C, OC)) * 0.1).astype(np.float32)
    got = ops.patch_embed(x, w, patch=P)
    patches = x.reshape(N, T, H // P, P, W // P, P, C).transpose(0, 1, 2, 4, 3, 5, 6)
    ref = patches.reshape(N, T, H // P, W // P, P * P * C).astype(np.float64) @ \
        w.reshape(P * P * C, OC)
    check("op patch_embed (16x16)", got, ref, 1e-4, 1e-3)


def case_mask_counts():
    """block_mask_counts, the kernel behind @kiln.jit mask_mods: its fused
    mod is traced where the compiler lives (recording) and kept with the
    bundle, since tracing needs the compiler; on the device the bundle
    launches directly and its per-block counts are checked against numpy."""
    batch, heads, seq_q, seq_kv, block = 2, 3, 150, 170, 32
    nqb, nkb = cdiv(seq_q, block), cdiv(seq_kv, block)
    path = os.path.join(BUNDLES, f"op-block_mask_counts-dilated-{block}.kiln")
    if opts.record and not os.path.exists(path):
        from kiln import _kiln

        @kiln.jit
        def dilated_causal(b, h, q_idx, kv_idx):
            return (kv_idx <= q_idx) & (kv_idx % 2 == h % 2)

        src = os.path.join(BUNDLES, f"op-block_mask_counts-dilated-{block}.mlir")
        with open(src, "w") as f:
            f.write(_kiln.build_op_source(
                "block_mask_counts", {"block": str(block)},
                ops.mod_source(block, mask_mod=dilated_causal)))
        compile_bundle(path, [src])
    counts = np.full((batch * heads, nqb, nkb), -7, np.int32)
    launch(path, (nqb, nkb, batch * heads), [counts, heads, seq_q, seq_kv, nqb, nkb])
    q = np.arange(nqb * block)[:, None]
    kv = np.arange(nkb * block)[None, :]
    ref = np.zeros_like(counts)
    for b in range(batch):
        for h in range(heads):
            vis = (kv <= q) & (kv % 2 == h % 2) & (q < seq_q) & (kv < seq_kv)
            ref[b * heads + h] = vis.reshape(nqb, block, nkb, block).sum(axis=(1, 3))
    check("op block_mask_counts (@kiln.jit mask_mod, recorded)", counts, ref, 0, 0)


op_case("embedding", case_embedding)
op_case("block_mask_counts", case_mask_counts)
op_case("paged_kv_gather", case_paged_kv)
op_case("moe", case_moe)
op_case("attention f32 causal", lambda: case_attention("f32", "causal"))
op_case("attention bf16 sliding_window", lambda: case_attention("bf16", "sliding_window", (4, 2)))
op_case("attention f16 none", lambda: case_attention("f16", "none", (3, 1)))
op_case("attention bf16 causal out bf16",
        lambda: case_attention("bf16", "causal", (2, 1), seq=200, out_dtype="bf16"))


def case_attention_torch():
    """kiln.ops.block_sparse_attention on PyTorch CUDA tensors (GPU runs: the
    case above recorded the same kernel): PyTorch allocates the outputs, the
    host block mask is copied to the device."""
    if EMULATED or not RUN or not ACTIVE:
        return
    B, Hq, Hkv, S, D = 2, 2, 1, 200, 64
    bits = [bf16_bits(rng.standard_normal(sh).astype(np.float32))
            for sh in ((B, Hq, S, D), (B, Hkv, S, D), (B, Hkv, S, D))]
    qt, kt, vt = (torch.from_numpy(b.view(np.int16)).to(dev).view(torch.bfloat16)
                  for b, _ in bits)
    q, k, v = (r for _, r in bits)
    rule = lambda b_, h_, qi, ki: ki <= qi  # noqa: E731
    mask = ops.block_mask(rule, B, Hq, S, S, block=64)
    out, lse = ops.block_sparse_attention(qt, kt, vt, mask, "causal", window=64,
                                          out_dtype="bf16")
    torch.cuda.synchronize()
    kr, vr = np.repeat(k, Hq // Hkv, axis=1), np.repeat(v, Hq // Hkv, axis=1)
    qi, ki = np.arange(S)[:, None], np.arange(S)[None, :]
    vis = np.broadcast_to(rule(0, 0, qi, ki), (B, Hq, S, S))
    ro, rl = attention_reference(q, kr, vr, vis, 1 / math.sqrt(D))
    check("op block_sparse_attention on PyTorch tensors (bf16 out)",
          out.float().cpu().numpy(), ro, 1e-2, 1e-2)
    check("op block_sparse_attention on PyTorch tensors lse", lse.cpu().numpy(), rl, 1e-2, 1e-2)
    # The mask built for the device (copied once): the same kernel, the
    # same bits.
    dmask = ops.block_mask(rule, B, Hq, S, S, block=64, device=dev)
    out2, lse2 = ops.block_sparse_attention(qt, kt, vt, dmask, "causal", window=64,
                                            out_dtype="bf16")
    torch.cuda.synchronize()
    check("op block_sparse_attention with a device block mask (bf16 out)",
          out2.float().cpu().numpy(), out.float().cpu().numpy(), 0, 0)
    check("op block_sparse_attention with a device block mask lse", lse2.cpu().numpy(),
          lse.cpu().numpy(), 0, 0)


op_case("attention on PyTorch tensors", case_attention_torch)


def case_conv_torch():
    """conv2d and depthwise_conv2d on PyTorch CUDA tensors (GPU runs: the
    numpy cases record the same kernels: conv2d bf16 stride 2 pad 1, the
    depthwise 3x3 with bias)."""
    if EMULATED or not RUN or not ACTIVE:
        return
    N, H, W, C, OC = 2, 19, 23, 12, 20
    (xb, x), (wb, w) = (bf16_bits(rng.standard_normal((N, H, W, C)).astype(np.float32)),
                        bf16_bits((rng.standard_normal((3, 3, C, OC)) * 0.2).astype(np.float32)))
    bias = rng.standard_normal(OC).astype(np.float32)
    xt, wt = (torch.from_numpy(b.view(np.int16)).to(dev).view(torch.bfloat16) for b in (xb, wb))
    got = ops.conv2d(xt, wt, torch.from_numpy(bias).to(dev), stride=2, padding=1)
    torch.cuda.synchronize()
    check("op conv2d bf16 on PyTorch tensors", got.cpu().numpy(),
          conv_reference(x, w, bias, 2, 1), 1e-4, 1e-3)
    N, H, W, C = 2, 17, 21, 70
    x = rng.standard_normal((N, H, W, C)).astype(np.float32)
    w = rng.standard_normal((3, 3, C)).astype(np.float32)
    bias = rng.standard_normal(C).astype(np.float32)
    got = ops.depthwise_conv2d(torch.from_numpy(x).to(dev), torch.from_numpy(w).to(dev), bias,
                               stride=1, padding=1)
    torch.cuda.synchronize()
    ref = depthwise_reference(x, w, bias)
    check("op depthwise_conv2d on PyTorch tensors", got.cpu().numpy(), ref, 1e-4, 1e-4)


op_case("convolutions on PyTorch tensors", case_conv_torch)


def case_graph_capture():
    """GPU runs: a bundle launched on PyTorch's stream (stream=, nothing
    waited for) and captured into a CUDA graph: the bf16 GEMM example at TMA
    sizes (on sm_90a its tensor maps are encoded at capture and travel in
    the graph's parameters), replayed on new inputs copied in."""
    if EMULATED or not RUN or not ACTIVE:
        return
    M, N, K = 200, 136, 296
    mm = load(example("matmul_bf16"))
    grid = (cdiv(N, 64), cdiv(M, 64))
    a = torch.zeros(M, K, device=dev, dtype=torch.bfloat16)
    b = torch.zeros(K, N, device=dev, dtype=torch.bfloat16)
    c = torch.zeros(M, N, device=dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up (loads the module) off the capture
        mm[grid](a, b, c, M, N, K, stream=torch.cuda.current_stream())
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mm[grid](a, b, c, M, N, K, stream=torch.cuda.current_stream())
    (a16, ar), (b16, br) = (bf16_bits(rng.standard_normal(sh).astype(np.float32))
                            for sh in ((M, K), (K, N)))
    a.copy_(torch.from_numpy(a16.view(np.int16)).to(dev).view(torch.bfloat16))
    b.copy_(torch.from_numpy(b16.view(np.int16)).to(dev).view(torch.bfloat16))
    c.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    check("bf16 GEMM (TMA sizes) replayed from a CUDA graph", c.cpu().numpy(),
          ar.astype(np.float64) @ br, 1e-4, 1e-2)


op_case("CUDA graph capture", case_graph_capture)
# Rectangular blocks (the benchmark also checks 128x64 at 8 warps against
# SDPA); at 4 warps a 128-row block is one warpgroup with two 64-row blocks
# (255 registers and a ptxas wgmma serialization at head dim 64), so 64x32.
op_case("attention bf16 causal 64x32",
        lambda: case_attention("bf16", "causal", (2, 2), seq=300, block=(64, 32)))
op_case("dsa", case_dsa)
op_case("dsa bf16", case_dsa_bf16)
op_case("dsa_indexer e4m3", lambda: case_dsa_indexer("e4m3"))
op_case("dsa_indexer bf16", lambda: case_dsa_indexer("bf16"))
op_case("embedding on PyTorch tensors", case_embedding_torch)
op_case("paged_kv_gather on PyTorch tensors", lambda: case_paged_kv(True))
op_case("moe on PyTorch tensors", lambda: case_moe(True))
op_case("dsa on PyTorch tensors", lambda: case_dsa(True))
op_case("conv2d f32", lambda: case_conv("f32"))
op_case("conv2d bf16", lambda: case_conv("bf16"))
op_case("depthwise_conv2d", case_depthwise)
op_case("patch_embed", case_patch_embed)

# The benchmarks' attention kernels: bf16, head dim 128, dense and causal.
BENCH_D = 128


BENCH_WINDOW = 1024  # the block-sparse benchmark's sliding window


def variant_tag(warps, stages, block, swizzle, overlap=False, out16=False, devmaps=False,
                pingpong=True, one_loop=False):
    bq, bkv = block_sizes(block)
    return (f"w{warps or 4} s{stages or 2} b{bq}" + (f"x{bkv}" if bkv != bq else "")
            + ("" if swizzle else " no-swizzle") + (" overlap" if overlap else "")
            + (" bf16-out" if out16 else "") + (" device-maps" if devmaps else "")
            + ("" if pingpong else " no-pingpong") + (" one-loop" if one_loop else ""))


def attention_bench_kernel(kind, warps=None, stages=None, block=64, swizzle=True,
                           overlap=False, out16=False, devmaps=False, pingpong=True,
                           one_loop=False, profile=False):
    window = BENCH_WINDOW if kind == "sliding_window" else 256
    bq, bkv = block_sizes(block)
    cfg = dict(head_dim=BENCH_D, block=bq, mask=kind, window=window, prefix=0, gqa_group=1,
               softcap=0.0, dtype="bf16")
    if bkv != bq:
        cfg["block_kv"] = bkv
    if overlap:  # the operator's option (off by default)
        cfg["overlap"] = 1
    if out16:  # a bf16 output, as SDPA's and flex_attention's
        cfg["out_dtype"] = "bf16"
    if one_loop:  # the partial and the full blocks in one loop (one pipeline)
        cfg["one_loop"] = 1
    if profile:  # a trailing stamps argument: clock readings per program
        cfg["profile"] = 1
    return provider("block_sparse_attention", "", {k_: str(v_) for k_, v_ in cfg.items()},
                    warps, stages, swizzle, device_maps=devmaps, pingpong=pingpong)


# Where a program's time goes (the operator's profile option: clock readings
# at entry, around the partial blocks' loop, after the full blocks' and
# after lse's store, before out's), for the block-128 shapes at 8 warps: turns (the
# default), and on sm_90a no turns and turns with the overlap. (kind,
# variant).
PROFILE_VARIANTS = tuple(
    (kind, v) for kind in ("none", "sliding_window")
    for v in ((8, None, 128, True, False),) + (
        ((8, None, 128, True, False, False, False, False), (8, None, 128, True, True),
         (8, None, 128, True, False, False, False, True, True))
        if TARGET.endswith("sm_90a") else ()))


# The attention benchmark also at 8 warps (two warpgroups on sm_90a: at
# block 64 they split the scores' columns, at block 128 each owns 64 rows,
# FlashAttention's shape, and keeps its scores and row statistics in
# registers), and with num_stages 1 (the key and value loads wait in place)
# and 3 (issued two iterations ahead). (warps, stages, block, swizzle,
# overlap); None: the default. Block (128, 64): query blocks of 128 rows,
# key blocks of 64 keys. Block 128 (square) at 2 stages needs 160 KiB of
# shared memory, at 3 stages 224 KiB (sm_90a only). On sm_90a the pipelined
# key and value stages take the 128B swizzle (one shape also timed
# without), and the operator's overlap option (the next full block's scores
# computed during this one's softmax, docs/gpu.md) is timed at two shapes.
BENCH_VARIANTS = ((None, None, 64, True, False), (8, None, 64, True, False),
                  (None, 1, 64, True, False), (8, None, (128, 64), True, False),
                  (8, None, 128, True, False), (8, None, 128, True, False, True))
if TARGET.endswith("sm_90a"):
    BENCH_VARIANTS += ((8, 1, 128, True, False), (None, None, 64, False, False),
                       (None, 3, 64, True, False), (8, 3, 128, True, False),
                       (8, None, 128, True, True), (8, None, (128, 64), True, True),
                       (8, None, 128, True, False, False, True),
                       # Pingpong (the default at two warpgroups) against the
                       # warpgroups issuing together (docs/gpu.md, "Pingpong"),
                       # with and without the overlap: FlashAttention 3 runs
                       # both, and only both make the loop tensor-bound in the
                       # idealized timeline (docs/gpu.md).
                       (8, None, 128, True, False, False, False, False),
                       (8, None, (128, 64), True, False, False, False, False),
                       (8, None, 128, True, True, False, False, False),
                       # One loop over the partial and the full blocks (one
                       # pipeline fill per program instead of two), with and
                       # without the turns.
                       (8, None, 128, True, False, False, False, True, True),
                       (8, None, 128, True, False, False, False, False, True))
else:
    # mma.sync: operand rows XOR-swizzled (the default) against padded rows
    # (--no-swizzle), at block 64 and at block 128 with 8 warps (160 KiB of
    # shared memory swizzled, 171 KiB padded: one stage on an A100).
    BENCH_VARIANTS += ((None, None, 64, False, False), (8, None, 128, False, False),
                       # One loop over the partial and the full blocks: on
                       # mma.sync too its scores stay in registers (planRowDots
                       # follows them through the branch).
                       (None, None, 64, True, False, False, False, True, True))


def opbench_cases():
    """The op benchmarks: (name, kiln.ops call, output argument of its first
    launch, PyTorch peer, work, unit, peer name, tolerance). Inputs are made
    here with numpy; the peers' device tensors only when run (on a GPU)."""
    r = np.random.default_rng(7)

    def bits(*shape, scale=1.0):
        return bf16_bits(r.standard_normal(shape, dtype=np.float32) * scale)[0]

    def dev_bf16(b):
        return torch.from_numpy(b.view(np.int16)).to(dev).view(torch.bfloat16)

    def lazy(make):  # the peer, with its tensors made at the first call
        state = {}

        def peer():
            if "fn" not in state:
                state["fn"] = make()
            return state["fn"]()
        return peer
    cases = []

    # Embedding rows (bf16): a 32000 x 4096 table, 16384 ids.
    vocab, dim, n_ids = 32000, 4096, 16384
    wb, ids = bits(vocab, dim), r.integers(0, vocab, n_ids).astype(np.int32)
    cases.append((f"embedding bf16 {vocab}x{dim}, {n_ids} ids",
                  lambda: ops.embedding(kiln.bf16(wb), ids), 2,
                  lazy(lambda: (lambda wt, it: lambda: torch.nn.functional.embedding(it, wt))(
                      dev_bf16(wb), torch.from_numpy(ids).to(dev))),
                  2 * n_ids * dim * 2, "GB/s", "F.embedding", 0))

    # Paged KV cache gather (bf16): 4096 pages of 16 tokens x 8 heads x 128,
    # 16 sequences of 2000 tokens.
    pages, page, heads, hd, batch, ln = 4096, 16, 8, 128, 16, 2000
    cb = bits(pages, page, heads, hd)
    per = (ln + page - 1) // page
    table = np.stack([r.permutation(pages)[:per] for _ in range(batch)]).astype(np.int32)
    lens = np.full(batch, ln, np.int32)

    def paged_peer():
        ct, tt = dev_bf16(cb), torch.from_numpy(table).to(dev).long()
        return lambda: ct[tt].reshape(batch, per * page, heads, hd)[:, :ln].contiguous()
    cases.append((f"paged_kv_gather bf16 {batch}x{ln} tokens",
                  lambda: ops.paged_kv_gather(kiln.bf16(cb), table, lens), 3, lazy(paged_peer),
                  2 * batch * ln * heads * hd * 2, "GB/s", "torch indexing", 0))

    # MoE permute (bf16): 4096 tokens x 4096 hidden, top-8 of 64 experts.
    tokens, hidden, experts, topk = 4096, 4096, 64, 8
    xb = bits(tokens, hidden)
    src = ops.moe_route(np.argsort(r.random((tokens, experts)), axis=1)[:, :topk], experts)[0]

    def moe_peer():
        xt_, st = dev_bf16(xb), torch.from_numpy(src).to(dev).long()
        return lambda: xt_.index_select(0, st)
    cases.append((f"moe_permute bf16 {tokens}x{hidden} top{topk}",
                  lambda: ops.moe_permute(kiln.bf16(xb), src), 2, lazy(moe_peer),
                  2 * src.size * hidden * 2, "GB/s", "index_select", 0))

    # conv2d 3x3 (bf16, NHWC, f32 out): 32 x 56 x 56 x 64 -> 64 (a ResNet stage).
    N, H, W, C, OC = 32, 56, 56, 64, 64
    xcb, wcb = bits(N, H, W, C), bits(3, 3, C, OC, scale=0.1)

    def conv_peer():
        xct = dev_bf16(xcb).permute(0, 3, 1, 2)  # NCHW view of NHWC (channels_last)
        wct = dev_bf16(wcb).permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
        return lambda: torch.nn.functional.conv2d(xct, wct, padding=1).permute(0, 2, 3, 1)
    # With the pixel rows pipelined (their indices computed per row at issue,
    # docs/gpu.md "Pipelined gathers") and waited for where issued.
    def conv_variant(gathers):
        def run():
            ops.set_kernel_provider(lambda n, m, c: provider(n, m, c, gathers=gathers))
            try:
                return ops.conv2d(kiln.bf16(xcb), kiln.bf16(wcb), None, stride=1, padding=1)
            finally:
                ops.set_kernel_provider(provider)
        return run
    for label, gathers in (("", True), (" no-pipelined-gathers", False)):
        cases.append((f"conv2d 3x3 bf16 {N}x{H}x{W}x{C}->{OC}{label}",
                      conv_variant(gathers), 3, lazy(conv_peer),
                      2 * N * H * W * OC * C * 9, "TFLOP/s", "F.conv2d (cuDNN, bf16 out)",
                      0.1))

    # DeepSeek sparse attention (bf16, MLA shape): 64 query tokens x 128 heads,
    # d_qk 576, d_v 512, top-2048 of 32768 cached keys.
    Sq, Hq, Skv, Dqk, Dv, kk = 64, 128, 32768, 576, 512, 2048
    qb, kvb = bits(Sq, Hq, Dqk), bits(Skv, Dqk)
    use = np.sort(np.argsort(r.random((Sq, Skv)), axis=1)[:, :kk], axis=1).astype(np.int32)

    def dsa_peer(exact=False):
        qt_, kvt_, ut = dev_bf16(qb), dev_bf16(kvb), torch.from_numpy(use).to(dev).long()

        def run():  # what a PyTorch user writes: bf16 einsums around an f32 softmax
            kvg = kvt_[ut]  # [Sq, topk, Dqk]
            sc = torch.einsum("thd,tkd->thk", qt_, kvg).float() / math.sqrt(Dqk)
            p = torch.softmax(sc, dim=-1).bfloat16()
            return torch.einsum("thk,tkd->thd", p, kvg[..., :Dv]).float()

        def reference():  # f32 scores and P @ V, P rounded to bf16 as the kernel does
            kvg = kvt_[ut].float()
            sc = torch.einsum("thd,tkd->thk", qt_.float(), kvg) / math.sqrt(Dqk)
            p = torch.softmax(sc, dim=-1).bfloat16().float()
            return torch.einsum("thk,tkd->thd", p, kvg[..., :Dv])
        return reference if exact else run
    # Variants: the defaults (16 heads, 64 keys per step; gathers pipelined,
    # docs/gpu.md "Pipelined gathers": 173 KiB on sm_90a, one block per SM),
    # the same with the gathers waited for where issued (two blocks per SM),
    # 32 keys per step (pipelined at two blocks per SM), and 64 heads per
    # program at 8 warps (sm_90a: both dots on wgmma, the values a view of
    # the key rows' core matrices; a quarter of the programs, so each key
    # row is gathered twice per token, not 8 times), with and without.
    def dsa_variant(warps=None, gathers=True, **kw):
        def run():
            ops.set_kernel_provider(
                lambda n, m, c: provider(n, m, c, warps=warps, gathers=gathers))
            try:
                return ops.dsa_sparse_attention(kiln.bf16(qb), kiln.bf16(kvb), use, Dv, **kw)
            finally:
                ops.set_kernel_provider(provider)
        return run
    for label, fn in (("", dsa_variant()),
                      (" no-pipelined-gathers", dsa_variant(gathers=False)),
                      (" keys 32", dsa_variant(block_k=32)),
                      (" heads 64 w8", dsa_variant(8, heads_block=64, block_k=16)),
                      (" heads 64 w8 no-pipelined-gathers",
                       dsa_variant(8, False, heads_block=64, block_k=16))):
        cases.append((f"dsa_sparse_attention bf16 {Sq}x{Hq} top{kk}{label}",
                      fn, 3, lazy(dsa_peer), Sq * Hq * kk * (Dqk + Dv) * 2, "TFLOP/s",
                      "gather + einsum + softmax", 1e-2, lazy(lambda: dsa_peer(exact=True))))

    # DSA lightning indexer (DeepSeek-V3.2's shape: 64 heads of 128), 256
    # query tokens x 4096 keys, not causal: e4m3 q and k with per-key scales
    # (sm_90a: wgmma's e4m3 form), bf16 and f32, against the PyTorch a user
    # writes (bf16 einsum, relu and the weighted sum over heads in f32) on the
    # same values. fp8 codes of magnitudes 2^-2 .. 2^2, both signs.
    T, H, Di, S = 256, 64, 128, 4096

    def e4m3(*shape):
        sign = r.integers(0, 2, shape) << 7
        return (sign | r.integers(5, 10, shape) << 3 | r.integers(0, 8, shape)).astype(np.uint8)
    qc_, kc_ = e4m3(T, H, Di), e4m3(S, Di)
    e4_table = mx_ex.decode_mx(np.arange(256), "e4m3")
    qv_, kv_ = e4_table[qc_], e4_table[kc_]
    wi_ = r.random((T, H), dtype=np.float32)
    ks_ = (r.random(S, dtype=np.float32) + 0.5).astype(np.float32)
    # |I| bound of the first tokens: the tolerances scale with it (fp8 wgmma
    # keeps about 14 bits in its sums).
    mag = float((np.einsum("th,ths->ts", wi_[:8], np.einsum("thd,sd->ths", np.abs(qv_[:8]),
                                                          np.abs(kv_))) * ks_).max())

    def indexer_peer(dtype, exact=False):
        qt_ = torch.from_numpy(qv_.astype(np.float32)).to(dev)
        kt_ = torch.from_numpy(kv_.astype(np.float32)).to(dev)
        wt_ = torch.from_numpy(wi_).to(dev)
        st_ = torch.from_numpy(ks_ if dtype == "e4m3" else np.ones(S, np.float32)).to(dev)
        if not exact:
            qt_, kt_ = qt_.bfloat16(), kt_.bfloat16()
        return lambda: torch.einsum("th,ths->ts", wt_, torch.relu(
            torch.einsum("thd,sd->ths", qt_, kt_).float())) * st_

    def indexer_variant(dtype):
        if dtype == "e4m3":
            args = (kiln.fp8(qc_, "e4m3"), wi_, kiln.fp8(kc_, "e4m3"))
            kw = dict(k_scale=ks_)
        elif dtype == "bf16":
            args = (kiln.bf16(bf16_bits(qv_)[0]), wi_, kiln.bf16(bf16_bits(kv_)[0]))
            kw = {}
        else:
            args, kw = (qv_.astype(np.float32), wi_, kv_.astype(np.float32)), {}
        return lambda: ops.dsa_indexer(*args, causal=False, **kw)
    for dtype in ("e4m3", "bf16", "f32"):
        cases.append((f"dsa_indexer {dtype} {T}x{S}, {H} heads of {Di}", indexer_variant(dtype),
                      4 if dtype == "e4m3" else 3, lazy(lambda d=dtype: indexer_peer(d)),
                      2 * T * H * S * Di, "TFLOP/s", "einsum bf16 + relu + sum",
                      2.0 ** -10 * mag, lazy(lambda d=dtype: indexer_peer(d, exact=True))))

    # DSA top-k: 2048 of 32768 scores for 1024 tokens (indices in ascending order).
    # Distinct scores (a shuffled 0..S-1 per row plus a fraction below 0.5,
    # exact in f32): no ties, so the index sets must agree exactly.
    T, S, kt = 1024, 32768, 2048
    sc_ = (r.permuted(np.tile(np.arange(S, dtype=np.float32), (T, 1)), axis=1)
           + r.random((T, S), dtype=np.float32) * 0.5).astype(np.float32)

    def topk_peer():
        st = torch.from_numpy(sc_).to(dev)
        return lambda: torch.sort(torch.topk(st, kt, dim=1, sorted=False).indices,
                                  dim=1).values.int()
    cases.append((f"dsa_topk {kt} of {S}, {T} rows", lambda: ops.dsa_topk(sc_, kt), 1,
                  lazy(topk_peer), T * S * 4, "GB/s", "torch.topk + sort", 0))
    return cases


# The Triton tutorials' benchmark shapes (the bench and gemm parts): the
# matmul at upstream's H100 configuration with a bf16 C (as torch.matmul's),
# the attention at two of upstream's block shapes with a bf16 output (as
# SDPA's), dense and causal.
PORT_ATTN_BENCH = [((128, 64), 8, 2), ((64, 64), 4, 2)]
PORT_GEMM_S = int(os.environ.get("KILN_GPU_GEMM", "8192"))
PORT_SEQ = int(os.environ.get("KILN_GPU_SEQ", "4096"))


def port_bench_gemm(a, b, c):
    return port_matmul(PORT_GEMM_S, PORT_GEMM_S, PORT_GEMM_S, a, b, c, "bench")


def port_bench_attention(causal, q, k, v, o, lse, block, warps, stages):
    return port_attention((1, 16, PORT_SEQ, BENCH_D), causal, q, k, v, o, lse, "bench", block,
                          warps, stages)


# Block-scaled (MX) GEMM, MXFP8 (e4m3) activations times MXFP4 (e2m1)
# weights, through kl.dot_scaled's emulation (decode, scale, bf16 tensor
# cores), against torch.matmul on bf16 operands of the same shape.
# (BM, BN, BK, warps, stages) side by side: the decode no longer takes
# shared memory (64 KiB at 128x128x64), so deeper pipelines and wider tiles
# fit; which is fastest is for the device to say.
MX_S = int(os.environ.get("KILN_GPU_MX", "4096"))
MX_VARIANTS = [(128, 128, 64, 8, 2), (128, 128, 64, 8, 4), (128, 256, 64, 8, 3)]


def mx_bench(a, asc, b, bsc, c, variant):
    bm, bn, bk, w, st = variant
    grid = (cdiv(MX_S, bm), cdiv(MX_S, bn))
    args = (a, asc, b, bsc, c, MX_S, MX_S, MX_S)
    kw = dict(FMT_A="e4m3", FMT_B="e2m1", BM=bm, BN=bn, BK=bk, num_warps=w, num_stages=st)
    return port_bundle(f"mx-bench-{MX_S}-{bm}x{bn}x{bk}-w{w}-s{st}", mx_ex.mx_matmul_kernel,
                       grid, args, kw), grid, args


# FP8 GEMM with DeepSeek-V3-style block scales (the example's kernel: e4m3
# operands, 1x128 activation and 128x128 weight scales, each K step's product
# scaled in registers), against torch.matmul on bf16 operands and
# torch._scaled_mm on the fp8 operands (the fp8 tensor cores).
# (BM, BN, warps, stages, native); BK = 128 (one scale per 128 of K).
# native: on sm_90a the dot runs on wgmma's e4m3 form (since the twenty-ninth
# session); False: --no-fp8-wgmma, the operands decoded to bf16 for wgmma's
# bf16 form as before (the same kernel, timed side by side).
FP8_VARIANTS = [(128, 128, 8, 2, True), (128, 128, 8, 3, True), (128, 128, 8, 2, False)]


# W4A16 GEMM (the example's kernel: int4 weights decoded in the operand's
# write), float16 activations, against torch.matmul on float16 operands of
# the same shape (what the int4 weights stand for).
# (BM, BN, BK, warps, stages)
W4_VARIANTS = [(128, 128, 64, 8, 3), (128, 256, 64, 8, 3)]


# W8A8 GEMM (the example's kernel: int8 x int8 on wgmma's s8 form on sm_90a,
# on mma.sync.m16n8k32.s8 on sm_90, dequantized to float16 in registers)
# against torch._int_mm (cuBLAS's int8 GEMM, int32 out, no dequantization: a
# peer doing less) and torch.matmul on bf16 operands of the same shape (what
# int8 stands in for).
# (BM, BN, BK, warps, stages, W_KN); W_KN: the weights stored W^T [K, N],
# each K step's tile copied transposed in shared memory (transposeNMajorBytes),
# the same shape timed both ways.
W8_VARIANTS = [(128, 128, 128, 8, 3, False), (128, 256, 128, 8, 4, False),
               (128, 256, 128, 8, 3, False), (128, 256, 128, 8, 3, True)]


def w8_bench(a, sa, w, sw, c, variant):
    bm, bn, bk, w_, st, kn = variant
    grid = (cdiv(MX_S, bm), cdiv(MX_S, bn))
    args = (a, sa, w, sw, c, MX_S, MX_S, MX_S)
    kw = dict(BM=bm, BN=bn, BK=bk, W_KN=kn, num_warps=w_, num_stages=st)
    return port_bundle(f"w8-bench-{MX_S}-{bm}x{bn}x{bk}-w{w_}-s{st}" + ("-kn" if kn else ""),
                       w8_ex.w8a8_matmul_kernel, grid, args, kw), grid, args


def w4_bench(a, qw, ws, c, variant):
    bm, bn, bk, w_, st = variant
    grid = (cdiv(MX_S, bm), cdiv(MX_S, bn))
    args = (a, qw, ws, c, MX_S, MX_S, MX_S)
    kw = dict(G=128, BM=bm, BN=bn, BK=bk, num_warps=w_, num_stages=st)
    return port_bundle(f"w4-bench-{MX_S}-{bm}x{bn}x{bk}-w{w_}-s{st}",
                       w4_ex.w4a16_matmul_kernel, grid, args, kw), grid, args


def fp8_bench(a, a_s, w, w_s, c, variant):
    bm, bn, w_, st, native = variant
    grid = (cdiv(MX_S, bm), cdiv(MX_S, bn))
    args = (a, a_s, w, w_s, c, MX_S, MX_S, MX_S)
    kw = dict(BM=bm, BN=bn, BK=128, num_warps=w_, num_stages=st)
    return port_bundle(f"fp8-bench-{MX_S}-{bm}x{bn}x128-w{w_}-s{st}"
                       + ("" if native else "-decoded"),
                       f8_ex.fp8_blockwise_matmul_kernel, grid, args, kw,
                       () if native else ("--no-fp8-wgmma",)), grid, args


if not RUN:
    if not EMULATED:
        i8 = lambda *shape: np.zeros(shape, np.int8)  # noqa: E731 (never launched)
        for variant in MX_VARIANTS:
            mx_bench(i8(MX_S, MX_S), i8(MX_S, MX_S // 32), i8(MX_S // 2, MX_S),
                     i8(MX_S, MX_S // 32), np.zeros((MX_S, MX_S), np.float32), variant)
        e4 = lambda *shape: kiln.fp8(np.zeros(shape, np.uint8), "e4m3")  # noqa: E731
        f32 = lambda *shape: np.zeros(shape, np.float32)  # noqa: E731
        for variant in FP8_VARIANTS:
            fp8_bench(e4(MX_S, MX_S), f32(MX_S, MX_S // 128), e4(MX_S, MX_S),
                      f32(MX_S // 128, MX_S // 128), f32(MX_S, MX_S), variant)
        for variant in W4_VARIANTS:
            w4_bench(np.zeros((MX_S, MX_S), np.float16), np.zeros((MX_S // 8, MX_S), np.int32),
                     np.zeros((MX_S // 128, MX_S), np.float16), f32(MX_S, MX_S), variant)
        for variant in W8_VARIANTS:
            w8_bench(i8(MX_S, MX_S), f32(MX_S), i8(MX_S, MX_S), f32(MX_S),
                     np.zeros((MX_S, MX_S), np.float16), variant)
    for kind in ("none", "causal", "sliding_window"):
        for variant in BENCH_VARIANTS:
            attention_bench_kernel(kind, *variant)
    for kind, variant in PROFILE_VARIANTS:
        attention_bench_kernel(kind, *variant, profile=True)
    if not EMULATED:
        def zeros(*shape, dtype=np.uint16):  # (never launched: nothing is touched)
            z = np.zeros(shape, dtype)
            return kiln.bf16(z) if dtype == np.uint16 else z
        S_ = PORT_GEMM_S
        port_bench_gemm(zeros(S_, S_), zeros(S_, S_), zeros(S_, S_))
        shape_ = (1, 16, PORT_SEQ, BENCH_D)
        for causal in (False, True):
            for block, warps, stages in PORT_ATTN_BENCH:
                port_bench_attention(causal, zeros(*shape_), zeros(*shape_), zeros(*shape_),
                                     zeros(*shape_), zeros(16, PORT_SEQ, dtype=np.float32),
                                     block, warps, stages)
    if not EMULATED:
        for case in opbench_cases():
            case[1]()  # compiles (records) the operator's kernels
    kb = [f for f in os.listdir(BUNDLES) if f.endswith(".kiln")]
    total = sum(os.path.getsize(os.path.join(BUNDLES, f)) for f in os.listdir(BUNDLES))
    print(f"recorded {len(kb)} bundles ({total / 1e6:.1f} MB with sources) for "
          f"{TARGET} in {BUNDLES}")
    sys.exit(0)

# -- benchmarks against PyTorch (GPU only) ---------------------------------------------


def add_row(row):
    """A table row; also printed at once, so a part stopped at its time limit
    still reports the rows it measured."""
    rows.append(row)
    name, kv_, tv, unit, peer = row
    print(f"row: {name}: kiln {kv_:.1f} {unit}, torch {tv:.1f} ({kv_ / tv:.2f}x {peer})",
          flush=True)


_SLEEP_RATE = []  # torch.cuda._sleep's cycles per second, measured once


def gpu_busy(seconds):
    """Queues a kernel that spins for about `seconds` (torch.cuda._sleep)."""
    if not _SLEEP_RATE:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        s.record()
        torch.cuda._sleep(10 ** 7)
        e.record()
        torch.cuda.synchronize()
        _SLEEP_RATE.append(1e7 / (s.elapsed_time(e) / 1e3))
    torch.cuda._sleep(int(seconds * _SLEEP_RATE[0]))


host_times = {}  # label -> (Kiln's, the peer's) host time to queue one call (s)


def bench(fn, reps=10, batch=1, host=None):
    """Median over `reps` of the CUDA-event time of `batch` calls back to back,
    per call (seconds): GPU time only, for Kiln and PyTorch alike. Each timed
    batch is queued behind a GPU sleep longer than the host takes to queue
    it, so the events do not also count the host's time to prepare the first
    call (Python argument handling, guards, the driver's launch): before
    this, a launch path slower than the kernel read as a slower kernel. That
    host time is measured too (queueing `batch` calls while the GPU is busy)
    and, with `host` = (label, "kiln" or "peer"), kept in host_times for the
    second table. Kiln's benchmarked launches pass wait=False (queued on the
    runtime's stream, which is ordered with PyTorch's default stream); a
    bundle's errors are then raised by its synchronize() (kiln_sync)."""
    fn()
    torch.cuda.synchronize()
    gpu_busy(5e-3)
    t0 = time.perf_counter()
    for _ in range(batch):
        fn()
    queue = time.perf_counter() - t0
    torch.cuda.synchronize()
    if host is not None:
        pair = host_times.setdefault(host[0], [None, None])
        pair[0 if host[1] == "kiln" else 1] = queue / batch
    cover = max(1e-3, 4 * queue)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times, late = [], 0
    while len(times) < reps:
        gpu_busy(cover)
        start.record()
        for _ in range(batch):
            fn()
        end.record()
        # Done already: the sleep ended before the batch was queued, and the
        # GPU may have waited for the host inside the timed span.
        reached = start.query()
        torch.cuda.synchronize()
        if reached and late < 4:
            late += 1
            cover *= 2
            continue
        if reached:
            print(f"note: a timed batch outran its GPU sleep ({cover * 1e3:.1f} ms) 5 times; "
                  "this figure may include host time")
        times.append(start.elapsed_time(end) / batch)
    times.sort()
    return times[len(times) // 2] / 1e3  # median, seconds


def host_label(label, variant):
    """The host-time table's entry for an attention variant: the default
    variant's launch (paired with PyTorch's), and the variant with maps built
    per program (no tensor maps to encode at launch) on its own line."""
    if variant == BENCH_VARIANTS[0]:
        return (label, "kiln")
    if len(variant) > 6 and variant[6]:
        return (label + " (maps built per program)", "kiln")
    return None


def kiln_sync(bundle):
    """Raises the error of a kernel launched with wait=False, if any."""
    bundle.synchronize()


section("gemm")
if not EMULATED and ACTIVE:
    S = int(os.environ.get("KILN_GPU_GEMM", "8192"))
    a16 = torch.randn(S, S, device=dev).bfloat16()
    b16 = torch.randn(S, S, device=dev).bfloat16()
    c32 = torch.zeros(S, S, device=dev)
    c16 = torch.zeros(S, S, device=dev).bfloat16()
    t_torch = bench(lambda: torch.matmul(a16, b16), batch=3, host=("bf16 GEMM", "peer"))
    flops = 2 * S ** 3
    for i, (bm_, bn_, bk_, warps, stages, alt) in enumerate(GEMM_RUNS):
        mm = load(example("matmul_bf16") if i == 0
                  else gemm_variant(bm_, bn_, bk_, warps, stages, alt))
        c_out = c16 if alt == "bf16out" else c32
        t_kiln = bench(lambda: mm[(cdiv(S, bn_), cdiv(S, bm_))](a16, b16, c_out, S, S, S,
                                                                wait=False), reps=3, batch=3,
                       host=("bf16 GEMM", "kiln") if i == 0 else None)
        kiln_sync(mm)
        add_row((f"bf16 GEMM {S}^3 {bm_}x{bn_}x{bk_} w{warps} s{stages}"
                     + {"": "", "notma": " no-TMA", "noswizzle": " no-swizzle",
                        "devicemaps": " device-maps", "bf16out": " bf16 C",
                        "grouped": " grouped"}[alt],
                     flops / t_kiln / 1e12, flops / t_torch / 1e12, "TFLOP/s",
                     "torch.matmul (bf16 out)"))
    # Triton's tutorial matmul (examples/python/triton_matmul.py), bf16 C.
    if S == PORT_GEMM_S:
        path, grid, args = port_bench_gemm(a16, b16, c16)
        mm = load(path)
        t_kiln = bench(lambda: mm[grid](*args, wait=False), reps=3, batch=3)
        kiln_sync(mm)
        ref = torch.matmul(a16, b16).float()
        err = ((c16.float() - ref).abs().max() / ref.abs().max()).item()
        if not err < 2e-2:
            print(f"FAIL Triton tutorial matmul benchmark: relative error {err:.3g}")
            failures.append("Triton tutorial matmul bench")
        cfg = tmm_ex.GPU_CONFIG
        add_row((f"Triton tutorial matmul {S}^3 {cfg['BLOCK_SIZE_M']}x{cfg['BLOCK_SIZE_N']}x"
                 f"{cfg['BLOCK_SIZE_K']} w{cfg['num_warps']} s{cfg['num_stages']}",
                 flops / t_kiln / 1e12, flops / t_torch / 1e12, "TFLOP/s",
                 "torch.matmul (bf16 out)"))

_bf16_matmul_times = {}  # S -> torch.matmul's time on bf16 S x S operands (s)


def bf16_matmul_time(S):
    """The peer of the fp8 / MX GEMM rows, timed once per size."""
    if S not in _bf16_matmul_times:
        a16 = torch.randn(S, S, device=dev).bfloat16()
        b16 = torch.randn(S, S, device=dev).bfloat16()
        _bf16_matmul_times[S] = bench(lambda: torch.matmul(a16, b16), batch=3)
    return _bf16_matmul_times[S]


def time_variant(path, grid, args, out):
    """The bundle's GPU time per call, its output poisoned before (NaN)."""
    out.fill_(float("nan"))
    bundle = load(path)
    t = bench(lambda: bundle[grid](*args, wait=False), reps=3, batch=3)
    kiln_sync(bundle)
    return t


# (Part of the gemm part.)
if not EMULATED and ACTIVE:
    S = MX_S
    g = torch.Generator(device=dev).manual_seed(3)
    a8 = torch.randint(0, 256, (S, S), device=dev, dtype=torch.int32, generator=g)
    a8 = torch.where((a8 & 0x7F) == 0x7F, 0x38, a8).to(torch.uint8).view(torch.int8)  # no NaN
    b4 = torch.randint(0, 256, (S // 2, S), device=dev, dtype=torch.int32,
                       generator=g).to(torch.uint8).view(torch.int8)
    asc = torch.full((S, S // 32), 127, dtype=torch.int8, device=dev)      # 2^0
    bsc = torch.full((S, S // 32), 126, dtype=torch.int8, device=dev)      # 2^-1
    cmx = torch.zeros(S, S, device=dev)
    # A corner against NumPy's decoding.
    am = a8[:64].cpu().numpy().view(np.uint8)
    bb = b4[:, :64].cpu().numpy().view(np.uint8)
    codes = np.empty((S, 64), np.int64)
    codes[0::2], codes[1::2] = bb & 15, bb >> 4
    da, db = mx_ex.decode_mx(am, "e4m3"), mx_ex.decode_mx(codes, "e2m1") * 0.5
    ref = da @ db
    t_torch = bf16_matmul_time(S)
    flops = 2 * S ** 3
    for variant in MX_VARIANTS:
        t_kiln = time_variant(*mx_bench(a8, asc, b4, bsc, cmx, variant), cmx)
        bm_, bn_, bk_, w_, st_ = variant
        tag = f"{bm_}x{bn_}x{bk_} w{w_} s{st_}"
        check(f"MX GEMM benchmark corner (dot_scaled) {tag}", cmx[:64, :64].cpu().numpy(), ref,
              1e-5, 1e-6 * (np.abs(da) @ np.abs(db)).max())   # (float32 sums over K)
        add_row((f"MX GEMM {S}^3 e4m3 x e2m1 (dot_scaled) {tag}",
                 flops / t_kiln / 1e12, flops / t_torch / 1e12, "TFLOP/s",
                 "torch.matmul (bf16 operands)"))

# (Part of the gemm part.)
if not EMULATED and ACTIVE:
    S = MX_S
    g = torch.Generator(device=dev).manual_seed(5)

    def e4m3_codes(*shape):   # random e4m3 bytes, no NaN (as int8)
        c_ = torch.randint(0, 256, shape, device=dev, dtype=torch.int32, generator=g)
        return torch.where((c_ & 0x7F) == 0x7F, 0x38, c_).to(torch.uint8).view(torch.int8)

    a8, w8 = e4m3_codes(S, S), e4m3_codes(S, S)                   # A [M, K], W [N, K]
    a_s = torch.rand(S, S // 128, device=dev, generator=g) + 0.5
    w_s = torch.rand(S // 128, S // 128, device=dev, generator=g) + 0.5
    c8 = torch.zeros(S, S, device=dev)
    # A corner against NumPy (float64 of the dequantized operands).
    da = f8_ex.dequantize(a8[:64].cpu().numpy().view(np.uint8), a_s[:64].cpu().numpy(), 1)
    dw = f8_ex.dequantize(w8[:64].cpu().numpy().view(np.uint8), w_s[:1].cpu().numpy(), 128)
    t_torch = bf16_matmul_time(S)
    flops = 2 * S ** 3
    t_best, name = None, None
    for variant in FP8_VARIANTS:
        t_kiln = time_variant(*fp8_bench(a8, a_s, w8, w_s, c8, variant), c8)
        bm_, bn_, w_, st_, native_ = variant
        name_ = (f"FP8 GEMM {S}^3 e4m3, DeepSeek-V3 block scales, {bm_}x{bn_}x128 w{w_} s{st_}"
                 + ("" if native_ else " decoded to bf16"))
        check(f"FP8 block-scaled GEMM benchmark corner {bm_}x{bn_} s{st_}"
              + ("" if native_ else " decoded"),
              c8[:64, :64].cpu().numpy(), da @ dw.T, 1e-5,
              (2.0 ** -12 if native_ and TARGET.endswith("sm_90a") else 1e-5)
              * (np.abs(da) @ np.abs(dw).T).max())   # (see the example's check)
        add_row((name_, flops / t_kiln / 1e12, flops / t_torch / 1e12, "TFLOP/s",
                 "torch.matmul (bf16 operands)"))
        if t_best is None or t_kiln < t_best:
            t_best, name = t_kiln, name_
    t_kiln = t_best   # (the fastest variant against _scaled_mm)
    # torch._scaled_mm: row-wise scales where this PyTorch has them, else one
    # scale per tensor (block scales are not among its forms).
    af, wf = a8.view(torch.float8_e4m3fn), w8.view(torch.float8_e4m3fn)
    t_smm, form = None, None
    for form_, sa_, sw_ in (("row-wise", torch.ones(S, 1, device=dev), torch.ones(1, S, device=dev)),
                            ("tensor-wise", torch.ones((), device=dev), torch.ones((), device=dev))):
        try:
            def smm():
                return torch._scaled_mm(af, wf.t(), scale_a=sa_, scale_b=sw_,
                                        out_dtype=torch.bfloat16)
            smm()
            t_smm, form = bench(smm, batch=3), form_
            break
        except Exception as e:  # noqa: BLE001 (an older PyTorch or GPU)
            print(f"note: torch._scaled_mm with {form_} scales failed: {e}")
    if t_smm is not None:
        add_row((name, flops / t_kiln / 1e12, flops / t_smm / 1e12, "TFLOP/s",
                 f"torch._scaled_mm (fp8, {form} scales)"))

# (Part of the gemm part.)
if not EMULATED and ACTIVE:
    S = MX_S
    g = torch.Generator(device=dev).manual_seed(7)
    a16 = torch.randn(S, S, device=dev, generator=g).half()
    qw = torch.randint(-2 ** 31, 2 ** 31 - 1, (S // 8, S), device=dev, dtype=torch.int32,
                       generator=g)
    ws = (torch.rand(S // 128, S, device=dev, generator=g) * 0.01 + 0.001).half()
    cw = torch.zeros(S, S, device=dev)
    # A corner against NumPy (float64 of the dequantized weights).
    da = a16[:64].cpu().numpy()
    dw = w4_ex.dequantize(qw[:, :64].cpu().numpy(), ws[:, :64].cpu().numpy(), S)
    w16 = torch.randn(S, S, device=dev, generator=g).half()
    t_torch = bench(lambda: torch.matmul(a16, w16), batch=3)
    flops = 2 * S ** 3
    for variant in W4_VARIANTS:
        t_kiln = time_variant(*w4_bench(a16, qw, ws, cw, variant), cw)
        bm_, bn_, bk_, w_, st_ = variant
        tag = f"{bm_}x{bn_}x{bk_} w{w_} s{st_}"
        check(f"W4A16 GEMM benchmark corner {tag}", cw[:64, :64].cpu().numpy(),
              da.astype(np.float64) @ dw.astype(np.float16).astype(np.float64), 1e-4,
              1e-4 * (np.abs(da).astype(np.float64) @ np.abs(dw)).max())
        add_row((f"W4A16 GEMM {S}^3 (GPTQ int4 weights, group 128) {tag}",
                 flops / t_kiln / 1e12, flops / t_torch / 1e12, "TFLOP/s",
                 "torch.matmul (fp16 operands)"))

# (Part of the gemm part.)
if not EMULATED and ACTIVE:
    S = MX_S
    g = torch.Generator(device=dev).manual_seed(11)
    a8 = torch.randint(-128, 128, (S, S), device=dev, dtype=torch.int8, generator=g)
    w8 = torch.randint(-128, 128, (S, S), device=dev, dtype=torch.int8, generator=g)
    sa8 = torch.rand(S, device=dev, generator=g) * 1e-3 + 1e-4
    sw8 = torch.rand(S, device=dev, generator=g) * 1e-3 + 1e-4
    c8 = torch.zeros(S, S, device=dev, dtype=torch.float16)
    # A corner against NumPy (exact int64 sums, then the scales).
    ref = w8_ex.reference(a8[:64].cpu().numpy(), sa8[:64].cpu().numpy(),
                          w8[:64].cpu().numpy(), sw8[:64].cpu().numpy())
    t_torch = bf16_matmul_time(S)
    flops = 2 * S ** 3
    t_best, name = None, None
    w8t = w8.t().contiguous()   # W^T [K, N] for the W_KN variants
    for variant in W8_VARIANTS:
        bm_, bn_, bk_, w_, st_, kn_ = variant
        t_kiln = time_variant(*w8_bench(a8, sa8, w8t if kn_ else w8, sw8, c8, variant), c8)
        tag = f"{bm_}x{bn_}x{bk_} w{w_} s{st_}" + (" W^T [K, N]" if kn_ else "")
        check(f"W8A8 GEMM benchmark corner {tag}", c8[:64, :64].float().cpu().numpy(), ref,
              1e-3, 1e-3 * np.abs(ref).max())
        name_ = f"W8A8 GEMM {S}^3 (int8, row / channel scales, f16 out) {tag}"
        add_row((name_, flops / t_kiln / 1e12, flops / t_torch / 1e12, "TFLOP/s",
                 "torch.matmul (bf16 operands)"))
        if not kn_ and (t_best is None or t_kiln < t_best):
            t_best, name = t_kiln, name_
    try:
        wt8 = w8.t()
        torch._int_mm(a8, wt8)
        t_imm = bench(lambda: torch._int_mm(a8, wt8), batch=3)
        add_row((name, flops / t_best / 1e12, flops / t_imm / 1e12, "TOP/s",
                 "torch._int_mm (int8, int32 out)"))
    except Exception as e:  # noqa: BLE001 (an older PyTorch or GPU)
        print(f"note: W8A8 against torch._int_mm: {e}")

section("bench")
if not EMULATED and ACTIVE:
    # Attention forward, bf16, head dim 128, seq 4096: the library operator
    # launched directly on device tensors (the same bundle kind the checks
    # above ran through kiln.ops), dense and causal, vs SDPA.
    import torch.nn.functional as F
    B, H, SQ, D = 1, 16, int(os.environ.get("KILN_GPU_SEQ", "4096")), BENCH_D
    qt, kt, vt = (torch.randn(B, H, SQ, D, device=dev).bfloat16() for _ in range(3))
    rules = {"none": lambda b_, h_, qi, ki: np.ones_like(qi + ki, bool),
             "causal": lambda b_, h_, qi, ki: ki <= qi,
             "sliding_window": lambda b_, h_, qi, ki: (ki <= qi) & (qi - ki < BENCH_WINDOW)}

    masks = {}  # (kind, block) -> block mask (numpy, built once)

    def kiln_attention(kind, warps=None, stages=None, block=64, swizzle=True, overlap=False,
                       out16=False, devmaps=False, pingpong=True, one_loop=False, stamps=None):
        """(launch, output): the operator's bundle on device tensors, with
        the argument list of kiln.ops.block_sparse_attention. Kind "fixed":
        the dense kernel on the block mask in masks[("fixed", block)].
        `stamps` (int64 [programs, 5]): the profile option's bundle, which
        writes its clock readings there."""
        if (kind, block) not in masks:
            bq, bkv = block_sizes(block)
            masks[(kind, block)] = ops.block_mask(rules[kind], B, H, SQ, SQ, block=bq,
                                                  block_kv=bkv)
        mask = masks[(kind, block)]
        bundle = load(attention_bench_kernel("none" if kind == "fixed" else kind, warps,
                                             stages, block, swizzle, overlap, out16,
                                             devmaps, pingpong, one_loop,
                                             stamps is not None).path)
        ot = torch.empty(B, H, SQ, D, device=dev,
                         dtype=torch.bfloat16 if out16 else torch.float32)
        lt = torch.empty(B, H, SQ, device=dev)
        marr = [torch.from_numpy(np.ascontiguousarray(mask[n_], np.int32)).to(dev)
                for n_ in ("kv_num", "kv_idx", "full_num", "full_idx")]
        docs = torch.zeros(B, SQ, dtype=torch.int32, device=dev)
        args = [qt, kt, vt, ot, lt, *marr, docs, B, H, SQ, SQ, mask["nqb"], mask["maxb"],
                1 / math.sqrt(D)] + ([] if stamps is None else [stamps])
        grid = (mask["nqb"], B * H)
        return (lambda: bundle[grid](*args, wait=False)), ot, bundle

    sdpa_times = {}
    for kind in ("none", "causal"):
        ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=kind == "causal")
        t_torch = bench(lambda: F.scaled_dot_product_attention(qt, kt, vt,
                                                               is_causal=kind == "causal"),
                        batch=3, host=(f"attention {kind}", "peer"))
        sdpa_times[kind] = t_torch
        fl = 4 * B * H * SQ * SQ * D * (0.5 if kind == "causal" else 1)
        for variant in BENCH_VARIANTS:
            run_kiln, ot, bundle = kiln_attention(kind, *variant)
            t_kiln = bench(run_kiln, reps=5, batch=3, host=host_label(f"attention {kind}",
                                                                      variant))
            kiln_sync(bundle)
            err = (ot - ref.float()).abs().max().item()
            tag = variant_tag(*variant)
            if not err < 5e-2:
                print(f"FAIL attention benchmark {kind} {tag}: max abs error "
                      f"{err:.3g} vs SDPA")
                failures.append(f"attention bench {kind} {tag}")
            add_row((f"attention {kind} s{SQ} d{D} bf16 {tag}",
                         fl / t_kiln / 1e12, fl / t_torch / 1e12, "TFLOP/s",
                         "scaled_dot_product_attention"))

    # Triton's tutorial attention (examples/python/triton_attention.py), bf16
    # output, against the same SDPA figures.
    if SQ == PORT_SEQ:
        for kind in ("none", "causal"):
            causal = kind == "causal"
            ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).float()
            fl = 4 * B * H * SQ * SQ * D * (0.5 if causal else 1)
            for block, warps, stages in PORT_ATTN_BENCH:
                o16 = torch.empty(B, H, SQ, D, device=dev, dtype=torch.bfloat16)
                lse_t = torch.empty(B * H, SQ, device=dev)
                path, grid, args = port_bench_attention(causal, qt, kt, vt, o16, lse_t, block,
                                                        warps, stages)
                bd = load(path)
                t_kiln = bench(lambda: bd[grid](*args, wait=False), reps=5, batch=3)
                kiln_sync(bd)
                err = (o16.float() - ref).abs().max().item()
                tag = f"b{block[0]}x{block[1]} w{warps} s{stages}"
                if not err < 5e-2:
                    print(f"FAIL Triton tutorial attention benchmark {kind} {tag}: max abs "
                          f"error {err:.3g} vs SDPA")
                    failures.append(f"Triton tutorial attention bench {kind} {tag}")
                add_row((f"Triton tutorial attention {kind} s{SQ} d{D} {tag}",
                         fl / t_kiln / 1e12, fl / sdpa_times[kind] / 1e12, "TFLOP/s",
                         "scaled_dot_product_attention"))

    # The fixed cost per program: the dense kernels again with no key block
    # (kv_num = full_num = 0: the prologue, the two empty loops, the
    # epilogue) and with one full block, at the two main shapes. The grid is
    # the same (512 or 1024 programs); per program: time x SMs / programs.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    fixed_variants = [(8, None, 128, True, False), (None, None, 64, True, False)]
    if TARGET.endswith("sm_90a"):
        fixed_variants.append((8, None, 128, True, False, False, True))
    for variant in fixed_variants:
        base = masks.get(("none", variant[2]))
        if base is None:
            continue
        for label, nfull in (("no key block", 0), ("one full block", 1)):
            m_ = dict(base)
            m_["kv_num"] = np.zeros_like(base["kv_num"])
            m_["full_num"] = np.full_like(base["full_num"], nfull)
            m_["full_idx"] = np.zeros_like(base["full_idx"])
            masks[("fixed", variant[2])] = m_
            run_kiln, ot, bundle = kiln_attention("fixed", *variant)
            t_fixed = bench(run_kiln, reps=5, batch=3)
            kiln_sync(bundle)
            progs = m_["nqb"] * B * H
            print(f"fixed cost {variant_tag(*variant)} {label}: {t_fixed * 1e6:.1f} us for "
                  f"{progs} programs, {t_fixed * 1e6 * sms / progs:.2f} us per program "
                  f"(on {sms} SMs)")
            del masks[("fixed", variant[2])]

    # Where a block-128 program's time goes: the profile option's clock
    # readings (SM cycles) of the last of the timed launches. Per program:
    # the prologue (entry to the partial blocks' loop: q issued, counts
    # read), each loop with its set-up and pipeline fill, the epilogue up to
    # out's store (lse's row, stored by threads). Each loop's cycles are fitted as set-up + n x per-block
    # over the programs (where their block counts differ). "Busy clock":
    # the programs' cycles summed over the SMs' time in the kernel, which is
    # the SM clock if every SM always ran a program (one per SM at block
    # 128) and lower by the idle share otherwise. With each program's SM
    # (column 5) the idle time splits into the gaps between consecutive
    # programs on an SM (from one's last reading to the next's entry: out's
    # store, the exit, the next block's launch) and each SM's time outside
    # its first entry .. last store (the launch's start and tail), the
    # latter in µs at the SM clock torch.cuda._sleep measured.
    def profile_fit(cycles, n):
        if n.size == 0 or not (n > 0).any():
            return "none"
        if np.ptp(n) > 0:
            per, setup = np.polyfit(n.astype(np.float64), cycles.astype(np.float64), 1)
            return f"{setup:.0f} + {per:.0f}/block"
        return f"{cycles.mean() / max(int(n[0]), 1):.0f}/block (n={int(n[0])}, set-up included)"

    def profile_once(kind, variant, label):
        """Runs the profiled bundle of `variant` on masks[(kind, block)]
        (kind "fixed": the dense kernel on that mask) and prints its phases."""
        mk = masks[(kind, variant[2])]
        nqb_ = mk["nqb"]
        progs = nqb_ * B * H
        st = torch.full((progs, 6), -1, dtype=torch.int64, device=dev)
        run_kiln, ot, bundle = kiln_attention(kind, *variant, stamps=st)
        t_prof = bench(run_kiln, reps=3, batch=3)
        kiln_sync(bundle)
        s_ = st.cpu().numpy()
        i_ = np.arange(progs)
        qb_, bh_ = nqb_ - 1 - i_ // (B * H), i_ % (B * H)
        npart = np.asarray(mk["kv_num"]).reshape(B * H, nqb_)[bh_, qb_]
        nfull = np.asarray(mk["full_num"]).reshape(B * H, nqb_)[bh_, qb_]
        if (s_ < 0).any() or (np.diff(s_[:, :5], axis=1) < 0).any() or (s_[:, 5] >= sms).any():
            print(f"FAIL profile {label}: readings missing or going backwards, or an SM "
                  "number past the device's")
            failures.append(f"profile {label}")
            return
        d_ = np.diff(s_[:, :5], axis=1)
        total = s_[:, 4] - s_[:, 0]
        busy = total.sum() / (t_prof * 1e6 * sms)
        # Per SM: its programs in order, the gaps between them, its span.
        gaps, spans = [], []
        for sm_ in np.unique(s_[:, 5]):
            r_ = s_[s_[:, 5] == sm_]
            r_ = r_[np.argsort(r_[:, 0])]
            gaps.extend((r_[1:, 0] - r_[:-1, 4]).tolist())
            spans.append(r_[-1, 4] - r_[0, 0])
        gap = f"{np.mean(gaps):.0f}" if gaps else "none"
        outside = ""
        if _SLEEP_RATE:
            share = 100 * (1 - np.mean(spans) / (t_prof * _SLEEP_RATE[0]))
            outside = f", outside the SMs' spans {share:.1f}% of the kernel"
        if len(variant) > 8 and variant[8]:  # one_loop: columns 1-2 hold the one loop
            loops = (f"one loop {d_[:, 1].mean():.0f} = "
                     f"{profile_fit(d_[:, 1], npart + nfull)}")
        else:
            loops = (f"partial loop {d_[:, 1].mean():.0f} = {profile_fit(d_[:, 1], npart)}, "
                     f"full loop {d_[:, 2].mean():.0f} = {profile_fit(d_[:, 2], nfull)}")
        print(f"profile {label}: {t_prof * 1e6:.1f} us for {progs} programs on "
              f"{len(spans)} SMs; cycles per program {total.mean():.0f}: prologue "
              f"{d_[:, 0].mean():.0f}, {loops}, epilogue {d_[:, 3].mean():.0f}; between "
              f"programs on an SM {gap}{outside}; busy clock {busy:.0f} MHz", flush=True)

    for kind, variant in PROFILE_VARIANTS:
        label = f"{kind} {variant_tag(*variant)}"
        try:
            profile_once(kind, variant, label)
            if kind == "none":
                # Dense programs all have 32 full blocks (no fit): the same
                # kernel on one full block per program gives the loop's
                # set-up (one block's cycles less the per-block ones).
                one = dict(masks[("none", variant[2])])
                one["kv_num"] = np.zeros_like(one["kv_num"])
                one["full_num"] = np.ones_like(one["full_num"])
                one["full_idx"] = np.zeros_like(one["full_idx"])
                masks[("fixed", variant[2])] = one
                try:
                    profile_once("fixed", variant, f"one full block {variant_tag(*variant)}")
                finally:
                    del masks[("fixed", variant[2])]
        except Exception as e:  # noqa: BLE001 (a report, not a check of the results)
            print(f"profile {label} failed: {type(e).__name__}: {e}")
            failures.append(f"profile {label}")
    if _SLEEP_RATE:  # torch.cuda._sleep spins on the SM's cycle counter
        print(f"SM clock while sleeping (torch.cuda._sleep): {_SLEEP_RATE[0] / 1e6:.0f} MHz")
    try:  # the SM clock to read the busy clock against (current, just after)
        smi = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20)
        print(f"SM clock (nvidia-smi: now, max): {smi.stdout.strip() or smi.stderr.strip()}")
    except Exception as e:  # noqa: BLE001 (no nvidia-smi: the clock is not reported)
        print(f"SM clock: nvidia-smi failed: {type(e).__name__}: {e}")

    # Block-sparse (causal sliding window) vs flex_attention at the same mask,
    # where this PyTorch has it. Its torch.compile is timed and reported; any
    # failure there is reported, not fatal to the table.
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        flex_attention = None
        print("flex_attention: not in this PyTorch")
    if flex_attention is not None:
        try:
            def sliding(b_, h_, q_idx, kv_idx):
                return (q_idx >= kv_idx) & (q_idx - kv_idx < BENCH_WINDOW)
            t0 = time.time()
            fmask = create_block_mask(sliding, B, H, SQ, SQ, device="cuda")
            flex = torch.compile(flex_attention)
            ref = flex(qt, kt, vt, block_mask=fmask)
            torch.cuda.synchronize()
            print(f"flex_attention: block mask and torch.compile took {time.time() - t0:.1f} s")
            # flex_attention's time has varied between runs (96.6 and 166.6
            # TFLOP/s in two processes on one H200): timed before, between and
            # after Kiln's variants, and the fastest taken.
            t_flex = [bench(lambda: flex(qt, kt, vt, block_mask=fmask), batch=3,
                            host=("block-sparse", "peer"))]
            pairs = sum(min(i + 1, BENCH_WINDOW) for i in range(SQ))  # visible (q, k)
            fl = 4 * B * H * pairs * D
            measured = []
            for variant in BENCH_VARIANTS:
                tag = variant_tag(*variant)
                run_kiln, ot, bundle = kiln_attention("sliding_window", *variant)
                t_kiln = bench(run_kiln, reps=5, batch=3, host=host_label("block-sparse",
                                                                          variant))
                kiln_sync(bundle)
                err = (ot - ref.float()).abs().max().item()
                if not err < 5e-2:
                    print(f"FAIL block-sparse benchmark {tag}: max abs error {err:.3g} vs "
                          "flex_attention")
                    failures.append(f"block-sparse bench {tag}")
                measured.append((tag, t_kiln))
                if len(measured) == len(BENCH_VARIANTS) // 2:
                    t_flex.append(bench(lambda: flex(qt, kt, vt, block_mask=fmask), batch=3))
            t_flex.append(bench(lambda: flex(qt, kt, vt, block_mask=fmask), batch=3))
            print("flex_attention: " + ", ".join("%.1f" % (fl / t / 1e12) for t in t_flex)
                  + " TFLOP/s (before, between and after Kiln's variants)")
            t_torch = min(t_flex)
            for tag, t_kiln in measured:
                add_row((f"block-sparse window {BENCH_WINDOW} s{SQ} {tag}",
                         fl / t_kiln / 1e12, fl / t_torch / 1e12, "TFLOP/s",
                         "flex_attention (compiled, fastest of 3)"))
            if measured:
                # The defaults follow the fastest variant: named once, with
                # its ratio to flex_attention (the issue's target).
                best_tag, best_t = min(measured, key=lambda m_: m_[1])
                print(f"block-sparse fastest variant: {best_tag}, {fl / best_t / 1e12:.1f} "
                      f"TFLOP/s, {t_torch / best_t:.2f}x flex_attention (target >= 1.00x)",
                      flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"flex_attention comparison failed: {type(e).__name__}: {e}")

    m, k = 8192, 4096
    xs_t = torch.randn(m, k, device=dev)
    out_t = torch.empty_like(xs_t)
    sm = load(example("softmax"))
    t_kiln = bench(lambda: sm[(m,)](xs_t, out_t, m, k, wait=False), batch=3)
    kiln_sync(sm)
    t_torch = bench(lambda: torch.softmax(xs_t, dim=1), batch=3)
    byts = 2 * m * k * 4
    add_row((f"softmax {m}x{k} f32", byts / t_kiln / 1e9, byts / t_torch / 1e9, "GB/s",
                 "torch.softmax"))

    n = 1 << 26
    xt, yt = torch.randn(n, device=dev), torch.randn(n, device=dev)
    out_t = torch.empty_like(xt)
    va = load(example("vector_add"))
    t_kiln = bench(lambda: va[(cdiv(n, 1024),)](xt, yt, out_t, n, wait=False), batch=3)
    kiln_sync(va)
    t_torch = bench(lambda: torch.add(xt, yt, out=out_t), batch=3)
    byts = 3 * n * 4
    add_row((f"vector add {n} f32", byts / t_kiln / 1e9, byts / t_torch / 1e9, "GB/s",
                 "torch.add"))

# -- the library's other operators on the GPU vs PyTorch (GPU only) ------------------
# Each kiln.ops call runs once with its launches captured (the wrappers' own
# argument lists and grids), its numpy arrays are copied to the device once,
# and the captured launches are timed on those device tensors. The PyTorch
# peer runs on the same data; the first output is compared with it.
section("opbench")


def op_on_device(fn):
    """kiln.ops call `fn` as device launches: (run, device tensor of array)."""
    global _captured
    _captured = []
    try:
        fn()
    finally:
        caps, _captured = _captured, None
    tensors = {}

    def dev_of(a):
        if id(a) not in tensors:
            tensors[id(a)] = (a, to_dev(a))
        return tensors[id(a)][1]

    runs = [(load(path), grid, [dev_of(v) if isinstance(v, np.ndarray) else v for v in vals])
            for path, grid, vals in caps]

    def run():
        for bundle, grid, args in runs:
            bundle[grid](*args, wait=False)

    def sync():
        for bundle, _, _ in runs:
            bundle.synchronize()
    run.sync = sync
    return run, caps, dev_of


def op_bench(name, fn, out_at, torch_fn, work, unit, peer, tol, ref_fn=None):
    """Times kiln.ops call `fn` (its first launch's argument `out_at` is the
    output compared) against `torch_fn` (returns the same values; `ref_fn`,
    if given, a more exact reference to compare with)."""
    run, caps, dev_of = op_on_device(fn)
    run()
    run.sync()
    ref = (ref_fn or torch_fn)()
    got = dev_of(caps[0][2][out_at])
    err = (got.float().reshape(ref.shape) - ref.float()).abs().max().item()
    if not err <= tol:
        print(f"FAIL op benchmark {name}: max abs error {err:.3g} vs {peer}", flush=True)
        failures.append(f"op bench {name}")
    t_kiln = bench(run, reps=5, host=(name, "kiln"))
    run.sync()
    t_torch = bench(torch_fn, reps=5, host=(name, "peer"))
    scale = 1e12 if unit == "TFLOP/s" else 1e9
    add_row((name, work / t_kiln / scale, work / t_torch / scale, unit, peer))


if ACTIVE and not EMULATED:
    for case in opbench_cases():
        op_bench(*case)

if rows:  # the benchmark parts on a GPU
    print()
    print(f"GPU: {torch.cuda.get_device_name()}, bundles for {TARGET}")
    print("Timings are CUDA-event medians of back-to-back calls queued behind a GPU sleep")
    print("(GPU time, both sides); Kiln's launches are queued (wait=False).")
    print(f"| {'case':40} | {'kiln':>10} | {'torch':>10} | unit     | ratio | peer")
    print(f"|{'-' * 42}|{'-' * 12}|{'-' * 12}|----------|-------|------")
    for name, kv_, tv, unit, peer in rows:
        print(f"| {name:40} | {kv_:10.1f} | {tv:10.1f} | {unit:8} | {kv_ / tv:5.2f} | {peer}")
    if host_times:
        print()
        print("Host time to queue one call (µs; Kiln: Bundle launch with wait=False from")
        print("Python; the peer: the PyTorch call), while the GPU is busy:")
        print(f"| {'case':40} | {'kiln':>10} | {'torch':>10} |")
        print(f"|{'-' * 42}|{'-' * 12}|{'-' * 12}|")
        for name, (hk, hp) in host_times.items():
            fmt = lambda v: "" if v is None else f"{v * 1e6:10.1f}"  # noqa: E731
            print(f"| {name:40} | {fmt(hk):>10} | {fmt(hp):>10} |")

if failures:
    print("FAILED:", ", ".join(failures))
    sys.exit(1)
print(f"all checks passed ({TARGET}, {opts.section})")
