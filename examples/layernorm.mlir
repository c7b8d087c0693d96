// Layer normalization of each row of an m x n matrix:
//   y = (x - mean) / sqrt(var + eps) * w + b
// One program per row, in BLOCK = 256 column chunks: a first pass sums x and
// x^2 (zero padding adds nothing), a second normalizes and applies the affine
// weights. The variance is E[x^2] - E[x]^2 accumulated in f32.
//
// Launch: grid = (m).
kiln.func @layernorm(%x: !kiln.ptr<f32> {kiln.name = "x"},
                     %w: !kiln.ptr<f32> {kiln.name = "w"},
                     %b: !kiln.ptr<f32> {kiln.name = "b"},
                     %y: !kiln.ptr<f32> {kiln.name = "y"},
                     %m: index {kiln.name = "m"}, %n: index {kiln.name = "n"},
                     %eps: f32 {kiln.name = "eps"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %block = arith.constant 256 : index
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %pid = kiln.program_id x : i32
  %row = arith.index_cast %pid : i32 to index
  %vx = kiln.make_view %x, [%m, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %vy = kiln.make_view %y, [%m, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %vw = kiln.make_view %w, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vb = kiln.make_view %b, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>

  %sums:2 = scf.for %col = %c0 to %n step %block
      iter_args(%s = %zero, %ss = %zero) -> (f32, f32) {
    %t = kiln.load %vx[%row, %col] : !kiln.view<2xf32> -> tensor<1x256xf32>
    %sq = arith.mulf %t, %t : tensor<1x256xf32>
    %ts = kiln.reduce sum %t [1] : tensor<1x256xf32> -> tensor<1xf32>
    %tss = kiln.reduce sum %sq [1] : tensor<1x256xf32> -> tensor<1xf32>
    %a = tensor.extract %ts[%c0] : tensor<1xf32>
    %bq = tensor.extract %tss[%c0] : tensor<1xf32>
    %s2 = arith.addf %s, %a : f32
    %ss2 = arith.addf %ss, %bq : f32
    scf.yield %s2, %ss2 : f32, f32
  }
  %n_i = arith.index_cast %n : index to i64
  %n_f = arith.sitofp %n_i : i64 to f32
  %mean = arith.divf %sums#0, %n_f : f32
  %ex2 = arith.divf %sums#1, %n_f : f32
  %mean2 = arith.mulf %mean, %mean : f32
  %var0 = arith.subf %ex2, %mean2 : f32
  %var = arith.maximumf %var0, %zero : f32
  %ve = arith.addf %var, %eps : f32
  %rstd = math.rsqrt %ve : f32
  %mean_t = kiln.splat %mean : tensor<1x256xf32>
  %rstd_t = kiln.splat %rstd : tensor<1x256xf32>

  scf.for %col = %c0 to %n step %block {
    %t = kiln.load %vx[%row, %col] : !kiln.view<2xf32> -> tensor<1x256xf32>
    %wt = kiln.load %vw[%col] : !kiln.view<1xf32> -> tensor<256xf32>
    %bt = kiln.load %vb[%col] : !kiln.view<1xf32> -> tensor<256xf32>
    %w2 = kiln.expand_dims %wt [0] : tensor<256xf32> -> tensor<1x256xf32>
    %b2 = kiln.expand_dims %bt [0] : tensor<256xf32> -> tensor<1x256xf32>
    %c = arith.subf %t, %mean_t : tensor<1x256xf32>
    %nrm = arith.mulf %c, %rstd_t : tensor<1x256xf32>
    %sc = arith.mulf %nrm, %w2 : tensor<1x256xf32>
    %o = arith.addf %sc, %b2 : tensor<1x256xf32>
    kiln.store %o, %vy[%row, %col] : tensor<1x256xf32> -> !kiln.view<2xf32>
  }
  kiln.return
}
