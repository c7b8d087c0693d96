// RUN: kiln-opt %s --convert-kiln-to-cpu | FileCheck %s

// A single-use splat, broadcast or elementwise op feeding an elementwise op
// of the same shape, or a store, is computed inline, element by element:
// exp(x - m) * s below needs buffers only for the loaded tile and the
// [1, 64] row it is broadcast from; the store computes the result as it
// writes it.
// CHECK-LABEL: func.func private @fused
// CHECK-COUNT-2: memref.alloca
// CHECK-NOT: memref.alloca
// The store's interior copy: load the tile and the row (the broadcast is an
// index), subtract, exp, scale by the splat scalar, store to the view.
// CHECK: %[[ROW:.*]] = vector.load %{{.*}}[%{{.*}}, %{{.*}}] : memref<1x64xf32>, vector<16xf32>
// CHECK-NEXT: %[[D:.*]] = arith.subf %{{.*}}, %[[ROW]] : vector<16xf32>
// CHECK-NEXT: %[[E:.*]] = math.exp %[[D]] : vector<16xf32>
// CHECK-NEXT: %[[S:.*]] = vector.broadcast %{{.*}} : f32 to vector<16xf32>
// CHECK-NEXT: %[[R:.*]] = arith.mulf %[[E]], %[[S]] : vector<16xf32>
// CHECK-NEXT: vector.store %[[R]], %{{.*}} : memref<?x?xf32, strided<[?, 1]>>, vector<16xf32>
kiln.func @fused(%p: !kiln.ptr<f32>, %n: index, %s: f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%n, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %t = kiln.load %v[%c0, %c0] : !kiln.view<2xf32> -> tensor<8x64xf32>
  %row = kiln.load %v[%c0, %c0] : !kiln.view<2xf32> -> tensor<1x64xf32>
  %m = kiln.broadcast %row : tensor<1x64xf32> -> tensor<8x64xf32>
  %d = arith.subf %t, %m : tensor<8x64xf32>
  %e = math.exp %d : tensor<8x64xf32>
  %st = kiln.splat %s : tensor<8x64xf32>
  %r = arith.mulf %e, %st : tensor<8x64xf32>
  kiln.store %r, %v[%c0, %c0] : tensor<8x64xf32> -> !kiln.view<2xf32>
  kiln.return
}

// A gather whose only user is a store: when both tiles are interior, each
// row chunk goes from the table straight to the output (no tile buffer in
// between). When the tile runs past the destination (offsets 0 or more, the
// source holding the columns stored), the same copy over the part inside:
// loops to run-time extents, whole vectors, then a masked last one.
// Otherwise the general gather and store run in the last else branch.
// CHECK-LABEL: func.func private @gather_store
// CHECK: memref.alloca() {{.*}} : memref<8x64xf32>
// CHECK: scf.if
// CHECK: scf.if %{{.*}} {
// CHECK: %[[ROW:.*]] = memref.load %{{.*}} : memref<8xi32>
// CHECK: %[[V:.*]] = scf.if %{{.*}} -> (vector<16xf32>) {
// CHECK-NEXT: vector.load %{{.*}} : memref<?x?xf32, strided<[?, 1]>>, vector<16xf32>
// CHECK: vector.store %[[V]], %{{.*}} : memref<?x?xf32, strided<[?, 1]>>, vector<16xf32>
// (The clipped copy's extents and condition are computed in the else
// branch, before its if: an interior tile does not compute them.)
// CHECK: } else {
// CHECK: arith.maxsi
// CHECK: scf.if %{{.*}} {
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[ROWS:[0-9]+]] step %{{.*}} {
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[WHOLE:[0-9]+]] step %c16 {
// CHECK: vector.load %{{.*}} : memref<?x?xf32, strided<[?, 1]>>, vector<16xf32>
// CHECK: vector.store %{{.*}} : memref<?x?xf32, strided<[?, 1]>>, vector<16xf32>
// CHECK: %[[K:.*]] = vector.create_mask %{{.*}} : vector<16xi1>
// CHECK: vector.maskedload %{{.*}}, %[[K]], %{{.*}} : memref<?x?xf32, strided<[?, 1]>>, vector<16xi1>, vector<16xf32> into vector<16xf32>
// CHECK: vector.maskedstore %{{.*}}, %[[K]], %{{.*}} : memref<?x?xf32, strided<[?, 1]>>, vector<16xi1>, vector<16xf32>
// CHECK: } else {
// CHECK: vector.store %{{.*}}, %{{.*}} : memref<8x64xf32>, vector<16xf32>
kiln.func @gather_store(%p: !kiln.ptr<f32>, %q: !kiln.ptr<i32>, %o: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %vi = kiln.make_view %q, [%n], [%c1] : !kiln.ptr<i32> -> !kiln.view<1xi32>
  %idx = kiln.load %vi[%c0] : !kiln.view<1xi32> -> tensor<8xi32>
  %v = kiln.make_view %p, [%n, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %vo = kiln.make_view %o, [%n, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %g = kiln.gather %v[%idx, %c0] : !kiln.view<2xf32>, tensor<8xi32> -> tensor<8x64xf32>
  kiln.store %g, %vo[%c0, %c0] : tensor<8x64xf32> -> !kiln.view<2xf32>
  kiln.return
}

// The same through a reshape that adds a leading unit dimension (a 2-D
// gathered tile stored into a 3-D view): the interior branch copies rows
// straight to the 3-D destination.
// CHECK-LABEL: func.func private @gather_reshape_store
// CHECK: scf.if %{{.*}} {
// CHECK: %[[V:.*]] = scf.if %{{.*}} -> (vector<16xf32>) {
// CHECK-NEXT: vector.load %{{.*}} : memref<?x?xf32, strided<[?, 1]>>, vector<16xf32>
// CHECK: vector.store %[[V]], %{{.*}} : memref<?x?x?xf32, strided<[?, ?, 1]>>, vector<16xf32>
// CHECK: } else {
kiln.func @gather_reshape_store(%p: !kiln.ptr<f32>, %q: !kiln.ptr<i32>, %o: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %vi = kiln.make_view %q, [%n], [%c1] : !kiln.ptr<i32> -> !kiln.view<1xi32>
  %idx = kiln.load %vi[%c0] : !kiln.view<1xi32> -> tensor<8xi32>
  %v = kiln.make_view %p, [%n, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %vo = kiln.make_view %o, [%n, %n, %n], [%n, %n, %c1] : !kiln.ptr<f32> -> !kiln.view<3xf32>
  %g = kiln.gather %v[%idx, %c0] : !kiln.view<2xf32>, tensor<8xi32> -> tensor<8x64xf32>
  %r = kiln.reshape %g : tensor<8x64xf32> -> tensor<1x8x64xf32>
  kiln.store %r, %vo[%c0, %c0, %c0] : tensor<1x8x64xf32> -> !kiln.view<3xf32>
  kiln.return
}
