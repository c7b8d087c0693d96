//===- Kernel.h - A loaded kiln bundle --------------------------*- C++ -*-===//
//
// The object behind the C API's kiln_kernel handle: the manifest (for
// queries and argument validation) and the loaded code.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_SRC_KERNEL_H
#define KILN_RUNTIME_SRC_KERNEL_H

#include "Bundle.h"
#include "CodeLoader.h"

struct kiln_kernel {
  kiln::rt::Manifest manifest;
  kiln::rt::LoadedCode code;

  kiln_kernel() = default;
  kiln_kernel(const kiln_kernel &) = delete;
  kiln_kernel &operator=(const kiln_kernel &) = delete;
  ~kiln_kernel() { kiln::rt::unloadCode(code); }
};

#endif // KILN_RUNTIME_SRC_KERNEL_H
