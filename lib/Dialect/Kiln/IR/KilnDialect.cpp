//===- KilnDialect.cpp - The kiln dialect and its types --------------------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/Kiln.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::kiln;

#include "kiln/Dialect/Kiln/IR/KilnDialect.cpp.inc"
#include "kiln/Dialect/Kiln/IR/KilnEnums.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "kiln/Dialect/Kiln/IR/KilnTypes.cpp.inc"

void KilnDialect::initialize() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "kiln/Dialect/Kiln/IR/KilnTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "kiln/Dialect/Kiln/IR/KilnOps.cpp.inc"
      >();
}

Operation *KilnDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                            Type type, Location loc) {
  return arith::ConstantOp::materialize(builder, value, type, loc);
}

/// Memory holds numbers: the element types a pointer or view may have.
static bool isMemoryElementType(Type type) {
  return isa<IntegerType, FloatType, IndexType>(type);
}

LogicalResult PtrType::verify(function_ref<InFlightDiagnostic()> emitError,
                              Type elementType) {
  if (!isMemoryElementType(elementType))
    return emitError() << "pointer element type must be an integer, index or "
                          "floating-point type, got "
                       << elementType;
  return success();
}

LogicalResult ViewType::verify(function_ref<InFlightDiagnostic()> emitError,
                               unsigned rank, Type elementType) {
  if (rank < 1 || rank > 8)
    return emitError() << "view rank must be between 1 and 8, got " << rank;
  if (!isMemoryElementType(elementType))
    return emitError() << "view element type must be an integer, index or "
                          "floating-point type, got "
                       << elementType;
  return success();
}

// !kiln.view<2xf32>: the rank, then the element type, in the dimension-list
// syntax of the builtin shaped types.
Type ViewType::parse(AsmParser &parser) {
  SmallVector<int64_t> dims;
  Type elementType;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseLess() ||
      parser.parseDimensionList(dims, /*allowDynamic=*/false) ||
      parser.parseType(elementType) || parser.parseGreater())
    return {};
  if (dims.size() != 1) {
    parser.emitError(loc, "expected a view type as '<RANKxTYPE>', e.g. "
                          "!kiln.view<2xf32>");
    return {};
  }
  if (dims[0] < 1 || dims[0] > 8) {
    parser.emitError(loc) << "view rank must be between 1 and 8, got "
                          << dims[0];
    return {};
  }
  return getChecked([&] { return parser.emitError(loc); },
                    parser.getContext(), static_cast<unsigned>(dims[0]),
                    elementType);
}

void ViewType::print(AsmPrinter &printer) const {
  printer << "<" << getRank() << "x" << getElementType() << ">";
}

std::string mlir::kiln::runtimeDTypeName(Type t) {
  if (t.isIndex())
    return "i64";
  if (t.isBF16())
    return "bf16";
  if (t.isF16())
    return "f16";
  if (t.isF32())
    return "f32";
  if (t.isF64())
    return "f64";
  if (auto it = dyn_cast<IntegerType>(t)) {
    if (it.isUnsigned() && it.getWidth() == 8)
      return "u8";
    // The widths the runtime passes (i4 or i128 would make a bundle it
    // refuses to load).
    if (llvm::is_contained({1u, 8u, 16u, 32u, 64u}, it.getWidth()))
      return "i" + std::to_string(it.getWidth());
  }
  return "";
}
