// RUN: kiln-opt %s --convert-kiln-to-cpu --split-input-file --verify-diagnostics

kiln.func @k(%p: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  // expected-error @+1 {{kiln CPU lowering: only splat tile constants are supported}}
  %t = arith.constant dense<[1.0, 2.0]> : tensor<2xf32>
  kiln.store %t, %v[%c0] : tensor<2xf32> -> !kiln.view<1xf32>
  kiln.return
}

// -----

kiln.func @k(%p: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  // expected-error @+1 {{kiln CPU lowering: 'tensor.empty' on tiles is not supported by the CPU target}}
  %t = tensor.empty() : tensor<4xf32>
  kiln.store %t, %v[%c0] : tensor<4xf32> -> !kiln.view<1xf32>
  kiln.return
}

// -----

// Tile buffers live on the stack of the thread running a program: a kernel
// whose tiles need more than 4 MiB is refused at compile time, not left to
// overflow the stack at launch.
// expected-error @+1 {{kernel 'big' needs 8192 KiB of tile buffers per program; the CPU target allows 4096 KiB}}
kiln.func @big(%p: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %t = kiln.load %v[%c0] : !kiln.view<1xf32> -> tensor<2097152xf32>
  kiln.store %t, %v[%c0] : tensor<2097152xf32> -> !kiln.view<1xf32>
  kiln.return
}

// -----

// A rank-0 tile: refused with a located error (the lowering's loop nests
// walk a last dimension; it crashed before).
kiln.func @rank0(%n: index, %steps: index, %x: f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{rank-0 tiles ('tensor<f32>') are not supported; use a scalar or a 1-element tile}}
  %zero = arith.constant dense<0.0> : tensor<f32>
  %r = scf.for %s = %c0 to %steps step %c1 iter_args(%acc = %zero) -> (tensor<f32>) {
    %t = kiln.splat %x : tensor<f32>
    %a = arith.addf %acc, %t : tensor<f32>
    scf.yield %a : tensor<f32>
  }
  kiln.return
}

// -----

// Tiles of index (no storage size): refused with a located error (the
// lowering crashed on them).
kiln.func @index_tiles(%x: !kiln.ptr<index>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<index> -> !kiln.view<1xindex>
  // expected-error @+1 {{tiles of index are not supported (use i32 or i64)}}
  %a = kiln.load %v[%c0] : !kiln.view<1xindex> -> tensor<4xindex>
  kiln.store %a, %v[%c0] : tensor<4xindex> -> !kiln.view<1xindex>
  kiln.return
}

// -----

// A constant index outside the tile: refused (it read another buffer's bytes).
kiln.func @extract_outside(%x: !kiln.ptr<f32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %x, [%n, %n], [%n, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %a = kiln.load %v[%c0, %c0] : !kiln.view<2xf32> -> tensor<4x8xf32>
  %c8 = arith.constant 8 : index
  // expected-error @+1 {{kiln CPU lowering: index 8 is outside dimension 1 of the tile (size 8)}}
  %e = tensor.extract %a[%c0, %c8] : tensor<4x8xf32>
  %s = kiln.splat %e : tensor<4x8xf32>
  kiln.store %s, %v[%c0, %c0] : tensor<4x8xf32> -> !kiln.view<2xf32>
  kiln.return
}
