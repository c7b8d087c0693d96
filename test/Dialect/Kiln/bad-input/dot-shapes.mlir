// RUN: not kiln-opt %s 2>&1 | FileCheck %s -DFILE=%s

kiln.func @f(%p: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%n, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %a = kiln.load %v[%c0, %c0] : !kiln.view<2xf32> -> tensor<32x16xf32>
  %b = kiln.load %v[%c0, %c0] : !kiln.view<2xf32> -> tensor<32x64xf32>
  %acc = arith.constant dense<0.0> : tensor<32x64xf32>
  // CHECK: [[FILE]]:[[@LINE+1]]:8: error: 'kiln.dot' op contraction dimension of lhs (16) must equal the leading dimension of rhs (32)
  %d = kiln.dot %a, %b, %acc : tensor<32x16xf32>, tensor<32x64xf32> -> tensor<32x64xf32>
  kiln.store %d, %v[%c0, %c0] : tensor<32x64xf32> -> !kiln.view<2xf32>
  kiln.return
}
