"""Mutation fuzzing of kilnc: malformed IR must be refused, never crash.

Every example kernel is mutated at random (lines deleted, duplicated or
swapped, tokens replaced, the file truncated, characters dropped) and each
mutant goes through the whole `kilnc` pipeline (parse, verify, lower, LLVM,
link). A mutant must either compile or be refused with exit status 1 and an
`error:` message; a signal, an LLVM fatal error, an assertion or a hang fails
the test. The seed is random per run and printed; set KILN_TEST_SEED to replay.
"""
import glob
import os
import random
import re
import subprocess

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
from conftest import KILNC  # noqa: E402
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.mlir")))
MUTANTS_PER_FILE = int(os.environ.get("KILN_FUZZ_MUTANTS", "12"))

TOKENS = ["f32", "bf16", "i32", "i64", "index", "i1", "0", "1", "-1", "64", "3",
          "%0", "%arg0", "tensor", "<", ">", "(", ")", "{", "}", ",", ":", "x",
          "kiln.load", "kiln.store", "kiln.dot", "kiln.reduce", "kiln.splat",
          "kiln.return", "scf.yield", "arith.addf", "arith.constant", "!kiln.ptr<f32>",
          "!kiln.view<f32, 2>", "dense<0.0>", "axis = 1", "\"", "^bb0", ""]

CRASH_MARKERS = ("Stack dump", "PLEASE submit a bug report", "LLVM ERROR",
                 "Assertion", "UNREACHABLE", "Segmentation fault")


def mutate(text, rnd):
    lines = text.split("\n")
    kind = rnd.randrange(7)
    if kind == 0 and len(lines) > 1:
        del lines[rnd.randrange(len(lines))]
    elif kind == 1:
        i = rnd.randrange(len(lines))
        lines.insert(i, lines[i])
    elif kind == 2 and len(lines) > 1:
        i, j = rnd.randrange(len(lines)), rnd.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == 3:
        # Replace one token (an SSA name, a number, a type, an op name).
        spans = [m.span() for m in re.finditer(r"[%!#^]?[\w.]+(<[^<>]*>)?", text)]
        a, b = spans[rnd.randrange(len(spans))]
        return text[:a] + rnd.choice(TOKENS) + text[b:]
    elif kind == 4:
        return text[:rnd.randrange(len(text))]
    elif kind == 5:
        a = rnd.randrange(len(text))
        return text[:a] + text[a + rnd.randint(1, 8):]
    else:
        # Change a number: shapes, constants, axes, offsets.
        nums = [m.span() for m in re.finditer(r"\b\d+\b", text)]
        if nums:
            a, b = nums[rnd.randrange(len(nums))]
            return text[:a] + str(rnd.choice([0, 1, 2, 3, 5, 7, 63, 65, 4096, 99999999])) + text[b:]
    return "\n".join(lines)


@pytest.mark.parametrize("target", ["host", "sm_80", "emu-sm_90a"])
def test_kilnc_survives_mutated_kernels(tmp_path, target):
    assert EXAMPLES, "no example kernels found"
    seed = int(os.environ.get("KILN_TEST_SEED", np.random.SeedSequence().entropy % (1 << 32)))
    print(f"seed {seed}")
    rnd = random.Random(seed)
    compiled = refused = 0
    for path in EXAMPLES:
        text = open(path).read()
        for n in range(MUTANTS_PER_FILE):
            mutant = mutate(text, rnd)
            src = tmp_path / f"{os.path.basename(path)}.{n}.mlir"
            src.write_text(mutant)
            try:
                proc = subprocess.run([KILNC, str(src), "--target", target,
                                       "-o", str(tmp_path / "out.kiln")],
                                      capture_output=True, text=True, timeout=120)
            except subprocess.TimeoutExpired:
                pytest.fail(f"kilnc hung on a mutant of {path} (seed {seed}):\n{mutant}")
            where = f"mutant {n} of {os.path.basename(path)} (seed {seed})"
            assert proc.returncode in (0, 1), (
                f"kilnc exited with {proc.returncode} on {where}:\n{proc.stderr}\n--- input ---\n{mutant}")
            for marker in CRASH_MARKERS:
                assert marker not in proc.stderr, f"{marker} on {where}:\n{proc.stderr}\n{mutant}"
            if proc.returncode == 0:
                compiled += 1
            else:
                assert "error:" in proc.stderr, f"refused without an error message on {where}"
                refused += 1
    print(f"{compiled} mutants compiled, {refused} refused")
    # The mutations must actually exercise the error paths.
    assert refused > 0


