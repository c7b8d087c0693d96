"""Language features, specialization, inspection, autotuning, bundles."""
import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln
import kiln.language as kl
from conftest import KILNC, assert_close, from_bf16_bits, to_bf16_bits

HERE = os.path.dirname(os.path.abspath(__file__))


@kiln.jit
def scale_by(x, factor):
    return x * factor


@kiln.jit
def uses_helper(src, dst, n, BLOCK: kl.constexpr):
    offs = kl.arange(0, BLOCK)
    v = kl.load(src + offs, mask=offs < n, other=0.0)
    kl.store(dst + offs, scale_by(v, 3.0), mask=offs < n)


def test_helper_functions_are_inlined():
    a = np.arange(10, dtype=np.float32)
    b = np.full(10, np.nan, np.float32)
    uses_helper[(1,)](a, b, 10, BLOCK=16)
    assert (b == a * 3).all()
    assert "func.call" not in uses_helper.ir("kiln")


@kiln.jit
def control_flow(dst, n, flag):
    # while with a carried scalar, if on a runtime scalar, nested for.
    i = 0
    total = 0
    while i < n:
        total += i
        i += 1
    if flag > 0:
        total = total * 2
    else:
        total = total - 1
    acc = kl.zeros((4,), kl.float32)
    for j in range(0, 3):
        for k in range(j, 3):
            acc = acc + 1.0
    kl.store(dst + kl.arange(0, 4), acc + total)


@pytest.mark.parametrize("n,flag", [(5, 1), (4, 0), (0, 1)])
def test_while_if_for(n, flag):
    out = np.full(4, np.nan, np.float32)
    control_flow[(1,)](out, n, flag)
    total = sum(range(n))
    total = total * 2 if flag > 0 else total - 1
    assert (out == total + 6).all()


@kiln.jit
def reductions(x, out_sum, out_max, out_min, out_arg, BLOCK: kl.constexpr):
    rows = kl.arange(0, 4)
    cols = kl.arange(0, BLOCK)
    t = kl.load(x + rows[:, None] * BLOCK + cols[None, :])
    kl.store(out_sum + rows, kl.sum(t, axis=1))
    kl.store(out_max + cols, kl.max(t, axis=0))
    kl.store(out_min + rows, kl.min(t, axis=1))
    kl.store(out_arg + rows, kl.argmax(t, axis=1))


def test_reductions_and_2d_pointer_tiles(rng):
    x = rng.standard_normal((4, 32)).astype(np.float32)
    s, mn = np.full(4, np.nan, np.float32), np.full(4, np.nan, np.float32)
    mx = np.full(32, np.nan, np.float32)
    am = np.full(4, -1, np.int32)
    reductions[(1,)](x, s, mx, mn, am, BLOCK=32)
    assert_close(s, x.astype(np.float64).sum(1), 1e-5, 1e-5)
    assert (mx == x.max(0)).all() and (mn == x.min(1)).all()
    assert (am == x.argmax(1)).all()


@kiln.jit
def math_ops(x, out, n, BLOCK: kl.constexpr):
    offs = kl.arange(0, BLOCK)
    v = kl.load(x + offs, mask=offs < n, other=1.0)
    r = kl.sigmoid(v) + kl.tanh(v) + kl.sqrt(kl.abs(v)) + kl.where(v > 0, v, -v)
    kl.store(out + offs, r, mask=offs < n)


def test_math(rng):
    x = rng.standard_normal(50).astype(np.float32)
    out = np.full(50, np.nan, np.float32)
    math_ops[(1,)](x, out, 50, BLOCK=64)
    d = x.astype(np.float64)
    assert_close(out, 1 / (1 + np.exp(-d)) + np.tanh(d) + np.sqrt(np.abs(d)) + np.abs(d), 1e-5, 1e-5)


@kiln.jit
def exp2_log(x, out, n, BLOCK: kl.constexpr):
    offs = kl.program_id(0) * BLOCK + kl.arange(0, BLOCK)
    m = offs < n
    v = kl.load(x + offs, mask=m, other=1.0)
    kl.store(out + offs, kl.exp2(v), mask=m)
    kl.store(out + n + offs, kl.log(v), mask=m)
    kl.store(out + 2 * n + offs, kl.log2(v), mask=m)


def ulps(got, ref):
    """|got - ref| in units of the float32 spacing at ref (subnormal
    spacing below 2^-126), for finite refs."""
    return np.abs(got.astype(np.float64) - ref) / np.spacing(ref.astype(np.float32)).astype(
        np.float64)


def test_exp2_and_log_across_the_float32_range(rng):
    """exp2 over [-150, 128] and log/log2 over all positive floats, against
    float64. exp2 was exp(x ln 2) (35 ulp at -100, integer arguments no
    powers of two) and the logs took subnormal inputs as 2^-126 (log2 of
    1e-45 was -126)."""
    ints = np.arange(-149, 128, dtype=np.float32)
    e = np.concatenate([rng.uniform(-150, 128, 20000), ints, [-160, 200, np.inf, -np.inf,
                                                              np.nan]]).astype(np.float32)
    bits = rng.integers(1, 0x7F800000, 20000, dtype=np.int64).astype(np.uint32)
    lg = np.concatenate([bits.view(np.float32), 2.0 ** np.arange(-149, 128.0),
                         [0, -1, np.inf, np.nan]]).astype(np.float32)
    x = np.zeros(max(len(e), len(lg)), np.float32) + 1
    n = len(x)
    out = np.full(3 * n, np.nan, np.float32)
    x[:len(e)] = e
    exp2_log[(kiln.cdiv(n, 256),)](x, out, n, BLOCK=256)
    ref = np.exp2(e.astype(np.float64))
    got = out[:len(e)]
    fin = np.isfinite(ref) & (np.abs(ref) < 3.4e38)
    assert ulps(got[fin], ref[fin]).max() <= 1.5
    assert (got[len(e) - 5 - len(ints):len(e) - 5] == 2.0 ** ints).all()  # exact
    assert list(got[-5:-1]) == [0, np.inf, np.inf, 0] and np.isnan(got[-1])
    out[:] = np.nan
    x[:] = 1
    x[:len(lg)] = lg
    exp2_log[(kiln.cdiv(n, 256),)](x, out, n, BLOCK=256)
    with np.errstate(divide="ignore", invalid="ignore"):
        for got, ref in ((out[n:n + len(lg)], np.log(lg.astype(np.float64))),
                         (out[2 * n:2 * n + len(lg)], np.log2(lg.astype(np.float64)))):
            fin = np.isfinite(ref) & (ref != 0)
            assert ulps(got[fin], ref[fin]).max() <= 4, ulps(got[fin], ref[fin]).max()
            assert np.isclose(got[fin], ref[fin], rtol=1e-6, atol=0).all()
            assert got[-4] == -np.inf and np.isnan(got[-3])      # 0 and -1
            assert got[-2] == np.inf and np.isnan(got[-1])       # inf and NaN


@kiln.jit
def spec(dst, n):
    kl.store(dst + kl.arange(0, 4), kl.zeros((4,), kl.float32) + n)


@kiln.jit(do_not_specialize=["n"])
def no_spec(dst, n):
    kl.store(dst + kl.arange(0, 4), kl.zeros((4,), kl.float32) + n)


def test_specialization_on_one_and_divisibility():
    out = np.zeros(4, np.float32)
    spec.cache.clear()
    for n in (1, 16, 32, 7, 9):
        spec[(1,)](out, n)
        assert (out == n).all()
    # n == 1, n % 16 == 0, and the rest: three specializations.
    assert len(spec.cache) == 3
    spec[(1,)](out, 1)
    assert "arith.constant 1" in spec.ir("kiln") or "constant" in spec.ir("kiln")
    no_spec.cache.clear()
    for n in (1, 16, 7):
        no_spec[(1,)](out, n)
        assert (out == n).all()
    assert len(no_spec.cache) == 1


def test_inspection_stages():
    out = np.zeros(4, np.float32)
    spec[(1,)](out, 3)
    assert "kiln.func @spec" in spec.ir("kiln")
    assert "llvm.func @kiln_entry_spec" in spec.ir("llvm-mlir")
    assert "define void @kiln_entry_spec" in spec.ir("llvm")
    assert "kiln_entry_spec:" in spec.asm
    with pytest.raises(ValueError, match="unknown stage"):
        spec.ir("nonsense")


def run_python(code, env, tmp_path):
    """Runs `code` from a file (kernels need readable source) in a new process."""
    e = dict(os.environ)
    e.update(env)
    script = tmp_path / f"script_{abs(hash(code))}.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run([sys.executable, str(script)], capture_output=True,
                          text=True, env=e, timeout=300)


