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
// hand-written kernel would make (TMA maps are built once, before the loop).
//
//===----------------------------------------------------------------------===//

#include "kiln/Conversion/Passes.h"
#include "kiln/Dialect/Kiln/IR/Kiln.h"

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
    });
  }
};

} // namespace
