//===- Module.cpp - kiln._kiln: builder, JIT and runtime -------------------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "Bindings.h"

#include "kiln/JIT/JIT.h"

namespace py = pybind11;

py::object kiln::python::wrapKernel(std::shared_ptr<kiln::Kernel> kernel,
                                    kiln_runtime *runtime) {
  PyKernel k;
  k.handle = kernel->get();
  k.runtime = runtime;
  k.keepAlive = std::move(kernel);
  return py::cast(std::move(k));
}

PYBIND11_MODULE(_kiln, m) {
  m.doc() = "Kiln: the IR builder, the JIT and the runtime";
  kiln::python::bindRuntime(m);
  kiln::python::bindCompiler(m);
}
