// RUN: not kiln-opt %s 2>&1 | FileCheck %s -DFILE=%s
// CHECK: [[FILE]]:{{[0-9]+}}:{{[0-9]+}}: error:

kiln.func @f(%p: !kiln.ptr<f32>) {
  %c0 = arith.constant 0 : index
