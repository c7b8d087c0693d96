// Pipelining needs a stage buffer per stage; a kernel whose stages do not
// fit in shared memory is lowered without pipelining instead of refused.
// RUN: kiln-opt %s --convert-kiln-to-gpu | FileCheck %s
// RUN: kiln-opt %s --convert-kiln-to-gpu=chip=sm_90a | FileCheck %s --check-prefix=SM90

// 100 KiB tile (+ the 4-byte reduce result): two stages exceed sm_80's 163 KiB.
// Unpipelined, each iteration copies, then waits (no prologue copy).
// CHECK: kiln.shared_bytes.sum_rows = 102404
// CHECK-NOT: nvvm.cp.async.commit.group
// CHECK: scf.for
// CHECK: nvgpu.device_async_copy
// CHECK: nvvm.cp.async.commit.group
// CHECK-NEXT: nvvm.cp.async.wait.group 0
// sm_90a allows 227 KiB: pipelined (a prologue copy, two stage buffers).
// SM90: kiln.shared_bytes.sum_rows = 204804
// SM90: nvgpu.device_async_copy
// SM90: nvvm.cp.async.commit.group
// SM90: scf.for
// SM90: nvvm.cp.async.wait.group 0
// SM90-NEXT: gpu.barrier

kiln.func @sum_rows(%x: !kiln.ptr<f32>, %out: !kiln.ptr<f32>, %n: index) attributes {grid_rank = 1} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c25600 = arith.constant 25600 : index
  %vx = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vo = kiln.make_view %out, [%c1], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %zero = arith.constant 0.0 : f32
  %s = scf.for %i = %c0 to %n step %c25600 iter_args(%acc = %zero) -> f32 {
    %t = kiln.load %vx[%i] : !kiln.view<1xf32> -> tensor<25600xf32>
    %r = kiln.reduce sum %t [0] : tensor<25600xf32> -> f32
    %a = arith.addf %acc, %r : f32
    scf.yield %a : f32
  }
  %st = kiln.splat %s : tensor<1xf32>
  kiln.store %st, %vo[%c0] : tensor<1xf32> -> !kiln.view<1xf32>
  kiln.return
}
