//===- Kiln.h - The kiln tile dialect ---------------------------*- C++ -*-===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The kiln dialect: its types (!kiln.ptr, !kiln.view), enums and operations.
// Include this one header to use the dialect from C++.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KILN_IR_KILN_H
#define KILN_DIALECT_KILN_IR_KILN_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/CallInterfaces.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "kiln/Dialect/Kiln/IR/KilnDialect.h.inc"
#include "kiln/Dialect/Kiln/IR/KilnEnums.h.inc"

#define GET_TYPEDEF_CLASSES
#include "kiln/Dialect/Kiln/IR/KilnTypes.h.inc"

#define GET_OP_CLASSES
#include "kiln/Dialect/Kiln/IR/KilnOps.h.inc"

namespace mlir::kiln {
/// The runtime's name (docs/bundle-format.md) for the type of a kernel
/// argument or pointee: f32, bf16, i64 (also for index), ...; empty when the
/// runtime cannot pass it.
std::string runtimeDTypeName(Type type);
} // namespace mlir::kiln

#endif // KILN_DIALECT_KILN_IR_KILN_H
