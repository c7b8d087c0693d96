//===- RuntimeModule.cpp - kiln._kiln_runtime: runtime only ----------------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "Bindings.h"

PYBIND11_MODULE(_kiln_runtime, m) {
  m.doc() = "Kiln runtime only: load and launch precompiled bundles (no LLVM)";
  kiln::python::bindRuntime(m);
}
