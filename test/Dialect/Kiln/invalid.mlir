// RUN: kiln-opt %s --split-input-file --verify-diagnostics

// Every verifier message of the kiln dialect, each with the rule it states.

// expected-error @+1 {{pointer element type must be an integer, index or floating-point type, got 'tensor<4xf32>'}}
func.func private @f(!kiln.ptr<tensor<4xf32>>)

// -----

// expected-error @+1 {{view rank must be between 1 and 8, got 0}}
func.func private @f(!kiln.view<0xf32>)

// -----

// expected-error @+1 {{view element type must be an integer, index or floating-point type, got 'vector<4xf32>'}}
func.func private @f(!kiln.view<1xvector<4xf32>>)

// -----

// expected-error @+1 {{expected a view type as '<RANKxTYPE>', e.g. !kiln.view<2xf32>}}
func.func private @f(!kiln.view<2x3xf32>)

// -----

// expected-error @+1 {{a kernel must not return values (it writes its results to memory), but the type has 1 result(s)}}
kiln.func private @f() -> f32

// -----

// expected-error @+1 {{'grid_rank' must be an integer 1, 2 or 3, got 4}}
kiln.func @f() attributes {grid_rank = 4} {
  kiln.return
}

// -----

// expected-error @+1 {{argument #1 has type 'tensor<4xf32>'; kernel arguments must be !kiln.ptr or integer, index or float scalars}}
kiln.func @f(%a: !kiln.ptr<f32>, %b: tensor<4xf32>) {
  kiln.return
}

// -----

func.func @f() {
  // expected-error @+1 {{expects parent op 'kiln.func'}}
  kiln.return
}

// -----

kiln.func @f() {
  // expected-error @+1 {{grid axis 'y' is out of range for a kernel with grid_rank 1}}
  %0 = kiln.program_id y : i32
  kiln.return
}

// -----

kiln.func @f() attributes {grid_rank = 2} {
  // expected-error @+1 {{grid axis 'z' is out of range for a kernel with grid_rank 2}}
  %0 = kiln.num_programs z : i32
  kiln.return
}

// -----

func.func @f() {
  // expected-error @+1 {{end (0) must be greater than start (4)}}
  %0 = kiln.arange 4, 0 : tensor<4xi32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{result must be a 1-D tile, got rank 2}}
  %0 = kiln.arange 0, 4 : tensor<2x2xi32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{result has 8 elements but the range [0, 4) has 4}}
  %0 = kiln.arange 0, 4 : tensor<8xi32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{the range [0, 256) does not fit the element type 'i8'}}
  %0 = kiln.arange 0, 256 : tensor<256xi8>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{op result #0 must be statically shaped tensor of signless integer values}}
  %0 = kiln.arange 0, 4 : tensor<4xf32>
  return
}

// -----

func.func @f(%x: f32) {
  // expected-error @+1 {{result element type matches the scalar operand}}
  %0 = "kiln.splat"(%x) : (f32) -> tensor<4xf16>
  return
}

// -----

func.func @f(%x: tensor<?xf32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of any type values}}
  %0 = kiln.broadcast %x : tensor<?xf32> -> tensor<4xf32>
  return
}

// -----

func.func @f(%x: tensor<1x4xf32>) {
  // expected-error @+1 {{element type of the result ('f16') must match the source's ('f32')}}
  %0 = kiln.broadcast %x : tensor<1x4xf32> -> tensor<4x4xf16>
  return
}

// -----

func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{rank of the source (1) must equal the rank of the result (2); use kiln.expand_dims to add dimensions}}
  %0 = kiln.broadcast %x : tensor<4xf32> -> tensor<4x4xf32>
  return
}

// -----

func.func @f(%x: tensor<2x4xf32>) {
  // expected-error @+1 {{source dimension 0 (size 2) must be 1 or equal to the result's (8)}}
  %0 = kiln.broadcast %x : tensor<2x4xf32> -> tensor<8x4xf32>
  return
}

// -----

func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{axis 2 is out of range [0, 1]}}
  %0 = kiln.expand_dims %x [2] : tensor<4xf32> -> tensor<4x1xf32>
  return
}

