//===- GPUPingpong.cpp - Warpgroups take turns at the tensor cores --------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// FlashAttention 3's pingpong schedule, on the lowered sm_90a kernel. In
// attention's key-block loop each warpgroup owns whole rows of the scores:
// it issues its q kᵀ wgmma group, waits, runs the softmax on its registers
// (exponentials on the SFU, a few hundred cycles per 64-row block), then
// issues its p v group (A in registers) and waits. Left alone, the
// warpgroups run in phase (the loop's CTA barrier lines them up every
// iteration), so all of them issue together, wait together, and the tensor
// cores idle while every warpgroup computes its softmax.
//
// Here each wgmma group of such a loop becomes a turn: before the group's
// first issue (its wgmma.fence) warpgroup w waits at named barrier 1 + w,
// and after the group's commit it arrives at the next warpgroup's barrier,
// 1 + (w + 1) % n (`bar.sync id, 256` / `bar.arrive id, 256`: the waiting
// warpgroup and the arriving one). Turns therefore go round the warpgroups
// in order, group by group: warpgroup 1's q kᵀ is issued after warpgroup
// 0's, so warpgroup 0's softmax runs while the tensor cores compute
// warpgroup 1's scores, and warpgroup 0's p v is queued while warpgroup 1
// computes its softmax. Only the issue order is constrained: an arrive does
// not wait for anything, the groups still retire by their own
// wgmma.wait_group, and shared memory is ordered as before (the turns order
// no memory access). Before the loop warpgroup n - 1 arrives at warpgroup
// 0's barrier (the first turn is 0's); after it warpgroup 0 waits there
// (taking the last turn's arrive), so every named barrier is balanced
// whatever the trip count.
//
// Which loops: those whose body issues a wgmma with A in registers (a dot
// of a product computed from an earlier dot's result: attention's p v), has
// at least two groups and a CTA barrier of its own (the pipelined loads'
// barrier, which every thread reaches each iteration, so the trip count is
// the same for every warpgroup), in a kernel of two or more warpgroups. No
// turn may contain a CTA barrier or an mbarrier wait (a warpgroup holding
// the turn would then wait for one waiting for the turn); a loop with such a
// group is left as it is. GEMM loops (no A in registers) keep their groups
// in flight and are not scheduled: their warpgroups need no SFU between
// groups.
//
// Deadlock freedom. A warpgroup waits for a turn only for the previous
// warpgroup to finish issuing its previous group, which contains no wait on
// another warpgroup; CTA barriers outside the turns are reached in the same
// order by every warpgroup, and a warpgroup is at most one group ahead of
// the next one. The emulator runs named barriers (kiln_emu_named_barrier)
// and reports a deadlock or a block ending with an unbalanced barrier.
//
//===----------------------------------------------------------------------===//

#include "SimtSupport.h"
#include "kiln/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_KILNGPUPINGPONG
#include "kiln/Dialect/Kiln/Passes.h.inc"
} // namespace mlir::kiln

using namespace mlir;

