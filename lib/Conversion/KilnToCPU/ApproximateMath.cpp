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
/// An f32 constant of `type` (a scalar, or a vector splat).
static Value f32Constant(PatternRewriter &rewriter, Location loc, Type type,
                         double value) {
  auto attr = rewriter.getF32FloatAttr(value);
  auto vecType = dyn_cast<VectorType>(type);
  return arith::ConstantOp::create(
      rewriter, loc, type,
      vecType ? TypedAttr(DenseElementsAttr::get(vecType, attr)) : TypedAttr(attr));
}

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
    // Softmax's exp(s * c - m): s * c - m as one fma (one rounding, so at
    // least as exact as the two ops), then (exp) times log2 e. Not
    // s (c log2 e) - m log2 e (FlashAttention's form, one op less): there
    // m log2 e is rounded on its own, an error of |m| 2^-24 in the exponent,
    // 1e-4 relative at m = 1000. Base-2 softmax (attention's exp2(s c - m),
    // c = scale log2 e) is the fma and the ex2: the scaled scores need not
    // stay live past the row maximum.
    if (auto sub = x.getDefiningOp<arith::SubFOp>())
      if (auto mul = sub.getLhs().getDefiningOp<arith::MulFOp>())
        // llvm.intr.fma, not math.fma (which becomes a libdevice call).
        x = LLVM::FMAOp::create(rewriter, loc, mul.getLhs(), mul.getRhs(),
                                arith::NegFOp::create(rewriter, loc,
                                                      sub.getRhs()));
    if constexpr (std::is_same_v<MathOp, math::ExpOp>)
      x = arith::MulFOp::create(rewriter, loc, x,
                                f32Constant(rewriter, loc, type, M_LOG2E));
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
    Value result = f32Constant(rewriter, loc, vecType, 0);
    for (int64_t i = 0, e = vecType.getNumElements(); i < e; ++i) {
      Value elt = vector::ExtractOp::create(rewriter, loc, x, i);
      result = vector::InsertOp::create(rewriter, loc, ex2(elt), result, i);
    }
    rewriter.replaceOp(op, result);
    return success();
  }
};

/// f32 `math.exp2` as `math.exp(x ln 2)`, which the polynomial patterns
/// cover (MLIR's do not approximate exp2: it would stay a scalar libm call
/// per element). Attention's base-2 softmax goes through it on CPUs and the
/// emulator; the rounding of x ln 2 is |x| 2^-24 relative, 1e-6 for the
/// exponents that matter there (p above 2^-30).
struct Exp2AsExp : OpRewritePattern<math::Exp2Op> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(math::Exp2Op op,
                                PatternRewriter &rewriter) const override {
    Type type = op.getType();
    if (!getElementTypeOrSelf(type).isF32())
      return failure();
    Value ln2 = f32Constant(rewriter, op.getLoc(), type, M_LN2);
    rewriter.replaceOpWithNewOp<math::ExpOp>(
        op, arith::MulFOp::create(rewriter, op.getLoc(), op.getOperand(), ln2));
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
    patterns.add<Exp2AsExp>(ctx);
    // Not rsqrt: its approximation of 8-wide f32 vectors emits x86vector's
    // AVX intrinsic, which the CPU pipeline does not lower (a tile of 8 or
    // more floats crashed the compiler). math-to-llvm expands it to
    // 1 / sqrt, the GPU lowering to libdevice.
    populateMathPolynomialApproximationPatterns(
        patterns, [](StringRef name) { return name != "math.rsqrt"; });
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
