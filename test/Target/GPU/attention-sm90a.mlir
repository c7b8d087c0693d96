// The library's block-sparse attention (bf16, head dim 64) on sm_90a: the key
// and value blocks, whose offsets come from the block index lists, are
// pipelined (the index read again from global memory at issue) and loaded by
// TMA into 128B-swizzled stages, with 3-d maps (64 columns x rows x
// batch-heads, swizzle mode 3); with --no-swizzle, 4-d maps (8 columns x rows
// x column chunks x batch-heads: the wgmma core-matrix layout). The scores
// stay in wgmma fragments, their row maximum and sum reduced with quad
// shuffles (bfly 1 and 2). The output tile is stored by one TMA store. With
// one stage nothing is pipelined, so nothing goes by TMA (a kernel builds
// a map for a store only when it builds maps for its loads).
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --target sm_90a --emit ptx | FileCheck %s
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --target sm_90a --emit ptx | FileCheck %s --check-prefix=STORE
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 128 --block 128 --num-warps 8 --target sm_90a --emit ptx | FileCheck %s --check-prefix=STOREW
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --target sm_90a --no-swizzle --device-maps --emit ptx | FileCheck %s --check-prefix=CORE
// CORE: tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [{{.*}}], 0;
// CORE: cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --target sm_90a --num-stages 1 --emit ptx | FileCheck %s --check-prefix=S1
// Shared memory (160 KiB at head dim 128, block 128, 8 warps, 2 stages, on
// sm_90) keeps one block per SM: ptxas may then use every register instead
// of aiming at more blocks (and spilling). At 80 KiB and 4 warps two fit,
// each with 255 registers per thread: the hint is 2. Where the hint would
// cap registers (2 blocks of 8 warps at 96 KiB, 1 stage) there is none.
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 128 --target sm_90 --emit ptx | FileCheck %s --check-prefix=OCC3
// OCC3: .maxntid 128, 1, 1
// OCC3-NEXT: .minnctapersm 2
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 128 --block 128 --num-warps 8 --target sm_90 --emit ptx | FileCheck %s --check-prefix=OCC
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 128 --block 128 --num-warps 8 --target sm_90 --num-stages 1 --emit ptx | FileCheck %s --check-prefix=OCC2
// OCC: .maxntid 256, 1, 1
// OCC-NEXT: .minnctapersm 1
// OCC2: .maxntid 256, 1, 1
// OCC2-NOT: .minnctapersm
// The scores start from +0: no moves of zeros into 32 accumulator registers;
// the first k step's wgmma runs with scale-d 0 (D = A B), the others with 1.
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --target sm_90a --emit ptx | FileCheck %s --check-prefix=ZERO
// ZERO: setp.ne.b32 p, 0, 0;
// ZERO-NEXT: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// ZERO: setp.ne.b32 p, 1, 0;
// ZERO-NEXT: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// Overlap (GPUOverlap.cpp): the loop over full key blocks computes the next
// block's scores while this one's softmax runs. Its first wgmma group (the
// next scores) is committed without a wait; the p v group's wait retires
// both. The partial-block loop and the scores before the full loop wait at
// once. So five groups and four waits (the order of the blocks in the PTX
// is LLVM's; test_gpu_compile.py's test_overlapped_attention_is_not_serialized
// checks that the unwaited group is committed before the exponentials).
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --overlap 1 --target sm_90a --emit ptx | FileCheck %s --check-prefix=OVL
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --overlap 1 --target sm_90a --emit ptx | FileCheck %s --check-prefix=OVLW
// OVL-COUNT-5: wgmma.commit_group.sync.aligned;
// OVL-NOT: wgmma.commit_group
// OVLW-COUNT-4: wgmma.wait_group.sync.aligned 0;
// OVLW-NOT: wgmma.wait_group
// kilnc --no-overlap (KILN_OVERLAP=0) drops the mark: every group is waited for
// at once, and there is no dot before the full-block loop. So does the
// operator's default (overlap 0).
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --overlap 1 --target sm_90a --no-overlap --emit ptx | FileCheck %s --check-prefix=NOOVL
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --target sm_90a --emit ptx | FileCheck %s --check-prefix=NOOVL
// NOOVL-COUNT-4: wgmma.wait_group.sync.aligned 0;
// NOOVL-NOT: wgmma.wait_group
// The partial- and full-block loops load the same key and value tiles: one
// map each, used by both loops; with the output's (a TMA store), three maps
// (the log-sum-exp's row, 256 bytes, is stored by threads). The runtime encodes them at launch (kernel
// parameters); with --device-maps each program builds them, the key and
// value maps before the first loop (the second reuses them).
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --target sm_90a --emit mlir | FileCheck %s --check-prefix=MAPS
// MAPS: kiln.tensor_maps.block_sparse_attention = ["swizzled 2 1 3 64 64 {{.*}}", "swizzled 2 2 3 64 64 {{.*}}", "plain 4 3 3 64 64 {{.*}}"]
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --target sm_90a --device-maps --emit ptx | FileCheck %s --check-prefix=DEVMAPS
// DEVMAPS-COUNT-3: tensormap.replace.tile.global_address
// DEVMAPS-NOT: tensormap.replace.tile.global_address
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --target sm_90a --device-maps --emit ptx | FileCheck %s --check-prefix=DEV
// DEV: tensormap.replace.tile.rank.shared::cta.b1024.b32
// DEV: tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [{{.*}}], 3;
// DEV: mbarrier.init.shared.b64
// DEV: cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// CHECK-COUNT-3: .param .align 64 .b8 block_sparse_attention_param_{{[0-9]+}}[128]
// CHECK-NOT: tensormap.replace
// CHECK: mbarrier.init.shared.b64
// CHECK: cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// CHECK: mbarrier.try_wait.parity.shared.b64
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// CHECK: shfl.sync.bfly.b32 {{.*}}, 1, 31, -1;
// CHECK: shfl.sync.bfly.b32 {{.*}}, 2, 31, -1;
// S1-NOT: cp.async.bulk.tensor
// S1-NOT: mbarrier
// The epilogue: lse's row stored by threads, then out's TMA box, the
// kernel's last access, which waits only until its shared memory has been
// read (no wait for its global writes, no box for lse).
// STORE: st.global.v4.b32
// STORE: cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group
// STORE-NEXT: cp.async.bulk.commit_group;
// STORE-NEXT: cp.async.bulk.wait_group.read 0;
// STOREW-NOT: cp.async.bulk.wait_group 0
// A masked (partial) block's scores read the query positions (a [128, 1]
// tile kept in shared memory since before the loop) in their registers: no
// barrier between the scores' wait and the p v dot (a reshape's view of the
// buffer once counted as a buffer the loop rewrites, and added one); the
// p v group's turn (a named barrier, below) is there.
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 128 --block 128 --mask sliding_window --window 1024 --num-warps 8 --target sm_90a --emit ptx | FileCheck %s --check-prefix=NOBAR
// NOBAR: wgmma.wait_group.sync.aligned 0;
// NOBAR-NOT: bar.sync 0;
// NOBAR: wgmma.commit_group.sync.aligned;
// The key and value blocks' issue reads the next block index from global
// memory: it goes after the scores' wgmma group is committed (the read in
// flight while the group runs), not between the iteration's barrier and
// its first wgmma.
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 128 --block 128 --mask sliding_window --window 1024 --num-warps 8 --target sm_90a --emit ptx | FileCheck %s --check-prefix=DEFER
// DEFER: mbarrier.try_wait.parity
// DEFER: bar.sync 0;
// DEFER-NOT: cp.async.bulk.tensor
// DEFER: wgmma.commit_group.sync.aligned;
// DEFER-NOT: wgmma.wait_group
// DEFER: ld.global.b32
// DEFER-NOT: wgmma.wait_group
// DEFER: cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// DEFER: wgmma.wait_group.sync.aligned 0;
// Pingpong (GPUPingpong.cpp): at block 128 and 8 warps each warpgroup owns 64
// rows, and the two take turns issuing each wgmma group (q kᵀ, then p v):
// a warpgroup waits at its named barrier (1 + warpgroup: a register id,
// 256 threads) just before its group's wgmma.fence and arrives at the
// other's just after the commit, before its wait. Two loops, two groups
// each: four turns; before each loop warpgroup 1 arrives at barrier 1 (the
// first turn is warpgroup 0's) and after it warpgroup 0 takes the last
// arrive there. --no-pingpong (KILN_PINGPONG=0), and one warpgroup (block
// 64 at 4 warps), have no named barrier.
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --block 128 --num-warps 8 --target sm_90a --emit ptx | FileCheck %s --check-prefix=PING
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --block 128 --num-warps 8 --target sm_90a --emit ptx | FileCheck %s --check-prefix=PINGA
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --block 128 --num-warps 8 --target sm_90a --emit ptx | FileCheck %s --check-prefix=PINGN
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --block 128 --num-warps 8 --target sm_90a --emit ptx | FileCheck %s --check-prefix=PINGE
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --block 128 --num-warps 8 --target sm_90a --no-pingpong --emit ptx | FileCheck %s --check-prefix=NOPING
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 64 --target sm_90a --emit ptx | FileCheck %s --check-prefix=NOPING
// PING: bar.sync {{%r[0-9]+}}, 256;
// PING-NEXT: wgmma.fence.sync.aligned;
// PINGA: wgmma.commit_group.sync.aligned;
// PINGA-NEXT: // begin inline asm
// PINGA-NEXT: bar.arrive {{%r[0-9]+}}, 256;
// PINGA-NEXT: // end inline asm
// PINGA-NEXT: wgmma.wait_group.sync.aligned 0;
// PINGN-COUNT-4: bar.arrive {{%r[0-9]+}}, 256;
// PINGN-NOT: bar.arrive {{%r[0-9]+}}
// PINGE-COUNT-2: bar.arrive 1, 256;
// PINGE-NOT: bar.arrive 1,
// NOPING-NOT: bar.arrive
// NOPING-NOT: bar.sync {{%r[0-9]+}}, 256;
// one_loop 1: the partial and the full blocks in one loop, the mask under an
// scf.if whose scores stay in wgmma registers (lowerFragmentIf): one pipeline
// (one pair of mbarriers, one fill), its loads by TMA (the fill before the
// loop, the next blocks' in it), the turns of one loop (one arrive before it,
// two in the body), and no spills.
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 128 --block 128 --mask sliding_window --window 1024 --num-warps 8 --one_loop 1 --target sm_90a --emit ptx -o %t.one.ptx
// RUN: FileCheck %s --check-prefix=ONE < %t.one.ptx
// RUN: FileCheck %s --check-prefix=ONEA < %t.one.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90a -v %t.one.ptx -o %t.one.cubin 2>&1 | FileCheck %s --check-prefix=ONESPILL %}
// ONE-COUNT-2: mbarrier.init.shared.b64
// ONE-NOT: mbarrier.init
// ONEA: cp.async.bulk.tensor.3d.shared
// ONEA: bar.arrive 1, 256;
// ONEA-COUNT-2: bar.arrive {{%r[0-9]+}}, 256;
// ONEA-NOT: bar.arrive
// ONEA: cp.async.bulk.tensor.3d.shared
// ONESPILL: 0 bytes spill stores
// On mma.sync (sm_80) the branch's scores stay in the dot's registers too
// (planRowDots follows them through the yield): block 128 at 8 warps fits an
// A100's shared memory (it needed 209 KiB when the branch stored them) and
// does not spill.
// RUN: kilnc op block_sparse_attention --dtype bf16 --head_dim 128 --block 128 --mask sliding_window --window 1024 --num-warps 8 --one_loop 1 --target sm_80 --emit ptx -o %t.one80.ptx
// RUN: FileCheck %s --check-prefix=ONE80 < %t.one80.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_80 -v %t.one80.ptx -o %t.one80.cubin 2>&1 | FileCheck %s --check-prefix=ONESPILL %}
// ONE80: .maxntid 256, 1, 1
// ONE80: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