// -----

func.func @f(%x: tensor<4xf32>) {
  // expected-error @+1 {{result type must be the source type with a size-1 dimension at axis 0, i.e. 'tensor<1x4xf32>', got 'tensor<4x1xf32>'}}
  %0 = kiln.expand_dims %x [0] : tensor<4xf32> -> tensor<4x1xf32>
  return
}

// -----

func.func @f(%x: tensor<4x4xf32>) {
  // expected-error @+1 {{element type of the result ('i32') must match the source's ('f32')}}
  %0 = kiln.reshape %x : tensor<4x4xf32> -> tensor<16xi32>
  return
}

// -----

func.func @f(%x: tensor<4x4xf32>) {
  // expected-error @+1 {{source and result must have the same number of elements (16 vs 8)}}
  %0 = kiln.reshape %x : tensor<4x4xf32> -> tensor<8xf32>
  return
}

// -----

func.func @f(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{order has 3 entries but the source has rank 2}}
  %0 = kiln.trans %x [0, 1, 2] : tensor<4x8xf32> -> tensor<8x4xf32>
  return
}

// -----

func.func @f(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{order must be a permutation of [0, 2)}}
  %0 = kiln.trans %x [1, 1] : tensor<4x8xf32> -> tensor<8x4xf32>
  return
}

// -----

func.func @f(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{result type must be the permuted source type 'tensor<8x4xf32>', got 'tensor<4x8xf32>'}}
  %0 = kiln.trans %x [1, 0] : tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @f(%p: !kiln.ptr<f32>, %n: index) {
  // expected-error @+1 {{expected 2 sizes for a view of rank 2, got 1}}
  %v = kiln.make_view %p, [%n], [%n, %n] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  return
}

// -----

func.func @f(%p: !kiln.ptr<f32>, %n: index) {
  // expected-error @+1 {{expected 2 strides for a view of rank 2, got 3}}
  %v = kiln.make_view %p, [%n, %n], [%n, %n, %n] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  return
}

// -----

func.func @f(%p: !kiln.ptr<f32>, %n: index) {
  // expected-error @+1 {{element type of the view ('f16') must match the pointer's ('f32')}}
  %v = kiln.make_view %p, [%n], [%n] : !kiln.ptr<f32> -> !kiln.view<1xf16>
  return
}

// -----

func.func @f(%v: !kiln.view<2xf32>, %i: index) {
  // expected-error @+1 {{expected 2 offsets for a view of rank 2, got 1}}
  %t = kiln.load %v[%i] : !kiln.view<2xf32> -> tensor<4x4xf32>
  return
}

// -----

func.func @f(%v: !kiln.view<2xf32>, %i: index) {
  // expected-error @+1 {{tile rank (1) must equal the view rank (2)}}
  %t = kiln.load %v[%i, %i] : !kiln.view<2xf32> -> tensor<4xf32>
  return
}

// -----

func.func @f(%v: !kiln.view<1xf32>, %i: index) {
  // expected-error @+1 {{tile element type ('f16') must match the view's ('f32')}}
  %t = kiln.load %v[%i] : !kiln.view<1xf32> -> tensor<4xf16>
  return
}

// -----

func.func @f(%v: !kiln.view<1xf32>, %i: index) {
  // expected-error @+1 {{'in_bounds' has 2 entries, expected one per view dimension (1)}}
  %t = kiln.load %v[%i] {in_bounds = array<i1: true, true>} : !kiln.view<1xf32> -> tensor<4xf32>
  return
}

// -----

func.func @f(%v: !kiln.view<1xf32>, %i: index) {
  // expected-error @+1 {{padding type ('i32') must be the tile element type ('f32')}}
  %t = kiln.load %v[%i] padding(0 : i32) : !kiln.view<1xf32> -> tensor<4xf32>
  return
}

// -----

func.func @f(%v: !kiln.view<2xf32>, %t: tensor<4x4xf32>, %i: index) {
  // expected-error @+1 {{expected 2 offsets for a view of rank 2, got 3}}
  kiln.store %t, %v[%i, %i, %i] : tensor<4x4xf32> -> !kiln.view<2xf32>
  return
}

