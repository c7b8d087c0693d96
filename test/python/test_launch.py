"""Bad launches raise Python exceptions; nothing crashes the interpreter."""
import enum
import os

import numpy as np
import pytest

import kiln
import kiln.language as kl
from conftest import KILNC


@kiln.jit
def copy(src, dst, n, BLOCK: kl.constexpr):
    offs = kl.program_id(0) * BLOCK + kl.arange(0, BLOCK)
    kl.store(dst + offs, kl.load(src + offs, mask=offs < n), mask=offs < n)


@kiln.jit
def two_d(dst, n):
    kl.store(dst + kl.program_id(1), 1.0)


def arrays(n=100):
    return np.arange(n, dtype=np.float32), np.full(n, np.nan, np.float32)


def test_wrong_argument_count():
    a, b = arrays()
    with pytest.raises(TypeError, match="missing a required argument"):
        copy[(1,)](a, b, BLOCK=128)
    with pytest.raises(TypeError, match="too many|multiple values|takes"):
        copy[(1,)](a, b, 100, 5, 6, BLOCK=128)


def test_unsupported_dtype():
    a = np.zeros(4, np.complex128)
    with pytest.raises(TypeError, match="complex128"):
        copy[(1,)](a, a, 4, BLOCK=16)


def test_mismatched_dtypes_are_a_compile_error():
    a = np.zeros(4, np.float32)
    b = np.zeros(4, np.float64)
    # Storing f32 values through an f64 pointer converts; storing a pointer
    # where a number is expected does not.
    copy[(1,)](a, b, 4, BLOCK=16)
    assert (b == 0).all()
    with pytest.raises(TypeError, match="unsupported type"):
        copy[(1,)](a, "not an array", 4, BLOCK=16)


@pytest.mark.parametrize("n", [1 << 63, -(1 << 63) - 1, 10 ** 30])
def test_integers_outside_int64_are_refused(n):
    # (Python ints take the launch's fast path; each is checked all the same.)
    a, b = arrays()
    with pytest.raises(OverflowError, match="does not fit in int64"):
        copy[(1,)](a, b, n, BLOCK=128)
    assert np.isnan(b).all()


def test_non_contiguous_array():
    a = np.zeros((16, 16), np.float32)[:, 3]
    b = np.zeros(16, np.float32)
    with pytest.raises(ValueError, match="not contiguous"):
        copy[(1,)](a, b, 16, BLOCK=16)


@pytest.mark.parametrize("grid", [(), (1, 1, 1, 1), (-3,), (2, -1), "abc"])
def test_bad_grid(grid):
    a, b = arrays()
    with pytest.raises(ValueError, match="grid"):
        copy[grid](a, b, 100, BLOCK=128)
    assert np.isnan(b).all()


@pytest.mark.parametrize("grid", [(0,), (2, 0), lambda meta: (kiln.cdiv(0, meta["BLOCK"]),)])
def test_empty_grid_launches_nothing(grid):
    """As Triton: a grid with a zero dimension (n = 0 under cdiv) runs no
    program; the arguments are still checked."""
    a, b = arrays()
    copy[grid](a, b, 0, BLOCK=128)
    assert np.isnan(b).all()
    with pytest.raises(TypeError, match="missing a required argument"):
        copy[grid](a, b, BLOCK=128)
    with pytest.raises(TypeError, match="complex128"):
        copy[grid](np.zeros(4, np.complex128), b, 0, BLOCK=128)


def test_grid_rank_too_small_for_the_kernel():
    a, b = arrays()
    with pytest.raises(ValueError, match="grid has 1 dimension"):
        two_d[(1,)](b, 1)
    two_d[(1, 3)](b, 1)
    assert (b[:3] == 1.0).all()


def test_cuda_arrays_without_a_driver_are_refused_with_a_message(tmp_path):
    """CUDA arrays select the GPU target; with no CUDA driver the launch is a
    ValueError naming the cause (in a subprocess: the driver is loaded once)."""
    import subprocess
    import sys
    code = (
        "import kiln, kiln.language as kl\n"
        "@kiln.jit\n"
        "def copy(x, y, n, BLOCK: kl.constexpr):\n"
        "    o = kl.arange(0, BLOCK)\n"
        "    kl.store(y + o, kl.load(x + o, mask=o < n), mask=o < n)\n"
        "class FakeCuda:\n"
        "    __cuda_array_interface__ = {'shape': (4,), 'typestr': '<f4',\n"
        "                                'data': (4096, False), 'version': 3}\n"
        "try:\n"
        "    copy[(1,)](FakeCuda(), FakeCuda(), 4, BLOCK=16)\n"
        "except ValueError as e:\n"
        "    print('ValueError', e)\n")
    env = dict(os.environ, KILN_CUDA_DRIVER=str(tmp_path / "no-libcuda.so"))
    env.pop("KILN_GPU_TARGET", None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=env, timeout=300)
    assert "ValueError" in r.stdout and "CUDA device" in r.stdout, r.stdout + r.stderr
    assert "driver" in r.stdout, r.stdout


