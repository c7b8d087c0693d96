// kiln-gpu-pingpong (GPUPingpong.cpp; convert-kiln-to-gpu runs it on
// sm_90a) on hand-written lowered loops: which loops take turns, and where
// the named barriers go. A turn is a wgmma group: its warpgroup waits at
// barrier 1 + w before the group's first issue and arrives at the next
// warpgroup's barrier after its commit. The register-A wgmma (attention's
// p v) is the inline asm marked kiln.wgmma_rs; its operands do not matter
// here.
// RUN: kiln-opt %s --kiln-gpu-pingpong | FileCheck %s

// Two warpgroups, two groups (the scores' with a wait, p v's with its wait):
// the warpgroup index once at the entry, two turns, warpgroup 1's arrive at
// barrier 1 before the loop and warpgroup 0's wait there after it.
// CHECK-LABEL: gpu.func @two_groups
// CHECK: %[[TID:.*]] = gpu.thread_id x
// CHECK: %[[WG:.*]] = arith.index_cast %{{.*}} : index to i32
// CHECK-DAG: %[[ONE:.*]] = arith.constant 1 : i32
// CHECK-DAG: %[[COUNT:.*]] = arith.constant 256 : i32
// CHECK: %[[MINE:.*]] = arith.addi %[[WG]], %[[ONE]] : i32
// CHECK: arith.remui
// CHECK-NEXT: %[[NEXT:.*]] = arith.addi %{{.*}}, %[[ONE]] : i32
// CHECK: scf.if
// CHECK-NEXT: nvvm.barrier.arrive id = %[[ONE]] number_of_threads = %[[COUNT]]
// CHECK: scf.for
// CHECK: gpu.barrier
// CHECK-NEXT: nvvm.barrier id = %[[MINE]] number_of_threads = %[[COUNT]]
// CHECK-NEXT: nvvm.wgmma.fence.aligned
// CHECK-NEXT: llvm.inline_asm
// CHECK-NEXT: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: nvvm.barrier.arrive id = %[[NEXT]] number_of_threads = %[[COUNT]]
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK-NEXT: arith.addf
// CHECK-NEXT: nvvm.barrier id = %[[MINE]] number_of_threads = %[[COUNT]]
// CHECK-NEXT: nvvm.wgmma.fence.aligned
// CHECK-NEXT: llvm.inline_asm has_side_effects {kiln.wgmma_rs
// CHECK-NEXT: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: nvvm.barrier.arrive id = %[[NEXT]] number_of_threads = %[[COUNT]]
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: }
// CHECK-NEXT: scf.if
// CHECK-NEXT: nvvm.barrier id = %[[ONE]] number_of_threads = %[[COUNT]]

// Left alone: one warpgroup; no register-A wgmma (a GEMM loop); no CTA
// barrier of the loop's own; a group whose issue waits at a CTA barrier
// (the turn's holder would wait for the warpgroup waiting for the turn);
// a group whose issue waits on an mbarrier; a single group.
// CHECK-LABEL: gpu.func @one_warpgroup
// CHECK-NOT: nvvm.barrier
// CHECK-LABEL: gpu.func @no_register_a
// CHECK-NOT: nvvm.barrier
// CHECK-LABEL: gpu.func @no_cta_barrier
// CHECK-NOT: nvvm.barrier
// CHECK-LABEL: gpu.func @barrier_in_a_group
// CHECK-NOT: nvvm.barrier
// CHECK-LABEL: gpu.func @mbarrier_wait_in_a_group
// CHECK-NOT: nvvm.barrier
// CHECK-LABEL: gpu.func @one_group
// CHECK-NOT: nvvm.barrier

// Three warpgroups: the turns go round (next = (w + 1) % 3 + 1); the last
// warpgroup (2) opens the loop.
// CHECK-LABEL: gpu.func @three_warpgroups
// CHECK: %[[WG3:.*]] = arith.index_cast %{{.*}} : index to i32
// CHECK-DAG: %[[ONE3:.*]] = arith.constant 1 : i32
// CHECK-DAG: %[[N3:.*]] = arith.constant 3 : i32
// CHECK: %[[R:.*]] = arith.remui %{{.*}}, %[[N3]] : i32
// CHECK: %[[NEXT3:.*]] = arith.addi %[[R]], %[[ONE3]] : i32
// CHECK: %[[TWO3:.*]] = arith.constant 2 : i32
// CHECK-NEXT: %[[LAST:.*]] = arith.cmpi eq, %[[WG3]], %[[TWO3]] : i32
// CHECK: scf.if %[[LAST]]
// CHECK-NEXT: nvvm.barrier.arrive id = %[[ONE3]]
// CHECK: nvvm.barrier.arrive id = %[[NEXT3]]
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 0

