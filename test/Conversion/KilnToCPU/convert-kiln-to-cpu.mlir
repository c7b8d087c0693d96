// RUN: kiln-opt %s --convert-kiln-to-cpu --split-input-file | FileCheck %s
// RUN: kiln-opt %s --convert-kiln-to-cpu="vector-bits=256" --split-input-file | FileCheck %s --check-prefix=AVX2

// The kernel body and its launch entry; pointers become memrefs, the grid
// comes in as six trailing i32 arguments.
// CHECK-LABEL: func.func private @add
// CHECK-SAME: (%{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: index, %[[PX:.*]]: i32, %{{.*}}: i32, %{{.*}}: i32, %{{.*}}: i32, %{{.*}}: i32, %{{.*}}: i32)
// CHECK-SAME: kiln.signature = ["ptr f32", "ptr f32", "scalar i64"]
// Tiles live in stack buffers allocated once at the entry.
// CHECK: memref.alloca() {alignment = 64 : i64} : memref<256xf32>
// CHECK: arith.index_cast %[[PX]] : i32 to index
// Views are reinterpret casts of the pointer, with dynamic and unit strides.
// CHECK: memref.reinterpret_cast {{.*}} to offset: [0], sizes: [%{{.*}}], strides: [%{{.*}}] : memref<?xf32> to memref<?xf32, strided<[?]>>
// Interior tiles: plain vector loads; edges: a vector wholly inside the
// view a plain load too, a partial one a masked load.
// CHECK: vector.load {{.*}} : memref<?xf32, strided<[1]>>, vector<16xf32>
// CHECK: %[[WHOLE:.*]] = arith.cmpi eq, %{{.*}}, %c16{{.*}} : index
// CHECK-NEXT: scf.if %[[WHOLE]] -> (vector<16xf32>) {
// CHECK-NEXT: vector.load {{.*}} : memref<?xf32, strided<[1]>>, vector<16xf32>
// CHECK: } else {
// CHECK-NEXT: vector.create_mask {{.*}} : vector<16xi1>
// CHECK: vector.maskedload {{.*}} : memref<?xf32, strided<[1]>>, vector<16xi1>, vector<16xf32> into vector<16xf32>
// Elementwise math on native-width vectors.
// CHECK: math.exp {{.*}} : vector<16xf32>
// Stores likewise: a masked store (microcoded on AMD's Zen 1-3) only for a
// partial vector.
// CHECK: %[[SWHOLE:.*]] = arith.cmpi eq, %{{.*}}, %c16{{.*}} : index
// CHECK-NEXT: scf.if %[[SWHOLE]] {
// CHECK-NEXT: vector.store {{.*}} : memref<?xf32, strided<[1]>>, vector<16xf32>
// CHECK-NEXT: } else {
// CHECK-NEXT: vector.create_mask
// CHECK-NEXT: vector.maskedstore
// CHECK-LABEL: func.func @kiln_entry_add(%{{.*}}: !llvm.ptr, %{{.*}}: i32
// CHECK: call @add(
// AVX2: math.exp {{.*}} : vector<8xf32>
kiln.func @add(%x: !kiln.ptr<f32>, %y: !kiln.ptr<f32>, %n: index) {
  %c1 = arith.constant 1 : index
  %c256 = arith.constant 256 : index
  %pid = kiln.program_id x : i32
  %p = arith.index_cast %pid : i32 to index
  %off = arith.muli %p, %c256 : index
  %vx = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vy = kiln.make_view %y, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %t = kiln.load %vx[%off] : !kiln.view<1xf32> -> tensor<256xf32>
  %e = math.exp %t : tensor<256xf32>
  kiln.store %e, %vy[%off] : tensor<256xf32> -> !kiln.view<1xf32>
  kiln.return
}

// -----