namespace mlir::kiln::detail {
namespace {

bool isRegisterAWgmma(Operation *op) {
  auto a = dyn_cast<LLVM::InlineAsmOp>(op);
  return a && a->hasAttr(kWgmmaRsAttr);
}

bool isWgmmaIssue(Operation *op) {
  return isa<NVVM::WgmmaMmaAsyncOp, NVVM::WgmmaFenceAlignedOp>(op) ||
         isRegisterAWgmma(op);
}

/// Whether `op` is or contains an op satisfying `pred`.
template <typename Pred> bool contains(Operation *op, Pred pred) {
  return op
      ->walk([&](Operation *o) {
        return pred(o) ? WalkResult::interrupt() : WalkResult::advance();
      })
      .wasInterrupted();
}

/// Ops a turn may not contain: waits for other warpgroups (block and named
/// barriers, mbarrier waits for copies another warpgroup's thread may
/// issue), and named-barrier arrivals, which would unbalance the turns.
bool waitsForOthers(Operation *o) {
  return isa<gpu::BarrierOp, NVVM::BarrierOp, NVVM::Barrier0Op,
             NVVM::BarrierArriveOp, NVVM::MBarrierTryWaitParityOp,
             NVVM::MBarrierTryWaitOp, NVVM::MBarrierTestWaitOp>(o);
}

struct Turn {
  Operation *first; // the group's first issue (or the op containing it)
  Operation *commit;
};

/// The turns of `loop`: one per wgmma commit, from the first issue before it
/// in its block (after the previous commit there) to the commit. Fails
/// (returns false) where a group cannot be a turn.
bool collectTurns(scf::ForOp loop, SmallVectorImpl<Turn> &turns) {
  bool ok = true;
  loop.getBody()->walk([&](NVVM::WgmmaGroupSyncAlignedOp commit) {
    Operation *first = nullptr;
    for (Operation *p = commit->getPrevNode(); p; p = p->getPrevNode()) {
      if (contains(p, [](Operation *o) {
            return isa<NVVM::WgmmaGroupSyncAlignedOp>(o);
          }))
        break;
      if (contains(p, isWgmmaIssue))
        first = p;
    }
    if (!first)
      return; // a commit of nothing new: no turn
    for (Operation *o = first; o != commit.getOperation();
         o = o->getNextNode())
      if (contains(o, waitsForOthers))
        ok = false;
    turns.push_back({first, commit});
  });
  return ok && !turns.empty();
}

bool qualifies(scf::ForOp loop) {
  bool registerA = contains(loop, isRegisterAWgmma);
  bool ctaBarrier = llvm::any_of(loop.getBody()->getOperations(),
                                 [](Operation &o) {
                                   return isa<gpu::BarrierOp>(o);
                                 });
  bool named = contains(loop, [](Operation *o) {
    return isa<NVVM::BarrierOp, NVVM::BarrierArriveOp>(o);
  });
  return registerA && ctaBarrier && !named;
}

} // namespace

int scheduleWarpgroupPingpong(Operation *kernel, const SimtConfig &simt) {
  auto func = cast<gpu::GPUFuncOp>(kernel);
  int64_t groups = simt.numThreads / 128;
  if (!simt.wgmma || groups < 2 || simt.numThreads % 128 != 0)
    return 0;
  SmallVector<std::pair<scf::ForOp, SmallVector<Turn>>> loops;
  func.walk<WalkOrder::PreOrder>([&](scf::ForOp loop) {
    if (!qualifies(loop))
      return WalkResult::advance();
    SmallVector<Turn> turns;
    if (collectTurns(loop, turns) && turns.size() >= 2)
      loops.push_back({loop, std::move(turns)});
    // Loops inside a qualifying one are not scheduled on their own: the
    // outer loop's turns cover their groups.
    return WalkResult::skip();
  });
  if (loops.empty())
    return 0;
  // The warpgroup index, once, at the kernel's entry.
  ImplicitLocOpBuilder eb(func.getLoc(), &func.getBody().front(),
                          func.getBody().front().begin());
  eb.setInsertionPointAfterValue(simt.threadId);
  Type i32 = eb.getI32Type();
  Value wg = arith::IndexCastOp::create(
      eb, i32,
      arith::DivUIOp::create(eb, simt.threadId,
                             arith::ConstantIndexOp::create(eb, 128)));
  Value one = arith::ConstantIntOp::create(eb, i32, 1);
  Value count = arith::ConstantIntOp::create(eb, i32, 256);
  Value n = arith::ConstantIntOp::create(eb, i32, groups);
  // Warpgroup w's barrier is 1 + w; the next one's, 1 + (w + 1) % n.
  Value mine = arith::AddIOp::create(eb, wg, one);
  Value next =
      arith::AddIOp::create(eb, arith::RemUIOp::create(eb, mine, n), one);
  Value isFirst = arith::CmpIOp::create(
      eb, arith::CmpIPredicate::eq, wg, arith::ConstantIntOp::create(eb, i32, 0));
  Value isLast = arith::CmpIOp::create(
      eb, arith::CmpIPredicate::eq, wg,
      arith::ConstantIntOp::create(eb, i32, groups - 1));
  for (auto &[loop, turns] : loops) {
    Location loc = loop.getLoc();
    for (Turn &t : turns) {
      OpBuilder b(t.first);
      NVVM::BarrierOp::create(b, loc, TypeRange{}, mine, count, {}, Value{});
      b.setInsertionPointAfter(t.commit);
      NVVM::BarrierArriveOp::create(b, loc, next, count);
    }
    // The first turn is warpgroup 0's; after the loop, warpgroup 0 takes
    // the last turn's arrive.
    OpBuilder b(loop);
    auto pre = scf::IfOp::create(b, loc, TypeRange{}, isLast, false);
    {
      OpBuilder tb = pre.getThenBodyBuilder();
      NVVM::BarrierArriveOp::create(tb, loc, one, count);
    }
    b.setInsertionPointAfter(loop);
    auto post = scf::IfOp::create(b, loc, TypeRange{}, isFirst, false);
    {
      OpBuilder tb = post.getThenBodyBuilder();
      NVVM::BarrierOp::create(tb, loc, TypeRange{}, one, count, {}, Value{});
    }
  }
  return static_cast<int>(loops.size());
}

} // namespace mlir::kiln::detail

namespace {

/// The step on its own, for tests: each gpu.func's block size from its
/// nvvm.maxntid, its thread index from the entry's gpu.thread_id x.
struct KilnGPUPingpongPass
    : mlir::kiln::impl::KilnGPUPingpongBase<KilnGPUPingpongPass> {
  void runOnOperation() override {
    getOperation()->walk([](gpu::GPUFuncOp func) {
      auto maxntid = func->getAttrOfType<DenseI32ArrayAttr>("nvvm.maxntid");
      if (!maxntid || maxntid.empty() || func.getBody().empty())
        return;
      mlir::kiln::detail::SimtConfig simt;
      simt.numThreads = maxntid[0];
      simt.wgmma = true;
      for (Operation &op : func.getBody().front())
        if (auto tid = dyn_cast<gpu::ThreadIdOp>(op);
            tid && tid.getDimension() == gpu::Dimension::x) {
          simt.threadId = tid;
          break;
        }
      if (simt.threadId)
        mlir::kiln::detail::scheduleWarpgroupPingpong(func, simt);
    });
  }
};

} // namespace

