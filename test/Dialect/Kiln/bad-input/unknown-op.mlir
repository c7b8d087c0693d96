// RUN: not kiln-opt %s 2>&1 | FileCheck %s -DFILE=%s

kiln.func @f() {
  // CHECK: [[FILE]]:[[@LINE+1]]:3: error: custom op 'kiln.frobnicate' is unknown
  kiln.frobnicate
  kiln.return
}
