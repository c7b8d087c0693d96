"""CI without a GPU: every example and library operator compiles for the
NVIDIA targets (sm_80, sm_90a), the PTX assembles with ptxas when the CUDA
toolkit is installed, and GPU bundles record their launch parameters.

The kernels' numerics on a GPU are checked by test/gpu/run_gpu_checks.py on a
machine with one; here only what a compiler can promise without a device.
"""

import glob
import itertools
import re
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from conftest import KILNC  # noqa: E402
CHIPS = ["sm_80", "sm_90a"]
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.mlir")))


def _ptxas():
    p = os.environ.get("KILN_PTXAS") or shutil.which("ptxas")
    if not p and os.path.exists("/usr/local/cuda/bin/ptxas"):
        p = "/usr/local/cuda/bin/ptxas"
    return p


def _ops():
    out = subprocess.run([KILNC, "op", "--list"], check=True, capture_output=True,
                         text=True).stdout
    return [line.split(":")[0] for line in out.splitlines()
            if line and not line.startswith(" ")]


# Operator configurations for the GPU: the defaults, except where the CPU's
# default tiles need more shared memory than a thread block has.
GPU_CONFIG = {"dsa_sparse_attention": ["--block_k", "16"]}


def _compile(args, out, chip):
    r = subprocess.run([KILNC, *args, "--target", chip, "--emit", "ptx", "-o", out],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    ptx = open(out).read()
    assert f".target {chip}" in ptx
    assert ".visible .entry" in ptx
    return ptx


def _assemble(ptx_path, chip, tmp_path):
    ptxas = _ptxas()
    if not ptxas:
        pytest.skip("ptxas (CUDA toolkit) not installed: PTX not assembled")
    r = subprocess.run([ptxas, f"-arch={chip}", "-v", ptx_path, "-o",
                        str(tmp_path / "k.cubin")], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr  # also: no unresolved externs
    return r.stderr


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: os.path.basename(p))
def test_example_compiles_for_gpu(path, chip, tmp_path):
    out = str(tmp_path / "k.ptx")
    ptx = _compile([path], out, chip)
    if "matmul_bf16" in path and chip == "sm_90a":
        assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16" in ptx
        assert "mma.sync" not in ptx
    elif "matmul_bf16" in path:
        assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
    if "matmul_fp8" in path and chip == "sm_90a":
        # wgmma's fp8 form on the bytes (both operands K-major, in place).
        assert "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e5m2" in ptx
        assert "mma.sync" not in ptx and ".bf16" not in ptx
    elif "matmul_fp8" in path:
        # Decoded to bf16 for mma.sync.
        assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
    if "softmax" in path or "layernorm" in path:
        assert "shfl.sync.bfly" in ptx
    _assemble(out, chip, tmp_path)


# Every architecture kilnc accepts: NVPTX aborts on a PTX ISA version older
# than the chip (sm_86 and sm_89 did, with 7.0), so each one compiles the
# tensor-core example and ptxas assembles it for that chip.
ALL_CHIPS = ["sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_120"]


def test_every_known_chip_compiles_and_others_are_refused(tmp_path):
    out = subprocess.run([KILNC, "--help"], capture_output=True, text=True).stdout
    r = subprocess.run([KILNC, os.path.join(ROOT, "examples", "vector_add.mlir"), "--target",
                        "sm_75", "-o", str(tmp_path / "x")], capture_output=True, text=True)
    assert r.returncode == 1 and "known: " + ", ".join(ALL_CHIPS) in r.stderr, r.stderr
    assert ", ".join(ALL_CHIPS) in " ".join(out.split())
    for chip in ALL_CHIPS:
        ptx = _compile([os.path.join(ROOT, "examples", "matmul_bf16.mlir")],
                       str(tmp_path / f"{chip}.ptx"), chip)
        want = "wgmma.mma_async" if chip == "sm_90a" else "mma.sync.aligned.m16n8k16"
        assert want in ptx, chip
        _assemble(str(tmp_path / f"{chip}.ptx"), chip, tmp_path)


sys.path.insert(0, os.path.join(ROOT, "test", "gpu"))
from gemm_variants import GEMM_VARIANTS, gemm_source  # noqa: E402


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("variant", GEMM_VARIANTS[1:] + [GEMM_VARIANTS[-1] + ("grouped",)],
                         ids=lambda v: "x".join(map(str, v)))
def test_device_check_gemm_variants_compile(variant, chip, tmp_path):
    """The larger GEMM blocks the device check benchmarks: sm_90a runs them
    on m64n128/m64n256 wgmma with operands loaded in place (no copy), sm_80
    on mma.sync; both must fit in shared memory and assemble. The last one
    also in the grouped program order."""
    bm, bn, bk, warps, stages = variant[:5]
    src = tmp_path / "gemm.mlir"
    src.write_text(gemm_source(bm, bn, bk, grouped=variant[5:] == ("grouped",)))
    out = str(tmp_path / "k.ptx")
    ptx = _compile([str(src), "--num-warps", str(warps), "--num-stages", str(stages)], out,
                   chip)
    if chip == "sm_90a":
        # One 64-row block per warpgroup when there are two: m64n(bn).
        n = {(128, 128, 4): 128, (128, 128, 8): 128, (128, 256, 8): 256}[(bm, bn, warps)]
        assert f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16" in ptx
        # No shared-to-shared copy of an operand (ld.shared.v4 then
        # st.shared.v4) before the first wgmma: the only 16-byte shared
        # loads there copy tensor maps out to global memory (st.global.v4).
        head = ptx.split("wgmma.mma_async")[0]
        assert head.count("ld.shared.v4") == head.count("st.global.v4")
        assert "fence.proxy.async.shared::cta" in ptx
    else:
        assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
    info = _assemble(out, chip, tmp_path)
    if chip == "sm_90a":
        # At 3 stages or more each iteration's wgmma groups stay in flight
        # while the next iteration's are issued (wait_group 1), by TMA and by
        # cp.async, and ptxas keeps them asynchronous: it reports neither a
        # serialization (C7515, C7518) nor a wait it had to inject (C7517).
        for flags in ([], ["--no-tma"]):
            if flags:
                ptx = _compile([str(src), "--num-warps", str(warps), "--num-stages",
                                str(stages), *flags], out, chip)
                info = _assemble(out, chip, tmp_path)
            assert ("wgmma.wait_group.sync.aligned \t1;" in ptx) == (stages >= 3), flags
            assert "C75" not in info, (flags, info)


@pytest.mark.parametrize("shape", [("64", "4", "none"), ("128", "8", "causal"),
                                   ("128", "8", "sliding_window")],
                         ids=lambda v: "-".join(v))
def test_overlapped_attention_is_not_serialized(shape, tmp_path):
    """Attention's full-block loop on sm_90a computes the next block's
    scores while this one's softmax runs (docs/gpu.md, "Overlap"): that
    holds only if ptxas keeps the scores' wgmma group asynchronous across
    the exponentials. It reports no serialization (C7515, C7518) nor an
    injected wait (C7517), and spills nothing; with --no-overlap there is
    one wait more (the scores' own)."""
    block, warps, mask = shape
    args = ["op", "block_sparse_attention", "--dtype", "bf16", "--head_dim", "128",
            "--block", block, "--mask", mask, "--window", "1024", "--num-warps", warps,
            "--overlap", "1"]
    out = str(tmp_path / "k.ptx")
    ptx = _compile(args, out, "sm_90a")
    info = _assemble(out, "sm_90a", tmp_path)
    assert "C75" not in info, info
    # At 255 registers ptxas spills a few words at block 128 with a
    # sliding window (24 bytes); more would mean the carried scores spill.
    spilled = int(re.search(r"(\d+) bytes spill stores", info).group(1))
    assert spilled <= 32, info
    waits = ptx.count("wgmma.wait_group.sync.aligned")
    plain = _compile(args + ["--no-overlap"], out, "sm_90a")
    assert plain.count("wgmma.wait_group.sync.aligned") == waits
    # Same count (four dots waited for either way: partial loop's two, the
    # scores before the full loop and p v; or the full loop's own scores):
    # what differs is where the full loop's first wait is. Followed through
    # the PTX's branches (LLVM lays a loop's blocks out in any order: with
    # the pingpong's barriers the softmax's block comes before the scores').
    def commits_before_exponentials(text):
        lines = [ln.strip() for ln in text.splitlines()]
        labels = {ln[:-1]: i for i, ln in enumerate(lines)
                  if ln.startswith("$") and ln.endswith(":")}
        found = []
        for start, ln in enumerate(lines):
            if not ln.startswith("wgmma.commit_group"):
                continue
            todo, seen = [start + 1], set()
            while todo:
                i = todo.pop()
                while i < len(lines) and i not in seen:
                    seen.add(i)
                    ln_ = lines[i]
                    if ln_.startswith("wgmma.wait_group") or ln_.startswith("ret"):
                        break
                    if ln_.startswith("ex2.approx.ftz.f32"):
                        found.append(start)
                        todo = []
                        break
                    m = re.match(r"(@!?%p\d+ )?bra(\.uni)?\s+(\$\S+);", ln_)
                    if m:
                        todo.append(labels[m.group(3)])
                        if not m.group(1):
                            break
                    i += 1
        return found
    assert commits_before_exponentials(ptx), "no scores group runs during the softmax"
    assert not commits_before_exponentials(plain)


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("op", _ops())
def test_operator_compiles_for_gpu(op, chip, tmp_path):
    out = str(tmp_path / "k.ptx")
    _compile(["op", op, *GPU_CONFIG.get(op, [])], out, chip)
    _assemble(out, chip, tmp_path)


@pytest.mark.parametrize("chip", ["sm_80", "sm_89"])
@pytest.mark.parametrize("warps,block", [(4, ["--block", "64"]),
                                         (8, ["--block", "128", "--block_kv", "64"])])
@pytest.mark.parametrize("swizzle", [True, False])
def test_mma_sync_attention_keeps_scores_in_registers(chip, warps, block, swizzle, tmp_path):
    # bf16 attention at head dim 128 on mma.sync: the scores, P and the row
    # statistics stay in registers (each warp owns 16 whole rows), so shared
    # memory holds q and two stages of key and value blocks and little else
    # (scores in shared memory took 116 / 166 KiB). P feeds the second dot
    # from registers. Against ldmatrix bank conflicts the rows (128 bf16, 256
    # bytes) are XOR-swizzled, no bytes added: sm_89's 99 KiB per block fits
    # two stages at block 64 and at 128x64. With --no-swizzle they are padded
    # by 8 elements (136, not 128); where that does not fit, one stage goes
    # first (sm_89 at 128x64).
    path = str(tmp_path / "k.kiln")
    flags = [] if swizzle else ["--no-swizzle"]
    r = subprocess.run([KILNC, "op", "block_sparse_attention", "--head_dim", "128", "--dtype",
                        "bf16", "--mask", "causal", *block, "--target", chip, "--num-warps",
                        str(warps), *flags, "-o", path], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    data = open(path, "rb").read()
    shared = int(re.search(rb"launch shared_bytes (\d+)", data).group(1))
    bq = int(block[1])
    n_stages = 1 if (chip, warps, swizzle) == ("sm_89", 8, False) else 2
    pitch = 128 if swizzle else 128 + 8
    # q and the stages of k and v; at one stage the key and value blocks
    # share their bytes (a barrier between the scores' reads of the keys
    # and the values' load). After the loops, the f32 output tile.
    kv = 64 * pitch * 2 * (2 * n_stages if n_stages > 1 else 1)
    expect = max(bq * pitch * 2 + kv, bq * 128 * 4)
    assert expect <= shared <= expect + 4096, shared
    ptx = _compile(["op", "block_sparse_attention", "--head_dim", "128", "--dtype", "bf16",
                    "--mask", "causal", *block, "--num-warps", str(warps), *flags],
                   str(tmp_path / "k.ptx"), chip)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
    assert "shfl.sync.bfly" in ptx  # row max and sum across a row's four lanes
    info = _assemble(str(tmp_path / "k.ptx"), chip, tmp_path)
    assert " 0 bytes spill stores" in info, info


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("op", ["block_sparse_attention", "conv"])
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_low_precision_uses_tensor_cores(op, dtype, chip, tmp_path):
    """bf16 and f16 fragments are typed differently in NVVM (i32 vs
    vector<2xf16>); f16 once failed the verifier. ptxas checks the result.
    sm_90a runs these dots (64-row blocks, 4 warps) on wgmma."""
    out = str(tmp_path / "k.ptx")
    ptx = _compile(["op", op, "--dtype", dtype], out, chip)
    if chip == "sm_90a":
        assert f"wgmma.mma_async.sync.aligned.m64n64k16.f32.{dtype}.{dtype}" in ptx
        assert "wgmma.wait_group.sync.aligned" in ptx
        if op == "block_sparse_attention":
            # q.k^T reads k itself as a K-major B (imm-trans-b 0, no transpose
            # copy), both operands from shared memory; p.v takes p from
            # registers (four of them: A in registers, no imm-trans-a) and v
            # N-major (imm-trans-b 1).
            trans_b = re.findall(r"wgmma\.mma_async[^;]*,\s*1,\s*1,\s*0,\s*([01]);", ptx)
            assert set(trans_b) == {"0"}, trans_b
            assert re.search(r"wgmma\.mma_async[^;]*\}, \{%r\d+, %r\d+, %r\d+, %r\d+\}, "
                             r"%rd\d+, p, 1, 1, 1;", ptx)
    else:
        assert f"mma.sync.aligned.m16n8k16.row.col.f32.{dtype}.{dtype}.f32" in ptx
        assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    if op == "block_sparse_attention":
        assert "shfl.sync.bfly" in ptx
    if op == "conv" and chip == "sm_90a":
        # One group: the weights come from a 3-D view, [1, BC, BN] reshaped
        # to [BC, BN], which TMA loads into the dot's layout (through a
        # group dimension they were cp.async copies into rows the dot laid
        # out again).
        assert "cp.async.bulk.tensor" in ptx
    _assemble(out, chip, tmp_path)


def test_gpu_bundle_manifest(tmp_path):
    out = tmp_path / "k.kb"
    r = subprocess.run([KILNC, os.path.join(ROOT, "examples", "softmax.mlir"),
                        "--target", "sm_90a", "--num-warps", "8", "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    head = out.read_bytes()[:1024].decode("latin-1")
    for line in ["target sm_90a", "code ptx", "entry softmax", "launch num_warps 8",
                 "arg x ptr f32"]:
        assert line in head
    assert re.search(r"launch shared_bytes [1-9][0-9]*\n", head)


def test_gpu_bundle_loads_in_runtime_without_driver(tmp_path, monkeypatch):
    """A GPU bundle is parsed and validated by the runtime; without a CUDA
    driver loading it is refused with a message, not a crash."""
    import kiln
    out = tmp_path / "k.kb"
    subprocess.run([KILNC, os.path.join(ROOT, "examples", "vector_add.mlir"),
                    "--target", "sm_80", "-o", str(out)], check=True)
    monkeypatch.setenv("KILN_CUDA_DRIVER", str(tmp_path / "no-such-libcuda.so"))
    code = ("import kiln, sys\n"
            "try:\n"
            f"    kiln.load_bundle({str(out)!r})\n"
            "except Exception as e:\n"
            "    print(type(e).__name__, e); sys.exit(3)\n")
    r = subprocess.run([os.sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "driver" in r.stdout.lower() or "cuda" in r.stdout.lower(), r.stdout


# The mock driver's record of its last launch (MockCudaDriver.h), for the
# scripts below.
MOCK_LAUNCH = r'''
mock = ctypes.CDLL(os.environ["KILN_CUDA_DRIVER"])
class Launch(ctypes.Structure):
    _fields_ = [("count", ctypes.c_int), ("grid", ctypes.c_uint * 3),
                ("block", ctypes.c_uint * 3), ("shared_bytes", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("function", ctypes.c_char * 128),
                ("num_params", ctypes.c_int), ("params", ctypes.c_ulonglong * 32)]
mock.kiln_mock_last_launch.restype = ctypes.POINTER(Launch)
'''


LAUNCH_SCRIPT = r'''
import ctypes, os, sys, types
import numpy as np
import kiln
import kiln.language as kl


class FakeCudaArray:
    """What a PyTorch/CuPy CUDA array exposes (the mock driver never
    dereferences the address)."""
    def __init__(self, addr, shape, typestr="<f4", strides=None):
        self.__cuda_array_interface__ = {"data": (addr, False), "shape": shape,
                                         "typestr": typestr, "strides": strides,
                                         "version": 3}


@kiln.jit
def add(x, y, out, n, BLOCK: kl.constexpr):
    pid = kl.program_id(0)
    offs = pid * BLOCK + kl.arange(0, BLOCK)
    m = offs < n
    kl.store(out + offs, kl.load(x + offs, mask=m) + kl.load(y + offs, mask=m), mask=m)


n = 1000
xs = [FakeCudaArray(0x7000000 + i * 0x10000, (n,)) for i in range(3)]
add[(4,)](*xs, n, BLOCK=256)
assert add.last.target == "sm_80", add.last.target
ptx = add.ir("asm")
assert ".target sm_80" in ptx and "cp.async" in ptx, ptx[:400]

#MOCK_LAUNCH
l = mock.kiln_mock_last_launch().contents
assert l.count == 1 and tuple(l.grid) == (4, 1, 1), (l.count, tuple(l.grid))
assert tuple(l.block) == (128, 1, 1), tuple(l.block)
assert l.function == b"add", l.function
assert l.shared_bytes > 0
assert l.num_params == 4, l.num_params
assert list(l.params[:4]) == [0x7000000, 0x7010000, 0x7020000, n], list(l.params[:4])


# A TensorDescriptor argument of a CUDA array: passed as its pointer, sizes
# and strides (the kernel's descriptor is made from them).
@kiln.jit
def scale_rows(d, BM: kl.constexpr, BN: kl.constexpr):
    pm = kl.program_id(0) * BM
    d.store([pm, 0], d.load([pm, 0]) * 2.0)


arr = FakeCudaArray(0x9000000, (100, 48))
scale_rows[(4,)](kiln.TensorDescriptor.from_tensor(arr, [32, 64]), BM=32, BN=64)
l = mock.kiln_mock_last_launch().contents
assert l.count == 2 and tuple(l.grid) == (4, 1, 1), (l.count, tuple(l.grid))
assert list(l.params[:5]) == [0x9000000, 100, 48, 48, 1], list(l.params[:5])
# A descriptor reaching past its CUDA array is refused, as over a numpy
# array (it was passed on: the kernel read other device memory).
for shape, strides in (((101, 48), (48, 1)), ((100, 48), (49, 1)), ((100, 48), (-48, 1))):
    try:
        scale_rows[(4,)](kiln.TensorDescriptor(arr, shape, strides, [32, 64]), BM=32, BN=64)
        sys.exit(f"a descriptor {shape} {strides} past its array was accepted")
    except ValueError as e:
        assert "outside the array's 4800 elements" in str(e), e
assert mock.kiln_mock_last_launch().contents.count == 2

# Host and device arrays in one launch: refused.
try:
    add[(4,)](xs[0], np.zeros(n, np.float32), xs[2], n, BLOCK=256)
    sys.exit("mixed host/device launch was accepted")
except ValueError as e:
    assert "CUDA device" in str(e)
# Host arrays for a GPU KILN_TARGET: refused (its kernels cannot read them),
# by @kiln.jit and by kiln.ops.
os.environ["KILN_TARGET"] = "sm_80"
for call in (lambda: add[(4,)](*(np.zeros(n, np.float32) for _ in range(3)), n, BLOCK=256),
             lambda: kiln.ops.embedding(np.zeros((4, 8), np.float32), np.array([1]))):
    try:
        call()
        sys.exit("host arrays with KILN_TARGET=sm_80 were accepted")
    except ValueError as e:
        assert "KILN_TARGET=sm_80" in str(e) and "host" in str(e), e
del os.environ["KILN_TARGET"]
# kiln.ops takes host arrays or PyTorch CUDA tensors: another CUDA array is
# refused by name.
for call, arg in ((lambda: kiln.ops.embedding(xs[0], np.array([1])), "weight"),
                  (lambda: kiln.ops.dsa_topk(xs[1], 4), "scores")):
    try:
        call()
        sys.exit("kiln.ops accepted a CUDA array")
    except TypeError as e:
        assert f"argument '{arg}' is a CUDA device array" in str(e), e
# Bundles launched on arrays of the other side: refused before the launch
# (host pointers in a GPU kernel fault; device pointers in a CPU kernel crash).
gpu_b = kiln.load_bundle(os.environ["KILN_TEST_GPU_BUNDLE"])
host_b = kiln.load_bundle(os.environ["KILN_TEST_HOST_BUNDLE"])
assert gpu_b._kernel.is_gpu and gpu_b._kernel.target == "sm_80"
assert not host_b._kernel.is_gpu
before = mock.kiln_mock_last_launch().contents.count
for call, what in ((lambda: gpu_b[(1,)](*(np.zeros(n, np.float32) for _ in range(3)), n),
                    "argument 'x' is a host array, and this kernel runs on the GPU (sm_80)"),
                   (lambda: host_b[(1,)](*xs, n),
                    "argument 'x' is a CUDA device array, and this kernel runs on the host")):
    try:
        call()
        sys.exit("a bundle launched on arrays of the other side")
    except TypeError as e:
        assert what in str(e), e
assert mock.kiln_mock_last_launch().contents.count == before
gpu_b[(1,)](*xs, n)
assert mock.kiln_mock_last_launch().contents.count == before + 1
# DLPack exporters on a CUDA device (what JAX and CuPy also give): the capsule
# is read (data + byte_offset), not consumed; another device, a strided array
# and kiln.ops are refused.
class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


capsule_new = ctypes.pythonapi.PyCapsule_New
capsule_new.restype = ctypes.py_object
capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class FakeDLPack:
    def __init__(self, addr, n, device=(2, 0), offset=0, stride=None):
        self.shape = (ctypes.c_int64 * 1)(n)
        self.strides = (ctypes.c_int64 * 1)(stride) if stride else None
        self.m = DLManagedTensor()
        t = self.m.dl_tensor
        t.data, (t.device_type, t.device_id) = addr, device
        t.ndim, t.code, t.bits, t.lanes = 1, 2, 32, 1
        t.shape = ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64))
        if self.strides:
            t.strides = ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64))
        t.byte_offset = offset
        self.device = device

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None):
        return capsule_new(ctypes.addressof(self.m), b"dltensor", None)


dl = [FakeDLPack(0x7100000 + i * 0x10000, n, offset=64) for i in range(3)]
add[(4,)](*dl, n, BLOCK=256)
l = mock.kiln_mock_last_launch().contents
assert list(l.params[:4]) == [0x7100040, 0x7110040, 0x7120040, n], list(l.params[:4])
gpu_b[(1,)](*dl, n)
assert list(mock.kiln_mock_last_launch().contents.params[:3]) == [0x7100040, 0x7110040,
                                                                  0x7120040]
for bad, what, exc in ((FakeDLPack(0x7100000, n, device=(2, 1)), "on CUDA device 1", ValueError),
                       (FakeDLPack(0x7100000, n, stride=2), "non-contiguous", ValueError)):
    for call in (lambda: add[(4,)](bad, dl[1], dl[2], n, BLOCK=256),
                 lambda: gpu_b[(1,)](bad, dl[1], dl[2], n)):
        try:
            call()
            sys.exit(f"a DLPack array {what} was accepted")
        except exc as e:
            assert what in str(e), e
# A malformed KILN_CUDA_DEVICE is an error here too (the runtime refuses it).
os.environ["KILN_CUDA_DEVICE"] = "one"
try:
    gpu_b[(1,)](*dl, n)
    sys.exit("KILN_CUDA_DEVICE=one was accepted")
except ValueError as e:
    assert "KILN_CUDA_DEVICE is 'one'" in str(e), e
del os.environ["KILN_CUDA_DEVICE"]
# A __cuda_array_interface__ array that also says (through DLPack) it lives
# on another device: refused too.
other = FakeCudaArray(0x7100000, (n,))
other.__dlpack_device__ = lambda: (2, 1)
for call in (lambda: add[(4,)](other, dl[1], dl[2], n, BLOCK=256),
             lambda: gpu_b[(1,)](other, dl[1], dl[2], n)):
    try:
        call()
        sys.exit("a CUDA array on device 1 was accepted")
    except ValueError as e:
        assert "on CUDA device 1" in str(e), e
try:
    kiln.ops.embedding(dl[0], np.array([1]))
    sys.exit("kiln.ops accepted a CUDA DLPack array")
except TypeError as e:
    assert "argument 'weight' is a CUDA device array" in str(e), e
# A host DLPack exporter (numpy's) still launches a host kernel.
host_b[(1,)](np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros(n, np.float32), n)
# A non-contiguous device array: refused.
try:
    add[(4,)](FakeCudaArray(0x7000000, (n,), strides=(8,)), xs[1], xs[2], n, BLOCK=256)
    sys.exit("strided device array was accepted")
except ValueError as e:
    assert "non-contiguous" in str(e)

# PyTorch CUDA tensors take the launch's fast path (their C methods, not
# cuda_array_view). A stand-in registered as torch.Tensor: the mock records
# their data_ptr(); another device, a non-contiguous tensor and a host
# bundle are refused as on the general path; a subclass takes that path.
import types
torch = types.ModuleType("torch")
class Tensor:
    def __init__(self, addr, device=0, contiguous=True, cuda=True):
        self.addr, self.device_index = addr, device
        self.contiguous, self.is_cuda = contiguous, cuda
    def data_ptr(self):
        return self.addr
    def get_device(self):
        return self.device_index if self.is_cuda else -1
    def is_contiguous(self):
        return self.contiguous
Tensor.__module__ = "torch"
class DType:
    def __init__(self, name="float32"):
        self.name = name
    def __str__(self):
        return "torch." + self.name
    def __eq__(self, other):
        return isinstance(other, DType) and other.name == self.name
    def __hash__(self):
        return hash(self.name)
Tensor.dtype = DType()
torch.Tensor = Tensor
current_raw = [0]  # PyTorch's current stream: the legacy default one
torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda device: current_raw[0])
sys.modules["torch"] = torch
ts = [Tensor(0x7200000 + i * 0x10000) for i in range(3)]
gpu_b[(2,)](*ts, n)
l = mock.kiln_mock_last_launch().contents
assert list(l.params[:4]) == [0x7200000, 0x7210000, 0x7220000, n], list(l.params[:4])
before = l.count
for bad, what, exc, bundle in (
        (Tensor(0x7200000, device=1), "argument 'x' is on CUDA device 1", ValueError, gpu_b),
        (Tensor(0x7200000, contiguous=False), "argument 'x' is a non-contiguous CUDA array",
         ValueError, gpu_b),
        (ts[0], "argument 'x' is a CUDA device array, and this kernel runs on the host",
         TypeError, host_b)):
    try:
        bundle[(1,)](bad, ts[1], ts[2], n)
        sys.exit(f"a torch tensor was accepted: {what}")
    except exc as e:
        assert what in str(e), e
assert mock.kiln_mock_last_launch().contents.count == before
# A tensor of another element type, or an argument too many, is refused
# (they were launched: garbage, or the extra argument dropped).
wrong = Tensor(0x7200000)
wrong.dtype = DType("float64")
for call, what in ((lambda: gpu_b[(1,)](wrong, ts[1], ts[2], n),
                    "argument 'x' of kernel 'vector_add' points to f32 elements, got an "
                    "array of torch.float64"),
                   (lambda: gpu_b[(1,)](*ts, n, 5), "takes 4 arguments, got 5")):
    try:
        call()
        sys.exit(f"accepted: {what}")
    except TypeError as e:
        assert what in str(e), e
assert mock.kiln_mock_last_launch().contents.count == before
# A CPU tensor is not a CUDA array: a GPU bundle refuses it (the general path
# finds no device address and no numpy array).
try:
    gpu_b[(1,)](Tensor(0x7200000, cuda=False), ts[1], ts[2], n)
    sys.exit("a CPU tensor was accepted by a GPU bundle")
except TypeError as e:
    assert "argument 'x' is a host array" in str(e), e
# @kiln.jit takes the same tensors by the same fast path (dtype from
# torch.dtype), positional or by name, and queues with wait=False.
Tensor.shape = (n,)
add[(3,)](*ts, n, BLOCK=256)
l = mock.kiln_mock_last_launch().contents
assert list(l.params[:4]) == [0x7200000, 0x7210000, 0x7220000, n], list(l.params[:4])
assert tuple(l.grid) == (3, 1, 1)
add[(5,)](ts[0], ts[1], out=ts[2], n=n, BLOCK=256, wait=False)
assert tuple(mock.kiln_mock_last_launch().contents.grid) == (5, 1, 1)
add.synchronize()
for bad, what, exc in ((Tensor(0x7200000, device=1), "on CUDA device 1", ValueError),
                       (Tensor(0x7200000, contiguous=False), "non-contiguous", ValueError)):
    try:
        add[(1,)](bad, ts[1], ts[2], n, BLOCK=256)
        sys.exit(f"@kiln.jit accepted a tensor: {what}")
    except exc as e:
        assert what in str(e), e
try:
    add[(1,)](*ts, n, BLOCK=256, wait="no")
    sys.exit("wait='no' was accepted")
except ValueError as e:
    assert "wait must be True or False" in str(e), e
try:
    add[(1,)](*ts, n, BLOCK=256, nope=1)
    sys.exit("an unknown keyword was accepted")
except TypeError as e:
    assert "nope" in str(e), e
# stream=: the caller's CUDA stream (made by the driver in the primary
# context, as PyTorch's are): a handle, a torch.cuda.Stream-like object
# (.cuda_stream) or CUDA Python's __cuda_stream__ protocol. The kernel is
# queued there (wait=False: nothing waited for; wait=True: that stream is).
ctx, prev, handle = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
assert mock.cuCtxGetCurrent(ctypes.byref(prev)) == 0
assert mock.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert mock.cuCtxSetCurrent(ctx) == 0 and mock.cuStreamCreate(ctypes.byref(handle), 0) == 0
assert mock.cuCtxSetCurrent(prev) == 0
class TorchLikeStream:
    cuda_stream = handle.value
class ProtocolStream:
    def __cuda_stream__(self):
        return (0, handle.value)
class Counters(ctypes.Structure):
    _fields_ = [("ints", ctypes.c_int * 8)]  # module_loads .. stream_syncs
mock.kiln_mock_get_counters.restype = ctypes.POINTER(Counters)
syncs = lambda: mock.kiln_mock_get_counters().contents.ints[7]
class AttributeProtocolStream:
    __cuda_stream__ = (0, handle.value)
for stream in (handle.value, np.int64(handle.value), TorchLikeStream(), ProtocolStream(),
               AttributeProtocolStream()):
    before = syncs()
    add[(2,)](*ts, n, BLOCK=256, stream=stream)
    assert mock.kiln_mock_last_launch().contents.stream == handle.value
    gpu_b[(2,)](*ts, n, stream=stream)
    l = mock.kiln_mock_last_launch().contents
    assert l.stream == handle.value and tuple(l.grid) == (2, 1, 1)
    assert syncs() == before, "a launch on the caller's stream waited"
    gpu_b[(2,)](*ts, n, stream=stream, wait=True)
    add[(2,)](*ts, n, BLOCK=256, stream=stream, wait=True)
    assert syncs() == before + 2, "wait=True did not wait for the caller's stream"
# @kiln.jit on PyTorch tensors without stream=: Triton's way, on PyTorch's
# current stream, nothing waited for; wait=True: that stream waited for.
current_raw[0] = handle.value
before = syncs()
add[(3,)](*ts, n, BLOCK=256)
assert mock.kiln_mock_last_launch().contents.stream == handle.value and syncs() == before
add[(3,)](*ts, n, BLOCK=256, wait=True)
l = mock.kiln_mock_last_launch().contents
assert l.stream == handle.value and syncs() == before + 1
current_raw[0] = 0
# stream=None: as without it (a bundle, or @kiln.jit on CUDA arrays that are
# not PyTorch tensors: the runtime's stream, waited for).
before = syncs()
gpu_b[(2,)](*ts, n, stream=None)
add[(2,)](*xs, n, BLOCK=256, stream=None)
l = mock.kiln_mock_last_launch().contents
assert l.stream and l.stream != handle.value and syncs() == before + 2
# A torch.cuda.Stream of another device than the runtime's: refused.
class OtherDeviceStream:
    cuda_stream = handle.value
    device = types.SimpleNamespace(index=1)
add[(2,)](*ts, n, BLOCK=256, stream=0, wait=False)
assert not mock.kiln_mock_last_launch().contents.stream  # the legacy default stream
for stream, exc, what in (("s", TypeError, "stream must be a CUDA stream"),
                          (-1, ValueError, "CUstream handle (>= 0)"),
                          (2**64, ValueError, "CUstream handle (>= 0)"),
                          (True, TypeError, "stream must be a CUDA stream"),
                          (OtherDeviceStream(), ValueError, "argument 'stream' is on CUDA "
                                                            "device 1")):
    for call in (lambda: add[(1,)](*ts, n, BLOCK=256, stream=stream),
                 lambda: gpu_b[(1,)](*ts, n, stream=stream)):
        try:
            call()
            sys.exit(f"stream={stream!r} was accepted")
        except exc as e:
            assert what in str(e), e
print("ok")
'''


def test_python_launch_on_cuda_arrays_with_mock_driver(tmp_path):
    """@kiln.jit on __cuda_array_interface__ arguments: the GPU target comes from
    the device's compute capability, the kernel compiles to a PTX bundle and
    launches through the runtime's CUDA driver layer (a mock driver here, which
    records the launch: grid, block, shared memory and the parameter values
    sized by the PTX entry's declarations)."""
    mock = os.path.join(ROOT, "build", "lib", "libkiln-mock-cuda.so")
    if not os.path.exists(mock):
        pytest.fail(f"mock CUDA driver not built: {mock}")
    env = dict(os.environ, KILN_CUDA_DRIVER=mock, KILN_MOCK_CUDA_CC="80",
               KILN_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("KILN_GPU_TARGET", None)
    for name, target in (("KILN_TEST_GPU_BUNDLE", "sm_80"), ("KILN_TEST_HOST_BUNDLE", "host")):
        env[name] = str(tmp_path / f"vector_add-{target}.kiln")
        subprocess.run([KILNC, os.path.join(ROOT, "examples", "vector_add.mlir"),
                        "--target", target, "-o", env[name]], check=True)
    script = tmp_path / "launch.py"
    script.write_text(LAUNCH_SCRIPT.replace("#MOCK_LAUNCH\n", MOCK_LAUNCH))
    r = subprocess.run([os.sys.executable, str(script)], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


def test_ir_of_a_gpu_specialization_shows_its_launch_options():
    """kernel.ir("asm") of a GPU specialization is the PTX as launched: with
    its num_warps (.maxntid) and num_stages (cp.async.wait_group depth)."""
    import re
    import sys
    import numpy as np
    from kiln.jit import CompiledKernel
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from test_launch import row_sums
    x = np.zeros((2, 300), np.float32)
    row_sums[(2,)](x, np.zeros(2, np.float32), 2, 300, BLOCK=64)
    host = row_sums.last
    ck = CompiledKernel(host.name, host.kiln_ir, host.filename, None, "sm_80", 8, 3)
    ptx = ck.ir("asm")
    assert ".maxntid 256, 1, 1" in ptx
    assert re.search(r"cp\.async\.wait_group\s+1;", ptx)  # S - 2 newer groups


def test_device_chip_choice():
    # @kiln.jit's target for a CUDA device of compute capability (major, minor).
    from kiln import _kiln
    from kiln.jit import chip_for
    known = _kiln.gpu_chips()
    assert known == ALL_CHIPS
    assert chip_for(9, 0, known) == "sm_90a"
    assert chip_for(8, 6, known) == "sm_86"
    assert chip_for(8, 8, known) == "sm_87"    # newest known 8.x below 8.8
    assert chip_for(10, 3, known) == "sm_100"  # sm_100 code runs on 10.3
    assert chip_for(12, 1, known) == "sm_120"
    assert chip_for(7, 5, known) == "sm_75"    # unknown: the compiler says so
    assert chip_for(11, 0, known) == "sm_110"


# A stand-in for the parts of PyTorch kiln.ops touches, for the scripts
# below: CUDA tensors are addresses the mock driver records (it never
# dereferences them), backed by numpy arrays for what PyTorch itself
# computes (moe_route, the errors count).
TORCH_STANDIN = r'''
import ctypes, os, struct, sys, types
import numpy as np

torch = types.ModuleType("torch")
class DType:
    def __init__(self, name, size):
        self.name, self.size = name, size
    def __repr__(self):
        return "torch." + self.name
for n, size in (("bfloat16", 2), ("float16", 2), ("float32", 4), ("int32", 4)):
    setattr(torch, n, DType(n, size))
class Device:
    def __init__(self, index):
        self.type, self.index = "cuda", index
    def __eq__(self, other):
        return isinstance(other, Device) and other.index == self.index
    def __repr__(self):
        return f"cuda:{self.index}"
_next = [0x10000000]
allocs = []
_NP = {"bfloat16": np.uint16, "float16": np.float16, "float32": np.float32,
       "int32": np.int32, "int64": np.int64, "bool": np.bool_}
class Tensor:
    items = 0  # .item() calls: each waits for the device
    def __init__(self, shape, dtype, device=None, contiguous=True, host=None, data=None,
                 addr=None):
        self.shape, self.dtype = tuple(shape), dtype
        self.device = device
        self.is_cuda = device is not None
        self._contiguous = contiguous
        self.host = host
        self.data = (np.asarray(data, _NP[dtype.name]).reshape(self.shape) if data is not None
                     else np.zeros(self.shape, _NP[dtype.name]))
        n = int(np.prod(self.shape)) * dtype.size
        if addr is None:
            addr = _next[0]
            _next[0] += (n + 255) // 256 * 256 + 256
            if self.is_cuda:
                allocs.append(self)
        self.addr = addr
    def _new(self, data, view=False):
        same = data.dtype == _NP[self.dtype.name]  # (bfloat16 keeps its type)
        return Tensor(data.shape, self.dtype if same else _DTYPES[data.dtype], self.device,
                      data=data, addr=self.addr if view else None)
    def dim(self):
        return len(self.shape)
    def data_ptr(self):
        return self.addr
    def get_device(self):
        return self.device.index if self.is_cuda else -1
    def is_contiguous(self):
        return self._contiguous
    def contiguous(self):
        return self if self._contiguous else Tensor(self.shape, self.dtype, self.device,
                                                    data=self.data)
    def to(self, device=None, dtype=None):
        if isinstance(device, DType):  # t.to(torch.int32)
            device, dtype = None, device
        if (device is None or device == self.device) and (dtype is None or dtype is self.dtype):
            return self
        dtype = dtype or self.dtype
        return Tensor(self.shape, dtype, device or self.device, host=self.host,
                      data=self.data.astype(_NP[dtype.name]))
    def numel(self):
        return int(np.prod(self.shape))
    def reshape(self, *shape):
        return self._new(self.data.reshape(*shape), view=True)
    view = reshape
    def __getitem__(self, key):
        if isinstance(key, Tensor):
            return self._new(self.data[key.data])
        return self._new(self.data[key], view=True)
    def __setitem__(self, key, value):
        self.data[key.data if isinstance(key, Tensor) else key] = (
            value.data if isinstance(value, Tensor) else value)
    def add_(self, other):
        self.data += other.data if isinstance(other, Tensor) else other
        return self
    def sum(self):
        return self._new(np.array(self.data.sum()))
    def max(self):
        return self._new(np.array(self.data.max()))
    def item(self):
        Tensor.items += 1
        return self.data.item()
    def __lt__(self, o):
        return self._new(self.data < o)
    def __ge__(self, o):
        return self._new(self.data >= o)
    def __gt__(self, o):
        return self._new(self.data > o)
    def __or__(self, o):
        return self._new(self.data | o.data)
    def __floordiv__(self, o):
        return self._new(self.data // o)
Tensor.__module__ = "torch"
torch.Tensor = Tensor
for n, size in (("int64", 8), ("bool", 1)):
    setattr(torch, n, DType(n, size))
_DTYPES = {np.dtype(v): getattr(torch, k) for k, v in _NP.items() if k != "bfloat16"}
def empty(shape, device=None, dtype=None):
    return Tensor((shape,) if isinstance(shape, int) else shape, dtype, device)
torch.empty = empty
preset = [0]  # the next zeros(1, int32): what a kernel would have counted in it
def zeros(shape, device=None, dtype=None):
    t = empty(shape, device, dtype)
    if dtype is torch.int32 and t.shape == (1,):
        t.data[0], preset[0] = preset[0], 0
    return t
torch.zeros = zeros
def full(shape, value, device=None, dtype=None):
    t = empty(shape, device, dtype)
    t.data[...] = value
    return t
torch.full = full
def from_numpy(a):
    return Tensor(a.shape, _DTYPES[a.dtype], None, host=a, data=a)
torch.from_numpy = from_numpy
torch.argsort = lambda t, stable=False: t._new(np.argsort(t.data, kind="stable"))
torch.searchsorted = lambda a, v: a._new(np.searchsorted(a.data, v.data))
torch.arange = lambda n, device=None, dtype=None: Tensor((n,), dtype, device, data=np.arange(n))
torch.where = lambda c, x, y: y._new(np.where(c.data, x, y.data).astype(y.data.dtype))
class Stream:
    synced = 0
    def __init__(self, handle):
        self.cuda_stream = handle
    def __eq__(self, other):
        return other is self
    def synchronize(self):
        Stream.synced += 1
default, side = Stream(0), Stream(None)  # side's handle: from the driver, below
current = [default]
capturing = [False]
cuda = types.SimpleNamespace(current_stream=lambda d=None: current[0],
                             default_stream=lambda d=None: default,
                             is_current_stream_capturing=lambda: capturing[0])
torch.cuda = cuda
sys.modules["torch"] = torch

import kiln
#MOCK_LAUNCH
# The side stream: one the (mock) driver made, as PyTorch's are, in the
# primary context.
ctx, handle = ctypes.c_void_p(), ctypes.c_void_p()
assert mock.cuInit(0) == 0 and mock.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert mock.cuCtxSetCurrent(ctx) == 0 and mock.cuStreamCreate(ctypes.byref(handle), 0) == 0
side.cuda_stream = handle.value
'''

TORCH_OPS_SCRIPT = TORCH_STANDIN + r'''
dev = Device(0)
B, Hq, Hkv, S, D = 1, 4, 2, 200, 64
q = Tensor((B, Hq, S, D), torch.bfloat16, dev)
k = Tensor((B, Hkv, S, D), torch.bfloat16, dev)
v = Tensor((B, Hkv, S, D), torch.bfloat16, dev, contiguous=False)
causal = lambda b, h, qi, ki: ki <= qi
mask = kiln.ops.block_mask(causal, B, Hq, S, S)
before = list(allocs)
out, lse = kiln.ops.block_sparse_attention(q, k, v, mask, "causal", out_dtype="bf16")
assert isinstance(out, Tensor) and out.dtype is torch.bfloat16 and out.shape == (B, Hq, S, D)
assert lse.dtype is torch.float32 and lse.shape == (B, Hq, S) and out.device == dev
new = [t for t in allocs if t not in before]
vcopy = [t for t in new if t.shape == v.shape][0]   # v was not contiguous: copied
masks = [t for t in new if t.host is not None]
assert [t.host.shape for t in masks] == [mask[n].shape for n in
                                         ("kv_num", "kv_idx", "full_num", "full_idx")]
l = mock.kiln_mock_last_launch().contents
assert l.function == b"block_sparse_attention", l.function
assert tuple(l.grid) == (mask["nqb"], B * Hq, 1), tuple(l.grid)
p = list(l.params[:l.num_params])
assert p[:5] == [q.addr, k.addr, vcopy.addr, out.addr, lse.addr], p[:5]
assert p[5:9] == [t.addr for t in masks], (p[5:9], [t.addr for t in masks])
assert p[10:16] == [B, Hq, S, S, mask["nqb"], mask["maxb"]], p[10:16]
assert struct.unpack("<f", struct.pack("<I", p[16] & 0xffffffff))[0] == np.float32(1 / 8)
# sm_90a: the key and value (and output, lse) maps, encoded by the driver
# (the mock's first word: the address): all usable, k's and v's first.
maps = p[18:]
assert p[17] == (1 << len(maps)) - 1, (p[17], len(maps))
assert maps[:2] == [k.addr, vcopy.addr], maps
assert Stream.synced == 0
assert tuple(l.block) == (128, 1, 1)  # block 64: the default 4 warps
# profile=True: the stamps tensor (int64 [programs, 5], -1 until the kernel
# writes it) is the last argument before the maps.
_, _, stamps = kiln.ops.block_sparse_attention(q, k, v, mask, "causal", out_dtype="bf16",
                                               profile=True)
assert stamps.is_cuda and stamps.device == dev and stamps.dtype is torch.int64
assert stamps.shape == (mask["nqb"] * B * Hq, 6) and (stamps.data == -1).all()
l = mock.kiln_mock_last_launch().contents
p = list(l.params[:l.num_params])
assert p[17] == stamps.addr and p[18] == (1 << len(p[19:])) - 1, p[16:]
# Block 128 on sm_90a: 8 warps (two warpgroups).
kiln.ops.block_sparse_attention(q, k, v, kiln.ops.block_mask(causal, B, Hq, S, S, block=128),
                                "causal")
assert tuple(mock.kiln_mock_last_launch().contents.block) == (256, 1, 1)
# On PyTorch's current stream (the legacy default one above, handle 0):
# under another stream the kernel is queued there, nothing waited for.
assert not mock.kiln_mock_last_launch().contents.stream
current[0] = side
kiln.ops.block_sparse_attention(q, k, v, mask, "causal")
assert mock.kiln_mock_last_launch().contents.stream == side.cuda_stream
assert Stream.synced == 0
current[0] = default
# Tensor maps built on the device (KILN_TMA_MAPS=device) live in scratch
# memory, the runtime stream's: such a kernel is queued there (ordered with
# the legacy default stream); under a side stream that stream is waited for
# and the launch too; under a capture it is refused.
os.environ["KILN_TMA_MAPS"] = "device"
kiln.ops.block_sparse_attention(q, k, v, mask, "causal")
l = mock.kiln_mock_last_launch().contents
assert l.stream and l.stream != side.cuda_stream and Stream.synced == 0
current[0] = side
kiln.ops.block_sparse_attention(q, k, v, mask, "causal")
assert Stream.synced == 1
capturing[0] = True
count = mock.kiln_mock_last_launch().contents.count
try:
    kiln.ops.block_sparse_attention(q, k, v, mask, "causal")
    sys.exit("a scratch kernel was launched under a capture")
except RuntimeError as e:
    assert "cannot be captured into a CUDA graph" in str(e), e
assert mock.kiln_mock_last_launch().contents.count == count
capturing[0], current[0], Stream.synced = False, default, 0
del os.environ["KILN_TMA_MAPS"]
# A block mask built for the device: checked and copied once; the call
# copies nothing from the host and launches with its tensors.
# On sm_90a its block defaults to 128 (flex_attention's; the faster shape
# on an H200), so the kernel runs at 8 warps.
dmask = kiln.ops.block_mask(causal, B, Hq, S, S, device=dev)
assert dmask["block"] == 128 and dmask["block_kv"] == 128
names = ("kv_num", "kv_idx", "full_num", "full_idx")
assert all(dmask[n].is_cuda and dmask[n].dtype is torch.int32 for n in names)
mask128 = kiln.ops.block_mask(causal, B, Hq, S, S, block=128)
assert all(np.array_equal(dmask[n].data, mask128[n]) for n in names)
assert kiln.ops.block_mask(causal, B, Hq, S, S, block=64, device=dev)["block"] == 64
before = list(allocs)
kiln.ops.block_sparse_attention(q, k, v, dmask, "causal")
assert not [t for t in allocs if t not in before and t.host is not None]
p = list(mock.kiln_mock_last_launch().contents.params[:9])
assert p[5:9] == [dmask[n].addr for n in names], p
assert tuple(mock.kiln_mock_last_launch().contents.block) == (256, 1, 1)
count = mock.kiln_mock_last_launch().contents.count
q2 = Tensor((B, Hq, 150, D), torch.bfloat16, dev)
for args, exc, what in (
        ((q, k, v, dict(mask, kv_idx=dmask["kv_idx"], kv_num=dmask["kv_num"])), ValueError,
         "must come from block_mask(..., device=...)"),
        ((q2, k, v, dmask), ValueError, "built for another shape (batch 1, heads 4, seq_q 200"),
        ((q, k, v, kiln.ops.block_mask(causal, B, Hq, S, S, device=Device(1))), ValueError,
         "the block mask is on cuda:1, q on cuda:0"),
        ((np.zeros((B, Hq, S, D), np.float32),) * 3 + (dmask,), TypeError,
         "argument 'mask' is a CUDA device array")):
    try:
        kiln.ops.block_sparse_attention(*args, "causal")
        sys.exit(f"accepted: {what}")
    except exc as e:
        assert what in str(e), e
assert mock.kiln_mock_last_launch().contents.count == count
# k on the host, mixed dtypes, a bad out_dtype: refused before launching.
count = mock.kiln_mock_last_launch().contents.count
for args, kw, exc, what in (
        ((q, np.zeros((B, Hkv, S, D), np.float32), v, mask), {}, TypeError,
         "'k' must be one on the same device"),
        ((q, Tensor(k.shape, torch.float16, dev), v, mask), {}, TypeError,
         "must all be bfloat16, float16 or float32"),
        ((q, k, v, mask), {"out_dtype": "f64"}, ValueError, "out_dtype must be one of")):
    try:
        kiln.ops.block_sparse_attention(*args, **kw)
        sys.exit(f"accepted: {what}")
    except exc as e:
        assert what in str(e), e
assert mock.kiln_mock_last_launch().contents.count == count

# The convolutions: NHWC conv2d (an NTHWC conv with T = 1, no copy),
# patch embedding (patch rows as wide pixels), depthwise; float32 outputs
# allocated on the device.
def launched(fn):
    l = mock.kiln_mock_last_launch().contents
    assert l.function == fn, l.function
    return list(l.params[:l.num_params]), tuple(l.grid)
x = Tensor((2, 10, 12, 8), torch.float32, dev)
w = Tensor((3, 3, 8, 16), torch.float32, dev)
out = kiln.ops.conv2d(x, w)
assert out.shape == (2, 8, 10, 16) and out.dtype is torch.float32 and out.device == dev
p, _ = launched(b"conv")
assert p[0] == x.addr and p[1] == w.addr and p[3] == out.addr, p[:4]
assert p[4:13] == [2, 1, 10, 12, 8, 16, 1, 8, 10], p[4:13]
x = Tensor((1, 2, 32, 32, 3), torch.float16, dev)
w = Tensor((2, 16, 16, 3, 24), torch.float16, dev)
bias = np.arange(24, dtype=np.float32)
out = kiln.ops.patch_embed(x, w, bias, patch=16, temporal_patch=2)
assert out.shape == (1, 1, 2, 2, 24), out.shape
p, _ = launched(b"conv")
copied = [t for t in allocs if t.host is bias][0]
assert p[:4] == [x.addr, w.addr, copied.addr, out.addr], p[:4]
assert p[4:13] == [1, 2, 32, 2, 48, 24, 1, 2, 2], p[4:13]
x = Tensor((1, 9, 9, 4), torch.float32, dev)
w = Tensor((3, 3, 4), torch.float32, dev)
out = kiln.ops.depthwise_conv2d(x, w)
assert out.shape == (1, 7, 7, 4)
p, grid = launched(b"depthwise_conv2d")
assert p[0] == x.addr and p[1] == w.addr and p[3] == out.addr
assert p[4:10] == [1, 9, 9, 4, 7, 7] and grid == (7, 1, 1), (p[4:10], grid)
count = mock.kiln_mock_last_launch().contents.count
for call, exc, what in (
        (lambda: kiln.ops.conv2d(Tensor((2, 10, 12, 8), torch.float32, dev),
                                 np.zeros((3, 3, 8, 16), np.float32)), TypeError,
         "conv2d: 'w' must be a PyTorch CUDA tensor"),
        (lambda: kiln.ops.conv2d(Tensor((2, 10, 12, 8), torch.float32, dev),
                                 Tensor((3, 3, 8, 16), torch.float16, dev)), TypeError,
         "must all be bfloat16, float16 or float32"),
        (lambda: kiln.ops.conv2d(Tensor((2, 10, 12, 8), torch.float32, dev),
                                 Tensor((3, 3, 8, 16), torch.float32, dev), np.zeros(5)),
         ValueError, "bias has shape (5,), expected (16,)"),
        (lambda: kiln.ops.depthwise_conv2d(Tensor((1, 9, 9, 4), torch.float32, dev),
                                           Tensor((3, 3, 4), torch.float32, Device(1))),
         TypeError, "'w' must be a PyTorch CUDA tensor on cuda:0"),
        (lambda: kiln.ops.embedding(np.zeros((10, 4), np.float32),
                                    Tensor((1,), torch.int32, dev)),
         TypeError, "kiln.ops.embedding: argument 'ids' is a CUDA device array, and 'weight' "
                    "is a host array")):
    try:
        call()
        sys.exit(f"accepted: {what}")
    except exc as e:
        assert what in str(e), e
assert mock.kiln_mock_last_launch().contents.count == count
# Empty inputs: empty outputs on the device, nothing launched.
out, lse = kiln.ops.block_sparse_attention(
    *(Tensor((0, Hq, S, D), torch.bfloat16, dev),) * 3,
    kiln.ops.block_mask(causal, 0, Hq, S, S), "causal")
assert out.shape == (0, Hq, S, D) and lse.shape == (0, Hq, S) and out.device == dev
assert kiln.ops.conv2d(Tensor((0, 10, 12, 8), torch.float32, dev),
                       Tensor((3, 3, 8, 16), torch.float32, dev)).shape == (0, 8, 10, 16)
assert kiln.ops.depthwise_conv2d(Tensor((2, 9, 9, 0), torch.float32, dev),
                                 Tensor((3, 3, 0), torch.float32, dev)).shape == (2, 7, 7, 0)
assert mock.kiln_mock_last_launch().contents.count == count
print("ok")
'''


TORCH_GATHERS_SCRIPT = TORCH_STANDIN + r'''
dev = Device(0)
def launched(fn):
    l = mock.kiln_mock_last_launch().contents
    assert l.function == fn, l.function
    return list(l.params[:l.num_params]), tuple(l.grid)
def fresh(before, **match):
    return [t for t in allocs if t not in before and
            all(getattr(t, k) == v for k, v in match.items())]
def refused(call, exc, what):
    count = mock.kiln_mock_last_launch().contents.count
    try:
        call()
        sys.exit(f"accepted: {what}")
    except exc as e:
        assert what in str(e), e
    assert mock.kiln_mock_last_launch().contents.count == count, what

# embedding: bf16 rows, int64 ids (converted to int32 on the device), the
# output allocated by PyTorch in the weight's type; the errors word read
# once (the wait), an IndexError when it counts bad ids.
weight = Tensor((500, 70), torch.bfloat16, dev)
ids = Tensor((3, 11), torch.int64, dev, data=np.arange(33) * 7)
ids.data[1, 2] = 2**32 + 5  # not wrapped to 5: -2, counted by the kernel
before, items = list(allocs), Tensor.items
out = kiln.ops.embedding(weight, ids)
assert out.shape == (3, 11, 70) and out.dtype is torch.bfloat16 and out.device == dev
(ids32,) = fresh(before, dtype=torch.int32, shape=(3, 11))
assert ids32.data[1, 2] == -2 and ids32.data[1, 3] == 14 * 7, ids32.data
(word,) = fresh(before, dtype=torch.int32, shape=(1,))
p, grid = launched(b"embedding")
assert p == [weight.addr, ids32.addr, out.addr, word.addr, 33, 500, 70], p
assert grid == (5, 1, 1) and Tensor.items == items + 1, (grid, Tensor.items)
preset[0] = 3
try:
    kiln.ops.embedding(weight, ids)
    sys.exit("a count of bad ids was not raised")
except IndexError as e:
    assert "embedding: 3 id(s) outside [0, 500)" in str(e) and e.partial.shape == (3, 11, 70), e
# With the caller's errors: counted there, nothing waited for.
errors = Tensor((4,), torch.int32, dev)
items = Tensor.items
kiln.ops.embedding(weight, ids, errors=errors)
p, _ = launched(b"embedding")
assert p[3] == errors.addr and Tensor.items == items
for bad, what in ((Tensor((1,), torch.int64, dev), "int64"),
                  (Tensor((1,), torch.int32, Device(1)), "device 1"),
                  (np.zeros(1, np.int32), "host array")):
    refused(lambda: kiln.ops.embedding(weight, ids, errors=bad), TypeError,
            "errors must be a contiguous int32 PyTorch CUDA tensor on cuda:0")

# paged_kv_gather: f16 pages; a host block table (copied); max_len from the
# device's seq_lens (read back: a wait).
cache = Tensor((6, 16, 2, 8), torch.float16, dev)
table = np.array([[0, 5, 3], [2, 4, 1]], np.int32)
lens = Tensor((2,), torch.int32, dev, data=[40, 20])
before = list(allocs)
out = kiln.ops.paged_kv_gather(cache, table, lens)
assert out.shape == (2, 40, 2, 8) and out.dtype is torch.float16, out.shape
(tcopy,) = [t for t in fresh(before) if t.host is table]
(word,) = fresh(before, dtype=torch.int32, shape=(1,))
p, grid = launched(b"paged_kv_gather")
assert p == [cache.addr, tcopy.addr, lens.addr, out.addr, word.addr, 2, 3, 6, 40, 16], p
assert grid == (5, 1, 2), grid
refused(lambda: kiln.ops.paged_kv_gather(cache, table, Tensor((3,), torch.int32, dev)),
        ValueError, "seq_lens has shape (3,), expected (2,)")

# moe_route on the device (PyTorch's sort and search): the same grouping as
# the host's; bad expert ids raise, or are counted.
rng = np.random.default_rng(5)
topk = rng.integers(0, 5, (37, 2))
want = kiln.ops.moe_route(topk, 5)
got = kiln.ops.moe_route(Tensor((37, 2), torch.int64, dev, data=topk), 5)
for g, w in zip(got, want):
    assert g.is_cuda and g.dtype is torch.int32 and np.array_equal(g.data, w), (g.data, w)
topk[4, 1] = 7
try:
    kiln.ops.moe_route(Tensor((37, 2), torch.int64, dev, data=topk), 5)
    sys.exit("a bad expert id was not raised")
except IndexError as e:
    assert "moe_route: 1 expert id(s) outside [0, 5)" in str(e), e
errors = Tensor((1,), torch.int32, dev, data=[2])
items = Tensor.items
kiln.ops.moe_route(Tensor((37, 2), torch.int64, dev, data=topk), 5, errors=errors)
assert errors.data.tolist() == [3] and Tensor.items == items
src, slots, offsets = got

# moe_permute / moe_unpermute: the route's CUDA tensors go in as they are;
# host weights are copied; f16 weights are converted to float32.
x = Tensor((37, 50), torch.float32, dev)
before = list(allocs)
y = kiln.ops.moe_permute(x, src)
(word,) = fresh(before, dtype=torch.int32, shape=(1,))
p, grid = launched(b"moe_permute")
assert p == [x.addr, src.addr, y.addr, word.addr, 74, 37, 50] and grid == (10, 1, 1), (p, grid)
yb = Tensor((74, 50), torch.bfloat16, dev)
for weights in (np.ones((37, 2), np.float32), Tensor((37, 2), torch.float16, dev)):
    before = list(allocs)
    out = kiln.ops.moe_unpermute(yb, slots, weights)
    assert out.shape == (37, 50) and out.dtype is torch.bfloat16
    (wcopy,) = fresh(before, dtype=torch.float32, shape=(37, 2))
    (word,) = fresh(before, dtype=torch.int32, shape=(1,))
    p, grid = launched(b"moe_unpermute")
    assert p == [yb.addr, slots.addr, wcopy.addr, out.addr, word.addr, 37, 2, 74, 50], p
    assert grid == (3, 1, 1), grid

# DSA: the indexer and top-k in float32 (a bf16 key tensor converted), the
# sparse attention on bf16 q and kv with torch.topk-style int64 indices.
q = Tensor((20, 4, 32), torch.float32, dev)
w = Tensor((20, 4), torch.float32, dev)
k = Tensor((90, 32), torch.bfloat16, dev)
before = list(allocs)
scores = kiln.ops.dsa_indexer(q, w, k, q_offset=60)
(kf,) = fresh(before, dtype=torch.float32, shape=(90, 32))
p, grid = launched(b"dsa_indexer")
assert scores.shape == (20, 90) and scores.dtype is torch.float32
assert p == [q.addr, w.addr, kf.addr, scores.addr, 20, 90, 60] and grid == (2, 2, 1), (p, grid)
top = kiln.ops.dsa_topk(scores, 70)
p, grid = launched(b"dsa_topk")
assert top.shape == (20, 70) and top.dtype is torch.int32
assert p == [scores.addr, top.addr, 20, 90] and grid == (20, 1, 1), (p, grid)
qq = Tensor((3, 16, 64), torch.bfloat16, dev)
kv = Tensor((90, 64), torch.bfloat16, dev)
idx = Tensor((3, 70), torch.int64, dev)
before = list(allocs)
out, lse = kiln.ops.dsa_sparse_attention(qq, kv, idx, 48)
(idx32,) = fresh(before, dtype=torch.int32, shape=(3, 70))
(word,) = fresh(before, dtype=torch.int32, shape=(1,))
assert out.shape == (3, 16, 48) and lse.shape == (3, 16) and out.dtype is torch.float32
p, grid = launched(b"dsa_sparse_attention")
assert p[:10] == [qq.addr, kv.addr, idx32.addr, out.addr, lse.addr, word.addr, 3, 16, 90, 70], p
assert struct.unpack("<f", struct.pack("<I", p[10] & 0xffffffff))[0] == np.float32(1 / 8)
assert grid == (3, 1, 1), grid
preset[0] = 2  # (the kernel ran; its count raises)
try:
    kiln.ops.dsa_sparse_attention(qq, kv, idx, 48)
    sys.exit("a count of bad indices was not raised")
except IndexError as e:
    assert "dsa_sparse_attention: 2 index(es) outside [-1, 90)" in str(e), e
for call, exc, what in (
        (lambda: kiln.ops.dsa_sparse_attention(np.zeros((3, 16, 64), np.float32), kv, idx, 48),
         TypeError, "argument 'kv' is a CUDA device array, and 'q' is a host array"),
        (lambda: kiln.ops.dsa_sparse_attention(qq, np.zeros((90, 64), np.float32), idx, 48),
         TypeError, "'kv' must be a PyTorch CUDA tensor on cuda:0"),
        (lambda: kiln.ops.dsa_sparse_attention(qq, kv, Tensor((3, 70), torch.int64, Device(1)),
                                               48),
         TypeError, "'indices' is on cuda:1, the data on cuda:0"),
        (lambda: kiln.ops.dsa_sparse_attention(qq, kv, Tensor((4, 70), torch.int32, dev), 48),
         ValueError, "indices [Sq, topk] expected")):
    refused(call, exc, what)
print("ok")
'''


def _run_torch_script(tmp_path, script_text):
    mock = os.path.join(ROOT, "build", "lib", "libkiln-mock-cuda.so")
    if not os.path.exists(mock):
        pytest.fail(f"mock CUDA driver not built: {mock}")
    env = dict(os.environ, KILN_CUDA_DRIVER=mock, KILN_MOCK_CUDA_CC="90",
               KILN_MOCK_CUDA_SHMEM="232448", KILN_CACHE_DIR=str(tmp_path / "cache"),
               KILN_TENSOR_MAP_ERRORS="1")
    for name in ("KILN_GPU_TARGET", "KILN_TARGET", "KILN_NUM_WARPS"):
        env.pop(name, None)
    script = tmp_path / "ops.py"
    script.write_text(script_text.replace("#MOCK_LAUNCH\n", MOCK_LAUNCH))
    r = subprocess.run([os.sys.executable, str(script)], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


TORCH_RUNTIME_ONLY_SCRIPT = TORCH_STANDIN.replace(
    "import kiln\n",
    "sys.modules['kiln._kiln'] = None  # a runtime-only install: no compiler\nimport kiln\n",
    1) + r'''
dev = Device(0)
try:
    import kiln.jit
    sys.exit("the compiler extension is still importable")
except ImportError:
    pass
import kiln.ops  # as test/gpu/check.py does (kiln.ops is not an attribute then)
calls = []
class Recorded:
    scratch_bytes = 0
    def launch(self, values, grid, wait=True, stream=None):
        calls.append((values, grid, wait, stream))
kiln.ops.set_kernel_provider(lambda name, mods, config: calls.append(name) or Recorded())
weight = Tensor((500, 70), torch.bfloat16, dev)
ids = Tensor((33,), torch.int32, dev, data=np.arange(33))
errors = Tensor((2,), torch.int32, dev)
out = kiln.ops.embedding(weight, ids, errors=errors)
assert out.shape == (33, 70) and out.dtype is torch.bfloat16, out.shape
args = calls[1][0]
assert calls[0] == "embedding" and args[0].addr == weight.addr and args[2].addr == out.addr, calls
assert calls[1][2] is False and len(calls) == 2, calls  # queued, no wait: errors given
print("ok")
'''


def test_kiln_ops_on_torch_tensors_without_the_compiler(tmp_path):
    """The device check runs kiln.ops on PyTorch tensors with the
    runtime-only module (no compiler extension) and a kernel provider that
    loads bundles compiled beforehand: the operators' PyTorch side imported
    the JIT module for the GPU target, which needs the extension, and every
    such case failed with ModuleNotFoundError there."""
    _run_torch_script(tmp_path, TORCH_RUNTIME_ONLY_SCRIPT)


def test_kiln_ops_gathers_and_dsa_on_torch_cuda_tensors(tmp_path):
    """The gathers, moe_route and the DSA operators on PyTorch CUDA tensors
    (the stand-in): compiled for sm_90a, launched with the tensors'
    addresses (index tensors of other integer types converted, host ones
    copied), outputs allocated by PyTorch in the data's type; the errors
    count read back (a wait) and raised, or left in the caller's tensor."""
    _run_torch_script(tmp_path, TORCH_GATHERS_SCRIPT)


def test_kiln_ops_attention_on_torch_cuda_tensors(tmp_path):
    """kiln.ops.block_sparse_attention on PyTorch CUDA tensors (a stand-in
    module here): compiled for the device's GPU (sm_90a on the mock driver's
    compute capability 9.0), launched with the tensors' addresses, outputs
    allocated by PyTorch, the host block mask copied to the device, the
    tensor maps encoded by the driver."""
    _run_torch_script(tmp_path, TORCH_OPS_SCRIPT)


def _emulate_lit_kernel(target, tmp_path, name, code, kernel=None):
    """Compiles test/Target/GPU/`name` (its `kernel`) for an emulated target
    and runs `code` in a subprocess (the emulator ends the process on a failed
    check) with `bundle` bound to the bundle's path; it must print "ok"."""
    src = os.path.join(ROOT, "test", "Target", "GPU", name)
    bundle = tmp_path / (name + ".kiln")
    subprocess.run([KILNC, src, "--target", target, "-o", str(bundle)]
                   + (["--kernel", kernel] if kernel else []), check=True)
    r = subprocess.run([sys.executable, "-c", f"bundle = {str(bundle)!r}\n" + code],
                       capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("target", ["emu-sm_80", "emu-sm_90a"])
def test_deferred_waits_leave_copies_in_flight_untouched(target, tmp_path):
    """test/Target/GPU/deferred-wait-chain.mlir on the emulator: a load whose
    wait moved past a reduction's barriers, reduced after the next load's
    wait. The emulator refuses any access to the bytes of a cp.async in
    flight (in a subprocess: it ends the process); the results are checked
    against numpy (every output poisoned first)."""
    _emulate_lit_kernel(target, tmp_path, "deferred-wait-chain.mlir", """
import numpy as np, kiln
kernel = kiln.load_bundle(bundle)
rng = np.random.default_rng()
n = 300
a, b, d = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
out, extra = np.full(n, np.nan, np.float32), np.full(n, np.nan, np.float32)
kernel[(1,)](a, b, d, out, extra, n)
lanes = np.arange(256, dtype=np.float64)
ref = a[:256].astype(np.float64) + 1 + b[:256] + d[:256] + lanes
assert np.allclose(out[:256], ref, rtol=1e-6, atol=1e-5), np.abs(out[:256] - ref).max()
assert np.array_equal(extra[256:272], lanes.reshape(16, 16).sum(1).astype(np.float32))
assert np.array_equal(extra[272:288], a[:256].reshape(16, 16).max(1))
print("ok")
""")


@pytest.mark.parametrize("target", ["emu-sm_80", "emu-sm_90a"])
def test_prologue_load_waits_before_a_store_to_its_source(target, tmp_path):
    """test/Target/GPU/deferred-wait-store.mlir on the emulator: x is loaded,
    zeros are stored to x, y is loaded, out = x + y. x's copies must have read
    x before the store (the emulator's copies read their source when their
    wait retires them): with x's wait moved past the store, out was y."""
    _emulate_lit_kernel(target, tmp_path, "deferred-wait-store.mlir", """
import numpy as np, kiln
kernel = kiln.load_bundle(bundle)
rng = np.random.default_rng()
n = 300
x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
x0 = x.copy()
out = np.full(n, np.nan, np.float32)
kernel[(1,)](x, y, out, n)
ref = x0[:256].astype(np.float64) + y[:256]
assert np.allclose(out[:256], ref, rtol=1e-6, atol=1e-6), np.abs(out[:256] - ref).max()
assert np.array_equal(x[:256], np.zeros(256, np.float32)) and np.array_equal(x[256:], x0[256:])
print("ok")
""")


@pytest.mark.parametrize("target", ["emu-sm_80", "emu-sm_90a"])
def test_row_vector_read_only_inside_an_if(target, tmp_path):
    """test/Target/GPU/deferred-index-tiles.mlir's @rows2 on the emulator: a
    comparison of a row vector in registers (the row maxima of a dot), read
    only inside an scf.if, keeps its buffer; the row maxima are stored after
    the if, taken and not taken. (Deferred into the if, the maxima were
    written to shared memory on the if's path only, and read stale after
    it.)"""
    _emulate_lit_kernel(target, tmp_path, "deferred-index-tiles.mlir", """
import numpy as np, kiln
kernel = kiln.load_bundle(bundle)
rng = np.random.default_rng()
def bf16(shape):
    bits = (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
(a, af), (b, bf) = bf16((64, 64)), bf16((64, 64))
x = rng.standard_normal((128, 64)).astype(np.float32)
m = (af @ bf).max(1)
for flag in (0, 1):
    out, out_m = np.full((64, 64), np.nan, np.float32), np.full(64, np.nan, np.float32)
    kernel[(1,)](a, b, x, out, out_m, flag)
    assert np.allclose(out_m, m, rtol=1e-5, atol=1e-5), (flag, np.abs(out_m - m).max())
    ref = np.where((m > 0)[:, None], x[:64], x[64:]) if flag else x[:64]
    near = np.abs(m) < 1e-3  # a maximum at 0 within rounding: either row
    assert np.array_equal(out[~near], ref[~near]), flag
print("ok")
""", kernel="rows2")


@pytest.mark.parametrize("target", ["emu-sm_80", "emu-sm_90a"])
def test_pipelined_gather_of_rows_from_an_iota_before_the_loop(target, tmp_path):
    """test/Target/GPU/deferred-index-tiles.mlir's @outer_ar on the emulator:
    the gathered rows' indices come from an iota made before the loop, which
    the loop recomputes (no buffer); the pipelined gather computes it at
    issue, in its fill and in the loop. Checked against numpy."""
    _emulate_lit_kernel(target, tmp_path, "deferred-index-tiles.mlir", """
import numpy as np, kiln
kernel = kiln.load_bundle(bundle)
rng = np.random.default_rng()
r, n = 90, 75
bits = (rng.standard_normal((r, 64)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
xf = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
out = np.full((16, 64), np.nan, np.float32)
kernel[(1,)](bits, out, r, n)
ref = np.zeros((16, 64))
for i0 in range(0, n, 16):
    for j in range(16):
        if 0 <= i0 - j < r:
            ref[j] += xf[i0 - j]
assert np.allclose(out, ref, rtol=1e-5, atol=1e-5), np.abs(out - ref).max()
print("ok")
""", kernel="outer_ar")


# The Python examples that port Triton's tutorials, through JITFunction.warmup
# (a GPU target compiles without a driver; host arrays stand for device
# arrays): their PTX assembles, on sm_90a with wgmma and TMA boxes for the
# loop's loads (maps encoded at launch: no tensormap.replace), on sm_80 with
# mma.sync and cp.async. A launch after a GPU warmup is still refused on host
# arrays.
@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("port", ["matmul", "attention"])
def test_triton_tutorial_ports_compile_for_gpu(port, chip, tmp_path, monkeypatch):
    import numpy as np
    import kiln
    sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
    import triton_attention
    import triton_matmul
    monkeypatch.setenv("KILN_TARGET", chip)

    def bits(*shape):
        return kiln.bf16(np.zeros(shape, np.uint16))

    if port == "matmul":
        m, n, k = 512, 256, 1024
        grid, args, kw = triton_matmul.launch_args(bits(m, k), bits(k, n), bits(m, n), m, n, k,
                                                   triton_matmul.GPU_CONFIG)
        kernel = triton_matmul.matmul_kernel
    else:
        shape = (2, 4, 256, 128)
        grid, args, kw = triton_attention.launch_args(
            bits(*shape), bits(*shape), bits(*shape), bits(*shape),
            np.zeros((8, 256), np.float32), *shape, True, 128, 64, num_warps=8)
        kernel = triton_attention._attn_fwd
    ck = kernel.warmup(*args, grid=grid, **kw)
    assert ck.kernel is None and ck.target == chip
    ptx = ck.asm
    (tmp_path / "k.ptx").write_text(ptx)
    if chip == "sm_90a":
        assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx
        assert "tensormap.replace" not in ptx
    else:
        assert "mma.sync.aligned" in ptx and "cp.async.cg.shared.global" in ptx
    report = _assemble(str(tmp_path / "k.ptx"), chip, tmp_path)
    assert "bytes spill stores" not in report or " 0 bytes spill stores" in report
    with pytest.raises(ValueError, match="host .numpy. arrays"):
        kernel[grid](*args, **kw)


# kl.device_assert and kl.device_print on a GPU target: CUDA's __assertfail
# and vprintf, which the driver provides (ptxas leaves them to it); without
# debug the assert compiles to nothing. (What they do at run time, on the CPU
# and the emulator: test_features.py, test_device_*.)
@pytest.mark.parametrize("chip", CHIPS)
def test_device_assert_and_print_compile_for_gpu(chip, tmp_path, monkeypatch):
    import numpy as np
    import kiln
    from test_features import checked_gather, printing
    monkeypatch.setenv("KILN_TARGET", chip)
    x, idx, out = np.zeros(77, np.float32), np.zeros(300, np.int32), np.zeros(300, np.float32)
    for debug in (True, False):
        ck = kiln.jit(checked_gather.fn, debug=debug).warmup(x, idx, out, 300, 77, B=64,
                                                             grid=(5,))
        ptx = ck.asm
        assert ("__assertfail" in ptx) == debug, ptx
        (tmp_path / "k.ptx").write_text(ptx)
        _assemble(str(tmp_path / "k.ptx"), chip, tmp_path)
    ptx = printing.warmup(np.zeros(6, np.float32), -7, 3, B=3, grid=(1,)).asm
    assert "vprintf" in ptx
    (tmp_path / "k.ptx").write_text(ptx)
    _assemble(str(tmp_path / "k.ptx"), chip, tmp_path)


# Triton's random numbers on GPU targets: Philox's high products are
# mul.hi (32-bit) or built from 32-bit limbs (64-bit), and the PTX assembles;
# bitcasts, gathers inside tiles, fp8 conversions and dots and the libdevice
# functions too.
@pytest.mark.parametrize("chip", CHIPS)
def test_random_numbers_and_bitcasts_compile_for_gpu(chip, tmp_path, monkeypatch):
    import numpy as np
    import kiln
    from test_features import (bitcasts, codebook_lookup, fp8_dot, fp8_roundtrip, gather_2d,
                               libdevice_math, random_tiles)
    monkeypatch.setenv("KILN_TARGET", chip)
    f8 = lambda n, f="e4m3": kiln.fp8(np.zeros(n, np.uint8), f)   # noqa: E731
    for ck in (fp8_roundtrip.warmup(f8(256), f8(256, "e5m2"), np.zeros(512, np.float32),
                                    np.zeros(1000, np.float32), f8(1000), f8(1000, "e5m2"),
                                    1000, B=256, grid=(4,)),
               fp8_dot.warmup(f8(16 * 64), f8(64 * 16, "e5m2"), np.zeros(256, np.float32),
                              M=16, N=16, K=64, grid=(1,)),
               libdevice_math.warmup(np.zeros(240, np.float32), np.zeros(240, np.float32),
                                     np.zeros(19 * 256, np.float32), 240, B=256, grid=(1,)),
               codebook_lookup.warmup(np.zeros(1001, np.int8), np.zeros(16, np.float32),
                                      np.zeros(2002, np.float32), 1001, B=256, grid=(4,)),
               gather_2d.warmup(np.zeros(128, np.float32), np.zeros(512, np.int32),
                                np.zeros(640, np.float32), R=8, C=16, K=32, grid=(1,))):
        (tmp_path / "k.ptx").write_text(ck.asm)
        _assemble(str(tmp_path / "k.ptx"), chip, tmp_path)
    n = 300
    ptx = bitcasts.warmup(np.zeros(n, np.float32), kiln.bf16(np.zeros(n, np.uint16)),
                          np.zeros(n, np.int32), np.zeros(n, np.float32), np.zeros(n, np.int16),
                          kiln.bf16(np.zeros(n, np.uint16)), n, B=128, grid=(3,)).asm
    (tmp_path / "k.ptx").write_text(ptx)
    _assemble(str(tmp_path / "k.ptx"), chip, tmp_path)
    for wide in (False, True):
        dt = np.int64 if wide else np.int32
        ck = random_tiles.warmup(5, np.zeros(4000, dt), np.zeros(2000, np.float32),
                                 np.zeros(3000, np.float32), 1000, B=128, WIDE=wide,
                                 ROUNDS=10, grid=(8,))
        ptx = ck.asm
        if not wide:
            assert "mul.hi.u32" in ptx
        (tmp_path / "k.ptx").write_text(ptx)
        _assemble(str(tmp_path / "k.ptx"), chip, tmp_path)


def _shared_bytes(ck, chip, warps, tmp_path, stages=None):
    """The dynamic shared memory of a @kiln.jit kernel's bundle for `chip`."""
    (tmp_path / "k.mlir").write_text(ck.kiln_ir)
    r = subprocess.run([KILNC, str(tmp_path / "k.mlir"), "--target", chip, "--num-warps",
                        str(warps), "-o", str(tmp_path / "k.kiln")]
                       + (["--num-stages", str(stages)] if stages else []), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return int(re.search(rb"launch shared_bytes (\d+)",
                         (tmp_path / "k.kiln").read_bytes()).group(1))


# kl.dot_scaled on GPU targets: the decoded operands feed the tensor cores
# (wgmma on sm_90a, mma.sync on sm_80) and the PTX assembles without spills,
# at 64x64x64 (4 warps) and the benchmark's 128x128x64 (8 warps). In the loop
# shared memory holds two stages of the packed operands and their scales and
# the two bfloat16 operands: each fp8 / fp4 element is decoded and scaled by one
# chain of operations on its byte and scale, with no float32 intermediates
# (those took 177-193 KiB at 128x128x64 on sm_90a; sm_80 refused the shape).
@pytest.mark.parametrize("chip", CHIPS)
def test_mx_matmul_compiles_for_gpu(chip, tmp_path, monkeypatch):
    import numpy as np
    import mx_matmul as mx
    monkeypatch.setenv("KILN_TARGET", chip)
    M = N = K = 512
    for (fa, fb), (bm, bn, bk, w) in itertools.product(
            (("e2m1", "e2m1"), ("e4m3", "e5m2"), ("e4m3", "e2m1")),
            ((64, 64, 64, 4), (128, 128, 64, 8))):
        pa, pb = (2 if f == "e2m1" else 1 for f in (fa, fb))
        ck = mx.mx_matmul_kernel.warmup(
            np.zeros((M, K // pa), np.int8), np.zeros((M, K // 32), np.int8),
            np.zeros((K // pb, N), np.int8), np.zeros((N, K // 32), np.int8),
            np.zeros((M, N), np.float32), M, N, K, FMT_A=fa, FMT_B=fb, BM=bm, BN=bn, BK=bk,
            grid=(M // bm, N // bn), num_warps=w)
        ptx = ck.asm
        assert ("wgmma.mma_async" if chip == "sm_90a" else "mma.sync.aligned") in ptx
        (tmp_path / "k.ptx").write_text(ptx)
        report = _assemble(str(tmp_path / "k.ptx"), chip, tmp_path)
        spills = int(re.search(r"(\d+) bytes spill stores", report).group(1))
        # (sm_80 at 64x64, 4 warps, 32-36 KiB: with no .minnctapersm hint,
        # since four blocks fit and a hint of four would cap registers at
        # 128, ptxas picks 80 registers and spills 8-28 bytes in some format
        # pairs; with the hint it takes 122-126 and spills none.)
        assert spills <= (32 if (chip, bm) == ("sm_80", 64) else 0), (fa, fb, bm, report)
        packed = bm * bk // pa + bk * bn // pb         # bytes per stage
        values = 2 * (bm * bk + bk * bn)                # the bfloat16 operands
        shared = _shared_bytes(ck, chip, w, tmp_path)
        # And the scales: no unpacked or expanded tile (e2m1's nibbles and
        # the scales over K are read by index from the bytes). After the
        # loop the same bytes hold the f32 result for its store, which can
        # be the larger.
        need = max(2 * packed + values, bm * bn * 4)
        assert need <= shared <= need + 4096, (fa, fb, bm, shared)


# Pointers made from loaded addresses (Triton's grouped GEMM tutorial):
# the kernel compiles for both GPU targets, on the tensor cores, and the PTX
# assembles.
@pytest.mark.parametrize("chip", CHIPS)
def test_grouped_gemm_compiles_for_gpu(chip, tmp_path, monkeypatch):
    import numpy as np
    import triton_grouped_gemm as tgg
    monkeypatch.setenv("KILN_TARGET", chip)
    As = [np.zeros((64, 64), np.float16)] * 2
    grid, args, kw = tgg.launch_args(As, As, As, num_sm=132, block=(64, 64, 32))
    ptx = tgg.grouped_matmul_kernel.warmup(*args, grid=grid, **kw).asm
    assert ("wgmma.mma_async" if chip == "sm_90a" else "mma.sync.aligned") in ptx
    (tmp_path / "k.ptx").write_text(ptx)
    _assemble(str(tmp_path / "k.ptx"), chip, tmp_path)
    # `accumulator += kl.dot(a, b)` is the dot's accumulator (canonicalized),
    # carried in registers: at 128x128x64 and 8 warps shared memory holds the
    # two stages of A and B (64 KiB; rows padded by 8 for mma.sync's
    # ldmatrix, 70 KiB) and no 64 KiB f32 accumulator (224 KiB before).
    grid, args, kw = tgg.launch_args(As, As, As, num_sm=132, block=(128, 128, 64))
    ck = tgg.grouped_matmul_kernel.warmup(*args, grid=grid, num_warps=8, **kw)
    stages = 2 * 2 * (128 * 64 + 64 * 128)
    assert stages <= _shared_bytes(ck, chip, 8, tmp_path) <= stages * 1.1 + 2048


# The FP8 block-scaled GEMM example (float8e4nv tiles through kl.dot): the
# tensor cores on both GPU targets, the PTX assembles without spills, and at
# 64x64 tiles with K steps of 128 shared memory holds two stages of the fp8
# tiles (8 KiB each), the two bfloat16 operands (16 KiB each) and little
# else: the operands' decode is one chain of bit
# operations per element, with no intermediate tile (the float32 decode took
# 201 KiB on sm_90a, 169 KiB on sm_80, past its 163).
@pytest.mark.parametrize("chip", CHIPS)
def test_fp8_blockwise_matmul_compiles_for_gpu(chip, tmp_path, monkeypatch):
    import numpy as np
    import fp8_blockwise_matmul as f8
    monkeypatch.setenv("KILN_TARGET", chip)
    M, N, K = 256, 256, 512
    grid, args, kw = f8.launch_args(np.zeros((M, K), np.uint8), np.zeros((M, 4), np.float32),
                                    np.zeros((N, K), np.uint8), np.zeros((2, 4), np.float32),
                                    np.zeros((M, N), np.float32), block=(64, 64))
    ck = f8.fp8_blockwise_matmul_kernel.warmup(*args, grid=grid, **kw)
    ptx = ck.asm
    # sm_90a: wgmma's e4m3 form on the fp8 bytes where they land (both
    # operands K-major); sm_80: decoded to bfloat16 for mma.sync.
    assert ("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3" if chip == "sm_90a"
            else "mma.sync.aligned") in ptx
    (tmp_path / "k.ptx").write_text(ptx)
    report = _assemble(str(tmp_path / "k.ptx"), chip, tmp_path)
    assert " 0 bytes spill stores" in report
    shared = _shared_bytes(ck, chip, 4, tmp_path)
    # (The step's scaled product and the accumulator stay in the dot's
    # registers: elementwiseCarry. They took 16 KiB more.) Two stages of
    # the fp8 tiles, and on sm_80 the two decoded bf16 operands.
    tiles = 2 * 2 * 64 * 128 + (0 if chip == "sm_90a" else 2 * 64 * 128 * 2)
    assert tiles <= shared <= tiles + 12 * 1024, shared


# The lightning indexer on narrow q and k (kiln.ops picks block_t 64 for
# them): each head's [64, D] query rows are a plain 2-D load of q viewed
# [T, H D] and the keys' rows are transposed for the dot, so on sm_90a the
# e4m3 form runs wgmma's fp8 form on the bytes in place and bf16 its bf16
# form; sm_80 runs mma.sync (fp8 decoded to bf16 there).
@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("dtype", ["e4m3", "bf16"])
def test_dsa_indexer_narrow_types_take_tensor_cores(chip, dtype, tmp_path):
    out = str(tmp_path / "k.ptx")
    ptx = _compile(["op", "dsa_indexer", "--dtype", dtype, "--block_t", "64"], out, chip)
    if chip == "sm_90a":
        want = "m64n64k32.f32.e4m3.e4m3" if dtype == "e4m3" else "m64n64k16.f32.bf16.bf16"
        assert "wgmma.mma_async.sync.aligned." + want in ptx
    else:
        assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
    assert " 0 bytes spill stores" in _assemble(out, chip, tmp_path)


# int8 dots on both GPU targets' tensor cores, for each form of B: K-major
# (W's rows transposed, or W^T's tile addressed in W) read where it lands, and
# N-major ([K, N] rows) through a transposed copy written by threads
# (transposeNMajorBytes: neither the s8 wgmma form nor ldmatrix transposes
# bytes), 4 x 4 blocks of bytes per thread, word accesses and byte permutes.
@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("form", ["k_major", "w_transposed", "n_major"])
def test_int8_dots_take_tensor_cores(chip, form, tmp_path, monkeypatch):
    import numpy as np
    import test_features as tf
    monkeypatch.setenv("KILN_TARGET", chip)
    M = N = K = 1024
    a = np.zeros((M, K), np.int8)
    c = np.zeros((M, N), np.int32)
    ck = tf.int8_gemm.warmup(a, a, c, c, M, N, K, BM=64, BN=64, BK=128,
                             B_FORM=tf.FP8_B_FORMS[form], ACC_IN=0, grid=(1, 1))
    assert ("wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8" if chip == "sm_90a"
            else "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32") in ck.asm
    (tmp_path / "k.ptx").write_text(ck.asm)
    assert " 0 bytes spill stores" in _assemble(str(tmp_path / "k.ptx"), chip, tmp_path)
    # Two stages of A and B (8 KiB each) and the transposed copy (8 KiB):
    # core matrices for wgmma, XOR-swizzled 128-byte rows for mma.sync.
    tiles = 2 * 2 * 64 * 128 + (64 * 128 if form == "n_major" else 0)
    assert _shared_bytes(ck, chip, 4, tmp_path) <= tiles + 2048


# W8A8 (examples/python/w8a8_matmul.py): on sm_90a the int8 dot runs on
# wgmma's s8 form (both operands K-major: W's rows transposed) on the bytes
# TMA puts in the 128B swizzle, into s32 registers (the zero accumulator
# takes no buffer), and the dequantizing epilogue reads those registers: shared
# memory is the loop's stages (A and W, 16 KiB each per stage at 128x128x128)
# or the float16 result's staging, whichever is larger. sm_80 runs
# mma.sync.m16n8k32.s8, its operands read by ldmatrix as byte pairs from
# XOR-swizzled 128-byte rows (no bytes added).
@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("stages", [2, 3])
def test_w8a8_matmul_compiles_for_gpu(chip, stages, tmp_path, monkeypatch):
    import numpy as np
    import w8a8_matmul as w8
    monkeypatch.setenv("KILN_TARGET", chip)
    monkeypatch.setenv("KILN_NUM_WARPS", "8")
    monkeypatch.setenv("KILN_NUM_STAGES", str(stages))
    M = N = K = 4096
    grid, args, kw = w8.launch_args(np.zeros((M, K), np.int8), np.zeros(M, np.float32),
                                    np.zeros((N, K), np.int8), np.zeros(N, np.float32),
                                    np.zeros((M, N), np.float16), block=(128, 128, 128))
    ck = w8.w8a8_matmul_kernel.warmup(*args, grid=grid, **kw)
    ptx = ck.asm
    (tmp_path / "k.ptx").write_text(ptx)
    report = _assemble(str(tmp_path / "k.ptx"), chip, tmp_path)
    assert " 0 bytes spill stores" in report
    if chip != "sm_90a":
        assert "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32" in ptx
        assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
        assert _shared_bytes(ck, chip, 8, tmp_path, stages) == stages * 2 * 128 * 128
        return
    assert "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8" in ptx
    assert "cp.async.bulk.tensor" in ptx
    # (Three stages keep one wgmma group in flight across iterations.)
    assert ("wgmma.wait_group.sync.aligned \t1;" in ptx) == (stages == 3)
    shared = _shared_bytes(ck, chip, 8, tmp_path, stages)
    loop = stages * 2 * 128 * 128
    assert loop <= shared <= max(loop, 128 * 128 * 2) + 2048, shared


# W4A16 (examples/python/w4a16_matmul.py): the int4 decode (shifts, masks,
# the group scale) feeds the tensor cores as one chain per element fused into
# the operand's write, so shared memory holds two stages of A and of the
# packed words (read once each: [BK / 8, BN] int32), the decoded operand and
# the result's staging (in the same bytes as the loop's). Loading the words
# with rows repeated eight times (`qweight + (k // 8) * N`) took 115 KiB at
# 128x128x64 instead of 64.
@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("block,warps", [((64, 64, 64), 4), ((128, 128, 64), 8)])
def test_w4a16_matmul_compiles_for_gpu(chip, block, warps, tmp_path, monkeypatch):
    import numpy as np
    import w4a16_matmul as w4
    monkeypatch.setenv("KILN_TARGET", chip)
    monkeypatch.setenv("KILN_NUM_WARPS", str(warps))
    M = N = K = 1024
    grid, args, kw = w4.launch_args(np.zeros((M, K), np.float16), np.zeros((K // 8, N), np.int32),
                                    np.zeros((K // 128, N), np.float16),
                                    np.zeros((M, N), np.float32), block=block)
    ck = w4.w4a16_matmul_kernel.warmup(*args, grid=grid, **kw)
    ptx = ck.asm
    assert ("wgmma.mma_async" if chip == "sm_90a" else "mma.sync.aligned") in ptx
    (tmp_path / "k.ptx").write_text(ptx)
    report = _assemble(str(tmp_path / "k.ptx"), chip, tmp_path)
    assert " 0 bytes spill stores" in report
    bm, bn, bk = block
    loop = 2 * (bm * bk * 2 + bk // 8 * bn * 4) + bk * bn * 2
    shared = _shared_bytes(ck, chip, warps, tmp_path)
    assert shared <= max(loop, bm * bn * 4) + 2048, shared


# fp8 dots on sm_90a: with both operands K-major (B the transpose of a load,
# or W^T's tile addressed in W, which the front end loads as W's rows and
# transposes) wgmma's e4m3 / e5m2 form reads the bytes where they land (two
# stages of the fp8 tiles: 32 KiB at 64x64x128, no decoded copy); an N-major
# B ([K, N] rows) is copied transposed by threads into the K-major operand
# layout (transposeNMajorBytes: one more 8 KiB tile), where it was decoded to
# bf16 for wgmma's bf16 form (64 KiB).
def test_fp8_dots_take_wgmma_fp8_forms_where_k_major(tmp_path, monkeypatch):
    import numpy as np
    import kiln
    import test_features as tf
    monkeypatch.setenv("KILN_TARGET", "sm_90a")
    M = N = K = 1024
    a = kiln.fp8(np.zeros((M, K), np.uint8), "e4m3")
    w = kiln.fp8(np.zeros((N, K), np.uint8), "e5m2")
    args = (a, w, np.zeros((M, N), np.float32), M, N, K)
    kw = dict(BM=64, BN=64, BK=128, grid=(1, 1))
    for form in ("k_major", "w_transposed"):
        native = tf.fp8_gemm.warmup(*args, B_FORM=tf.FP8_B_FORMS[form], **kw)
        assert "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e5m2" in native.asm
        assert ".bf16" not in native.asm
        # Pipelined by TMA into the 128B swizzle (boxes of 128 fp8 columns).
        assert "cp.async.bulk.tensor" in native.asm
        (tmp_path / "k.ptx").write_text(native.asm)
        assert " 0 bytes spill stores" in _assemble(str(tmp_path / "k.ptx"), "sm_90a", tmp_path)
        assert _shared_bytes(native, "sm_90a", 4, tmp_path) <= 2 * 2 * 64 * 128 + 2048
    copied = tf.fp8_gemm.warmup(*args, B_FORM=tf.FP8_B_FORMS["n_major"], **kw)
    assert "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e5m2" in copied.asm
    assert ".bf16" not in copied.asm
    # (The copy reads 4 x 4 byte blocks as words, no byte at a time.)
    assert "ld.shared.b8" not in copied.asm and "ld.shared.b32" in copied.asm
    (tmp_path / "k.ptx").write_text(copied.asm)
    assert " 0 bytes spill stores" in _assemble(str(tmp_path / "k.ptx"), "sm_90a", tmp_path)
    assert _shared_bytes(copied, "sm_90a", 4, tmp_path) <= 2 * 2 * 64 * 128 + 64 * 128 + 2048
    # KILN_FP8_WGMMA=0 (kilnc --no-fp8-wgmma): decoded, as before, for the
    # device check to time both.
    monkeypatch.setenv("KILN_FP8_WGMMA", "0")
    for form in ("k_major", "n_major"):
        off = tf.fp8_gemm.warmup(*args, B_FORM=tf.FP8_B_FORMS[form], **kw)
        assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16" in off.asm
        assert "e4m3" not in off.asm


# The libdevice functions (float32 polynomials and reductions: no CUDA library)
# compile for both GPU targets, and the PTX assembles with no external calls.
@pytest.mark.parametrize("chip", CHIPS)
def test_libdevice_math_compiles_for_gpu(chip, tmp_path, monkeypatch):
    import numpy as np
    import test_features as tf
    monkeypatch.setenv("KILN_TARGET", chip)
    n = np.zeros(256, np.float32)
    ck = tf.libdevice_math.warmup(n, n, np.zeros(256 * len(tf.LIBDEVICE_CASES), np.float32),
                                  240, B=256, grid=(1,))
    ptx = ck.asm
    assert "call" not in ptx   # (no libdevice / libm calls)
    (tmp_path / "k.ptx").write_text(ptx)
    _assemble(str(tmp_path / "k.ptx"), chip, tmp_path)


# Tile slices that only feed tensor-core dots are views of their source's
# shared-memory rows (test/Target/GPU/gpu-slice.mlir has the IR): DSA's
# pattern (gathered key rows, their first columns the values) and a tile
# split along K for two dots assemble on both chips, with ldmatrix or
# wgmma reading the slices, and the gathered rows copied in once.
@pytest.mark.parametrize("chip", CHIPS)
def test_tile_slices_compile_for_gpu(chip, tmp_path, monkeypatch):
    import numpy as np
    import kiln
    from test_tile_slices import gathered_attention, sliced_dots
    monkeypatch.setenv("KILN_TARGET", chip)

    def bits(n):
        return kiln.bf16(np.zeros(n, np.uint16))

    for BM in (16, 64):
        ga = gathered_attention.warmup(bits(61 * 150), bits(50 * 150), np.zeros(32, np.int32),
                                       np.zeros(61 * 120, np.float32), BM - 3, 50, 150, 120, 29,
                                       BH=BM, BK=32, BD=160, BDV=128, grid=(1,))
        sd = sliced_dots.warmup(bits(70 * 123), bits(123 * 60), np.zeros(70 * 60, np.float32),
                                70, 123, 60, BM=BM, BK2=128, BN=64, K=64, grid=(5,))
        for ck in (ga, sd):
            ptx = ck.asm
            if chip == "sm_90a" and BM == 64:
                assert "wgmma.mma_async" in ptx
            else:
                assert "mma.sync.aligned" in ptx and "ldmatrix" in ptx
            (tmp_path / "k.ptx").write_text(ptx)
            _assemble(str(tmp_path / "k.ptx"), chip, tmp_path)
        # A group of copies each for q, the index block and the key rows:
        # the values are not gathered again.
        assert ga.asm.count("cp.async.commit_group") == 3


def _wgmma_operand_descriptors(ptx):
    """The constants OR-ed into the A and B shared-memory descriptors of
    every wgmma with both operands in shared memory: [(a, b)], each the
    constant of its register's `or.b64 %rd, %rd, CONST` definition (layout
    type in bits 62-63: 1 is the 128B swizzle, 0 none)."""
    consts = dict(re.findall(r"or\.b64\s+(%rd\d+), %rd\d+, (\d+);", ptx))
    pairs = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.bf16\.bf16 \{[^}]*\}, "
                       r"(%rd\d+), (%rd\d+),", ptx)
    return [(int(consts[a]), int(consts[b])) for a, b in pairs if a in consts and b in consts]


@pytest.mark.parametrize("block,warps", [(64, 4), (128, 8)])
def test_attention_query_takes_the_128b_swizzle(block, warps, tmp_path):
    # sm_90a: q is loaded once, outside the key loops, by cp.async chunks;
    # it is the A operand of both loops' score dots, and takes the 128B
    # swizzle as the pipelined key and value stages do (its descriptors'
    # layout type 1), or neither does under --no-swizzle.
    args = ["op", "block_sparse_attention", "--head_dim", "128", "--dtype", "bf16",
            "--mask", "causal", "--block", str(block), "--num-warps", str(warps)]
    for flags, layout in (([], 1), (["--no-swizzle"], 0)):
        ptx = _compile(args + flags, str(tmp_path / "k.ptx"), "sm_90a")
        descs = _wgmma_operand_descriptors(ptx)
        assert len(descs) >= 2, len(descs)
        assert {a >> 62 for a, _ in descs} == {layout}, flags
        assert {b >> 62 for _, b in descs} == {layout}, flags


# int -> bf16 rounds once on GPUs too: sm_80 has no cvt.rn.bf16.s32, and its
# cvt.rn.f32.s32 then cvt.rn.bf16.f32 rounded twice (2^24 + 2^16 + 1 gave
# 2^24). The f32 step is now round-to-odd (the f64 value compared back);
# float -> int8 saturates (what cvt.rzi does), so the clamp is in the PTX.
@pytest.mark.parametrize("chip", CHIPS)
def test_int_to_bf16_rounds_once_and_float_to_int_saturates_on_gpus(chip, tmp_path,
                                                                    monkeypatch):
    import numpy as np
    import kiln
    from test_frontend_semantics import saturating_casts, to_bf16_fp8
    monkeypatch.setenv("KILN_TARGET", chip)
    B = 64
    ptx = to_bf16_fp8.warmup(np.zeros(B, np.int32), np.zeros(B, np.int64), np.zeros(B),
                             np.zeros(B, np.int16), np.zeros(B, np.int16), np.zeros(B, np.int8),
                             np.zeros(B, np.int8), B=B, grid=(1,)).asm
    double = re.search(r"cvt\.rn\.f32\.s32\s+(%r\d+).*\n(?:.*\n){0,3}.*cvt\.rn\.bf16\.f32\s+%rs\d+, \1;",
                       ptx)
    assert double is None, double.group(0)
    (tmp_path / "k.ptx").write_text(ptx)
    _assemble(str(tmp_path / "k.ptx"), chip, tmp_path)
    ptx = saturating_casts.warmup(np.zeros(B, np.float32), np.zeros(2 * B, np.int8),
                                  np.zeros(B, np.int16), np.zeros(B, np.int32), B=B,
                                  grid=(1,)).asm
    (tmp_path / "k.ptx").write_text(ptx)
    _assemble(str(tmp_path / "k.ptx"), chip, tmp_path)
