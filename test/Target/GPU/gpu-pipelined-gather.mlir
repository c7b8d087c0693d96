// A gather in a loop whose row indices a load of the same loop gives (DSA's
// top-k blocks, a paged cache's block table), or an elementwise expression
// of such loads, aranges and scalars, is pipelined like a load
// (docs/gpu.md, "Pipelined gathers"): its rows are copied D = num_stages - 1
// iterations ahead, and its index blocks 2D ahead into 2D + 1 stages, so
// that the rows of iteration k + D are issued at iteration k from indices
// that landed with iteration k's own wait. Before the loop: the index
// blocks of iterations 0 .. 2D - 1 as one group, retired at once, then the
// rows of iterations 0 .. D - 1, a group each. In the loop: one wait and one
// barrier, then the rows of k + D and the index block of k + 2D, one group;
// the gather itself waits for nothing.
// RUN: kiln-opt %s --convert-kiln-to-gpu="chip=sm_80" | FileCheck %s --check-prefixes=CHECK,S2
// RUN: kiln-opt %s --convert-kiln-to-gpu="chip=sm_80 num-stages=3" | FileCheck %s --check-prefixes=CHECK,S3
// RUN: kilnc %s --kernel sum_rows --target sm_90a --emit ptx -o %t.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a %t.ptx -o %t.cubin %}

