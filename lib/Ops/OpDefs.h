//===- OpDefs.h - Registration of the operator families --------*- C++ -*-===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_OPS_OPDEFS_H
#define KILN_LIB_OPS_OPDEFS_H

#include "kiln/Ops/KernelBuilder.h"
#include "kiln/Ops/Ops.h"

namespace kiln::ops {

void registerGatherOps(std::vector<OpInfo> &ops);
void registerAttentionOps(std::vector<OpInfo> &ops);
void registerDSAOps(std::vector<OpInfo> &ops);
void registerConvOps(std::vector<OpInfo> &ops);

/// The element type named by a `dtype` parameter (f32, bf16, f16).
mlir::Type elementType(mlir::MLIRContext *ctx, const std::string &name);

/// Adds the number of set lanes of `bad` (an i1 tile) to errors[0], with
/// one atomic add, only when `when` (an i1 scalar, or null) holds and the
/// count is not zero: the gathers' out-of-range index count.
void countErrors(KernelBuilder &k, mlir::Value bad, mlir::Value errorsPtr,
                 mlir::Value when = nullptr);

/// Adds the sum of `counts` (an i32 tile of per-lane counts) to errors[0]
/// under the same conditions as countErrors.
void addErrorCounts(KernelBuilder &k, mlir::Value counts, mlir::Value errorsPtr,
                    mlir::Value when = nullptr);

inline Param dtypeParam() {
  return {"dtype", Param::String, "f32", "element type of the data",
          {"f32", "bf16", "f16"}};
}

} // namespace kiln::ops

#endif // KILN_LIB_OPS_OPDEFS_H
