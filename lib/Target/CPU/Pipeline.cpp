//===- Pipeline.cpp - The kiln-to-LLVM pipeline for x86-64 -----------------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "kiln/Target/CPU/Pipeline.h"
#include "kiln/Conversion/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace {
/// A constant of `type` (a scalar, or a shaped type splatting it) holding
/// the element attribute `element`.
Value splatConstant(OpBuilder &b, Location loc, Type type, TypedAttr element) {
  if (auto shaped = dyn_cast<ShapedType>(type))
    return arith::ConstantOp::create(b, loc, type,
                                     DenseElementsAttr::get(shaped, element));
  return arith::ConstantOp::create(b, loc, type, element);
}

/// x86's integer division traps (SIGFPE) on a zero divisor and on INT_MIN /
/// -1, in every lane of a vector division, masked-off lanes included: a
/// ragged kernel whose padding lanes load 0 (`x % y` under `mask=`) killed
/// the process. GPUs return an unspecified value there instead, and so does
/// this: such lanes divide by 1 (INT_MIN / -1 gives INT_MIN, its wrapped
/// value). Divisions by a constant other than 0 (and -1, when signed) are
/// left alone.
struct GuardIntegerDivision
    : PassWrapper<GuardIntegerDivision, OperationPass<>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(GuardIntegerDivision)
  StringRef getArgument() const final { return "kiln-guard-integer-division"; }
  StringRef getDescription() const final {
    return "Divide by 1 where an integer division would trap on the host";
  }

  static Value splat(OpBuilder &b, Location loc, Type type, const APInt &v) {
    return splatConstant(b, loc, type, b.getIntegerAttr(getElementTypeOrSelf(type), v));
  }

  void runOnOperation() override {
    SmallVector<Operation *> divisions;
    getOperation()->walk([&](Operation *op) {
      if (isa<arith::DivSIOp, arith::DivUIOp, arith::RemSIOp, arith::RemUIOp>(op))
        divisions.push_back(op);
    });
    for (Operation *op : divisions) {
      bool isSigned = isa<arith::DivSIOp, arith::RemSIOp>(op);
      Value lhs = op->getOperand(0), rhs = op->getOperand(1);
      APInt c;
      if (matchPattern(rhs, m_ConstantInt(&c)) && !c.isZero() &&
          !(isSigned && c.isAllOnes()))
        continue;
      OpBuilder b(op);
      Location loc = op->getLoc();
      Type type = rhs.getType();
      Type element = getElementTypeOrSelf(type);
      unsigned width = element.isIndex() ? IndexType::kInternalStorageBitWidth
                                         : element.getIntOrFloatBitWidth();
      Value one = splat(b, loc, type, APInt(width, 1));
      Value bad = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, rhs,
                                        splat(b, loc, type, APInt(width, 0)));
      if (isSigned) {
        Value minusOne = arith::CmpIOp::create(
            b, loc, arith::CmpIPredicate::eq, rhs,
            splat(b, loc, type, APInt::getAllOnes(width)));
        Value min = arith::CmpIOp::create(
            b, loc, arith::CmpIPredicate::eq, lhs,
            splat(b, loc, type, APInt::getSignedMinValue(width)));
        bad = arith::OrIOp::create(b, loc, bad,
                                   arith::AndIOp::create(b, loc, minusOne, min));
      }
      op->setOperand(1, arith::SelectOp::create(b, loc, bad, one, rhs));
    }
  }
};

