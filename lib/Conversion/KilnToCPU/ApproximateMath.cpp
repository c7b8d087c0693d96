//===- ApproximateMath.cpp - Vectorizable f32 transcendentals --------------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "kiln/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Approximation.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_KILNAPPROXIMATEMATH
#define GEN_PASS_DEF_KILNEXPANDARITHFORNVVM
#include "kiln/Dialect/Kiln/Passes.h.inc"
} // namespace mlir::kiln

#include <cmath>
#include <type_traits>

using namespace mlir;

namespace {
/// f32 `math.exp`/`math.exp2` (scalars, or vectors element by element) as
/// NVVM's `ex2.approx.ftz.f32`: exp(x) = 2^(x * log2(e)).
template <typename MathOp>
struct ExpAsNvvmEx2 : OpRewritePattern<MathOp> {
  using OpRewritePattern<MathOp>::OpRewritePattern;

  LogicalResult matchAndRewrite(MathOp op,
                                PatternRewriter &rewriter) const override {
    Type type = op.getType();
    auto vecType = dyn_cast<VectorType>(type);
    if (!getElementTypeOrSelf(type).isF32() ||
        (vecType && (vecType.isScalable() || vecType.getRank() != 1)))
      return failure();
    Location loc = op.getLoc();
    Value x = op.getOperand();
    if constexpr (std::is_same_v<MathOp, math::ExpOp>) {
      Value log2e = arith::ConstantOp::create(
          rewriter, loc, type,
          vecType ? TypedAttr(DenseElementsAttr::get(
                        vecType, rewriter.getF32FloatAttr(M_LOG2E)))
                  : TypedAttr(rewriter.getF32FloatAttr(M_LOG2E)));
      // Softmax's exp(s * c - m) as FlashAttention computes it:
      // 2^fma(s, c log2 e, -(m log2 e)), one fma and the ex2; exp(a - m)
      // likewise, with c = 1. (c log2 e) is loop-invariant and (m log2 e)
      // one value per row, so LLVM hoists and shares them: two instructions
      // per element instead of three (fma, multiply, ex2). Rounding m log2 e
      // shifts every exponent of a row alike (|m| 2^-24), which cancels in
      // softmax's normalization (the output) and is 6e-8 |m| absolute in a
      // log-sum-exp; what remains per element is the rounding of c log2 e,
      // |s c| 2^-24 relative. Measured in float32 against float64 softmax
      // outputs with scores around 0, 1e3 and 1e5: 4-6e-8 relative either
      // way (the earlier fma(s, c, -m) * log2 e included).
      auto scaled = [&](Value v) {
        return arith::MulFOp::create(rewriter, loc, v, log2e).getResult();
      };
      if (auto sub = x.getDefiningOp<arith::SubFOp>()) {
        Value s = sub.getLhs(), c = log2e;
        if (auto mul = s.getDefiningOp<arith::MulFOp>()) {
          s = mul.getLhs();
          c = scaled(mul.getRhs());
        }
        // llvm.intr.fma, not math.fma (which becomes a libdevice call).
        x = LLVM::FMAOp::create(
            rewriter, loc, s, c,
            arith::NegFOp::create(rewriter, loc, scaled(sub.getRhs())));
      } else {
        x = scaled(x);
      }
    }
    auto ex2 = [&](Value v) -> Value {
      return LLVM::CallIntrinsicOp::create(
                 rewriter, loc, rewriter.getF32Type(),
                 rewriter.getStringAttr("llvm.nvvm.ex2.approx.ftz.f32"),
                 ValueRange{v})
          .getResult(0);
    };
    if (!vecType) {
      rewriter.replaceOp(op, ex2(x));
      return success();
    }
    Value result = arith::ConstantOp::create(
        rewriter, loc, vecType,
        DenseElementsAttr::get(vecType, rewriter.getF32FloatAttr(0)));
    for (int64_t i = 0, e = vecType.getNumElements(); i < e; ++i) {
      Value elt = vector::ExtractOp::create(rewriter, loc, x, i);
      result = vector::InsertOp::create(rewriter, loc, ex2(elt), result, i);
    }
    rewriter.replaceOp(op, result);
    return success();
  }
};

struct KilnApproximateMathPass
    : kiln::impl::KilnApproximateMathBase<KilnApproximateMathPass> {
  using Base::Base;

  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    // Expansions first (tanh, sinh, ... in terms of exp), then polynomials.
    RewritePatternSet expansions(ctx);
    populateMathF32ExpansionPatterns(expansions, [](StringRef) { return true; });
    if (failed(applyPatternsGreedily(getOperation(), std::move(expansions))))
      return signalPassFailure();
    if (nvvmEx2) {
      FrozenRewritePatternSet ex2 = [&] {
        RewritePatternSet p(ctx);
        p.add<ExpAsNvvmEx2<math::ExpOp>, ExpAsNvvmEx2<math::Exp2Op>>(ctx);
        return FrozenRewritePatternSet(std::move(p));
      }();
      WalkResult walk = getOperation()->walk([&](gpu::GPUModuleOp module) {
        if (failed(applyPatternsGreedily(module, ex2)))
          return WalkResult::interrupt();
        return WalkResult::skip();
      });
      if (walk.wasInterrupted())
        return signalPassFailure();
    }
    RewritePatternSet patterns(ctx);
    populateMathPolynomialApproximationPatterns(patterns,
                                                [](StringRef) { return true; });
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace

namespace {
struct KilnExpandArithForNVVMPass
    : kiln::impl::KilnExpandArithForNVVMBase<KilnExpandArithForNVVMPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    arith::populateCeilFloorDivExpandOpsPatterns(patterns);
    arith::populateExpandScalingExtTruncPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
