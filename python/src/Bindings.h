//===- Bindings.h - Pieces of the kiln Python extension ---------*- C++ -*-===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PYTHON_BINDINGS_H
#define KILN_PYTHON_BINDINGS_H

#include "kiln/runtime.h"

#include <pybind11/pybind11.h>

#include <memory>

namespace kiln {
class Kernel;
namespace python {

/// A loaded kernel as Python sees it: the runtime handle plus whatever keeps
/// it alive (a JIT kernel, or ownership of a bundle loaded from a file).
struct PyKernel {
  std::shared_ptr<void> keepAlive;
  kiln_kernel *handle = nullptr;
  kiln_runtime *runtime = nullptr;
  std::shared_ptr<kiln_runtime> ownedRuntime;
};

/// Loading and launching (no LLVM): the whole of the runtime-only module.
void bindRuntime(pybind11::module &m);
/// The IR builder and the JIT (needs the compiler).
void bindCompiler(pybind11::module &m);
/// Wraps a JIT kernel for Python.
pybind11::object wrapKernel(std::shared_ptr<kiln::Kernel> kernel,
                            kiln_runtime *runtime);

} // namespace python
} // namespace kiln

#endif // KILN_PYTHON_BINDINGS_H
