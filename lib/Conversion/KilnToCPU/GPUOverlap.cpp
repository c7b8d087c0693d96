//===- GPUOverlap.cpp - A loop's first dot computed an iteration ahead ----===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// FlashAttention 3's intra-warpgroup overlap, as a rewrite of the kiln IR
// before the sm_90a lowering. In a loop marked `kiln.overlap` (attention's
// loop over full key blocks), the first dot that starts from a constant (the
// scores, q kᵀ) is computed one iteration ahead:
//
//   s0 = dot(q, k(lb))                     // before the loop
//   for j (s = s0) {
//     s' = dot(q, k(j + step))             // wgmma issued, not waited for
//     ... softmax on s, p v dot ...        // runs while s' is computed
//     yield s'
//   }
//
// The lowering keeps s and s' in registers (a fragment iter_arg, lowerFor)
// and issues s' without a wait (its groups are retired by the p v dot's
// wait), so the tensor cores compute the next scores while the warps do
// this block's exponentials. The price: one more q kᵀ per loop (before it,
// and the last iteration's, whose k block is read as the loads' padding
// where it lies past the view). That is why it is a mark the kernel's
// author sets, not a rule: attention's loop over partial blocks (one or two
// iterations) is not marked.
//
//===----------------------------------------------------------------------===//

#include "SimtSupport.h"
#include "kiln/Dialect/Kiln/IR/Kiln.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

using namespace mlir;
using namespace mlir::kiln;

namespace mlir::kiln::detail {

/// The ops of `body` that `dot`'s operands are computed from (program
/// order), when all are pure or loads and depend on no iter_arg but the
/// induction variable; failure otherwise.
static FailureOr<SmallVector<Operation *>> dotSlice(scf::ForOp loop,
                                                     DotOp dot) {
  Block *body = loop.getBody();
  llvm::SetVector<Operation *> slice;
  SmallVector<Value> work(dot->getOperands());
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      if (arg.getOwner() == body && arg != loop.getInductionVar())
        return failure(); // carried state: unknown an iteration ahead
      continue;
    }
    Operation *def = v.getDefiningOp();
    if (def->getBlock() != body || slice.contains(def))
      continue;
    if (def->getNumRegions() || !(isPure(def) || isa<LoadOp>(def)))
      return failure();
    // A load an iteration ahead reads past the loop's range (and before an
    // empty loop): only from a view with bounds, where that reads padding.
    // Python's unmasked pointer loads view memory without bounds.
    if (auto load = dyn_cast<LoadOp>(def)) {
      auto view = load.getView().getDefiningOp<MakeViewOp>();
      if (!view)
        return failure();
      for (Value size : view.getSizes()) {
        APInt c;
        if (matchPattern(size, m_ConstantInt(&c)) && c.getSExtValue() >= (int64_t(1) << 40))
          return failure();
      }
    }
    slice.insert(def);
    llvm::append_range(work, def->getOperands());
  }
  SmallVector<Operation *> ops(slice.begin(), slice.end());
  llvm::sort(ops, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  return ops;
}

/// Whether anything in `loop` may write memory (then a load an iteration
/// ahead could read what this iteration has not written yet).
static bool writesMemory(scf::ForOp loop) {
  WalkResult w = loop.getBody()->walk([](Operation *op) {
    if (isMemoryEffectFree(op) || op->hasTrait<OpTrait::HasRecursiveMemoryEffects>())
      return WalkResult::advance();
    auto iface = dyn_cast<MemoryEffectOpInterface>(op);
    if (!iface || iface.hasEffect<MemoryEffects::Write>() ||
        iface.hasEffect<MemoryEffects::Free>() ||
        iface.hasEffect<MemoryEffects::Allocate>())
      return WalkResult::interrupt();
    return WalkResult::advance();
  });
  return w.wasInterrupted();
}

static bool rotate(scf::ForOp loop, const SimtConfig &simt) {
  Block *body = loop.getBody();
  DotOp dot;
  for (Operation &op : *body)
    if ((dot = dyn_cast<DotOp>(op)))
      break;
  DenseElementsAttr splat;
  if (!dot || !isWgmmaRowDot(simt, dot) ||
      !matchPattern(dot.getAcc(), m_Constant(&splat)) ||
      !splat.isSplat() || !loop.isDefinedOutsideOfLoop(dot.getLhs()) ||
      writesMemory(loop))
    return false;
  auto slice = dotSlice(loop, dot);
  if (failed(slice))
    return false;

  // Before the loop: the slice and the dot at the lower bound.
  OpBuilder b(loop);
  Location loc = loop.getLoc();
  IRMapping first;
  first.map(loop.getInductionVar(), loop.getLowerBound());
  for (Operation *op : *slice)
    b.clone(*op, first);
  Value s0 = b.clone(*dot, first)->getResult(0);

  SmallVector<Value> inits(loop.getInitArgs());
  inits.push_back(s0);
  auto next = scf::ForOp::create(b, loc, loop.getLowerBound(),
                                 loop.getUpperBound(), loop.getStep(), inits);
  next->setDiscardableAttrs(loop->getDiscardableAttrDictionary());
  Block *nb = next.getBody();
  if (!nb->empty())
    nb->getTerminator()->erase();
  for (auto [oldArg, newArg] :
       llvm::zip(body->getArguments(), nb->getArguments()))
    oldArg.replaceAllUsesWith(newArg);
  nb->getOperations().splice(nb->end(), body->getOperations());
  Value sArg = nb->getArguments().back();

  // In the body, where the dot was: the slice at iv + step and the dot,
  // issued before the rest of the iteration reads this one's scores.
  b.setInsertionPoint(dot);
  IRMapping ahead;
  ahead.map(next.getInductionVar(),
            arith::AddIOp::create(b, loc, next.getInductionVar(), next.getStep()));
  for (Operation *op : *slice)
    b.clone(*op, ahead);
  Value sNext = b.clone(*dot, ahead)->getResult(0);
  dot.getResult().replaceAllUsesWith(sArg);
  dot.erase();
  for (Operation *op : llvm::reverse(*slice))
    if (op->use_empty())
      op->erase();
  auto yield = cast<scf::YieldOp>(nb->getTerminator());
  yield->insertOperands(yield->getNumOperands(), sNext);
  for (auto [oldRes, newRes] : llvm::zip(loop.getResults(), next.getResults()))
    oldRes.replaceAllUsesWith(newRes);
  loop.erase();
  return true;
}

int overlapMarkedLoops(Operation *kernel, const SimtConfig &simt) {
  SmallVector<scf::ForOp> loops;
  kernel->walk([&](scf::ForOp loop) {
    if (loop->hasAttr(kOverlapAttr))
      loops.push_back(loop);
  });
  int rotated = 0;
  for (scf::ForOp loop : loops) {
    loop->removeAttr(kOverlapAttr);
    rotated += rotate(loop, simt);
  }
  return rotated;
}

} // namespace mlir::kiln::detail
