kiln.func @k(%p: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %t = tensor.empty() : tensor<4xf32>
  kiln.store %t, %v[%c0] : tensor<4xf32> -> !kiln.view<1xf32>
  kiln.return
}
