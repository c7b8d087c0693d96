// RUN: kiln-opt %s | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --mlir-print-op-generic | kiln-opt | FileCheck %s

// Round trip of every kiln op and type.

// CHECK-LABEL: kiln.func @grid
// CHECK-SAME: attributes {grid_rank = 3 : i64}
kiln.func @grid() attributes {grid_rank = 3} {
  // CHECK: kiln.program_id x : i32
  %0 = kiln.program_id x : i32
  // CHECK: kiln.program_id z : i32
  %1 = kiln.program_id z : i32
  // CHECK: kiln.num_programs y : i32
  %2 = kiln.num_programs y : i32
  // CHECK: kiln.return
  kiln.return
}

// CHECK-LABEL: kiln.func private @external(!kiln.ptr<bf16>, i64)
kiln.func private @external(!kiln.ptr<bf16>, i64)

// CHECK-LABEL: kiln.func @views
// CHECK-SAME: (%[[P:.*]]: !kiln.ptr<f32>, %[[M:.*]]: index, %[[N:.*]]: index)
kiln.func @views(%p: !kiln.ptr<f32>, %m: index, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // CHECK: %[[V:.*]] = kiln.make_view %[[P]], [%[[M]], %[[N]]], [%[[N]], %{{.*}}] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %v = kiln.make_view %p, [%m, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  // CHECK: %[[T:.*]] = kiln.load %[[V]][%{{.*}}, %{{.*}}] : !kiln.view<2xf32> -> tensor<16x32xf32>
  %t = kiln.load %v[%c0, %c0] : !kiln.view<2xf32> -> tensor<16x32xf32>
  // CHECK: kiln.load %[[V]][%{{.*}}, %{{.*}}] padding(0xFF800000 : f32) {in_bounds = array<i1: true, false>} : !kiln.view<2xf32> -> tensor<16x32xf32>
  %u = kiln.load %v[%c0, %c1] padding(0xFF800000 : f32) {in_bounds = array<i1: true, false>} : !kiln.view<2xf32> -> tensor<16x32xf32>
  // CHECK: kiln.store %[[T]], %[[V]][%{{.*}}, %{{.*}}] : tensor<16x32xf32> -> !kiln.view<2xf32>
  kiln.store %t, %v[%c0, %c1] : tensor<16x32xf32> -> !kiln.view<2xf32>
  // CHECK: kiln.atomic_add %[[T]], %[[V]][%{{.*}}, %{{.*}}] : tensor<16x32xf32> -> !kiln.view<2xf32>
  kiln.atomic_add %t, %v[%c0, %c0] : tensor<16x32xf32> -> !kiln.view<2xf32>
  // The values the additions read (zero outside the view).
  // CHECK: %[[OLD:.*]] = kiln.atomic_add %[[T]], %[[V]][%{{.*}}, %{{.*}}] : tensor<16x32xf32> -> !kiln.view<2xf32>
  // CHECK: kiln.store %[[OLD]]
  %old = kiln.atomic_add %t, %v[%c0, %c0] : tensor<16x32xf32> -> !kiln.view<2xf32>
  kiln.store %old, %v[%c0, %c1] : tensor<16x32xf32> -> !kiln.view<2xf32>
  kiln.return
}

// CHECK-LABEL: kiln.func @indexed
kiln.func @indexed(%p: !kiln.ptr<bf16>, %q: !kiln.ptr<i32>, %rows: index, %cols: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%rows, %cols], [%cols, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %w = kiln.make_view %q, [%rows], [%c1] : !kiln.ptr<i32> -> !kiln.view<1xi32>
  %idx = kiln.load %w[%c0] : !kiln.view<1xi32> -> tensor<8xi32>
  // CHECK: %[[G:.*]] = kiln.gather %{{.*}}[%{{.*}}, %{{.*}}] : !kiln.view<2xbf16>, tensor<8xi32> -> tensor<8x64xbf16>
  %g = kiln.gather %v[%idx, %c0] : !kiln.view<2xbf16>, tensor<8xi32> -> tensor<8x64xbf16>
  // CHECK: kiln.gather %{{.*}}[%{{.*}}] padding(-1 : i32) : !kiln.view<1xi32>, tensor<8xi32> -> tensor<8xi32>
  %h = kiln.gather %w[%idx] padding(-1 : i32) : !kiln.view<1xi32>, tensor<8xi32> -> tensor<8xi32>
  // CHECK: kiln.scatter %[[G]], %{{.*}}[%{{.*}}, %{{.*}}] : tensor<8x64xbf16>, tensor<8xi32> -> !kiln.view<2xbf16>
  kiln.scatter %g, %v[%idx, %c0] : tensor<8x64xbf16>, tensor<8xi32> -> !kiln.view<2xbf16>
  // CHECK: %{{.*}} = kiln.scatter_add %{{.*}}, %{{.*}}[%{{.*}}] : tensor<8xi32>, tensor<8xi32> -> !kiln.view<1xi32>
  %slots = kiln.scatter_add %idx, %w[%idx] : tensor<8xi32>, tensor<8xi32> -> !kiln.view<1xi32>
  // CHECK: kiln.scatter_rmw max %{{.*}}, %{{.*}}[%{{.*}}] : tensor<8xi32>, tensor<8xi32> -> !kiln.view<1xi32>
  %best = kiln.scatter_rmw max %idx, %w[%idx] : tensor<8xi32>, tensor<8xi32> -> !kiln.view<1xi32>
  // CHECK: kiln.atomic_rmw xor %{{.*}}, %{{.*}}[%{{.*}}] : tensor<8xi32> -> !kiln.view<1xi32>
  %x = kiln.atomic_rmw xor %idx, %w[%c0] : tensor<8xi32> -> !kiln.view<1xi32>
  kiln.return
}

