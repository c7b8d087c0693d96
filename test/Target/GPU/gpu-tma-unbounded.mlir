// A view dimension without a bound (size 2^62: what @kiln.jit gives a batch
// or head offset of a pointer access, `a + pid_b * stride_b + ...`, and rows
// no mask bounds) still takes TMA on sm_90a: its tensor map's size is 2^30
// (the manifest's `1073741824`), exact for any box that ends at or below
// 2^30; a fill or store whose box does not goes by cp.async / threads (a
// uniform test per fill). Before, such a view failed the run-time condition
// sizes <= 2^30 and never took TMA.
// RUN: kilnc %s --target sm_90a -o %t.kb && head -c 900 %t.kb | FileCheck %s --check-prefix=MAPS
// MAPS: tensor_map swizzled 2 0 3 64 64 1073741824 a3 a5 a6 a5 1
// MAPS-NEXT: tensor_map swizzled 2 1 3 64 64 1073741824 a5 a4 a7 a4 1
// MAPS-NEXT: tensor_map plain 4 2 3 64 64 1073741824 a3 a4 a8 a4 1
// RUN: kilnc %s --target sm_90a --emit ptx | FileCheck %s --check-prefix=PTX
// PTX-DAG: cp.async.bulk.tensor.3d.shared::cluster.global
// PTX-DAG: wgmma.mma_async
// PTX-DAG: cp.async.bulk.tensor.3d.global.shared::cta
// The same with maps built on the device: their size field is 2^30 too.
// RUN: kilnc %s --target sm_90a --device-maps --emit ptx | FileCheck %s --check-prefix=DEVICE
// DEVICE: mov.{{[bu]}}32 {{.*}}1073741824
// DEVICE: tensormap.replace.tile.global_dim.shared::cta.b1024.b32
// DEVICE: cp.async.bulk.tensor.3d.shared::cluster.global

kiln.func @batched_matmul(%a: !kiln.ptr<bf16> {kiln.name = "a"}, %b: !kiln.ptr<bf16> {kiln.name = "b"},
                  %c: !kiln.ptr<f32> {kiln.name = "c"}, %m: index {kiln.name = "m"},
                  %n: index {kiln.name = "n"}, %k: index {kiln.name = "k"},
                  %sa: index {kiln.name = "stride_a"}, %sb: index {kiln.name = "stride_b"},
                  %sc: index {kiln.name = "stride_c"}) attributes {grid_rank = 3} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %bm = arith.constant 64 : index
  %bk = arith.constant 64 : index
  %unbounded = arith.constant 4611686018427387904 : index
  %va = kiln.make_view %a, [%unbounded, %m, %k], [%sa, %k, %c1] : !kiln.ptr<bf16> -> !kiln.view<3xbf16>
  %vb = kiln.make_view %b, [%unbounded, %k, %n], [%sb, %n, %c1] : !kiln.ptr<bf16> -> !kiln.view<3xbf16>
  %vc = kiln.make_view %c, [%unbounded, %m, %n], [%sc, %n, %c1] : !kiln.ptr<f32> -> !kiln.view<3xf32>
  %pz = kiln.program_id z : i32
  %batch = arith.index_cast %pz : i32 to index
  %pm = kiln.program_id y : i32
  %pm_i = arith.index_cast %pm : i32 to index
  %row = arith.muli %pm_i, %bm : index
  %pn = kiln.program_id x : i32
  %pn_i = arith.index_cast %pn : i32 to index
  %col = arith.muli %pn_i, %bm : index
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %acc = scf.for %kk = %c0 to %k step %bk iter_args(%acc_in = %zero) -> (tensor<64x64xf32>) {
    %ta3 = kiln.load %va[%batch, %row, %kk] : !kiln.view<3xbf16> -> tensor<1x64x64xbf16>
    %tb3 = kiln.load %vb[%batch, %kk, %col] : !kiln.view<3xbf16> -> tensor<1x64x64xbf16>
    %ta = kiln.reshape %ta3 : tensor<1x64x64xbf16> -> tensor<64x64xbf16>
    %tb = kiln.reshape %tb3 : tensor<1x64x64xbf16> -> tensor<64x64xbf16>
    %next = kiln.dot %ta, %tb, %acc_in : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    scf.yield %next : tensor<64x64xf32>
  }
  %acc3 = kiln.reshape %acc : tensor<64x64xf32> -> tensor<1x64x64xf32>
  kiln.store %acc3, %vc[%batch, %row, %col] : tensor<1x64x64xf32> -> !kiln.view<3xf32>
  kiln.return
}