/// Float to integer conversions saturate, NaN giving 0, on every target (what
/// the GPUs' cvt.rzi does). arith.fptosi/fptoui are poison where the
/// truncated value does not fit: 300.7 to i8 gave 44 in a 4-wide tile and
/// 127 in a 64-wide one on x86, garbage on the emulator, and the canonicalizer
/// deleted the store of a folded out-of-range constant. Runs first in every
/// pipeline, on the program's own conversions (the front ends, kilnc's IR and
/// the operator library emit plain ones); the in-range conversions the math
/// approximations create later are left alone.
struct SaturateFloatToInt
    : PassWrapper<SaturateFloatToInt, OperationPass<>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(SaturateFloatToInt)
  StringRef getArgument() const final { return "kiln-saturate-float-to-int"; }
  StringRef getDescription() const final {
    return "Make float to integer conversions saturate, NaN to 0";
  }

  /// The conversion of `x` to `to`, clamped to [lo, hi]: the integer type's
  /// bounds rounded toward zero into x's format (2^(w-1) - 1 is not an f32;
  /// 2^31 - 1 is above f16's largest finite value), with a select to the
  /// bound where rounding moved it, and one for NaN.
  static Value saturate(OpBuilder &b, Location loc, Value x, Type to,
                        bool isSigned) {
    auto floatType = cast<FloatType>(getElementTypeOrSelf(x.getType()));
    Type intType = getElementTypeOrSelf(to);
    unsigned width = intType.getIntOrFloatBitWidth();
    APInt minInt = isSigned ? APInt::getSignedMinValue(width) : APInt(width, 0);
    APInt maxInt = isSigned ? APInt::getSignedMaxValue(width)
                            : APInt::getMaxValue(width);
    const llvm::fltSemantics &sem = floatType.getFloatSemantics();
    // In width + 1 signed bits, which hold both bounds of either signedness.
    auto towardZero = [&](const APInt &bound, bool &isExact) {
      APSInt v(isSigned ? bound.sext(width + 1) : bound.zext(width + 1),
               /*isUnsigned=*/false);
      APFloat f(sem);
      f.convertFromAPInt(v, /*IsSigned=*/true, APFloat::rmTowardZero);
      APSInt back(width + 1, /*isUnsigned=*/false);
      bool ignored;
      isExact = f.convertToInteger(back, APFloat::rmTowardZero, &ignored) ==
                    APFloat::opOK && back == v;
      return f;
    };
    bool hiIsMax = false, loIsMin = false;
    APFloat hi = towardZero(maxInt, hiIsMax), lo = towardZero(minInt, loIsMin);
    Type type = x.getType();
    Value loF = splatConstant(b, loc, type, b.getFloatAttr(floatType, lo));
    Value hiF = splatConstant(b, loc, type, b.getFloatAttr(floatType, hi));
    Value clamped = arith::MinNumFOp::create(
        b, loc, arith::MaxNumFOp::create(b, loc, x, loF), hiF);
    Value i = isSigned ? Value(arith::FPToSIOp::create(b, loc, to, clamped))
                       : Value(arith::FPToUIOp::create(b, loc, to, clamped));
    auto intConst = [&](const APInt &v) {
      return splatConstant(b, loc, to, b.getIntegerAttr(intType, v));
    };
    auto cmp = [&](arith::CmpFPredicate p, Value y) {
      return arith::CmpFOp::create(b, loc, p, x, y);
    };
    if (!hiIsMax)
      i = arith::SelectOp::create(b, loc, cmp(arith::CmpFPredicate::OGT, hiF),
                                  intConst(maxInt), i);
    if (!loIsMin)
      i = arith::SelectOp::create(b, loc, cmp(arith::CmpFPredicate::OLT, loF),
                                  intConst(minInt), i);
    return arith::SelectOp::create(b, loc, cmp(arith::CmpFPredicate::UNO, x),
                                   intConst(APInt(width, 0)), i);
  }

  void runOnOperation() override {
    SmallVector<Operation *> conversions;
    getOperation()->walk([&](Operation *op) {
      if (isa<arith::FPToSIOp, arith::FPToUIOp>(op))
        conversions.push_back(op);
    });
    for (Operation *op : conversions) {
      OpBuilder b(op);
      Value r = saturate(b, op->getLoc(), op->getOperand(0),
                         op->getResult(0).getType(), isa<arith::FPToSIOp>(op));
      op->getResult(0).replaceAllUsesWith(r);
      op->erase();
    }
  }
};