def test_kilnc_op_refuses_bad_configurations(tmp_path):
    """Random values for every operator's keys: compiled or refused, never a crash."""
    listing = subprocess.run([KILNC, "op", "--list"], capture_output=True, text=True, check=True).stdout
    ops, current = {}, None
    for line in listing.splitlines():
        if not line.startswith(" ") and ":" in line:
            current = line.split(":")[0]
            ops[current] = []
        elif current and line.strip().startswith("--"):
            ops[current].append(line.split()[0][2:])
    assert len(ops) >= 8, listing
    seed = int(os.environ.get("KILN_TEST_SEED", np.random.SeedSequence().entropy % (1 << 32)))
    print(f"seed {seed}")
    rnd = random.Random(seed)
    values = ["0", "-1", "1", "3", "7", "64", "100", "65536", "1e9", "x", "", "f64", "bf16",
              "i8", "none", "causal", "2.5", "99999999999999999999"]
    refused = 0
    for name, keys in ops.items():
        for _ in range(4):
            args = [KILNC, "op", name, "-o", str(tmp_path / "op.kiln")]
            for key in rnd.sample(keys, k=min(len(keys), rnd.randint(1, 2))):
                args += [f"--{key}", rnd.choice(values)]
            proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
            where = " ".join(args[1:])
            assert proc.returncode in (0, 1), f"exit {proc.returncode}: {where}\n{proc.stderr}"
            for marker in CRASH_MARKERS:
                assert marker not in proc.stderr, f"{marker}: {where}\n{proc.stderr}"
            if proc.returncode:
                assert "error" in proc.stderr, f"refused without a message: {where}"
                refused += 1
    assert refused > 0


def _kernel(body):
    return ("kiln.func @k(%x: !kiln.ptr<f32> {kiln.name = \"x\"}) {\n" + body +
            "\n  kiln.return\n}\n")


NOP_ASM = '  llvm.inline_asm has_side_effects "nop", "" : () -> ()'


def _nested_sets(levels):
    """`levels` nested loops, each with an integer set whose `>=` once
    counted as closing brackets."""
    loops = "".join(f"  scf.for %i{n} = %c0 to %c1 step %c1 {{\n  %t{n} = arith.constant "
                    f"{{s = affine_set<(d0) : (d0 >= 0, d0 >= 0)>}} 0 : index\n"
                    for n in range(levels))
    return _kernel("  %c0 = arith.constant 0 : index\n  %c1 = arith.constant 1 : index\n" +
                   loops + "  }\n" * levels)


UI8_COPY = """kiln.func @k(%x: !kiln.ptr<ui8> {kiln.name = "x"}) {
  %c0 = arith.constant 0 : index
  %v = kiln.make_view %x, [%c0], [%c0] : !kiln.ptr<ui8> -> !kiln.view<1xui8>
  %a = kiln.load %v[%c0] : !kiln.view<1xui8> -> tensor<16xui8>
  kiln.store %a, %v[%c0] : tensor<16xui8> -> !kiln.view<1xui8>
  kiln.return
}
"""

F8_SCAN = """kiln.func @k(%x: !kiln.ptr<f8E4M3FN> {kiln.name = "x"}, %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f8E4M3FN> -> !kiln.view<1xf8E4M3FN>
  %b = kiln.load %v[%c0] : !kiln.view<1xf8E4M3FN> -> tensor<16xf8E4M3FN>
  %r = kiln.scan sum %b [0] : tensor<16xf8E4M3FN>
  kiln.store %r, %v[%c0] : tensor<16xf8E4M3FN> -> !kiln.view<1xf8E4M3FN>
  kiln.return
}
"""

