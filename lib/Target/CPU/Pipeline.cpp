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
#include "mlir/IR/Matchers.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace {
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
    if (auto shaped = dyn_cast<ShapedType>(type))
      return arith::ConstantOp::create(b, loc, type,
                                       DenseElementsAttr::get(shaped, v));
    return arith::ConstantOp::create(b, loc, type, b.getIntegerAttr(type, v));
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
  arith::ArithEmulateUnsupportedFloatsOptions emulate;
  emulate.sourceTypeStrs = {"bf16", "f16"};
  emulate.targetTypeStr = "f32";
  pm.addPass(arith::createArithEmulateUnsupportedFloats(emulate));
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
  // Target-independent cleanups on the tile program (folds, in-bounds loads).
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  // Tiles to vector loops over stack buffers; the kernel ABI.
  ConvertKilnToCPUOptions lowerOptions;
  lowerOptions.vectorBits = options.vectorBits;
  pm.addPass(createConvertKilnToCPU(lowerOptions));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  addFloatLowering(pm);
  addLLVMLowering(pm);
}

/// Tile programs to SIMT code in a gpu.module (both GPU pipelines).
static void addKilnToGPU(OpPassManager &pm,
                         const kiln::GPUPipelineOptions &options) {
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  kiln::ConvertKilnToGPUOptions lowerOptions;
  lowerOptions.chip = options.chip;
  lowerOptions.numWarps = options.numWarps;
  lowerOptions.numStages = options.numStages;
  lowerOptions.tma = options.tma;
  lowerOptions.swizzle = options.swizzle;
  lowerOptions.hostMaps = options.hostMaps;
  lowerOptions.overlap = options.overlap;
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