/// f64 -> f16/bf16 truncations: x86 has no instruction, and LLVM calls
/// compiler-rt's __truncdfhf2/__truncdfbf2, which the kernel loader does not
/// provide (the launch failed on an undefined symbol). Rounded in two steps
/// that give the correctly rounded result: to f32 with round-to-odd (a
/// rounding-to-nearest result that was inexact is moved toward zero if it
/// went away from it, and its last bit set), then to the 16-bit type, which
/// has far fewer bits than f32's 24.
struct ExpandF64ToHalf : PassWrapper<ExpandF64ToHalf, OperationPass<>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(ExpandF64ToHalf)
  /// GPUs: only the integers' route through f64 and round-to-odd f32 (sm_80
  /// ran cvt.rn.f32.s32 then cvt.rn.bf16.f32, rounding twice; a truncation
  /// from f64 left for the GPU was folded back into that). Their other
  /// f64 -> bf16 truncations are their own.
  explicit ExpandF64ToHalf(bool intsOnly = false) : intsOnly(intsOnly) {}
  bool intsOnly;
  StringRef getArgument() const final { return "kiln-expand-f64-to-half"; }
  StringRef getDescription() const final {
    return "Round f64 to f16/bf16 through f32 with round-to-odd";
  }

  void runOnOperation() override {
    // Integers of more than 24 bits to bf16 (the canonicalizer folds the
    // front end's int -> f64 -> bf16 into one sitofp): through f64 and the
    // truncation below. Emulated in f32 they were rounded twice
    // (2^24 + 2^16 + 1 gave 0x4B80, not 0x4B81). Exact for i32. An i64
    // past 2^53 is first rounded to odd at 2^11 (its bits below 2^11 made a
    // sticky bit), which f64 holds exactly: bf16's rounding bit of such a
    // value is far above it.
    SmallVector<Operation *> intToBF16;
    getOperation()->walk([&](Operation *op) {
      if (!isa<arith::SIToFPOp, arith::UIToFPOp>(op))
        return;
      Type in = getElementTypeOrSelf(op->getOperand(0).getType());
      if (getElementTypeOrSelf(op->getResult(0).getType()).isBF16() &&
          in.getIntOrFloatBitWidth() > 24)
        intToBF16.push_back(op);
    });
    SmallVector<arith::TruncFOp> truncs;
    for (Operation *op : intToBF16) {
      OpBuilder b(op);
      Type type = op->getResult(0).getType();
      Location loc = op->getLoc();
      Type f64 = b.getF64Type();
      if (auto shaped = dyn_cast<ShapedType>(type))
        f64 = shaped.clone(f64);
      bool isSigned = isa<arith::SIToFPOp>(op);
      Value in = op->getOperand(0);
      unsigned width = getElementTypeOrSelf(in.getType()).getIntOrFloatBitWidth();
      if (width > 53) {
        // y = the odd one of x's two neighbouring multiples of 2^11 where x
        // is not one (round-to-odd), kept only where |x| > 2^53.
        Type inType = in.getType();
        auto c = [&](const APInt &v) -> Value {
          if (auto shaped = dyn_cast<ShapedType>(inType))
            return arith::ConstantOp::create(b, loc, inType,
                                             DenseElementsAttr::get(shaped, v));
          return arith::ConstantOp::create(b, loc, inType, b.getIntegerAttr(inType, v));
        };
        Value low = c(APInt(width, 0x7FF)), zero = c(APInt(width, 0));
        Value sticky = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne,
                                             arith::AndIOp::create(b, loc, in, low), zero);
        Value odd = arith::OrIOp::create(
            b, loc, arith::AndIOp::create(b, loc, in, c(~APInt(width, 0x7FF))),
            c(APInt(width, 0x800)));
        Value folded = arith::SelectOp::create(b, loc, sticky, odd, in);
        APInt limit = APInt::getOneBitSet(width, 53);
        Value small =
            isSigned ? arith::CmpIOp::create(
                           b, loc, arith::CmpIPredicate::ule,
                           arith::AddIOp::create(b, loc, in, c(limit)),
                           c(limit.shl(1)))
                           .getResult()
                     : arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ule, in,
                                             c(limit))
                           .getResult();
        in = arith::SelectOp::create(b, loc, small, op->getOperand(0), folded);
      }
      Value wide =
          isSigned ? arith::SIToFPOp::create(b, loc, f64, in).getResult()
                   : arith::UIToFPOp::create(b, loc, f64, in).getResult();
      auto trunc = arith::TruncFOp::create(b, loc, type, wide);
      op->getResult(0).replaceAllUsesWith(trunc.getResult());
      op->erase();
      if (intsOnly)
        truncs.push_back(trunc);
    }
    if (!intsOnly)
      getOperation()->walk([&](arith::TruncFOp op) {
        Type in = getElementTypeOrSelf(op.getIn().getType());
        Type out = getElementTypeOrSelf(op.getType());
        if (in.isF64() && (out.isF16() || out.isBF16()))
          truncs.push_back(op);
      });
    for (arith::TruncFOp op : truncs) {
      OpBuilder b(op);
      Location loc = op.getLoc();
      Value x = op.getIn();
      auto like = [&](Type element) -> Type {
        if (auto shaped = dyn_cast<ShapedType>(x.getType()))
          return shaped.clone(element);
        return element;
      };
      Type f32 = like(b.getF32Type()), i32 = like(b.getI32Type());
      auto c32 = [&](uint32_t v) -> Value {
        if (auto shaped = dyn_cast<ShapedType>(i32))
          return arith::ConstantOp::create(
              b, loc, i32, DenseElementsAttr::get(shaped, APInt(32, v)));
        return arith::ConstantOp::create(b, loc, i32, b.getI32IntegerAttr(v));
      };
      Value t = arith::TruncFOp::create(b, loc, f32, x);
      Value back = arith::ExtFOp::create(b, loc, x.getType(), t);
      Value inexact =
          arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNE, back, x);
      Value awayFromZero = arith::CmpFOp::create(
          b, loc, arith::CmpFPredicate::OGT, math::AbsFOp::create(b, loc, back),
          math::AbsFOp::create(b, loc, x));
      Value bits = arith::BitcastOp::create(b, loc, i32, t);
      bits = arith::SelectOp::create(
          b, loc, arith::AndIOp::create(b, loc, inexact, awayFromZero),
          arith::SubIOp::create(b, loc, bits, c32(1)), bits);
      bits = arith::SelectOp::create(b, loc, inexact,
                                     arith::OrIOp::create(b, loc, bits, c32(1)),
                                     bits);
      Value odd = arith::BitcastOp::create(b, loc, f32, bits);
      op.getInMutable().assign(odd);
    }
  }
};