// Nested: the turns of a qualifying loop cover groups in an inner loop (the
// k steps of a dot); the inner loop is not scheduled on its own.
// CHECK-LABEL: gpu.func @inner_k_loop
// CHECK-COUNT-1: nvvm.barrier.arrive id = %{{.*}} number_of_threads
// CHECK: scf.for
// CHECK: scf.for
// CHECK-NEXT: nvvm.barrier id = %{{.*}} number_of_threads
// CHECK-NEXT: nvvm.wgmma.fence.aligned
// CHECK-NEXT: llvm.inline_asm
// CHECK-NEXT: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: nvvm.barrier.arrive

module attributes {gpu.container_module} {
  gpu.module @kiln_gpu {
    gpu.func @two_groups(%n: index, %p: !llvm.ptr<3>) kernel attributes {nvvm.maxntid = array<i32: 256, 1, 1>} {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %f = arith.constant 1.0 : f32
      %r = scf.for %i = %c0 to %n step %c1 iter_args(%a = %f) -> (f32) {
        gpu.barrier
        nvvm.wgmma.fence.aligned
        llvm.inline_asm has_side_effects "// scores", "" : () -> ()
        nvvm.wgmma.commit.group.sync.aligned
        nvvm.wgmma.wait.group.sync.aligned 0
        %s = arith.addf %a, %a : f32
        nvvm.wgmma.fence.aligned
        llvm.inline_asm has_side_effects {kiln.wgmma_rs = array<i64: 64, 0, 1>} "// p v", "" : () -> ()
        nvvm.wgmma.commit.group.sync.aligned
        nvvm.wgmma.wait.group.sync.aligned 0
        scf.yield %s : f32
      }
      gpu.return
    }

    gpu.func @one_warpgroup(%n: index) kernel attributes {nvvm.maxntid = array<i32: 128, 1, 1>} {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      scf.for %i = %c0 to %n step %c1 {
        gpu.barrier
        nvvm.wgmma.fence.aligned
        llvm.inline_asm has_side_effects "// scores", "" : () -> ()
        nvvm.wgmma.commit.group.sync.aligned
        nvvm.wgmma.wait.group.sync.aligned 0
        nvvm.wgmma.fence.aligned
        llvm.inline_asm has_side_effects {kiln.wgmma_rs = array<i64: 64, 0, 1>} "// p v", "" : () -> ()
        nvvm.wgmma.commit.group.sync.aligned
        nvvm.wgmma.wait.group.sync.aligned 0
      }
      gpu.return
    }

    gpu.func @no_register_a(%n: index) kernel attributes {nvvm.maxntid = array<i32: 256, 1, 1>} {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      scf.for %i = %c0 to %n step %c1 {
        gpu.barrier
        nvvm.wgmma.fence.aligned
        llvm.inline_asm has_side_effects "// a b", "" : () -> ()
        nvvm.wgmma.commit.group.sync.aligned
        nvvm.wgmma.fence.aligned
        llvm.inline_asm has_side_effects "// a b", "" : () -> ()
        nvvm.wgmma.commit.group.sync.aligned
        nvvm.wgmma.wait.group.sync.aligned 1
      }
      gpu.return
    }

    gpu.func @no_cta_barrier(%n: index) kernel attributes {nvvm.maxntid = array<i32: 256, 1, 1>} {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      scf.for %i = %c0 to %n step %c1 {
        nvvm.wgmma.fence.aligned
        llvm.inline_asm has_side_effects "// scores", "" : () -> ()
        nvvm.wgmma.commit.group.sync.aligned
        nvvm.wgmma.wait.group.sync.aligned 0
        nvvm.wgmma.fence.aligned
        llvm.inline_asm has_side_effects {kiln.wgmma_rs = array<i64: 64, 0, 1>} "// p v", "" : () -> ()
        nvvm.wgmma.commit.group.sync.aligned
        nvvm.wgmma.wait.group.sync.aligned 0
      }
      gpu.return
    }

    gpu.func @barrier_in_a_group(%n: index) kernel attributes {nvvm.maxntid = array<i32: 256, 1, 1>} {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      scf.for %i = %c0 to %n step %c1 {
        gpu.barrier
        nvvm.wgmma.fence.aligned
        llvm.inline_asm has_side_effects "// scores", "" : () -> ()
        nvvm.wgmma.commit.group.sync.aligned
        nvvm.wgmma.wait.group.sync.aligned 0
        nvvm.wgmma.fence.aligned
        gpu.barrier
        llvm.inline_asm has_side_effects {kiln.wgmma_rs = array<i64: 64, 0, 1>} "// p v", "" : () -> ()
        nvvm.wgmma.commit.group.sync.aligned
        nvvm.wgmma.wait.group.sync.aligned 0
      }
      gpu.return
    }

    gpu.func @mbarrier_wait_in_a_group(%n: index, %bar: !llvm.ptr<3>, %phase: i32) kernel attributes {nvvm.maxntid = array<i32: 256, 1, 1>} {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %t = arith.constant 1000 : i32
      scf.for %i = %c0 to %n step %c1 {
        gpu.barrier
        nvvm.wgmma.fence.aligned
        nvvm.mbarrier.try_wait.parity %bar, %phase, %t : !llvm.ptr<3>, i32, i32
        llvm.inline_asm has_side_effects "// scores", "" : () -> ()
        nvvm.wgmma.commit.group.sync.aligned
        nvvm.wgmma.wait.group.sync.aligned 0
        nvvm.wgmma.fence.aligned
        llvm.inline_asm has_side_effects {kiln.wgmma_rs = array<i64: 64, 0, 1>} "// p v", "" : () -> ()
        nvvm.wgmma.commit.group.sync.aligned
        nvvm.wgmma.wait.group.sync.aligned 0
      }
      gpu.return
    }

    gpu.func @one_group(%n: index) kernel attributes {nvvm.maxntid = array<i32: 256, 1, 1>} {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      scf.for %i = %c0 to %n step %c1 {
        gpu.barrier
        nvvm.wgmma.fence.aligned
        llvm.inline_asm has_side_effects {kiln.wgmma_rs = array<i64: 64, 0, 1>} "// p v", "" : () -> ()
        nvvm.wgmma.commit.group.sync.aligned
        nvvm.wgmma.wait.group.sync.aligned 0
      }
      gpu.return
    }

    gpu.func @three_warpgroups(%n: index) kernel attributes {nvvm.maxntid = array<i32: 384, 1, 1>} {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      scf.for %i = %c0 to %n step %c1 {
        gpu.barrier
        nvvm.wgmma.fence.aligned
        llvm.inline_asm has_side_effects "// scores", "" : () -> ()
        nvvm.wgmma.commit.group.sync.aligned
        nvvm.wgmma.wait.group.sync.aligned 0
        nvvm.wgmma.fence.aligned
        llvm.inline_asm has_side_effects {kiln.wgmma_rs = array<i64: 64, 0, 1>} "// p v", "" : () -> ()
        nvvm.wgmma.commit.group.sync.aligned
        nvvm.wgmma.wait.group.sync.aligned 0
      }
      gpu.return
    }

    gpu.func @inner_k_loop(%n: index) kernel attributes {nvvm.maxntid = array<i32: 256, 1, 1>} {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      scf.for %i = %c0 to %n step %c1 {
        gpu.barrier
        scf.for %k = %c0 to %c2 step %c1 {
          nvvm.wgmma.fence.aligned
          llvm.inline_asm has_side_effects "// scores k step", "" : () -> ()
          nvvm.wgmma.commit.group.sync.aligned
        }
        nvvm.wgmma.wait.group.sync.aligned 0
        nvvm.wgmma.fence.aligned
        llvm.inline_asm has_side_effects {kiln.wgmma_rs = array<i64: 64, 0, 1>} "// p v", "" : () -> ()
        nvvm.wgmma.commit.group.sync.aligned
        nvvm.wgmma.wait.group.sync.aligned 0
      }
      gpu.return
    }
  }
}
