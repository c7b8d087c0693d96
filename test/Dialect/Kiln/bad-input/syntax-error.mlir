// A malformed file gives a located diagnostic and a non-zero exit, never a crash.
// RUN: not kiln-opt %s 2>&1 | FileCheck %s -DFILE=%s

kiln.func @f(%p: !kiln.ptr<f32>) {
  %c0 = arith.constant 0 : index
  // CHECK: [[FILE]]:[[@LINE+1]]:38: error: expected ']'
  %v = kiln.make_view %p, [%c0], [%c0 : !kiln.ptr<f32> -> !kiln.view<1xf32>
  kiln.return
}
