"""Which pointers a bundle's kernel writes through (the manifest's `writes`
line), and what a launch does with read-only memory.

A kernel that stores into a read-only numpy array either crashes the process
(the array lives on a page mapped read-only: np.frombuffer of bytes, a
read-only memory map) or silently changes data its owner declared immutable.
Bundle launches refuse such an array where the kernel writes, and accept it
where the kernel only reads."""

import subprocess

import numpy as np
import pytest

import kiln
from conftest import KILNC

# x and y are read, out is written.
SCALE = """
kiln.func @scale(%x: !kiln.ptr<f32> {kiln.name = "x"}, %y: !kiln.ptr<f32> {kiln.name = "y"},
                 %out: !kiln.ptr<f32> {kiln.name = "out"}, %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %vx = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vy = kiln.make_view %y, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vo = kiln.make_view %out, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %a = kiln.load %vx[%c0] : !kiln.view<1xf32> -> tensor<16xf32>
  %b = kiln.load %vy[%c0] : !kiln.view<1xf32> -> tensor<16xf32>
  %p = arith.mulf %a, %b : tensor<16xf32>
  kiln.store %p, %vo[%c0] : tensor<16xf32> -> !kiln.view<1xf32>
  kiln.return
}
"""

# Views carried through a loop and chosen by a select (which the analysis
# follows; the CPU lowering wants each view's kiln.make_view, so this kernel
# is only described, not compiled): x and y are read, out is written.
CARRIED = """
kiln.func @carried(%x: !kiln.ptr<f32> {kiln.name = "x"}, %y: !kiln.ptr<f32> {kiln.name = "y"},
                   %out: !kiln.ptr<f32> {kiln.name = "out"}, %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %vx = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vy = kiln.make_view %y, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vo = kiln.make_view %out, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %t = arith.cmpi ult, %n, %c1 : index
  %vs = arith.select %t, %vx, %vy : !kiln.view<1xf32>
  %a = kiln.load %vs[%c0] : !kiln.view<1xf32> -> tensor<16xf32>
  %r:2 = scf.for %i = %c0 to %c1 step %c1 iter_args(%w = %vo, %u = %vy)
      -> (!kiln.view<1xf32>, !kiln.view<1xf32>) {
    %b = kiln.load %u[%c0] : !kiln.view<1xf32> -> tensor<16xf32>
    kiln.store %b, %w[%c0] : tensor<16xf32> -> !kiln.view<1xf32>
    scf.yield %w, %u : !kiln.view<1xf32>, !kiln.view<1xf32>
  }
  kiln.store %a, %r#0[%c0] : tensor<16xf32> -> !kiln.view<1xf32>
  kiln.return
}
"""


def _compile(tmp_path, name, text, *extra):
    src, out = tmp_path / f"{name}.mlir", tmp_path / f"{name}.kiln"
    src.write_text(text)
    subprocess.run([KILNC, str(src), "--target", "host", "-o", str(out), *extra], check=True)
    return out


def test_the_manifest_names_the_pointers_written(tmp_path):
    k = kiln.load_bundle(str(_compile(tmp_path, "scale", SCALE)))
    assert k._kernel.written == [False, False, True, False]
    header = _compile(tmp_path, "carried", CARRIED, "--emit", "c-header").read_text()
    assert "const float *x, const float *y, float *out, int64_t n" in header


def test_read_only_arrays_are_refused_where_the_kernel_writes(rng, tmp_path):
    k = kiln.load_bundle(str(_compile(tmp_path, "scale", SCALE)))
    x = rng.standard_normal(16).astype(np.float32)
    y = rng.standard_normal(16).astype(np.float32)
    # Read-only inputs (bytes the array does not own) are fine.
    x_ro = np.frombuffer(x.tobytes(), np.float32)
    y_ro = np.frombuffer(y.tobytes(), np.float32)
    assert not x_ro.flags.writeable and not y_ro.flags.writeable
    out = np.full(16, np.nan, np.float32)
    k[1](x_ro, y_ro, out, 16)
    ref = x.astype(np.float64) * y.astype(np.float64)
    np.testing.assert_allclose(out, ref, rtol=1e-6)

    # A read-only output is refused before the launch, and left as it was.
    frozen = np.full(16, 7.0, np.float32)
    frozen.setflags(write=False)
    with pytest.raises(ValueError, match="argument 'out' is a read-only array, and kernel "
                                         "'scale' writes through it"):
        k[1](x, y, frozen, 16)
    assert (frozen == 7.0).all()
    mapped = np.frombuffer(bytes(64), np.float32)
    with pytest.raises(ValueError, match="read-only"):
        k[1](x, y, mapped, 16)


def test_bundle_paths_and_misaligned_arrays(rng, tmp_path):
    """A path with an embedded NUL loaded the file named by its prefix (the
    C API reads up to it; open() refuses it); path-like objects load; a
    misaligned array is refused before the launch."""
    path = _compile(tmp_path, "scale", SCALE)
    with pytest.raises(ValueError, match="embedded null byte"):
        kiln.load_bundle(str(path) + "\0ignored.kiln")
    k = kiln.load_bundle(path)   # a pathlib.Path
    x = np.frombuffer(bytearray(4 * 16 + 1), np.float32, count=16, offset=1)
    with pytest.raises(ValueError, match="argument 'x' is not aligned to its 4-byte elements"):
        k[1](x, np.zeros(16, np.float32), np.zeros(16, np.float32), 16)


def test_the_c_header_takes_const_pointers_for_inputs(tmp_path):
    header = _compile(tmp_path, "scale", SCALE, "--emit", "c-header").read_text()
    assert "const float *x, const float *y, float *out, int64_t n" in header
