// RUN: kiln-opt %s --convert-kiln-to-cpu | FileCheck %s

// A loop that carries only a tile, updated elementwise from a load of a
// window that moves with the induction variable, a broadcast row and a
// splat, runs in registers: the walk over the tile's elements is outside,
// each step a group of 2 rows x 4 vectors (8 vectors carried by an scf.for
// of the old loop's bounds), and the loaded tiles have no buffer (the two
// buffers: the splat, made outside the loop, and the result). The
// columns of the reads are known before the loop (the view's last offset is
// defined outside it): one version of the loop, taken when all lie inside
// their views with unit stride, reads with no test per vector; a second,
// when they start inside their rows or past them with unit stride, reads
// each with a mask of its columns; the third tests each. The first version
// reads a row outside its view from a row of padding (one per read, made at
// the kernel's entry).
// CHECK-LABEL: func.func private @window_sum
// CHECK-COUNT-2: memref.alloca() {{.*}} : memref<64xf32>
// CHECK-COUNT-2: memref.alloca() {{.*}} : memref<8x64xf32>
// CHECK-NOT: memref.alloca
// The tile's columns are one step of the walk (4 vectors of 16): the
// version is chosen once, before the walk, and each version has its own.
// CHECK: scf.if %{{.*}} {
// CHECK-NEXT: %{{.*}} = arith.constant
// CHECK: scf.for %{{.*}} = %{{.*}} to %c4{{.*}} step %c1
// CHECK: scf.for %{{.*}} = %{{.*}} to %c64{{.*}} step %c64
// The first version, in two per step: whether the step's rows lie inside
// the view at every iteration (the loads' row offset is the induction
// variable: its least and greatest values, at the loop's first and last
// iterations, are computed before the walk).
// CHECK: %[[OUT:.*]] = arith.xori %{{.*}}, %{{.*}} : i1
// CHECK-NEXT: scf.if %[[OUT]] -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>) {
// Where a row may lie outside: a plain load per vector, at an address
// selected per row: in the view, or in the row of padding for a row outside
// it (a select of vectors after the load cost a mask per row and an AND per
// vector; on a scalar condition, x86 branches around each vector).
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>) {
// CHECK-NOT: scf.if
// CHECK: %[[PAD:.*]] = memref.extract_aligned_pointer_as_index %{{.*}} : memref<64xf32> -> index
// CHECK: %[[ROW:.*]] = arith.select %{{.*}}, %{{.*}}, %[[PAD]] : index
// CHECK: %[[AT:.*]] = arith.addi %[[ROW]], %{{.*}} : index
// CHECK: %[[AT64:.*]] = arith.index_cast %[[AT]] : index to i64
// CHECK: %[[P:.*]] = llvm.inttoptr %[[AT64]] : i64 to !llvm.ptr
// CHECK: llvm.load %[[P]] {alignment = 4 : i64} : !llvm.ptr -> vector<16xf32>
// CHECK-NOT: arith.select %{{.*}} : vector<16xi1>, vector<16xf32>
// CHECK-NOT: scf.if
// CHECK: arith.mulf %{{.*}} : vector<16xf32>
// CHECK: arith.addf %{{.*}} : vector<16xf32>
// CHECK: scf.yield
// Where all lie inside (a clone): the address in the view, no select.
// CHECK: } else {
// CHECK: scf.for %{{.*}} iter_args({{.*}}) -> (vector<16xf32>,
// CHECK-NOT: memref.extract_aligned_pointer_as_index %{{.*}} : memref<64xf32>
// CHECK: llvm.load %{{.*}} {alignment = 4 : i64} : !llvm.ptr -> vector<16xf32>
// CHECK-NOT: memref.extract_aligned_pointer_as_index %{{.*}} : memref<64xf32>
// CHECK: scf.yield
// The second: a masked load per vector (no test), the row replaced by the
// padding as in the first.
// CHECK: } else {
// CHECK-NEXT: scf.if %{{.*}} {
// CHECK: scf.for %{{.*}} = %{{.*}} to %c4{{.*}} step %c1
// CHECK: scf.for %{{.*}} iter_args({{.*}}) -> (vector<16xf32>,
// CHECK-NOT: scf.if
// CHECK: %[[K:.*]] = vector.create_mask %{{.*}} : vector<16xi1>
// CHECK-NOT: scf.if
// CHECK: %[[ML:.*]] = vector.maskedload %{{.*}}, %[[K]], %{{.*}} : memref<?x?xf32, strided<[?, 1]>>, vector<16xi1>, vector<16xf32> into vector<16xf32>
// CHECK: %[[MR:.*]] = vector.broadcast %{{.*}} : i1 to vector<16xi1>
// CHECK: arith.select %[[MR]], %[[ML]], %{{.*}} : vector<16xi1>, vector<16xf32>
// CHECK-NOT: scf.if
// CHECK: scf.yield
// The third: each vector tested: a row outside the view reads the
// padding, a vector starting inside it a masked load, any other lane by lane.
// CHECK: } else {
// CHECK: scf.for %{{.*}} = %{{.*}} to %c4{{.*}} step %c1
// CHECK: scf.for %{{.*}} iter_args({{.*}}) -> (vector<16xf32>,
// CHECK: scf.if %{{.*}} -> (vector<16xf32>) {
// CHECK: vector.maskedload
// CHECK: vector.insert
// CHECK: scf.yield
// After the loop, each vector stored once, straight to the view when the
// tile lies inside it and apart from every view the loop read (tested
// before the walk); else checked, or, where it may overlap a read view,
// into a tile stored after the walk.
// CHECK: vector.store %{{[0-9]+}}#0, %{{.*}} : memref<?x?xf32, strided<[?, 1]>>, vector<16xf32>
// CHECK-NEXT: } else {
// CHECK: vector.maskedstore
// CHECK: vector.store %{{[0-9]+}}#0, %{{.*}} : memref<8x64xf32>, vector<16xf32>
// CHECK: %[[OVERLAP:.*]] = arith.xori
// CHECK-NEXT: scf.if %[[OVERLAP]] {
// CHECK: vector.load %{{.*}} : memref<8x64xf32>, vector<16xf32>
// CHECK: vector.store %{{.*}} : memref<?x?xf32, strided<[?, 1]>>, vector<16xf32>
kiln.func @window_sum(%p: !kiln.ptr<f32>, %o: !kiln.ptr<f32>, %n: index, %steps: index, %c: f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%n, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %vo = kiln.make_view %o, [%n, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %zero = arith.constant dense<0.0> : tensor<8x64xf32>
  %sc = kiln.splat %c : tensor<8x64xf32>
  %r = scf.for %s = %c0 to %steps step %c1 iter_args(%acc = %zero) -> (tensor<8x64xf32>) {
    %t = kiln.load %v[%s, %c0] : !kiln.view<2xf32> -> tensor<8x64xf32>
    %row = kiln.load %v[%s, %c0] : !kiln.view<2xf32> -> tensor<1x64xf32>
    %b = kiln.broadcast %row : tensor<1x64xf32> -> tensor<8x64xf32>
    %m = arith.mulf %t, %b : tensor<8x64xf32>
    %m2 = arith.mulf %m, %sc : tensor<8x64xf32>
    %a = arith.addf %acc, %m2 : tensor<8x64xf32>
    scf.yield %a : tensor<8x64xf32>
  }
  kiln.store %r, %vo[%c0, %c0] : tensor<8x64xf32> -> !kiln.view<2xf32>
  kiln.return
}

// A loop that writes memory (a store of its tile) is lowered as usual: its
// tile in a buffer, its body op by op.
// CHECK-LABEL: func.func private @stores
// CHECK-NOT: iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>
kiln.func @stores(%p: !kiln.ptr<f32>, %n: index, %steps: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%n, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %zero = arith.constant dense<0.0> : tensor<8x64xf32>
  %r = scf.for %s = %c0 to %steps step %c1 iter_args(%acc = %zero) -> (tensor<8x64xf32>) {
    %t = kiln.load %v[%s, %c0] : !kiln.view<2xf32> -> tensor<8x64xf32>
    %a = arith.addf %acc, %t : tensor<8x64xf32>
    kiln.store %a, %v[%c0, %c0] : tensor<8x64xf32> -> !kiln.view<2xf32>
    scf.yield %a : tensor<8x64xf32>
  }
  kiln.return
}

// A splat constant made outside the loop and broadcast inside it is read as
// the constant (it has no buffer: nothing outside asked for one).
// CHECK-LABEL: func.func private @outside_splat
// CHECK: scf.for %{{.*}} iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>
// CHECK: arith.mulf %{{.*}}, %cst{{.*}} : vector<16xf32>
kiln.func @outside_splat(%p: !kiln.ptr<f32>, %o: !kiln.ptr<f32>, %n: index, %steps: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%n, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %zero = arith.constant dense<0.0> : tensor<8x64xf32>
  %two = arith.constant dense<2.0> : tensor<1x64xf32>
  %r = scf.for %s = %c0 to %steps step %c1 iter_args(%acc = %zero) -> (tensor<8x64xf32>) {
    %t = kiln.load %v[%s, %c0] : !kiln.view<2xf32> -> tensor<8x64xf32>
    %b = kiln.broadcast %two : tensor<1x64xf32> -> tensor<8x64xf32>
    %m = arith.mulf %t, %b : tensor<8x64xf32>
    %a = arith.addf %acc, %m : tensor<8x64xf32>
    scf.yield %a : tensor<8x64xf32>
  }
  %vo = kiln.make_view %o, [%n, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  kiln.store %r, %vo[%c0, %c0] : tensor<8x64xf32> -> !kiln.view<2xf32>
  kiln.return
}

// The chain from a loop's result to its store (a bias loaded after the
// loop and added, a cast, a reshape adding a unit dimension): the loop
// moves after the bias' load, to just before the chain, and the chain is
// computed per vector in the walk and stored to the 3-D view. No 8x64 f32
// buffer: the only tile buffer is the stored tile's (i16 storage), for a
// store that may overlap the loop's reads.
// CHECK-LABEL: func.func private @epilogue
// CHECK-NOT: memref<8x64xf32>
// CHECK: memref.alloca() {{.*}} : memref<1x8x64xi16>
// CHECK-NOT: memref<8x64xf32>
// CHECK: vector.store %{{.*}} : memref<1x64xf32>, vector<16xf32>
// CHECK: scf.for %{{.*}} iter_args({{.*}}) -> (vector<16xf32>,
// CHECK: %[[B:.*]] = vector.load %{{.*}} : memref<1x64xf32>, vector<16xf32>
// CHECK: %[[S:.*]] = arith.addf %{{.*}}, %[[B]] : vector<16xf32>
// CHECK: %[[H:.*]] = arith.truncf %[[S]] : vector<16xf32> to vector<16xf16>
// CHECK: %[[I:.*]] = arith.bitcast %[[H]] : vector<16xf16> to vector<16xi16>
// CHECK: vector.store %[[I]], %{{.*}} : memref<?x?x?xi16, strided<[?, ?, 1]>>, vector<16xi16>
kiln.func @epilogue(%p: !kiln.ptr<f32>, %bias: !kiln.ptr<f32>, %o: !kiln.ptr<f16>, %n: index, %steps: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%n, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %zero = arith.constant dense<0.0> : tensor<8x64xf32>
  %r = scf.for %s = %c0 to %steps step %c1 iter_args(%acc = %zero) -> (tensor<8x64xf32>) {
    %t = kiln.load %v[%s, %c0] : !kiln.view<2xf32> -> tensor<8x64xf32>
    %a = arith.addf %acc, %t : tensor<8x64xf32>
    scf.yield %a : tensor<8x64xf32>
  }
  %vb = kiln.make_view %bias, [%c1, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %row = kiln.load %vb[%c0, %c0] : !kiln.view<2xf32> -> tensor<1x64xf32>
  %b = kiln.broadcast %row : tensor<1x64xf32> -> tensor<8x64xf32>
  %sum = arith.addf %r, %b : tensor<8x64xf32>
  %h = arith.truncf %sum : tensor<8x64xf32> to tensor<8x64xf16>
  %h3 = kiln.reshape %h : tensor<8x64xf16> -> tensor<1x8x64xf16>
  %vo = kiln.make_view %o, [%n, %n, %n], [%n, %n, %c1] : !kiln.ptr<f16> -> !kiln.view<3xf16>
  kiln.store %h3, %vo[%c0, %c0, %c0] : tensor<1x8x64xf16> -> !kiln.view<3xf16>
  kiln.return
}

// A store between the loop and its result's store: the loop stays (its
// reads come before that store), and its result goes through a buffer.
// CHECK-LABEL: func.func private @write_between
// CHECK: scf.for %{{.*}} iter_args({{.*}}) -> (vector<16xf32>,
// CHECK-COUNT-8: vector.store %{{.*}} : memref<8x64xf32>, vector<16xf32>
kiln.func @write_between(%p: !kiln.ptr<f32>, %o: !kiln.ptr<f32>, %n: index, %steps: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%n, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %zero = arith.constant dense<0.0> : tensor<8x64xf32>
  %r = scf.for %s = %c0 to %steps step %c1 iter_args(%acc = %zero) -> (tensor<8x64xf32>) {
    %t = kiln.load %v[%s, %c0] : !kiln.view<2xf32> -> tensor<8x64xf32>
    %a = arith.addf %acc, %t : tensor<8x64xf32>
    scf.yield %a : tensor<8x64xf32>
  }
  %ones = arith.constant dense<1.0> : tensor<8x64xf32>
  kiln.store %ones, %v[%c0, %c0] : tensor<8x64xf32> -> !kiln.view<2xf32>
  %vo = kiln.make_view %o, [%n, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  kiln.store %r, %vo[%c0, %c0] : tensor<8x64xf32> -> !kiln.view<2xf32>
  kiln.return
}
