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
#include "mlir/Dialect/SCF/IR/SCF.h"
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

/// f32 `math.sin`/`math.cos` with an exact argument reduction. MLIR's
/// polynomial approximation reduces x by pi/2 in f32 arithmetic (an error
/// of about |x| 2^-24 in the reduced argument): sin(1e3) was off by 5.6e-5,
/// sin(1e4) by 7.6e-4, sin(1e6) by 0.06, and past 1e8 it returned values
/// far outside [-1, 1] (1.8e12 at 1e9). Rotary embeddings over a long context
/// take sines of angles up to the position (a million at a million tokens).
///
/// Here k = rint(x 2/pi) and r = x - k pi/2 are computed in f64 with pi/2
/// split in three (P1 and P2 of 29 bits, so that k P1 and k P2 are exact for
/// |k| < 2^24; P3 the rest): r is exact to about 2^-53 for |x| <= 1e7. Two
/// short polynomials then give sin r and cos r (|r| <= pi/4 and a rounding),
/// and the quadrant (k mod 4) picks +-sin r or +-cos r. A tile with a lane beyond 1e7 (or infinite) takes the f64
/// sin/cos of every lane instead (libm on CPUs, libdevice on GPUs), behind
/// a branch that costs one comparison per tile otherwise.
template <typename MathOp>
struct ReduceSinCos : OpRewritePattern<MathOp> {
  using OpRewritePattern<MathOp>::OpRewritePattern;
  static constexpr bool isSin = std::is_same_v<MathOp, math::SinOp>;

  LogicalResult matchAndRewrite(MathOp op,
                                PatternRewriter &rewriter) const override {
    Type type = op.getType();
    auto vecType = dyn_cast<VectorType>(type);
    if (!getElementTypeOrSelf(type).isF32() ||
        (vecType && vecType.isScalable()))
      return failure();
    Location loc = op.getLoc();
    Value x = op.getOperand();
    Type f64 = rewriter.getF64Type();
    Type wide = vecType ? Type(VectorType::get(vecType.getShape(), f64)) : f64;
    auto constant = [&](Type t, double v) -> Value {
      auto attr = rewriter.getFloatAttr(getElementTypeOrSelf(t), v);
      auto vt = dyn_cast<VectorType>(t);
      return arith::ConstantOp::create(
          rewriter, loc, t,
          vt ? TypedAttr(DenseElementsAttr::get(vt, attr)) : TypedAttr(attr));
    };
    auto sub = [&](Value a, Value b) -> Value {
      return arith::SubFOp::create(rewriter, loc, a, b);
    };
    auto mul = [&](Value a, Value b) -> Value {
      return arith::MulFOp::create(rewriter, loc, a, b);
    };

    // |x| > 1e7 (or inf) anywhere in the tile: the f64 functions.
    Value big = arith::CmpFOp::create(
        rewriter, loc, arith::CmpFPredicate::OGT,
        math::AbsFOp::create(rewriter, loc, x), constant(type, 1e7));
    if (vecType) {
      auto flat = VectorType::get({vecType.getNumElements()},
                                  rewriter.getI1Type());
      big = vector::ReductionOp::create(
          rewriter, loc, vector::CombiningKind::OR,
          vector::ShapeCastOp::create(rewriter, loc, flat, big));
    }
    auto branch = scf::IfOp::create(rewriter, loc, TypeRange{type}, big,
                                    /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(rewriter);
      rewriter.setInsertionPointToStart(&branch.getThenRegion().front());
      Value xd = arith::ExtFOp::create(rewriter, loc, wide, x);
      Value y = MathOp::create(rewriter, loc, xd);
      scf::YieldOp::create(rewriter, loc,
                           arith::TruncFOp::create(rewriter, loc, type, y)
                               .getResult());

      rewriter.setInsertionPointToStart(&branch.getElseRegion().front());
      xd = arith::ExtFOp::create(rewriter, loc, wide, x);
      // rint by the 1.5 * 2^52 shift (exact for |v| < 2^51; no rounding
      // instruction needed on any target).
      Value shift = constant(wide, 0x1.8p52);
      Value k = sub(arith::AddFOp::create(
                        rewriter, loc, mul(xd, constant(wide, 0x1.45f306dc9c883p-1)),
                        shift),
                    shift);
      Value r = sub(xd, mul(k, constant(wide, 0x1.921fb54000000p+0)));
      r = sub(r, mul(k, constant(wide, 0x1.10b4611000000p-30)));
      r = sub(r, mul(k, constant(wide, 0x1.4c4c6628b80dcp-59)));
      Value rf = arith::TruncFOp::create(rewriter, loc, type, r);
      // sin r and cos r on |r| <= pi/4 (Cephes' sinf/cosf polynomials,
      // within about 6e-8 there), in f32.
      auto add = [&](Value a, Value b) -> Value {
        return arith::AddFOp::create(rewriter, loc, a, b);
      };
      auto poly = [&](Value z, std::initializer_list<double> coefficients) {
        Value acc;
        for (double c : coefficients)
          acc = acc ? add(mul(acc, z), constant(type, c)) : constant(type, c);
        return acc;
      };
      Value z = mul(rf, rf);
      Value sinR = add(rf, mul(mul(rf, z),
                               poly(z, {-1.9515295891e-4, 8.3321608736e-3,
                                        -1.6666654611e-1})));
      Value cosR = add(sub(constant(type, 1.0), mul(constant(type, 0.5), z)),
                       mul(mul(z, z),
                           poly(z, {2.443315711809948e-5, -1.388731625493765e-3,
                                    4.166664568298827e-2})));
      // The quadrant k mod 4 in f32 (k < 2^24 is exact there) as a float,
      // k - 4 floor(k / 4): float comparisons, so that a NaN k picks a NaN
      // lane rather than a poison integer conversion.
      Value kf = arith::TruncFOp::create(rewriter, loc, type, k);
      Value q = sub(kf, mul(constant(type, 4.0),
                            math::FloorOp::create(rewriter, loc,
                                                  mul(kf, constant(type, 0.25)))));
      auto is = [&](double v) -> Value {
        return arith::CmpFOp::create(rewriter, loc, arith::CmpFPredicate::OEQ,
                                     q, constant(type, v));
      };
      Value negSin = arith::NegFOp::create(rewriter, loc, sinR);
      Value negCos = arith::NegFOp::create(rewriter, loc, cosR);
      // sin(x): sin r, cos r, -sin r, -cos r; cos(x): cos r, -sin r, -cos r,
      // sin r (q = 0, 1, 2, 3).
      Value v0 = isSin ? sinR : cosR;
      Value v1 = isSin ? cosR : negSin;
      Value v2 = isSin ? negSin : negCos;
      Value v3 = isSin ? negCos : sinR;
      auto select = [&](Value c, Value a, Value b) -> Value {
        return arith::SelectOp::create(rewriter, loc, c, a, b);
      };
      Value result = select(is(0), v0, select(is(1), v1, select(is(2), v2, v3)));
      scf::YieldOp::create(rewriter, loc, result);
    }
    Value result = branch.getResult(0);
    if (isSin) {
      // sin(-0) is -0: the polynomial's -0 + (+0) gave +0.
      Value zero = arith::CmpFOp::create(rewriter, loc, arith::CmpFPredicate::OEQ, x,
                                         constant(type, 0.0));
      result = arith::SelectOp::create(rewriter, loc, zero, x, result);
    }
    rewriter.replaceOp(op, result);
    return success();
  }
};