HOSTILE = [
    # Inline assembly is assembled by LLVM's streamer (it aborted without
    # the target's asm parser).
    ("inline-asm", _kernel(NOP_ASM), "host", None),
    # Another target's ops reached instruction selection, which aborted.
    ("nvvm-on-host", _kernel("  nvvm.barrier0"), "host", "'nvvm.barrier0' is an NVIDIA "
                                                         "GPU op, which the "),
    ("x86-on-gpu", _kernel('  %r = llvm.call_intrinsic "llvm.x86.rdrand.32"() : () -> '
                           '!llvm.struct<(i32, i32)>'), "sm_80",
     "is an intrinsic of another target, which the sm_80 target cannot compile"),
    ("nvvm-intrinsic-on-host", _kernel('  llvm.call_intrinsic "llvm.nvvm.barrier0"() : () '
                                       '-> ()'), "host", "an intrinsic of another target"),
    # A kernel in a nested module compiled to a bundle without its entry (a
    # single top-level module is the module itself).
    ("nested-module", "module {\n  module {\n" + _kernel("") + "}\n}\n", "host",
     "kernel 'k' is inside a nested module"),
    # Unary minus signs nest the affine parser without brackets, and '>='
    # closed no bracket: both ran the parser out of stack.
    ("unary-minus", _kernel("  kiln.return {m = affine_map<(d0) -> (" + "-" * 20000 +
                            "d0)>}").replace("\n  kiln.return\n}", "\n}"), "host",
     "deeper than 512 levels"),
    ("integer-sets", _nested_sets(600), "host", "deeper than 512 levels"),
    # Element types no lowering takes failed deep inside it, with an
    # internal message or none ("LLVM Translation failed" at <unknown>).
    ("unsigned-ints", UI8_COPY, "host", "unsigned-ints.mlir:3:8: error: 'kiln.make_view' is an op on "
                                        "signed or unsigned integers"),
    ("unsigned-ints-gpu", UI8_COPY, "sm_80", "kiln integers are signless"),
    ("f8-scan", F8_SCAN, "host", "f8-scan.mlir:6:8: error: 'kiln.scan' is a reduction or "
                                 "scan of 8-bit floats"),
]


@pytest.mark.parametrize("case", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_kilnc_refuses_hostile_inputs_cleanly(tmp_path, case):
    """Inputs that once crashed kilnc (an LLVM abort or a stack overflow):
    each compiles (expect None) or is refused with its error, exit 1."""
    name, source, target, expect = case
    src = tmp_path / f"{name}.mlir"
    src.write_text(source)
    proc = subprocess.run([KILNC, str(src), "--target", target, "-o",
                           str(tmp_path / "out.kiln")], capture_output=True, text=True,
                          timeout=120)
    for marker in CRASH_MARKERS:
        assert marker not in proc.stderr, f"{marker}:\n{proc.stderr}"
    if expect is None:
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode == 1 and expect in proc.stderr, (proc.returncode, proc.stderr)


@pytest.mark.parametrize("value", [9223372036854775807, 9007199254740993, -5])
def test_kilnc_op_static_values_are_exact(tmp_path, value):
    # A static argument is an integer constant: it went through a double
    # (2^53 + 1 rounded to 2^53, 2^63 - 1 became -2^63).
    out = tmp_path / "op.mlir"
    subprocess.run([KILNC, "op", "embedding", f"--static.vocab={value}", "--emit", "kiln",
                    "-o", str(out)], check=True, capture_output=True)
    assert re.search(rf"arith\.constant {value} : (i64|index)\b", out.read_text()), \
        out.read_text()


def test_kilnc_op_takes_its_flags_with_equals(tmp_path):
    """`--target=emu-sm_80` (LLVM's spelling, as in file mode) was read as an
    operator parameter named 'target'."""
    out = tmp_path / "e.mlir"
    proc = subprocess.run([KILNC, "op", "embedding", "--target=emu-sm_80", "--emit=mlir",
                           "--num-warps=8", "--block_n=16", "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "kiln_emu_run_block" in text, text[:400]   # (the emulated GPU code)
    help_text = subprocess.run([KILNC, "--help"], capture_output=True, text=True).stdout
    assert "kilnc op NAME [--key value ...]" in help_text and "emu-sm_XY" in help_text