/// bf16/f16 arithmetic computed in f32 keeps each operation's rounding:
/// arith-emulate-unsupported-floats marks its extf/truncf pairs `contract`,
/// and the canonicalizer then folds extf(truncf(x)) to x, so a chain of
/// 16-bit operations ran in f32 with one rounding at the end ((x + 1) - 1
/// was x for x = 2^-12 in f16, not 0) and a result depended on whether an
/// intermediate value was also stored.
struct KeepHalfRounding : PassWrapper<KeepHalfRounding, OperationPass<>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(KeepHalfRounding)
  StringRef getArgument() const final { return "kiln-keep-half-rounding"; }
  StringRef getDescription() const final {
    return "Round emulated bf16/f16 arithmetic after every operation";
  }
  void runOnOperation() override {
    getOperation()->walk([](Operation *op) {
      if (!isa<arith::ExtFOp, arith::TruncFOp>(op))
        return;
      auto fmf = cast<arith::ArithFastMathInterface>(op);
      if (fmf.getFastMathFlagsAttr() &&
          bitEnumContainsAny(fmf.getFastMathFlagsAttr().getValue(),
                             arith::FastMathFlags::contract))
        op->setAttr(fmf.getFastMathAttrName(),
                    arith::FastMathFlagsAttr::get(op->getContext(),
                                                  arith::FastMathFlags::none));
    });
  }
};

