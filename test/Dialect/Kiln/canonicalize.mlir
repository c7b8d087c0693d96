// RUN: kiln-opt %s --canonicalize --split-input-file | FileCheck %s

// CHECK-LABEL: func.func @broadcast_identity
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: return %[[X]]
func.func @broadcast_identity(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.broadcast %x : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @broadcast_of_splat
// CHECK-SAME: (%[[S:.*]]: f32)
// CHECK-NEXT: %[[R:.*]] = kiln.splat %[[S]] : tensor<16x8xf32>
// CHECK-NEXT: return %[[R]]
func.func @broadcast_of_splat(%s: f32) -> tensor<16x8xf32> {
  %0 = kiln.splat %s : tensor<1x8xf32>
  %1 = kiln.broadcast %0 : tensor<1x8xf32> -> tensor<16x8xf32>
  return %1 : tensor<16x8xf32>
}

// -----

// CHECK-LABEL: func.func @broadcast_of_broadcast
// CHECK-SAME: (%[[X:.*]]: tensor<1x1xf32>)
// CHECK-NEXT: %[[R:.*]] = kiln.broadcast %[[X]] : tensor<1x1xf32> -> tensor<16x8xf32>
// CHECK-NEXT: return %[[R]]
func.func @broadcast_of_broadcast(%x: tensor<1x1xf32>) -> tensor<16x8xf32> {
  %0 = kiln.broadcast %x : tensor<1x1xf32> -> tensor<1x8xf32>
  %1 = kiln.broadcast %0 : tensor<1x8xf32> -> tensor<16x8xf32>
  return %1 : tensor<16x8xf32>
}

// -----

// CHECK-LABEL: func.func @constant_splats_fold
// CHECK-DAG: %[[A:.*]] = arith.constant dense<2.000000e+00> : tensor<16x8xf32>
// CHECK-DAG: %[[B:.*]] = arith.constant dense<2.000000e+00> : tensor<8x1xf32>
// CHECK-DAG: %[[C:.*]] = arith.constant dense<2.000000e+00> : tensor<2x4xf32>
// CHECK-DAG: %[[D:.*]] = arith.constant dense<2.000000e+00> : tensor<8x16xf32>
// CHECK: return %[[A]], %[[B]], %[[C]], %[[D]]
func.func @constant_splats_fold() -> (tensor<16x8xf32>, tensor<8x1xf32>, tensor<2x4xf32>, tensor<8x16xf32>) {
  %c = arith.constant 2.0 : f32
  %0 = kiln.splat %c : tensor<1x8xf32>
  %1 = kiln.broadcast %0 : tensor<1x8xf32> -> tensor<16x8xf32>
  %2 = kiln.splat %c : tensor<8xf32>
  %3 = kiln.expand_dims %2 [1] : tensor<8xf32> -> tensor<8x1xf32>
  %4 = kiln.reshape %2 : tensor<8xf32> -> tensor<2x4xf32>
  %5 = kiln.trans %1 [1, 0] : tensor<16x8xf32> -> tensor<8x16xf32>
  return %1, %3, %4, %5 : tensor<16x8xf32>, tensor<8x1xf32>, tensor<2x4xf32>, tensor<8x16xf32>
}

// -----

// CHECK-LABEL: func.func @reshape_folds
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[R:.*]] = kiln.reshape %[[X]] : tensor<4x8xf32> -> tensor<32xf32>
// CHECK-NEXT: return %[[X]], %[[R]]
func.func @reshape_folds(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<32xf32>) {
  %0 = kiln.reshape %x : tensor<4x8xf32> -> tensor<4x8xf32>
  %1 = kiln.reshape %x : tensor<4x8xf32> -> tensor<2x16xf32>
  %2 = kiln.reshape %1 : tensor<2x16xf32> -> tensor<32xf32>
  return %0, %2 : tensor<4x8xf32>, tensor<32xf32>
}

// -----