// -----

func.func @f(%v: !kiln.view<1xf16>, %t: tensor<4xf16>, %i: index) {
  // expected-error @+1 {{'kiln.atomic_add' op supports f32, f64, i32 and i64 elements, got 'f16'}}
  kiln.atomic_add %t, %v[%i] : tensor<4xf16> -> !kiln.view<1xf16>
  return
}

// -----

func.func @f(%v: !kiln.view<2xf32>, %idx: tensor<4xf32>, %i: index) {
  // expected-error @+1 {{index tile must have a signless integer element type, got 'f32'}}
  %t = kiln.gather %v[%idx, %i] : !kiln.view<2xf32>, tensor<4xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @f(%v: !kiln.view<2xf32>, %idx: tensor<4x1xi32>, %i: index) {
  // expected-error @+1 {{index tile must be 1-D, got rank 2}}
  %t = kiln.gather %v[%idx, %i] : !kiln.view<2xf32>, tensor<4x1xi32> -> tensor<4x8xf32>
  return
}

// -----

func.func @f(%v: !kiln.view<2xf32>, %idx: tensor<4xi32>) {
  // expected-error @+1 {{expected 1 offsets (one per view dimension after the first), got 0}}
  %t = kiln.gather %v[%idx] : !kiln.view<2xf32>, tensor<4xi32> -> tensor<4x8xf32>
  return
}

// -----

func.func @f(%v: !kiln.view<2xf32>, %idx: tensor<4xi32>, %i: index) {
  // expected-error @+1 {{tile rank (3) must equal the view rank (2)}}
  %t = kiln.gather %v[%idx, %i] : !kiln.view<2xf32>, tensor<4xi32> -> tensor<4x8x2xf32>
  return
}

// -----

func.func @f(%v: !kiln.view<2xf32>, %idx: tensor<4xi32>, %i: index) {
  // expected-error @+1 {{tile's first dimension (8) must equal the number of indices (4)}}
  %t = kiln.gather %v[%idx, %i] : !kiln.view<2xf32>, tensor<4xi32> -> tensor<8x8xf32>
  return
}

// -----

func.func @f(%v: !kiln.view<2xf32>, %idx: tensor<4xi32>, %i: index) {
  // expected-error @+1 {{tile element type ('f16') must match the view's ('f32')}}
  %t = kiln.gather %v[%idx, %i] : !kiln.view<2xf32>, tensor<4xi32> -> tensor<4x8xf16>
  return
}

// -----

func.func @f(%v: !kiln.view<1xf32>, %idx: tensor<4xi32>) {
  // expected-error @+1 {{padding type ('f16') must be the tile element type ('f32')}}
  %t = kiln.gather %v[%idx] padding(0.0 : f16) : !kiln.view<1xf32>, tensor<4xi32> -> tensor<4xf32>
  return
}

// -----

func.func @f(%v: !kiln.view<2xf32>, %t: tensor<4x8xf32>, %idx: tensor<2xi64>, %i: index) {
  // expected-error @+1 {{tile's first dimension (4) must equal the number of indices (2)}}
  kiln.scatter %t, %v[%idx, %i] : tensor<4x8xf32>, tensor<2xi64> -> !kiln.view<2xf32>
  return
}

// -----

func.func @f(%a: tensor<4xf32>, %b: tensor<4x4xf32>, %c: tensor<4x4xf32>) {
  // expected-error @+1 {{lhs, rhs and accumulator must be 2-D tiles, got ranks 1, 2 and 2}}
  %d = kiln.dot %a, %b, %c : tensor<4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  return
}

// -----

func.func @f(%a: tensor<4x8xf32>, %b: tensor<4x4xf32>, %c: tensor<4x4xf32>) {
  // expected-error @+1 {{contraction dimension of lhs (8) must equal the leading dimension of rhs (4)}}
  %d = kiln.dot %a, %b, %c : tensor<4x8xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  return
}

// -----

func.func @f(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %c: tensor<4x8xf32>) {
  // expected-error @+1 {{accumulator shape must be 4x16 (rows of lhs x columns of rhs), got 4x8}}
  %d = kiln.dot %a, %b, %c : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @f(%a: tensor<4x8xbf16>, %b: tensor<8x4xbf16>, %c: tensor<4x4xbf16>) {
  // expected-error @+1 {{unsupported element types 'bf16' x 'bf16' -> 'bf16'; supported: f32 x f32 -> f32, f64 x f64 -> f64, f16 x f16 -> f16|f32, bf16 x bf16 -> f32, i8 x i8 -> i32}}
  %d = kiln.dot %a, %b, %c : tensor<4x8xbf16>, tensor<8x4xbf16> -> tensor<4x4xbf16>
  return
}

// -----

func.func @f(%a: tensor<4x8xi8>, %b: tensor<8x4xi8>, %c: tensor<4x4xf32>) {
  // expected-error @+1 {{lhs_fp8 and rhs_fp8 go together (a lone fp8 operand is decoded before the dot)}}
  %d = kiln.dot %a, %b, %c {lhs_fp8 = "e4m3"} : tensor<4x8xi8>, tensor<8x4xi8> -> tensor<4x4xf32>
  return
}

// -----

func.func @f(%a: tensor<4x8xi8>, %b: tensor<8x4xi8>, %c: tensor<4x4xf32>) {
  // expected-error @+1 {{fp8 formats are "e4m3" and "e5m2", got "e3m4"}}
  %d = kiln.dot %a, %b, %c {lhs_fp8 = "e4m3", rhs_fp8 = "e3m4"} : tensor<4x8xi8>, tensor<8x4xi8> -> tensor<4x4xf32>
  return
}

// -----

func.func @f(%a: tensor<4x8xi8>, %b: tensor<8x4xi8>, %c: tensor<4x4xi32>) {
  // expected-error @+1 {{an fp8 dot takes i8 operands (the fp8 bits) into an f32 accumulator, got 'i8' x 'i8' -> 'i32'}}
  %d = kiln.dot %a, %b, %c {lhs_fp8 = "e4m3", rhs_fp8 = "e5m2"} : tensor<4x8xi8>, tensor<8x4xi8> -> tensor<4x4xi32>
  return
}

// -----

func.func @f(%a: tensor<4x8xf32>, %b: tensor<8x4xf32>, %c: tensor<4x4xf32>) {
  // expected-error @+1 {{all of {acc, result} have same type}}
  %d = "kiln.dot"(%a, %b, %c) : (tensor<4x8xf32>, tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf16>
  return
}

// -----

func.func @f(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{axis 2 is out of range for a tile of rank 2}}
  %r = kiln.reduce sum %x [2] : tensor<4x8xf32> -> tensor<4xf32>
  return
}

// -----

func.func @f(%x: tensor<4x!kiln.ptr<f32>>) {
  // expected-error @+1 {{source element type must be an integer or float, got '!kiln.ptr<f32>'}}
  %r = kiln.reduce sum %x [0] : tensor<4x!kiln.ptr<f32>> -> !kiln.ptr<f32>
  return
}

// -----

func.func @f(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{result type must be 'tensor<4xf32>' (the source without dimension 1), got 'tensor<8xf32>'}}
  %r = kiln.reduce max %x [1] : tensor<4x8xf32> -> tensor<8xf32>
  return
}

// -----

func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{result type must be 'i32' (the source without dimension 0, as i32 positions), got 'f32'}}
  %r = kiln.reduce argmax %x [0] : tensor<8xf32> -> f32
  return
}

