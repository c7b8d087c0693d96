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

// -----

// Values wider than 64 bits: refused (LLVM's NVPTX back end aborted on f80
// and f128 arithmetic in instruction selection).
kiln.func @k(%p: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %ni = arith.index_cast %n : index to i64
  // expected-error @+1 {{80-bit values are not supported on a GPU (64 bits at most)}}
  %a = arith.sitofp %ni : i64 to f80
  %b = arith.divf %a, %a : f80
  %c = arith.truncf %b : f80 to f32
  %t = kiln.splat %c : tensor<8xf32>
  kiln.store %t, %v[%c0] : tensor<8xf32> -> !kiln.view<1xf32>
  kiln.return
}

// -----

kiln.func @k(%p: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  // expected-error @+1 {{tiles of 128-bit elements are not supported on a GPU (64 bits at most)}}
  %t = arith.constant dense<1> : tensor<4x8xi128>
  %f = arith.sitofp %t : tensor<4x8xi128> to tensor<4x8xf32>
  %r = kiln.reshape %f : tensor<4x8xf32> -> tensor<32xf32>
  kiln.store %r, %v[%c0] : tensor<32xf32> -> !kiln.view<1xf32>
  kiln.return
}
