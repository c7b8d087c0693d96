// The example GEMM on sm_90a at 3 stages: its loop keeps each iteration's
// wgmma groups in flight (wait_group 1 after the dot's commit, nothing reads
// the accumulators before the next iteration's dot), and the last iteration
// retires them inside the loop, under an if, before the loop yields the
// accumulators (a wait after the loop made ptxas serialize every wgmma). The
// loads run one iteration ahead (S - 2): the loop waits with
// cp.async.wait_group 0. At 2 stages the dot waits at once (wait_group 0).
// RUN: kiln-opt %S/../../../examples/matmul_bf16.mlir '--convert-kiln-to-gpu=chip=sm_90a num-stages=3' | FileCheck %s
// RUN: kiln-opt %S/../../../examples/matmul_bf16.mlir '--convert-kiln-to-gpu=chip=sm_90a num-stages=2' | FileCheck %s --check-prefix=S2
// CHECK: scf.for {{.*}} iter_args(
// CHECK: nvvm.cp.async.wait.group 0
// CHECK: scf.for
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: nvvm.wgmma.mma_async
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 1
// CHECK: scf.yield
// CHECK-NEXT: }
// CHECK-NEXT: %[[NEXT:.*]] = arith.addi
// CHECK-NEXT: %[[LAST:.*]] = arith.cmpi sge, %[[NEXT]]
// CHECK-NEXT: scf.if %[[LAST]] {
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK-NEXT: }
// CHECK-NEXT: scf.yield
// CHECK-NEXT: }
// CHECK-NEXT: gpu.barrier
// CHECK-NOT: nvvm.wgmma.wait.group
// S2: nvvm.wgmma.commit.group.sync.aligned
// S2-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// S2-NOT: nvvm.wgmma.wait.group.sync.aligned 1
