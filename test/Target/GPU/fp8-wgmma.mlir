// fp8 dots (kiln.dot with lhs_fp8 / rhs_fp8) on sm_90a: A a load, B the
// transpose of a load (both K-major), so wgmma's e4m3 / e5m2 form reads the
// bytes where TMA puts them, in the 128B swizzle (boxes of 128 fp8 columns).
// RUN: kilnc %S/../../../examples/matmul_fp8.mlir --target sm_90a --emit ptx -o - | FileCheck %s
// CHECK: cp.async.bulk.tensor
// CHECK: wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e5m2
// CHECK-NOT: .bf16
//
// --no-swizzle: the no-swizzle core layout, filled by cp.async.
// RUN: kilnc %S/../../../examples/matmul_fp8.mlir --target sm_90a --no-swizzle --emit ptx -o - | FileCheck %s --check-prefix=NOSWZ
// NOSWZ-NOT: cp.async.bulk.tensor
// NOSWZ: cp.async.cg.shared.global
// NOSWZ: wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e5m2
//
// --no-fp8-wgmma, and every other chip: both operands decoded to bf16 first.
// RUN: kilnc %S/../../../examples/matmul_fp8.mlir --target sm_90a --no-fp8-wgmma --emit ptx -o - | FileCheck %s --check-prefix=DECODED
// DECODED: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// DECODED-NOT: e4m3
// RUN: kilnc %S/../../../examples/matmul_fp8.mlir --target sm_80 --emit ptx -o - | FileCheck %s --check-prefix=SM80
// SM80: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// SM80-NOT: wgmma