// -----

func.func @f(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{axis 2 is out of range for a tile of rank 2}}
  %r = kiln.scan sum %x [2] : tensor<4x8xf32>
  return
}

// -----

func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{scans combine with sum, max, min or prod, not argmax}}
  %r = kiln.scan argmax %x [0] : tensor<8xf32>
  return
}

// -----

func.func @f(%x: tensor<4x!kiln.ptr<f32>>) {
  // expected-error @+1 {{source element type must be an integer or float, got '!kiln.ptr<f32>'}}
  %r = kiln.scan sum %x [0] : tensor<4x!kiln.ptr<f32>>
  return
}

// -----

func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{all of {src, result} have same type}}
  %r = "kiln.scan"(%x) {kind = 0 : i32, axis = 0 : i32} : (tensor<8xf32>) -> tensor<8xf16>
  return
}

// -----

func.func @f(%v: !kiln.view<1xbf16>, %t: tensor<4xbf16>, %i: tensor<4xi32>) {
  // expected-error @+1 {{'kiln.scatter_add' op supports f32, f64, i32 and i64 elements, got 'bf16'}}
  %o = kiln.scatter_add %t, %v[%i] : tensor<4xbf16>, tensor<4xi32> -> !kiln.view<1xbf16>
  return
}

// -----