/// math.erf on f64 has no polynomial (MLIR approximates f32 only) and no
/// LLVM intrinsic: the translation to LLVM IR failed. It calls libm's erf
/// per element, as LLVM does for f64 sin or exp (the kernel is linked
/// without libraries; the loading process provides libm).
struct ErfF64ToLibm : PassWrapper<ErfF64ToLibm, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(ErfF64ToLibm)
  StringRef getArgument() const final { return "kiln-erf-f64-to-libm"; }
  StringRef getDescription() const final {
    return "Call libm's erf for f64 math.erf";
  }
  void getDependentDialects(DialectRegistry &registry) const override {
    registry.insert<func::FuncDialect, vector::VectorDialect>();
  }

  void runOnOperation() override {
    SmallVector<math::ErfOp> erfs;
    getOperation()->walk([&](math::ErfOp op) {
      if (getElementTypeOrSelf(op.getType()).isF64())
        erfs.push_back(op);
    });
    if (erfs.empty())
      return;
    ModuleOp module = getOperation();
    OpBuilder mb = OpBuilder::atBlockBegin(module.getBody());
    Type f64 = mb.getF64Type();
    auto fnType = mb.getFunctionType({f64}, {f64});
    auto fn = module.lookupSymbol<func::FuncOp>("erf");
    if (!fn) {
      fn = func::FuncOp::create(mb, module.getLoc(), "erf", fnType);
      fn.setPrivate();
    } else if (fn.getFunctionType() != fnType) {
      module.emitError("a function named 'erf' with another signature");
      return signalPassFailure();
    }
    for (math::ErfOp op : erfs) {
      OpBuilder b(op);
      Location loc = op.getLoc();
      auto call = [&](Value x) {
        return func::CallOp::create(b, loc, fn, ValueRange{x}).getResult(0);
      };
      auto vec = dyn_cast<VectorType>(op.getType());
      if (!vec) {
        op.replaceAllUsesWith(call(op.getOperand()));
        op.erase();
        continue;
      }
      int64_t n = vec.getNumElements();
      auto flat = VectorType::get({n}, f64);
      Value in = vector::ShapeCastOp::create(b, loc, flat, op.getOperand());
      Value out = in;
      for (int64_t i = 0; i < n; ++i) {
        Value e = vector::ExtractOp::create(b, loc, in, ArrayRef<int64_t>{i});
        out = vector::InsertOp::create(b, loc, call(e), out, ArrayRef<int64_t>{i});
      }
      op.replaceAllUsesWith(vector::ShapeCastOp::create(b, loc, vec, out).getResult());
      op.erase();
    }
  }
};
} // namespace

/// Shared by both targets: transcendentals as polynomials, and bf16/f16
/// computed in f32 with the bf16 conversions expanded into integer ops (x86
/// without AVX512-BF16 would call libgcc for them).
///
/// For NVIDIA GPUs (`nvvm`), exp is the special-function unit's ex2, and
/// NaN-propagating max/min and the bf16 conversions stay single instructions
/// (max.NaN.f32, cvt.rn.bf16x2.f32; sm_80 and newer) instead of expansions.
static void addFloatLowering(OpPassManager &pm, bool nvvm = false) {
  kiln::KilnApproximateMathOptions approx;
  approx.nvvmEx2 = nvvm;
  pm.addPass(kiln::createKilnApproximateMath(approx));
  if (!nvvm) {
    // Math on bf16/f16 that has no f32 expansion above (floor, ceil, ...)
    // computed in f32: LLVM would otherwise round its result back with a
    // compiler-rt call the kernel loader does not provide.
    pm.addPass(math::createMathExtendToSupportedTypes());
    pm.addPass(std::make_unique<ExpandF64ToHalf>());
    pm.addPass(std::make_unique<ErfF64ToLibm>());
  } else {
    pm.addPass(std::make_unique<ExpandF64ToHalf>(/*intsOnly=*/true));
  }
  arith::ArithEmulateUnsupportedFloatsOptions emulate;
  emulate.sourceTypeStrs = {"bf16", "f16"};
  emulate.targetTypeStr = "f32";
  pm.addPass(arith::createArithEmulateUnsupportedFloats(emulate));
  pm.addPass(std::make_unique<KeepHalfRounding>());
  if (nvvm) {
    pm.addPass(kiln::createKilnExpandArithForNVVM());
    return;
  }
  arith::ArithExpandOpsPassOptions expand;
  expand.includeBf16 = true;
  pm.addPass(arith::createArithExpandOpsPass(expand));
  // After the expansion, which turns floordivsi/ceildivsi into divisions.
  pm.addPass(std::make_unique<GuardIntegerDivision>());
}

