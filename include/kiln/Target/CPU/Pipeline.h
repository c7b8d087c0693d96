//===- Pipeline.h - The kiln-to-LLVM pipeline for x86-64 --------*- C++ -*-===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TARGET_CPU_PIPELINE_H
#define KILN_TARGET_CPU_PIPELINE_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

namespace mlir::kiln {

struct CPUPipelineOptions : public PassPipelineOptions<CPUPipelineOptions> {
  PassOptions::Option<unsigned> vectorBits{
      *this, "vector-bits",
      llvm::cl::desc("Vector register width in bits (512: AVX-512, 256: AVX2)"),
      llvm::cl::init(512)};
  PassOptions::Option<bool> bf16Dot{
      *this, "bf16-dot",
      llvm::cl::desc("bf16 dots on AVX512-BF16's vdpbf16ps"),
      llvm::cl::init(false)};
};

/// Builds the pipeline from kiln kernels to the LLVM dialect for x86-64. The
/// same pipeline serves kiln-opt (`--kiln-cpu-pipeline`), kilnc and the JIT.
void buildCPUPipeline(OpPassManager &pm, const CPUPipelineOptions &options);

/// Registers `kiln-cpu-pipeline` and Kiln's passes with the global registry.
void registerCPUPipeline();

/// The NVIDIA pipeline: kiln -> convert-kiln-to-gpu (SIMT code in a
/// gpu.module) -> NVVM/LLVM dialect inside the gpu.module. PTX comes from
/// LLVM's NVPTX back end (kiln::compileModule).
struct GPUPipelineOptions : public PassPipelineOptions<GPUPipelineOptions> {
  PassOptions::Option<std::string> chip{
      *this, "chip", llvm::cl::desc("GPU architecture (sm_80, sm_90a, ...)"),
      llvm::cl::init("sm_80")};
  PassOptions::Option<unsigned> numWarps{
      *this, "num-warps", llvm::cl::desc("Warps per thread block"),
      llvm::cl::init(4)};
  PassOptions::Option<unsigned> numStages{
      *this, "num-stages",
      llvm::cl::desc("Software pipelining depth of loads in loops"),
      llvm::cl::init(2)};
  PassOptions::Option<bool> tma{
      *this, "tma",
      llvm::cl::desc("sm_90a: load pipelined tiles with TMA"),
      llvm::cl::init(true)};
  PassOptions::Option<bool> hostMaps{
      *this, "host-maps",
      llvm::cl::desc("sm_90a: tensor maps encoded by the runtime at launch"),
      llvm::cl::init(true)};
  PassOptions::Option<bool> swizzle{
      *this, "swizzle",
      llvm::cl::desc("128B-swizzled wgmma operand stages (sm_90a), "
                     "XOR-swizzled mma.sync operand rows (else padded)"),
      llvm::cl::init(true)};
  PassOptions::Option<bool> fp8Wgmma{
      *this, "fp8-wgmma",
      llvm::cl::desc("sm_90a: fp8 dots on wgmma's e4m3 / e5m2 forms where "
                     "their operands allow (else decoded to bf16)"),
      llvm::cl::init(true)};
  PassOptions::Option<bool> pingpong{
      *this, "pingpong",
      llvm::cl::desc("sm_90a: warpgroups take turns issuing the wgmma "
                     "groups of attention-shaped loops"),
      llvm::cl::init(true)};
  PassOptions::Option<bool> pipelineGathers{
      *this, "pipeline-gathers",
      llvm::cl::desc("Pipeline gathers by a loaded index block"),
      llvm::cl::init(true)};
  PassOptions::Option<bool> overlap{
      *this, "overlap",
      llvm::cl::desc("sm_90a: compute the first dot of loops marked "
                     "kiln.overlap an iteration ahead"),
      llvm::cl::init(true)};
};

void buildGPUPipeline(OpPassManager &pm, const GPUPipelineOptions &options);

/// The GPU emulation pipeline (targets `emu-sm_XY`): the GPU pipeline's
/// convert-kiln-to-gpu, then kiln-emulate-gpu and the CPU pipeline's lowering
/// to the LLVM dialect. The code runs on the host under the SIMT emulator
/// (lib/Target/GPUEmu); a testing target for the GPU lowering.
using GPUEmulationPipelineOptions = GPUPipelineOptions;

void buildGPUEmulationPipeline(OpPassManager &pm,
                               const GPUEmulationPipelineOptions &options);

} // namespace mlir::kiln

#endif // KILN_TARGET_CPU_PIPELINE_H