def test_a_full_disk_while_compiling_is_an_error_not_an_exit(tmp_path):
    """The linker's object file written to a full TMPDIR was LLVM's fatal
    "IO failure on output stream": the application exited, and the
    temporary file stayed. (A file size limit stands for the full disk.)"""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = f"""
        import resource, signal
        import kiln
        from kiln import _kiln
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        src = open({os.path.join(os.path.dirname(os.path.dirname(HERE)), 'examples',
                                 'vector_add.mlir')!r}).read()
        resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))
        try:
            _kiln.JIT.create("host", "", 1).compile(src, "va.mlir")
            print("compiled")
        except Exception as e:
            print("error:", e)
        print("survived")
    """
    r = run_python(code, {"TMPDIR": str(tmp)}, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "error: cannot write the temporary file" in r.stdout and "survived" in r.stdout, \
        r.stdout + r.stderr
    assert list(tmp.iterdir()) == []


def test_kiln_dump_ir_works_from_python(tmp_path):
    code = """
        import numpy as np, kiln, kiln.language as kl
        @kiln.jit
        def k(dst):
            kl.store(dst + kl.arange(0, 4), kl.zeros((4,), kl.float32))
        k[(1,)](np.ones(4, np.float32))
    """
    r = run_python(code, {"KILN_DUMP_IR": "1", "KILN_CACHE_DIR": str(tmp_path)}, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "IR Dump After ConvertKilnToCPU" in r.stderr
    assert "LLVM IR after optimization" in r.stderr


def test_autotune_picks_and_remembers_across_processes(tmp_path):
    code = f"""
        import sys
        sys.path.insert(0, {os.path.join(os.path.dirname(os.path.dirname(HERE)), 'examples', 'python')!r})
        import numpy as np, matmul, kiln
        a = np.random.rand(70, 40).astype(np.float32); b = np.random.rand(40, 50).astype(np.float32)
        c = matmul.matmul(a, b)
        assert np.allclose(c, a @ b, rtol=1e-4, atol=1e-4)
        print("best", matmul.matmul_kernel.last_config.kwargs)
        print("compiles", kiln.cache_stats()["compiles"])
    """
    env = {"KILN_CACHE_DIR": str(tmp_path)}
    first = run_python(code, env, tmp_path)
    assert first.returncode == 0, first.stderr
    records = list((tmp_path / "autotune").glob("*.json"))
    assert len(records) == 1, records
    assert len(records) == 1
    table = json.loads(records[0].read_text())
    assert len(table) == 1
    second = run_python(code, env, tmp_path)
    assert second.returncode == 0, second.stderr
    best1 = [l for l in first.stdout.splitlines() if l.startswith("best")]
    best2 = [l for l in second.stdout.splitlines() if l.startswith("best")]
    assert best1 == best2
    # The second process benchmarked nothing: it compiled (from the disk cache)
    # only the winning configuration.
    assert "compiles 0" in second.stdout
    # A record of another shape (valid JSON) is a lost tuning result: it
    # raised a TypeError at every launch, in every later process.
    key = next(iter(table))
    for bad in ([1, 2], None, {key: "1"}, {key: 1.5}, {key: 99}, {key: True}):
        records[0].write_text(json.dumps(bad))
        again = run_python(code, env, tmp_path)
        assert again.returncode == 0, (bad, again.stderr)


def test_autotune_does_not_tune_on_an_empty_grid(tmp_path):
    """m = 0 (an expert without tokens): nothing runs, nothing is timed or
    recorded for the key; the first call with rows tunes."""
    code = f"""
        import sys
        sys.path.insert(0, {os.path.join(os.path.dirname(os.path.dirname(HERE)), 'examples', 'python')!r})
        import numpy as np, matmul, kiln
        tuner = matmul.matmul_kernel
        runs = []
        real = tuner.fn.run
        tuner.fn.run = lambda *a, **k: runs.append(k.get("grid")) or real(*a, **k)
        b = np.random.rand(40, 50).astype(np.float32)
        assert matmul.matmul(np.zeros((0, 40), np.float32), b).shape == (0, 50)
        assert len(runs) == 1 and not tuner.best, (runs, tuner.best)
        assert tuner.last_config is tuner.configs[0]
        tuner.key = ["n", "k"]  # the same key for any row count
        matmul.matmul(np.zeros((0, 40), np.float32), b)
        assert not tuner.best and len(runs) == 2
        a = np.random.rand(70, 40).astype(np.float32)
        assert np.allclose(matmul.matmul(a, b), a @ b, rtol=1e-4, atol=1e-4)
        assert len(tuner.best) == 1 and len(runs) > 3
        print("ok")
    """
    r = run_python(code, {"KILN_CACHE_DIR": str(tmp_path)}, tmp_path)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    records = list((tmp_path / "autotune").glob("*.json"))
    assert len(records) == 1 and len(json.loads(records[0].read_text())) == 1, records


def test_bundles_from_kilnc_run_through_the_runtime_only_module(tmp_path):
    import kiln._kiln_runtime as rt
    root = os.path.dirname(os.path.dirname(HERE))
    bundle = tmp_path / "add.kiln"
    subprocess.run([KILNC, os.path.join(root, "examples", "vector_add.mlir"), "-o", str(bundle)],
                   check=True)
    k = rt.load_bundle(str(bundle))
    assert k.name == "vector_add"
    assert [s[0] for s in k.signature] == ["x", "y", "out", "n"]
    n = 3000
    x, y = np.arange(n, dtype=np.float32), np.ones(n, np.float32)
    out = np.full(n, np.nan, np.float32)
    k.launch([x.ctypes.data, y.ctypes.data, out.ctypes.data, n], [3])
    assert (out == x + 1).all()
    with pytest.raises(TypeError, match="takes 4 arguments"):
        k.launch([x.ctypes.data], [1])
    with pytest.raises(ValueError, match="grid"):
        k.launch([x.ctypes.data, y.ctypes.data, out.ctypes.data, n], [])
    corrupt = tmp_path / "bad.kiln"
    data = bytearray(bundle.read_bytes())
    data[len(data) // 2] ^= 0xFF
    corrupt.write_bytes(bytes(data))
    with pytest.raises(rt.BundleError, match="CHECKSUM"):
        rt.load_bundle(str(corrupt))
    # (A BundleError is a LaunchError and a RuntimeError, as before it had
    # its own name; a launch that fails is a LaunchError only.)
    assert issubclass(rt.BundleError, rt.LaunchError) and issubclass(rt.LaunchError, RuntimeError)
    with pytest.raises(kiln.BundleError, match="CHECKSUM"):
        kiln.load_bundle(str(corrupt))
    b = kiln.load_bundle(str(bundle))
    out[:] = np.nan
    b[(3,)](x, y, out, n)
    assert (out == x + 1).all()
    # wait=False queues a GPU kernel; a CPU kernel has run when it returns.
    out[:] = np.nan
    b[(3,)](x, y - 2, out, n, wait=False)
    b.synchronize()
    assert (out == x - 1).all()
    with pytest.raises(TypeError):
        b[(3,)](x, y, out, n, sync=False)
    # An array of another element type, or an argument too many, is refused
    # (a float64 array was read as float32; an extra argument was dropped).
    out[:] = np.nan
    with pytest.raises(TypeError, match="argument 'x' of kernel 'vector_add' points to f32 "
                                        "elements, got an array of float64"):
        b[(3,)](x.astype(np.float64), y, out, n)
    # Another byte order: the kernel would read the machine's.
    with pytest.raises(TypeError, match="points to f32 elements, got an array of >f4"):
        b[(3,)](x.astype(">f4"), y, out, n)
    with pytest.raises(TypeError, match="takes 4 arguments, got 5"):
        b[(3,)](x, y, out, n, 12345)
    assert np.isnan(out).all()


SELECT_MLIR = """
kiln.func @select(%m: !kiln.ptr<i1> {kiln.name = "m"}, %out: !kiln.ptr<f32> {kiln.name = "out"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %vm = kiln.make_view %m, [%c8], [%c1] : !kiln.ptr<i1> -> !kiln.view<1xi1>
  %vo = kiln.make_view %out, [%c8], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %mask = kiln.load %vm[%c0] : !kiln.view<1xi1> -> tensor<8xi1>
  %one = arith.constant dense<1.0> : tensor<8xf32>
  %zero = arith.constant dense<0.0> : tensor<8xf32>
  %r = arith.select %mask, %one, %zero : tensor<8xi1>, tensor<8xf32>
  kiln.store %r, %vo[%c0] : tensor<8xf32> -> !kiln.view<1xf32>
  kiln.return
}
"""


def test_bundle_i1_arguments_take_bools_or_bytes_of_0_and_1(tmp_path):
    # The kernel reads an i1 element's low bit: bytes of 2 or 128 would be
    # false, where numpy counts them true. Bytes other than 0 and 1 are
    # refused; bools and bytes of 0 and 1 run.
    src = tmp_path / "select.mlir"
    src.write_text(SELECT_MLIR)
    bundle = tmp_path / "select.kiln"
    subprocess.run([KILNC, str(src), "-o", str(bundle)], check=True)
    b = kiln.load_bundle(str(bundle))
    bits = np.array([0, 1, 1, 0, 1, 0, 0, 1], np.uint8)
    for m in (bits.astype(bool), bits, bits.astype(np.int8)):
        out = np.full(8, np.nan, np.float32)
        b[(1,)](m, out)
        assert np.array_equal(out, bits), m.dtype
    out = np.full(8, np.nan, np.float32)
    with pytest.raises(ValueError, match="argument 'm' of kernel 'select' points to i1 "
                                         "elements, and its bytes hold values other than 0"):
        b[(1,)](np.array([0, 1, 2, 255, 4, 0, 3, 128], np.uint8), out)
    assert np.isnan(out).all()


def rewrite_manifest(bundle, edit):
    """The bundle with its manifest replaced by edit(manifest), its layout and
    checksum rewritten as docs/bundle-format.md says (what a tool that edits
    manifests would write)."""
    import struct
    data = bundle.read_bytes()
    manifest_size, code_offset = struct.unpack_from("<QQ", data, 24)
    manifest = edit(data[64:64 + manifest_size].decode()).encode()
    code = data[code_offset:]
    body = manifest + b"\0" * (-(64 + len(manifest)) % 8) + code
    h = 0xcbf29ce484222325
    for byte in body:
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    header = bytearray(data[:64])
    struct.pack_into("<QQQQQQ", header, 16, 64, len(manifest), len(body) - len(code) + 64,
                     len(code), h, 64 + len(body))
    out = bundle.with_name("edited.kiln")
    out.write_bytes(bytes(header) + body)
    return out


def vector_add_bundle(tmp_path, target):
    bundle = tmp_path / "add.kiln"
    root = os.path.dirname(os.path.dirname(HERE))
    subprocess.run([KILNC, os.path.join(root, "examples", "vector_add.mlir"), "--target",
                    target, "-o", str(bundle)], check=True)
    return bundle


def assert_edit_refused(bundle, old, new, line):
    """Loading the bundle with `old` replaced by `new` in its manifest fails,
    naming the first line that differs and the code's line."""
    import kiln._kiln_runtime as rt
    edited = rewrite_manifest(bundle, lambda m: m.replace(old, new, 1))
    assert edited.read_bytes() != bundle.read_bytes()
    with pytest.raises(rt.BundleError, match="BAD_BUNDLE: .*bundle 'vector_add': its manifest "
                                             "was changed after compiling; line [0-9]+ is '" + line):
        rt.load_bundle(str(edited))


@pytest.mark.parametrize("old,new,line", [
    # A pointer passed as a scalar: the kernel dereferenced the integer.
    ("arg x ptr f32", "arg x scalar i64", "arg x scalar i64', the code was compiled for 'arg x ptr f32"),
    # Another element type: buffers were checked against the wrong size.
    ("arg out ptr f32", "arg out ptr f16", "arg out ptr f16', the code was compiled for 'arg out ptr f32"),
    # A feature dropped: the code would run where its instructions do not.
    ("features avx avx2 fma f16c", "features", "features', the code was compiled for 'features avx avx2"),
    # An argument more: the kernel would not read it.
    ("arg n scalar i64\n", "arg n scalar i64\narg m scalar i64\n", "arg m scalar i64', the code was compiled for 'writes out"),
    # The last line dropped: the manifest is a prefix of the code's.
    ("writes out\n", "", "', the code was compiled for 'writes out"),
    # A long line is cut at 120 bytes, at a character's start: cut inside
    # the two bytes of "é", the message was invalid UTF-8 (empty in Python).
    ("writes out\n", "writes out\nx" + "a" * 118 + "é\n", "x" + "a" * 118 + r"\.\.\.',"),
])
def test_a_manifest_changed_after_compiling_is_refused(tmp_path, old, new, line):
    bundle = vector_add_bundle(tmp_path, "x86-64-avx2")
    # The same manifest, rewritten, is the same bundle (the rewrite is faithful).
    assert rewrite_manifest(bundle, lambda m: m).read_bytes() == bundle.read_bytes()
    assert_edit_refused(bundle, old, new, line)


@pytest.mark.parametrize("old,new,line", [
    # Another element type: the PTX entry's parameters are the same.
    ("arg out ptr f32", "arg out ptr f16", "arg out ptr f16', the code was compiled for 'arg out ptr f32"),
    # Less shared memory than the code uses.
    ("launch shared_bytes 8192", "launch shared_bytes 0",
     "launch shared_bytes 0', the code was compiled for 'launch shared_bytes 8192"),
    ("target sm_80", "target sm_90a", "target sm_90a', the code was compiled for 'target sm_80"),
])
def test_a_gpu_manifest_changed_after_compiling_is_refused(tmp_path, old, new, line):
    # PTX carries its manifest as comments; the check runs before the
    # driver is needed, so it runs here without a GPU.
    import kiln._kiln_runtime as rt
    bundle = vector_add_bundle(tmp_path, "sm_80")
    assert b"\n// kiln_manifest arg out ptr f32\n" in bundle.read_bytes()
    assert_edit_refused(bundle, old, new, line)
    # Unchanged, it goes on to the driver (none here: NO_DEVICE; a GPU: loads).
    try:
        rt.load_bundle(str(bundle))
    except rt.BundleError as e:
        assert "changed after compiling" not in str(e), e


@kiln.jit
def odd_shapes(a, b, out_dot, out_red, out_arg, m, n, BM: kl.constexpr, BK: kl.constexpr,
               BN: kl.constexpr):
    va = kl.make_view(a, (m, n), (n, 1))
    vb = kl.make_view(b, (n, m), (m, 1))
    ta = kl.load(va, offsets=(0, 0), shape=(BM, BK))
    tb = kl.load(vb, offsets=(0, 0), shape=(BK, BN))
    kl.store(kl.make_view(out_dot, (BM, BN), (BN, 1)), kl.dot(ta, tb), offsets=(0, 0))
    kl.store(out_red + kl.arange(0, BK), kl.max(ta, axis=0))
    kl.store(out_arg + kl.arange(0, BM), kl.argmax(ta, axis=1))


@pytest.mark.parametrize("bm,bk,bn", [(3, 5, 7), (1, 1, 1), (5, 3, 17), (6, 31, 33)])
def test_odd_tile_shapes(rng, bm, bk, bn):
    """Tiles whose dimensions are not multiples of the vector width (down to
    width 1) in dot, reductions and argmax."""
    a = rng.standard_normal((40, 40)).astype(np.float32)
    b = rng.standard_normal((40, 40)).astype(np.float32)
    od = np.full((bm, bn), np.nan, np.float32)
    orr = np.full(bk, np.nan, np.float32)
    oa = np.full(bm, -1, np.int32)
    odd_shapes[(1,)](a, b, od, orr, oa, 40, 40, BM=bm, BK=bk, BN=bn)
    assert_close(od, a[:bm, :bk].astype(np.float64) @ b[:bk, :bn], 1e-5, 1e-5)
    assert (orr == a[:bm, :bk].max(0)).all()
    assert (oa == a[:bm, :bk].argmax(1)).all()


@kiln.jit
def newton_sqrt(x, out, n, BLOCK: kl.constexpr):
    offs = kl.arange(0, BLOCK)
    a = kl.load(x + offs, mask=offs < n, other=1.0)
    guess = a
    it = 0
    while it < 30:
        guess = 0.5 * (guess + a / guess)
        it += 1
    kl.store(out + offs, guess, mask=offs < n)


def test_while_loops_carry_tiles(rng):
    x = rng.random(50).astype(np.float32) * 100 + 0.5
    out = np.full(50, np.nan, np.float32)
    newton_sqrt[(1,)](x, out, 50, BLOCK=64)
    assert_close(out, np.sqrt(x.astype(np.float64)), 1e-6, 1e-6)


@kiln.jit
def rotate_tiles(x, out, n, steps, flag, BLOCK: kl.constexpr):
    offs = kl.arange(0, BLOCK)
    m = offs < n
    a = kl.load(x + offs, mask=m, other=0.0)
    b = a + 1.0
    c = a + 2.0
    # Loop-carried tiles assigned in parallel: every yield reads a buffer that
    # another position writes.
    for i in range(0, steps):
        a, b, c = b, c, a
    i = 0
    while i < steps:
        a, b = b, a
        i += 1
    if flag > 0:
        a, c = c, a
    kl.store(out + offs, a * 100.0 + b * 10.0 + c, mask=m)


@pytest.mark.parametrize("steps,flag", [(0, 0), (1, 0), (2, 1), (5, 1), (7, 0)])
def test_loop_carried_tiles_are_assigned_in_parallel(rng, steps, flag):
    n = 37
    x = rng.random(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    rotate_tiles[(1,)](x, out, n, steps, flag, BLOCK=64)
    a, b, c = x.astype(np.float64), x + 1.0, x + 2.0
    for _ in range(steps):
        a, b, c = b, c, a
    for _ in range(steps):
        a, b = b, a
    if flag > 0:
        a, c = c, a
    assert_close(out, a * 100 + b * 10 + c, 1e-5, 1e-5)


@kiln.jit
def reshape_views(x, out, n, BLOCK: kl.constexpr, LOOP: kl.constexpr):
    # A reshape whose source dies there views the same bytes (no copy); one
    # whose source lives on copies, so writing the result in place (r, read
    # twice, is stored over the reshape's buffer) must not change t. In a
    # loop, reshaping carried tiles (block arguments) copies too: the yield
    # reassigns their buffers (here a swap).
    pid = kl.program_id(0)
    vx = kl.make_view(x, (n,), (1,))
    vo = kl.make_view(out, (4, n), (n, 1))
    t = kl.load(vx, offsets=(pid * BLOCK,), shape=(BLOCK,))
    r = kl.reshape(t, (1, BLOCK)) * 2.0
    kl.store(vo, r, offsets=(0, pid * BLOCK))
    kl.store(vo, r + kl.expand_dims(t, 0), offsets=(1, pid * BLOCK))
    a = kl.zeros((BLOCK,), kl.float32) + 1.0
    b = kl.zeros((1, BLOCK), kl.float32) + 2.0
    for _ in range(LOOP):
        a, b = kl.reshape(b, (BLOCK,)), kl.reshape(a, (1, BLOCK))
    kl.store(vo, kl.expand_dims(a + t, 0), offsets=(2, pid * BLOCK))
    kl.store(vo, b + kl.expand_dims(t, 0), offsets=(3, pid * BLOCK))


def test_reshape_views_and_copies(rng):
    n = 300
    x = rng.standard_normal(n).astype(np.float32)
    out = np.full((4, n), np.nan, np.float32)
    reshape_views[(kiln.cdiv(n, 128),)](x, out, n, BLOCK=128, LOOP=3)
    xd = x.astype(np.float64)
    assert_close(out[0], 2 * xd, 1e-6, 1e-6)
    assert_close(out[1], 3 * xd, 1e-6, 1e-6)
    assert_close(out[2], 2 + xd, 1e-6, 1e-6)
    assert_close(out[3], 1 + xd, 1e-6, 1e-6)


@kiln.jit
def overlapped_attention(q, k, v, out, seq, scale, D: kl.constexpr, BM: kl.constexpr,
                         BN: kl.constexpr, RAW: kl.constexpr):
    # f16 flash attention whose key loop asks for overlap: on sm_90a the
    # scores of the next key block are computed while this one's softmax
    # runs (docs/gpu.md, "Overlap"); elsewhere the hint changes nothing.
    # RAW: the row maximum is taken of the dot's result itself (the carried
    # scores read by a reduction, then by the exponentials).
    qb = kl.program_id(0)
    vq = kl.make_view(q, (seq, D), (D, 1))
    vk = kl.make_view(k, (seq, D), (D, 1))
    vv = kl.make_view(v, (seq, D), (D, 1))
    vo = kl.make_view(out, (seq, D), (D, 1))
    qt = kl.load(vq, offsets=(qb * BM, 0), shape=(BM, D))
    m_i = kl.full((BM,), float("-inf"), kl.float32)
    l_i = kl.zeros((BM,), kl.float32)
    acc = kl.zeros((BM, D), kl.float32)
    for start in kl.range(0, seq, BN, overlap=True):
        kt = kl.load(vk, offsets=(start, 0), shape=(BN, D))
        cols = start + kl.arange(0, BN)
        if RAW:
            s = kl.dot(qt, kl.trans(kt))
            m_new = kl.maximum(m_i, kl.max(s, axis=1) * scale)  # keys past seq read 0
            p = kl.where(cols[None, :] < seq, kl.exp(s * scale - m_new[:, None]), 0.0)
        else:
            s = kl.dot(qt, kl.trans(kt)) * scale
            s = kl.where(cols[None, :] < seq, s, float("-inf"))
            m_new = kl.maximum(m_i, kl.max(s, axis=1))
            p = kl.exp(s - m_new[:, None])
        alpha = kl.exp(m_i - m_new)
        l_i = l_i * alpha + kl.sum(p, axis=1)
        vt = kl.load(vv, offsets=(start, 0), shape=(BN, D))
        acc = kl.dot(kl.float16(p), vt, acc * alpha[:, None])
        m_i = m_new
    kl.store(vo, acc / l_i[:, None], offsets=(qb * BM, 0))


@pytest.mark.parametrize("raw", [False, True])
@pytest.mark.parametrize("seq", [1, 64, 200])
def test_overlapped_loop(rng, seq, raw):
    q, k, v = (rng.standard_normal((seq, 64)).astype(np.float16) for _ in range(3))
    out = np.full((seq, 64), np.nan, np.float32)
    overlapped_attention[(kiln.cdiv(seq, 64),)](q, k, v, out, seq, 0.125, D=64, BM=64, BN=64,
                                                RAW=raw)
    s = q.astype(np.float64) @ k.astype(np.float64).T * 0.125
    p = np.exp(s - s.max(1, keepdims=True))
    ref = (p / p.sum(1, keepdims=True)) @ v.astype(np.float64)
    assert_close(out, ref, 5e-3, 2e-3)  # P is rounded to f16 for the second dot
    assert "kiln.overlap" in overlapped_attention.ir("kiln")


@kiln.jit
def range_hint(out, n, FLAG: kl.constexpr):
    for i in kl.range(0, n, overlap=FLAG):
        kl.store(out + i * 4 + kl.arange(0, 4), kl.zeros((4,), kl.float32))


@kiln.jit
def range_keyword(out, n):
    for i in range(0, n, overlap=True):
        kl.store(out + i * 4 + kl.arange(0, 4), kl.zeros((4,), kl.float32))


@kiln.jit
def range_hint_not_constant(out, n):
    for i in kl.range(0, n, overlap=n):
        kl.store(out + i * 4 + kl.arange(0, 4), kl.zeros((4,), kl.float32))


@kiln.jit
def range_as_value(out, n):
    r = kl.range(0, n)
    kl.store(out + kl.arange(0, 4), kl.zeros((4,), kl.float32))


def test_range_keywords_are_checked():
    out = np.full(8, np.nan, np.float32)
    range_hint[(1,)](out, 2, FLAG=False)  # no dot: nothing to overlap
    assert (out == 0).all()
    with pytest.raises(kiln.CompilationError, match=r"range\(\) takes no keyword"):
        range_keyword[(1,)](out, 2)
    with pytest.raises(kiln.CompilationError, match="compile-time bool"):
        range_hint_not_constant[(1,)](out, 2)
    with pytest.raises(kiln.CompilationError, match="only supported as the iterable"):
        range_as_value[(1,)](out, 2)


def test_bundle_scalar_arguments_are_values(tmp_path):
    """Python numbers for f16/bf16 scalars are values, rounded once (1 was
    taken as the bits 0x0001, 6e-8, and 1.5 was refused); a np.uint16 is taken
    as bits. A float for an integer scalar, a bool, and a value the type
    cannot hold are refused instead of truncated or made infinite."""
    bundle = tmp_path / "sc.kiln"
    subprocess.run([KILNC, os.path.join(HERE, "Inputs", "scalar_args.mlir"), "-o", str(bundle)],
                   check=True)
    b = kiln.load_bundle(str(bundle))
    out = np.full(4, np.nan, np.float32)
    b[(1,)](out, 1, 1.5, 2.25, 7)
    assert list(out) == [1.0, 1.5, 2.25, 7.0]
    # 1 + 2^-8 + 2^-30 rounds up in bf16 (rounding to f32 first would tie to 1.0).
    b[(1,)](out, np.uint16(0x3c00), 1 + 2**-8 + 2**-30, np.float32(-1), np.int64(-3))
    assert list(out) == [1.0, 1 + 2**-7, -1.0, -3.0], out
    for args, what in (((1, 1.0, 1e300, 1), r"1e\+300 overflows it"),
                       ((1, 1.0, 1.0, 2.7), "got 2.7, not an integer"),
                       ((1, 1.0, 1.0, np.float32(2.7)), "not an integer"),
                       ((70000.0, 1, 1, 1), "70000.0 overflows it"),
                       ((1, 1e39, 1, 1), "overflows it"),
                       ((1, 1.0, 1.0, True), "got a bool")):
        with pytest.raises(TypeError, match=what):
            b[(1,)](out, *args)


def test_argument_names_in_bundles_and_c_headers(tmp_path):
    """Two arguments of one name made a bundle the runtime refused (argument
    1 unnamed is called arg1, like a kiln.name "arg1"): kilnc refuses it.
    Argument names that are C keywords or the launcher's own identifiers (rt,
    kernel, memset) made a C header that did not compile: the launcher's
    identifiers are prefixed and such names get a '_'."""
    import shutil
    root = os.path.dirname(os.path.dirname(HERE))
    dup = tmp_path / "dup.mlir"
    dup.write_text('kiln.func @dup(%a: !kiln.ptr<f32> {kiln.name = "arg1"}, '
                   '%b: !kiln.ptr<f32>) {\n  kiln.return\n}\n')
    r = subprocess.run([KILNC, str(dup), "-o", str(tmp_path / "dup.kiln")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "share the name 'arg1'" in r.stderr, r.stderr
    names = tmp_path / "names.mlir"
    names.write_text(
        'kiln.func @names(%a: !kiln.ptr<f32> {kiln.name = "rt"}, '
        '%b: !kiln.ptr<f32> {kiln.name = "int"}, %c: !kiln.ptr<f32> {kiln.name = "memset"}, '
        '%d: index {kiln.name = "kernel"}, %e: i32 {kiln.name = "gx"}, '
        '%f: i32 {kiln.name = "class"}) {\n  kiln.return\n}\n')
    header = tmp_path / "names.h"
    subprocess.run([KILNC, str(names), "--emit", "c-header", "-o", str(header)], check=True)
    src = tmp_path / "use.c"
    src.write_text('#include "names.h"\n')
    # The LLVM toolchain the build uses (scripts/install-deps.sh), as C and C++.
    llvm_bin = "/usr/lib/llvm-" + open(os.path.join(root, "cmake", "llvm-version")).read().strip()
    clang = shutil.which("clang", path=os.path.join(llvm_bin, "bin")) or shutil.which("cc")
    assert clang, "no C compiler to check the header with"
    for cc, lang in ((clang, "c"), (clang, "c++")):
        r = subprocess.run([cc, "-x", lang, "-fsyntax-only", "-Wall", "-Werror",
                            "-I", os.path.join(root, "runtime", "include"), str(src)],
                           capture_output=True, text=True)
        assert r.returncode == 0, (cc, r.stderr)


@kiln.jit
def claim_slots(expert, counts, slot, old_total, n, E, B: kl.constexpr):
    """MoE-style slot claiming: every token adds 1 to its expert's counter
    and gets the count before its addition as its slot."""
    offs = kl.program_id(0) * B + kl.arange(0, B)
    e = kl.load(expert + offs, mask=offs < n, other=0)
    view = kl.make_view(counts, (E,), (1,))
    ones = kl.where(offs < n, 1, 0)
    # One token at a time: a one-element tile at its expert's counter.
    for i in range(B):
        one = kl.sum(kl.where(kl.arange(0, B) == i, ones, 0))
        ei = kl.sum(kl.where(kl.arange(0, B) == i, e, 0))
        got = kl.atomic_add(view, kl.full((1,), 1, kl.int32) * one, offsets=(ei,))
        kl.store(slot + kl.program_id(0) * B + i + kl.arange(0, 1),
                 got, mask=kl.program_id(0) * B + i + kl.arange(0, 1) < n)
    # A whole tile, partly outside the view: those elements read 0.
    t = kl.make_view(old_total, (3,), (1,))
    kl.store(old_total + 3 + kl.program_id(0) * 4 + kl.arange(0, 4),
             kl.atomic_add(t, kl.full((4,), 2.5, kl.float32), offsets=(0,)))


def test_atomic_add_returns_the_values_it_read(rng):
    """kl.atomic_add returns what each addition read: slots claimed from
    counters are a permutation of 0..count-1 per expert, and elements outside
    the view read 0 (and add nothing)."""
    n, E, B = 37, 5, 8
    expert = rng.integers(0, E, n).astype(np.int32)
    counts = np.zeros(E, np.int32)
    slot = np.full(n, -7, np.int32)
    grid = (n + B - 1) // B
    totals = np.full(3 + 4 * grid, np.nan, np.float32)
    totals[:3] = 0
    claim_slots[(grid,)](expert, counts, slot, totals, n, E, B=B)
    assert (counts == np.bincount(expert, minlength=E)).all()
    for e in range(E):
        assert sorted(slot[expert == e].tolist()) == list(range(counts[e]))
    # Each program read 2.5 * (programs before it) in the three elements it
    # added to, in some order, and 0 for the fourth (outside the view).
    assert (totals[:3] == 2.5 * grid).all()
    reads = totals[3:].reshape(grid, 4)
    assert (reads[:, 3] == 0).all()
    for k in range(3):
        assert sorted(reads[:, k].tolist()) == [2.5 * p for p in range(grid)]


# Triton-style pointer arithmetic over 2-D and 3-D tiles: offsets built from
# aranges by +, -, * with scalars and [:, None] broadcasts, under masks that
# bound each index (`rows[:, None] < m`, `&` of those, <=, >), are view
# accesses (cp.async on GPUs, vector code on CPUs) instead of per-element
# gathers of an int64 index tile.

@kiln.jit
def strided_copy(x, x0, o, m, n, sxm, sxn, ldo, BM: kl.constexpr, BN: kl.constexpr):
    rm = kl.program_id(0) * BM + kl.arange(0, BM)
    rn = kl.program_id(1) * BN + kl.arange(0, BN)
    mask = (rm[:, None] < m) & (n > rn[None, :])
    t = kl.load(x + x0 + rm[:, None] * sxm + rn[None, :] * sxn, mask=mask, other=-7.0)
    kl.store(o + rm[:, None] * ldo + rn[None, :], t * 2.0, mask=mask)


@kiln.jit
def row_masked_shift(x, o, m, BM: kl.constexpr, D: kl.constexpr):
    # Rows bounded only (m - 1 >= rows - 1, the columns unmasked), an offset
    # pointer first, a subtraction in the offsets.
    rows = kl.program_id(0) * BM + kl.arange(1, BM + 1)
    cols = kl.arange(0, D)
    src = x + D
    t = kl.load(src + (rows[:, None] - 1) * D + cols[None, :] - D,
                mask=m - 1 >= rows[:, None] - 1)
    kl.store(o + (rows - 1)[:, None] * D + cols[None, :], t + 1.0, mask=rows[:, None] <= m)


@kiln.jit
def copy3d(x, o, a, b, c, BA: kl.constexpr, BB: kl.constexpr, BC: kl.constexpr):
    i = kl.arange(0, BA)
    j = kl.program_id(0) * BB + kl.arange(0, BB)
    k = kl.arange(0, BC)
    offs = i[:, None, None] * (b * c) + j[None, :, None] * c + k[None, None, :]
    mask = (i[:, None, None] < a) & (j[None, :, None] < b) & (k[None, None, :] < c)
    kl.store(o + offs, kl.load(x + offs, mask=mask, other=0.0) - 3.0, mask=mask)


@kiln.jit
def flat_masked_copy(x, o, m, n, BM: kl.constexpr, BN: kl.constexpr):
    # A mask on the flat offsets bounds no single index: a gather.
    offs = kl.arange(0, BM)[:, None] * n + kl.arange(0, BN)[None, :]
    kl.store(o + offs, kl.load(x + offs, mask=offs < m * n, other=5.0), mask=offs < m * n)


def test_strided_pointer_tiles_are_view_accesses(rng):
    m, n = 37, 45
    src = rng.standard_normal((m, n)).astype(np.float32)
    ldo = n + 5
    grid = (kiln.cdiv(m, 16), kiln.cdiv(n, 32))
    # Unit inner stride (specialized to the constant 1), then a transposed
    # source (a runtime inner stride), then the rows stored in reverse and
    # read with a negative runtime stride from the last one's offset.
    cases = [(src, 0, n, 1), (np.ascontiguousarray(src.T), 0, 1, m),
             (np.ascontiguousarray(src[::-1]), (m - 1) * n, -n, 1)]
    for x, x0, sxm, sxn in cases:
        o = np.full((m + 3, ldo), np.nan, np.float32)
        strided_copy[grid](x, x0, o, m, n, sxm, sxn, ldo, BM=16, BN=32)
        assert_close(o[:m, :n], src.astype(np.float64) * 2, 0, 0)
        assert np.isnan(o[m:]).all() and np.isnan(o[:, n:]).all()  # masked off: unwritten
        ir = strided_copy.ir("kiln")
        assert "kiln.gather" not in ir and "kiln.scatter" not in ir, ir
        assert "!kiln.view<3xf32>" in ir

    D = 24
    x = rng.standard_normal((m, D)).astype(np.float32)
    o = np.full((m + 4, D), np.nan, np.float32)
    row_masked_shift[(kiln.cdiv(m, 16),)](x, o, m, BM=16, D=D)
    assert_close(o[:m], x.astype(np.float64) + 1, 1e-6, 1e-6)
    assert np.isnan(o[m:]).all()
    assert "kiln.gather" not in row_masked_shift.ir("kiln")

    a, b, c = 3, 10, 13
    x3 = rng.standard_normal((a, b, c)).astype(np.float32)
    o3 = np.full((a, b, c), np.nan, np.float32)
    copy3d[(kiln.cdiv(b, 4),)](x3, o3, a, b, c, BA=4, BB=4, BC=16)
    assert_close(o3, x3.astype(np.float64) - 3, 1e-6, 1e-6)
    # (Offsets with no scalar part: a view of the tile's rank, no reshape.)
    ir = copy3d.ir("kiln")
    assert "!kiln.view<3xf32>" in ir and "kiln.reshape" not in ir, ir

    x = rng.standard_normal((5, 7)).astype(np.float32)
    o = np.full(8 * 8, np.nan, np.float32)
    flat_masked_copy[(1,)](x, o, 5, 7, BM=8, BN=8)
    assert_close(o[:35], x.reshape(-1).astype(np.float64), 0, 0)
    assert np.isnan(o[35:]).all()
    assert "kiln.gather" in flat_masked_copy.ir("kiln")


@kiln.jit
def narrow_index_mask(x, o, BLOCK: kl.constexpr):
    # An int8 index wraps past 127, so its mask is no bound on the rows: the
    # access must follow the wrapped values (a gather), not `rows < 100`.
    r = kl.arange(0, BLOCK).to(kl.int8)
    rows = kl.arange(0, BLOCK)
    offs = rows[:, None] * 4 + kl.arange(0, 4)[None, :]
    kl.store(o + offs, kl.load(x + offs, mask=r[:, None] < 100, other=-1.0))


def test_narrow_integer_masks_are_not_bounds():
    x = np.arange(256 * 4, dtype=np.float32).reshape(256, 4)
    o = np.full_like(x, np.nan)
    narrow_index_mask[(1,)](x, o, BLOCK=256)
    keep = (np.arange(256).astype(np.int8) < 100)[:, None]
    assert np.array_equal(o, np.where(keep, x, -1.0))


# Scans: kl.cumsum / cummax / cummin and Triton's associative_scan (and
# tl.reduce) with the combiners Kiln has, along either axis of odd-sized
# tiles, forwards and reversed, on every target (the GPU target splits each
# line into per-lane chunks joined by xor shuffles).

@kiln.jit
def scan_rows(x, o, m, n, KIND: kl.constexpr, AXIS: kl.constexpr, REV: kl.constexpr,
              BM: kl.constexpr, BN: kl.constexpr):
    rm = kl.arange(0, BM)
    rn = kl.arange(0, BN)
    mask = (rm[:, None] < m) & (rn[None, :] < n)
    t = kl.load(x + rm[:, None] * n + rn[None, :], mask=mask, other=0)
    if KIND == 0:
        r = kl.cumsum(t, axis=AXIS, reverse=REV)
    elif KIND == 1:
        r = kl.cummax(t, AXIS, REV)
    else:
        r = kl.cummin(t, axis=AXIS, reverse=REV)
    kl.store(o + rm[:, None] * n + rn[None, :], r, mask=mask)


def scan_reference(x, kind, axis, reverse):
    x = np.asarray(x, np.float64) if x.dtype.kind == "f" else np.asarray(x, np.int64)
    if reverse:
        x = np.flip(x, axis)
    r = {0: np.cumsum, 1: np.maximum.accumulate, 2: np.minimum.accumulate}[kind](x, axis=axis)
    return np.flip(r, axis) if reverse else r


@pytest.mark.parametrize("kind", [0, 1, 2])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
def test_scans_along_either_axis(rng, kind, axis, reverse):
    m, n, BM, BN = 13, 37, 16, 64  # BN > 32 lanes: lanes own chunks of 2
    x = rng.standard_normal((m, n)).astype(np.float32)
    o = np.full((m, n), np.nan, np.float32)
    scan_rows[(1,)](x, o, m, n, KIND=kind, AXIS=axis, REV=reverse, BM=BM, BN=BN)
    # The padding (0) lies after the data in scan order unless reversed:
    # a reversed max/min scan sees it first.
    xp = np.zeros((BM, BN), np.float32)
    xp[:m, :n] = x
    ref = scan_reference(xp, kind, axis, reverse)[:m, :n]
    assert_close(o, ref, rtol=1e-5, atol=1e-5)


@kiln.jit
def scan_1d(x, o, n, KIND: kl.constexpr, REV: kl.constexpr, B: kl.constexpr):
    i = kl.arange(0, B)
    t = kl.load(x + i, mask=i < n, other=0)
    if KIND == 0:
        r = kl.cumsum(t, 0, reverse=REV)
    elif KIND == 1:
        r = kl.cummax(t, 0, reverse=REV)
    else:
        r = kl.cummin(t, 0, reverse=REV)
    kl.store(o + i, r, mask=i < n)


@pytest.mark.parametrize("B,n", [(1, 1), (8, 5), (128, 100), (1024, 1000)])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64, np.int16])
def test_one_dimensional_scans_and_integer_types(rng, B, n, dtype):
    for kind in (0, 1, 2):
        for rev in (False, True):
            x = rng.integers(-1000, 1000, n).astype(dtype)
            out_t = np.int32 if (kind == 0 and dtype == np.int16) else dtype
            o = np.full(n, -12345, out_t)
            scan_1d[(1,)](x, o, n, KIND=kind, REV=rev, B=B)
            xp = np.zeros(B, dtype)
            xp[:n] = x
            ref = scan_reference(xp, kind, 0, rev)[:n]
            assert (o == ref).all(), (kind, rev, o[:8], ref[:8])


@kiln.jit
def add_fn(a, b):
    return a + b


@kiln.jit
def max_fn(a, b):
    return kl.maximum(b, a)


@kiln.jit
def mul_fn(a, b):
    return a * b


@kiln.jit
def sub_fn(a, b):
    return a - b


@kiln.jit
def expert_offsets(counts, starts, totals, E: kl.constexpr):
    # MoE routing: per-expert token counts become the start of each expert's
    # rows (an exclusive scan), the largest count and the total.
    e = kl.arange(0, E)
    c = kl.load(counts + e, mask=e < 7, other=0)
    incl = kl.associative_scan(c, 0, add_fn)
    kl.store(starts + e, incl - c, mask=e < 7)
    kl.store(totals + e, kl.associative_scan(c, 0, max_fn, reverse=True), mask=e < 7)
    kl.store(totals + 7, kl.reduce(c, 0, add_fn))
    kl.store(totals + 8, kl.reduce(c, 0, max_fn))


def test_associative_scan_and_reduce_with_combine_functions(rng):
    counts = rng.integers(0, 50, 7).astype(np.int32)
    starts = np.full(7, -1, np.int32)
    totals = np.full(9, -1, np.int32)
    expert_offsets[(1,)](counts, starts, totals, E=8)
    assert (starts == np.concatenate([[0], np.cumsum(counts)[:-1]])).all()
    assert (totals[:7] == np.maximum.accumulate(counts[::-1])[::-1]).all()
    assert totals[7] == counts.sum() and totals[8] == counts.max()


def test_scan_errors_name_the_problem():
    @kiln.jit
    def bad_combine(x):
        t = kl.load(x + kl.arange(0, 8))
        kl.store(x + kl.arange(0, 8), kl.associative_scan(t, 0, mul_fn))

    @kiln.jit
    def sub_fn_scan(x):
        t = kl.load(x + kl.arange(0, 8))
        kl.store(x + kl.arange(0, 8), kl.associative_scan(t, 0, sub_fn))

    with pytest.raises(kiln.CompilationError, match="a - b is not associative"):
        sub_fn_scan[(1,)](np.zeros(8, np.float32))

    @kiln.jit
    def bad_axis(x):
        t = kl.load(x + kl.arange(0, 8))
        kl.store(x + kl.arange(0, 8), kl.cumsum(t, axis=1))

    with pytest.raises(kiln.CompilationError, match="axis 1 is out of range"):
        bad_axis[(1,)](np.zeros(8, np.float32))

    @kiln.jit
    def bad_reverse(x, r):
        t = kl.load(x + kl.arange(0, 8))
        kl.store(x + kl.arange(0, 8), kl.cumsum(t, reverse=r))

    with pytest.raises(kiln.CompilationError, match="reverse= must be a compile-time bool"):
        bad_reverse[(1,)](np.zeros(8, np.float32), 1)


def test_float_scans_propagate_nan_and_bf16_sums_widen(rng):
    x = rng.standard_normal(50).astype(np.float32)
    x[20] = np.nan
    for kind in (1, 2):
        o = np.zeros(50, np.float32)
        scan_1d[(1,)](x, o, 50, KIND=kind, REV=False, B=64)
        assert not np.isnan(o[:20]).any() and np.isnan(o[20:]).all()


# Atomics through pointers, as Triton writes them: a histogram of arbitrary
# bins (kiln.scatter_add: every addition to a repeated bin lands), slots
# claimed from counters, 1-D and 2-D tiles of contiguous or strided pointers
# (view atomics), and a scalar counter.

@kiln.jit
def histogram(bins, hist, slot, n, B: kl.constexpr):
    offs = kl.program_id(0) * B + kl.arange(0, B)
    m = offs < n
    b = kl.load(bins + offs, mask=m, other=0)
    s = kl.atomic_add(hist + b, 1, mask=m)
    kl.store(slot + offs, s, mask=m)


def test_pointer_atomics_histogram_and_claimed_slots(rng):
    n, NB, B = 1000, 13, 128
    bins = rng.integers(0, NB, n).astype(np.int32)
    hist = np.zeros(NB + 3, np.int32)  # 3 guard bins nothing may touch
    slot = np.full(n, -7, np.int32)
    histogram[(kiln.cdiv(n, B),)](bins, hist, slot, n, B=B)
    assert "kiln.scatter_add" in histogram.ir("kiln")
    assert (hist[:NB] == np.bincount(bins, minlength=NB)).all() and (hist[NB:] == 0).all()
    for e in range(NB):
        assert sorted(slot[bins == e].tolist()) == list(range(hist[e]))


@kiln.jit
def accumulate_2d(x, out, m, n, P: kl.constexpr, BM: kl.constexpr, BN: kl.constexpr):
    # P programs add their slice of x into the same out (split-K style).
    p = kl.program_id(0)
    rm = kl.arange(0, BM)
    rn = kl.arange(0, BN)
    mask = (rm[:, None] < m) & (rn[None, :] < n)
    t = kl.load(x + p * m * n + rm[:, None] * n + rn[None, :], mask=mask, other=0.0)
    kl.atomic_add(out + rm[:, None] * n + rn[None, :], t, mask=mask)


@kiln.jit
def accumulate_1d(x, out, n, B: kl.constexpr):
    offs = kl.arange(0, B)
    t = kl.load(x + kl.program_id(0) * n + offs, mask=offs < n, other=0.0)
    kl.atomic_add(out + offs, t, mask=offs < n, sem="relaxed", scope="gpu")


@kiln.jit
def count_programs(counter, order):
    old = kl.atomic_add(counter, 1)
    kl.store(order + kl.program_id(0), old)


def test_pointer_atomics_on_views_and_scalars(rng):
    m, n, P = 11, 37, 5
    x = rng.standard_normal((P, m, n))
    out = np.zeros((m + 1, n))  # a guard row
    accumulate_2d[(P,)](x, out, m, n, P=P, BM=16, BN=64)
    ir = accumulate_2d.ir("kiln")
    assert "kiln.atomic_add" in ir and "kiln.scatter_add" not in ir and "kiln.gather" not in ir
    assert_close(out[:m], x.sum(0), rtol=1e-12, atol=1e-12)
    assert (out[m] == 0).all()

    x1 = rng.standard_normal((P, 100)).astype(np.float32)
    out1 = np.zeros(101, np.float32)
    accumulate_1d[(P,)](x1, out1, 100, B=128)
    assert "kiln.atomic_add" in accumulate_1d.ir("kiln")
    assert_close(out1[:100], x1.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)
    assert out1[100] == 0

    for dt in (np.int32, np.int64):
        counter = np.zeros(2, dt)
        order = np.full(9, -1, dt)
        count_programs[(9,)](counter, order)
        assert counter[0] == 9 and counter[1] == 0
        assert sorted(order.tolist()) == list(range(9))


def test_pointer_atomic_errors():
    @kiln.jit
    def half(h):
        kl.atomic_add(h + kl.arange(0, 8), 1.0)

    with pytest.raises(kiln.CompilationError, match="supports float32, float64, int32 and int64"):
        half[(1,)](np.zeros(8, np.float16))

    @kiln.jit
    def offs(h):
        kl.atomic_add(h + kl.arange(0, 8), 1.0, offsets=(0,))

    with pytest.raises(kiln.CompilationError, match="offsets= is for atomic_add into a view"):
        offs[(1,)](np.zeros(8, np.float32))

    @kiln.jit
    def sem(h):
        kl.atomic_add(h + kl.arange(0, 8), 1.0, sem="sequential")

    with pytest.raises(kiln.CompilationError, match="sem=.... must be 'relaxed'"):
        sem[(1,)](np.zeros(8, np.float32))

    @kiln.jit
    def sys_scope(h):
        kl.atomic_add(h + kl.arange(0, 8), 1.0, scope="sys")

    with pytest.raises(kiln.CompilationError, match="scope='sys'. is not supported"):
        sys_scope[(1,)](np.zeros(8, np.float32))


@kiln.jit
def last_program_sums(x, partial, count, out, n, P: kl.constexpr, B: kl.constexpr):
    # Each program publishes its partial sums, then counts itself done; the
    # one whose addition reads P - 1 sums every program's partials (the
    # atomic orders the stores before it and the loads after it).
    p = kl.program_id(0)
    offs = kl.arange(0, B)
    t = kl.load(x + p * n + offs, mask=offs < n, other=0.0)
    kl.store(partial + p * B + offs, t * 2.0)
    done = kl.atomic_add(count, 1)
    if done == P - 1:
        acc = kl.zeros((B,), kl.float32)
        for q in range(0, P):
            acc += kl.load(partial + q * B + offs)
        kl.store(out + offs, acc, mask=offs < n)


def test_atomic_counter_publishes_partial_results(rng):
    P, n, B = 6, 50, 64
    x = rng.standard_normal((P, n)).astype(np.float32)
    partial = np.full((P, B), np.nan, np.float32)
    count = np.zeros(1, np.int32)
    out = np.full(n, np.nan, np.float32)
    last_program_sums[(P,)](x, partial, count, out, n, P=P, B=B)
    assert count[0] == P
    assert_close(out, 2.0 * x.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)


@kiln.jit
def dtype_queries(x, o, n, B: kl.constexpr):
    # Triton's idioms: the element type of a pointer, dtype queries at
    # compile time.
    offs = kl.arange(0, B)
    t = kl.load(x + offs, mask=offs < n, other=0)
    if x.dtype.element_ty.is_floating():
        r = t * 0.5
    else:
        r = t * 2
    kl.static_assert(o.dtype.element_ty.primitive_bitwidth == 32)
    kl.static_assert(kl.float16.is_fp16() and not kl.bfloat16.is_fp16() and kl.int8.is_int())
    kl.store(o + offs, r.to(o.dtype.element_ty), mask=offs < n)


def test_triton_dtype_queries():
    x = np.arange(10, dtype=np.float64)
    o = np.zeros(10, np.float32)
    dtype_queries[(1,)](x, o, 10, B=16)
    assert (o == x * 0.5).all()
    xi = np.arange(10, dtype=np.int16)
    oi = np.zeros(10, np.int32)
    dtype_queries[(1,)](xi, oi, 10, B=16)
    assert (oi == xi * 2).all()
    with pytest.raises(kiln.CompilationError, match="primitive_bitwidth == 32"):
        dtype_queries[(1,)](x, np.zeros(10, np.float64), 10, B=16)



# A Triton-style K loop: the offsets' indices (`rm`, `kk + rk`) are bounded
# by the masks at the same origins, so each access is a view of the array's
# sizes (m, k) at (pid * BM, kk): no reshape, and a view the loop does not
# change (kiln-hoist-invariants moves it before the loop; GPUs pipeline its
# loads, by TMA on sm_90a: test/Target/GPU/gpu-pipeline-pid.mlir). Masks
# written against other origins (`rk < k - kk`) take the flattened view.

@kiln.jit
def triton_matmul(a, b, c, m, n, k, sam, sbk, scm, OTHER_ORIGIN: kl.constexpr,
                  BM: kl.constexpr, BN: kl.constexpr, BK: kl.constexpr):
    rm = kl.program_id(1) * BM + kl.arange(0, BM)
    rn = kl.program_id(0) * BN + kl.arange(0, BN)
    rk = kl.arange(0, BK)
    acc = kl.zeros((BM, BN), kl.float32)
    for kk in range(0, k, BK):
        if OTHER_ORIGIN:
            ka = (rm[:, None] < m) & (rk[None, :] < k - kk)
        else:
            ka = (rm[:, None] < m) & ((kk + rk)[None, :] < k)
        ta = kl.load(a + rm[:, None] * sam + (kk + rk)[None, :], mask=ka, other=0.0)
        tb = kl.load(b + (kk + rk)[:, None] * sbk + rn[None, :],
                     mask=((kk + rk)[:, None] < k) & (rn[None, :] < n), other=0.0)
        acc = kl.dot(ta, tb, acc)
    kl.store(c + rm[:, None] * scm + rn[None, :], acc, mask=(rm[:, None] < m) & (rn[None, :] < n))


@pytest.mark.parametrize("other_origin", [False, True])
def test_triton_style_k_loop_accesses_are_views_at_origins(rng, other_origin):
    m, n, k = 45, 37, 70
    a = rng.standard_normal((m, k + 3)).astype(np.float32)  # padded rows
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.full((m, n + 2), np.nan, np.float32)
    BM, BN, BK = 16, 32, 16
    triton_matmul[(kiln.cdiv(n, BN), kiln.cdiv(m, BM))](
        a, b, c, m, n, k, k + 3, n, n + 2, OTHER_ORIGIN=other_origin, BM=BM, BN=BN, BK=BK)
    ref = a[:, :k].astype(np.float64) @ b.astype(np.float64)
    assert_close(c[:, :n], ref, 1e-4, 1e-4)
    assert np.isnan(c[:, n:]).all()
    ir = triton_matmul.ir("kiln")
    assert "kiln.gather" not in ir and "kiln.scatter" not in ir
    assert ("!kiln.view<3xf32>" in ir) == other_origin, ir
    assert ir.count("!kiln.view<2xf32>") >= (2 if other_origin else 3)


@kiln.jit
def shifted_rows(x, o, m, n, start, BM: kl.constexpr, BN: kl.constexpr):
    # Row index r starts at `start` (here -1): row -1 of x + n is row 0 of
    # x, which the kernel may read. A view at origin r would drop it (a
    # view's dimension starts at 0): the access must keep the flat offset.
    r = start + kl.arange(0, BM)
    c = kl.arange(0, BN)
    t = kl.load(x + n + r[:, None] * n + c[None, :],
                mask=(r[:, None] < m - 1) & (c[None, :] < n), other=-5.0)
    rm = kl.arange(0, BM)
    kl.store(o + rm[:, None] * n + c[None, :], t, mask=(rm[:, None] < m) & (c[None, :] < n))


@kiln.jit
def shifted_rows_const(x, o, m, n, BM: kl.constexpr, BN: kl.constexpr):
    r = kl.arange(0, BM) - 1
    c = kl.arange(0, BN)
    t = kl.load(x + n + r[:, None] * n + c[None, :],
                mask=(r[:, None] < m - 1) & (c[None, :] < n), other=-5.0)
    rm = kl.arange(0, BM)
    kl.store(o + rm[:, None] * n + c[None, :], t, mask=(rm[:, None] < m) & (c[None, :] < n))


def test_negative_indices_inside_the_array_are_read(rng):
    m, n = 13, 20
    x = rng.standard_normal((m, n)).astype(np.float32)
    for run in (lambda o: shifted_rows[(1,)](x, o, m, n, -1, BM=16, BN=32),
                lambda o: shifted_rows_const[(1,)](x, o, m, n, BM=16, BN=32)):
        o = np.full((m, n), np.nan, np.float32)
        run(o)
        assert_close(o, x, 0, 0)


# Triton's hints and conveniences, as ported kernels use them.

@kiln.jit
def triton_idioms(x, o, idx, m, n, BM: kl.constexpr, BN: kl.constexpr):
    rm = kl.max_contiguous(kl.multiple_of(kl.arange(0, BM), BM), BM)
    rn = kl.max_constancy(kl.arange(0, BN), 1)
    mask = (rm[:, None] < m) & (rn[None, :] < n)
    t = kl.load(x + rm[:, None] * n + rn[None, :], mask=mask, other=-1e30)
    kl.debug_barrier()
    mx, am = kl.max(t, axis=1, return_indices=True, keep_dims=True)   # (BM, 1)
    s = kl.sum(kl.where(mask, t - mx, 0.0), axis=1, keep_dims=True)
    mn = kl.min(t, 1, keep_dims=True)
    acc = kl.zeros_like(t)
    for i in kl.static_range(3):
        acc += t * (i + 1)          # i is a constexpr: 1 + 2 + 3 = 6
    r = kl.clamp(acc, -3.0, 3.0) + s * 0.0 + mn * 0.0
    kl.store(o + rm[:, None] * n + rn[None, :], r, mask=mask)
    kl.store(idx + rm[:, None] + kl.zeros_like(rn)[None, :], am + kl.zeros_like(rn)[None, :],
             mask=(rm[:, None] < m) & (rn[None, :] < 1))
    flat = kl.ravel(kl.permute(kl.view(t, BN, BM), 1, 0))
    kl.static_assert(flat.shape[0] == BM * BN)
    kl.static_assert(kl.argmax(t, 1, keep_dims=True).shape == (BM, 1))


def test_triton_hints_and_conveniences(rng):
    m, n = 13, 20
    x = rng.standard_normal((m, n)).astype(np.float32)
    o = np.full((m, n), np.nan, np.float32)
    idx = np.full(m, -1, np.int32)
    triton_idioms[(1,)](x, o, idx, m, n, BM=16, BN=32)
    assert_close(o, np.clip(6.0 * x.astype(np.float64), -3, 3), 1e-6, 1e-6)
    assert (idx == np.argmax(x, axis=1)).all()
    with pytest.raises(kiln.CompilationError, match="tie_break_left=True"):
        @kiln.jit
        def right(x):
            t = kl.load(x + kl.arange(0, 8))
            kl.store(x + kl.arange(0, 8), t + kl.argmax(t, 0, tie_break_left=False))
        right[(1,)](np.zeros(8, np.float32))


# Pointers advanced inside loops and branches, as Triton's tutorials write
# them (`a_ptrs += BLOCK_K * stride_ak`): the construct carries the scalar
# shift, the pointer tile keeps its strided form (view accesses, no gather).

@kiln.jit
def tutorial_matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                    stride_cm, stride_cn, WRAP: kl.constexpr, BLOCK_SIZE_M: kl.constexpr,
                    BLOCK_SIZE_N: kl.constexpr, BLOCK_SIZE_K: kl.constexpr,
                    GROUP_SIZE_M: kl.constexpr):
    pid = kl.program_id(axis=0)
    num_pid_m = kl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = kl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    if WRAP:
        offs_am = (pid_m * BLOCK_SIZE_M + kl.arange(0, BLOCK_SIZE_M)) % M
        offs_bn = (pid_n * BLOCK_SIZE_N + kl.arange(0, BLOCK_SIZE_N)) % N
    else:
        offs_am = pid_m * BLOCK_SIZE_M + kl.arange(0, BLOCK_SIZE_M)
        offs_bn = pid_n * BLOCK_SIZE_N + kl.arange(0, BLOCK_SIZE_N)
    offs_k = kl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = kl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=kl.float32)
    for k in range(0, kl.cdiv(K, BLOCK_SIZE_K)):
        a = kl.load(a_ptrs, mask=(offs_am[:, None] < M) & (offs_k[None, :] < K - k * BLOCK_SIZE_K),
                    other=0.0)
        b = kl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_SIZE_K) & (offs_bn[None, :] < N),
                    other=0.0)
        accumulator = kl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    offs_cm = pid_m * BLOCK_SIZE_M + kl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + kl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    kl.store(c_ptrs, accumulator, mask=c_mask)


