// Bad input to kilnc: a located message and exit code 1, never a crash.
// RUN: not kilnc %s --target sparc 2>&1 | FileCheck %s --check-prefix=TARGET
// RUN: not kilnc %s --kernel nope 2>&1 | FileCheck %s --check-prefix=NAME
// RUN: not kilnc %s.missing 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not kilnc %S/Inputs/unsupported.mlir 2>&1 | FileCheck %s --check-prefix=PASS -DFILE=%S/Inputs/unsupported.mlir
// RUN: not kilnc %S/Inputs/huge-tile.mlir 2>&1 | FileCheck %s --check-prefix=HUGE
// RUN: not kilnc %S/Inputs/dynamic-slice.mlir 2>&1 | FileCheck %s --check-prefix=SLICE
// RUN: not kilnc %S/Inputs/dynamic-slice.mlir --target sm_80 2>&1 | FileCheck %s --check-prefix=SLICE
// RUN: not kilnc %S/Inputs/huge-tile.mlir --target sm_90a 2>&1 | FileCheck %s --check-prefix=HUGE
// RUN: not kilnc %S/Inputs/huge-tile.mlir --target emu-sm_80 2>&1 | FileCheck %s --check-prefix=HUGE
// Flags that do not go with the target (they were ignored, and --emit ptx wrote x86):
// RUN: not kilnc %s --target= 2>&1 | FileCheck %s --check-prefix=EMPTY
// RUN: not kilnc %s --emit ptx 2>&1 | FileCheck %s --check-prefix=PTX
// RUN: not kilnc %s --target x86-64-avx2 --emit cubin 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: not kilnc %s --num-warps 8 2>&1 | FileCheck %s --check-prefix=WARPS
// RUN: not kilnc %s --device-maps 2>&1 | FileCheck %s --check-prefix=MAPS
// RUN: not kilnc op conv --target host --cubin 2>&1 | FileCheck %s --check-prefix=OPCUBIN
// RUN: kilnc %s --target emu-sm_80 --num-warps 8 -o %t.kb
// An argument of a type the runtime cannot pass (a bundle it would refuse to load):
// RUN: not kilnc %S/Inputs/i4-argument.mlir 2>&1 | FileCheck %s --check-prefix=I4
// I4: error: argument #0 of kernel 'k' has a type the runtime cannot pass
// EMPTY: error: --target is empty
// PTX: error: --emit ptx applies to GPU targets (sm_XY), and the target is 'host'
// CUBIN: error: --emit cubin applies to GPU targets (sm_XY), and the target is 'x86-64-avx2'
// WARPS: error: --num-warps applies to GPU targets
// MAPS: error: --device-maps applies to GPU targets
// OPCUBIN: error: --cubin applies to GPU targets (sm_XY), and the target is 'host'
// IR nested past the parser's stack (it crashed at ~20000 levels) is refused, located;
// 500 levels of regions still compile:
// RUN: python3 -c "print('kiln.func @k() attributes {a = ' + '[' * 600 + ']' * 600 + '} {\nkiln.return\n}')" > %t.deep.mlir
// RUN: not kilnc %t.deep.mlir 2>&1 | FileCheck %s --check-prefix=DEEP
// RUN: python3 -c "print('kiln.func @k() {\n%%c = arith.constant 1 : i1\n' + 'scf.if %%c {\n' * 500 + '}\n' * 500 + 'kiln.return\n}')" > %t.ok.mlir
// RUN: kilnc %t.ok.mlir -o %t.ok.kb
// DEEP: deep.mlir:1:543: error: the IR nests brackets and regions deeper than 512 levels
// HUGE: huge-tile.mlir:7:8: error: a tile of type 'tensor<4611686018427388928xf32>' has more than 2^31 elements
// SLICE: dynamic-slice.mlir:8:8: error: kiln {{CPU|GPU}} lowering: a tile slice needs static offsets and sizes, unit strides and the source's rank
// TARGET: error: unknown target 'sparc'
// NAME: error: no kernel named 'nope'
// MISSING: error: cannot read
// PASS: error: kernel 'k' failed to compile in pass 'convert-kiln-to-cpu':
// PASS-NEXT: [[FILE]]:5:8: error: kiln CPU lowering: 'tensor.empty' on tiles is not supported by the CPU target
kiln.func @k() {
  kiln.return
}
