//===- Runtime.h - The kiln_runtime object ----------------------*- C++ -*-===//
//
// The object behind the C API's kiln_runtime handle: the thread count and
// the pool that launches use.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_SRC_RUNTIME_H
#define KILN_RUNTIME_SRC_RUNTIME_H

#include "ThreadPool.h"

struct kiln_runtime {
  /// Threads a launch runs on, the launching thread included.
  int numThreads = 1;
  kiln::rt::ThreadPool pool;
};

#endif // KILN_RUNTIME_SRC_RUNTIME_H
