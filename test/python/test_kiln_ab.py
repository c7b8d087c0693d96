"""scripts/kiln-ab.py: two builds of a kernel timed against each other,
interleaved, after their outputs are checked to agree."""
import os
import subprocess
import sys

from conftest import KILNC, ROOT

TOOL = os.path.join(ROOT, "scripts", "kiln-ab.py")
ADD = os.path.join(ROOT, "examples", "vector_add.mlir")
ARGS = ["--grid", "3", "--arg", "randn:3000", "--arg", "randn:3000", "--arg", "zeros:3000",
        "--arg", "3000", "--rounds", "4"]


def run(*args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True,
                          env=env, timeout=300)


def test_same_kernel_through_two_compilers():
    r = run("--kilnc-a", KILNC, "--kilnc-b", KILNC, "--source", ADD, *ARGS)
    assert r.returncode == 0, r.stderr
    assert "A vector_add: best" in r.stdout and "time B / A: median" in r.stdout


def test_outputs_that_differ_are_not_timed(tmp_path):
    # B subtracts: its output differs from A's, so nothing is timed.
    sub = tmp_path / "sub.mlir"
    sub.write_text(open(ADD).read().replace("arith.addf", "arith.subf"))
    bundles = []
    for name, src in (("a", ADD), ("b", str(sub))):
        path = str(tmp_path / f"{name}.kiln")
        subprocess.run([KILNC, src, "-o", path], check=True)
        bundles.append(path)
    r = run(*bundles, *ARGS)
    assert r.returncode == 1
    assert "argument 2 (zeros:3000) differs" in r.stderr and "median" not in r.stdout
    # A kernel that leaves part of its output unwritten (n smaller than the
    # array) keeps the poison: refused as well.
    short = [a if a != "3000" else "2000" for a in ARGS]
    r = run(bundles[0], bundles[0], *short)
    assert r.returncode == 1 and "holds NaN" in r.stderr


def test_bad_arguments_are_named():
    r = run("--kilnc-a", KILNC, "--kilnc-b", KILNC, "--source", ADD, "--grid", "1",
            "--arg", "randn:12xq")
    assert r.returncode != 0 and "cannot read the argument 'randn:12xq'" in r.stderr
    r = run("--kilnc-a", KILNC, "--source", ADD, "--grid", "1")
    assert r.returncode != 0 and "--kilnc-a and --kilnc-b" in r.stderr


def test_float_scalars(tmp_path):
    # dsa_sparse_attention takes its softmax scale as an f32 scalar.
    r = run("--kilnc-a", KILNC, "--kilnc-b", KILNC, "--op", "dsa_sparse_attention",
            "--op-arg=--d_qk=64", "--op-arg=--d_v=32", "--op-arg=--heads_block=4",
            "--op-arg=--block_k=16", "--grid", "3,1", "--arg", "randn:3x4x64",
            "--arg", "randn:50x64", "--arg", "randint:0:50:3x40", "--arg", "zeros:3x4x32",
            "--arg", "zeros:3x4", "--arg", "zeros:1:int32", "--arg", "3", "--arg", "4",
            "--arg", "50", "--arg", "40", "--arg", "0.125", "--rounds", "2")
    assert r.returncode == 0, r.stderr
    assert "time B / A: median" in r.stdout
