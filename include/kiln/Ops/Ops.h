//===- Ops.h - The operator library: kiln kernels from configurations ----===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Each operator is a C++ generator of one kiln kernel from a configuration
// (tile sizes, head dims, mask kinds, ...). The registry makes every operator
// reachable by name from C++ (buildOp / the JIT), Python (kiln.ops) and the
// CLI (`kilnc op NAME --key value`). docs/ops.md describes each operator's
// semantics, arguments and launch grid.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_OPS_OPS_H
#define KILN_OPS_OPS_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace kiln::ops {

class KernelBuilder;

/// One configuration key of an operator.
struct Param {
  std::string name;
  enum Kind { Int, Float, String } kind;
  std::string defaultValue; // empty: required
  std::string help;
  std::vector<std::string> choices; // for String params; empty: free
};

/// A validated configuration: every declared parameter has a value.
class Config {
public:
  int64_t getInt(const std::string &name) const;
  double getFloat(const std::string &name) const;
  const std::string &getString(const std::string &name) const;
  std::map<std::string, std::string> values;
  /// Integer kernel arguments fixed at compile time (`static.NAME=VALUE`):
  /// the kernel keeps its signature but uses the constant, so a chosen set of
  /// shapes can be specialized (folded bounds checks, constant loop trips).
  std::map<std::string, int64_t> statics;
  /// User functions fused into the kernel (e.g. `func.func @mask_mod` and
  /// `func.func @score_mod` for attention), or null. Not owned.
  mlir::ModuleOp mods;
  /// The function `name` of `mods`, or null.
  mlir::Operation *lookupMod(llvm::StringRef name) const;
};

struct OpInfo {
  std::string name;
  std::string summary;
  std::vector<Param> params;
  /// Builds the kernel (named `name`) into `module`.
  std::function<llvm::Error(mlir::ModuleOp, const Config &)> build;
};

/// All operators, in a stable order.
const std::vector<OpInfo> &registry();
const OpInfo *lookup(llvm::StringRef name);

/// Checks `given` against the operator's parameters (unknown keys, bad
/// numbers, choices) and fills in defaults.
llvm::Expected<Config> makeConfig(const OpInfo &op,
                                  const std::map<std::string, std::string> &given);

/// Builds the operator's kernel into a new module (verified).
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
buildOp(mlir::MLIRContext &context, llvm::StringRef name,
        const std::map<std::string, std::string> &config,
        llvm::StringRef modsSource = "");

/// The operator's kernel as kiln IR text (what the JIT compiles).
llvm::Expected<std::string>
buildOpSource(llvm::StringRef name,
              const std::map<std::string, std::string> &config,
              llvm::StringRef modsSource = "");

/// Inlines the single-block function `fn` (a func.func) at the builder's
/// insertion point with `args`; returns what it returns.
llvm::Expected<llvm::SmallVector<mlir::Value>>
inlineFunction(KernelBuilder &builder, mlir::Operation *fn,
               mlir::ValueRange args);

// --- Hooks for user code fused into attention ----------------------------------

/// Called per score tile inside the block-sparse attention kernel:
/// (builder, scores [BM, BN] f32, batch, head, q_idx [BM, 1] i32,
///  kv_idx [1, BN] i32) -> new scores / a keep mask [BM, BN] i1.
using ScoreMod = std::function<mlir::Value(KernelBuilder &, mlir::Value,
                                           mlir::Value, mlir::Value,
                                           mlir::Value, mlir::Value)>;
using MaskMod = std::function<mlir::Value(KernelBuilder &, mlir::Value,
                                          mlir::Value, mlir::Value,
                                          mlir::Value)>;

/// Block-sparse attention with user mask_mod / score_mod callbacks fused into
/// the kernel (the registered operator uses the built-in masks).
llvm::Error buildBlockSparseAttention(mlir::ModuleOp module,
                                      const Config &config,
                                      const MaskMod &maskMod,
                                      const ScoreMod &scoreMod);

// --- Host-side helpers ------------------------------------------------------------

/// FlexAttention-style block mask from a mask predicate over (q, kv)
/// positions: per (batch*head, query block), the key blocks that are partly
/// visible (kv_num/kv_idx, the mask applies) and fully visible
/// (full_num/full_idx, the mask is skipped). Lists are padded with -1.
/// Query blocks have `blockQ` rows and key blocks `blockKV` keys: the
/// kernel's `block` and `block_kv` (0: `blockQ`, as the kernel's config).
/// An error for negative sizes, a block below 1, or lists past 2^31 entries
/// (the sizes are checked before anything is allocated).
struct BlockMask {
  int64_t numQBlocks = 0, maxBlocks = 0;
  std::vector<int32_t> kvNum, kvIdx, fullNum, fullIdx;
};
using Visible = std::function<bool(int64_t bh, int64_t q, int64_t kv)>;
llvm::Expected<BlockMask> makeBlockMask(int64_t batchHeads, int64_t seqQ, int64_t seqKV,
                                        int64_t blockQ, int64_t blockKV,
                                        const Visible &visible);
/// Square blocks.
inline llvm::Expected<BlockMask> makeBlockMask(int64_t batchHeads, int64_t seqQ,
                                               int64_t seqKV, int64_t block,
                                               const Visible &visible) {
  return makeBlockMask(batchHeads, seqQ, seqKV, block, block, visible);
}

} // namespace kiln::ops

#endif // KILN_OPS_OPS_H