/// f32 arithmetic of one scalar or vector type, for the Cephes patterns.
struct F32Arith {
  PatternRewriter &rewriter;
  Location loc;
  Type type;

  /// Whether `type` is f32 or a fixed-length vector of it.
  static bool applies(Type type) {
    auto vecType = dyn_cast<VectorType>(type);
    return getElementTypeOrSelf(type).isF32() && !(vecType && vecType.isScalable());
  }
  Value c(double v) const { return f32Constant(rewriter, loc, type, v); }
  Value mul(Value a, Value b) const {
    return arith::MulFOp::create(rewriter, loc, a, b);
  }
  Value add(Value a, Value b) const {
    return arith::AddFOp::create(rewriter, loc, a, b);
  }
  Value sub(Value a, Value b) const {
    return arith::SubFOp::create(rewriter, loc, a, b);
  }
  Value div(Value a, Value b) const {
    return arith::DivFOp::create(rewriter, loc, a, b);
  }
  Value select(Value cond, Value a, Value b) const {
    return arith::SelectOp::create(rewriter, loc, cond, a, b);
  }
  Value cmp(arith::CmpFPredicate pred, Value a, double v) const {
    return arith::CmpFOp::create(rewriter, loc, pred, a, c(v));
  }
  /// p(z) = c0 z^n + ... + cn (Horner).
  Value poly(Value z, std::initializer_list<double> coefficients) const {
    Value acc;
    for (double k : coefficients)
      acc = acc ? add(mul(acc, z), c(k)) : c(k);
    return acc;
  }
};

