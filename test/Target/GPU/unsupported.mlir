// The GPU lowering names itself and its target in diagnostics (it shares the
// buffer-per-tile lowering with the CPU target).
// RUN: kiln-opt %s --convert-kiln-to-gpu --split-input-file --verify-diagnostics

kiln.func @k(%p: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  // expected-error @+1 {{kiln GPU lowering: 'tensor.empty' on tiles is not supported by the GPU target}}
  %t = tensor.empty() : tensor<4xf32>
  kiln.store %t, %v[%c0] : tensor<4xf32> -> !kiln.view<1xf32>
  kiln.return
}

// -----

kiln.func @k(%p: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  // expected-error @+1 {{kiln GPU lowering: only splat tile constants are supported}}
  %t = arith.constant dense<[1.0, 2.0]> : tensor<2xf32>
  kiln.store %t, %v[%c0] : tensor<2xf32> -> !kiln.view<1xf32>
  kiln.return
}
