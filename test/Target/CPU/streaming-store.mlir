// kiln.store {streaming}: non-temporal vector stores at vector boundaries,
// behind a test that the tile's rows all start at the same distance from
// one; the elements before and after a row's aligned vectors one by one;
// an sfence after the tile. Without the attribute, none of it.
// RUN: kiln-opt %s --convert-kiln-to-cpu | FileCheck %s --check-prefix=IR
// RUN: kilnc %s --kernel stream --target x86-64-avx2 --emit asm | FileCheck %s --check-prefix=AVX2
// RUN: kilnc %s --kernel stream --target x86-64-avx512 --emit asm | FileCheck %s --check-prefix=AVX512
// RUN: kilnc %s --kernel plain --target x86-64-avx2 --emit asm | FileCheck %s --check-prefix=PLAIN

// IR-LABEL: func.func private @stream
// IR: memref.extract_aligned_pointer_as_index
// IR: scf.if %{{.*}} {
// The head: scalars.
// IR: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c1
// IR: memref.store %{{.*}} : memref<?x?xf32, strided<[?, 1]>>
// The body: whole vectors, non-temporal and aligned to their size.
// IR: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c16
// IR: vector.store %{{.*}} {alignment = 64 : i64, nontemporal = true} : memref<?x?xf32, strided<[?, 1]>>, vector<16xf32>
// The tail: scalars.
// IR: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c1
// IR: memref.store
// IR: llvm.call_intrinsic "llvm.x86.sse.sfence"() : () -> ()
// IR: } else {
// AVX2: vmovntps %ymm{{[0-9]+}}, (
// AVX2: sfence
// AVX512: vmovntps %zmm{{[0-9]+}}, (
// AVX512: sfence
// PLAIN-NOT: vmovnt
// PLAIN-NOT: sfence
kiln.func @stream(%x: !kiln.ptr<f32>, %y: !kiln.ptr<f32>, %m: index, %n: index) attributes {grid_rank = 1} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %pid = kiln.program_id x : i32
  %p = arith.index_cast %pid : i32 to index
  %r0 = arith.muli %p, %c16 : index
  %vx = kiln.make_view %x, [%m, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %vy = kiln.make_view %y, [%m, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %t = kiln.load %vx[%r0, %c0] : !kiln.view<2xf32> -> tensor<16x64xf32>
  %e = math.exp %t : tensor<16x64xf32>
  kiln.store %e, %vy[%r0, %c0] {streaming} : tensor<16x64xf32> -> !kiln.view<2xf32>
  kiln.return
}

kiln.func @plain(%x: !kiln.ptr<f32>, %y: !kiln.ptr<f32>, %m: index, %n: index) attributes {grid_rank = 1} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %pid = kiln.program_id x : i32
  %p = arith.index_cast %pid : i32 to index
  %r0 = arith.muli %p, %c16 : index
  %vx = kiln.make_view %x, [%m, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %vy = kiln.make_view %y, [%m, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %t = kiln.load %vx[%r0, %c0] : !kiln.view<2xf32> -> tensor<16x64xf32>
  %e = math.exp %t : tensor<16x64xf32>
  kiln.store %e, %vy[%r0, %c0] : tensor<16x64xf32> -> !kiln.view<2xf32>
  kiln.return
}
