// Every example kernel parses, verifies and canonicalizes.
// RUN: kiln-opt %kiln_src/examples/vector_add.mlir --canonicalize | FileCheck %s --check-prefix=ADD
// RUN: kiln-opt %kiln_src/examples/softmax.mlir --canonicalize | FileCheck %s --check-prefix=SOFTMAX
// RUN: kiln-opt %kiln_src/examples/matmul.mlir --canonicalize | FileCheck %s --check-prefix=MATMUL
// RUN: kiln-opt %kiln_src/examples/block_sparse_attention.mlir --canonicalize | FileCheck %s --check-prefix=BSA

// ADD-LABEL: kiln.func @vector_add
// ADD: arith.addf {{.*}} : tensor<1024xf32>
// SOFTMAX-LABEL: kiln.func @softmax
// SOFTMAX: kiln.reduce max
// SOFTMAX: kiln.reduce sum
// MATMUL-LABEL: kiln.func @matmul
// MATMUL: scf.for
// MATMUL: kiln.dot
// BSA-LABEL: kiln.func @block_sparse_attention
// BSA-COUNT-2: kiln.dot