/// f32 `math.exp2` as 2^n 2^f, n = rint(x) and f = x - n (exact, |f| <=
/// 1/2): 2^f by a degree-6 polynomial (a weighted least-squares fit, within
/// 0.93 ulp on [-1/2, 1/2] with f32 coefficients), 2^n by two exponent
/// scalings of about n/2 each, so that a subnormal result is rounded once
/// and 2^128 p overflows to inf. This was exp(x ln 2): the product's rounding
/// is |x| 2^-24 relative, 35 ulp at exp2(-100), and exp2 of an integer was
/// no power of two. Same cost as MLIR's exp polynomial (one reduction).
/// NaN propagates; x is clamped to [-160, 160] first (0 and inf there).
struct Exp2Reduced : OpRewritePattern<math::Exp2Op> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(math::Exp2Op op,
                                PatternRewriter &rewriter) const override {
    if (!F32Arith::applies(op.getType()))
      return failure();
    Location loc = op.getLoc();
    Type type = op.getType();
    F32Arith f{rewriter, loc, type};
    Type i32 = rewriter.getI32Type();
    auto vecType = dyn_cast<VectorType>(type);
    Type intType = vecType ? Type(VectorType::get(vecType.getShape(), i32)) : i32;
    auto intConstant = [&](int32_t v) -> Value {
      auto attr = rewriter.getI32IntegerAttr(v);
      return arith::ConstantOp::create(
          rewriter, loc, intType,
          vecType ? TypedAttr(DenseElementsAttr::get(cast<ShapedType>(intType), attr))
                  : TypedAttr(attr));
    };
    Value x = op.getOperand();
    // (Compares and selects, cheaper than minnum/maxnum on x86. A NaN lane
    // goes through as NaN, its integer conversion poison, and takes x in
    // the last select.)
    Value xc = f.select(f.cmp(arith::CmpFPredicate::OLT, x, -160), f.c(-160), x);
    xc = f.select(f.cmp(arith::CmpFPredicate::OGT, xc, 160), f.c(160), xc);
    // rint by the 1.5 * 2^23 shift (exact for |v| < 2^22; no rounding
    // instruction needed on any target).
    Value n = f.sub(f.add(xc, f.c(0x1.8p23)), f.c(0x1.8p23));
    // Horner by llvm.fmuladd: fused where the target has FMA.
    Value fr = f.sub(xc, n), p;
    for (double k : {1.5337577497120947e-04, 1.3399859890341759e-03,
                     9.6185198053717613e-03, 5.5503290146589279e-02,
                     2.4022646248340607e-01, 6.9314718246459961e-01, 1.0})
      p = p ? LLVM::FMulAddOp::create(rewriter, loc, p, fr, f.c(k)).getResult() : f.c(k);
    Value ni = arith::FPToSIOp::create(rewriter, loc, intType, n);
    Value n1 = arith::ShRSIOp::create(rewriter, loc, ni, intConstant(1));
    Value n2 = arith::SubIOp::create(rewriter, loc, ni, n1);
    auto pow2 = [&](Value k) -> Value { // 2^k for k in [-126, 127]
      Value bits = arith::ShLIOp::create(
          rewriter, loc, arith::AddIOp::create(rewriter, loc, k, intConstant(127)),
          intConstant(23));
      return arith::BitcastOp::create(rewriter, loc, type, bits);
    };
    Value r = f.mul(f.mul(p, pow2(n1)), pow2(n2));
    rewriter.replaceOp(op, f.select(f.cmp(arith::CmpFPredicate::UNO, x, 0), x, r));
    return success();
  }
};

/// f32 `math.log`/`math.log2` of subnormal inputs: MLIR's polynomial takes
/// them as the smallest normal float (log(1e-45) gave -87.3, not -103.3;
/// log2 of every subnormal -126). Inputs below 2^-126 are scaled by 2^24
/// first and 24 ln 2 (24) taken off the result: a compare, a multiply and
/// two selects. Zero, negative inputs and -inf keep their results (-inf or
/// NaN); the new op is marked so that the pattern leaves it.
template <typename MathOp>
struct LogOfSubnormals : OpRewritePattern<MathOp> {
  using OpRewritePattern<MathOp>::OpRewritePattern;
  static constexpr llvm::StringLiteral kScaled = "kiln.subnormals_scaled";

  LogicalResult matchAndRewrite(MathOp op,
                                PatternRewriter &rewriter) const override {
    if (!F32Arith::applies(op.getType()) || op->hasAttr(kScaled))
      return failure();
    F32Arith f{rewriter, op.getLoc(), op.getType()};
    Value x = op.getOperand();
    Value tiny = f.cmp(arith::CmpFPredicate::OLT, x, 0x1p-126);
    auto log = MathOp::create(rewriter, op.getLoc(),
                              f.select(tiny, f.mul(x, f.c(0x1p24)), x));
    log->setAttr(kScaled, rewriter.getUnitAttr());
    double offset = std::is_same_v<MathOp, math::Log2Op> ? 24.0 : 24.0 * M_LN2;
    rewriter.replaceOp(op, f.select(tiny, f.sub(log, f.c(offset)), log));
    return success();
  }
};

