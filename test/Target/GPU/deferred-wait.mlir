// A prologue load's cp.async group is retired by the next one's wait: block-
// sparse attention copies both block lists' counts and first indices (one
// element each: the loops' first key blocks are read up front, not after
// each loop's count), then its query tile, and waits once for the counts
// (the partial list's two values are taken out at once, the full list's
// where its loop starts; before, each had its own wait_group 0 and barrier:
// memory round trips in a row at every program's start). Nothing between
// them touches the query tile's bytes or each other's.
// The query tile is the last group, and that wait leaves it in flight
// (`wait_group 1`, deferLastAsyncCopyGroup): the counts are taken out, the
// loop's mbarriers set up and its first keys and values issued (TMA boxes
// on sm_90a, cp.async on sm_80) before a second wait retires q (every group
// but the fill's last one) ahead of the loop, whose first dot reads it. The
// two loads' latencies overlap instead of adding up.
// The query and key positions (arange(BM) + q0, arange(BN)) are not staged
// in shared memory before the loop: the loop's mask computes them from each
// score's coordinates (canDefer). On sm_90a no st.shared comes before the
// mbarriers' set-up (on sm_80 the fill's index copy has a plain path).
// On sm_90a the query tile is loaded straight into wgmma's core matrices,
// whose writes each thread fences for the async proxy: the fence goes with
// the waits (CORE).
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 128 --block 128 --num-warps 8 --mask sliding_window --window 1024 --target sm_90a --emit ptx | FileCheck %s --check-prefixes=CHECK,CORE
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --target sm_80 --emit ptx | FileCheck %s --check-prefixes=CHECK,MMA
// With `profile`, column 1's reading (the clock after the counts' wait) is
// held in shared memory, not stored to global memory before the fill, which
// would end the overlap: the profiled kernel keeps both waits (PROF).
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 128 --block 128 --num-warps 8 --mask sliding_window --window 1024 --profile 1 --target sm_90a --emit ptx | FileCheck %s --check-prefix=PROF
// PROF: cp.async.wait_group 1;
// PROF: %clock64
// PROF-NOT: st.global
// PROF: cp.async.bulk.tensor
// PROF-NOT: st.global
// PROF: cp.async.wait_group 1;
// CHECK: cp.async.ca.shared.global [__kiln_smem{{[+0-9]*}}], [%rd{{[0-9]+}}], 4;
// CHECK-NOT: cp.async.wait_group
// CHECK: cp.async.ca.shared.global [__kiln_smem{{[+0-9]*}}], [%rd{{[0-9]+}}], 4;
// CHECK-NOT: cp.async.wait_group
// CHECK: cp.async.ca.shared.global [__kiln_smem{{[+0-9]*}}], [%rd{{[0-9]+}}], 4;
// CHECK-NOT: cp.async.wait_group
// CHECK: cp.async.ca.shared.global [__kiln_smem{{[+0-9]*}}], [%rd{{[0-9]+}}], 4;
// CHECK-NOT: cp.async.wait_group
// CHECK: cp.async.cg.shared.global
// CHECK-NOT: cp.async.wait_group
// CHECK: cp.async.commit_group;
// CHECK-NEXT: cp.async.wait_group 1;
// CORE-NEXT: fence.proxy.async.shared::cta;
// CHECK-NEXT: bar.sync 0;
// CHECK-NEXT: ld.shared
// CHECK-NOT: bar.sync
// CHECK: ld.shared
// CHECK-NOT: cp.async.wait_group
// CORE-NOT: st.shared
// CORE: mbarrier.init
// CORE-NOT: cp.async.wait_group
// CORE: cp.async.bulk.tensor
// MMA: cp.async.cg.shared.global
// CHECK-NOT: cp.async.wait_group
// CHECK: cp.async.commit_group;
// CHECK-NEXT: cp.async.wait_group 1;
// CORE-NEXT: fence.proxy.async.shared::cta;
// CHECK-NEXT: bar.sync 0;
// CHECK-NOT: cp.async.wait_group
// CORE: wgmma.mma_async
// MMA: mma.sync