// CHECK-LABEL: func.func @tiles
func.func @tiles(%x: f32, %a: tensor<16x32xbf16>, %b: tensor<32x8xbf16>,
                 %c: tensor<16x8xf32>, %i: tensor<4x4xi8>, %acc: tensor<4x4xi32>) {
  // CHECK: kiln.arange 0, 64 : tensor<64xi32>
  %r = kiln.arange 0, 64 : tensor<64xi32>
  // CHECK: kiln.splat %{{.*}} : tensor<1x8xf32>
  %s = kiln.splat %x : tensor<1x8xf32>
  // CHECK: kiln.broadcast %{{.*}} : tensor<1x8xf32> -> tensor<16x8xf32>
  %bc = kiln.broadcast %s : tensor<1x8xf32> -> tensor<16x8xf32>
  // CHECK: kiln.expand_dims %{{.*}}[1] : tensor<64xi32> -> tensor<64x1xi32>
  %e = kiln.expand_dims %r [1] : tensor<64xi32> -> tensor<64x1xi32>
  // CHECK: kiln.reshape %{{.*}} : tensor<64x1xi32> -> tensor<8x8xi32>
  %rs = kiln.reshape %e : tensor<64x1xi32> -> tensor<8x8xi32>
  // CHECK: kiln.trans %{{.*}} [1, 0] : tensor<16x32xbf16> -> tensor<32x16xbf16>
  %t = kiln.trans %a [1, 0] : tensor<16x32xbf16> -> tensor<32x16xbf16>
  // CHECK: kiln.dot %{{.*}}, %{{.*}}, %{{.*}} : tensor<16x32xbf16>, tensor<32x8xbf16> -> tensor<16x8xf32>
  %d = kiln.dot %a, %b, %c : tensor<16x32xbf16>, tensor<32x8xbf16> -> tensor<16x8xf32>
  // CHECK: kiln.dot %{{.*}}, %{{.*}}, %{{.*}} : tensor<4x4xi8>, tensor<4x4xi8> -> tensor<4x4xi32>
  %di = kiln.dot %i, %i, %acc : tensor<4x4xi8>, tensor<4x4xi8> -> tensor<4x4xi32>
  // CHECK: kiln.reduce sum %{{.*}}[1] : tensor<16x8xf32> -> tensor<16xf32>
  %sum = kiln.reduce sum %d [1] : tensor<16x8xf32> -> tensor<16xf32>
  // CHECK: kiln.reduce max %{{.*}}[0] : tensor<16xf32> -> f32
  %max = kiln.reduce max %sum [0] : tensor<16xf32> -> f32
  // CHECK: kiln.reduce min %{{.*}}[0] : tensor<16x8xf32> -> tensor<8xf32>
  %min = kiln.reduce min %d [0] : tensor<16x8xf32> -> tensor<8xf32>
  // CHECK: kiln.reduce argmax %{{.*}}[1] : tensor<16x8xf32> -> tensor<16xi32>
  %am = kiln.reduce argmax %d [1] : tensor<16x8xf32> -> tensor<16xi32>
  // CHECK: kiln.reduce argmin %{{.*}}[0] : tensor<16xf32> -> i32
  %an = kiln.reduce argmin %sum [0] : tensor<16xf32> -> i32
  // CHECK: kiln.scan sum %{{.*}}[1] : tensor<16x8xf32>
  %cs = kiln.scan sum %d [1] : tensor<16x8xf32>
  // CHECK: kiln.scan max %{{.*}}[0] reverse : tensor<16x8xf32>
  %cm = kiln.scan max %d [0] reverse : tensor<16x8xf32>
  // CHECK: kiln.scan min %{{.*}}[0] : tensor<4x4xi32>
  %ci = kiln.scan min %di [0] : tensor<4x4xi32>
  // CHECK: kiln.scan prod %{{.*}}[1] reverse : tensor<16x8xf32>
  %cp = kiln.scan prod %d [1] reverse : tensor<16x8xf32>
  // CHECK: kiln.reduce prod %{{.*}}[0] : tensor<16xf32> -> f32
  %pr = kiln.reduce prod %sum [0] : tensor<16xf32> -> f32
  return
}
