// C = A x W^T with fp8 A (m x k, e4m3) and W (n x k, e5m2): kiln.dot on the
// operands' bits with lhs_fp8 / rhs_fp8, f32 products and sums, f32 C. The
// bytes travel as i8 (!kiln.ptr<i8>); W's rows are transposed for the dot,
// so both operands are K-major, as wgmma's fp8 forms need them: sm_90a runs
// wgmma.mma_async...k32.f32.e4m3.e5m2 on the bytes where they land, every
// other target decodes both operands to bf16 first (exactly).
//
// Launch: grid = (ceil(n / 64), ceil(m / 64)).
kiln.func @matmul_fp8(%a: !kiln.ptr<i8> {kiln.name = "a"}, %w: !kiln.ptr<i8> {kiln.name = "w"},
                 %c: !kiln.ptr<f32> {kiln.name = "c"}, %m: index {kiln.name = "m"},
                 %n: index {kiln.name = "n"}, %k: index {kiln.name = "k"}) attributes {grid_rank = 2} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %bm = arith.constant 64 : index
  %bn = arith.constant 64 : index
  %bk = arith.constant 128 : index
  %pn = kiln.program_id x : i32
  %pm = kiln.program_id y : i32
  %pn_i = arith.index_cast %pn : i32 to index
  %pm_i = arith.index_cast %pm : i32 to index
  %row = arith.muli %pm_i, %bm : index
  %col = arith.muli %pn_i, %bn : index
  %va = kiln.make_view %a, [%m, %k], [%k, %c1] : !kiln.ptr<i8> -> !kiln.view<2xi8>
  %vw = kiln.make_view %w, [%n, %k], [%k, %c1] : !kiln.ptr<i8> -> !kiln.view<2xi8>
  %vc = kiln.make_view %c, [%m, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %acc = scf.for %kk = %c0 to %k step %bk iter_args(%acc_in = %zero) -> (tensor<64x64xf32>) {
    %ta = kiln.load %va[%row, %kk] : !kiln.view<2xi8> -> tensor<64x128xi8>
    %tw = kiln.load %vw[%col, %kk] : !kiln.view<2xi8> -> tensor<64x128xi8>
    %tb = kiln.trans %tw [1, 0] : tensor<64x128xi8> -> tensor<128x64xi8>
    %next = kiln.dot %ta, %tb, %acc_in {lhs_fp8 = "e4m3", rhs_fp8 = "e5m2"} : tensor<64x128xi8>, tensor<128x64xi8> -> tensor<64x64xf32>
    scf.yield %next : tensor<64x64xf32>
  }
  kiln.store %acc, %vc[%row, %col] : tensor<64x64xf32> -> !kiln.view<2xf32>
  kiln.return
}
