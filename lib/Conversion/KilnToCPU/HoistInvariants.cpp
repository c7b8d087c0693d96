//===- HoistInvariants.cpp - Loop-invariant views out of loops -------------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// `kiln-hoist-invariants` (dialects/Kiln/Passes.td): views, program ids and
// pure scalar arithmetic whose operands are defined outside a loop move
// before it, so that the lowerings see the loop-invariant view a
// hand-written kernel would make (TMA maps are built once, before the loop);
// scalars a loop advances by a fixed amount are computed from its index.
//
//===----------------------------------------------------------------------===//

#include "kiln/Conversion/Passes.h"
#include "kiln/Dialect/Kiln/IR/Kiln.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/LoopInvariantCodeMotionUtils.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_KILNHOISTINVARIANTS
#include "kiln/Dialect/Kiln/Passes.h.inc"
} // namespace mlir::kiln

using namespace mlir;

namespace {

/// What may move: ops without regions, free of memory effects and
/// speculatable (no division that could trap on a path the loop skips),
/// whose results are all scalars or views, not tiles.
bool hoistable(Operation *op) {
  if (op->getNumRegions() != 0 || !isPure(op))
    return false;
  if (isa<kiln::MakeViewOp, kiln::ProgramIdOp, kiln::NumProgramsOp>(op))
    return true;
  if (!isa<arith::ArithDialect>(op->getDialect()))
    return false;
  return llvm::all_of(op->getResultTypes(),
                      [](Type t) { return t.isIntOrIndexOrFloat(); });
}

/// An scf.for's integer iter_arg that each iteration advances by a
/// loop-invariant amount (`yield %arg + %c`: a pointer advanced by a stride,
/// `a_ptrs += BK * stride`) is, in iteration t = (iv - lb) / step,
/// init + t * c. Its uses in the body (but the addition) read that instead,
/// so that what they compute derives from the induction variable: a
/// pipelined load's offsets must be computable for a later iteration.
/// (Both wrap alike: t additions of c and t * c agree modulo 2^width.)
void substituteInductions(scf::ForOp loop) {
  auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
  for (auto [i, arg] : llvm::enumerate(loop.getRegionIterArgs())) {
    if (!isa<IntegerType>(arg.getType()) || arg.use_empty())
      continue;
    auto add = yield.getOperand(i).getDefiningOp<arith::AddIOp>();
    if (!add || add->getBlock() != loop.getBody())
      continue;
    Value c = add.getLhs() == arg ? add.getRhs()
              : add.getRhs() == arg ? add.getLhs()
                                    : Value();
    if (!c || !loop.isDefinedOutsideOfLoop(c))
      continue;
    ImplicitLocOpBuilder b(loop.getLoc(), loop.getBody(),
                           loop.getBody()->begin());
    Value t = b.createOrFold<arith::DivUIOp>(
        b.createOrFold<arith::SubIOp>(loop.getInductionVar(),
                                      loop.getLowerBound()),
        loop.getStep());
    Value tc = b.createOrFold<arith::IndexCastOp>(arg.getType(), t);
    Value at = b.createOrFold<arith::AddIOp>(
        loop.getInitArgs()[i], b.createOrFold<arith::MulIOp>(tc, c));
    arg.replaceAllUsesExcept(at, add);
    // (The advanced value, where the body reads it after the addition.)
    if (!add->hasOneUse()) {
      Value next = arith::AddIOp::create(b, at, c);
      add.getResult().replaceAllUsesExcept(next, yield);
    }
  }
}

struct KilnHoistInvariantsPass
    : kiln::impl::KilnHoistInvariantsBase<KilnHoistInvariantsPass> {
  void runOnOperation() override {
    // (Post-order: an inner loop's invariants reach the outer loop, which
    // may hoist them further.)
    getOperation()->walk([](LoopLikeOpInterface loop) {
      moveLoopInvariantCode(
          loop.getLoopRegions(),
          [&](Value v, Region *) { return loop.isDefinedOutsideOfLoop(v); },
          [](Operation *op, Region *) { return hoistable(op); },
          [&](Operation *op, Region *) { loop.moveOutOfLoop(op); });
      if (auto forOp = dyn_cast<scf::ForOp>(loop.getOperation()))
        substituteInductions(forOp);
    });
  }
};

} // namespace
