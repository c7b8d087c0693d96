// Prologue loads whose bytes nothing touches in between share one wait
// (docs/gpu.md, "Prologue loads share a wait"). Here `a` is loaded, a
// reduction with barriers of its own runs, `b` is loaded, `a` is reduced
// (read), `d` is loaded. a's wait moves to b's; b's wait stays, because a,
// still in flight until that wait, is read before d's: a group deferred
// past a barrier keeps counting at the next wait (without that, b's wait
// went too, and the reduction of `a` read bytes still in flight). That
// wait retires every group but b's, the last one (`wait_group 1`,
// deferLastAsyncCopyGroup): b, untouched until after d's wait, lands
// while `a` is reduced and d is issued, and d's `wait_group 0` retires it.
// test_gpu_compile.py runs this kernel on the emulator, which refuses any
// access to the bytes of a cp.async in flight.
// RUN: kilnc %s --target sm_80 --emit ptx | FileCheck %s
// RUN: kilnc %s --target sm_90a --emit ptx | FileCheck %s
// CHECK: cp.async.commit_group;
// CHECK-NOT: cp.async.wait_group
// CHECK: shfl.sync.bfly
// CHECK-NOT: cp.async.wait_group
// CHECK: cp.async.commit_group;
// CHECK-NEXT: cp.async.wait_group 1;
// CHECK-NEXT: bar.sync 0;
// CHECK: shfl.sync.bfly
// CHECK-NOT: cp.async.wait_group
// CHECK: cp.async.commit_group;
// CHECK-NEXT: cp.async.wait_group 0;
// CHECK-NEXT: bar.sync 0;
kiln.func @chain(%a: !kiln.ptr<f32> {kiln.name = "a"}, %b: !kiln.ptr<f32> {kiln.name = "b"},
                 %d: !kiln.ptr<f32> {kiln.name = "d"}, %out: !kiln.ptr<f32> {kiln.name = "out"},
                 %copy: !kiln.ptr<f32> {kiln.name = "copy"}, %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %va = kiln.make_view %a, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vb = kiln.make_view %b, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vd = kiln.make_view %d, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vo = kiln.make_view %out, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %ta = kiln.load %va[%c0] : !kiln.view<1xf32> -> tensor<256xf32>
  %lanes = kiln.arange 0, 256 : tensor<256xi32>
  %lanesf = arith.sitofp %lanes : tensor<256xi32> to tensor<256xf32>
  %l2 = kiln.reshape %lanesf : tensor<256xf32> -> tensor<16x16xf32>
  %rows = kiln.reduce sum %l2 [1] : tensor<16x16xf32> -> tensor<16xf32>
  %rv = kiln.make_view %copy, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %c256 = arith.constant 256 : index
  %tb = kiln.load %vb[%c0] : !kiln.view<1xf32> -> tensor<256xf32>
  %one = arith.constant dense<1.0> : tensor<256xf32>
  %tc = arith.addf %ta, %one : tensor<256xf32>
  %a2 = kiln.reshape %ta : tensor<256xf32> -> tensor<16x16xf32>
  %amax = kiln.reduce max %a2 [1] : tensor<16x16xf32> -> tensor<16xf32>
  %td = kiln.load %vd[%c0] : !kiln.view<1xf32> -> tensor<256xf32>
  %lf = arith.sitofp %lanes : tensor<256xi32> to tensor<256xf32>
  %s1 = arith.addf %tc, %tb : tensor<256xf32>
  %s2 = arith.addf %s1, %td : tensor<256xf32>
  %s3 = arith.addf %s2, %lf : tensor<256xf32>
  kiln.store %s3, %vo[%c0] : tensor<256xf32> -> !kiln.view<1xf32>
  kiln.store %rows, %rv[%c256] : tensor<16xf32> -> !kiln.view<1xf32>
  %c272 = arith.constant 272 : index
  kiln.store %amax, %rv[%c272] : tensor<16xf32> -> !kiln.view<1xf32>
  kiln.return
}
