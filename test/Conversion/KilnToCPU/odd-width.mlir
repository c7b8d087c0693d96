// RUN: kiln-opt %s --convert-kiln-to-cpu | FileCheck %s

// A tile whose last dimension whole vectors do not divide (21 f32, vectors
// of 16 here): an interior tile's rows are copied by whole vectors from
// column 0, then one more per row at column 21 - 16 = 5 that overlaps the
// one before it; an edge tile element by element (each tested). The same
// for the store.
// CHECK-LABEL: func.func private @odd
// CHECK: scf.if
// CHECK: scf.for %{{.*}} = %{{.*}} to %c16{{.*}} step %c16
// CHECK: vector.load %{{.*}} : memref<?x?xf32, strided<[?, 1]>>, vector<16xf32>
// CHECK: vector.store %{{.*}} : memref<4x21xf32>, vector<16xf32>
// CHECK: %[[C5:.*]] = arith.constant 5 : index
// CHECK: vector.load %{{.*}} : memref<?x?xf32, strided<[?, 1]>>, vector<16xf32>
// CHECK: vector.store %{{.*}}[%{{.*}}, %[[C5]]] : memref<4x21xf32>, vector<16xf32>
// CHECK: } else {
// CHECK: scf.for %{{.*}} = %{{.*}} to %c21{{.*}} step %c1
// CHECK: scf.if %{{.*}} -> (f32)
// CHECK: scf.if
// CHECK: vector.load %{{.*}} : memref<4x21xf32>, vector<16xf32>
// CHECK: vector.store %{{.*}} : memref<?x?xf32, strided<[?, 1]>>, vector<16xf32>
// CHECK: %[[S5:.*]] = arith.constant 5 : index
// CHECK: vector.load %{{.*}}[%{{.*}}, %[[S5]]] : memref<4x21xf32>, vector<16xf32>
// CHECK: vector.store %{{.*}} : memref<?x?xf32, strided<[?, 1]>>, vector<16xf32>
kiln.func @odd(%p: !kiln.ptr<f32>, %o: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%n, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %vo = kiln.make_view %o, [%n, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %t = kiln.load %v[%c0, %c0] : !kiln.view<2xf32> -> tensor<4x21xf32>
  %e = math.exp %t : tensor<4x21xf32>
  kiln.store %e, %vo[%c0, %c0] : tensor<4x21xf32> -> !kiln.view<2xf32>
  kiln.return
}
