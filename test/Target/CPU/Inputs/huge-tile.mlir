// A tile of 2^62 elements: its byte count overflowed the stack-size check,
// and the kernel compiled and crashed when launched.
kiln.func @huge(%x: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %t = kiln.load %v[%c0] : !kiln.view<1xf32> -> tensor<4611686018427388928xf32>
  kiln.store %t, %v[%c0] : tensor<4611686018427388928xf32> -> !kiln.view<1xf32>
  kiln.return
}
