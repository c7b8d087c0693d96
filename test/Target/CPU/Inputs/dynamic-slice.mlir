// A tile slice at a run-time offset (kilnc-errors.mlir checks the message).
kiln.func @k(%x: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %v = kiln.make_view %x, [%c16], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %t = kiln.load %v[%c0] : !kiln.view<1xf32> -> tensor<16xf32>
  %s = tensor.extract_slice %t[%n] [4] [1] : tensor<16xf32> to tensor<4xf32>
  kiln.store %s, %v[%c0] : tensor<4xf32> -> !kiln.view<1xf32>
  kiln.return
}