/// f32 `math.atan` as Cephes' atanf: the argument reduced to |z| <=
/// tan(pi/8) by atan(a) = pi/4 + atan((a - 1) / (a + 1)) (a > tan(pi/8))
/// or pi/2 + atan(-1 / a) (a > tan(3pi/8)), then an odd polynomial of
/// degree 9, the sign copied back (within 3 ulp; MLIR's polynomial, over
/// the whole range at once, is off by up to 40). Branch-free: selects, so
/// that vectors take it lane by lane. NaN propagates (both comparisons are
/// false), and infinities give +-pi/2.
struct AtanCephes : OpRewritePattern<math::AtanOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(math::AtanOp op,
                                PatternRewriter &rewriter) const override {
    if (!F32Arith::applies(op.getType()))
      return failure();
    F32Arith f{rewriter, op.getLoc(), op.getType()};
    Value x = op.getOperand();
    Value a = math::AbsFOp::create(rewriter, op.getLoc(), x);
    Value big = f.cmp(arith::CmpFPredicate::OGT, a, 2.414213562373095); // tan(3pi/8)
    Value mid = f.cmp(arith::CmpFPredicate::OGT, a, 0.4142135623730950); // tan(pi/8)
    Value z = f.select(big, f.div(f.c(-1.0), a),
                       f.select(mid, f.div(f.sub(a, f.c(1.0)), f.add(a, f.c(1.0))), a));
    Value y0 = f.select(big, f.c(M_PI_2), f.select(mid, f.c(M_PI_4), f.c(0.0)));
    Value zz = f.mul(z, z);
    Value p = f.poly(zz, {8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1,
                          -3.33329491539e-1});
    p = f.add(f.mul(f.mul(p, zz), z), z);
    rewriter.replaceOpWithNewOp<math::CopySignOp>(op, f.add(y0, p), x);
    return success();
  }
};

/// f32 `math.asin` as Cephes' asinf: |x| > 1/2 by asin(a) = pi/2 -
/// 2 asin(sqrt((1 - a) / 2)), then an odd polynomial on |z| <= 1/2, the
/// sign copied back (MLIR's polynomial is off by up to 6.6 ulp).
/// Branch-free; |x| > 1 and NaN give NaN (a square root of a negative).
struct AsinCephes : OpRewritePattern<math::AsinOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(math::AsinOp op,
                                PatternRewriter &rewriter) const override {
    if (!F32Arith::applies(op.getType()))
      return failure();
    F32Arith f{rewriter, op.getLoc(), op.getType()};
    Value x = op.getOperand();
    Value a = math::AbsFOp::create(rewriter, op.getLoc(), x);
    // (UGT: a NaN takes the square-root branch, whose sqrt gives NaN.)
    Value big = f.cmp(arith::CmpFPredicate::UGT, a, 0.5);
    Value half = f.mul(f.c(0.5), f.sub(f.c(1.0), a));
    Value z = f.select(big, half, f.mul(a, a));
    Value r = f.select(big, math::SqrtOp::create(rewriter, op.getLoc(), half), a);
    Value p = f.poly(z, {4.2163199048e-2, 2.4181311049e-2, 4.5470025998e-2,
                         7.4953002686e-2, 1.6666752422e-1});
    p = f.add(f.mul(f.mul(p, z), r), r);
    Value y = f.select(big, f.sub(f.c(M_PI_2), f.add(p, p)), p);
    rewriter.replaceOpWithNewOp<math::CopySignOp>(op, y, x);
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
    // sin and cos: an exact reduction, the polynomials for what is left.
    RewritePatternSet reductions(ctx);
    reductions.add<ReduceSinCos<math::SinOp>, ReduceSinCos<math::CosOp>,
                   AtanCephes, AsinCephes, LogOfSubnormals<math::LogOp>,
                   LogOfSubnormals<math::Log2Op>>(ctx);
    if (failed(applyPatternsGreedily(getOperation(), std::move(reductions))))
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
    // erf is odd, and MLIR's polynomial gave +0 at -0: its sign is x's.
    getOperation()->walk([&](math::ErfOp op) {
      if (getElementTypeOrSelf(op.getType()).isF64())
        return;
      OpBuilder b(op);
      b.setInsertionPointAfter(op);
      auto sign = math::CopySignOp::create(b, op.getLoc(), op.getResult(), op.getOperand());
      op.getResult().replaceAllUsesExcept(sign, sign);
    });
    RewritePatternSet patterns(ctx);
    patterns.add<Exp2Reduced>(ctx);
    // (Before MLIR's atan polynomial: the atan that its atan2 builds.)
    patterns.add<AtanCephes>(ctx, /*benefit=*/2);
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
