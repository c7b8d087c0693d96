// Bad input to kilnc: a located message and exit code 1, never a crash.
// RUN: not kilnc %s --target sparc 2>&1 | FileCheck %s --check-prefix=TARGET
// RUN: not kilnc %s --kernel nope 2>&1 | FileCheck %s --check-prefix=NAME
// RUN: not kilnc %s.missing 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not kilnc %S/Inputs/unsupported.mlir 2>&1 | FileCheck %s --check-prefix=PASS -DFILE=%S/Inputs/unsupported.mlir
// RUN: not kilnc %S/Inputs/huge-tile.mlir 2>&1 | FileCheck %s --check-prefix=HUGE
// RUN: not kilnc %S/Inputs/huge-tile.mlir --target sm_90a 2>&1 | FileCheck %s --check-prefix=HUGE
// RUN: not kilnc %S/Inputs/huge-tile.mlir --target emu-sm_80 2>&1 | FileCheck %s --check-prefix=HUGE
// HUGE: huge-tile.mlir:7:8: error: a tile of type 'tensor<4611686018427388928xf32>' has more than 2^31 elements
// TARGET: error: unknown target 'sparc'
// NAME: error: no kernel named 'nope'
// MISSING: error: cannot read
// PASS: error: kernel 'k' failed to compile in pass 'convert-kiln-to-cpu':
// PASS-NEXT: [[FILE]]:5:8: error: kiln CPU lowering: 'tensor.empty' on tiles is not supported by the CPU target
kiln.func @k() {
  kiln.return
}
