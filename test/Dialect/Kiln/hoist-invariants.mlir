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

// A scalar the loop advances by an invariant amount (a pointer's shift,
// `p += BK * stride`) is read as init + iteration * amount; the addition
// that carries it stays for the loop's result.
// CHECK-LABEL: kiln.func @advanced
// CHECK: %[[STEP:[^ ]+]] = arith.muli %{{.*}}, %{{.*}} : i64
// CHECK: scf.for %[[IV:[^ ]+]] = %[[LB:[^ ]+]] to %{{[^ ]+}} step %[[ST:[^ ]+]] iter_args(%{{[^ ]+}} = %cst, %[[S:[^ ]+]] = %[[INIT:[^)]+]])
// CHECK: %[[D:.*]] = arith.subi %[[IV]], %[[LB]] : index
// CHECK: %[[T:.*]] = arith.divui %[[D]], %[[ST]] : index
// CHECK: %[[TI:.*]] = arith.index_cast %[[T]] : index to i64
// CHECK: %[[TS:.*]] = arith.muli %[[TI]], %[[STEP]] : i64
// CHECK: %[[AT:.*]] = arith.addi %[[INIT]], %[[TS]] : i64
// CHECK: arith.index_cast %[[AT]] : i64 to index
// CHECK: arith.addi %[[S]], %[[STEP]] : i64
kiln.func @advanced(%x: !kiln.ptr<f32>, %n: index, %lb: index, %st: index, %s0: i64, %stride: i64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %bk = arith.constant 16 : i64
  %v = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %zero = arith.constant dense<0.0> : tensor<16xf32>
  %r:2 = scf.for %i = %lb to %n step %st iter_args(%acc = %zero, %s = %s0) -> (tensor<16xf32>, i64) {
    %off = arith.index_cast %s : i64 to index
    %l = kiln.load %v[%off] : !kiln.view<1xf32> -> tensor<16xf32>
    %a = arith.addf %acc, %l : tensor<16xf32>
    %step = arith.muli %bk, %stride : i64
    %s2 = arith.addi %s, %step : i64
    scf.yield %a, %s2 : tensor<16xf32>, i64
  }
  kiln.return
}

// A read after the addition takes the advanced value from the index too.
// CHECK-LABEL: kiln.func @advanced_after
// CHECK: scf.for %[[IV:[^ ]+]] = %[[LB:[^ ]+]] to
// CHECK: %[[AT:[^ ]+]] = arith.addi %{{.*}}, %{{.*}} : i64
// CHECK: %[[NEXT:[^ ]+]] = arith.addi %[[AT]], %{{.*}} : i64
// CHECK: arith.index_cast %[[NEXT]] : i64 to index
// CHECK: kiln.load
kiln.func @advanced_after(%x: !kiln.ptr<f32>, %n: index, %s0: i64, %stride: i64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %zero = arith.constant dense<0.0> : tensor<16xf32>
  %r:2 = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero, %s = %s0) -> (tensor<16xf32>, i64) {
    %s2 = arith.addi %s, %stride : i64
    %off = arith.index_cast %s2 : i64 to index
    %l = kiln.load %v[%off] : !kiln.view<1xf32> -> tensor<16xf32>
    %a = arith.addf %acc, %l : tensor<16xf32>
    scf.yield %a, %s2 : tensor<16xf32>, i64
  }
  kiln.return
}