@pytest.mark.parametrize("wrap", [False, True])
def test_triton_tutorial_matmul_with_advanced_pointers(rng, wrap):
    M, N, K = 70, 45, 83
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = np.asfortranarray(rng.standard_normal((K, N)).astype(np.float32))  # column-major
    bc = np.ascontiguousarray(b.T)  # its memory, row-major (N, K)
    c = np.full((M, N), np.nan, np.float32)
    BM, BN, BK = 32, 32, 16
    grid = (kiln.cdiv(M, BM) * kiln.cdiv(N, BN),)
    tutorial_matmul[grid](a, bc, c, M, N, K, K, 1, 1, K, N, 1, WRAP=wrap, BLOCK_SIZE_M=BM,
                          BLOCK_SIZE_N=BN, BLOCK_SIZE_K=BK, GROUP_SIZE_M=2)
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), 1e-4, 1e-4)
    ir = tutorial_matmul.ir("kiln")
    # (`% M` makes the offsets a gather, as everywhere; without it, views.)
    assert ("kiln.gather" in ir) == wrap


@kiln.jit
def advanced_scalar_pointer(x, o, rows, n, stride, FLAG: kl.constexpr, B: kl.constexpr):
    offs = kl.arange(0, B)
    p = x
    acc = kl.zeros((B,), kl.float32)
    for r in range(0, rows):
        acc += kl.load(p + offs, mask=offs < n, other=0.0)
        p += stride
    q = o
    if rows > FLAG:
        q = q + B           # taken at run time: the second half
    kl.store(q + offs, acc, mask=offs < n)


def test_scalar_pointers_advanced_in_loops_and_branches(rng):
    rows, n, B = 7, 50, 64
    x = rng.standard_normal((rows, n + 3)).astype(np.float32)
    for flag, half in ((3, 1), (9, 0)):
        o = np.full(2 * B, np.nan, np.float32)
        advanced_scalar_pointer[(1,)](x, o, rows, n, n + 3, FLAG=flag, B=B)
        assert_close(o[half * B:half * B + n], x[:, :n].astype(np.float64).sum(0), 1e-5, 1e-5)
        assert np.isnan(o[(1 - half) * B:(1 - half) * B + n]).all()


def test_pointers_rebuilt_in_loops_are_refused():
    @kiln.jit
    def rebuilt(x, n):
        p = x + kl.arange(0, 8)
        for i in range(0, n):
            p = x + kl.arange(0, 8) * 2
        kl.store(p, 1.0)

    with pytest.raises(kiln.CompilationError, match="may only be advanced by scalars"):
        rebuilt[(1,)](np.zeros(16, np.float32), 2)


# Triton's block pointers: a view and the block's offsets; kl.advance moves
# them, inside loops too (carried offsets, pipelined loads). A base pointer
# with a scalar offset (`q + bh * stride_h`) takes one more view dimension.

@kiln.jit
def block_ptr_matmul(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
                     BM: kl.constexpr, BN: kl.constexpr, BK: kl.constexpr):
    pid_m = kl.program_id(1)
    pid_n = kl.program_id(0)
    a_bp = kl.make_block_ptr(base=a, shape=(M, K), strides=(sam, sak), offsets=(pid_m * BM, 0),
                             block_shape=(BM, BK), order=(1, 0))
    b_bp = kl.make_block_ptr(b, (K, N), (sbk, sbn), (0, pid_n * BN), (BK, BN), (1, 0))
    acc = kl.zeros((BM, BN), kl.float32)
    for k in range(0, K, BK):
        ta = kl.load(a_bp, boundary_check=(0, 1), padding_option="zero")
        tb = kl.load(b_bp, boundary_check=(0, 1), eviction_policy="evict_last")
        acc = kl.dot(ta, tb, acc)
        a_bp = kl.advance(a_bp, (0, BK))
        b_bp = kl.advance(b_bp, (BK, 0))
    c_bp = kl.make_block_ptr(c, (M, N), (scm, scn), (pid_m * BM, pid_n * BN), (BM, BN), (1, 0))
    kl.store(c_bp, acc, boundary_check=(0, 1))


@kiln.jit
def block_ptr_rows(x, o, S, D, stride_h, stride_s, BS: kl.constexpr, BD: kl.constexpr):
    # Each program sums the rows of its head (x + bh * stride_h: a flat
    # first dimension); the last block reads NaN padding where padding_option
    # says so, which the kl.where drops.
    bh = kl.program_id(0)
    bp = kl.make_block_ptr(x + bh * stride_h, (S, D), (stride_s, 1), (0, 0), (BS, BD), (1, 0))
    acc = kl.zeros((BD,), kl.float32)
    rows = kl.arange(0, BS)
    for s0 in range(0, S, BS):
        t = kl.load(bp, boundary_check=(0, 1), padding_option="nan")
        ok = ((s0 + rows)[:, None] < S) & (kl.arange(0, BD)[None, :] < D)
        acc += kl.sum(kl.where(ok, t, 0.0), axis=0)
        bp = kl.advance(bp, (BS, 0))
    obp = kl.make_block_ptr(o, (1000, D), (D, 1), (bh, 0), (1, BD), (1, 0))
    kl.store(obp, acc[None, :], boundary_check=(1,))


def test_block_pointers(rng):
    M, N, K = 45, 37, 70
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = np.full((M, N), np.nan, np.float32)
    block_ptr_matmul[(kiln.cdiv(N, 32), kiln.cdiv(M, 16))](a, b, c, M, N, K, K, 1, N, 1, N, 1,
                                                           BM=16, BN=32, BK=16)
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), 1e-4, 1e-4)
    ir = block_ptr_matmul.ir("kiln")
    assert "kiln.gather" not in ir and "!kiln.view<2xf32>" in ir and "kiln.reshape" not in ir

    H, S, D = 3, 29, 20
    x = rng.standard_normal((H, S + 2, D)).astype(np.float32)  # 2 padding rows per head
    o = np.full((H, D), np.nan, np.float32)
    block_ptr_rows[(H,)](x, o, S, D, (S + 2) * D, D, BS=8, BD=32)
    assert_close(o, x[:, :S].astype(np.float64).sum(1), 1e-5, 1e-5)
    assert "!kiln.view<3xf32>" in block_ptr_rows.ir("kiln")


# A scalar offset no index owns, as sums of index x stride terms: each term
# is a view dimension of its own (a batch, a head), a uniform rest one more
# (size 2, at 1), so the view is the same in every program. Int arguments
# are specialized on their sign: `pid // H`, `pid % H` are known not to be
# negative when H is not, and a negative stride or head count compiles
# its own kernel (and still computes what the pointers say).

