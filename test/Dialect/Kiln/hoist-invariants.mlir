// RUN: kiln-opt %s --kiln-hoist-invariants | FileCheck %s
// Views, program ids and pure scalar arithmetic of loop-invariant values
// move before the loop (out of both loops when invariant in both); loads,
// tiles, and divisions (which may trap, on an iteration that never runs)
// stay.

// CHECK-LABEL: kiln.func @k
// CHECK: kiln.program_id y
// CHECK: arith.index_cast %{{.*}} : i64 to index
// CHECK: kiln.make_view %{{.*}} : !kiln.ptr<f32> -> !kiln.view<2xf32>
// CHECK: scf.for
// CHECK-NOT: kiln.make_view
// CHECK: arith.divsi
// CHECK: kiln.splat
// CHECK: scf.for
// CHECK: kiln.load
// CHECK: kiln.return
kiln.func @k(%x: !kiln.ptr<f32>, %m: i64, %k: i64, %d: i64) attributes {grid_rank = 2} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %zero = arith.constant dense<0.0> : tensor<4x4xf32>
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %zero) -> (tensor<4x4xf32>) {
    %q = arith.divsi %m, %d : i64
    %t = kiln.splat %q : tensor<4x4xi64>
    %r2 = scf.for %kk = %c0 to %c4 step %c1 iter_args(%acc2 = %acc) -> (tensor<4x4xf32>) {
      %pid = kiln.program_id y : i32
      %mi = arith.index_cast %m : i64 to index
      %ki = arith.index_cast %k : i64 to index
      %v = kiln.make_view %x, [%mi, %ki], [%ki, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
      %row = arith.index_cast %pid : i32 to index
      %l = kiln.load %v[%row, %kk] : !kiln.view<2xf32> -> tensor<4x4xf32>
      %s = arith.addf %acc2, %l : tensor<4x4xf32>
      scf.yield %s : tensor<4x4xf32>
    }
    scf.yield %r2 : tensor<4x4xf32>
  }
  kiln.return
}
