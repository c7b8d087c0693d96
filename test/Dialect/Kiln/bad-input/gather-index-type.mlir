// RUN: not kiln-opt %s 2>&1 | FileCheck %s -DFILE=%s

kiln.func @f(%p: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%n, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %w = kiln.make_view %p, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %idx = kiln.load %w[%c0] : !kiln.view<1xf32> -> tensor<16xf32>
  // CHECK: [[FILE]]:[[@LINE+1]]:8: error: 'kiln.gather' op index tile must have a signless integer element type, got 'f32'
  %g = kiln.gather %v[%idx, %c0] : !kiln.view<2xf32>, tensor<16xf32> -> tensor<16x32xf32>
  kiln.return
}
