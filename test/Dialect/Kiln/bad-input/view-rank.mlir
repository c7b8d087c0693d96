// RUN: not kiln-opt %s 2>&1 | FileCheck %s -DFILE=%s

kiln.func @f(%p: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%n, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  // CHECK: [[FILE]]:[[@LINE+1]]:8: error: 'kiln.load' op expected 2 offsets for a view of rank 2, got 1
  %a = kiln.load %v[%c0] : !kiln.view<2xf32> -> tensor<64xf32>
  kiln.return
}
