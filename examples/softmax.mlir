// Row-wise softmax of an m x n matrix, fused: one program per row, reading the
// row in BLOCK = 256 column chunks. The first pass keeps a running maximum and
// a running sum of exponentials rescaled to it (the "online softmax"); the
// second writes exp(x - max) / sum. Padding the loads with -inf makes the
// overhanging elements contribute exp(-inf) = 0, so any n works.
//
// Launch: grid = (m).
kiln.func @softmax(%x: !kiln.ptr<f32> {kiln.name = "x"}, %out: !kiln.ptr<f32> {kiln.name = "out"},
                   %m: index {kiln.name = "m"}, %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %block = arith.constant 256 : index
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %pid = kiln.program_id x : i32
  %row = arith.index_cast %pid : i32 to index
  %vx = kiln.make_view %x, [%m, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %vo = kiln.make_view %out, [%m, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>

  // Pass 1: running max and rescaled running sum.
  %stats:2 = scf.for %col = %c0 to %n step %block
      iter_args(%run_max = %ninf, %run_sum = %zero) -> (f32, f32) {
    %t = kiln.load %vx[%row, %col] padding(0xFF800000 : f32)
        : !kiln.view<2xf32> -> tensor<1x256xf32>
    %chunk_max = kiln.reduce max %t [1] : tensor<1x256xf32> -> tensor<1xf32>
    %cm = tensor.extract %chunk_max[%c0] : tensor<1xf32>
    %new_max = arith.maximumf %run_max, %cm : f32
    %new_max_t = kiln.splat %new_max : tensor<1x256xf32>
    %shifted = arith.subf %t, %new_max_t : tensor<1x256xf32>
    %e = math.exp %shifted : tensor<1x256xf32>
    %chunk_sum = kiln.reduce sum %e [1] : tensor<1x256xf32> -> tensor<1xf32>
    %cs = tensor.extract %chunk_sum[%c0] : tensor<1xf32>
    %delta = arith.subf %run_max, %new_max : f32
    %rescale = math.exp %delta : f32
    %old = arith.mulf %run_sum, %rescale : f32
    %new_sum = arith.addf %old, %cs : f32
    scf.yield %new_max, %new_sum : f32, f32
  }

  // Pass 2: normalize and store.
  %max_t = kiln.splat %stats#0 : tensor<1x256xf32>
  %one = arith.constant 1.0 : f32
  %inv = arith.divf %one, %stats#1 : f32
  %inv_t = kiln.splat %inv : tensor<1x256xf32>
  scf.for %col = %c0 to %n step %block {
    %t = kiln.load %vx[%row, %col] padding(0xFF800000 : f32)
        : !kiln.view<2xf32> -> tensor<1x256xf32>
    %shifted = arith.subf %t, %max_t : tensor<1x256xf32>
    %e = math.exp %shifted : tensor<1x256xf32>
    %y = arith.mulf %e, %inv_t : tensor<1x256xf32>
    kiln.store %y, %vo[%row, %col] : tensor<1x256xf32> -> !kiln.view<2xf32>
  }
  kiln.return
}