@kiln.jit
def heads_copy(x, o, base, stride_z, stride_h, stride_s, H, S, D: kl.constexpr,
               BS: kl.constexpr):
    pid = kl.program_id(1)
    z = pid // H
    h = pid % H
    rows = kl.program_id(0) * BS + kl.arange(0, BS)
    cols = kl.arange(0, D)
    off = base + z * stride_z + h * stride_h
    t = kl.load(x + off + rows[:, None] * stride_s + cols[None, :], mask=rows[:, None] < S)
    kl.store(o + pid * S * D + rows[:, None] * D + cols[None, :], t + 1.0,
             mask=rows[:, None] < S)


def test_batch_and_head_offsets_are_view_dimensions(rng):
    Z, H, S, D = 2, 3, 37, 16
    x = rng.standard_normal(5 + Z * H * S * D).astype(np.float32)
    o = np.full((Z * H, S, D), np.nan, np.float32)
    heads_copy[(kiln.cdiv(S, 8), Z * H)](x, o, 5, H * S * D, S * D, D, H, S, D=D, BS=8)
    ref = x[5:].reshape(Z * H, S, D) + 1.0
    assert_close(o, ref, 0, 0)
    ir = heads_copy.ir("kiln")
    # z, h and the uniform 5 in dimensions of their own: x's view has rank 5.
    assert "kiln.gather" not in ir and "!kiln.view<5xf32>" in ir

    # Heads in reverse order through a negative head stride (base at the last
    # head): a kernel of its own (the key holds the sign), the same values.
    o2 = np.full_like(o, np.nan)
    heads_copy[(kiln.cdiv(S, 8), Z * H)](x, o2, 5 + (H - 1) * S * D, H * S * D, -S * D, D, H,
                                         S, D=D, BS=8)
    rev = ref.reshape(Z, H, S, D)[:, ::-1].reshape(Z * H, S, D)
    assert_close(o2, rev, 0, 0)

    # A negative head count: `pid % H` may then be negative (Python's %), so
    # the offset goes into one flat dimension; here H = -1 makes every head
    # index 0 (pid % -1 == 0) and z = -pid, read back with stride_z = -H*S*D.
    o3 = np.full_like(o, np.nan)
    heads_copy[(kiln.cdiv(S, 8), Z * H)](x, o3, 5, -S * D, 0, D, -1, S, D=D, BS=8)
    assert_close(o3, ref, 0, 0)
    assert "!kiln.view<3xf32>" in heads_copy.ir("kiln")


# kl.assume (Triton's tl.assume): the kernel promises a condition; `x >= 0`
# lets an index the front end cannot prove non-negative be a view offset.

@kiln.jit
def reversed_blocks(x, o, n, nb, ASSUME: kl.constexpr, BS: kl.constexpr, D: kl.constexpr):
    pid = kl.program_id(0)
    blk = nb - 1 - pid  # (a difference: its sign is unknown)
    if ASSUME:
        kl.assume(blk >= 0)
    rows = blk * BS + kl.arange(0, BS)
    cols = kl.arange(0, D)
    t = kl.load(x + rows[:, None] * D + cols[None, :], mask=rows[:, None] < n)
    kl.store(o + rows[:, None] * D + cols[None, :], t * 2.0, mask=rows[:, None] < n)


def test_assume_makes_offsets_view_offsets(rng):
    n, BS, D = 45, 8, 16
    x = rng.standard_normal((n, D)).astype(np.float32)
    for assume, rank in ((False, 3), (True, 2)):
        o = np.full_like(x, np.nan)
        reversed_blocks[(kiln.cdiv(n, BS),)](x, o, n, kiln.cdiv(n, BS), ASSUME=assume, BS=BS, D=D)
        assert_close(o, 2.0 * x.astype(np.float64), 0, 0)
        assert f"!kiln.view<{rank}xf32>" in reversed_blocks.ir("kiln")

    @kiln.jit
    def false_assumption(x):
        kl.assume(1 > 2)

    with pytest.raises(kiln.CompilationError, match="False at compile time"):
        false_assumption[(1,)](np.zeros(4, np.float32))

    @kiln.jit
    def tile_assumption(x):
        kl.assume(kl.arange(0, 4) >= 0)

    with pytest.raises(kiln.CompilationError, match="scalar condition"):
        tile_assumption[(1,)](np.zeros(4, np.float32))


# Triton's tensor descriptors: a view and a block shape; loads read zero (or
# NaN) outside the array, stores and atomics drop what lies outside.

@kiln.jit
def desc_ops(x, o, h, M, N, BM: kl.constexpr, BN: kl.constexpr):
    dx = kl.make_tensor_descriptor(x, shape=[M, N], strides=[N, 1], block_shape=[BM, BN],
                                   padding_option="nan")
    do = kl.make_tensor_descriptor(o, [M, N], [N, 1], [BM, BN])
    dh = kl.make_tensor_descriptor(h, [1, N], [N, 1], [1, BN])
    pm = kl.program_id(0) * BM
    t = dx.load([pm, 0])
    inside = (pm + kl.arange(0, BM))[:, None] < M
    # The rows past M read NaN (padding_option="nan"); count them per column.
    nan_rows = kl.sum(kl.where(t != t, 1, 0), axis=0)
    do.store([pm, 0], kl.where(inside, t + 1.0, 0.0))
    dh.atomic_add([0, 0], nan_rows[None, :])


def test_tensor_descriptors_cpu(rng):
    M, N, BM, BN = 37, 20, 8, 32
    x = rng.standard_normal((M, N)).astype(np.float32)
    o = np.full_like(x, np.nan)
    h = np.zeros((1, N), np.int32)
    desc_ops[(kiln.cdiv(M, BM),)](x, o, h, M, N, BM=BM, BN=BN)
    assert_close(o, x + np.float32(1.0), 0, 0)  # (one f32 rounding)
    # 40 rows loaded, 37 inside: 3 NaN rows per column (the columns past N
    # are dropped by the atomic).
    assert (h == kiln.cdiv(M, BM) * BM - M).all()
    assert "kiln.gather" not in desc_ops.ir("kiln")

    def compile_error(body, match):
        with pytest.raises(kiln.CompilationError, match=match):
            body[(1,)](np.zeros(8, np.float32))

    @kiln.jit
    def offsets(x):
        d = kl.make_tensor_descriptor(x, [8], [1], [8])
        d.store([0, 0], d.load([0]))

    compile_error(offsets, "a rank-1 descriptor needs 1 offsets, got 2")

    @kiln.jit
    def padding(x):
        kl.make_tensor_descriptor(x, [8], [1], [8], padding_option="inf")

    compile_error(padding, "padding_option= must be 'zero' or 'nan'")

    @kiln.jit
    def attribute(x):
        d = kl.make_tensor_descriptor(x, [8], [1], [8])
        d.gather(0)

    compile_error(attribute, "tensor descriptors have no attribute 'gather'")


def test_tile_T_permute_and_range_hints(rng):
    @kiln.jit
    def transposes(x, o, n, B: kl.constexpr):
        r = kl.arange(0, B)
        t = kl.load(x + r[:, None] * B + r[None, :])
        acc = kl.zeros((B, B), kl.float32)
        for i in kl.range(0, n, num_stages=2, loop_unroll_factor=2, warp_specialize=True,
                          disallow_acc_multi_buffer=False, flatten=False):
            acc += t.T + t.permute(1, 0)
        # Stored transposed: the unit stride on the first dimension.
        kl.store(o + r[:, None] + r[None, :] * B, acc)

    x = rng.standard_normal((8, 8)).astype(np.float32)
    o = np.full_like(x, np.nan)
    transposes[(1,)](x, o, 3, B=8)
    assert_close(o, 6.0 * x.astype(np.float64), 1e-6, 1e-6)

    @kiln.jit
    def bad_hint(x):
        for i in kl.range(0, 4, num_stages=True):
            kl.store(x + i, 1.0)

    with pytest.raises(kiln.CompilationError, match=r"kl.range\(num_stages=...\) must be"):
        bad_hint[(1,)](np.zeros(4, np.float32))

    @kiln.jit
    def bad_T(x):
        kl.store(x + kl.arange(0, 4), kl.arange(0, 4).T)

    with pytest.raises(kiln.CompilationError, match=".T transposes a 2-D tile"):
        bad_T[(1,)](np.zeros(4, np.float32))


# Host-side tensor descriptors (Triton's triton.tools.tensor_descriptor):
# kiln.TensorDescriptor arguments are descriptors in the kernel; the array is
# passed with its sizes and strides, so any strided array works (here a
# transposed one, whose unit stride is its first dimension).

@kiln.jit
def desc_arg_matmul(a_desc, b_desc, c_desc, K, BM: kl.constexpr, BN: kl.constexpr,
                    BK: kl.constexpr):
    pm = kl.program_id(1) * BM
    pn = kl.program_id(0) * BN
    acc = kl.zeros((BM, BN), kl.float32)
    for k in range(0, K, BK):
        acc = kl.dot(a_desc.load([pm, k]), b_desc.load([k, pn]), acc)
    c_desc.store([pm, pn], acc.to(c_desc.dtype))


def test_tensor_descriptor_arguments(rng):
    M, N, K = 45, 37, 70
    a = rng.standard_normal((M, K)).astype(np.float32)
    bt = rng.standard_normal((N, K)).astype(np.float32)
    b = bt.T  # (K, N), strides (1, K) in elements
    c = np.full((M, N), np.nan, np.float32)
    TD = kiln.TensorDescriptor
    desc_arg_matmul[(kiln.cdiv(N, 16), kiln.cdiv(M, 16))](
        TD.from_tensor(a, [16, 16]), TD(b, b.shape, (1, K), [16, 16]), TD.from_tensor(c, [16, 16]),
        K, BM=16, BN=16, BK=16)
    assert_close(c, a.astype(np.float64) @ b.astype(np.float64), 1e-4, 1e-4)
    ir = desc_arg_matmul.ir("kiln")
    assert "kiln.gather" not in ir and "kiln.trans" in ir  # b's rows, transposed

    # A descriptor reaching past its array (it read other memory, or
    # crashed), or byte strides that are not whole elements (a record
    # array's field: floored, they read the wrong bytes), is refused.
    c[:] = np.nan
    for bad in (TD(a, (M + 1, K), (K, 1), [16, 16]), TD(a, (M, K), (K + 1, 1), [16, 16]),
                TD(a[5:], (M, K), (K, 1), [16, 16]), TD(a[:, ::-1], (M, K), (K, 1), [16, 16])):
        with pytest.raises(ValueError, match="outside the array's"):
            desc_arg_matmul[(kiln.cdiv(N, 16), kiln.cdiv(M, 16))](
                bad, TD(b, b.shape, (1, K), [16, 16]), TD.from_tensor(c, [16, 16]), K,
                BM=16, BN=16, BK=16)
    assert np.isnan(c).all()
    record = np.zeros(8, [("x", "f4"), ("y", "i2")])
    with pytest.raises(ValueError, match="not multiples of the element size 4"):
        TD.from_tensor(record["x"], [8])
    with pytest.raises(ValueError, match="padding must be 'zero' or 'nan'"):
        TD(a, a.shape, (K, 1), [16, 16], padding="inf")
    with pytest.raises(ValueError, match="one entry per dimension"):
        TD(a, a.shape, (K,), [16, 16])
    with pytest.raises(kiln.CompilationError, match="a rank-2 descriptor needs 2 offsets"):
        @kiln.jit
        def wrong(d):
            d.store([0], d.load([0, 0]))
        wrong[(1,)](TD.from_tensor(a, [8, 8]))


# kl.atomic_cas (Triton's): a spin lock taken by every program in turn (the
# pattern of Triton's layer-norm backward), and a tile of compare-and-swaps
# (floats compared bit for bit: a NaN matches its own bits, -0.0 not 0.0).

@kiln.jit
def locked_total(x, total, lock, count, n, B: kl.constexpr):
    offs = kl.program_id(0) * B + kl.arange(0, B)
    part = kl.sum(kl.load(x + offs, mask=offs < n, other=0.0), axis=0)
    while kl.atomic_cas(lock, 0, 1, sem="acquire") == 1:
        pass
    kl.store(total, kl.load(total) + part)
    kl.store(count, kl.load(count) + 1)
    kl.atomic_xchg(lock, 0, sem="release")


@kiln.jit
def cas_rows(x, cmp, val, old, n, B: kl.constexpr):
    offs = kl.program_id(0) * B + kl.arange(0, B)
    kl.store(old + offs, kl.atomic_cas(x + offs, kl.load(cmp + offs, mask=offs < n),
                                       kl.load(val + offs, mask=offs < n)), mask=offs < n)