/// Host code from scf/memref/vector/arith/math/func to the LLVM dialect.
static void addLLVMLowering(OpPassManager &pm) {
  // Standard lowering to the LLVM dialect.
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(createConvertVectorToLLVMPass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertIndexToLLVMPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  pm.addPass(createCanonicalizerPass());
}

void kiln::buildCPUPipeline(OpPassManager &pm,
                            const CPUPipelineOptions &options) {
  pm.addPass(std::make_unique<SaturateFloatToInt>());
  // Target-independent cleanups on the tile program (folds, in-bounds loads,
  // views made once before the loops that use them).
  pm.addPass(createCanonicalizerPass());
  pm.addPass(kiln::createKilnHoistInvariants());
  pm.addPass(createCSEPass());
  // Tiles to vector loops over stack buffers; the kernel ABI.
  ConvertKilnToCPUOptions lowerOptions;
  lowerOptions.vectorBits = options.vectorBits;
  lowerOptions.bf16Dot = options.bf16Dot;
  pm.addPass(createConvertKilnToCPU(lowerOptions));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  addFloatLowering(pm);
  addLLVMLowering(pm);
}

/// Tile programs to SIMT code in a gpu.module (both GPU pipelines).
static void addKilnToGPU(OpPassManager &pm,
                         const kiln::GPUPipelineOptions &options) {
  pm.addPass(std::make_unique<SaturateFloatToInt>());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(kiln::createKilnHoistInvariants());
  pm.addPass(createCSEPass());
  kiln::ConvertKilnToGPUOptions lowerOptions;
  lowerOptions.chip = options.chip;
  lowerOptions.numWarps = options.numWarps;
  lowerOptions.numStages = options.numStages;
  lowerOptions.tma = options.tma;
  lowerOptions.swizzle = options.swizzle;
  lowerOptions.hostMaps = options.hostMaps;
  lowerOptions.overlap = options.overlap;
  lowerOptions.pipelineGathers = options.pipelineGathers;
  lowerOptions.fp8Wgmma = options.fp8Wgmma;
  lowerOptions.pingpong = options.pingpong;
  pm.addPass(kiln::createConvertKilnToGPU(lowerOptions));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void kiln::buildGPUPipeline(OpPassManager &pm,
                            const GPUPipelineOptions &options) {
  addKilnToGPU(pm, options);
  addFloatLowering(pm, /*nvvm=*/true);
  OpPassManager &gm = pm.nest<gpu::GPUModuleOp>();
  gm.addPass(createConvertNVGPUToNVVMPass());
  gm.addPass(memref::createExpandStridedMetadataPass());
  gm.addPass(createLowerAffinePass());
  gm.addPass(createSCFToControlFlowPass());
  ConvertGpuOpsToNVVMOpsOptions nvvm;
  nvvm.useBarePtrCallConv = true;
  nvvm.indexBitwidth = 64;
  gm.addPass(createConvertGpuOpsToNVVMOps(nvvm));
  // NVVM ops without an LLVM intrinsic (wgmma.mma_async) as inline PTX.
  gm.addPass(createConvertNVVMToLLVMPass());
  gm.addPass(createCanonicalizerPass());
  gm.addPass(createCSEPass());
  gm.addPass(createReconcileUnrealizedCastsPass());
}

void kiln::buildGPUEmulationPipeline(
    OpPassManager &pm, const GPUEmulationPipelineOptions &options) {
  addKilnToGPU(pm, options);
  pm.addPass(createEmulateGPU());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  addFloatLowering(pm);
  addLLVMLowering(pm);
}

void kiln::registerCPUPipeline() {
  registerKilnPasses();
  PassPipelineRegistration<CPUPipelineOptions>(
      "kiln-cpu-pipeline",
      "Lower kiln kernels to the LLVM dialect for x86-64 CPUs",
      buildCPUPipeline);
  PassPipelineRegistration<GPUPipelineOptions>(
      "kiln-gpu-pipeline",
      "Lower kiln kernels to NVVM/LLVM inside a gpu.module for NVIDIA GPUs",
      buildGPUPipeline);
  PassPipelineRegistration<GPUEmulationPipelineOptions>(
      "kiln-gpu-emulation-pipeline",
      "Lower kiln kernels through the GPU lowering to host code for the SIMT "
      "emulator (testing)",
      buildGPUEmulationPipeline);
}
