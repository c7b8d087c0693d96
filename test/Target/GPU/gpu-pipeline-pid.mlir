// Front ends emit kiln.program_id where it is used: here inside the K loop,
// in the loads' offsets (as @kiln.jit does for `kl.program_id(1) * BM` in a
// loop). The offsets' slice takes the grid's values for them, so the loads
// are still pipelined, and on sm_90a loaded by TMA; an older lowering gave
// up on the slice and loaded each tile in its own iteration, waiting for it.
// RUN: kilnc %s --kernel matmul_pid_in_loop --target sm_90a --emit ptx | FileCheck %s
// RUN: kilnc %s --kernel matmul_pid_in_loop --target sm_80 --emit ptx | FileCheck %s --check-prefix=SM80
// The views made inside the loop too, as @kiln.jit makes them for
// `kl.load(a + rm[:, None] * k + (kk + rk)[None, :], mask=...)`: they do not
// change with the loop's index, so kiln-hoist-invariants moves them before
// it, and the loads are TMA's again.
// RUN: kilnc %s --kernel matmul_view_in_loop --target sm_90a --emit ptx | FileCheck %s
// CHECK: cp.async.bulk.tensor.2d.shared::cluster.global
// CHECK: wgmma.mma_async
// CHECK: mbarrier.try_wait
// On sm_80: one group committed ahead (the prologue), one per iteration,
// and one wait for both tiles (unpipelined, each load waited for its own).
// SM80: cp.async.commit_group
// SM80: cp.async.commit_group
// SM80: cp.async.wait_group 0;
// SM80-NOT: cp.async.wait_group

kiln.func @matmul_pid_in_loop(%a: !kiln.ptr<bf16> {kiln.name = "a"}, %b: !kiln.ptr<bf16> {kiln.name = "b"},
                  %c: !kiln.ptr<f32> {kiln.name = "c"}, %m: index {kiln.name = "m"},
                  %n: index {kiln.name = "n"}, %k: index {kiln.name = "k"}) attributes {grid_rank = 2} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %bm = arith.constant 64 : index
  %bk = arith.constant 64 : index
  %va = kiln.make_view %a, [%m, %k], [%k, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %vb = kiln.make_view %b, [%k, %n], [%n, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %vc = kiln.make_view %c, [%m, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %acc = scf.for %kk = %c0 to %k step %bk iter_args(%acc_in = %zero) -> (tensor<64x64xf32>) {
    %pm = kiln.program_id y : i32
    %pm_i = arith.index_cast %pm : i32 to index
    %row = arith.muli %pm_i, %bm : index
    %ta = kiln.load %va[%row, %kk] : !kiln.view<2xbf16> -> tensor<64x64xbf16>
    %pn = kiln.program_id x : i32
    %pn_i = arith.index_cast %pn : i32 to index
    %col = arith.muli %pn_i, %bm : index
    %tb = kiln.load %vb[%kk, %col] : !kiln.view<2xbf16> -> tensor<64x64xbf16>
    %next = kiln.dot %ta, %tb, %acc_in : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    scf.yield %next : tensor<64x64xf32>
  }
  %pm = kiln.program_id y : i32
  %pm_i = arith.index_cast %pm : i32 to index
  %row = arith.muli %pm_i, %bm : index
  %pn = kiln.program_id x : i32
  %pn_i = arith.index_cast %pn : i32 to index
  %col = arith.muli %pn_i, %bm : index
  kiln.store %acc, %vc[%row, %col] : tensor<64x64xf32> -> !kiln.view<2xf32>
  kiln.return
}

kiln.func @matmul_view_in_loop(%a: !kiln.ptr<bf16> {kiln.name = "a"}, %b: !kiln.ptr<bf16> {kiln.name = "b"},
                  %c: !kiln.ptr<f32> {kiln.name = "c"}, %m: i64 {kiln.name = "m"},
                  %n: i64 {kiln.name = "n"}, %k: i64 {kiln.name = "k"}) attributes {grid_rank = 2} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %bm = arith.constant 64 : index
  %bk = arith.constant 64 : index
  %ki0 = arith.index_cast %k : i64 to index
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %acc = scf.for %kk = %c0 to %ki0 step %bk iter_args(%acc_in = %zero) -> (tensor<64x64xf32>) {
    %mi = arith.index_cast %m : i64 to index
    %ki = arith.index_cast %k : i64 to index
    %ni = arith.index_cast %n : i64 to index
    %va = kiln.make_view %a, [%mi, %ki], [%ki, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
    %vb = kiln.make_view %b, [%ki, %ni], [%ni, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
    %pm = kiln.program_id y : i32
    %pm_i = arith.index_cast %pm : i32 to index
    %row = arith.muli %pm_i, %bm : index
    %ta = kiln.load %va[%row, %kk] padding(0.0 : bf16) : !kiln.view<2xbf16> -> tensor<64x64xbf16>
    %pn = kiln.program_id x : i32
    %pn_i = arith.index_cast %pn : i32 to index
    %col = arith.muli %pn_i, %bm : index
    %tb = kiln.load %vb[%kk, %col] padding(0.0 : bf16) : !kiln.view<2xbf16> -> tensor<64x64xbf16>
    %next = kiln.dot %ta, %tb, %acc_in : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    scf.yield %next : tensor<64x64xf32>
  }
  %mi = arith.index_cast %m : i64 to index
  %ni = arith.index_cast %n : i64 to index
  %vc = kiln.make_view %c, [%mi, %ni], [%ni, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %pm = kiln.program_id y : i32
  %pm_i = arith.index_cast %pm : i32 to index
  %row = arith.muli %pm_i, %bm : index
  %pn = kiln.program_id x : i32
  %pn_i = arith.index_cast %pn : i32 to index
  %col = arith.muli %pn_i, %bm : index
  kiln.store %acc, %vc[%row, %col] : tensor<64x64xf32> -> !kiln.view<2xf32>
  kiln.return
}
