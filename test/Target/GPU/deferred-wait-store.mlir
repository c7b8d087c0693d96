// A load's copies still read global memory until their wait: a program that
// loads x and then overwrites x must wait first. Here x's group is the last
// before its wait, and y's load (an async copy: latency to overlap) comes
// after the store of zeros to x. deferLastAsyncCopyGroup stops at the store
// (a write of global memory) and leaves x's wait_group 0 where it is. Its
// first version only stopped at accesses of x's shared bytes: it waited with
// `wait_group 1` and let the zeros reach x before x's copies had read it (a
// review found it). test_gpu_compile.py runs this kernel on the emulator,
// whose copies read their source when retired: out must be x + y.
// RUN: kilnc %s --target sm_80 --emit ptx | FileCheck %s
// RUN: kilnc %s --target sm_90a --emit ptx | FileCheck %s
// CHECK: cp.async.commit_group;
// CHECK-NEXT: cp.async.wait_group 0;
// CHECK-NEXT: bar.sync 0;
// CHECK-NOT: cp.async.wait_group
// CHECK: st.global
kiln.func @war(%x: !kiln.ptr<f32> {kiln.name = "x"}, %y: !kiln.ptr<f32> {kiln.name = "y"},
               %out: !kiln.ptr<f32> {kiln.name = "out"}, %n: index {kiln.name = "n"}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %vx = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vy = kiln.make_view %y, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %vo = kiln.make_view %out, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %tx = kiln.load %vx[%c0] : !kiln.view<1xf32> -> tensor<256xf32>
  %z = arith.constant dense<0.0> : tensor<256xf32>
  kiln.store %z, %vx[%c0] : tensor<256xf32> -> !kiln.view<1xf32>
  %ty = kiln.load %vy[%c0] : !kiln.view<1xf32> -> tensor<256xf32>
  %s = arith.addf %tx, %ty : tensor<256xf32>
  kiln.store %s, %vo[%c0] : tensor<256xf32> -> !kiln.view<1xf32>
  kiln.return
}
