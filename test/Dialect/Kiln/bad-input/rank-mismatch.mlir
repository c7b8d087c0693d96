// RUN: not kiln-opt %s 2>&1 | FileCheck %s -DFILE=%s

kiln.func @f(%p: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %a = kiln.load %v[%c0] : !kiln.view<1xf32> -> tensor<64xf32>
  // CHECK: [[FILE]]:[[@LINE+1]]:8: error: 'kiln.broadcast' op rank of the source (1) must equal the rank of the result (2)
  %b = kiln.broadcast %a : tensor<64xf32> -> tensor<16x64xf32>
  kiln.return
}
