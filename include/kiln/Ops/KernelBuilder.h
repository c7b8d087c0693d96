//===- KernelBuilder.h - Write kiln kernels from C++ ------------*- C++ -*-===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// A thin layer over OpBuilder that the operator generators use to build one
// kiln.func: arithmetic that dispatches on int/float and splats scalars onto
// tiles, views and tile memory access, and structured loops and branches
// with loop-carried values. Everything it creates is plain kiln/arith/math/scf
// IR; nothing is hidden from the passes.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_OPS_KERNELBUILDER_H
#define KILN_OPS_KERNELBUILDER_H

#include "kiln/Dialect/Kiln/IR/Kiln.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <functional>
#include <map>
#include <optional>
#include <string>

namespace kiln::ops {

enum class Cmp { LT, LE, GT, GE, EQ, NE };

class KernelBuilder {
public:
  struct Arg {
    std::string name;
    mlir::Type type;
  };

  /// Starts `kiln.func @name(args...)` at the end of `module`.
  /// `statics` fixes integer arguments to constants (see Config::statics).
  KernelBuilder(mlir::ModuleOp module, llvm::StringRef name,
                llvm::ArrayRef<Arg> args, unsigned gridRank,
                const std::map<std::string, int64_t> *statics = nullptr);

  mlir::MLIRContext *ctx() { return b.getContext(); }
  mlir::OpBuilder &builder() { return b; }
  mlir::Location loc() { return location; }

  // Types.
  mlir::Type f32() { return b.getF32Type(); }
  mlir::Type i32() { return b.getI32Type(); }
  mlir::Type i64() { return b.getI64Type(); }
  mlir::Type index() { return b.getIndexType(); }
  mlir::Type tile(llvm::ArrayRef<int64_t> shape, mlir::Type elt) {
    return mlir::RankedTensorType::get(shape, elt);
  }
  mlir::Type ptr(mlir::Type elt);

  /// The kernel argument called `name`.
  mlir::Value arg(llvm::StringRef name);

  // Constants.
  mlir::Value cIndex(int64_t v);
  mlir::Value cI32(int64_t v);
  mlir::Value cF32(double v);
  mlir::Value constant(mlir::Type type, double v);

  // Grid (as index).
  mlir::Value pid(int axis);
  mlir::Value numPrograms(int axis);
  /// kiln.clock: the processor's cycle counter (i64).
  mlir::Value clock();
  /// kiln.processor_id: the processor (SM, core) running the program (i32).
  mlir::Value processorId();

  // Scalar and elementwise conversions.
  mlir::Value toIndex(mlir::Value v);
  mlir::Value convert(mlir::Value v, mlir::Type elementType);

  // Elementwise arithmetic; a scalar operand is splat onto the other's tile
  // shape, tiles broadcast along size-1 dimensions.
  mlir::Value add(mlir::Value a, mlir::Value b);
  mlir::Value sub(mlir::Value a, mlir::Value b);
  mlir::Value mul(mlir::Value a, mlir::Value b);
  mlir::Value div(mlir::Value a, mlir::Value b);
  mlir::Value rem(mlir::Value a, mlir::Value b);
  mlir::Value max(mlir::Value a, mlir::Value b);
  mlir::Value min(mlir::Value a, mlir::Value b);
  mlir::Value cmp(Cmp kind, mlir::Value a, mlir::Value b);
  mlir::Value andI(mlir::Value a, mlir::Value b);
  mlir::Value orI(mlir::Value a, mlir::Value b);
  mlir::Value select(mlir::Value cond, mlir::Value a, mlir::Value b);
  /// a * b + c rounded once (math.fma: the targets' fused multiply-add);
  /// floats, operands unified like the binary ops'.
  mlir::Value fma(mlir::Value a, mlir::Value b, mlir::Value c);
  mlir::Value exp(mlir::Value a);
  mlir::Value exp2(mlir::Value a);
  mlir::Value log(mlir::Value a);
  mlir::Value relu(mlir::Value a);