func.func @f(%v: !kiln.view<2xf32>, %t: tensor<4x8xf32>, %i: tensor<4xi32>) {
  // expected-error @+1 {{expected 1 offsets (one per view dimension after the first), got 0}}
  %o = kiln.scatter_add %t, %v[%i] : tensor<4x8xf32>, tensor<4xi32> -> !kiln.view<2xf32>
  return
}

// -----

func.func @f(%v: !kiln.view<1xf32>, %t: tensor<4xf32>, %i: tensor<5xi32>) {
  // expected-error @+1 {{tile's first dimension (4) must equal the number of indices (5)}}
  %o = kiln.scatter_add %t, %v[%i] : tensor<4xf32>, tensor<5xi32> -> !kiln.view<1xf32>
  return
}

// -----

func.func @f(%v: !kiln.view<1xf16>, %t: tensor<4xf16>, %i: index) {
  // expected-error @+1 {{'kiln.atomic_cas' op supports f32, f64, i32 and i64 elements, got 'f16'}}
  %o = kiln.atomic_cas %t, %t, %v[%i] : tensor<4xf16> -> !kiln.view<1xf16>
  return
}

// -----

func.func @f(%v: !kiln.view<1xf32>, %t: tensor<4xf32>, %i: index) {
  // expected-error @+1 {{'kiln.atomic_rmw' op 'and' supports i32 and i64 elements, got 'f32'}}
  %o = kiln.atomic_rmw and %t, %v[%i] : tensor<4xf32> -> !kiln.view<1xf32>
  return
}

// -----

func.func @f(%v: !kiln.view<1xf16>, %t: tensor<4xf16>, %i: tensor<4xi32>) {
  // expected-error @+1 {{'kiln.scatter_rmw' op supports f32, f64, i32 and i64 elements, got 'f16'}}
  %o = kiln.scatter_rmw max %t, %v[%i] : tensor<4xf16>, tensor<4xi32> -> !kiln.view<1xf16>
  return
}

// -----

func.func @f(%i: index) {
  // expected-error @+1 {{'kiln.print' op prints integers and floats (scalars or tiles of them); operand 0 is 'index'}}
  kiln.print "i" %i : index
  return
}

// -----

func.func @f(%t: tensor<4xi32>) {
  // expected-error @+1 {{'kiln.assert' op operand #0 must be statically shaped tensor of 1-bit signless integer values or 1-bit signless integer, but got 'tensor<4xi32>'}}
  kiln.assert %t, "nonzero" : tensor<4xi32>
  return
}

// -----

func.func @f(%t: tensor<8x4xf32>, %i: tensor<8x8xi32>) {
  // expected-error @+1 {{'kiln.gather_elements' op indices and source differ in dimension 1 (8 vs 4); only dimension 0 (the axis) may}}
  %r = kiln.gather_elements %t, %i [0] : tensor<8x4xf32>, tensor<8x8xi32> -> tensor<8x8xf32>
  return
}

// -----

func.func @f(%t: tensor<16xf32>, %i: tensor<64xi32>) {
  // expected-error @+1 {{'kiln.gather_elements' op result type must be 'tensor<64xf32>' (the indices' shape, the source's elements), got 'tensor<64xf16>'}}
  %r = kiln.gather_elements %t, %i [0] : tensor<16xf32>, tensor<64xi32> -> tensor<64xf16>
  return
}
