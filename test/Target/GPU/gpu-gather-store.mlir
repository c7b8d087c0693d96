// A gather whose only use is a store (embedding, paged KV gather, MoE
// permute) copies its rows global to registers to global on the GPU when
// both ends move whole chunks (docs/gpu.md, "Gathers and scatters"): every
// row start and the destination's rows aligned to the tile's 16-byte chunk,
// the tile's columns inside both views, and the destination apart from the
// source (checked at run time). Each thread issues the loads of a group of
// up to 8 of its chunks, then their stores: no tile in shared memory, no
// barrier, no wait. Otherwise the general gather (cp.async into a shared
// tile) and store.
// RUN: kiln-opt %s --convert-kiln-to-gpu="chip=sm_80" | FileCheck %s
// RUN: kilnc %s --target sm_90a --emit ptx -o - | FileCheck %s --check-prefix=PTX
// RUN: kilnc %s --target sm_80 --emit ptx -o %t.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_80 %t.ptx -o %t.cubin %}

// CHECK-LABEL: gpu.func @copy_rows
// The index tile (16 x i32) by cp.async, then the fast path's 4 chunks per
// thread (512 chunks of 8 bf16, 128 threads): loads, then stores.
// CHECK: nvgpu.device_async_copy {{.*}} to memref<16xi32
// CHECK: scf.if
// CHECK-COUNT-4: vector.load {{.*}} : memref<?x?xi16, strided<[?, 1]>>, vector<8xi16>
// CHECK-COUNT-4: vector.store {{.*}} : memref<?x?xi16, strided<[?, 1]>>, vector<8xi16>
// CHECK: } else {
// CHECK: nvgpu.device_async_copy {{.*}} to memref<16x256xi16
// CHECK: gpu.return

// PTX-COUNT-4: ld.global.v4.b32
// PTX-COUNT-4: st.global.v4.b32
kiln.func @copy_rows(%x: !kiln.ptr<bf16> {kiln.name = "x"}, %idx: !kiln.ptr<i32> {kiln.name = "idx"},
                     %y: !kiln.ptr<bf16> {kiln.name = "y"}, %r: index {kiln.name = "r"},
                     %c: index {kiln.name = "c"}, %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %pid = kiln.program_id x : i32
  %p = arith.index_cast %pid : i32 to index
  %c16 = arith.constant 16 : index
  %row0 = arith.muli %p, %c16 : index
  %vi = kiln.make_view %idx, [%n], [%c1] : !kiln.ptr<i32> -> !kiln.view<1xi32>
  %i = kiln.load %vi[%row0] padding(-1 : i32) : !kiln.view<1xi32> -> tensor<16xi32>
  %vx = kiln.make_view %x, [%r, %c], [%c, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %t = kiln.gather %vx[%i, %c0] : !kiln.view<2xbf16>, tensor<16xi32> -> tensor<16x256xbf16>
  %vy = kiln.make_view %y, [%n, %c], [%c, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  kiln.store %t, %vy[%row0, %c0] : tensor<16x256xbf16> -> !kiln.view<2xbf16>
  kiln.return
}