// CHECK-LABEL: gpu.func @sum_rows
// CHECK: nvgpu.device_async_copy {{.*}} to memref<16xi32
// CHECK: nvgpu.device_async_copy {{.*}} to memref<16xi32
// S3: nvgpu.device_async_copy {{.*}} to memref<16xi32
// S3: nvgpu.device_async_copy {{.*}} to memref<16xi32
// CHECK-NOT: memref<16x64xi16
// CHECK: nvvm.cp.async.commit.group
// CHECK-NEXT: nvvm.cp.async.wait.group 0
// CHECK-NEXT: gpu.barrier
// CHECK: nvgpu.device_async_copy {{.*}} to memref<16x64xi16
// CHECK-NOT: nvvm.cp.async.wait.group
// CHECK: nvvm.cp.async.commit.group
// S3: nvgpu.device_async_copy {{.*}} to memref<16x64xi16
// S3-NOT: nvvm.cp.async.wait.group
// S3: nvvm.cp.async.commit.group
// CHECK: scf.for
// S2: nvvm.cp.async.wait.group 0
// S3: nvvm.cp.async.wait.group 1
// CHECK-NEXT: gpu.barrier
// CHECK: nvgpu.device_async_copy {{.*}} to memref<16x64xi16
// CHECK: nvgpu.device_async_copy {{.*}} to memref<16xi32
// CHECK-NOT: nvvm.cp.async.wait.group
// CHECK: nvvm.cp.async.commit.group
// CHECK-NOT: nvvm.cp.async.wait.group
// CHECK: gpu.return
kiln.func @sum_rows(%x: !kiln.ptr<bf16> {kiln.name = "x"}, %idx: !kiln.ptr<i32> {kiln.name = "idx"},
                    %out: !kiln.ptr<f32> {kiln.name = "out"}, %r: index {kiln.name = "r"},
                    %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %vi = kiln.make_view %idx, [%n], [%c1] : !kiln.ptr<i32> -> !kiln.view<1xi32>
  %vx = kiln.make_view %x, [%r, %c64], [%c64, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %zero = arith.constant dense<0.0> : tensor<16x64xf32>
  %acc = scf.for %i0 = %c0 to %n step %c16 iter_args(%a = %zero) -> (tensor<16x64xf32>) {
    %i = kiln.load %vi[%i0] padding(-1 : i32) : !kiln.view<1xi32> -> tensor<16xi32>
    %t = kiln.gather %vx[%i, %c0] : !kiln.view<2xbf16>, tensor<16xi32> -> tensor<16x64xbf16>
    %f = arith.extf %t : tensor<16x64xbf16> to tensor<16x64xf32>
    %s = arith.addf %a, %f : tensor<16x64xf32>
    scf.yield %s : tensor<16x64xf32>
  }
  %vo = kiln.make_view %out, [%c16, %c64], [%c64, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  kiln.store %acc, %vo[%c0, %c0] : tensor<16x64xf32> -> !kiln.view<2xf32>
  kiln.return
}

// Indices computed in the loop (an elementwise expression of aranges and
// splats of scalars that derive from the induction variable): each thread
// computes the index of the rows it copies at issue, for the iteration it
// issues (the subtraction is there, the arange tile is not built), and the
// loop waits for nothing but its own group.
// CHECK-LABEL: gpu.func @computed_rows
// CHECK-NOT: kiln.arange
// CHECK: arith.subi %{{.*}}, %{{.*}} : i32
// CHECK: nvgpu.device_async_copy {{.*}} to memref<16x64xi16
// CHECK: nvvm.cp.async.commit.group
// CHECK: scf.for
// S2: nvvm.cp.async.wait.group 0
// S3: nvvm.cp.async.wait.group 1
// CHECK-NEXT: gpu.barrier
// CHECK: arith.subi %{{.*}}, %{{.*}} : i32
// CHECK: nvgpu.device_async_copy {{.*}} to memref<16x64xi16
// CHECK: nvvm.cp.async.commit.group
// CHECK-NOT: nvvm.cp.async.wait.group
// CHECK: gpu.return
kiln.func @computed_rows(%x: !kiln.ptr<bf16> {kiln.name = "x"}, %out: !kiln.ptr<f32> {kiln.name = "out"},
                         %r: index {kiln.name = "r"}, %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %vx = kiln.make_view %x, [%r, %c64], [%c64, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %zero = arith.constant dense<0.0> : tensor<16x64xf32>
  %acc = scf.for %i0 = %c0 to %n step %c16 iter_args(%a = %zero) -> (tensor<16x64xf32>) {
    %base = arith.index_cast %i0 : index to i32
    %ar = kiln.arange 0, 16 : tensor<16xi32>
    %b = kiln.splat %base : tensor<16xi32>
    %rev = arith.subi %b, %ar : tensor<16xi32>
    %t = kiln.gather %vx[%rev, %c0] : !kiln.view<2xbf16>, tensor<16xi32> -> tensor<16x64xbf16>
    %f = arith.extf %t : tensor<16x64xbf16> to tensor<16x64xf32>
    %s = arith.addf %a, %f : tensor<16x64xf32>
    scf.yield %s : tensor<16x64xf32>
  }
  %vo = kiln.make_view %out, [%c16, %c64], [%c64, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  kiln.store %acc, %vo[%c0, %c0] : tensor<16x64xf32> -> !kiln.view<2xf32>
  kiln.return
}

// A loop that writes memory keeps its gathers where they stand: rows read
// iterations ahead could be ones this loop's scatter has yet to write.
// CHECK-LABEL: gpu.func @scaled_in_place
// CHECK: scf.for
// CHECK: nvgpu.device_async_copy {{.*}} to memref<16x64xi16
// CHECK: nvvm.cp.async.commit.group
// CHECK-NEXT: nvvm.cp.async.wait.group 0
// CHECK-NEXT: gpu.barrier
// CHECK: gpu.return
kiln.func @scaled_in_place(%x: !kiln.ptr<bf16> {kiln.name = "x"}, %idx: !kiln.ptr<i32> {kiln.name = "idx"},
                           %r: index {kiln.name = "r"}, %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %vi = kiln.make_view %idx, [%n], [%c1] : !kiln.ptr<i32> -> !kiln.view<1xi32>
  %vx = kiln.make_view %x, [%r, %c64], [%c64, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  scf.for %i0 = %c0 to %n step %c16 {
    %i = kiln.load %vi[%i0] padding(-1 : i32) : !kiln.view<1xi32> -> tensor<16xi32>
    %t = kiln.gather %vx[%i, %c0] : !kiln.view<2xbf16>, tensor<16xi32> -> tensor<16x64xbf16>
    %d = arith.addf %t, %t : tensor<16x64xbf16>
    kiln.scatter %d, %vx[%i, %c0] : tensor<16x64xbf16>, tensor<16xi32> -> !kiln.view<2xbf16>
  }
  kiln.return
}

// Indices read through a gather of single elements (a block table's
// entries): each row's entry is read from global memory at issue, and the
// element gather itself is not lowered in the loop.
// CHECK-LABEL: gpu.func @table_rows
// CHECK: scf.for
// S2: nvvm.cp.async.wait.group 0
// S3: nvvm.cp.async.wait.group 1
// CHECK-NEXT: gpu.barrier
// CHECK: memref.load %{{.*}} : memref<?xi32, strided<[?]>>
// CHECK: nvgpu.device_async_copy {{.*}} to memref<16x64xi16
// CHECK-NOT: to memref<16xi32
// CHECK: nvvm.cp.async.commit.group
// CHECK-NOT: nvvm.cp.async.wait.group
// CHECK: gpu.return
kiln.func @table_rows(%x: !kiln.ptr<bf16> {kiln.name = "x"}, %table: !kiln.ptr<i32> {kiln.name = "table"},
                      %out: !kiln.ptr<f32> {kiln.name = "out"}, %r: index {kiln.name = "r"},
                      %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %vt = kiln.make_view %table, [%n], [%c1] : !kiln.ptr<i32> -> !kiln.view<1xi32>
  %vx = kiln.make_view %x, [%r, %c64], [%c64, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %zero = arith.constant dense<0.0> : tensor<16x64xf32>
  %acc = scf.for %i0 = %c0 to %n step %c16 iter_args(%a = %zero) -> (tensor<16x64xf32>) {
    %base = arith.index_cast %i0 : index to i64
    %ar = kiln.arange 0, 16 : tensor<16xi64>
    %b = kiln.splat %base : tensor<16xi64>
    %pos = arith.addi %b, %ar : tensor<16xi64>
    %blk = kiln.gather %vt[%pos] padding(0 : i32) : !kiln.view<1xi32>, tensor<16xi64> -> tensor<16xi32>
    %t = kiln.gather %vx[%blk, %c0] : !kiln.view<2xbf16>, tensor<16xi32> -> tensor<16x64xbf16>
    %f = arith.extf %t : tensor<16x64xbf16> to tensor<16x64xf32>
    %s = arith.addf %a, %f : tensor<16x64xf32>
    scf.yield %s : tensor<16x64xf32>
  }
  %vo = kiln.make_view %out, [%c16, %c64], [%c64, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  kiln.store %acc, %vo[%c0, %c0] : tensor<16x64xf32> -> !kiln.view<2xf32>
  kiln.return
}
