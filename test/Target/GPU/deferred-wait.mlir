// A prologue load's cp.async group is retired by the next one's wait: block-
// sparse attention copies its query tile, then both block lists' counts and
// first indices (one element each: the loops' first key blocks are read
// up front, not after each loop's count), and waits once for all five (the
// partial list's two values are taken out at once, the full list's where
// its loop starts; before, each had its own wait_group 0 and barrier:
// memory round trips in a row at every program's start). Nothing between them touches the
// query tile's bytes or each other's; the arange tile staged in shared
// memory after them keeps its own barriers.
// On sm_90a the query tile is loaded straight into wgmma's core matrices,
// whose writes each thread fences for the async proxy: the fence moves to
// the wait that retires the group (CORE).
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 128 --block 128 --num-warps 8 --mask sliding_window --window 1024 --target sm_90a --emit ptx | FileCheck %s --check-prefixes=CHECK,CORE
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --target sm_80 --emit ptx | FileCheck %s
// CHECK: cp.async.cg.shared.global
// CHECK: cp.async.commit_group;
// CHECK-NOT: cp.async.wait_group
// CHECK: cp.async.ca.shared.global [__kiln_smem{{[+0-9]*}}], [%rd{{[0-9]+}}], 4;
// CHECK-NOT: cp.async.wait_group
// CHECK: cp.async.ca.shared.global [__kiln_smem{{[+0-9]*}}], [%rd{{[0-9]+}}], 4;
// CHECK-NOT: cp.async.wait_group
// CHECK: cp.async.ca.shared.global [__kiln_smem{{[+0-9]*}}], [%rd{{[0-9]+}}], 4;
// CHECK-NOT: cp.async.wait_group
// CHECK: cp.async.ca.shared.global [__kiln_smem{{[+0-9]*}}], [%rd{{[0-9]+}}], 4;
// CHECK-NOT: cp.async.wait_group
// CHECK: cp.async.commit_group;
// CHECK-NEXT: cp.async.wait_group 0;
// CORE-NEXT: fence.proxy.async.shared::cta;
// CHECK-NEXT: bar.sync 0;
// CHECK-NEXT: ld.shared
// CHECK-NOT: bar.sync
// CHECK: ld.shared
