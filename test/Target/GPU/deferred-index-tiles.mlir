// Tiles defined before a loop or an if and read inside it: on the GPU an
// index tile (an iota, splats, expand_dims, broadcasts, cheap integer ops) is
// recomputed where it is read (canDefer, isIndexTile), anything else keeps
// its buffer. A review of the first version, which deferred any cheap op,
// found both kernels here broken:
// - @rowscale: a row scale (select of two loaded rows) defined before the
//   loop of dots it scales was deferred, and the register accumulator's row
//   scale found no buffer ("tile operand has no buffer"): it must compile.
// - @rows2: a comparison of a row vector in registers (a reduction of dot
//   fragments), read only inside an scf.if, was deferred; the row vector was
//   then written to shared memory on the if's path only and read after it.
//   test_gpu_compile.py runs it on the emulator with the if taken and not
//   taken, against numpy.
// - @outer_ar (written after the fix): a gather's row indices come from an
//   iota defined before the loop, now recomputed where it is read: the
//   gather must still be pipelined (a fill's copies and commit before the
//   loop; GPUPipelining's indexExpression/evalIndexAt compute the deferred
//   iota at issue). test_gpu_compile.py checks its sums on the emulator.
// RUN: kiln-opt %s --convert-kiln-to-gpu=chip=sm_80 | FileCheck %s --check-prefix=GATHER
// GATHER-LABEL: gpu.func @outer_ar
// GATHER: nvgpu.device_async_copy
// GATHER: {{^      }}nvvm.cp.async.commit.group
// GATHER: {{^      }}scf.for
// GATHER: nvvm.cp.async.wait.group
// GATHER: nvgpu.device_async_copy
// RUN: kilnc %s --kernel rowscale --target sm_80 --emit ptx | FileCheck %s --check-prefix=MMA
// RUN: kilnc %s --kernel rowscale --target sm_90a --emit ptx | FileCheck %s --check-prefix=WGMMA
// RUN: kilnc %s --kernel rows2 --target sm_80 --emit ptx | FileCheck %s --check-prefix=MMA
// MMA: mma.sync.aligned.m16n8k16
// WGMMA: wgmma.mma_async
kiln.func @rowscale(%a: !kiln.ptr<bf16> {kiln.name = "a"}, %b: !kiln.ptr<bf16> {kiln.name = "b"},
                    %c: !kiln.ptr<f32> {kiln.name = "c"}, %x: !kiln.ptr<f32> {kiln.name = "x"},
                    %m: index {kiln.name = "m"}, %n: index {kiln.name = "n"},
                    %k: index {kiln.name = "k"}) attributes {grid_rank = 2} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %bk = arith.constant 128 : index
  %pn = kiln.program_id x : i32
  %pm = kiln.program_id y : i32
  %pn_i = arith.index_cast %pn : i32 to index
  %pm_i = arith.index_cast %pm : i32 to index
  %row = arith.muli %pm_i, %c64 : index
  %col = arith.muli %pn_i, %c64 : index
  %va = kiln.make_view %a, [%m, %k], [%k, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %vb = kiln.make_view %b, [%k, %n], [%n, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %vc = kiln.make_view %c, [%m, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %vx = kiln.make_view %x, [%m], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %x0 = kiln.load %vx[%row] : !kiln.view<1xf32> -> tensor<64xf32>
  %x1 = kiln.load %vx[%col] : !kiln.view<1xf32> -> tensor<64xf32>
  %gt = arith.cmpf ogt, %x0, %x1 : tensor<64xf32>
  %rv = arith.select %gt, %x0, %x1 : tensor<64xi1>, tensor<64xf32>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %acc = scf.for %kk = %c0 to %k step %bk iter_args(%acc_in = %zero) -> (tensor<64x64xf32>) {
    %ta = kiln.load %va[%row, %kk] : !kiln.view<2xbf16> -> tensor<64x128xbf16>
    %tb = kiln.load %vb[%kk, %col] : !kiln.view<2xbf16> -> tensor<128x64xbf16>
    %e = kiln.expand_dims %rv [1] : tensor<64xf32> -> tensor<64x1xf32>
    %bc = kiln.broadcast %e : tensor<64x1xf32> -> tensor<64x64xf32>
    %sc = arith.mulf %acc_in, %bc : tensor<64x64xf32>
    %next = kiln.dot %ta, %tb, %sc : tensor<64x128xbf16>, tensor<128x64xbf16> -> tensor<64x64xf32>
    scf.yield %next : tensor<64x64xf32>
  }
  kiln.store %acc, %vc[%row, %col] : tensor<64x64xf32> -> !kiln.view<2xf32>
  kiln.return
}

// out[0:64, :] = flag ? select(max_j s[i, j] > 0, X, Y) : X, s = a b (bf16);
// out_m[0:64] = the row maxima.
kiln.func @rows2(%a: !kiln.ptr<bf16> {kiln.name = "a"}, %b: !kiln.ptr<bf16> {kiln.name = "b"},
                 %x: !kiln.ptr<f32> {kiln.name = "x"}, %out: !kiln.ptr<f32> {kiln.name = "out"},
                 %outm: !kiln.ptr<f32> {kiln.name = "out_m"},
                 %flag: index {kiln.name = "flag"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %va = kiln.make_view %a, [%c64, %c64], [%c64, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %vb = kiln.make_view %b, [%c64, %c64], [%c64, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %vx = kiln.make_view %x, [%c128, %c64], [%c64, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %vo = kiln.make_view %out, [%c64, %c64], [%c64, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %vm = kiln.make_view %outm, [%c64], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %ta = kiln.load %va[%c0, %c0] : !kiln.view<2xbf16> -> tensor<64x64xbf16>
  %tb = kiln.load %vb[%c0, %c0] : !kiln.view<2xbf16> -> tensor<64x64xbf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %s = kiln.dot %ta, %tb, %zero : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  %m = kiln.reduce max %s [1] : tensor<64x64xf32> -> tensor<64xf32>
  %z = arith.constant dense<0.0> : tensor<64xf32>
  %pos = arith.cmpf ogt, %m, %z : tensor<64xf32>
  %X = kiln.load %vx[%c0, %c0] : !kiln.view<2xf32> -> tensor<64x64xf32>
  %Y = kiln.load %vx[%c64, %c0] : !kiln.view<2xf32> -> tensor<64x64xf32>
  %cond = arith.cmpi ne, %flag, %c0 : index
  %r = scf.if %cond -> (tensor<64x64xf32>) {
    %pe = kiln.expand_dims %pos [1] : tensor<64xi1> -> tensor<64x1xi1>
    %pb = kiln.broadcast %pe : tensor<64x1xi1> -> tensor<64x64xi1>
    %sel = arith.select %pb, %X, %Y : tensor<64x64xi1>, tensor<64x64xf32>
    scf.yield %sel : tensor<64x64xf32>
  } else {
    scf.yield %X : tensor<64x64xf32>
  }
  kiln.store %r, %vo[%c0, %c0] : tensor<64x64xf32> -> !kiln.view<2xf32>
  kiln.store %m, %vm[%c0] : tensor<64xf32> -> !kiln.view<1xf32>
  kiln.return
}

// out[j, :] = sum over i0 = 0, 16, .. < n of x[i0 - j, :] (rows outside x read
// zeros), the rows' indices i0 - arange(16) from an iota made before the loop.
kiln.func @outer_ar(%x: !kiln.ptr<bf16> {kiln.name = "x"}, %out: !kiln.ptr<f32> {kiln.name = "out"},
                    %r: index {kiln.name = "r"}, %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %vx = kiln.make_view %x, [%r, %c64], [%c64, %c1] : !kiln.ptr<bf16> -> !kiln.view<2xbf16>
  %zero = arith.constant dense<0.0> : tensor<16x64xf32>
  %ar0 = kiln.arange 0, 16 : tensor<16xi32>
  %ar = kiln.expand_dims %ar0 [0] : tensor<16xi32> -> tensor<1x16xi32>
  %acc = scf.for %i0 = %c0 to %n step %c16 iter_args(%a = %zero) -> (tensor<16x64xf32>) {
    %base = arith.index_cast %i0 : index to i32
    %b = kiln.splat %base : tensor<1x16xi32>
    %rev = arith.subi %b, %ar : tensor<1x16xi32>
    %rr = kiln.reshape %rev : tensor<1x16xi32> -> tensor<16xi32>
    %t = kiln.gather %vx[%rr, %c0] : !kiln.view<2xbf16>, tensor<16xi32> -> tensor<16x64xbf16>
    %f = arith.extf %t : tensor<16x64xbf16> to tensor<16x64xf32>
    %s = arith.addf %a, %f : tensor<16x64xf32>
    scf.yield %s : tensor<16x64xf32>
  }
  %vo = kiln.make_view %out, [%c16, %c64], [%c64, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  kiln.store %acc, %vo[%c0, %c0] : tensor<16x64xf32> -> !kiln.view<2xf32>
  kiln.return
}