// kiln.dot: a register-blocked micro-kernel (6 rows x 4 vectors of 16, then a
// 2-row remainder block for M = 32), accumulators carried through the
// contraction loop in registers, computed in place into the loop-carried
// accumulator (no copy at the yield). Two 32x64 buffers: the loop's
// accumulator (filled with the zeros, no buffer of its own) and B's tile;
// none for the dot's result, and no copy of the accumulator into one before
// the dot.
// CHECK-LABEL: func.func private @mm
// CHECK-COUNT-2: memref.alloca() {{.*}} : memref<32x64xf32>
// CHECK-NOT: memref.alloca() {{.*}} : memref<32x64xf32>
// CHECK: scf.for
// A's tile, loaded for the dot alone, is read in place when interior: the
// micro-kernel's broadcasts load from the view (the first branch), the edge
// tiles are loaded into their buffer (the second).
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// CHECK-COUNT-4: vector.load
// CHECK: memref.load {{.*}} : memref<?x?xf32, strided<[?, 1]>>
// CHECK-NEXT: vector.broadcast
// CHECK-COUNT-4: vector.fma
// The remainder: 2 rows x 4 vectors.
// CHECK: iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
kiln.func @mm(%a: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %va = kiln.make_view %a, [%n, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %zero = arith.constant dense<0.0> : tensor<32x64xf32>
  %acc = scf.for %k = %c0 to %n step %c32 iter_args(%acc_in = %zero) -> (tensor<32x64xf32>) {
    %ta = kiln.load %va[%c0, %k] : !kiln.view<2xf32> -> tensor<32x32xf32>
    %tb = kiln.load %va[%k, %c0] : !kiln.view<2xf32> -> tensor<32x64xf32>
    %d = kiln.dot %ta, %tb, %acc_in : tensor<32x32xf32>, tensor<32x64xf32> -> tensor<32x64xf32>
    scf.yield %d : tensor<32x64xf32>
  }
  kiln.store %acc, %va[%c0, %c0] : tensor<32x64xf32> -> !kiln.view<2xf32>
  kiln.return
}

// -----

// bf16 lives in memory as i16 bits and becomes f32 only for arithmetic.
// CHECK-LABEL: func.func private @halves
// CHECK-SAME: memref<?xi16>
// CHECK: arith.bitcast {{.*}} : vector<16xi16> to vector<16xbf16>
// CHECK: arith.extf {{.*}} : vector<16xbf16> to vector<16xf32>
kiln.func @halves(%x: !kiln.ptr<bf16>, %y: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %vx = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<bf16> -> !kiln.view<1xbf16>
  %vy = kiln.make_view %y, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %t = kiln.load %vx[%c0] : !kiln.view<1xbf16> -> tensor<64xbf16>
  %f = arith.extf %t : tensor<64xbf16> to tensor<64xf32>
  kiln.store %f, %vy[%c0] : tensor<64xf32> -> !kiln.view<1xf32>
  kiln.return
}

// -----

// q . k^T with a zero accumulator in a loop (attention's scores): the key
// tile is transposed in 16x16 blocks by shuffles (the first round swaps the
// off-diagonal 8x8 halves), and the dot's accumulators start as zeros in
// registers: two 32x64 buffers (q and the scores), none holding zeros.
// CHECK-LABEL: func.func private @qk
// CHECK-COUNT-2: memref.alloca() {{.*}} : memref<32x64xf32>
// CHECK-NOT: memref.alloca() {{.*}} : memref<32x64xf32>
// CHECK: vector.shuffle %{{.*}}, %{{.*}} [0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23] : vector<16xf32>, vector<16xf32>
// CHECK: vector.shuffle %{{.*}}, %{{.*}} [8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31] : vector<16xf32>, vector<16xf32>
// The accumulators start as one value (the zeros), not loads of a buffer.
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %[[Z:[^,]+]], %{{.*}} = %[[Z]], %{{.*}} = %[[Z]],
kiln.func @qk(%a: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %va = kiln.make_view %a, [%n, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %zero = arith.constant dense<0.0> : tensor<32x64xf32>
  %tq = kiln.load %va[%c0, %c0] : !kiln.view<2xf32> -> tensor<32x64xf32>
  scf.for %k = %c0 to %n step %c64 {
    %tk = kiln.load %va[%k, %c0] : !kiln.view<2xf32> -> tensor<64x64xf32>
    %kt = kiln.trans %tk [1, 0] : tensor<64x64xf32> -> tensor<64x64xf32>
    %s = kiln.dot %tq, %kt, %zero : tensor<32x64xf32>, tensor<64x64xf32> -> tensor<32x64xf32>
    kiln.store %s, %va[%k, %c0] : tensor<32x64xf32> -> !kiln.view<2xf32>
  }
  kiln.return
}

// -----

// The edge path of a 2-D store tests each row once: a row outside the view
// skips its vectors (no per-vector test of it).
// CHECK-LABEL: func.func private @store_rows
// CHECK: } else {
// CHECK: scf.for %{{.*}} = %{{.*}} to %c8{{.*}} step %c1
// CHECK-NOT: vector.load
// CHECK: scf.if %{{.*}} {
// CHECK-NOT: vector.load
// CHECK: scf.for %{{.*}} = %{{.*}} to %c32{{.*}} step %c16
// CHECK: vector.load %{{.*}} : memref<8x32xf32>, vector<16xf32>
kiln.func @store_rows(%o: !kiln.ptr<f32>, %m: index, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = arith.constant dense<1.0> : tensor<8x32xf32>
  %v = kiln.make_view %o, [%m, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  kiln.store %t, %v[%c0, %c0] : tensor<8x32xf32> -> !kiln.view<2xf32>
  kiln.return
}

// -----

// Element-by-element stores are branch-free: an element outside the view
// (here a -1 index) goes to a one-element scratch slot, chosen by selects of
// the memref and the indices (no scf.if per element: on random indices
// its branches mispredicted).
// CHECK-LABEL: func.func private @scatter_elements
// CHECK: %[[SLOT:.*]] = memref.alloca() : memref<1xi32>
// CHECK: %[[SCRATCH:.*]] = memref.reinterpret_cast %[[SLOT]] to offset: [0], sizes: [%c1{{.*}}, %c1{{.*}}], strides: [%c0{{.*}}, %c0{{.*}}]
// CHECK: scf.for
// CHECK-NOT: scf.if
// CHECK: %[[TO:.*]] = arith.select %[[OK:.*]], %{{.*}}, %[[SCRATCH]] : memref<?x?xi32, strided<[?, ?]>>
// CHECK-NEXT: arith.select %[[OK]], %{{.*}}, %c0{{.*}} : index
// CHECK-NEXT: arith.select %[[OK]], %{{.*}}, %c0{{.*}} : index
// CHECK-NEXT: memref.store %{{.*}}, %[[TO]][%{{.*}}, %{{.*}}] : memref<?x?xi32, strided<[?, ?]>>
kiln.func @scatter_elements(%o: !kiln.ptr<i32>, %m: index, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = arith.constant dense<7> : tensor<16x1xi32>
  %r = kiln.arange 0, 16 : tensor<16xi32>
  %v = kiln.make_view %o, [%m, %n], [%n, %c1] : !kiln.ptr<i32> -> !kiln.view<2xi32>
  kiln.scatter %t, %v[%r, %c0] : tensor<16x1xi32>, tensor<16xi32> -> !kiln.view<2xi32>
  kiln.return
}