// CHECK-LABEL: func.func @trans_folds
// CHECK-SAME: (%[[X:.*]]: tensor<2x4x8xf32>)
// CHECK-NEXT: %[[T:.*]] = kiln.trans %[[X]] [2, 0, 1] : tensor<2x4x8xf32> -> tensor<8x2x4xf32>
// CHECK-NEXT: return %[[X]], %[[X]], %[[T]]
func.func @trans_folds(%x: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8x2x4xf32>) {
  // The identity permutation folds away.
  %0 = kiln.trans %x [0, 1, 2] : tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  // A transpose of its inverse is the source.
  %1 = kiln.trans %x [1, 0, 2] : tensor<2x4x8xf32> -> tensor<4x2x8xf32>
  %2 = kiln.trans %1 [1, 0, 2] : tensor<4x2x8xf32> -> tensor<2x4x8xf32>
  // Two transposes compose into one.
  %3 = kiln.trans %x [0, 2, 1] : tensor<2x4x8xf32> -> tensor<2x8x4xf32>
  %4 = kiln.trans %3 [1, 0, 2] : tensor<2x8x4xf32> -> tensor<8x2x4xf32>
  return %0, %2, %4 : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8x2x4xf32>
}

// -----

// A load whose tile provably lies inside the view is marked in bounds, per
// dimension; one at a runtime offset or overhanging the edge keeps its mask.
// CHECK-LABEL: kiln.func @load_in_bounds
kiln.func @load_in_bounds(%p: !kiln.ptr<f32>, %i: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c48 = arith.constant 48 : index
  %c64 = arith.constant 64 : index
  %c100 = arith.constant 100 : index
  %v = kiln.make_view %p, [%c64, %c100], [%c100, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  // CHECK: kiln.load {{.*}} {in_bounds = array<i1: true, true>} : !kiln.view<2xf32> -> tensor<16x32xf32>
  %a = kiln.load %v[%c48, %c64] : !kiln.view<2xf32> -> tensor<16x32xf32>
  // CHECK: kiln.load {{.*}} {in_bounds = array<i1: false, true>} : !kiln.view<2xf32> -> tensor<32x32xf32>
  %b = kiln.load %v[%c48, %c0] : !kiln.view<2xf32> -> tensor<32x32xf32>
  // CHECK: kiln.load {{.*}} {in_bounds = array<i1: true, false>} : !kiln.view<2xf32> -> tensor<16x32xf32>
  %c = kiln.load %v[%c0, %i] : !kiln.view<2xf32> -> tensor<16x32xf32>
  // CHECK: kiln.store {{.*}} {in_bounds = array<i1: true, true>} : tensor<16x32xf32> -> !kiln.view<2xf32>
  kiln.store %a, %v[%c0, %c0] : tensor<16x32xf32> -> !kiln.view<2xf32>
  // CHECK: kiln.store {{.*}} {in_bounds = array<i1: true, false>} : tensor<32x32xf32> -> !kiln.view<2xf32>
  kiln.store %b, %v[%c0, %c100] : tensor<32x32xf32> -> !kiln.view<2xf32>
  // CHECK: kiln.store {{.*}} : tensor<16x32xf32> -> !kiln.view<2xf32>
  kiln.store %c, %v[%i, %i] : tensor<16x32xf32> -> !kiln.view<2xf32>
  kiln.return
}

// -----

// Nothing is proved about a view with runtime sizes.
// CHECK-LABEL: kiln.func @load_dynamic
// CHECK-NOT: in_bounds
kiln.func @load_dynamic(%p: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %a = kiln.load %v[%c0] : !kiln.view<1xf32> -> tensor<16xf32>
  kiln.store %a, %v[%c0] : tensor<16xf32> -> !kiln.view<1xf32>
  kiln.return
}

// -----

// An offset near 2^63 is no proof: offset + 16 wrapped to a negative sum
// below the size, and the load read outside the view as in bounds.
// CHECK-LABEL: kiln.func @load_far_offset
// CHECK-NOT: in_bounds
kiln.func @load_far_offset(%p: !kiln.ptr<f32>) {
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %far = arith.constant 9223372036854775807 : index
  %v = kiln.make_view %p, [%c64], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %a = kiln.load %v[%far] : !kiln.view<1xf32> -> tensor<16xf32>
  kiln.store %a, %v[%far] : tensor<16xf32> -> !kiln.view<1xf32>
  kiln.return
}

// -----

// Triton's `acc += dot(a, b)`: an addition to a dot from zeros becomes the
// dot's accumulator, in either operand order (floats and integers).
// CHECK-LABEL: func.func @add_of_dot_from_zeros
// CHECK-SAME: (%[[A:.*]]: tensor<16x32xbf16>, %[[B:.*]]: tensor<32x8xbf16>, %[[ACC:.*]]: tensor<16x8xf32>, %[[I:.*]]: tensor<16x32xi8>, %[[J:.*]]: tensor<32x8xi8>, %[[IACC:.*]]: tensor<16x8xi32>)
// CHECK-NEXT: %[[D:.*]] = kiln.dot %[[A]], %[[B]], %[[ACC]]
// CHECK-NEXT: %[[E:.*]] = kiln.dot %[[I]], %[[J]], %[[IACC]]
// CHECK-NEXT: return %[[D]], %[[E]]
func.func @add_of_dot_from_zeros(%a: tensor<16x32xbf16>, %b: tensor<32x8xbf16>, %acc: tensor<16x8xf32>,
                                 %i: tensor<16x32xi8>, %j: tensor<32x8xi8>, %iacc: tensor<16x8xi32>)
    -> (tensor<16x8xf32>, tensor<16x8xi32>) {
  %z = arith.constant dense<0.0> : tensor<16x8xf32>
  %zi = arith.constant dense<0> : tensor<16x8xi32>
  %d = kiln.dot %a, %b, %z : tensor<16x32xbf16>, tensor<32x8xbf16> -> tensor<16x8xf32>
  %s = arith.addf %acc, %d : tensor<16x8xf32>
  %e = kiln.dot %i, %j, %zi : tensor<16x32xi8>, tensor<32x8xi8> -> tensor<16x8xi32>
  %t = arith.addi %e, %iacc : tensor<16x8xi32>
  return %s, %t : tensor<16x8xf32>, tensor<16x8xi32>
}

// -----

// Not folded: a dot from non-zero values, or one whose result is used twice.
// CHECK-LABEL: func.func @add_of_dot_kept
// CHECK: kiln.dot
// CHECK: arith.addf
// CHECK: kiln.dot
// CHECK: arith.addf
func.func @add_of_dot_kept(%a: tensor<16x32xbf16>, %b: tensor<32x8xbf16>, %acc: tensor<16x8xf32>)
    -> (tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>) {
  %one = arith.constant dense<1.0> : tensor<16x8xf32>
  %z = arith.constant dense<0.0> : tensor<16x8xf32>
  %d = kiln.dot %a, %b, %one : tensor<16x32xbf16>, tensor<32x8xbf16> -> tensor<16x8xf32>
  %s = arith.addf %acc, %d : tensor<16x8xf32>
  %e = kiln.dot %a, %b, %z : tensor<16x32xbf16>, tensor<32x8xbf16> -> tensor<16x8xf32>
  %t = arith.addf %acc, %e : tensor<16x8xf32>
  return %s, %t, %e : tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>
}

// -----

// Not folded: a dot before a loop whose body adds it (it would be recomputed
// every iteration), or an accumulator something else reads.
// CHECK-LABEL: func.func @add_of_dot_elsewhere
// CHECK: kiln.dot
// CHECK: scf.for
// CHECK: arith.addf
// CHECK: kiln.dot
// CHECK: arith.addf
// CHECK: arith.mulf
func.func @add_of_dot_elsewhere(%a: tensor<16x32xbf16>, %b: tensor<32x8xbf16>, %acc: tensor<16x8xf32>,
                                %n: index) -> (tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant dense<0.0> : tensor<16x8xf32>
  %d = kiln.dot %a, %b, %z : tensor<16x32xbf16>, tensor<32x8xbf16> -> tensor<16x8xf32>
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%x = %acc) -> (tensor<16x8xf32>) {
    %s = arith.addf %x, %d : tensor<16x8xf32>
    scf.yield %s : tensor<16x8xf32>
  }
  %e = kiln.dot %a, %b, %z : tensor<16x32xbf16>, tensor<32x8xbf16> -> tensor<16x8xf32>
  %t = arith.addf %acc, %e : tensor<16x8xf32>
  %u = arith.mulf %acc, %acc : tensor<16x8xf32>
  return %r, %t, %u : tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>
}