def test_dlpack_objects_are_accepted():
    class Holder:
        def __init__(self, arr):
            self.arr = arr

        def __dlpack__(self, **kwargs):
            return self.arr.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.arr.__dlpack_device__()

    a, b = arrays(40)
    copy[(1,)](Holder(a), Holder(b), 40, BLOCK=64)
    assert (b == a).all()


def test_bf16_arrays():
    @kiln.jit
    def widen(src, dst, n, BLOCK: kl.constexpr):
        offs = kl.arange(0, BLOCK)
        v = kl.load(src + offs, mask=offs < n)
        kl.store(dst + offs, v.to(kl.float32) * 2.0, mask=offs < n)

    x = np.array([1.5, -2.25, 3.0, 0.1], np.float32)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    out = np.full(4, np.nan, np.float32)
    widen[(1,)](kiln.bf16(bits), out, 4, BLOCK=16)
    expect = (bits.astype(np.uint32) << 16).view(np.float32) * 2
    assert (out == expect).all()


def test_calling_a_kernel_directly_is_an_error():
    with pytest.raises(RuntimeError, match="must be launched"):
        copy(1, 2, 3)


def test_kl_functions_outside_kernels():
    with pytest.raises(RuntimeError, match="inside a @kiln.jit kernel"):
        kl.arange(0, 4)


@kiln.jit
def row_sums(src, dst, rows, cols, BLOCK: kl.constexpr):
    """A loop of loads whose offsets follow the induction variable: what
    num_stages pipelines on GPU targets."""
    r = kl.program_id(0)
    acc = kl.zeros((BLOCK,), kl.float32)
    for c in range(0, cols, BLOCK):
        offs = c + kl.arange(0, BLOCK)
        acc += kl.load(src + r * cols + offs, mask=offs < cols, other=0.0)
    kl.store(dst + r, kl.sum(acc, axis=0))