  // Tile shapes.
  mlir::Value splat(mlir::Value scalar, llvm::ArrayRef<int64_t> shape);
  mlir::Value broadcastTo(mlir::Value tile, llvm::ArrayRef<int64_t> shape);
  mlir::Value expand(mlir::Value tile, int axis);
  mlir::Value reshape(mlir::Value tile, llvm::ArrayRef<int64_t> shape);
  mlir::Value trans(mlir::Value tile);
  /// The block of `tile` at `offsets` of `sizes` (tensor.extract_slice).
  mlir::Value slice(mlir::Value tile, llvm::ArrayRef<int64_t> offsets,
                    llvm::ArrayRef<int64_t> sizes);
  /// [0, n) as an i32 tile.
  mlir::Value arange(int64_t n);

  // Memory.
  mlir::Value view(mlir::Value ptr, llvm::ArrayRef<mlir::Value> sizes,
                   llvm::ArrayRef<mlir::Value> strides);
  /// A row-major view of `sizes` (strides computed).
  mlir::Value denseView(mlir::Value ptr, llvm::ArrayRef<mlir::Value> sizes);
  mlir::Value load(mlir::Value view, llvm::ArrayRef<mlir::Value> offsets,
                   llvm::ArrayRef<int64_t> shape,
                   std::optional<double> padding = std::nullopt);
  /// `streaming`: kiln.store's (not read again soon: non-temporal on x86).
  void store(mlir::Value tile, mlir::Value view,
             llvm::ArrayRef<mlir::Value> offsets, bool streaming = false);
  mlir::Value gather(mlir::Value view, mlir::Value indices,
                     llvm::ArrayRef<mlir::Value> offsets,
                     llvm::ArrayRef<int64_t> shape,
                     std::optional<double> padding = std::nullopt);
  void scatter(mlir::Value tile, mlir::Value view, mlir::Value indices,
               llvm::ArrayRef<mlir::Value> offsets);
  void atomicAdd(mlir::Value tile, mlir::Value view,
                 llvm::ArrayRef<mlir::Value> offsets);
  /// One scalar element of a view (a 1x..x1 load, extracted).
  mlir::Value loadScalar(mlir::Value view, llvm::ArrayRef<mlir::Value> offsets,
                         std::optional<double> padding = std::nullopt);

  // Tile algebra.
  mlir::Value dot(mlir::Value a, mlir::Value b, mlir::Value acc);
  /// A dot of two fp8 tiles (their bytes, i8) in formats `lhsFp8` and
  /// `rhsFp8` ("e4m3" / "e5m2"): kiln.dot's lhs_fp8 / rhs_fp8.
  mlir::Value dotFp8(mlir::Value a, mlir::Value b, mlir::Value acc,
                     llvm::StringRef lhsFp8, llvm::StringRef rhsFp8);
  mlir::Value reduce(mlir::kiln::ReduceKind kind, mlir::Value tile, int axis);
  /// The inclusive scan of `tile` along `axis` (sum, max or min), from the
  /// end when `reverse`.
  mlir::Value scan(mlir::kiln::ReduceKind kind, mlir::Value tile, int axis,
                   bool reverse = false);
  mlir::Value extract(mlir::Value tile, llvm::ArrayRef<int64_t> index);

  // Structured control flow.
  using LoopBody = std::function<llvm::SmallVector<mlir::Value>(
      mlir::Value iv, mlir::ValueRange iters)>;
  llvm::SmallVector<mlir::Value> forLoop(mlir::Value lb, mlir::Value ub,
                                         mlir::Value step,
                                         mlir::ValueRange inits,
                                         const LoopBody &body);
  using Branch = std::function<llvm::SmallVector<mlir::Value>()>;
  llvm::SmallVector<mlir::Value> ifElse(mlir::Value cond,
                                        mlir::TypeRange resultTypes,
                                        const Branch &thenBranch,
                                        const Branch &elseBranch);

  /// Ends the kernel (kiln.return).
  void finish();

private:
  std::pair<mlir::Value, mlir::Value> unify(mlir::Value a, mlir::Value b);
  mlir::OpBuilder b;
  mlir::Location location;
  mlir::kiln::FuncOp func;
  llvm::SmallVector<std::string> argNames;
  std::map<std::string, int64_t> statics;
};

} // namespace kiln::ops

#endif // KILN_OPS_KERNELBUILDER_H