def test_atomic_cas(rng):
    n = 3000
    x = rng.standard_normal(n).astype(np.float32)
    total, lock, count = np.zeros(1, np.float32), np.zeros(1, np.int32), np.zeros(1, np.int32)
    locked_total[(kiln.cdiv(n, 128),)](x, total, lock, count, n, B=128)
    assert count[0] == kiln.cdiv(n, 128) and lock[0] == 0
    assert_close(total, [x.astype(np.float64).sum()], 1e-5, 1e-4)

    m = 256  # whole blocks: atomic_cas has no mask (as in Triton)
    for dtype in (np.int32, np.int64):
        xv = rng.integers(0, 3, m).astype(dtype)
        cm, vl = rng.integers(0, 3, m).astype(dtype), rng.integers(10, 20, m).astype(dtype)
        x0, old = xv.copy(), np.full(m, -7, dtype)
        cas_rows[(m // 64,)](xv, cm, vl, old, m, B=64)
        assert (xv == np.where(x0 == cm, vl, x0)).all() and (old == x0).all()
    xf = np.array([np.nan, -0.0, 1.5, 2.0] * 16, np.float32)
    cf = np.array([np.nan, 0.0, 1.5, 3.0] * 16, np.float32)
    vf = np.full(64, 7.0, np.float32)
    x0, old = xf.copy(), np.full(64, 9.0, np.float32)
    cas_rows[(1,)](xf, cf, vf, old, 64, B=64)
    assert (xf.view(np.int32) == np.where(x0.view(np.int32) == cf.view(np.int32), vf,
                                          x0).view(np.int32)).all()
    assert (old.view(np.int32) == x0.view(np.int32)).all()

    def compile_error(body, match, *args):
        with pytest.raises(kiln.CompilationError, match=match):
            body[(1,)](*args)

    @kiln.jit
    def gathered(x, idx):
        kl.atomic_cas(x + kl.load(idx + kl.arange(0, 4)), 0, 1)

    compile_error(gathered, "these offsets are gathered", np.zeros(4, np.int32),
                  np.zeros(4, np.int32))

    @kiln.jit
    def halves(x):
        kl.atomic_cas(x, 0.0, 1.0)

    compile_error(halves, "atomic_cas supports float32, float64, int32 and int64",
                  np.zeros(4, np.float16))

    @kiln.jit
    def tile_on_scalar(x):
        kl.atomic_cas(x, kl.zeros((4,), kl.int32), 1)

    compile_error(tile_on_scalar, "takes scalar cmp and val", np.zeros(4, np.int32))


def test_math_namespace_fma_histogram_swizzle2d(rng):
    @kiln.jit
    def mathy(x, y, z, o, h, ij, n, B: kl.constexpr, NB: kl.constexpr):
        offs = kl.arange(0, B)
        m = offs < n
        a = kl.load(x + offs, mask=m, other=1.0)
        b = kl.load(y + offs, mask=m, other=1.0)
        c = kl.load(z + offs, mask=m, other=1.0)
        r = kl.math.fma(a, b, c) + kl.math.exp2(kl.math.log2(kl.math.abs(a))) \
            + kl.math.div_rn(b, 2.0) + kl.math.sqrt_rn(kl.math.abs(c))
        kl.store(o + offs, r, mask=m)
        ids = kl.where(m, (kl.math.floor(kl.math.abs(a) * 3.0)).to(kl.int32), 99)
        kl.store(h + kl.arange(0, NB), kl.histogram(ids, NB, mask=m))
        i, j = kl.swizzle2d(kl.program_id(0) // 5, kl.program_id(0) % 5, 7, 5, 3)
        kl.store(ij + kl.program_id(0) * 2, i)
        kl.store(ij + kl.program_id(0) * 2 + 1, j)

    n, B, NB = 50, 64, 8
    x, y, z = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    o = np.full(n, np.nan, np.float32)
    h = np.full(NB, -1, np.int32)
    ij = np.full(70, -1, np.int32)
    mathy[(35,)](x, y, z, o, h, ij, n, B=B, NB=NB)
    xd, yd, zd = (v.astype(np.float64) for v in (x, y, z))
    ref = (xd * yd + zd) + np.abs(xd) + yd / 2 + np.sqrt(np.abs(zd))
    assert_close(o, ref, 1e-5, 1e-5)
    ids = np.floor(np.abs(x) * np.float32(3.0)).astype(np.int64)
    assert (h == np.bincount(ids[ids < NB], minlength=NB)[:NB]).all()
    # Triton's swizzle2d on a 7 x 5 grid in groups of 3 rows.
    want = []
    for p in range(35):
        i_, j_ = p // 5, p % 5
        ij_ = i_ * 5 + j_
        g = ij_ // 15
        off = g * 3
        sg = min(7 - off, 3)
        ij_ %= 15
        want += [off + ij_ % sg, ij_ // sg]
    assert (ij == np.array(want)).all()
    assert "math.fma" in mathy.ir("kiln")


def test_range_with_negative_constant_step(rng):
    # Older Triton matmuls walk K down: `for k in range(K, 0, -BLOCK_K)`.
    @kiln.jit
    def down(x, o, n, B: kl.constexpr):
        acc = kl.zeros((B,), kl.float32)
        offs = kl.arange(0, B)
        for k in range(n, 0, -B):
            acc += kl.load(x + (n - k) + offs, mask=(n - k) + offs < n, other=0.0)
        for j in range(10, 0, -3):  # 10, 7, 4, 1
            acc += j
        kl.store(o + offs, acc)

    x = rng.standard_normal(200).astype(np.float32)
    o = np.full(16, np.nan, np.float32)
    down[(1,)](x, o, 200, B=16)
    ref = np.pad(x, (0, 8)).reshape(-1, 16)[:13].astype(np.float64).sum(0) + 22
    assert_close(o, ref, 1e-5, 1e-5)

    @kiln.jit
    def zero(x):
        for k in range(0, 4, 0):
            kl.store(x + k, 1.0)

    with pytest.raises(kiln.CompilationError, match="step must not be zero"):
        zero[(1,)](np.zeros(4, np.float32))


def test_join_split_interleave(rng):
    @kiln.jit
    def jsi(x, y, o, p, q, B: kl.constexpr):
        offs = kl.arange(0, B)
        a = kl.load(x + offs)
        b = kl.load(y + offs)
        j = kl.join(a, b)                       # (B, 2)
        lo, hi = kl.split(j)                    # exact: a, b again
        r = kl.arange(0, 2)
        kl.store(o + offs[:, None] * 2 + r[None, :], j)
        kl.store(p + offs, lo)
        kl.store(p + B + offs, hi)
        kl.store(q + kl.arange(0, 2 * B), kl.interleave(a, b))

    B = 16
    x = rng.standard_normal(B).astype(np.float32)
    x[:3] = [-0.0, np.nan, np.inf]
    y = rng.standard_normal(B).astype(np.float32)
    o, p, q = (np.full((B, 2), 7.0, np.float32), np.full(2 * B, 7.0, np.float32),
               np.full(2 * B, 7.0, np.float32))
    jsi[(1,)](x, y, o, p, q, B=B)
    assert (o.view(np.int32) == np.stack([x, y], 1).view(np.int32)).all()
    assert (q.view(np.int32) == np.stack([x, y], 1).reshape(-1).view(np.int32)).all()
    # split gives back both halves bit for bit (-0.0, NaN and inf included).
    assert (p.view(np.int32) == np.concatenate([x, y]).view(np.int32)).all()

    @kiln.jit
    def bad(x):
        a, b = kl.split(kl.arange(0, 4))
        kl.store(x, a)

    with pytest.raises(kiln.CompilationError, match="last dimension is 2"):
        bad[(1,)](np.zeros(4, np.int32))


@kiln.jit
def sort_rows(x, o, d, f, B: kl.constexpr, R: kl.constexpr):
    offs = kl.arange(0, R)[:, None] * B + kl.arange(0, B)[None, :]
    t = kl.load(x + offs)
    kl.store(o + offs, kl.sort(t))
    kl.store(d + offs, kl.sort(t, dim=1, descending=True))
    kl.store(f + offs, kl.flip(t))


def test_sort_and_flip(rng):
    # Triton's tl.sort / tl.flip along the last dimension (a power of two): a
    # bitonic network of compare-exchanges, exact permutations of the values.
    for dtype in (np.float32, np.int32, np.int64):
        R, B = 3, 32
        x = (rng.standard_normal((R, B)) * 10).astype(dtype)
        o, d, f = (np.full_like(x, 7) for _ in range(3))
        sort_rows[(1,)](x, o, d, f, B=B, R=R)
        assert (o == np.sort(x, 1)).all() and (d == np.sort(x, 1)[:, ::-1]).all()
        assert (f == x[:, ::-1]).all()

    @kiln.jit
    def wrong_dim(x):
        t = kl.reshape(kl.load(x + kl.arange(0, 8)), (2, 4))
        kl.store(x + kl.arange(0, 8), kl.reshape(kl.sort(t, dim=0), (8,)))

    with pytest.raises(kiln.CompilationError, match="sort works along the last dimension"):
        wrong_dim[(1,)](np.zeros(8, np.float32))


def test_block_pointer_errors():
    def compile_error(body, match, *args):
        with pytest.raises(kiln.CompilationError, match=match):
            body[(1,)](*args)

    @kiln.jit
    def masked(x):
        bp = kl.make_block_ptr(x, (8,), (1,), (0,), (8,), (0,))
        kl.store(x + kl.arange(0, 8), kl.load(bp, mask=kl.arange(0, 8) < 4))

    compile_error(masked, "block pointer load takes boundary_check=", np.zeros(8, np.float32))

    @kiln.jit
    def dims(x):
        bp = kl.make_block_ptr(x, (8,), (1,), (0,), (8,), (0,))
        kl.store(x + kl.arange(0, 8), kl.load(bp, boundary_check=(1,)))

    compile_error(dims, "boundary_check= names dimensions of a rank-1", np.zeros(8, np.float32))

    @kiln.jit
    def nan_int(x):
        bp = kl.make_block_ptr(x, (8,), (1,), (0,), (8,), (0,))
        kl.store(x + kl.arange(0, 8), kl.load(bp, padding_option="nan"))

    compile_error(nan_int, "needs float elements", np.zeros(8, np.int32))

    @kiln.jit
    def rank(x):
        bp = kl.make_block_ptr(x, (8, 8), (8, 1), (0,), (8, 8), (1, 0))
        kl.store(x + kl.arange(0, 8), 1.0)

    compile_error(rank, "one entry per dimension", np.zeros(64, np.float32))

    @kiln.jit
    def rebuilt(x, n):
        bp = kl.make_block_ptr(x, (8,), (1,), (0,), (8,), (0,))
        for i in range(0, n):
            bp = kl.make_block_ptr(x, (8,), (1,), (i,), (8,), (0,))
        kl.store(x + kl.arange(0, 8), kl.load(bp))

    compile_error(rebuilt, "may only be moved", np.zeros(8, np.float32), 2)

    @kiln.jit
    def hint(x):
        kl.store(x + kl.arange(0, 8), kl.load(x + kl.arange(0, 8), cache_modifier=".zz"))

    compile_error(hint, "cache_modifier= must be one of", np.zeros(8, np.float32))



@kiln.jit
def products(x, o, r, m, n, AXIS: kl.constexpr, REV: kl.constexpr, BM: kl.constexpr,
             BN: kl.constexpr):
    rm = kl.arange(0, BM)
    rn = kl.arange(0, BN)
    mask = (rm[:, None] < m) & (rn[None, :] < n)
    t = kl.load(x + rm[:, None] * n + rn[None, :], mask=mask, other=1.0)
    kl.store(o + rm[:, None] * n + rn[None, :], kl.cumprod(t, AXIS, reverse=REV), mask=mask)
    kl.store(r + rm, kl.reduce(t, 1, mul_fn), mask=rm < m)
    kl.store(r + BM + rn, kl.reduce(t, 0, mul_fn), mask=rn < n)


@pytest.mark.parametrize("axis,reverse", [(0, False), (0, True), (1, False), (1, True)])
def test_products_scan_and_reduce(rng, axis, reverse):
    m, n, BM, BN = 11, 37, 16, 64
    x = (1.0 + 0.05 * rng.standard_normal((m, n))).astype(np.float32)
    o = np.full((m, n), np.nan, np.float32)
    r = np.full(BM + BN, np.nan, np.float32)
    products[(1,)](x, o, r, m, n, AXIS=axis, REV=reverse, BM=BM, BN=BN)
    x64 = x.astype(np.float64)
    ref = np.flip(np.cumprod(np.flip(x64, axis), axis), axis) if reverse else np.cumprod(x64, axis)
    assert_close(o, ref, 1e-5, 1e-6)
    assert_close(r[:m], x64.prod(1), 1e-5, 1e-6)
    assert_close(r[BM:BM + n], x64.prod(0), 1e-5, 1e-6)
    # Integers wrap as int32 products do.
    xi = rng.integers(-3, 4, (m, n)).astype(np.int32)
    oi = np.zeros((m, n), np.int32)
    ri = np.zeros(BM + BN, np.int32)
    products[(1,)](xi, oi, ri, m, n, AXIS=axis, REV=reverse, BM=BM, BN=BN)
    refi = np.flip(np.cumprod(np.flip(xi, axis), axis, dtype=np.int32), axis) if reverse \
        else np.cumprod(xi, axis, dtype=np.int32)
    assert (oi == refi).all() and (ri[:m] == xi.prod(1, dtype=np.int32)).all()


@kiln.jit
def moved_in_while_and_if(x, o, n, rows, FLAG: kl.constexpr, B: kl.constexpr):
    # A block pointer moved in a while loop and an if, a scalar pointer
    # advanced in the same loop.
    bp = kl.make_block_ptr(x, (rows, n), (n, 1), (0, 0), (1, B), (1, 0))
    q = o
    acc = kl.zeros((1, B), kl.float32)
    r = 0
    while r < rows:
        acc += kl.load(bp, boundary_check=(0, 1))
        bp = kl.advance(bp, (1, 0))
        r += 1
    if n > FLAG:
        q += B
        bp = kl.advance(bp, (-rows, 0))   # back to row 0
    else:
        bp = kl.advance(bp, (-1, 0))      # the last row
    kl.store(q + kl.arange(0, B)[None, :], acc + kl.load(bp, boundary_check=(0, 1)),
             mask=kl.arange(0, B)[None, :] < n)


def test_pointers_moved_in_while_loops_and_branches(rng):
    rows, n, B = 5, 20, 32
    x = rng.standard_normal((rows, n)).astype(np.float32)
    x64 = x.astype(np.float64)
    for flag, half, extra in ((3, 1, x64[0]), (40, 0, x64[-1])):
        o = np.full(2 * B, np.nan, np.float32)
        moved_in_while_and_if[(1,)](x, o, n, rows, FLAG=flag, B=B)
        assert_close(o[half * B:half * B + n], x64.sum(0) + extra, 1e-5, 1e-5)
        assert np.isnan(o[(1 - half) * B:(1 - half) * B + n]).all()


# Triton's other atomics: max, min (an amax for scales), exchange, bitwise,
# through pointers of any offsets, contiguous ones and views.

@kiln.jit
def other_atomics(x, amax, amin, bins, flags, swap, n, B: kl.constexpr):
    offs = kl.program_id(0) * B + kl.arange(0, B)
    m = offs < n
    t = kl.load(x + offs, mask=m, other=0.0)
    kl.atomic_max(amax, kl.max(kl.where(m, kl.abs(t), -1.0), axis=0))
    kl.atomic_min(amin + kl.zeros_like(offs) * 0, kl.where(m, t, 1e30), mask=m)
    b = (kl.abs(t) * 4.0).to(kl.int32) % 8
    kl.atomic_max(bins + b, offs, mask=m)                  # largest index per bin
    kl.atomic_or(flags + kl.program_id(0) % 2, 1 << (kl.program_id(0) % 31))
    kl.atomic_xor(flags + 2, kl.program_id(0) + 1)
    kl.atomic_and(flags + 3, ~(1 << (kl.program_id(0) % 31)))
    old = kl.atomic_xchg(swap + kl.program_id(0), kl.program_id(0) * 10)
    kl.store(swap + 100 + kl.program_id(0), old)


def test_other_atomics(rng):
    n, B = 1000, 64
    grid = kiln.cdiv(n, B)
    x = rng.standard_normal(n).astype(np.float32)
    amax = np.full(1, -5.0, np.float32)
    amin = np.full(1, 5.0, np.float32)
    bins = np.full(8, -1, np.int32)
    flags = np.array([0, 0, 0, -1], np.int32)
    swap = np.full(200, 7, np.int64)
    other_atomics[(grid,)](x, amax, amin, bins, flags, swap, n, B=B)
    assert amax[0] == np.abs(x).max() and amin[0] == x.min()
    b = (np.abs(x) * 4.0).astype(np.int32) % 8
    for k in range(8):
        assert bins[k] == (np.flatnonzero(b == k).max() if (b == k).any() else -1)
    p = np.arange(grid)
    assert flags[0] == np.bitwise_or.reduce(1 << (p[p % 2 == 0] % 31))
    assert flags[1] == np.bitwise_or.reduce(1 << (p[p % 2 == 1] % 31))
    assert flags[2] == np.bitwise_xor.reduce(p + 1)
    assert flags[3] == np.bitwise_and.reduce(~(1 << (p % 31)).astype(np.int32)) & -1
    assert (swap[:grid] == p * 10).all() and (swap[100:100 + grid] == 7).all()
    with pytest.raises(kiln.CompilationError, match="atomic_or supports int32 and int64"):
        @kiln.jit
        def bad_or(x):
            kl.atomic_or(x + kl.arange(0, 8), 1.0)
        bad_or[(1,)](np.zeros(8, np.float32))


# kl.device_assert / assert and kl.device_print (Triton's), checked only
# with debug on. A failing program stops at the assert: the gather it guards
# (an index far outside x, which would fault) never runs, and neither does
# its store.

@kiln.jit(debug=True)
def checked_gather(x, idx, out, n, m, B: kl.constexpr):
    offs = kl.program_id(0) * B + kl.arange(0, B)
    valid = offs < n
    i = kl.load(idx + offs, mask=valid, other=0)
    kl.device_assert((i >= 0) & (i < m), "index out of range", mask=valid)
    kl.store(out + offs, kl.load(x + i, mask=valid) * 2.0, mask=valid)


def test_device_assert_stops_the_failing_program(rng):
    n, m, B = 300, 77, 64
    x = rng.standard_normal(m).astype(np.float32)
    idx = rng.integers(0, m, n).astype(np.int32)
    out = np.full(n, np.nan, np.float32)
    checked_gather[(kiln.cdiv(n, B),)](x, idx, out, n, m, B=B)
    assert_close(out, x.astype(np.float64)[idx] * 2.0, 0, 0)
    for bad, value in ((130, 1 << 30), (299, -(1 << 29)), (0, m)):
        idx2 = idx.copy()
        idx2[bad] = value
        out = np.full(n, np.nan, np.float32)
        with pytest.raises(kiln.DeviceAssertError) as e:
            checked_gather[(kiln.cdiv(n, B),)](x, idx2, out, n, m, B=B)
        msg = str(e.value)
        assert "KILN_ERROR_ASSERT" in msg and "index out of range" in msg, msg
        assert f"program ({bad // B}, 0, 0)" in msg, msg
        line = checked_gather.fn.__code__.co_firstlineno + 5
        assert f"test_features.py:{line}:" in msg, msg
        # The failing program stored nothing; the others stored or not, but
        # nothing wrong.
        p = bad // B
        assert np.isnan(out[p * B:(p + 1) * B]).all()
        done = ~np.isnan(out)
        assert (out[done] == (x[idx] * 2.0)[done]).all()
    # The kernel still launches after a failure.
    out = np.full(n, np.nan, np.float32)
    checked_gather[(kiln.cdiv(n, B),)](x, idx, out, n, m, B=B)
    assert_close(out, x.astype(np.float64)[idx] * 2.0, 0, 0)


@kiln.jit(debug=True)
def scalar_guard(x, out, rows, B: kl.constexpr):
    """A scalar assert guarding a store whose rows it bounds: a failing one
    must stop every thread of the program (GPU targets: thread 0 checks,
    the others wait at a barrier), so nothing lands past `rows`."""
    row = kl.load(x + kl.program_id(0))
    v = kl.load(x + kl.arange(0, B)).to(kl.float32)
    kl.device_assert(row < rows, "row in range")
    kl.store(out + row * B + kl.arange(0, B), v)


def test_scalar_device_assert_stops_every_thread():
    B, rows = 4096, 4      # (every GPU thread stores some of a row)
    x = np.array([1, 3, 9, 2], np.int32)                  # program 2's row is out of range
    x = np.concatenate([x, np.zeros(B - 4, np.int32)])
    out = np.full((16, B), -7.0, np.float32)              # rows 4.. are the guard
    with pytest.raises(kiln.DeviceAssertError, match=r"row in range \(program \(2, 0, 0\)"):
        scalar_guard[(4,)](x, out, rows, B=B)
    assert (out[rows:] == -7.0).all()                      # nothing stored past `rows`
    ok = np.concatenate([np.array([1, 3, 0, 2], np.int32), np.zeros(B - 4, np.int32)])
    scalar_guard[(4,)](ok, out, rows, B=B)
    assert (out[[0, 1, 2, 3]] != -7.0).all()


def nonneg_sum(x, out, n, B: kl.constexpr):
    offs = kl.arange(0, B)
    v = kl.load(x + offs, mask=offs < n, other=0.0)
    assert v >= 0.0, "negative input"
    s = kl.sum(v, axis=0)
    assert s < 1000.0
    assert n <= B          # a scalar
    if B > 1000:
        assert False, "a compile-time false assert in a branch"
    kl.store(out, s)


def test_device_assert_needs_debug(monkeypatch):
    x = np.array([1.0, -2.0, 3.0], np.float32)
    out = np.full(1, np.nan, np.float32)
    plain = kiln.jit(nonneg_sum)
    plain[(1,)](x, out, 3, B=4)          # no checks: the sum of what it read
    assert out[0] == 2.0
    checked = kiln.jit(nonneg_sum, debug=True)
    with pytest.raises(kiln.DeviceAssertError, match="negative input"):
        checked[(1,)](x, out, 3, B=4)
    with pytest.raises(kiln.DeviceAssertError, match=r"n <= B \(program \(0, 0, 0\)"):
        checked[(1,)](np.ones(8, np.float32), out, 5, B=4)
    with pytest.raises(kiln.DeviceAssertError, match="at .*: s < 1000.0"):
        checked[(1,)](np.full(4, 300.0, np.float32), out, 4, B=4)
    checked[(1,)](np.full(4, 2.0, np.float32), out, 4, B=4)
    assert out[0] == 8.0
    # $KILN_DEBUG turns the checks on for kernels that do not say.
    monkeypatch.setenv("KILN_DEBUG", "1")
    with pytest.raises(kiln.DeviceAssertError, match="negative input"):
        plain[(1,)](x, out, 3, B=4)
    off = kiln.jit(nonneg_sum, debug=False)
    off[(1,)](x, out, 3, B=4)
    assert out[0] == 2.0


@kiln.jit
def printing(x, k, n, B: kl.constexpr):
    r = kl.arange(0, 2)[:, None]
    c = kl.arange(0, B)[None, :]
    t = kl.load(x + r * B + c, mask=c < n, other=-1.0)
    kl.device_print("t:", t)
    kl.device_print("bits", t.to(kl.int32), k, hex=True)
    print("k is", k * 3)


def test_device_print(capfd):
    x = np.array([0.5, -1.25, 3.0, 1e-7, 2.0, 65536.0], np.float32)
    printing[(1,)](x, -7, 3, B=3)
    lines = sorted(capfd.readouterr().out.splitlines())
    want = []
    vals = [[0.5, -1.25, 3.0], [1e-07, 2.0, 65536.0]]
    texts = [["0.5", "-1.25", "3"], ["1.00000001e-07", "2", "65536"]]  # %.9g
    for i in range(2):
        for j in range(3):
            want.append(f"pid (0, 0, 0) idx ({i}, {j}) t: {texts[i][j]}")
            want.append(f"pid (0, 0, 0) idx ({i}, {j}) bits (operand 0) "
                        f"0x{int(vals[i][j]) & 0xffffffff:x}")
    want.append("pid (0, 0, 0) bits (operand 1) 0xfffffffffffffff9")
    want.append("pid (0, 0, 0) k is -21")
    assert lines == sorted(want)


# kl.clock: the processor's cycle counter, read twice around a loop of work.
# Each program stores its two readings; the second is later (a counter that
# did not move, or a constant, fails), and the work's result is right. And
# kl.processor_id (Triton's tl.extra.cuda.smid): a core of this machine.

@kiln.jit
def clocked_sum(x, out, stamps, where, n, B: kl.constexpr):
    pid = kl.program_id(0)
    t0 = kl.clock()
    acc = kl.zeros((B,), kl.float32)
    for i in range(0, n, B):
        offs = i + kl.arange(0, B)
        acc += kl.load(x + pid * n + offs, mask=offs < n, other=0.0)
    kl.store(out + pid, kl.sum(acc, axis=0))
    t1 = kl.clock()
    kl.store(stamps + pid * 2, t0)
    kl.store(stamps + pid * 2 + 1, t1)
    kl.store(where + pid * 2, kl.processor_id())
    kl.store(where + pid * 2 + 1, kl.extra.cuda.smid())


def test_clock_readings_go_forward(rng):
    programs, n, B = 5, 3001, 64
    x = rng.standard_normal((programs, n)).astype(np.float32)
    out = np.full(programs, np.nan, np.float32)
    stamps = np.full((programs, 2), -1, np.int64)
    where = np.full((programs, 2), -1, np.int32)
    clocked_sum[(programs,)](x, out, stamps, where, n, B=B)
    assert_close(out, x.astype(np.float64).sum(axis=1), 1e-5, 1e-3)
    assert (stamps[:, 0] >= 0).all() and (stamps[:, 1] > stamps[:, 0]).all(), stamps
    assert ((where >= 0) & (where < os.cpu_count())).all(), where


# Triton's random numbers (tl.randint4x, rand, randn, ...: Philox 4x32-10,
# an int64 offset's high word the counter's second, as Triton 3.4 and
# later), against a NumPy Philox: the bits
# and the uniform floats are exact, the normals (log, sqrt, cos of the
# target) close.
# (The NumPy Philox: examples/python/triton_dropout.py.)
from triton_dropout import philox_reference as philox_ref  # noqa: E402
from triton_dropout import uniform_reference as uniform_ref  # noqa: E402


@kiln.jit
def random_tiles(seed, out_i, out_u, out_n, n, B: kl.constexpr, WIDE: kl.constexpr,
                 ROUNDS: kl.constexpr):
    offs = kl.program_id(0) * B + kl.arange(0, B)
    m = offs < n
    # (Wide: past int32, negative, so the counter's high word is not 0.)
    o = offs.to(kl.int64) * 3 + 1 - (1 << 35) if WIDE else offs * 3 + 1
    a, b, c, d = kl.randint4x(seed, o, ROUNDS)
    kl.store(out_i + offs * 4, a, mask=m)
    kl.store(out_i + offs * 4 + 1, b, mask=m)
    kl.store(out_i + offs * 4 + 2, c, mask=m)
    kl.store(out_i + offs * 4 + 3, d, mask=m)
    u1, u2, u3, u4 = kl.rand4x(seed, o, ROUNDS)
    kl.store(out_u + offs * 2, kl.rand(seed, o, ROUNDS), mask=m)
    kl.store(out_u + offs * 2 + 1, u3 - u4 + kl.randint(seed, o, ROUNDS).to(kl.float32) * 0.0,
             mask=m)
    n1, n2, n3, n4 = kl.randn4x(seed, o, ROUNDS)
    kl.store(out_n + offs * 3, kl.randn(seed, o, ROUNDS), mask=m)
    kl.store(out_n + offs * 3 + 1, n2, mask=m)
    kl.store(out_n + offs * 3 + 2, kl.math.umulhi(o, o * 7 - 3).to(kl.float32), mask=m)


@pytest.mark.parametrize("wide,seed,rounds", [(False, 12345, 10), (False, -7, 10),
                                              (True, 987654321987, 10), (False, 1 << 40, 7)])
def test_random_numbers_match_triton_philox(wide, seed, rounds):
    n, B = 1000, 128
    dt = np.int64 if wide else np.int32
    oi = np.zeros(4 * n, np.int32)
    ou = np.full(2 * n, np.nan, np.float32)
    on = np.full(3 * n, np.nan, np.float32)
    random_tiles[(kiln.cdiv(n, B),)](seed, oi, ou, on, n, B=B, WIDE=wide, ROUNDS=rounds)
    o = np.arange(n, dtype=dt) * 3 + 1 - (1 << 35 if wide else 0)
    ref = philox_ref(seed, o, rounds)
    for k in range(4):
        assert (oi[k::4] == ref[k]).all(), k
    u = [uniform_ref(r) for r in ref]
    assert (ou[0::2] == u[0]).all()
    assert (ou[1::2] == u[2] - u[3]).all()
    assert (u[0] >= 0).all() and (u[0] < 1).all()
    uu = [np.maximum(1e-7, x).astype(np.float64) for x in u[:2]]
    r = np.sqrt(-2.0 * np.log(uu[0]))
    th = 2 * np.pi * u[1].astype(np.float64)
    assert_close(on[0::3], r * np.cos(th), 2e-6, 2e-6)
    assert_close(on[1::3], r * np.sin(th), 2e-6, 2e-6)
    mask = (1 << (64 if wide else 32)) - 1
    b = (o * 7 - 3).astype(dt)
    hi = [((int(x) & mask) * (int(y) & mask)) >> (64 if wide else 32) for x, y in zip(o, b)]
    hi = np.array(hi, dtype=np.uint64 if wide else np.uint32).view(dt)
    assert (on[2::3] == hi.astype(np.float32)).all()


# x.to(dtype, bitcast=True) (Triton's): the same bits as another dtype of
# the width, exact for NaN payloads, -0.0, infinities and bf16 / f16 bits.

@kiln.jit
def bitcasts(x, h, out_i, out_f, out_h, out_b, n, B: kl.constexpr):
    offs = kl.program_id(0) * B + kl.arange(0, B)
    m = offs < n
    v = kl.load(x + offs, mask=m)
    bits = v.to(kl.int32, bitcast=True)
    kl.store(out_i + offs, bits, mask=m)
    # clear the sign bit through the integer view: |v|, bit for bit
    kl.store(out_f + offs, (bits & 0x7FFFFFFF).to(kl.float32, bitcast=True), mask=m)
    hv = kl.load(h + offs, mask=m)                     # bf16
    kl.store(out_h + offs, hv.to(kl.int16, bitcast=True), mask=m)
    kl.store(out_b + offs, (hv.to(kl.int16, bitcast=True) ^ -32768).to(kl.bfloat16, bitcast=True),
             mask=m)


def test_bitcast(rng):
    n, B = 300, 128
    x = rng.standard_normal(n).astype(np.float32)
    x[:6] = [np.nan, -0.0, np.inf, -np.inf, 1e-40, -3.0]
    x.view(np.int32)[6] = 0x7FC01234                    # a NaN with a payload
    hb = rng.integers(-32768, 32767, n).astype(np.int16)
    out_i = np.zeros(n, np.int32)
    out_f = np.zeros(n, np.float32)
    out_h = np.zeros(n, np.int16)
    out_b = kiln.bf16(np.zeros(n, np.uint16))
    bitcasts[(kiln.cdiv(n, B),)](x, kiln.bf16(hb.view(np.uint16)), out_i, out_f, out_h, out_b,
                                 n, B=B)
    assert (out_i == x.view(np.int32)).all()
    assert (out_f.view(np.int32) == (x.view(np.int32) & 0x7FFFFFFF)).all()
    assert (out_h == hb).all()
    assert (out_b.array.view(np.int16) == (hb ^ -32768)).all()
    with pytest.raises(kiln.CompilationError, match="bool has no bit layout"):
        @kiln.jit
        def bad(x):
            kl.store(x, (kl.load(x) > 0).to(kl.int8, bitcast=True))
        bad[(1,)](np.zeros(1, np.int8))


# Triton's tl.gather(src, index, axis) inside a tile (kiln.gather_elements):
# a 16-entry codebook read by 4-bit codes (FP4 / NF4 dequantization's
# lookup), and rows / columns of a 2-D tile picked by an index tile; an
# index outside the axis reads 0.

@kiln.jit
def codebook_lookup(codes, lut, out, n, B: kl.constexpr):
    offs = kl.program_id(0) * B + kl.arange(0, B)
    m = offs < n
    packed = kl.load(codes + offs, mask=m, other=0).to(kl.int32)   # bytes, as int8
    table = kl.load(lut + kl.arange(0, 16))
    kl.store(out + offs * 2, kl.gather(table, packed & 0xF, 0), mask=m)
    kl.store(out + offs * 2 + 1, kl.gather(table, (packed >> 4) & 0xF, axis=0), mask=m)


@kiln.jit
def gather_2d(x, idx, out, R: kl.constexpr, C: kl.constexpr, K: kl.constexpr):
    r = kl.arange(0, R)[:, None]
    c = kl.arange(0, C)[None, :]
    t = kl.load(x + r * C + c)
    k = kl.arange(0, K)[:, None]
    kl.store(out + k * C + c, kl.gather(t, kl.load(idx + k * C + c), 0))
    j = kl.load(idx + r * C + c) % C
    kl.store(out + K * C + r * C + c, kl.gather(t.to(kl.bfloat16), j, -1).to(kl.float32))


def test_gather_inside_a_tile(rng):
    n = 1001
    codes = rng.integers(-128, 128, n).astype(np.int8)
    lut = rng.standard_normal(16).astype(np.float32)
    out = np.full(2 * n, np.nan, np.float32)
    codebook_lookup[(kiln.cdiv(n, 256),)](codes, lut, out, n, B=256)
    u = codes.view(np.uint8)
    assert (out[0::2] == lut[u & 15]).all() and (out[1::2] == lut[u >> 4]).all()
    R, C, K = 8, 16, 32
    x = rng.standard_normal((R, C)).astype(np.float32)
    idx = rng.integers(-2, R + 2, (K, C)).astype(np.int32)
    out = np.full(K * C + R * C, np.nan, np.float32)
    gather_2d[(1,)](x, idx, out, R=R, C=C, K=K)
    inside = (idx >= 0) & (idx < R)
    ref0 = np.where(inside, x[np.clip(idx, 0, R - 1), np.arange(C)[None, :]], 0)
    assert inside.any() and not inside.all()
    assert (out[:K * C].reshape(K, C) == ref0).all()
    got = out[K * C:K * C + R * C].reshape(R, C)       # through bf16
    ref1 = np.take_along_axis(x, idx[:R] % C, 1)
    assert_close(got, ref1, 2 ** -8, 0)
    with pytest.raises(kiln.CompilationError, match="differ outside the axis"):
        @kiln.jit
        def bad(x):
            t = kl.load(x + kl.arange(0, 8)[:, None] * 4 + kl.arange(0, 4)[None, :])
            kl.gather(t, kl.zeros((8, 8), kl.int32), 0)
        bad[(1,)](np.zeros(32, np.float32))


# Triton's tl.cat (in order, exact) and tl.softmax.

@kiln.jit
def cat_and_softmax(x, out_c, out_s, R: kl.constexpr, C: kl.constexpr, n):
    r = kl.arange(0, R)[:, None]
    c = kl.arange(0, C)[None, :]
    a = kl.load(x + r * C + c)
    b = kl.load(x + R * C + r * C + c)
    both = kl.cat(a, b, can_reorder=True)
    kl.store(out_c + kl.arange(0, 2 * R)[:, None] * C + c, both)
    cols = kl.arange(0, C)
    t = kl.load(x + cols, mask=cols < n, other=float("-inf"))
    kl.store(out_s + cols, kl.softmax(t), mask=cols < n)
    kl.store(out_s + C + r * C + c, kl.softmax(a, dim=1))


def test_cat_and_softmax(rng):
    R, C, n = 4, 32, 27
    x = rng.standard_normal(2 * R * C).astype(np.float32) * 3
    out_c = np.full(2 * R * C, np.nan, np.float32)
    out_s = np.full(C + R * C, np.nan, np.float32)
    cat_and_softmax[(1,)](x, out_c, out_s, R=R, C=C, n=n)
    assert (out_c == x).all()
    x64 = x.astype(np.float64)
    e = np.exp(x64[:n] - x64[:n].max())
    assert_close(out_s[:n], e / e.sum(), 1e-5, 1e-7)
    a = x64[:R * C].reshape(R, C)
    e = np.exp(a - a.max(1, keepdims=True))
    assert_close(out_s[C:].reshape(R, C), e / e.sum(1, keepdims=True), 1e-5, 1e-7)


# A loop carrying a plain accumulator (acc = dot(a, b, acc): registers), an
# accumulator updated elementwise from another dot's result (acc2 += dot(a,
# c) * s[k]: carried in that dot's fragments, elementwiseCarry) and
# Triton's acc3 += dot(a, b) (folded into the dot's accumulator: a register
# accumulator too), all three
# read after the loop: the registers of the three kinds of carry come back
# in their places. 64-row blocks: wgmma on emu-sm_90a.
@kiln.jit
def three_accumulators(a, b, c, s, o, M: kl.constexpr, N: kl.constexpr, K: kl.constexpr,
                       BK: kl.constexpr):
    rm = kl.arange(0, M)[:, None]
    rn = kl.arange(0, N)[None, :]
    acc = kl.zeros((M, N), dtype=kl.float32)
    acc2 = kl.full((M, N), 0.5, dtype=kl.float32)
    acc3 = kl.zeros((M, N), dtype=kl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + kl.arange(0, BK)
        x = kl.load(a + rm * K + rk[None, :])
        y = kl.load(b + rk[:, None] * N + rn)
        z = kl.load(c + rk[:, None] * N + rn)
        acc = kl.dot(x, y, acc)
        acc2 += kl.dot(x, z) * kl.load(s + k0 // BK)
        acc3 += kl.dot(x, y * 2.0)
    kl.store(o + rm * N + rn, acc)
    kl.store(o + M * N + rm * N + rn, acc2 * 2.0)
    kl.store(o + 2 * M * N + rm * N + rn, acc3 - acc)


def test_three_kinds_of_carried_accumulators(rng):
    M, N, K, BK = 64, 32, 128, 32
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = rng.standard_normal((K, N)).astype(np.float16)
    sc = rng.uniform(0.5, 2.0, K // BK).astype(np.float32)
    o = np.full(3 * M * N, np.nan, np.float32)
    three_accumulators[(1,)](a, b, c, sc, o, M=M, N=N, K=K, BK=BK)
    a64, b64, c64 = (t.astype(np.float64) for t in (a, b, c))
    ref1 = a64 @ b64
    steps = [a64[:, k:k + BK] @ c64[k:k + BK] for k in range(0, K, BK)]
    ref2 = (0.5 + sum(p * sc[i] for i, p in enumerate(steps))) * 2.0
    ref3 = ref1                       # acc3 - acc: twice the same sums, less them
    mag = np.abs(a64) @ (np.abs(b64) + np.abs(c64))
    tol = 1e-5 * mag.max()
    assert_close(o[:M * N].reshape(M, N), ref1, 1e-5, tol)
    assert_close(o[M * N:2 * M * N].reshape(M, N), ref2, 1e-5, 4 * tol)
    assert_close(o[2 * M * N:].reshape(M, N), ref3, 1e-5, 2 * tol)


# A reshape merging two dimensions of a broadcast is read through the
# broadcast (an index division per element, no tile of its own: dot_scaled's
# scales over K): along the last dimension (groups of 32, 8 and 3 elements,
# the vectorized lanes within a group or lane by lane) and the first.
@kiln.jit
def merged_broadcast(x, y, out, R: kl.constexpr, C: kl.constexpr, G: kl.constexpr):
    r = kl.arange(0, R)[:, None]
    c = kl.arange(0, C)[None, :]
    v = kl.load(x + r * C + c)
    s = kl.load(y + kl.arange(0, R)[:, None] * (C // G) + kl.arange(0, C // G)[None, :])
    e = kl.reshape(kl.broadcast_to(kl.reshape(s, (R, C // G, 1)), (R, C // G, G)), (R, C))
    kl.store(out + r * C + c, v * e)
    t = kl.load(y + kl.arange(0, R // G)[:, None] * C + kl.arange(0, C)[None, :])
    f = kl.reshape(kl.broadcast_to(kl.reshape(t, (R // G, 1, C)), (R // G, G, C)), (R, C))
    kl.store(out + R * C + r * C + c, v - f)
    # Through expand_dims (e2m1's bytes, read for their two nibbles): groups
    # narrower than the vector read C / G consecutive elements and repeat
    # each G times (a shuffle), wider ones as above.
    g = kl.reshape(kl.broadcast_to(s[:, :, None], (R, C // G, G)), (R, C))
    kl.store(out + 2 * R * C + r * C + c, v + g)


@pytest.mark.parametrize("R,C,G", [(32, 64, 32), (24, 48, 8), (12, 18, 3), (16, 64, 2),
                                   (8, 32, 4)])
def test_reshape_of_broadcast_is_an_index(R, C, G, rng):
    x = rng.standard_normal((R, C)).astype(np.float32)
    y = rng.standard_normal(R * C).astype(np.float32)
    out = np.full(3 * R * C, np.nan, np.float32)
    merged_broadcast[(1,)](x, y, out, R=R, C=C, G=G)
    s = y[:R * (C // G)].reshape(R, C // G)
    t = y[:(R // G) * C].reshape(R // G, C)
    assert np.array_equal(out[:R * C].reshape(R, C), x * np.repeat(s, G, axis=1))
    assert np.array_equal(out[R * C:2 * R * C].reshape(R, C), x - np.repeat(t, G, axis=0))
    assert np.array_equal(out[2 * R * C:].reshape(R, C), x + np.repeat(s, G, axis=1))


# C / CUDA math under Triton's libdevice names (kiln.language.extra.libdevice,
# also kl.*): float32 polynomials or expansions on every target, against
# float64 NumPy on random values and the special ones (zeros of both signs,
# infinities, NaN, subnormal x).

from kiln.language.extra import libdevice  # noqa: E402

LIBDEVICE_CASES = [
    ("asin", lambda a, b: np.arcsin(a)), ("acos", lambda a, b: np.arccos(a)),
    ("atan", lambda a, b: np.arctan(b)), ("atan2", lambda a, b: np.arctan2(a, b)),
    ("sinh", lambda a, b: np.sinh(b)), ("cosh", lambda a, b: np.cosh(b)),
    ("tan", lambda a, b: np.tan(a)), ("log1p", lambda a, b: np.log1p(np.abs(b))),
    ("expm1", lambda a, b: np.expm1(b)), ("cbrt", lambda a, b: np.cbrt(b)),
    ("erfc", lambda a, b: np.vectorize(math.erfc)(b)),
    ("log10", lambda a, b: np.log10(np.abs(b))),
    ("round", lambda a, b: np.trunc(b * 4 + np.copysign(0.5, b))),
    ("rint", lambda a, b: np.rint(b * 4)), ("trunc", lambda a, b: np.trunc(b * 4)),
    ("copysign", lambda a, b: np.copysign(a, b)), ("fmax", lambda a, b: np.fmax(a, b)),
    ("fmin", lambda a, b: np.fmin(a, b)),
    ("flags", lambda a, b: np.isnan(b) + 2.0 * np.isinf(b) + 4.0 * np.signbit(b)),
]


@kiln.jit
def libdevice_math(x, y, out, n, B: kl.constexpr):
    o = kl.arange(0, B)
    m = o < n
    a = kl.load(x + o, mask=m, other=0.5)
    b = kl.load(y + o, mask=m, other=0.5)
    vals = (libdevice.asin(a), libdevice.acos(a), libdevice.atan(b), libdevice.atan2(a, b),
            libdevice.sinh(b), libdevice.cosh(b), libdevice.tan(a),
            libdevice.log1p(kl.abs(b)), libdevice.expm1(b), libdevice.cbrt(b),
            libdevice.erfc(b), libdevice.log10(kl.abs(b)), libdevice.round(b * 4),
            libdevice.rint(b * 4), libdevice.trunc(b * 4), libdevice.copysign(a, b),
            libdevice.fmax(a, b), kl.fmin(a, b),
            libdevice.isnan(b).to(kl.float32) + libdevice.isinf(b) * 2.0 +
            libdevice.signbit(b) * 4.0)
    for k in kl.static_range(len(vals)):
        kl.store(out + k * B + o, vals[k], mask=m)


def test_libdevice_math(rng):
    B = 256
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 0.5 / 4, 2.5 / 4, -2.5 / 4,
               88.5, -89.0, 1.0, -1.0]
    pairs = [(p, q) for p in special[:5] + [0.5, -0.5] for q in special]
    n = 240
    x = rng.uniform(-1, 1, n).astype(np.float32)
    y = (rng.standard_normal(n) * 3).astype(np.float32)
    x[:len(pairs)] = [p for p, _ in pairs]
    y[:len(pairs)] = [q for _, q in pairs]
    x[:len(pairs)][np.abs(x[:len(pairs)]) > 1] = 0.25         # asin / acos domain
    out = np.full(len(LIBDEVICE_CASES) * B, np.nan, np.float32)
    libdevice_math[(1,)](x, y, out, n, B=B)
    a, b = x.astype(np.float64), y.astype(np.float64)
    for k, (name, ref) in enumerate(LIBDEVICE_CASES):
        with np.errstate(all="ignore"):
            r = ref(a, b)
        if name in ("round", "rint", "trunc"):
            r = ref(a, (y * np.float32(4)).astype(np.float64) / 4)
        g = out[k * B:k * B + n].astype(np.float64)
        if name == "atan2":       # (a subnormal y / x ratio is not kept: noted)
            keep = ~((np.abs(a) < 1.2e-38) & (a != 0))
            g, r = g[keep], r[keep]
        assert_nan = np.isnan(r)
        assert (np.isnan(g) == assert_nan).all(), name
        fin = np.isfinite(r)
        assert (g[~fin & ~assert_nan] == r[~fin & ~assert_nan]).all(), name
        assert (np.signbit(g[r == 0]) == np.signbit(r[r == 0])).all(), name
        err = np.abs(g[fin] - r[fin])
        # (docs/python.md; atan, atan2 and asin within 3 ulp: Cephes'
        # reductions, AtanCephes / AsinCephes, where MLIR's polynomials were
        # off by up to 40 and 6.6; cbrt within 1 ulp after its Newton step,
        # 12 before.)
        rtol = {"atan": 4e-7, "atan2": 4e-7, "asin": 4e-7, "cbrt": 2e-7}.get(name, 4e-6)
        assert (err <= rtol * np.abs(r[fin]) + 1e-37).all(), (name, err.max())
    with pytest.raises(kiln.CompilationError, match="asin of float64 is not supported"):
        @kiln.jit
        def bad(x):
            kl.store(x, libdevice.asin(kl.load(x)))
        bad[(1,)](np.zeros(1))


# kl.dot_scaled (Triton's) on special values: e4m3's NaN and subnormals,
# e5m2's infinities, e8m0 scales 0 (2^-127) and 255 (NaN), -0.0 of e2m1, and
# fp4 packed along M and N (k_pack=False).

import mx_matmul as mx_ex  # noqa: E402


@kiln.jit
def dot_scaled_tile(a, sa, b, sb, c, FA: kl.constexpr, FB: kl.constexpr, M: kl.constexpr,
                    N: kl.constexpr, K: kl.constexpr, KPA: kl.constexpr, KPB: kl.constexpr):
    AR: kl.constexpr = M // 2 if FA == "e2m1" and not KPA else M
    AC: kl.constexpr = K // 2 if FA == "e2m1" and KPA else K
    BR: kl.constexpr = K // 2 if FB == "e2m1" and KPB else K
    BC: kl.constexpr = N // 2 if FB == "e2m1" and not KPB else N
    x = kl.load(a + kl.arange(0, AR)[:, None] * AC + kl.arange(0, AC)[None, :])
    y = kl.load(b + kl.arange(0, BR)[:, None] * BC + kl.arange(0, BC)[None, :])
    xs = kl.load(sa + kl.arange(0, M)[:, None] * (K // 32) + kl.arange(0, K // 32)[None, :])
    ys = kl.load(sb + kl.arange(0, N)[:, None] * (K // 32) + kl.arange(0, K // 32)[None, :])
    r = kl.dot_scaled(x, xs, FA, y, ys, FB, lhs_k_pack=KPA, rhs_k_pack=KPB)
    kl.store(c + kl.arange(0, M)[:, None] * N + kl.arange(0, N)[None, :], r)


@pytest.mark.parametrize("fa,fb,kpa,kpb", [("e4m3", "e5m2", True, True),
                                           ("e2m1", "e2m1", False, False),
                                           ("e2m1", "e4m3", True, True),
                                           ("e5m2", "e2m1", True, False)])
def test_dot_scaled_special_values(rng, fa, fb, kpa, kpb):
    M, N, K = 32, 32, 64

    def codes(fmt, shape, lhs):
        c = rng.integers(0, 16 if fmt == "e2m1" else 256, shape)
        # The special values sit at K = 40.. (the second scale group): not
        # where a scale of 0 (2^-127, below bfloat16's range: the products
        # there may flush to zero on tensor cores) meets them, which would
        # make inf * 0 = NaN against the float64 reference's inf.
        spots = (lambda n: (0, slice(40, 40 + n))) if lhs else (lambda n: (slice(40, 40 + n), 0))
        if fmt == "e4m3":
            c[(c & 0x7F) > 0x70] = 0x3A        # no NaN by chance (set below)
            c[spots(8)] = [0x7F, 0x01, 0x81, 0x07, 0x00, 0x80, 0x7E, 0xFE]
        if fmt == "e5m2":
            c[(c & 0x7F) >= 0x70] = 0x3C       # nothing huge by chance
            c[spots(3)] = [0x7C, 0x01, 0x80]   # inf, a subnormal, -0.0
        if fmt == "e2m1":
            c[spots(2)] = [8, 1]               # -0.0, 0.5
        return c
    ac, bc = codes(fa, (M, K), True), codes(fb, (K, N), False)
    sa = rng.integers(115, 140, (M, K // 32))
    sb = rng.integers(115, 140, (N, K // 32))
    sa[1, 0], sa[2, 1], sb[3, 0] = 0, 255, 0
    out = np.full((M, N), np.nan, np.float32)
    i8 = lambda v: np.ascontiguousarray(np.asarray(v).astype(np.uint8).view(np.int8))  # noqa
    a_bytes = mx_ex.pack(ac, fa, 1 if kpa else 0)
    b_bytes = mx_ex.pack(bc, fb, 0 if kpb else 1)
    dot_scaled_tile[(1,)](a_bytes, i8(sa), b_bytes, i8(sb), out, FA=fa, FB=fb, M=M, N=N, K=K,
                          KPA=kpa, KPB=kpb)
    with np.errstate(invalid="ignore", over="ignore"):
        ref = mx_ex.reference(ac, sa, fa, bc, sb, fb)
    nan = np.isnan(ref)
    assert nan[2].all() and (np.isnan(out) == nan).all()
    # float32 sums: the error bound scales with the sum of |terms|
    with np.errstate(invalid="ignore", over="ignore"):
        mag = mx_ex.reference(ac, sa, fa, bc, sb, fb, magnitude=True)
    fin = np.isfinite(ref)
    assert (out[~fin & ~nan] == ref[~fin & ~nan]).all()       # the infinities of e5m2
    err = np.abs(out.astype(np.float64)[fin] - ref[fin])
    assert (err <= 1e-6 * mag[fin]).all()


# Triton's autotuning surface: Config(num_warps=, num_stages=, pre_hook=),
# autotune(reset_to_zero=, restore_value=, prune_configs_by=) and
# @heuristics, on a kernel that accumulates with atomics (without the reset,
# every timed launch would add into the output again).

@kiln.jit
def atomic_colsum(x, out, n, cols, B: kl.constexpr, EVEN: kl.constexpr):
    rows = kl.program_id(0) * B + kl.arange(0, B)
    c = kl.arange(0, 16)
    if EVEN:
        v = kl.load(x + rows[:, None] * cols + c[None, :])
    else:
        v = kl.load(x + rows[:, None] * cols + c[None, :], mask=rows[:, None] < n, other=0.0)
    kl.atomic_add(out + c, kl.sum(v, axis=0))


def test_autotune_resets_restores_prunes_and_heuristics(tmp_path, monkeypatch):
    hooks, pruned = [], []

    def early_prune(configs, named, **kwargs):
        pruned.append(sorted(named))
        return [c for c in configs if c.kwargs["B"] != 64]      # drops one

    heur = kiln.heuristics({"EVEN": lambda a: a["n"] % a["B"] == 0})(atomic_colsum)
    configs = [kiln.Config({"B": 8}, num_warps=2, num_stages=2,
                           pre_hook=lambda a: hooks.append("pre8")),
               kiln.Config({"B": 16}, num_warps=4),
               kiln.Config({"B": 64})]
    tuned = kiln.autotune(configs, key=["n"], reset_to_zero=["out"],
                          prune_configs_by={"early_config_prune": early_prune},
                          warmup=1, rep=2)(heur)
    tuned._disk_path = lambda: None    # (tune here, whatever earlier runs recorded)
    x = np.random.default_rng(0).standard_normal((100, 16)).astype(np.float32)
    out = np.zeros(16, np.float32)
    tuned[lambda meta: (kiln.cdiv(100, meta["B"]),)](x, out, 100, 16)
    assert_close(out, x.astype(np.float64).sum(0), 1e-5, 1e-5)   # once, after resets
    assert tuned.last_config.kwargs["B"] in (8, 16) and "pre8" in hooks
    assert pruned and "out" in pruned[0]
    assert repr(configs[0]) == "Config({'B': 8}, num_warps=2, num_stages=2)"
    # The heuristic picked EVEN per call: 100 % 8 != 0, 96 % 8 == 0 (no mask).
    out[:] = 0
    heur[(12,)](x, out, 96, 16, B=8)
    assert_close(out, x[:96].astype(np.float64).sum(0), 1e-5, 1e-5)
    # restore_value puts an argument back after tuning.
    acc = np.full(16, 5.0, np.float32)
    keep = kiln.autotune([kiln.Config({"B": 8}), kiln.Config({"B": 16})], key=["n"],
                         restore_value=["out"])(heur)
    keep._disk_path = lambda: None
    keep[lambda meta: (kiln.cdiv(100, meta["B"]),)](x, acc, 100, 16)
    assert_close(acc, 5.0 + x.astype(np.float64).sum(0), 1e-5, 1e-5)
    with pytest.raises(ValueError, match="num_ctas"):
        kiln.Config({"B": 8}, num_ctas=2)
    with pytest.raises(ValueError, match="num_warps must be"):
        kiln.Config({"B": 8}, num_warps=0)
    with pytest.raises(ValueError, match="'nope' is not a parameter"):
        kiln.heuristics({"nope": lambda a: 1})(atomic_colsum)


# kl.associative_scan / kl.reduce with any associative combine_fn, on tuples
# too: a first-order linear recurrence h[t] = a[t] h[t-1] + b[t] (the scan of
# Mamba-style selective state spaces: (a1, b1) then (a2, b2) is
# (a1 a2, a2 b1 + b2), which does not commute), an xor reduction, a
# (value, index) argmax, sizes that are not powers of two.

@kiln.jit
def linrec_combine(a1, b1, a2, b2):
    return a1 * a2, a2 * b1 + b2


@kiln.jit
def xor_combine(a, b):
    return a ^ b


@kiln.jit
def argmax_combine(v1, i1, v2, i2):
    take = (v2 > v1) | ((v2 == v1) & (i2 < i1))
    return kl.where(take, v2, v1), kl.where(take, i2, i1)


@kiln.jit
def generic_scans(a, b, h, hr, bits, red, R: kl.constexpr, T: kl.constexpr):
    r = kl.arange(0, R)[:, None]
    t = kl.arange(0, T)[None, :]
    av = kl.load(a + r * T + t)
    bv = kl.load(b + r * T + t)
    _, hv = kl.associative_scan((av, bv), 1, linrec_combine)
    kl.store(h + r * T + t, hv)
    _, hrev = kl.associative_scan((av, bv), 1, linrec_combine, reverse=True)
    kl.store(hr + r * T + t, hrev)
    x = kl.load(bits + r * T + t)
    kl.store(red + kl.arange(0, R), kl.reduce(x, 1, xor_combine))
    idx = kl.broadcast_to(t, (R, T))
    best, where = kl.reduce((bv, idx), 1, argmax_combine)
    kl.store(red + R + kl.arange(0, R), where)
    kl.store(red + 2 * R + kl.arange(0, R), best.to(kl.int32) * 0 + kl.reduce(x, 1, xor_combine,
                                                                                keep_dims=True).reshape(R))
    kl.store(red + 3 * R, kl.reduce(x, None, xor_combine))
    kl.store(red + 3 * R + 1 + kl.arange(0, 1)[:, None],
             kl.reduce(x, None, xor_combine, keep_dims=True))


@pytest.mark.parametrize("T", [16, 24])
def test_associative_scan_and_reduce_with_any_combine_fn(rng, T):
    R = 4
    a = rng.uniform(0.5, 1.0, (R, T)).astype(np.float32)
    b = rng.standard_normal((R, T)).astype(np.float32)
    b[1, 3] = b[1, 7] = b.max() + 1                       # a tie: the first index wins
    bits = rng.integers(-2 ** 31, 2 ** 31, (R, T)).astype(np.int32)
    h, hr = np.full((R, T), np.nan, np.float32), np.full((R, T), np.nan, np.float32)
    red = np.zeros(3 * R + 2, np.int32)
    generic_scans[(1,)](a, b, h, hr, bits, red, R=R, T=T)
    ref, refr = np.zeros((R, T)), np.zeros((R, T))
    acc = np.zeros(R)
    for i in range(T):
        acc = a[:, i] * acc + b[:, i]
        ref[:, i] = acc
    # reverse (Triton's: the forward scan of the flipped axis), the backward
    # recurrence h[i] = a[i] h[i + 1] + b[i]
    acc = np.zeros(R)
    for i in reversed(range(T)):
        acc = a[:, i] * acc + b[:, i]
        refr[:, i] = acc
    assert_close(h, ref, 1e-5, 1e-5)
    assert_close(hr, refr, 1e-5, 1e-5)
    assert (red[:R] == np.bitwise_xor.reduce(bits, axis=1)).all()
    assert (red[R:2 * R] == np.argmax(b, axis=1)).all() and red[R + 1] == 3
    assert (red[2 * R:3 * R] == red[:R]).all()
    assert red[3 * R] == red[3 * R + 1] == np.bitwise_xor.reduce(bits.ravel())


# Triton's tl.topk, tl.xor_sum and tl.cast.

@kiln.jit
def topk_xor_cast(x, bits, out_k, out_x, out_c, addr, K: kl.constexpr):
    r = kl.arange(0, 4)[:, None]
    c = kl.arange(0, 64)[None, :]
    t = kl.load(x + r * 64 + c)
    kl.store(out_k + r * K + kl.arange(0, K)[None, :], kl.topk(t, K))
    b = kl.load(bits + r * 64 + c)
    kl.store(out_x + kl.arange(0, 4), kl.xor_sum(b, 1))
    kl.store(out_x + 4, kl.xor_sum(b))
    kl.store(out_c + kl.arange(0, 64), kl.cast(kl.load(x + kl.arange(0, 64)), kl.int32,
                                               bitcast=True))
    p = kl.cast(kl.load(addr), kl.pointer_type(kl.float32))
    kl.store(p + kl.arange(0, 4), kl.cast(kl.arange(0, 4), kl.float32) + 0.5)


def test_topk_xor_sum_and_cast(rng):
    K = 8
    x = rng.standard_normal((4, 64)).astype(np.float32)
    bits = rng.integers(-2 ** 31, 2 ** 31, (4, 64)).astype(np.int32)
    out_k = np.full((4, K), np.nan, np.float32)
    out_x = np.zeros(5, np.int32)
    out_c = np.zeros(64, np.int32)
    target = np.full(4, np.nan, np.float32)
    topk_xor_cast[(1,)](x, bits, out_k, out_x, out_c,
                        np.array([target.ctypes.data], np.int64), K=K)
    assert (out_k == -np.sort(-x, axis=1)[:, :K]).all()
    assert (out_x[:4] == np.bitwise_xor.reduce(bits, axis=1)).all()
    assert out_x[4] == np.bitwise_xor.reduce(bits.ravel())
    assert (out_c == x[0].view(np.int32)).all()
    assert (target == np.arange(4) + 0.5).all()


# 8-bit floats (kl.float8e4nv / kl.float8e5, Triton's; kiln.fp8 wraps the
# bytes): every code decodes exactly, float32 values (random, the midpoints
# of neighbouring codes: ties go to the even code, beyond the largest finite
# value: saturated, infinities too, NaN) encode as a nearest-value search
# says, and kl.dot of fp8 tiles is exact products summed in float32.

from kiln.frontend import fp8_bits, fp8_value  # noqa: E402


@kiln.jit
def fp8_roundtrip(codes4, codes5, dec, x, q4, q5, n, B: kl.constexpr):
    o = kl.arange(0, 256)
    kl.store(dec + o, kl.load(codes4 + o).to(kl.float32))
    kl.store(dec + 256 + o, kl.load(codes5 + o) * 1.0)       # arithmetic promotes
    offs = kl.program_id(0) * B + kl.arange(0, B)
    m = offs < n
    v = kl.load(x + offs, mask=m)
    kl.store(q4 + offs, v, mask=m)                             # a store converts
    kl.store(q5 + offs, v.to(kl.float8e5), mask=m)


@kiln.jit
def fp8_dot(a, b, c, M: kl.constexpr, N: kl.constexpr, K: kl.constexpr):
    A = kl.load(a + kl.arange(0, M)[:, None] * K + kl.arange(0, K)[None, :])
    Bt = kl.load(b + kl.arange(0, K)[:, None] * N + kl.arange(0, N)[None, :])
    kl.store(c + kl.arange(0, M)[:, None] * N + kl.arange(0, N)[None, :], kl.dot(A, Bt))


def test_fp8_conversions_and_dot(rng):
    codes = np.arange(256, dtype=np.uint8)
    dec = np.full(512, -1.0, np.float32)
    vals = {f: np.array([fp8_value(c, f) for c in range(256)]) for f in ("e4m3", "e5m2")}
    mids = []
    for f in ("e4m3", "e5m2"):
        fin = np.unique(vals[f][np.isfinite(vals[f])])
        mids += list((fin[1:] + fin[:-1]) / 2)
    x = np.concatenate([rng.standard_normal(700) * 40, rng.standard_normal(300) * 1e-3,
                        mids, [0.0, -0.0, np.inf, -np.inf, np.nan, 500.0, -1e5, 6e4]])
    x = x.astype(np.float32)
    x = x[x.astype(np.float64) == np.float64(x)]           # (exact in float32)
    n = x.size
    q4, q5 = kiln.fp8(np.zeros(n, np.uint8), "e4m3"), kiln.fp8(np.zeros(n, np.uint8), "e5m2")
    fp8_roundtrip[(kiln.cdiv(n, 256),)](kiln.fp8(codes, "e4m3"), kiln.fp8(codes, "e5m2"), dec,
                                        x, q4, q5, n, B=256)
    for k, f in enumerate(("e4m3", "e5m2")):
        ref = vals[f].astype(np.float32)
        got = dec[256 * k:256 * (k + 1)]
        assert np.array_equal(np.isnan(got), np.isnan(ref)), f
        assert (got[~np.isnan(ref)].view(np.int32) == ref[~np.isnan(ref)].view(np.int32)).all(), f
    for q, f in ((q4, "e4m3"), (q5, "e5m2")):
        ref = np.array([fp8_bits(float(v), f) for v in x], np.int8)
        bad = np.flatnonzero(q.array != ref)
        assert bad.size == 0, (f, x[bad[:5]], q.array[bad[:5]], ref[bad[:5]])
    M, N, K = 16, 16, 64
    a = rng.integers(0, 256, (M, K)).astype(np.uint8)
    b = rng.integers(0, 256, (K, N)).astype(np.uint8)
    a[(a & 0x7F) == 0x7F] = 0x38                           # no NaN codes
    b[(b & 0x7C) == 0x7C] = 0x3C                           # no e5m2 inf / NaN
    c = np.full((M, N), np.nan, np.float32)
    fp8_dot[(1,)](kiln.fp8(a, "e4m3"), kiln.fp8(b, "e5m2"), c, M=M, N=N, K=K)
    da, db = vals["e4m3"][a], vals["e5m2"][b]
    assert_close(c, da @ db, 1e-6, 1e-6 * (np.abs(da) @ np.abs(db)).max())


@kiln.jit
def fp8_dot_any(a, b, c, M: kl.constexpr, N: kl.constexpr, K: kl.constexpr):
    A = kl.load(a + kl.arange(0, M)[:, None] * K + kl.arange(0, K)[None, :])
    Bt = kl.load(b + kl.arange(0, K)[:, None] * N + kl.arange(0, N)[None, :])
    kl.store(c + kl.arange(0, M)[:, None] * N + kl.arange(0, N)[None, :], kl.dot(A, Bt))


@pytest.mark.parametrize("fa,fb", [("e4m3", "e4m3"), ("e5m2", "e5m2"), ("e4m3", "e5m2"),
                                   ("e5m2", "e4m3"), ("e4m3", "f16"), ("e5m2", "bf16"),
                                   ("e4m3", "f32")])
def test_fp8_dot_operands_decode_every_code(fa, fb, rng):
    """kl.dot of fp8 tiles (each operand decoded to 16 bits by a chain of bit
    operations and a power-of-two scale): every code of the lhs times an
    identity comes back exactly (subnormals, the largest values, signed
    zeros; e4m3's NaN and e5m2's infinities as IEEE products make them), and
    random finite codes against float64. 64×64 tiles: wgmma on emu-sm_90a."""
    M = N = K = 64
    vals = {f: np.array([fp8_value(c, f) for c in range(256)]) for f in ("e4m3", "e5m2")}

    def fp8_operand(codes, fmt):
        return kiln.fp8(codes.astype(np.uint8), fmt), vals[fmt][codes]

    def wide_operand(v, fmt):     # float64 values, exact in fmt
        if fmt == "bf16":
            bits = (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
            return kiln.bf16(bits), (bits.astype(np.uint32) << 16).view(np.float32) * 1.0
        x = v.astype(np.float16 if fmt == "f16" else np.float32)
        return x, x.astype(np.float64)

    def rhs(codes, values):
        return fp8_operand(codes, fb) if fb in vals else wide_operand(values, fb)

    def ref(da, db):   # IEEE products (inf * 0 is NaN), summed in float64
        with np.errstate(invalid="ignore", over="ignore"):
            return (da[:, :, None] * db[None, :, :]).sum(1)

    def run(a, b):
        c = np.full((M, N), np.nan, np.float32)
        fp8_dot_any[(1,)](a, b, c, M=M, N=N, K=K)
        return c

    # Every lhs code (four rows of 64 hold all 256) times an identity.
    codes = rng.integers(0, 256, (M, K))
    codes[:4] = np.arange(256).reshape(4, 64)
    a, da = fp8_operand(codes, fa)
    eye = np.zeros((K, N), np.int64)
    eye[np.arange(K), np.arange(N)] = {"e4m3": 0x38, "e5m2": 0x3C}.get(fb, 0)
    b, db = rhs(eye, np.eye(K, N))
    c, want = run(a, b), ref(da, db)
    assert np.array_equal(np.isnan(c), np.isnan(want)), (fa, fb)
    fin = ~np.isnan(want)
    assert (c[fin] == want[fin]).all(), (fa, fb)
    zero = fin & (want == 0)
    assert (np.signbit(c[zero]) == np.signbit(want[zero])).all(), (fa, fb)
    # Random finite codes (and values) on both sides, against float64.
    ca, cb = rng.integers(0, 256, (M, K)), rng.integers(0, 256, (K, N))
    ca[~np.isfinite(vals[fa][ca])] = 0x30
    if fb in vals:
        cb[~np.isfinite(vals[fb][cb])] = 0x30
    a, da = fp8_operand(ca, fa)
    b, db = rhs(cb, rng.standard_normal((K, N)))
    c, want = run(a, b), ref(da, db)
    assert_close(c, want, 1e-6, 1e-6 * ref(np.abs(da), np.abs(db)).max())


def test_torch_float8_dtypes_map_to_kiln_fp8():
    """PyTorch's float8 tensors take kl.float8e4nv / kl.float8e5 (checked by
    name: no torch here)."""
    from kiln.jit import _TorchDTypes

    class FakeDtype:
        def __init__(self, name):
            self.name = name

        def __str__(self):
            return "torch." + self.name

    table = _TorchDTypes()
    assert table[FakeDtype("float8_e4m3fn")] is kl.float8e4nv
    assert table[FakeDtype("float8_e5m2")] is kl.float8e5
    assert table[FakeDtype("bfloat16")] is kl.bfloat16


# fp8 tiles among other operations (review of the first cut): a Python
# number beside an fp8 tile is not rounded to fp8 first; reductions, negation
# and abs work on the values; zeros / full of an fp8 dtype; a select of two
# fp8 tiles, sort and flip keep their bits (e5m2's infinities too).

@kiln.jit
def fp8_mixed(x5, out, bits, B: kl.constexpr):
    o = kl.arange(0, B)
    v = kl.load(x5 + o)                                        # e5m2
    kl.store(out + o, v + 1000.0)                              # 1000 exactly
    kl.store(out + B + o, -v * 0.1)
    kl.store(out + 2 * B, kl.max(v, axis=0))
    kl.store(out + 2 * B + 1, kl.min(v, axis=0))
    kl.store(out + 2 * B + 2, kl.sum(kl.abs(v), axis=0))
    z = kl.zeros((B,), kl.float8e5) + kl.full((B,), 3.0, kl.float8e5)
    kl.store(out + 3 * B + o, z)
    kl.store(out + 4 * B + o, libdevice.signbit(v).to(kl.float32))
    pick = kl.where(o % 2 == 0, v, kl.flip(v))                 # fp8 bits, both sides
    kl.store(bits + o, pick)
    kl.store(bits + B + o, kl.sort(v))
    kl.store(out + 5 * B + o, kl.sigmoid(v))


@kiln.jit
def fp8_dot_out(a, c):
    t = kl.load(a + kl.arange(0, 16)[:, None] * 16 + kl.arange(0, 16)[None, :])
    kl.store(c + kl.arange(0, 16)[:, None] * 16 + kl.arange(0, 16)[None, :],
             kl.dot(t, t, out_dtype=kl.float8e5))


def test_fp8_mixed_operations():
    B = 16
    vals = np.array([-1.0, -2.0, np.inf, -np.inf, 0.5, -0.0, 3.0, 57344.0, -0.25, 2.0 ** -16,
                     7.0, -6.0, 1.5, 0.0, -57344.0, 12.0])
    codes = np.array([fp8_bits(float(v), "e5m2") if np.isfinite(v) else
                      (0x7C if v > 0 else -4) for v in vals], np.int8)   # e5m2 +-inf: 0x7C / 0xFC
    dec = np.array([fp8_value(int(c) & 0xFF, "e5m2") for c in codes])
    out = np.full(6 * B, np.nan, np.float32)
    bits = kiln.fp8(np.zeros(2 * B, np.uint8), "e5m2")
    fp8_mixed[(1,)](kiln.fp8(codes.view(np.uint8), "e5m2"), out, bits, B=B)
    with np.errstate(invalid="ignore"):
        assert np.array_equal(out[:B], (dec + 1000.0).astype(np.float32))
        assert np.array_equal(out[B:2 * B], (-dec * np.float32(0.1)).astype(np.float32))
    assert out[2 * B] == np.inf and out[2 * B + 1] == -np.inf
    assert out[2 * B + 2] == np.inf
    assert (out[3 * B:4 * B] == 3.0).all()
    assert (out[4 * B:5 * B] == np.signbit(dec)).all()
    o = np.arange(B)
    want = np.where(o % 2 == 0, codes, codes[::-1])
    assert (bits.array[:B] == want).all()                      # the bits, infinities kept
    order = np.argsort(dec, kind="stable")
    assert (np.array([fp8_value(int(c) & 0xFF, "e5m2") for c in bits.array[B:]])
            == dec[order]).all()
    assert fp8_bits(1e20, "e5m2") == 0x7B and fp8_bits(-1e30, "e5m2") == 0xFB - 256
    with np.errstate(over="ignore", invalid="ignore"):
        sig = 1.0 / (1.0 + np.exp(-dec))
    fin = np.isfinite(dec)
    assert np.allclose(out[5 * B:6 * B][fin], sig[fin], rtol=1e-6, atol=1e-7)
    # A dot with an fp8 result: accumulated in float32 (exactly, for these
    # small values), then rounded to e5m2 once.
    a = np.array([fp8_bits(v, "e4m3") for v in np.linspace(-2, 2, 17)[:16]], np.int8)
    a = np.tile(a, (16, 1)) ^ np.eye(16, dtype=np.int8) * -128       # some signs flipped
    c = kiln.fp8(np.zeros((16, 16), np.uint8), "e5m2")
    fp8_dot_out[(1,)](kiln.fp8(a.view(np.uint8), "e4m3"), c)
    av = np.array([[fp8_value(int(x) & 0xFF, "e4m3") for x in row] for row in a])
    ref = np.array([fp8_bits(float(v), "e5m2") for v in (av @ av).ravel()], np.int8)
    assert (c.array.ravel() == ref).all()


@kiln.jit
def fp8_print_and_copy(src, dst, n, B: kl.constexpr):
    o = kl.arange(0, B)
    v = kl.load(src + o, mask=o < n, other=0.0)
    kl.store(dst + o, v, mask=o < n)
    kl.device_print("v", v)


def test_fp8_bundles_and_prints(tmp_path, capfd):
    """An fp8 kernel's bundle (kilnc) takes kiln.fp8 arrays; device_print
    shows fp8 values, not their bits."""
    codes = np.array([0x38, 0xC0, 0x01, 0x7E], np.uint8)         # e4m3: 1, -2, 2^-9, 448
    dst = kiln.fp8(np.zeros(4, np.uint8), "e4m3")
    fp8_print_and_copy[(1,)](kiln.fp8(codes, "e4m3"), dst, 4, B=4)
    assert (dst.array.view(np.uint8) == codes).all()
    lines = capfd.readouterr().out.splitlines()
    assert sorted(l.split()[-1] for l in lines if " v " in l) == sorted(
        ["1", "-2", "0.001953125", "448"])
    src = tmp_path / "f8.mlir"
    src.write_text(fp8_print_and_copy.last.kiln_ir if hasattr(fp8_print_and_copy.last, "kiln_ir")
                   else fp8_print_and_copy.ir("kiln"))
    out = tmp_path / "f8.kiln"
    subprocess.run([KILNC, str(src), "-o", str(out)], check=True)
    b = kiln.load_bundle(str(out))
    dst2 = kiln.fp8(np.zeros(4, np.uint8), "e4m3")
    b[(1,)](kiln.fp8(codes, "e4m3"), dst2, 4)
    assert (dst2.array.view(np.uint8) == codes).all()


# Tiles that tensor-core dots read and other ops read element by element: on
# GPUs they take the dots' operand layouts (XOR-swizzled or padded rows for
# mma.sync, core matrices for wgmma), which the stores and elementwise ops
# read through the same index mapping (docs/gpu.md, "Operand rows").
@kiln.jit
def append_and_score(q, knew, cache, s, T, D: kl.constexpr, BT: kl.constexpr):
    # A key block both appended to a cache and multiplied (B through a
    # transpose).
    rt = kl.program_id(0) * BT + kl.arange(0, BT)
    rd = kl.arange(0, D)
    rq = kl.arange(0, 16)
    k = kl.load(knew + rt[:, None] * D + rd[None, :], mask=rt[:, None] < T, other=0.)
    kl.store(cache + rt[:, None] * D + rd[None, :], k, mask=rt[:, None] < T)
    qq = kl.load(q + rq[:, None] * D + rd[None, :])
    kl.store(s + rq[:, None] * T + rt[None, :], kl.dot(qq, kl.trans(k)), mask=rt[None, :] < T)


@kiln.jit
def gemm_with_side_reads(a, b, c, colsum, acopy, M, N, K, BM: kl.constexpr,
                         BN: kl.constexpr, BK: kl.constexpr):
    # In a pipelined loop: B also summed by an elementwise accumulation, A
    # also stored (scaled), and a second dot on an elementwise op of B.
    pm, pn = kl.program_id(0), kl.program_id(1)
    rm = pm * BM + kl.arange(0, BM)
    rn = pn * BN + kl.arange(0, BN)
    acc = kl.zeros((BM, BN), kl.float32)
    bs = kl.zeros((BK, BN), kl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + kl.arange(0, BK)
        x = kl.load(a + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K),
                    other=0.)
        y = kl.load(b + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N),
                    other=0.)
        acc = kl.dot(x, y, acc)
        acc += kl.dot(x, (y * 2).to(y.dtype))
        bs += y.to(kl.float32)
        if pn == 0:
            kl.store(acopy + rm[:, None] * K + rk[None, :], x * 2,
                     mask=(rm[:, None] < M) & (rk[None, :] < K))
    kl.store(c + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))
    kl.store(colsum + pm * N + rn, kl.sum(bs, axis=0), mask=rn < N)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_dot_operands_that_other_ops_also_read(rng, dtype):
    """A loaded tile read by dots and by stores or elementwise ops: right on
    every target (the GPU lowerings read it through the dots' operand
    layouts)."""
    def make(shape):
        x = rng.standard_normal(shape)
        if dtype == "f16":
            h = x.astype(np.float16)
            return h, h.astype(np.float64), lambda arr: arr.astype(np.float64)
        bits = to_bf16_bits(x)
        return (kiln.bf16(bits), from_bf16_bits(bits).astype(np.float64),
                lambda arr: from_bf16_bits(arr.array if hasattr(arr, "array") else arr)
                .astype(np.float64))

    def poisoned(shape):
        if dtype == "f16":
            return np.full(shape, np.nan, np.float16)
        return kiln.bf16(np.full(shape, 0x7FC0, np.uint16))

    T, D = 100, 64
    qa, qd, _ = make((16, D))
    ka, kd, value = make((T, D))
    cache = poisoned((T, D))
    s = np.full((16, T), np.nan, np.float32)
    append_and_score[(kiln.cdiv(T, 64),)](qa, ka, cache, s, T, D=D, BT=64)
    assert_close(value(cache), kd, 0, 0)
    assert_close(s, qd @ kd.T, 1e-5, 1e-4)

    M, N, K = 130, 100, 300
    aa, ad, value = make((M, K))
    ba, bd, _ = make((K, N))
    c = np.full((M, N), np.nan, np.float32)
    grid_m = kiln.cdiv(M, 64)
    colsum = np.full((grid_m, N), np.nan, np.float32)
    acopy = poisoned((M, K))
    gemm_with_side_reads[(grid_m, kiln.cdiv(N, 64))](aa, ba, c, colsum, acopy, M, N, K,
                                                     BM=64, BN=64, BK=64)
    assert_close(c, 3 * ad @ bd, 1e-5, 1e-4 * (np.abs(ad) @ np.abs(bd)).max())
    assert_close(colsum, np.tile(bd.sum(0), (grid_m, 1)), 1e-6, 1e-4)
    assert_close(value(acopy), 2 * ad, 0, 0)


@kiln.jit
def dot_transposed_a_and_square(a, b, t, c, s, M, N, K: kl.constexpr, BM: kl.constexpr,
                                BN: kl.constexpr):
    # dot(trans(x), y) (A given as [K, M]: a transpose only the dot reads)
    # and dot(t, t) (one tile as both operands).
    rm = kl.program_id(0) * BM + kl.arange(0, BM)
    rn = kl.arange(0, BN)
    rk = kl.arange(0, K)
    at = kl.load(a + rk[:, None] * M + rm[None, :], mask=rm[None, :] < M, other=0.)
    y = kl.load(b + rk[:, None] * N + rn[None, :], mask=rn[None, :] < N, other=0.)
    kl.store(c + rm[:, None] * N + rn[None, :], kl.dot(kl.trans(at), y),
             mask=(rm[:, None] < M) & (rn[None, :] < N))
    tt = kl.load(t + rk[:, None] * K + rk[None, :])
    kl.store(s + rk[:, None] * K + rk[None, :], kl.dot(tt, tt))


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_dot_of_a_transpose_and_of_one_tile_twice(rng, dtype):
    """dot(trans(x), y) and dot(t, t): on GPUs the transpose is written in
    the dot's operand layout, and a tile read as both operands takes it too."""
    def make(shape):
        x = rng.standard_normal(shape)
        if dtype == "f16":
            h = x.astype(np.float16)
            return h, h.astype(np.float64)
        bits = to_bf16_bits(x)
        return kiln.bf16(bits), from_bf16_bits(bits).astype(np.float64)

    M, N, K = 100, 48, 64
    (aa, ad), (ba, bd), (ta, td) = make((K, M)), make((K, N)), make((K, K))
    c = np.full((M, N), np.nan, np.float32)
    s = np.full((K, K), np.nan, np.float32)
    dot_transposed_a_and_square[(kiln.cdiv(M, 64),)](aa, ba, ta, c, s, M, N, K=K, BM=64, BN=N)
    assert_close(c, ad.T @ bd, 1e-5, 1e-4)
    assert_close(s, td @ td, 1e-5, 1e-4)


@kiln.jit
def batched_dot(a, b, c0, c, M, NB: kl.constexpr, BM: kl.constexpr, K: kl.constexpr,
                N: kl.constexpr, ACC: kl.constexpr):
    rb = kl.arange(0, NB)[:, None, None]
    rm = kl.arange(0, BM)[None, :, None]
    rk = kl.arange(0, K)
    rn = kl.arange(0, N)[None, None, :]
    x = kl.load(a + rb * M * K + rm * K + rk[None, None, :], mask=rm < M, other=0.)
    y = kl.load(b + rb * K * N + rk[None, :, None] * N + rn)
    at = rb * M * N + rm * N + rn
    if ACC:
        kl.store(c + at, kl.dot(x, y, kl.load(c0 + at, mask=rm < M, other=0.)), mask=rm < M)
    else:
        kl.store(c + at, kl.dot(x, y), mask=rm < M)


@pytest.mark.parametrize("nb,acc", [(3, False), (2, True), (1, False)])
def test_batched_dot(rng, nb, acc):
    """Triton's 3-D dot, [B, M, K] @ [B, K, N] (with and without an
    accumulator), on ragged rows: one 2-D dot per batch element."""
    M, K, N = 20, 32, 16
    a = rng.standard_normal((nb, M, K)).astype(np.float16)
    b = rng.standard_normal((nb, K, N)).astype(np.float16)
    c0 = rng.standard_normal((nb, M, N)).astype(np.float32)
    c = np.full((nb, M, N), np.nan, np.float32)
    batched_dot[(1,)](a, b, c0, c, M, NB=nb, BM=32, K=K, N=N, ACC=acc)
    ref = np.einsum("bmk,bkn->bmn", a.astype(np.float64), b.astype(np.float64))
    assert_close(c, ref + (c0 if acc else 0), 1e-5, 1e-4)


@kiln.jit
def batched_dot_mismatch(a, b, c):
    r = kl.arange(0, 16)
    x = kl.load(a + r[:, None, None] * 256 + r[None, :, None] * 16 + r[None, None, :])
    y = kl.load(b + kl.arange(0, 2)[:, None, None] * 256 + r[None, :, None] * 16 + r[None, None, :])
    kl.store(c + r, kl.sum(kl.sum(kl.dot(x, y), axis=2), axis=1))


def test_batched_dot_refuses_mismatched_batches():
    with pytest.raises(kiln.CompilationError, match=r"batched shapes do not match"):
        batched_dot_mismatch[(1,)](np.zeros(4096, np.float16), np.zeros(512, np.float16),
                                   np.zeros(16, np.float32))


@kiln.jit
def guarded_rows(x, y, n, BLOCK: kl.constexpr):
    # Triton's early returns: a guard on the program id, and one inside a
    # branch that depends on the data (and a nested one).
    i = kl.program_id(0)
    if i * BLOCK >= n:
        return
    o = i * BLOCK + kl.arange(0, BLOCK)
    v = kl.load(x + o, mask=o < n, other=0.)
    if kl.sum(v, axis=0) > 1000.0:
        kl.store(y + o, -v, mask=o < n)
        return
    else:
        if kl.max(v, axis=0) < -50.0:
            return
    kl.store(y + o, v * 2, mask=o < n)


@kiln.jit
def guarded_store(x, i, bound):
    if i >= bound:
        return
    kl.store(x + i, 5.0)


@kiln.jit
def guarded_gemm(a, b, c, M, N, K, tiles, BM: kl.constexpr, BN: kl.constexpr,
                 BK: kl.constexpr):
    pid = kl.program_id(0)
    guarded_store(c + M * N, pid, 3)           # a helper's early return
    if pid >= tiles:
        return
    pm = pid // kl.cdiv(N, BN)
    pn = pid % kl.cdiv(N, BN)
    rm = pm * BM + kl.arange(0, BM)
    rn = pn * BN + kl.arange(0, BN)
    acc = kl.zeros((BM, BN), kl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + kl.arange(0, BK)
        x = kl.load(a + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K),
                    other=0.)
        y = kl.load(b + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N),
                    other=0.)
        acc = kl.dot(x, y, acc)
    kl.store(c + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@kiln.jit
def return_in_a_loop(x, n):
    for i in range(0, n):
        if i > 3:
            return
        kl.store(x + i, 1.0)


def test_early_returns(rng):
    """`if ...: return` (no value, outside loops) ends the program there;
    the statements after the `if` run only on the paths that do not return.
    Programs past the work (ragged grid), a data-dependent branch, a nested
    one, a helper's guard and a pipelined GEMM after a guard."""
    x = rng.standard_normal(100).astype(np.float32)
    x[64:80] += 100       # a block whose sum is large: negated, then returns
    x[32:48] -= 100       # a block whose max is below -50: returns, nothing stored
    y = np.full(160, -7, np.float32)
    guarded_rows[(10,)](x, y, 100, BLOCK=16)
    ref = np.concatenate([x[:32] * 2, np.full(16, -7), x[48:64] * 2, -x[64:80], x[80:] * 2,
                          np.full(60, -7)])
    assert_close(y, ref, 0, 0)

    M, N, K = 130, 100, 200
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full(M * N + 8, np.nan, np.float32)
    c[M * N + 3:] = -1
    tiles = kiln.cdiv(M, 64) * kiln.cdiv(N, 64)
    guarded_gemm[(tiles + 5,)](a, b, c, M, N, K, tiles, BM=64, BN=64, BK=64)
    assert_close(c[:M * N].reshape(M, N), a.astype(np.float64) @ b.astype(np.float64), 1e-5,
                 1e-4 * (np.abs(a).astype(np.float64) @ np.abs(b)).max())
    assert_close(c[M * N:], [5, 5, 5, -1, -1, -1, -1, -1], 0, 0)

    with pytest.raises(kiln.CompilationError, match="outside loops"):
        return_in_a_loop[(1,)](np.zeros(8, np.float32), 8)


@kiln.jit
def downcasts(x, h_rtz, b_rtz, h_rtne, f_rtz, x64, n, B: kl.constexpr):
    o = kl.arange(0, B)
    m = o < n
    v = kl.load(x + o, mask=m)
    kl.store(h_rtz + o, v.to(kl.float16, fp_downcast_rounding="rtz"), mask=m)
    kl.store(b_rtz + o, kl.cast(v, kl.bfloat16, fp_downcast_rounding="rtz"), mask=m)
    kl.store(h_rtne + o, v.to(kl.float16, fp_downcast_rounding="rtne"), mask=m)
    kl.store(f_rtz + o, kl.load(x64 + o, mask=m).to(kl.float32, fp_downcast_rounding="rtz"),
             mask=m)


@kiln.jit
def rtz_widening(x, y):
    kl.store(y, kl.load(x).to(kl.float32, fp_downcast_rounding="rtz"))


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_fp_downcast_rounding(rng):
    """Triton's fp_downcast_rounding: 'rtz' rounds toward zero (float32 to
    float16 and bfloat16, float64 to float32), overflow to the largest
    finite value, infinities and NaN kept; 'rtne' is the default's."""
    x = np.concatenate([rng.standard_normal(200) * 10.0 ** rng.integers(-9, 6, 200),
                        [1e6, -1e6, 65519.0, 65521.0, np.inf, -np.inf, np.nan, 0.0, -0.0,
                         1e-8, -3e-7, 2.0 ** -24 * 1.5]]).astype(np.float32)
    x64 = rng.standard_normal(x.size) * 10.0 ** rng.integers(-30, 30, x.size)
    n = x.size
    h_rtz = np.full(n, np.nan, np.float16)
    b_rtz = np.full(n, 0x7FC0, np.uint16)
    h_rtne = np.full(n, np.nan, np.float16)
    f_rtz = np.full(n, np.nan, np.float32)
    downcasts[(1,)](x, h_rtz, kiln.bf16(b_rtz), h_rtne, f_rtz, x64, n, B=256)

    def toward_zero(values, to):
        c = values.astype(to)
        over = np.isfinite(values) & (np.abs(c.astype(np.float64)) > np.abs(values))
        c[over] = np.nextafter(c[over], to(0))
        return c
    finite = np.isfinite(x)
    assert np.array_equal(h_rtz, toward_zero(x, np.float16), equal_nan=True)
    assert np.array_equal(h_rtne, x.astype(np.float16), equal_nan=True)
    assert np.array_equal(f_rtz, toward_zero(x64, np.float32))
    # bfloat16 toward zero: the float32's top 16 bits (finite values).
    top = (x.view(np.uint32) >> 16).astype(np.uint16)
    assert np.array_equal(b_rtz[finite], top[finite])
    assert np.isnan(from_bf16_bits(b_rtz[np.isnan(x)])).all()
    assert np.array_equal(from_bf16_bits(b_rtz[np.isinf(x)]), x[np.isinf(x)])
    with pytest.raises(kiln.CompilationError, match="narrowing float conversions"):
        rtz_widening[(1,)](np.zeros(1, np.float16), np.zeros(1, np.float32))


# fp8 dots: kl.dot of two fp8 tiles is one kiln.dot on their bits (lhs_fp8 /
# rhs_fp8). On sm_90a a dot whose A is a load and whose B is the transpose of
# a load (both K-major) runs on wgmma's e4m3 / e5m2 forms; every other dot
# and target decodes both operands to bfloat16 (exact). Products of fp8
# values are exact in float32, so both agree with float64 to the sums'
# rounding.
# B_FORM: 0, W's rows [BN, BK] transposed (K-major); 1, W^T's tile [BK, BN]
# addressed straight in W [N, K] (the front end loads W's rows and transposes
# them: K-major too); 2, B [K, N] in rows of N (N-major, which fp8 wgmma
# cannot read: on sm_90a copied transposed by threads into the K-major
# operand layout, transposeNMajorBytes; decoded elsewhere).
FP8_B_FORMS = {"k_major": 0, "w_transposed": 1, "n_major": 2}


@kiln.jit
def fp8_gemm(a, w, c, M, N, K, BM: kl.constexpr, BN: kl.constexpr, BK: kl.constexpr,
             B_FORM: kl.constexpr):
    pm, pn = kl.program_id(0), kl.program_id(1)
    rm = pm * BM + kl.arange(0, BM)
    rn = pn * BN + kl.arange(0, BN)
    rk = kl.arange(0, BK)
    acc = kl.zeros((BM, BN), kl.float32)
    for k0 in range(0, K, BK):
        x = kl.load(a + rm[:, None] * K + (k0 + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        if B_FORM == 0:
            wk = kl.load(w + rn[:, None] * K + (k0 + rk)[None, :],
                         mask=(rn[:, None] < N) & ((k0 + rk)[None, :] < K), other=0.0)
            acc = kl.dot(x, kl.trans(wk), acc)
        elif B_FORM == 1:
            wt = kl.load(w + rn[None, :] * K + (k0 + rk)[:, None],
                         mask=(rn[None, :] < N) & ((k0 + rk)[:, None] < K), other=0.0)
            acc += kl.dot(x, wt)
        else:
            y = kl.load(w + (k0 + rk)[:, None] * N + rn[None, :],
                        mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc += kl.dot(x, y)
    kl.store(c + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def _fp8_codes(rng, shape, fmt):
    """Random fp8 bytes without NaN (nor e5m2's infinities)."""
    c = rng.integers(0, 256, shape).astype(np.uint8)
    if fmt == "e4m3":
        c[(c & 0x7F) == 0x7F] = 0x38
    else:
        c[(c & 0x7C) == 0x7C] = 0x3C
    return c


@pytest.mark.parametrize("fa,fw", [("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3")])
@pytest.mark.parametrize("kernel", ["k_major", "w_transposed", "n_major"])
def test_fp8_dots(rng, fa, fw, kernel):
    from kiln.frontend import fp8_value
    table = {f: np.array([fp8_value(c, f) for c in range(256)]) for f in ("e4m3", "e5m2")}
    M, N, K = 130, 100, 300
    a, w = _fp8_codes(rng, (M, K), fa), _fp8_codes(rng, (N, K), fw)
    # (n_major takes W^T [K, N] in rows.)
    wa = np.ascontiguousarray(w.T) if kernel == "n_major" else w

    def run():
        c = np.full((M, N), np.nan, np.float32)
        fp8_gemm[(kiln.cdiv(M, 64), kiln.cdiv(N, 64))](kiln.fp8(a, fa), kiln.fp8(wa, fw), c, M,
                                                       N, K, BM=64, BN=64, BK=64,
                                                       B_FORM=FP8_B_FORMS[kernel])
        return c
    da, dw = table[fa][a], table[fw][w]
    assert_close(run(), da @ dw.T, 1e-6, 1e-6 * (np.abs(da) @ np.abs(dw).T).max())
    # e4m3's NaN (S.1111.111) in a row of A: that row of C is NaN, the others
    # are not.
    if fa == "e4m3":
        a[7, 100] = 0xFF
        c = run()
        assert np.isnan(c[7]).all() and not np.isnan(np.delete(c, 7, 0)).any()


def test_fp8_matmul_mlir_example(rng, tmp_path):
    """examples/matmul_fp8.mlir (kiln.dot with lhs_fp8 / rhs_fp8 written by
    hand) through kilnc for this suite's target, then the runtime."""
    from kiln.frontend import fp8_value
    root = os.path.dirname(os.path.dirname(HERE))
    out = tmp_path / "mf8.kiln"
    target = os.environ.get("KILN_TARGET")
    subprocess.run([KILNC, os.path.join(root, "examples", "matmul_fp8.mlir"), "-o", str(out)]
                   + (["--target", target] if target else []), check=True)
    M, N, K = 70, 130, 200
    a, w = _fp8_codes(rng, (M, K), "e4m3"), _fp8_codes(rng, (N, K), "e5m2")
    c = np.full((M, N), np.nan, np.float32)
    kiln.load_bundle(str(out))[(kiln.cdiv(N, 64), kiln.cdiv(M, 64))](
        a.view(np.int8), w.view(np.int8), c, M, N, K)
    da = np.array([fp8_value(int(x), "e4m3") for x in range(256)])[a]
    dw = np.array([fp8_value(int(x), "e5m2") for x in range(256)])[w]
    assert_close(c, da @ dw.T, 1e-6, 1e-6 * (np.abs(da) @ np.abs(dw).T).max())


# int8 dots (i8 x i8 -> i32, exact): a dot whose A is a loaded tile and
# whose B is the transpose of one (B_FORM 0: W's rows transposed; 1: W^T's
# tile addressed in W, which the front end loads as rows and transposes)
# runs on wgmma's s8 form (sm_90a) or mma.sync.m16n8k32.s8 (sm_80) into s32
# registers; an N-major B (2) through a transposed copy of its tile
# (transposeNMajorBytes); the CPU sums without them. ACC_IN 1 starts from a
# loaded int32 tile instead of zeros (read into the s32 registers), 2 from a
# splat of -7 (an i32 constant in them); on sm_90a
# K steps of 64 bytes go by cp.async, of 128 by TMA into the 128B swizzle.
@kiln.jit
def int8_gemm(a, w, c, c_in, M, N, K, BM: kl.constexpr, BN: kl.constexpr, BK: kl.constexpr,
              B_FORM: kl.constexpr, ACC_IN: kl.constexpr):
    pm, pn = kl.program_id(0), kl.program_id(1)
    rm = pm * BM + kl.arange(0, BM)
    rn = pn * BN + kl.arange(0, BN)
    rk = kl.arange(0, BK)
    cmask = (rm[:, None] < M) & (rn[None, :] < N)
    if ACC_IN == 1:
        acc = kl.load(c_in + rm[:, None] * N + rn[None, :], mask=cmask, other=0)
    elif ACC_IN == 2:
        acc = kl.full((BM, BN), -7, kl.int32)
    else:
        acc = kl.zeros((BM, BN), kl.int32)
    for k0 in range(0, K, BK):
        x = kl.load(a + rm[:, None] * K + (k0 + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0)
        if B_FORM == 0:
            wk = kl.load(w + rn[:, None] * K + (k0 + rk)[None, :],
                         mask=(rn[:, None] < N) & ((k0 + rk)[None, :] < K), other=0)
            acc = kl.dot(x, kl.trans(wk), acc)
        elif B_FORM == 1:
            wt = kl.load(w + rn[None, :] * K + (k0 + rk)[:, None],
                         mask=(rn[None, :] < N) & ((k0 + rk)[:, None] < K), other=0)
            acc += kl.dot(x, wt)
        else:
            y = kl.load(w + (k0 + rk)[:, None] * N + rn[None, :],
                        mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0)
            acc += kl.dot(x, y)
    kl.store(c + rm[:, None] * N + rn[None, :], acc, mask=cmask)


@pytest.mark.parametrize("kernel", ["k_major", "w_transposed", "n_major"])
@pytest.mark.parametrize("acc_in", [0, 1, 2])
@pytest.mark.parametrize("K,BK", [(300, 64), (300, 128), (100, 128)])
def test_int8_dots(rng, kernel, acc_in, K, BK):
    M, N = 130, 100
    a = rng.integers(-128, 128, (M, K)).astype(np.int8)
    w = rng.integers(-128, 128, (N, K)).astype(np.int8)
    c_in = rng.integers(-2**30, 2**30, (M, N)).astype(np.int32)
    wa = np.ascontiguousarray(w.T) if kernel == "n_major" else w
    c = np.full((M, N), -0x5A5A5A5A, np.int32)
    int8_gemm[(kiln.cdiv(M, 64), kiln.cdiv(N, 64))](a, wa, c, c_in, M, N, K, BM=64, BN=64, BK=BK,
                                                    B_FORM=FP8_B_FORMS[kernel], ACC_IN=acc_in)
    ref = a.astype(np.int64) @ w.astype(np.int64).T + {0: 0, 1: c_in, 2: -7}[acc_in]
    np.testing.assert_array_equal(c, ref)


@kiln.jit
def fp8_dot_f16_out(a, b, c, M: kl.constexpr, K: kl.constexpr, N: kl.constexpr):
    rm = kl.arange(0, M)[:, None]
    rk = kl.arange(0, K)
    rn = kl.arange(0, N)[None, :]
    x = kl.load(a + rm * K + rk[None, :])
    y = kl.load(b + rk[:, None] * N + rn)
    kl.store(c + rm * N + rn, kl.dot(x, y, out_dtype=kl.float16))


def test_fp8_dot_into_float16(rng):
    """fp8 x fp8 with out_dtype=float16: both operands decode to float16 (all
    fp8 values are float16s; bfloat16 x bfloat16 -> float16 is no dot), the
    sums in float16 on tensor cores."""
    from kiln.frontend import fp8_value
    table = np.array([fp8_value(c, "e4m3") for c in range(256)])
    a, b = _fp8_codes(rng, (64, 32), "e4m3") & 0xBF, _fp8_codes(rng, (32, 16), "e4m3") & 0xBF
    c = np.full((64, 16), np.nan, np.float16)
    fp8_dot_f16_out[(1,)](kiln.fp8(a, "e4m3"), kiln.fp8(b, "e4m3"), c, M=64, K=32, N=16)
    da, db = table[a], table[b]
    assert_close(c, da @ db, 2e-3, 2e-3 * (np.abs(da) @ np.abs(db)).max())


# The kernel of the scripts below (run_python): each value of C compiles anew.
CONST_STORE = """
import numpy as np, kiln, kiln.language as kl
@kiln.jit
def k(dst, C: kl.constexpr):
    kl.store(dst + kl.arange(0, 4), kl.zeros((4,), kl.float32) + C)
"""


def test_the_disk_cache_is_bounded_by_kiln_cache_max_mb(tmp_path):
    """Past KILN_CACHE_MAX_MB the least recently used entries go: an old
    entry of 2 MiB is removed by the first write under a 1 MB bound, the new
    entry stays; a malformed bound is a clear error, not an unbounded cache."""
    cache = tmp_path / "cache"
    cache.mkdir()
    old = cache / ("0" * 64 + ".kiln")
    old.write_bytes(b"\0" * (2 << 20))
    os.utime(old, (1e9, 1e9))
    code = CONST_STORE + textwrap.dedent("""
        a = np.zeros(4, np.float32)
        k[(1,)](a, C=3)
        assert (a == 3).all(), a
        s = kiln.cache_stats()
        print("compiles", s["compiles"], "evictions", s["evictions"])
    """)
    r = run_python(code, {"KILN_CACHE_DIR": str(cache), "KILN_CACHE_MAX_MB": "1"}, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "compiles 1 evictions 1" in r.stdout, r.stdout
    left = [p.name for p in cache.iterdir()]
    assert len(left) == 1 and left[0].endswith(".kiln") and left[0] != old.name, left
    r = run_python(code, {"KILN_CACHE_DIR": str(cache), "KILN_CACHE_MAX_MB": "1GB"}, tmp_path)
    assert r.returncode != 0
    assert "KILN_CACHE_MAX_MB='1GB' is not a size in megabytes" in r.stderr, r.stderr


def test_an_empty_target_is_the_host_in_the_environment_and_an_error_as_an_argument(tmp_path):
    """KILN_TARGET set but empty reads as unset (the host), everywhere the
    target is read: kernels compile, and kiln.ops sizes its host blocks for
    the host's vectors. An explicit JIT.create(target="") is an error (it was
    taken as the host)."""
    code = CONST_STORE + textwrap.dedent("""
        from kiln import ops, _kiln
        a = np.zeros(4, np.float32)
        k[(1,)](a, C=3)
        assert (a == 3).all(), a
        feats = _kiln.cpu_features().split()
        bits = 512 if "avx512f" in feats else 256 if "avx2" in feats else 128
        assert ops._host_vector_bits() == bits, (ops._host_vector_bits(), bits)
        try:
            _kiln.JIT.create("", "", 0)
        except Exception as e:
            print("refused:", e)
    """)
    r = run_python(code, {"KILN_CACHE_DIR": str(tmp_path / "cache"), "KILN_TARGET": ""},
                   tmp_path)
    assert r.returncode == 0, r.stderr
    assert "refused: the target is empty: give host" in r.stdout, r.stdout


def test_compiling_leaves_the_applications_alarm_and_signals_alone(tmp_path):
    """The linker ran under llvm::sys::ExecuteAndWait with a timeout: it set
    alarm() and a SIGALRM handler, so a compile cancelled the application's
    pending alarm, and any handled signal during the link failed the
    compile with "Child timed out". Now: the alarm fires, and compiles under
    a storm of SIGUSR1 succeed."""
    code = CONST_STORE + textwrap.dedent("""
        import os, signal, threading, time
        fired = []
        signal.signal(signal.SIGALRM, lambda *a: fired.append(time.monotonic()))
        signal.signal(signal.SIGUSR1, lambda *a: None)
        start = time.monotonic()
        signal.alarm(3)
        stop = threading.Event()
        def storm():
            while not stop.is_set():
                os.kill(os.getpid(), signal.SIGUSR1)
                time.sleep(0.002)
        t = threading.Thread(target=storm)
        t.start()
        try:
            for c in (1, 2):
                a = np.zeros(4, np.float32)
                k[(1,)](a, C=c)
                assert (a == c).all(), a
        finally:
            stop.set()
            t.join()
        assert kiln.cache_stats()["compiles"] == 2
        while not fired and time.monotonic() - start < 8:
            time.sleep(0.05)
        assert fired and 2.9 <= fired[0] - start <= 6, (fired, start)
        print("ok")
    """)
    r = run_python(code, {"KILN_CACHE_DIR": str(tmp_path / "cache")}, tmp_path)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


def test_python_m_kiln_reports_and_clears_the_cache(tmp_path):
    cache = tmp_path / "cache"
    (cache / "autotune").mkdir(parents=True)
    for n in ("a" * 64 + ".kiln", "b" * 64 + ".kiln", "c" * 64 + ".kiln.tmp.1.2.3"):
        (cache / n).write_bytes(b"\0" * 1000)
    (cache / "autotune" / "k.json").write_text("{}")
    # (A record's write that a killed tuning run left: was kept.)
    (cache / "autotune" / "k.json.tmp.123.456").write_text("{")
    (cache / "notes.txt").write_text("not kiln's")
    # A user's bundle kept there is not the cache's (any *.kiln was cleared).
    (cache / "mine.kiln").write_bytes(b"\0" * 1000)
    env = dict(os.environ, KILN_CACHE_DIR=str(cache), KILN_CACHE_MAX_MB="64")
    r = subprocess.run([sys.executable, "-m", "kiln"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert f"JIT cache: {cache}, 2 kernels, 0.0 MB (bound 64 MB" in r.stdout, r.stdout
    r = subprocess.run([sys.executable, "-m", "kiln", "clear-cache"], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0 and f"removed 5 files from {cache}" in r.stdout, (r.stdout, r.stderr)
    assert sorted(p.name for p in cache.rglob("*") if p.is_file()) == ["mine.kiln",
                                                                       "notes.txt"]
    r = subprocess.run([sys.executable, "-m", "kiln", "clear"], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 2 and "usage: python -m kiln [clear-cache]" in r.stderr
    # A malformed bound: one line, not a traceback.
    r = subprocess.run([sys.executable, "-m", "kiln"], capture_output=True, text=True,
                       env=dict(env, KILN_CACHE_MAX_MB="abc"))
    assert r.returncode == 1 and r.stderr.startswith("kiln: KILN_CACHE_MAX_MB='abc' is not a "
                                                     "size") and "Traceback" not in r.stderr


# -- a dot operand carried by its loop; stores a later iteration loads ------


@kiln.jit
def carried_dot_operand(a, x0, out, nsteps, B: kl.constexpr, D: kl.constexpr):
    rb = kl.arange(0, B)
    rd = kl.arange(0, D)
    x = kl.load(x0 + rb[:, None] * D + rd[None, :])
    for i in range(0, nsteps):
        m = kl.load(a + i * B * B + rb[:, None] * B + rb[None, :])
        x = kl.dot(m, x).to(kl.float16)
    kl.store(out + rb[:, None] * D + rd[None, :], x)


def test_a_dot_operand_carried_by_its_loop_is_read_every_iteration(rng):
    """sm_90a's wgmma copied an operand defined outside the dot's loop into
    core matrices once, before the loop; a loop-carried X was taken for such
    an operand, so x = dot(m, x) used the first x every iteration (error
    11, not 1e-3). On every target here; the emulated suites run it on
    wgmma."""
    B, D, steps = 64, 16, 3
    a = (rng.standard_normal((steps, B, B)) * 0.2).astype(np.float16)
    x0 = rng.standard_normal((B, D)).astype(np.float16)
    ref = x0.astype(np.float64)
    for i in range(steps):
        ref = (a[i].astype(np.float64) @ ref).astype(np.float16).astype(np.float64)
    out = np.full((B, D), np.nan, np.float16)
    carried_dot_operand[(1,)](a, x0, out, steps, B=B, D=D)
    assert np.abs(out.astype(np.float64) - ref).max() < 2e-2


@kiln.jit
def running_rows(x, n, R: kl.constexpr, C: kl.constexpr):
    v = kl.make_view(x, (n, C), (C, 1))
    for s in range(0, n - R, R):
        t = kl.load(v, offsets=(s, 0), shape=(R, C))
        u = kl.load(v, offsets=(s + R, 0), shape=(R, C))
        kl.store(v, u + 2.0 * t, offsets=(s + R, 0))


@kiln.jit
def scan_plus_one(x, out, B: kl.constexpr):
    i = kl.arange(0, B)
    kl.store(out + i, kl.associative_scan(kl.load(x + i), 0, _add_plus_one))


@kiln.jit
def _add_plus_one(a, b):
    return a + b + 1


def test_loads_of_rows_the_loop_stores_are_not_issued_ahead():
    """Pipelined loads were issued iterations ahead of the stores before
    them: x[s + R] += 2 x[s] read row blocks before the previous iteration
    wrote them (TMA on sm_90a; cp.async on sm_80 read them at its wait on
    the emulator, at issue on a GPU). A load through a pointer the loop
    writes is no longer pipelined. And a combine_fn `a + b + 1` (not two
    names) failed with a TypeError instead of taking the generic path."""
    R, C, n = 16, 8, 67
    x = np.ones((n, C), np.float32)
    ref = x.astype(np.float64)
    for s in range(0, n - R, R):
        rows = min(R, n - s - R)    # (the view drops rows past n)
        ref[s + R:s + R + rows] += 2 * ref[s:s + rows]
    running_rows[(1,)](x, n, R=R, C=C)
    assert np.array_equal(x, ref)
    v = np.arange(8, dtype=np.int32)
    out = np.zeros(8, np.int32)
    scan_plus_one[(1,)](v, out, B=8)
    assert list(out) == [int(np.cumsum(v)[k]) + k for k in range(8)]
