//===- Kernel.h - A loaded kiln bundle --------------------------*- C++ -*-===//
//
// The object behind the C API's kiln_kernel handle: the manifest (for
// queries and argument validation) and the loaded code: a shared object for
// CPU targets, a CUDA module for GPU targets (gpu.function non-NULL).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_SRC_KERNEL_H
#define KILN_RUNTIME_SRC_KERNEL_H

#include "Bundle.h"
#include "CodeLoader.h"
#include "cuda/CudaKernel.h"

struct kiln_kernel {
  kiln::rt::Manifest manifest;
  kiln::rt::LoadedCode code;
  kiln::rt::cuda::GpuCode gpu;

  kiln_kernel() = default;
  kiln_kernel(const kiln_kernel &) = delete;
  kiln_kernel &operator=(const kiln_kernel &) = delete;
  ~kiln_kernel() {
    kiln::rt::unloadCode(code);
    kiln::rt::cuda::unloadGpuCode(gpu);
  }

  bool isGpu() const { return gpu.function != nullptr; }
};

#endif // KILN_RUNTIME_SRC_KERNEL_H
