//===- Runtime.h - The kiln_runtime object ----------------------*- C++ -*-===//
//
// The object behind the C API's kiln_runtime handle: the thread count and
// the pool that CPU launches use, and the stream GPU launches use (created on
// the first GPU launch, so a CPU-only runtime never touches the driver).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_SRC_RUNTIME_H
#define KILN_RUNTIME_SRC_RUNTIME_H

#include "ThreadPool.h"
#include "cuda/CudaKernel.h"

struct kiln_runtime {
  /// Threads a launch runs on, the launching thread included.
  int numThreads = 1;
  kiln::rt::ThreadPool pool;
  kiln::rt::cuda::RuntimeStream gpuStream;
};

#endif // KILN_RUNTIME_SRC_RUNTIME_H