@pytest.mark.parametrize("warps,stages", [(1, 1), (4, 2), (8, 3), (2, 4)])
def test_num_warps_and_num_stages_launch_options(warps, stages):
    """Triton's launch options: warps per block and pipelining depth on GPU
    targets (and on the emu-sm_XY emulator, where results are still
    checked); CPUs ignore them."""
    a, b = arrays(1000)
    copy[(8,)](a, b, 1000, BLOCK=128, num_warps=warps, num_stages=stages)
    assert np.array_equal(a, b)
    x = np.random.default_rng(0).standard_normal((5, 1000)).astype(np.float32)
    out = np.full(5, np.nan, np.float32)
    row_sums[(5,)](x, out, 5, 1000, BLOCK=64, num_warps=warps, num_stages=stages)
    np.testing.assert_allclose(out, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("opt,bad", [("num_warps", 0), ("num_warps", 33), ("num_warps", 2.5),
                                     ("num_warps", "4"), ("num_stages", 0), ("num_stages", 9),
                                     ("num_stages", True)])
def test_bad_launch_options(opt, bad):
    a, b = arrays()
    with pytest.raises(ValueError, match=f"{opt} must be an integer in"):
        copy[(1,)](a, b, 100, BLOCK=128, **{opt: bad})


def test_integer_division_by_zero_in_padding_lanes_does_not_trap(tmp_path):
    """x86 integer division traps (SIGFPE) on a zero divisor, in every lane
    of a vector, masked-off ones included: a ragged kernel whose padding lanes
    load 0 killed the interpreter. Those lanes now divide by 1 (as a GPU, the
    value is unspecified and the mask discards it); INT_MIN // -1 wraps. In a
    subprocess, so that a trap fails the test instead of ending the run."""
    import subprocess
    import sys
    script = tmp_path / "ragged.py"
    script.write_text('''
import numpy as np, kiln, kiln.language as kl

@kiln.jit
def moddiv(a, b, q, r, n, B: kl.constexpr):
    offs = kl.program_id(0) * B + kl.arange(0, B)
    m = offs < n
    x = kl.load(a + offs, mask=m)
    y = kl.load(b + offs, mask=m)          # masked-off lanes read 0
    kl.store(q + offs, x // y, mask=m)
    kl.store(r + offs, x % y, mask=m)

@kiln.jit
def scalar_div(a, out, d):
    kl.store(out, kl.load(a) // d)

rng = np.random.default_rng(1)
for dt in (np.int32, np.int64, np.int8):
    n = 100
    a = rng.integers(-100, 100, n).astype(dt)
    b = rng.integers(1, 50, n).astype(dt)
    q, r = np.full(n, 7, dt), np.full(n, 7, dt)
    moddiv[(kiln.cdiv(n, 64),)](a, b, q, r, n, B=64)
    assert (q == a // b).all() and (r == a % b).all(), dt
out = np.zeros(1, np.int32)
scalar_div[(1,)](np.array([5], np.int32), out, 0)         # no trap; any value
scalar_div[(1,)](np.array([-2**31], np.int32), out, -1)   # wraps
assert out[0] == -2**31, out
print("ok")
''')
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, (r.returncode, r.stderr[-2000:])


@kiln.jit
def rsqrt_kernel(x, out, B: kl.constexpr):
    offs = kl.arange(0, B)
    kl.store(out + offs, kl.rsqrt(kl.load(x + offs)))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_rsqrt_of_wide_tiles(dtype):
    """A tile of 8 or more f32 lanes crashed the compiler (math.rsqrt's
    polynomial approximation emitted an AVX intrinsic the CPU pipeline does
    not lower)."""
    x = (np.random.default_rng(2).random(16) + 0.5).astype(dtype)
    out = np.full(16, np.nan, dtype)
    rsqrt_kernel[(1,)](x, out, B=16)
    ref = 1 / np.sqrt(x.astype(np.float64))
    assert np.allclose(out.astype(np.float64), ref, rtol=1e-6 if dtype == np.float32 else 1e-3)


def test_loaded_kernels_hold_no_file_descriptors(tmp_path):
    """Each loaded kernel held its memfd open (so that glibc, which matches
    loaded libraries by path, could not confuse two kernels loaded as
    /proc/self/fd/N): a process with about a thousand kernels ran out of
    descriptors. Under a limit of 64, 300 bundles of two kernels stay
    loaded and each runs its own code."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    src = open(os.path.join(root, "examples", "vector_add.mlir")).read()
    paths = []
    for name, text in (("add", src), ("sub", src.replace("arith.addf", "arith.subf"))):
        (tmp_path / f"{name}.mlir").write_text(text)
        paths.append(str(tmp_path / f"{name}.kiln"))
        subprocess.run([KILNC, str(tmp_path / f"{name}.mlir"), "-o", paths[-1]], check=True)
    script = tmp_path / "many.py"
    script.write_text(f"""
import os, resource
import numpy as np, kiln
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
fds = len(os.listdir("/proc/self/fd"))
x, y = np.arange(2000, dtype=np.float32), np.full(2000, 3, np.float32)
kernels = [kiln.load_bundle({paths!r}[i % 2]) for i in range(300)]
for i, k in enumerate(kernels):
    out = np.full(2000, np.nan, np.float32)
    k[(2,)](x, y, out, 2000)
    assert np.array_equal(out, x + y if i % 2 == 0 else x - y), i
assert len(os.listdir("/proc/self/fd")) <= fds + 2, (fds, len(os.listdir("/proc/self/fd")))
print("ok")
""")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


@kiln.autotune(configs=[kiln.Config({"BLOCK": 16}), kiln.Config({"BLOCK": 32})], key=["n"],
               warmup=0, rep=1)
@kiln.jit
def tuned_scale(x, out, n, BLOCK: kl.constexpr):
    offs = kl.program_id(0) * BLOCK + kl.arange(0, BLOCK)
    m = offs < n
    kl.store(out + offs, kl.load(x + offs, mask=m) * 2, mask=m)


def test_autotune_keys_dtypes_and_wrapped_arrays_and_refuses_conflicts(tmp_path, monkeypatch):
    """Triton's autotuner keys every array argument's dtype (a config tuned
    for float32 was reused for float16), kiln.bf16 arrays by shape (their
    repr, an address, re-tuned every call), refuses a tuned meta-parameter
    passed explicitly (it was silently overridden), and passes launch
    options through (wait= was a TypeError)."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    grid = lambda meta: (kiln.cdiv(meta["n"], meta["BLOCK"]),)  # noqa: E731 (meta["n"]: every argument)
    tuned_scale.best.clear()
    for dtype in (np.float32, np.float16):
        x = np.arange(100).astype(dtype)
        out = np.zeros_like(x)
        tuned_scale[grid](x, out, 100, wait=True)
        assert np.array_equal(out, x * 2)
    assert len(tuned_scale.best) == 2
    # The target is in the key: a host config was reused for the emulator.
    other = "emu-sm_80" if kiln.runtime.env_target() == "host" else "host"
    with monkeypatch.context() as m:
        m.setenv("KILN_TARGET", other)
        tuned_scale[grid](x, out, 100)
        assert np.array_equal(out, x * 2)
    assert len(tuned_scale.best) == 3 and any(k.endswith("|" + other) for k in tuned_scale.best)
    for _ in range(3):
        xb = kiln.bf16(np.zeros(100, np.uint16))
        tuned_scale[grid](xb, kiln.bf16(np.zeros(100, np.uint16)), 100)
    assert len(tuned_scale.best) == 4
    with pytest.raises(ValueError, match="conflicting meta-parameters: BLOCK"):
        tuned_scale[grid](x, out, 100, BLOCK=16)
    # Triton's Autotuner.warmup: every config compiled, nothing launched.
    out[:] = -1
    compiled = tuned_scale.warmup(x, out, 100, grid=grid)
    assert len(compiled) == 2 and (out == -1).all() and tuned_scale.last is compiled[-1]
    with pytest.raises(ValueError, match="rep must be an integer >= 1"):
        kiln.autotune(configs=[kiln.Config({"BLOCK": 16})], key=["n"], rep=0)(tuned_scale.fn)


class _SlotsConfig:
    __slots__ = ("a",)

    def __init__(self, a):
        self.a = a


class _ClassConfig:
    a = 1.0


class _Leaf:
    def __init__(self, a):
        self.a = a


def _nest(levels, a):
    v = _Leaf(a)
    for _ in range(levels):
        outer = _Leaf(0)
        outer.a = v
        v = outer
    return v


@kiln.jit
def read_config(out, C: kl.constexpr):
    kl.store(out + kl.arange(0, 4), kl.zeros((4,), kl.float32) + C.a)


@kiln.jit
def read_deep_config(out, C: kl.constexpr):
    kl.store(out + kl.arange(0, 4), kl.zeros((4,), kl.float32) + C.a.a.a.a.a)


class _Mode(enum.Enum):
    A = 3.0
    B = 4.0


@kiln.jit
def read_value(out, C: kl.constexpr):
    kl.store(out + kl.arange(0, 4), kl.zeros((4,), kl.float32) + C.value)


SIZES = [16, 32]


@kiln.jit
def read_global_list(out):
    kl.store(out + kl.arange(0, 4), kl.zeros((4,), kl.int32) + len(SIZES))


def test_changed_constexpr_objects_and_global_lists_are_not_reused():
    """A constexpr object was keyed by its own __dict__, 3 levels deep: a
    __slots__ object, a class passed itself, a class attribute and a 4th
    level changed since the last launch reused the kernel compiled for the
    old value. A global list changed in place was the same object, taken as
    unchanged."""
    out = np.zeros(4, np.float32)
    s = _SlotsConfig(1.0)
    read_config[(1,)](out, C=s)
    s.a = 2.0
    read_config[(1,)](out, C=s)
    assert (out == 2).all()
    read_config[(1,)](out, C=_ClassConfig)
    _ClassConfig.a = 5.0
    read_config[(1,)](out, C=_ClassConfig)
    assert (out == 5).all()
    inst = _ClassConfig()
    _ClassConfig.a = 7.0
    read_config[(1,)](out, C=inst)
    assert (out == 7).all()
    deep = _nest(4, 1.0)
    read_deep_config[(1,)](out, C=deep)
    deep.a.a.a.a.a = 9.0
    read_deep_config[(1,)](out, C=deep)
    assert (out == 9).all()
    # Enum members are constants, keyed by identity (their attributes list
    # every other member: a key of them cost 0.5 ms a launch).
    for mode in (_Mode.A, _Mode.B):
        read_value[(1,)](out, C=mode)
        assert (out == mode.value).all()
    n = np.zeros(4, np.int32)
    read_global_list[(1,)](n)
    assert (n == 2).all()
    SIZES.append(64)
    try:
        with pytest.raises(RuntimeError, match="global variable 'SIZES' has changed"):
            read_global_list[(1,)](n)
    finally:
        SIZES.pop()
    read_global_list[(1,)](n)


def test_bundle_grids_are_ints_in_int64(tmp_path):
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = str(tmp_path / "va.kiln")
    subprocess.run([KILNC, os.path.join(root, "examples", "vector_add.mlir"), "-o", path],
                   check=True)
    k = kiln.load_bundle(path)
    for grid in ((True,), (1.0,), (2**63,), (-1,), True):
        with pytest.raises(ValueError, match="the grid must be an int or a tuple"):
            k[grid]


@kiln.jit
def spin_on_flag(flag, data, out):
    if kl.program_id(0) == 1:
        kl.store(data, 41)
        kl.atomic_xchg(flag, 1)
    else:
        tries = 0   # (bounded: a pool of one thread runs program 1 after this)
        while (kl.load(flag, volatile=True) == 0) & (tries < 100_000_000):
            tries += 1
        kl.store(out, kl.load(data) + 1)


@kiln.jit
def volatile_masked(x, out, n, B: kl.constexpr):
    i = kl.arange(0, B)
    kl.store(out + i, kl.load(x + i, mask=i < n, other=-5.0, volatile=True))


def test_volatile_loads_read_memory_every_time():
    """`while kl.load(flag, volatile=True) == 0: pass` was a plain load in a
    loop that did nothing else: LLVM deleted the loop, and program 0 read
    `data` before program 1 wrote it (out 1, not 42)."""
    # (Where programs run one after another, the emulator's or a pool of one
    # thread, program 0 would wait for nothing. The masked load below runs
    # on every target.)
    threads = int(os.environ.get("KILN_NUM_THREADS") or os.cpu_count() or 1)
    concurrent = threads >= 2 and not kiln.runtime.env_target().startswith("emu-")
    for _ in range(5 if concurrent else 0):
        flag, data, out = np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros(1, np.int32)
        spin_on_flag[(2,)](flag, data, out)
        assert out[0] == 42
    x = np.arange(8, dtype=np.float32) - 3
    x[2] = -0.0
    out = np.zeros(8, np.float32)
    volatile_masked[(1,)](x, out, 6, B=8)
    assert list(out) == [-3, -2, 0, 0, 1, 2, -5, -5] and np.signbit(out[2])
    assert list(x) == [-3, -2, 0, 0, 1, 2, 3, 4] and np.signbit(x[2])  # unchanged


@kiln.jit
def copy_one(x, out, B: kl.constexpr):
    i = kl.arange(0, B)
    kl.store(out + i, kl.load(x + i))


def test_misaligned_arrays_are_refused():
    """An array at an odd byte offset (np.frombuffer) was taken: the
    emulator stopped the process at its misaligned copy."""
    x = np.frombuffer(bytearray(4 * 8 + 1), np.float32, count=8, offset=1)
    with pytest.raises(ValueError, match="argument 'x' of copy_one is not aligned to its "
                                         "4-byte elements"):
        copy_one[(1,)](x, np.zeros(8, np.float32), B=8)
    with pytest.raises(ValueError, match="argument 'out' of copy_one is not contiguous; "
                                         r"pass np.ascontiguousarray\(out\)"):
        copy_one[(1,)](np.zeros(8, np.float32), np.zeros(16, np.float32)[::2], B=8)


@kiln.jit
def _add_constant(x, C: kl.constexpr):
    i = kl.arange(0, 16)
    kl.store(x + i, kl.load(x + i) + C)


def test_compiles_while_another_thread_changes_the_environment():
    """The linker was spawned with the live `environ`, which another
    thread's os.environ change reallocates while a compile runs (without
    the GIL): about one link in four failed with "cannot run ld: Bad
    address". Tools now run with the environment of the import."""
    import threading
    stop = threading.Event()

    def toggle():
        while not stop.is_set():
            os.environ["KILN_TEST_UNRELATED"] = "1"
            os.environ.pop("KILN_TEST_UNRELATED", None)

    t = threading.Thread(target=toggle)
    t.start()
    x = np.zeros(16, np.float32)
    fresh = (os.getpid() % 4096) / 4096   # (constants no earlier run compiled)
    try:
        for c in range(24):
            _add_constant[(1,)](x, C=c + fresh)
    finally:
        stop.set()
        t.join()
    assert (x == sum(c + fresh for c in range(24))).all()


SCALARS_I1 = """
kiln.func @scal(%o: !kiln.ptr<f32> {kiln.name = "o"}, %a: i32 {kiln.name = "a"},
                %f: f32 {kiln.name = "f"}, %b: i1 {kiln.name = "b"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %o, [%c1], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %af = arith.sitofp %a : i32 to f32
  %bf = arith.uitofp %b : i1 to f32
  %s = arith.addf %af, %f : f32
  %s2 = arith.addf %s, %bf : f32
  %t = kiln.splat %s2 : tensor<1xf32>
  kiln.store %t, %v[%c0] : tensor<1xf32> -> !kiln.view<1xf32>
  kiln.return
}
"""


class _CPUTensor:
    """A CPU array known only by DLPack (as a PyTorch CPU tensor is)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return (1, 0)


def test_bundle_arguments_metadata_and_inspection(tmp_path):
    """Bundle launches refused CPU DLPack objects (which @kiln.jit takes, as
    the docs say), np.bool_ for an i1 scalar, and named neither the range of
    an out-of-range int (`got <class 'int'>`) nor the argument of an int too
    large for any float (a bare OverflowError); a Bundle had no target or
    features; an autotuned kernel had no .asm; kilnc wrote x86 code as PTX
    or a cubin for emu-sm_XY, and --version printed LLVM's."""
    import subprocess
    src, out = tmp_path / "scal.mlir", tmp_path / "scal.kiln"
    src.write_text(SCALARS_I1)
    subprocess.run([KILNC, str(src), "-o", str(out)], check=True)
    b = kiln.load_bundle(str(out))
    assert b.target.startswith("x86-64") and isinstance(b.features, list) and b.grid_rank == 1
    o = np.zeros(1, np.float32)
    b[(1,)](_CPUTensor(o), 2, 0.5, np.bool_(True))
    assert o[0] == 3.5
    with pytest.raises(TypeError, match="got 2147483648, outside its range"):
        b[(1,)](o, 2**31, 0.5, True)
    with pytest.raises(TypeError, match="argument 'f' .* overflows it"):
        b[(1,)](o, 2, 10**400, True)
    with pytest.raises(TypeError, match=r"argument 'b' .* 2 is outside \[0, 1\]"):
        b[(1,)](o, 2, 0.5, 2)
    for flags in (["--emit=ptx", "-o", "-"], ["--cubin", "-o", str(tmp_path / "x.kiln")]):
        r = subprocess.run([KILNC, str(src), "--target=emu-sm_80"] + flags,
                           capture_output=True, text=True)
        assert r.returncode == 1 and "needs an NVIDIA target" in r.stderr, r.stderr
    r = subprocess.run([KILNC, "--version"], capture_output=True, text=True)
    assert "kiln 0.1.0" in r.stdout, r.stdout


@kiln.autotune(configs=[kiln.Config({"B": 16})], key=["n"])
@kiln.jit
def _tuned_copy(x, y, n, B: kl.constexpr):
    i = kl.arange(0, B)
    kl.store(y + i, kl.load(x + i, mask=i < n), mask=i < n)


@kiln.jit(noinline=True)
def _triton_methods(x, o, bp_out, N: kl.constexpr):
    t = kl.load(x + kl.arange(0, N))
    kl.store(o, t.sum(0))
    kl.store(o + 1, t.max(0))
    kl.store(o + 2, kl.sum(t.exp(), 0))
    kl.store(o + 3, t.numel * 1.0)
    bp = kl.make_block_ptr(x, (N,), (1,), (0,), (4,), (0,))
    bp = bp.advance((4,))
    kl.store(bp_out + kl.arange(0, 4), kl.load(bp))


def test_triton_conveniences():
    """Triton's tensor member functions (`x.sum(0)`, `x.exp()`, `x.numel`),
    a block pointer's `.advance`, `jit(noinline=)`, `next_power_of_2`, and
    `.asm` of an autotuned kernel were refused or missing."""
    x = np.arange(8, dtype=np.float32)
    o, b = np.zeros(4, np.float32), np.zeros(4, np.float32)
    _triton_methods[(1,)](x, o, b, N=8)
    assert o[:2].tolist() == [28.0, 7.0] and o[3] == 8.0 and b.tolist() == [4, 5, 6, 7]
    assert abs(o[2] - np.exp(x.astype(np.float64)).sum()) < 1e-3
    assert [kiln.next_power_of_2(n) for n in (0, 1, 5, 64, 65)] == [1, 1, 8, 64, 128]
    y = np.zeros(5, np.float32)
    _tuned_copy[(1,)](np.ones(5, np.float32), y, 5)
    assert (y == 1).all() and "ret" in _tuned_copy.asm
