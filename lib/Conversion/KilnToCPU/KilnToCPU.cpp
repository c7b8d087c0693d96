//===- KilnToCPU.cpp - Lower kiln kernels to vector loops on memrefs ------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The CPU lowering of tile programs. Every tile value gets a statically shaped
// stack buffer allocated at the kernel's entry (so loops never grow the
// stack), and every tile op becomes a loop nest over buffers whose innermost
// loop works on vectors of the native width. Working tile by tile keeps each
// op's code small and its vectors register-sized: a 64x64 f32 tile is never
// one 4096-lane LLVM vector.
//
// The kernel ABI produced here is the one in docs/bundle-format.md.
//
//===----------------------------------------------------------------------===//

#include "KernelLowering.h"
#include "SimtSupport.h"
#include "kiln/Conversion/Passes.h"
#include "kiln/Dialect/Kiln/IR/Kiln.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/Interfaces/LoopLikeInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/Support/SaveAndRestore.h"

#include <numeric>

namespace mlir::kiln {
#define GEN_PASS_DEF_CONVERTKILNTOCPU
#include "kiln/Dialect/Kiln/Passes.h.inc"
} // namespace mlir::kiln

using namespace mlir;
using namespace mlir::kiln;

namespace mlir::kiln::detail {

/// Tiles of i1 live in memory as i8: LLVM packs `<N x i1>` vectors into bits
/// but stores scalar i1 as bytes, so one byte per element keeps both views of
/// a buffer consistent.
///
/// 16-bit floats (bf16, f16) live in memory and in buffers as i16 bits and
/// become floats only right before arithmetic: x86 without AVX512-BF16 has no
/// bf16 vector moves, and LLVM would otherwise round-trip them through
/// libcalls.
Type storageType(Type elementType) {
  if (elementType.isInteger(1))
    return IntegerType::get(elementType.getContext(), 8);
  if (elementType.isBF16() || elementType.isF16())
    return IntegerType::get(elementType.getContext(), 16);
  return elementType;
}

/// Converts between an element type and its storage type (same width: a
/// bitcast; i1 <-> i8: a truncation or zero extension).
Value toType(OpBuilder &b, Location loc, Value v, Type elementType) {
  Type from = getElementTypeOrSelf(v.getType());
  if (from == elementType)
    return v;
  Type to = elementType;
  if (auto vt = dyn_cast<VectorType>(v.getType()))
    to = VectorType::get(vt.getShape(), elementType);
  unsigned fw = from.getIntOrFloatBitWidth(),
           tw = elementType.getIntOrFloatBitWidth();
  if (fw == tw)
    return arith::BitcastOp::create(b, loc, to, v);
  if (fw > tw)
    return arith::TruncIOp::create(b, loc, to, v);
  return arith::ExtUIOp::create(b, loc, to, v);
}

/// The padding value as bits of the storage type.
TypedAttr storagePadding(TypedAttr pad) {
  if (auto f = dyn_cast<FloatAttr>(pad)) {
    Type st = storageType(f.getType());
    if (st != f.getType())
      return IntegerAttr::get(st, f.getValue().bitcastToAPInt());
  }
  // Booleans are bytes in memory (`other=False` on a bool load).
  if (auto i = dyn_cast<IntegerAttr>(pad)) {
    Type st = storageType(i.getType());
    if (st != i.getType() && st.isInteger())
      return IntegerAttr::get(st, i.getValue().zext(st.getIntOrFloatBitWidth()));
  }
  return pad;
}

//===----------------------------------------------------------------------===//
// Buffers and element access
//===----------------------------------------------------------------------===//

/// Largest total size of a kernel's tile buffers (see lowerKernel).
static constexpr int64_t kMaxProgramScratchBytes = 4 << 20;
/// Gathered rows of at most this many vectors are copied in straight-line
/// code (lowerViewAccess), longer ones by a loop.
static constexpr int64_t kInlineRowVectors = 96;

Value KernelLowering::allocTile(RankedTensorType type, Location loc) {
  if (simt)
    return allocSharedTile(type, loc);
  OpBuilder b(func->getContext());
  b.setInsertionPointToStart(&func->getRegion(0).front());
  auto memrefType =
      MemRefType::get(type.getShape(), storageType(type.getElementType()));
  return memref::AllocaOp::create(b, loc, memrefType, ValueRange{},
                                  ValueRange{}, b.getI64IntegerAttr(64));
}

FailureOr<Value> KernelLowering::bufferOf(Value tile, Operation *user) {
  DenseElementsAttr splat;
  if (!buffers.count(tile) && matchPattern(tile, m_Constant(&splat)) &&
      splat.isSplat()) {
    // A splat tile constant: filled where it is defined, once.
    Operation *cst = tile.getDefiningOp();
    llvm::SaveAndRestore<Operation *> at(current, cst);
    llvm::SaveAndRestore<bool> reads(unsyncedReads);
    auto type = cast<RankedTensorType>(tile.getType());
    Value buf = allocTile(type, cst->getLoc());
    ImplicitLocOpBuilder b(cst->getLoc(), cst->getBlock(),
                           std::next(Block::iterator(cst)));
    fillTile(b, buf, type, cast<TypedAttr>(splat.getSplatValue<Attribute>()));
    buffers[tile] = buf;
  }
  if (fragmentResults.count(tile))
    materializeFragments(tile, user);
  if (auto it = loopRegisters.find(tile); it != loopRegisters.end()) {
    auto [dot, regs] = it->second;
    loopRegisters.erase(it);
    ImplicitLocOpBuilder b(user->getLoc(), user);
    Value buf = allocTile(cast<RankedTensorType>(tile.getType()), user->getLoc());
    storeRegisterTile(b, dot, regs, buf);
    barrier(b);
    buffers[tile] = buf;
  }
  if (rowFragments.count(tile)) {
    ImplicitLocOpBuilder b(user->getLoc(), user);
    materializeRows(b, tile);
  }
  Value buf = buffers.lookup(tile);
  if (!buf)
    return user->emitError(who() + ": tile operand has no buffer (produced by an op the "
                           + target() + " target does not support)");
  return buf;
}

int64_t KernelLowering::vectorWidth(ArrayRef<Type> elementTypes,
                                    int64_t innerDim) {
  if (simt)
    return 1; // one element per thread and step
  unsigned maxBits = 8;
  for (Type t : elementTypes)
    maxBits = std::max(maxBits, storageType(t).getIntOrFloatBitWidth());
  int64_t width = std::max<int64_t>(1, vectorBits / maxBits);
  while (width > 1 && innerDim % width != 0)
    width /= 2;
  return width;
}

Value KernelLowering::loadElems(ImplicitLocOpBuilder &b, Value buf,
                                ValueRange idx, Type elementType,
                                int64_t width) {
  Type stored = cast<MemRefType>(buf.getType()).getElementType();
  // (SIMT: a tensor-core operand buffer, core matrices or XOR-swizzled
  // rows, is read at its own indices, tileIndices.)
  SmallVector<Value> at =
      simt ? tileIndices(b, buf, idx) : SmallVector<Value>(idx);
  Value v;
  if (width == 1)
    v = memref::LoadOp::create(b, buf, at);
  else
    v = vector::LoadOp::create(b, VectorType::get({width}, stored), buf, at);
  return toType(b, b.getLoc(), v, elementType);
}

void KernelLowering::storeElems(ImplicitLocOpBuilder &b, Value value,
                                Value buf, ValueRange idx, int64_t width) {
  auto type = cast<MemRefType>(buf.getType());
  value = toType(b, b.getLoc(), value, type.getElementType());
  // (A wgmma core-matrix buffer takes SIMT stores of one element.)
  SmallVector<Value> at = tileIndices(b, buf, idx);
  if (width == 1)
    memref::StoreOp::create(b, value, buf, at);
  else
    vector::StoreOp::create(b, value, buf, at);
}

/// Transposes the w x w block whose rows are the w-lane vectors `x` (w a
/// power of two), in place: log2(w) rounds of two-source shuffles that swap
/// the off-diagonal halves of ever smaller blocks.
static void transposeBlock(ImplicitLocOpBuilder &b, SmallVectorImpl<Value> &x) {
  int64_t w = x.size();
  for (int64_t h = w / 2; h >= 1; h /= 2) {
    SmallVector<int64_t> top, bottom;
    for (int64_t j = 0; j < w; ++j) {
      top.push_back(j & h ? w + j - h : j);
      bottom.push_back(j & h ? w + j : j + h);
    }
    for (int64_t r = 0; r < w; ++r) {
      if (r & h)
        continue;
      Value nt = vector::ShuffleOp::create(b, x[r], x[r + h], top);
      x[r + h] = vector::ShuffleOp::create(b, x[r], x[r + h], bottom);
      x[r] = nt;
    }
  }
}

Value KernelLowering::splatConstant(ImplicitLocOpBuilder &b, TypedAttr attr,
                                    int64_t width) {
  if (width == 1)
    return arith::ConstantOp::create(b, attr);
  auto vt = VectorType::get({width}, attr.getType());
  return arith::ConstantOp::create(b, SplatElementsAttr::get(vt, attr));
}

void KernelLowering::forEachIndex(
    ImplicitLocOpBuilder &b, ArrayRef<int64_t> shape, int64_t innerStep,
    function_ref<void(ImplicitLocOpBuilder &, ValueRange)> fn) {
  if (simt) {
    forEachIndexSimt(b, shape, fn);
    return;
  }
  forEachIndex(b, cIdxs(b, shape), innerStep, fn);
}

void KernelLowering::forEachIndex(ImplicitLocOpBuilder &b, ValueRange extents,
                                  int64_t innerStep,
                                  function_ref<void(ImplicitLocOpBuilder &, ValueRange)> fn) {
  assert(!simt && "a GPU thread's share of a tile is static (forEachIndexSimt)");
  SmallVector<Value> ivs;
  std::function<void(ImplicitLocOpBuilder &, size_t)> nest =
      [&](ImplicitLocOpBuilder &nb, size_t dim) {
        if (dim == extents.size()) {
          fn(nb, ivs);
          return;
        }
        int64_t step = dim + 1 == extents.size() ? innerStep : 1;
        Value lb = arith::ConstantIndexOp::create(nb, 0);
        Value ub = extents[dim];
        Value st = arith::ConstantIndexOp::create(nb, step);
        scf::ForOp::create(
            nb, lb, ub, st, ValueRange{},
            [&](OpBuilder &ob, Location loc, Value iv, ValueRange) {
              ImplicitLocOpBuilder ib(loc, ob);
              ivs.push_back(iv);
              nest(ib, dim + 1);
              ivs.pop_back();
              scf::YieldOp::create(ib);
            });
      };
  if (extents.empty()) {
    fn(b, ValueRange{});
    return;
  }
  nest(b, 0);
}

void KernelLowering::fillTile(ImplicitLocOpBuilder &b, Value buf, RankedTensorType type,
                              TypedAttr value) {
  int64_t w = vectorWidth({type.getElementType()}, type.getShape().back());
  Value v = splatConstant(b, value, w);
  forEachIndex(b, type.getShape(), w, [&](ImplicitLocOpBuilder &ib, ValueRange idx) {
    storeElems(ib, v, buf, idx, w);
  });
}

void KernelLowering::copyTile(ImplicitLocOpBuilder &b, Value from, Value to,
                              RankedTensorType type) {
  if (from == to)
    return;
  int64_t w = vectorWidth({type.getElementType()}, type.getShape().back());
  Type stored = storageType(type.getElementType());
  forEachIndex(b, type.getShape(), w, [&](ImplicitLocOpBuilder &ib,
                                          ValueRange idx) {
    Value v = loadElems(ib, from, idx, stored, w);
    storeElems(ib, v, to, idx, w);
  });
}

FailureOr<SmallVector<Value>>
KernelLowering::assignTiles(Operation *terminator, ValueRange values,
                            ArrayRef<Value> dests) {
  ImplicitLocOpBuilder b(terminator->getLoc(), terminator);
  SmallVector<Value> srcs(dests.size()), scalars;
  bool hazard = false;
  for (auto [i, v] : llvm::enumerate(values)) {
    if (!dests[i]) {
      scalars.push_back(v);
      continue;
    }
    auto s = bufferOf(v, terminator);
    if (failed(s))
      return failure();
    srcs[i] = *s;
    for (auto [j, other] : llvm::enumerate(dests))
      if (j != i && other == *s)
        hazard = true;
  }
  for (auto [i, s] : llvm::enumerate(srcs)) {
    if (!s || s == dests[i])
      continue;
    auto type = cast<RankedTensorType>(values[i].getType());
    if (hazard) {
      Value tmp = allocTile(type, terminator->getLoc());
      copyTile(b, s, tmp, type);
      srcs[i] = tmp;
    }
  }
  for (auto [i, s] : llvm::enumerate(srcs))
    if (s && s != dests[i])
      copyTile(b, s, dests[i], cast<RankedTensorType>(values[i].getType()));
  return scalars;
}

LogicalResult KernelLowering::rewriteYield(Block &block,
                                           ArrayRef<Value> dests) {
  auto yield = cast<scf::YieldOp>(block.getTerminator());
  auto scalars = assignTiles(yield, yield.getOperands(), dests);
  if (failed(scalars))
    return failure();
  OpBuilder yb(yield);
  scf::YieldOp::create(yb, yield.getLoc(), *scalars);
  yield.erase();
  return success();
}

/// Records `buffer` as the storage of `result`, and `op` for erasure.
Value KernelLowering::assignResult(Operation *op, Value result) {
  toErase.push_back(op);
  return result;
}

//===----------------------------------------------------------------------===//
// Views and memory access
//===----------------------------------------------------------------------===//

LogicalResult KernelLowering::lowerMakeView(MakeViewOp op) {
  ImplicitLocOpBuilder b(op.getLoc(), op);
  ViewType viewType = op.getResult().getType();
  unsigned rank = viewType.getRank();
  Type elt = storageType(viewType.getElementType());
  SmallVector<int64_t> dyn(rank, ShapedType::kDynamic);
  auto layout = StridedLayoutAttr::get(op.getContext(), 0, dyn);
  auto type = MemRefType::get(dyn, elt, layout);
  SmallVector<int64_t> unitStrides(dyn);
  unitStrides.back() = 1;
  auto unitType = MemRefType::get(
      dyn, elt, StridedLayoutAttr::get(op.getContext(), 0, unitStrides));
  SmallVector<OpFoldResult> sizes, strides, unitStrideVals;
  for (Value s : op.getSizes())
    sizes.push_back(s);
  for (Value s : op.getStrides())
    strides.push_back(s);
  unitStrideVals = strides;
  unitStrideVals.back() = b.getIndexAttr(1);
  ViewInfo info;
  info.memref = memref::ReinterpretCastOp::create(
      b, type, op.getBase(), OpFoldResult(b.getIndexAttr(0)), sizes, strides);
  info.unitMemref = memref::ReinterpretCastOp::create(
      b, unitType, op.getBase(), OpFoldResult(b.getIndexAttr(0)), sizes,
      unitStrideVals);
  info.base = op.getBase();
  info.sizes.assign(op.getSizes().begin(), op.getSizes().end());
  info.strides.assign(op.getStrides().begin(), op.getStrides().end());
  Value one = arith::ConstantIndexOp::create(b, 1);
  info.unitStride = arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                          op.getStrides().back(), one);
  views[op.getResult()] = info;
  toErase.push_back(op);
  return success();
}

/// Whether index `i` is in [0, size).
static Value inRange(ImplicitLocOpBuilder &b, Value i, Value size) {
  return arith::AndIOp::create(
      b, arith::CmpIOp::create(b, arith::CmpIPredicate::sge, i, cIdx(b, 0)),
      arith::CmpIOp::create(b, arith::CmpIPredicate::slt, i, size));
}

/// `width` elements of a view at [viewIdx..., col..] in the storage type (a
/// scalar for width 1). Elements outside the view, and every element of a
/// row outside it (rowValid false), read `pad` and touch no memory: a masked
/// load when the vector starts inside the view with unit stride, else lane
/// by lane.
static Value readChecked(ImplicitLocOpBuilder &b, const ViewInfo &vi,
                         ArrayRef<Value> viewIdx, Value rowValid, Value col,
                         int64_t width, TypedAttr pad) {
  Location loc = b.getLoc();
  Type elt = pad.getType();
  Value last = vi.sizes.back();
  auto at = [&](Value c) {
    SmallVector<Value> idx(viewIdx);
    idx.push_back(c);
    return idx;
  };
  auto element = [&](ImplicitLocOpBuilder &ib, Value c, Value ok) -> Value {
    auto ifOp = scf::IfOp::create(ib, TypeRange{elt}, ok, /*withElse=*/true);
    OpBuilder tb = ifOp.getThenBodyBuilder();
    scf::YieldOp::create(tb, loc, memref::LoadOp::create(tb, loc, vi.memref, at(c)).getResult());
    OpBuilder eb = ifOp.getElseBodyBuilder();
    scf::YieldOp::create(eb, loc, arith::ConstantOp::create(eb, loc, pad).getResult());
    return ifOp.getResult(0);
  };
  if (width == 1)
    return element(b, col, arith::AndIOp::create(b, rowValid, inRange(b, col, last)));
  auto vecType = VectorType::get({width}, elt);
  auto padOf = [&](ImplicitLocOpBuilder &ib) -> Value {
    return arith::ConstantOp::create(ib, SplatElementsAttr::get(vecType, pad));
  };
  Value fast = arith::AndIOp::create(
      b, arith::AndIOp::create(b, rowValid, inRange(b, col, last)), vi.unitStride);
  auto ifOp = scf::IfOp::create(b, TypeRange{vecType}, fast, /*withElse=*/true);
  {
    ImplicitLocOpBuilder tb(loc, OpBuilder::atBlockBegin(ifOp.thenBlock()));
    // At most the width: vector.create_mask compares in i32 when lowered to
    // LLVM, so a remainder of 2^31 or more (a huge innermost size) would
    // wrap and mask the whole vector off.
    Value remaining = arith::MinSIOp::create(tb, arith::SubIOp::create(tb, last, col),
                                             cIdx(tb, width));
    // A whole vector inside the view is a plain load (see the stores').
    Value whole = arith::CmpIOp::create(tb, arith::CmpIPredicate::eq, remaining,
                                        cIdx(tb, width));
    auto wholeIf = scf::IfOp::create(tb, TypeRange{vecType}, whole, /*withElse=*/true);
    {
      ImplicitLocOpBuilder wb(loc, OpBuilder::atBlockBegin(wholeIf.thenBlock()));
      scf::YieldOp::create(wb, vector::LoadOp::create(wb, vecType, vi.unitMemref, at(col))
                                   .getResult());
      ImplicitLocOpBuilder mb(loc, OpBuilder::atBlockBegin(wholeIf.elseBlock()));
      Value mask = vector::CreateMaskOp::create(
          mb, VectorType::get({width}, mb.getI1Type()), ValueRange{remaining});
      scf::YieldOp::create(mb, vector::MaskedLoadOp::create(mb, vecType, vi.unitMemref,
                                                            at(col), mask, padOf(mb))
                                   .getResult());
    }
    scf::YieldOp::create(tb, wholeIf.getResult(0));
  }
  // Lane by lane only when some lane may be inside: not for a vector
  // starting past the row's end (a channel block past C: depthwise
  // convolution at 32 channels in blocks of 64 took 11x the time of blocks
  // of 32, reading half its vectors lane by lane).
  ImplicitLocOpBuilder eb(loc, OpBuilder::atBlockBegin(ifOp.elseBlock()));
  Value padVec = padOf(eb);
  Value someLane = arith::AndIOp::create(
      eb, rowValid, arith::CmpIOp::create(eb, arith::CmpIPredicate::slt, col, last));
  auto rowIf = scf::IfOp::create(eb, TypeRange{vecType}, someLane, /*withElse=*/true);
  scf::YieldOp::create(eb, rowIf.getResult(0));
  {
    ImplicitLocOpBuilder ob(loc, OpBuilder::atBlockBegin(rowIf.elseBlock()));
    scf::YieldOp::create(ob, padVec);
  }
  ImplicitLocOpBuilder rb(loc, OpBuilder::atBlockBegin(rowIf.thenBlock()));
  auto lanes = scf::ForOp::create(
      rb, cIdx(rb, 0), cIdx(rb, width), cIdx(rb, 1), ValueRange{padVec},
      [&](OpBuilder &fb, Location l2, Value lane, ValueRange acc) {
        ImplicitLocOpBuilder lb(l2, fb);
        Value c = arith::AddIOp::create(lb, col, lane);
        Value e = element(lb, c, inRange(lb, c, last));
        scf::YieldOp::create(
            lb, vector::InsertOp::create(lb, e, acc[0], ArrayRef<OpFoldResult>{lane})
                    .getResult());
      });
  scf::YieldOp::create(rb, lanes.getResult(0));
  return ifOp.getResult(0);
}

/// Whether `width` elements at column `col` of every row of a view are
/// inside it with unit stride, and the view has rows (so row 0 of each outer
/// dimension exists for a clamped read). With `whole` false, only that the
/// vector starts at column 0 or later (a masked read: maskedColumns).
static Value columnsInside(ImplicitLocOpBuilder &b, const ViewInfo &vi, Value col,
                           int64_t width, bool whole = true) {
  auto cmp = [&](arith::CmpIPredicate p, Value x, Value y) -> Value {
    return arith::CmpIOp::create(b, p, x, y);
  };
  Value c0 = cIdx(b, 0);
  Value ok = vi.unitStride;
  for (size_t d = 0; d + 1 < vi.sizes.size(); ++d)
    ok = arith::AndIOp::create(b, ok, cmp(arith::CmpIPredicate::sgt, vi.sizes[d], c0));
  ok = arith::AndIOp::create(b, ok, cmp(arith::CmpIPredicate::sge, col, c0));
  if (!whole)
    return ok;
  // (size >= width and col <= size - width: col + width wrapped for a
  // column near 2^63.)
  Value last = arith::SubIOp::create(b, vi.sizes.back(), cIdx(b, width));
  ok = arith::AndIOp::create(b, ok, cmp(arith::CmpIPredicate::sge, vi.sizes.back(),
                                        cIdx(b, width)));
  return arith::AndIOp::create(b, ok, cmp(arith::CmpIPredicate::sle, col, last));
}

/// For a vector at column `col` >= 0 of a unit-stride view: the lanes inside
/// the view, and the column to read at (0 for a vector starting past the
/// row's end, whose lanes are all off: the address stays inside the view).
static std::pair<Value, Value> maskedColumns(ImplicitLocOpBuilder &b, const ViewInfo &vi,
                                             Value col, int64_t width) {
  Value size = vi.sizes.back();
  // Clamped to [0, width]: vector.create_mask compares in i32 when lowered
  // to LLVM (readChecked).
  Value lanes = arith::MaxSIOp::create(
      b, arith::MinSIOp::create(b, arith::SubIOp::create(b, size, col), cIdx(b, width)),
      cIdx(b, 0));
  Value mask = vector::CreateMaskOp::create(b, VectorType::get({width}, b.getI1Type()),
                                            ValueRange{lanes});
  Value starts = arith::CmpIOp::create(b, arith::CmpIPredicate::slt, col, size);
  return {mask, arith::SelectOp::create(b, starts, col, cIdx(b, 0))};
}

/// Stores vector `v` at column `col` of the view row `outerIdx` (whose
/// validity is `rowValid`), the lanes outside the view skipped: a plain
/// store when all are inside with unit stride, a masked one when the vector
/// starts inside, else lane by lane.
static void writeVectorChecked(ImplicitLocOpBuilder &ib, const ViewInfo &vi,
                               ArrayRef<Value> outerIdx, Value rowValid, Value col,
                               Value v) {
  const int64_t width = cast<VectorType>(v.getType()).getNumElements();
  Location loc = ib.getLoc();
  SmallVector<Value> fullIdx(outerIdx);
  fullIdx.push_back(col);
  Value fast = arith::AndIOp::create(
      ib, arith::AndIOp::create(ib, rowValid, inRange(ib, col, vi.sizes.back())), vi.unitStride);
  // At most the chunk's width: vector.create_mask compares in i32 when
  // lowered to LLVM, so a remainder of 2^31 or more (a huge innermost size)
  // would wrap and mask the whole chunk off.
  Value remaining = arith::MinSIOp::create(
      ib, arith::SubIOp::create(ib, vi.sizes.back(), col), cIdx(ib, width));
  auto ifOp = scf::IfOp::create(ib, TypeRange{}, fast, true);
  {
    // A whole chunk inside the view is a plain store: a masked store is
    // microcoded on AMD's Zen 1-3 (vmaskmovps, measured 26% of depthwise
    // convolution's time in its edge tiles).
    ImplicitLocOpBuilder tb(loc, ifOp.getThenBodyBuilder());
    Value whole =
        arith::CmpIOp::create(tb, arith::CmpIPredicate::eq, remaining, cIdx(tb, width));
    auto wholeIf = scf::IfOp::create(tb, TypeRange{}, whole, true);
    OpBuilder wb = wholeIf.getThenBodyBuilder();
    vector::StoreOp::create(wb, loc, v, vi.unitMemref, fullIdx);
    OpBuilder mb = wholeIf.getElseBodyBuilder();
    Value mask = vector::CreateMaskOp::create(
        mb, loc, VectorType::get({width}, ib.getI1Type()), ValueRange{remaining});
    vector::MaskedStoreOp::create(mb, loc, vi.unitMemref, fullIdx, mask, v);
  }
  ImplicitLocOpBuilder eb(loc, ifOp.getElseBodyBuilder());
  scf::ForOp::create(
      eb, cIdx(eb, 0), cIdx(eb, width), cIdx(eb, 1), ValueRange{},
      [&](OpBuilder &lb, Location l, Value lane, ValueRange) {
        ImplicitLocOpBuilder lib(l, lb);
        Value c = arith::AddIOp::create(lib, col, lane);
        Value ok = arith::AndIOp::create(lib, rowValid, inRange(lib, c, vi.sizes.back()));
        SmallVector<Value> idx(outerIdx);
        idx.push_back(c);
        auto inner = scf::IfOp::create(lib, TypeRange{}, ok, false);
        OpBuilder tb = inner.getThenBodyBuilder();
        Value e = vector::ExtractOp::create(tb, l, v, ArrayRef<OpFoldResult>{lane});
        memref::StoreOp::create(tb, l, e, vi.memref, idx);
        scf::YieldOp::create(lib);
      });
}

/// The bytes [lo, hi) spanned by the elements `start` + [0, extent) of a
/// strided memref, per dimension; `ok` is ANDed with its strides being 0 or
/// more (a negative stride counts as an overlap) and with every start,
/// extent and stride within 2^28 in magnitude, so that the sums cannot wrap
/// (a front end's view of unknown rows, 2^62 of them, counts as an overlap).
static void footprint(ImplicitLocOpBuilder &b, Value memref, ValueRange start,
                      ValueRange extent, Value &lo, Value &hi, Value &ok) {
  Type elt = cast<MemRefType>(memref.getType()).getElementType();
  Value cE = cIdx(b, std::max<int64_t>(1, int64_t(elt.getIntOrFloatBitWidth()) / 8));
  Value c0 = cIdx(b, 0), c1 = cIdx(b, 1);
  const int64_t bound = int64_t(1) << 28;
  auto small = [&](Value v) -> Value { // -2^28 <= v <= 2^28
    return arith::CmpIOp::create(b, arith::CmpIPredicate::ule,
                                 arith::AddIOp::create(b, v, cIdx(b, bound)),
                                 cIdx(b, 2 * bound));
  };
  auto md = memref::ExtractStridedMetadataOp::create(b, memref);
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, md.getBaseBuffer());
  Value first = md.getOffset(), last = md.getOffset();
  for (auto [s, n, stride] : llvm::zip(start, extent, md.getStrides())) {
    ok = arith::AndIOp::create(
        b, ok, arith::CmpIOp::create(b, arith::CmpIPredicate::sge, stride, c0));
    for (Value v : {Value(s), Value(n), Value(stride)})
      ok = arith::AndIOp::create(b, ok, small(v));
    first = arith::AddIOp::create(b, first, arith::MulIOp::create(b, s, stride));
    Value end = arith::AddIOp::create(b, s, arith::SubIOp::create(b, n, c1));
    last = arith::AddIOp::create(b, last, arith::MulIOp::create(b, end, stride));
  }
  lo = arith::AddIOp::create(b, base, arith::MulIOp::create(b, first, cE));
  hi = arith::AddIOp::create(
      b, base, arith::MulIOp::create(b, arith::AddIOp::create(b, last, c1), cE));
}

/// The rows [start, start + extent) of a view of `size` rows that hold every
/// row the `n` indices in `indices` name inside it (at least one row: rows
/// outside the view are not read).
static std::pair<Value, Value> indexedRows(ImplicitLocOpBuilder &b, Value indices, int64_t n,
                                           Value size) {
  Value c0 = cIdx(b, 0), c1 = cIdx(b, 1);
  Value top = arith::MaxSIOp::create(b, arith::SubIOp::create(b, size, c1), c0);
  auto loop = scf::ForOp::create(
      b, c0, cIdx(b, n), c1, ValueRange{top, c0},
      [&](OpBuilder &lb, Location l, Value i, ValueRange minMax) {
        ImplicitLocOpBuilder ib(l, lb);
        Value raw = memref::LoadOp::create(ib, indices, ValueRange{i});
        Value row = arith::MinSIOp::create(
            ib, arith::MaxSIOp::create(ib, arith::IndexCastOp::create(ib, ib.getIndexType(), raw),
                                       c0),
            top);
        scf::YieldOp::create(ib, ValueRange{arith::MinSIOp::create(ib, minMax[0], row),
                                            arith::MaxSIOp::create(ib, minMax[1], row)});
      });
  Value lo = loop.getResult(0), hi = loop.getResult(1);
  return {lo, arith::AddIOp::create(b, arith::MaxSIOp::create(
                                           b, arith::SubIOp::create(b, hi, lo), c0),
                                    c1)};
}

/// Whether byte ranges [lo1, hi1) and [lo2, hi2) do not overlap.
static Value disjoint(ImplicitLocOpBuilder &b, Value lo1, Value hi1, Value lo2, Value hi2) {
  return arith::OrIOp::create(b, arith::CmpIOp::create(b, arith::CmpIPredicate::ule, hi1, lo2),
                              arith::CmpIOp::create(b, arith::CmpIPredicate::ule, hi2, lo1));
}

/// Loads or stores a tile at `offsets` of a view (or, when `indices` is set,
/// at the view rows named by the index tile). Elements outside the view read
/// `padding` / are not written. The innermost dimension goes by vectors: a
/// masked vector access when the view's last stride is 1 and the chunk starts
/// inside the view, per-element code with a bounds check otherwise.
LogicalResult KernelLowering::lowerViewAccess(
    Operation *op, Value view, Value indices, ValueRange offsets,
    Value tileBuf, RankedTensorType tileType, Attribute padding,
    bool isStore, Value computed) {
  auto it = views.find(view);
  if (it == views.end())
    return op->emitError(who() + ": the view must be made by a "
                         "kiln.make_view in the same kernel");
  const ViewInfo &vi = it->second;
  ImplicitLocOpBuilder b(op->getLoc(), op);
  // Memory traffic happens in the storage type; no conversion needed.
  Type elt = storageType(tileType.getElementType());
  ArrayRef<int64_t> shape = tileType.getShape();
  int64_t rank = tileType.getRank();
  Value idxBuf;
  if (indices) {
    auto f = bufferOf(indices, op);
    if (failed(f))
      return failure();
    idxBuf = *f;
  }
  TypedAttr padAttr = paddingAttr(b, padding, elt);
  if (simt)
    return lowerViewAccessSimt(op, vi, idxBuf, offsets, tileBuf, tileType,
                               padAttr, isStore);
  // A store's elements at a tile index, in the storage type: from its
  // buffer, or computed there (`computed`, a deferred tile).
  auto tileElems = [&](ImplicitLocOpBuilder &ib, ValueRange idx, int64_t w) -> Value {
    if (computed)
      return toType(ib, ib.getLoc(), emitElems(ib, computed, idx, w), elt);
    return loadElems(ib, tileBuf, idx, elt, w);
  };
  // A rank-1 gather indexes its only dimension: one element per index.
  bool gatherInner = indices && rank == 1;
  int64_t width =
      gatherInner ? 1 : vectorWidth({tileType.getElementType()}, shape.back());

  Value c0 = arith::ConstantIndexOp::create(b, 0);
  Value cTrue = arith::ConstantIntOp::create(b, 1, 1);

  // The view index of tile dimension `d` at tile index `iv`.
  auto viewIndex = [&](ImplicitLocOpBuilder &ib, int64_t d, Value iv) -> Value {
    return viewIndexAt(ib, idxBuf, offsets, d, iv);
  };

  SmallVector<int64_t> outerShape(shape.begin(), shape.end());
  outerShape.back() = 1; // the innermost dimension is walked below
  // Element-by-element stores (a column tile, a scatter of single elements)
  // are branch-free: an element outside the view is written to a scratch
  // slot instead (a select of the memref and of the indices). A stream
  // compaction's scatter (dsa_topk: -1 for the elements not taken) left
  // branches on random data that took 57% of the kernel's time in
  // mispredictions.
  Value scratch;
  if (isStore && width == 1) {
    OpBuilder eb(func->getContext());
    eb.setInsertionPointToStart(&func->getRegion(0).front());
    Value slot = memref::AllocaOp::create(eb, op->getLoc(), MemRefType::get({1}, elt));
    Value c1 = arith::ConstantIndexOp::create(b, 1);
    SmallVector<OpFoldResult> ones(rank, OpFoldResult(c1)), zeros(rank, OpFoldResult(c0));
    scratch = memref::ReinterpretCastOp::create(
        b, cast<MemRefType>(vi.memref.getType()), slot, OpFoldResult(b.getIndexAttr(0)), ones,
        zeros);
  }
  auto emitGeneral = [&](ImplicitLocOpBuilder &gb) {
  forEachIndex(gb, outerShape, 1, [&](ImplicitLocOpBuilder &ob,
                                     ValueRange outerIvs) {
    // View indices and validity of the outer dimensions.
    SmallVector<Value> viewIdx;
    Value rowValid = cTrue;
    for (int64_t d = 0; d + 1 < rank; ++d) {
      Value i = viewIndex(ob, d, outerIvs[d]);
      viewIdx.push_back(i);
      rowValid = arith::AndIOp::create(ob, rowValid, inRange(ob, i, vi.sizes[d]));
    }
    // A store skips a row outside the view whole (not chunk by chunk).
    ImplicitLocOpBuilder rowB = ob;
    if (isStore && rank > 1 && !scratch) {
      auto rowIf = scf::IfOp::create(ob, TypeRange{}, rowValid, false);
      rowB = ImplicitLocOpBuilder(ob.getLoc(), rowIf.getThenBodyBuilder());
    }
    Value lb = arith::ConstantIndexOp::create(rowB, 0);
    Value ub = arith::ConstantIndexOp::create(rowB, shape.back());
    Value st = arith::ConstantIndexOp::create(rowB, width);
    scf::ForOp::create(
        rowB, lb, ub, st, ValueRange{},
        [&](OpBuilder &fb, Location loc, Value j, ValueRange) {
          ImplicitLocOpBuilder ib(loc, fb);
          SmallVector<Value> tileIdx(outerIvs.begin(), outerIvs.end());
          tileIdx.back() = j;
          if (rank == 1)
            tileIdx.assign({j});
          Value col = viewIndex(ib, rank - 1, j);
          SmallVector<Value> fullIdx(viewIdx);
          fullIdx.push_back(col);
          Value colValid = inRange(ib, col, vi.sizes[rank - 1]);
          Value valid = arith::AndIOp::create(ib, rowValid, colValid);

          if (width == 1) {
            // Per-element access with a bounds check.
            if (isStore) {
              Value v = tileElems(ib, tileIdx, 1);
              Value to = arith::SelectOp::create(ib, valid, vi.memref, scratch);
              for (Value &i : fullIdx)
                i = arith::SelectOp::create(ib, valid, i, c0);
              memref::StoreOp::create(ib, v, to, fullIdx);
            } else {
              storeElems(ib, readChecked(ib, vi, viewIdx, rowValid, col, 1, padAttr),
                         tileBuf, tileIdx, 1);
            }
            scf::YieldOp::create(ib);
            return;
          }

          // Vector chunk: fast masked path when the chunk starts inside the
          // view and the innermost stride is 1 (loads: readChecked).
          if (isStore) {
            writeVectorChecked(ib, vi, viewIdx, rowValid, col,
                               tileElems(ib, tileIdx, width));
          } else {
            storeElems(ib, readChecked(ib, vi, viewIdx, rowValid, col, width, padAttr),
                       tileBuf, tileIdx, width);
          }
          scf::YieldOp::create(ib);
        });
  });
  };

  // Interior tiles (entirely inside the view, unit innermost stride) take a
  // plain vector copy without per-chunk bounds checks: the common case of a
  // large problem, and the one that must be fast. For a gather, "interior"
  // concerns the dimensions after the first; each gathered row is still
  // checked (once per vector chunk) and an invalid one reads padding.
  // A last dimension that whole vectors do not divide (a stem convolution's
  // window of 7 pixels x 3 channels): an interior tile's rows go by whole
  // vectors, the last one overlapping the one before it (elements copied
  // twice), where the width that divides it (1 for 21) went element by
  // element, each tested (18% of the stem's time).
  const int64_t fullWidth =
      gatherInner ? 1 : vectorWidth({tileType.getElementType()}, int64_t(1) << 20);
  const bool overlapTail = width < fullWidth && shape.back() > fullWidth;
  if (gatherInner || (width == 1 && !overlapTail)) {
    emitGeneral(b);
    return success();
  }
  Value interior = interiorTile(b, vi, offsets, shape, indices ? 1 : 0);
  auto ifOp = scf::IfOp::create(b, TypeRange{}, interior, true);
  // kiln.store {streaming}: non-temporal vector stores at vector boundaries
  // (vmovntps faults elsewhere), when the tile's rows all start at the same
  // distance from one (streamShift): the elements before and after each
  // row's aligned vectors are stored one by one (streamRows).
  auto streamingStore = dyn_cast<StoreOp>(op);
  const bool streaming = streamingStore && streamingStore.getStreaming() && !indices;
  auto viewIndices = [&](ImplicitLocOpBuilder &ib, ValueRange idx) {
    SmallVector<Value> viewIdx;
    for (int64_t d = 0; d < rank; ++d)
      viewIdx.push_back(viewIndex(ib, d, idx[d]));
    return viewIdx;
  };
  // The copy of `w` elements at tile index `idx`.
  auto copyAt = [&](ImplicitLocOpBuilder &ib, ValueRange idx, int64_t w) {
    SmallVector<Value> viewIdx = viewIndices(ib, idx);
    auto vt = VectorType::get({w}, elt);
    if (!indices) {
      if (isStore) {
        Value v = tileElems(ib, idx, w);
        vector::StoreOp::create(ib, v, vi.unitMemref, viewIdx);
      } else {
        Value v = vector::LoadOp::create(ib, vt, vi.unitMemref, viewIdx);
        storeElems(ib, v, tileBuf, idx, w);
      }
      return;
    }
    Value rowOk = inRange(ib, viewIdx[0], vi.sizes[0]);
    if (isStore) {
      Value v = tileElems(ib, idx, w);
      auto rowIf = scf::IfOp::create(ib, TypeRange{}, rowOk, false);
      OpBuilder rb = rowIf.getThenBodyBuilder();
      vector::StoreOp::create(rb, op->getLoc(), v, vi.unitMemref, viewIdx);
    } else {
      auto rowIf = scf::IfOp::create(ib, TypeRange{vt}, rowOk, true);
      OpBuilder rb = rowIf.getThenBodyBuilder();
      Value l = vector::LoadOp::create(rb, op->getLoc(), vt, vi.unitMemref,
                                       viewIdx);
      scf::YieldOp::create(rb, op->getLoc(), l);
      OpBuilder eb = rowIf.getElseBodyBuilder();
      ImplicitLocOpBuilder eib(op->getLoc(), eb);
      scf::YieldOp::create(eb, op->getLoc(), splatConstant(eib, padAttr, w));
      storeElems(ib, rowIf.getResult(0), tileBuf, idx, w);
    }
  };
  auto interiorCopy = [&](ImplicitLocOpBuilder &fb) {
    if (indices && !isStore && !overlapTail && shape.back() / width <= kInlineRowVectors) {
      // Gathered rows into the tile: each row's validity tested once, its
      // vectors copied in straight-line code. (A loop of them became a call
      // to memcpy, LLVM's loop idiom: 16-byte moves in glibc's choice here,
      // and a call per row; DeepSeek sparse attention's 576-float key rows
      // spent 27% of the kernel's time there.)
      SmallVector<int64_t> rows(shape);
      rows.back() = 1;
      const int64_t chunks = shape.back() / width;
      auto vt = VectorType::get({width}, elt);
      forEachIndex(fb, rows, 1, [&](ImplicitLocOpBuilder &ib, ValueRange idx) {
        SmallVector<Value> at(idx);
        SmallVector<Value> viewIdx = viewIndices(ib, at);
        SmallVector<Value> colAt;
        for (int64_t c = 0; c < chunks; ++c)
          colAt.push_back(cIdx(ib, c * width));
        auto rowIf = scf::IfOp::create(ib, TypeRange{}, inRange(ib, viewIdx[0], vi.sizes[0]),
                                       /*withElse=*/true);
        ImplicitLocOpBuilder tb(ib.getLoc(), rowIf.getThenBodyBuilder());
        ImplicitLocOpBuilder eb(ib.getLoc(), rowIf.getElseBodyBuilder());
        Value pad = splatConstant(eb, padAttr, width);
        for (int64_t c = 0; c < chunks; ++c) {
          SmallVector<Value> from(viewIdx), to(at);
          to.back() = colAt[c];
          from.back() = arith::AddIOp::create(tb, viewIdx.back(), to.back());
          storeElems(tb, vector::LoadOp::create(tb, vt, vi.unitMemref, from), tileBuf, to,
                     width);
          storeElems(eb, pad, tileBuf, to, width);
        }
      });
      return;
    }
    if (!overlapTail) {
      forEachIndex(fb, shape, width,
                   [&](ImplicitLocOpBuilder &ib, ValueRange idx) { copyAt(ib, idx, width); });
      return;
    }
    SmallVector<int64_t> whole(shape), rows(shape);
    whole.back() -= whole.back() % fullWidth;
    rows.back() = 1;
    forEachIndex(fb, whole, fullWidth,
                 [&](ImplicitLocOpBuilder &ib, ValueRange idx) { copyAt(ib, idx, fullWidth); });
    forEachIndex(fb, rows, 1, [&](ImplicitLocOpBuilder &ib, ValueRange idx) {
      SmallVector<Value> at(idx);
      at.back() = cIdx(ib, shape.back() - fullWidth);
      copyAt(ib, at, fullWidth);
    });
  };
  {
    OpBuilder tb = ifOp.getThenBodyBuilder();
    ImplicitLocOpBuilder fb(op->getLoc(), tb);
    if (streaming && width > 1) {
      storeStreaming(
          fb, vi.unitMemref, offsets, elt, cIdxs(fb, shape), width,
          [&](ImplicitLocOpBuilder &ib, ValueRange idx, int64_t w) {
            return tileElems(ib, idx, w);
          },
          [&](ImplicitLocOpBuilder &ib, ValueRange idx, Value v, bool nontemporal) {
            writeElems(ib, v, vi, viewIndices(ib, idx), nontemporal);
          },
          interiorCopy);
    } else {
      interiorCopy(fb);
    }
  }
  {
    OpBuilder eb = ifOp.getElseBodyBuilder();
    ImplicitLocOpBuilder gb(op->getLoc(), eb);
    emitGeneral(gb);
  }
  return success();
}

std::pair<Value, Value> KernelLowering::streamShift(ImplicitLocOpBuilder &b, Value memref,
                                                    ValueRange offsets, int64_t eltBytes,
                                                    int64_t bytes) {
  // The first element's byte address, and whether every row starts at the
  // same distance from a `bytes` boundary (a power of two): the element is
  // aligned to its size and every outer stride is a multiple of `bytes`.
  auto md = memref::ExtractStridedMetadataOp::create(b, memref);
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, md.getBaseBuffer());
  Value cE = cIdx(b, eltBytes), low = cIdx(b, bytes - 1), c0 = cIdx(b, 0);
  Value first = md.getOffset();
  for (auto [off, stride] : llvm::zip(offsets, md.getStrides()))
    first = arith::AddIOp::create(b, first, arith::MulIOp::create(b, off, stride));
  Value addr = arith::AddIOp::create(b, base, arith::MulIOp::create(b, first, cE));
  Value bits = arith::AndIOp::create(b, addr, cIdx(b, eltBytes - 1));
  for (Value stride : md.getStrides().drop_back())
    bits = arith::OrIOp::create(
        b, bits, arith::AndIOp::create(b, arith::MulIOp::create(b, stride, cE), low));
  Value uniform = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, bits, c0);
  // Elements before the first boundary: (bytes - addr % bytes) % bytes.
  Value gap = arith::AndIOp::create(
      b, arith::SubIOp::create(b, cIdx(b, bytes), arith::AndIOp::create(b, addr, low)), low);
  return {uniform, arith::DivUIOp::create(b, gap, cE)};
}

void KernelLowering::streamRows(
    ImplicitLocOpBuilder &b, ValueRange extents, int64_t width, Value shift,
    function_ref<Value(ImplicitLocOpBuilder &, ValueRange, int64_t)> read,
    function_ref<void(ImplicitLocOpBuilder &, ValueRange, Value, bool)> write) {
  Value cN = extents.back(), cW = cIdx(b, width), c1 = cIdx(b, 1);
  SmallVector<Value> rows(extents);
  rows.back() = c1;
  // Per row: `head` elements one by one, then whole vectors from a
  // boundary, then the rest one by one.
  Value head = arith::MinUIOp::create(b, shift, cN);
  Value body = arith::MulIOp::create(
      b, arith::DivUIOp::create(b, arith::SubIOp::create(b, cN, head), cW), cW);
  Value tail = arith::AddIOp::create(b, head, body);
  forEachIndex(b, rows, 1, [&](ImplicitLocOpBuilder &rb, ValueRange outer) {
    auto at = [&](Value col) {
      SmallVector<Value> idx(outer.begin(), outer.end());
      idx.back() = col;
      return idx;
    };
    auto loop = [&](Value lo, Value hi, Value step, int64_t w, bool nontemporal) {
      scf::ForOp::create(rb, lo, hi, step, ValueRange{},
                         [&](OpBuilder &lb, Location loc, Value j, ValueRange) {
                           ImplicitLocOpBuilder ib(loc, lb);
                           write(ib, at(j), read(ib, at(j), w), nontemporal);
                           scf::YieldOp::create(ib);
                         });
    };
    loop(cIdx(rb, 0), head, c1, 1, false);
    loop(head, tail, cW, width, true);
    loop(tail, cN, c1, 1, false);
  });
}

void KernelLowering::storeStreaming(
    ImplicitLocOpBuilder &b, Value memref, ValueRange offsets, Type elt,
    ValueRange extents, int64_t width,
    function_ref<Value(ImplicitLocOpBuilder &, ValueRange, int64_t)> read,
    function_ref<void(ImplicitLocOpBuilder &, ValueRange, Value, bool)> write,
    function_ref<void(ImplicitLocOpBuilder &)> plain) {
  const int64_t eltBytes = std::max<int64_t>(1, elt.getIntOrFloatBitWidth() / 8);
  auto [uniform, shift] = streamShift(b, memref, offsets, eltBytes, width * eltBytes);
  auto streamIf = scf::IfOp::create(b, TypeRange{}, uniform, true);
  ImplicitLocOpBuilder ab(b.getLoc(), streamIf.getThenBodyBuilder());
  streamRows(ab, extents, width, shift, read, write);
  storeFence(ab);
  ImplicitLocOpBuilder pb(b.getLoc(), streamIf.getElseBodyBuilder());
  plain(pb);
}

void KernelLowering::writeElems(ImplicitLocOpBuilder &b, Value v, const ViewInfo &vi,
                                ValueRange at, bool nontemporal) {
  auto vt = dyn_cast<VectorType>(v.getType());
  if (!vt) {
    memref::StoreOp::create(b, v, vi.unitMemref, at);
    return;
  }
  if (!nontemporal) {
    vector::StoreOp::create(b, v, vi.unitMemref, at);
    return;
  }
  const int64_t bytes =
      vt.getNumElements() * std::max<int64_t>(1, vt.getElementTypeBitWidth() / 8);
  vector::StoreOp::create(b, v, vi.unitMemref, at, /*nontemporal=*/true,
                          llvm::MaybeAlign(bytes));
}

void KernelLowering::storeFence(ImplicitLocOpBuilder &b) {
  // Non-temporal stores are weakly ordered: sfence orders them before the
  // program's later stores and its completion (x86, the only CPU target).
  LLVM::CallIntrinsicOp::create(b, b.getStringAttr("llvm.x86.sse.sfence"), ValueRange{});
}

LogicalResult KernelLowering::lowerAtomicAdd(Operation *op, Value value,
                                             Value view, Value indices,
                                             ValueRange offsets, Value old,
                                             AtomicKind atomicKind, Value cmp) {
  auto it = views.find(view);
  if (it == views.end())
    return op->emitError(who() + ": the view must be made by a "
                         "kiln.make_view in the same kernel");
  const ViewInfo &vi = it->second;
  auto tileType = cast<RankedTensorType>(value.getType());
  auto buf = bufferOf(value, op);
  if (failed(buf))
    return failure();
  Value cmpBuf;
  if (cmp) {
    auto cb = bufferOf(cmp, op);
    if (failed(cb))
      return failure();
    cmpBuf = *cb;
  }
  // kiln.scatter_add: dimension 0 is the row its index tile names.
  Value idxBuf;
  if (indices) {
    auto ib = bufferOf(indices, op);
    if (failed(ib))
      return failure();
    idxBuf = *ib;
  }
  ImplicitLocOpBuilder b(op->getLoc(), op);
  Type elt = tileType.getElementType();
  bool isFloat = isa<FloatType>(elt);
  arith::AtomicRMWKind kind = arith::AtomicRMWKind::addi;
  switch (atomicKind) {
  case AtomicKind::add:
    kind = isFloat ? arith::AtomicRMWKind::addf : arith::AtomicRMWKind::addi;
    break;
  case AtomicKind::max:
    kind = isFloat ? arith::AtomicRMWKind::maximumf : arith::AtomicRMWKind::maxs;
    break;
  case AtomicKind::min:
    kind = isFloat ? arith::AtomicRMWKind::minimumf : arith::AtomicRMWKind::mins;
    break;
  case AtomicKind::xchg:
    kind = arith::AtomicRMWKind::assign;
    break;
  case AtomicKind::bit_and:
    kind = arith::AtomicRMWKind::andi;
    break;
  case AtomicKind::bit_or:
    kind = arith::AtomicRMWKind::ori;
    break;
  case AtomicKind::bit_xor:
    kind = arith::AtomicRMWKind::xori;
    break;
  }
  // The values the atomics read, when something uses them (zero outside
  // the view).
  Value oldBuf;
  if (!old.use_empty()) {
    oldBuf = allocTile(tileType, op->getLoc());
    buffers[old] = oldBuf;
  }
  auto body = [&](ImplicitLocOpBuilder &ib, ValueRange idx) {
    Value valid = arith::ConstantIntOp::create(ib, 1, 1);
    SmallVector<Value> viewIdx;
    for (auto [d, iv] : llvm::enumerate(idx)) {
      Value i = viewIndexAt(ib, idxBuf, offsets, d, iv);
      viewIdx.push_back(i);
      valid = arith::AndIOp::create(ib, valid, inRange(ib, i, vi.sizes[d]));
    }
    Value v = memref::LoadOp::create(ib, *buf, idx);
    Location loc = op->getLoc();
    // The atomic: an RMW of its kind, or (cmp) a compare and swap: one
    // `llvm.cmpxchg` at the element's address, on the bits (cmpxchg takes
    // integers; floats compare bit for bit).
    auto emit = [&](OpBuilder &tb) -> Value {
      if (!cmpBuf)
        return memref::AtomicRMWOp::create(tb, loc, kind, v, vi.memref, viewIdx);
      ImplicitLocOpBuilder xb(loc, tb);
      Value c = memref::LoadOp::create(xb, cmpBuf, idx);
      auto meta = memref::ExtractStridedMetadataOp::create(xb, vi.memref);
      Value lin = meta.getOffset();
      for (auto [d, i] : llvm::enumerate(viewIdx))
        lin = arith::AddIOp::create(
            xb, lin, arith::MulIOp::create(xb, i, meta.getStrides()[d]));
      unsigned bits = elt.getIntOrFloatBitWidth();
      Value addr = arith::AddIOp::create(
          xb, memref::ExtractAlignedPointerAsIndexOp::create(xb, vi.memref),
          arith::MulIOp::create(xb, lin, cIdx(xb, bits / 8)));
      Type it = xb.getIntegerType(bits);
      auto asInt = [&](Value x) -> Value {
        return isa<FloatType>(elt) ? arith::BitcastOp::create(xb, it, x).getResult() : x;
      };
      // (GPU: relaxed at GPU scope, like the other atomics, which the fences
      // around the op order; x86's lock cmpxchg is sequentially consistent.)
      auto order = simt ? LLVM::AtomicOrdering::monotonic : LLVM::AtomicOrdering::seq_cst;
      auto cas = LLVM::AtomicCmpXchgOp::create(xb, pointerAt(xb, addr, 0), asInt(c),
                                               asInt(v), order, order);
      if (simt)
        cas.setSyncscope(StringRef("device"));
      Value read = LLVM::ExtractValueOp::create(xb, cas, ArrayRef<int64_t>{0});
      return isa<FloatType>(elt) ? arith::BitcastOp::create(xb, elt, read).getResult()
                                 : read;
    };
    if (!oldBuf) {
      auto ifOp = scf::IfOp::create(ib, TypeRange{}, valid, false);
      OpBuilder tb = ifOp.getThenBodyBuilder();
      emit(tb);
      return;
    }
    auto ifOp = scf::IfOp::create(ib, TypeRange{elt}, valid, true);
    OpBuilder tb = ifOp.getThenBodyBuilder();
    Value read = emit(tb);
    scf::YieldOp::create(tb, loc, read);
    OpBuilder eb = ifOp.getElseBodyBuilder();
    scf::YieldOp::create(
        eb, loc,
        arith::ConstantOp::create(eb, loc, elt, eb.getZeroAttr(elt)).getResult());
    memref::StoreOp::create(ib, ifOp.getResult(0), oldBuf, idx);
  };
  if (!simt) {
    // (x86: every atomic is a locked, sequentially consistent RMW.)
    forEachIndex(b, tileType.getShape(), 1, body);
    toErase.push_back(op);
    return success();
  }
  // GPU: the program's accesses before the op happen before its atomics,
  // which happen before its accesses after it (acq_rel at GPU scope, for
  // the whole block: a barrier gathers every thread's earlier writes, each
  // thread's fence releases them; its atomics, a fence and a barrier
  // acquire for all). PTX's plain atom is relaxed: a counter whose last
  // increment says "every partial result is written" needs this.
  barrier(b);
  atomicFence(b);
  distribute(b, *simt, tileType.getShape(), body);
  atomicFence(b);
  barrier(b);
  toErase.push_back(op);
  return success();
}

//===----------------------------------------------------------------------===//
// Tile algebra
//===----------------------------------------------------------------------===//

static bool isElementwiseTileOp(Operation *op) {
  return op->hasTrait<OpTrait::Elementwise>() && op->getNumRegions() == 0 &&
         op->getNumResults() >= 1 &&
         llvm::all_of(op->getResults(),
                      [](Value r) { return isa<RankedTensorType>(r.getType()); });
}

bool KernelLowering::fragmentIf(scf::IfOp op, DotOp dot) {
  // Both branches yield, every result is a tile of the dot's result type,
  // and the results' readers take fragments themselves.
  if (!simt || op.getElseRegion().empty() || op.getNumResults() == 0)
    return false;
  Type type = dot.getResult().getType();
  for (Value r : op.getResults())
    if (r.getType() != type ||
        !(fragmentUses(r, dot) || fragmentUses(r, dot, /*elementwiseOnly=*/true)))
      return false;
  return true;
}

bool KernelLowering::fragmentUses(Value v, DotOp dot, bool elementwiseOnly) {
  if (v.use_empty() ||
      !(elementwiseOnly ? warpTiled(dot) : fragmentTiled(dot)))
    return false;
  auto shape = cast<RankedTensorType>(v.getType()).getShape();
  // The registers are defined where `v` is: the dot's block, or after the
  // loop that carried them (a loop result, lowerFor). A loop's fragment
  // argument is used in the loop's body, which lowerFor moves into a new
  // loop: its users' block, then, not the old body it belongs to.
  Block *home = isa<BlockArgument>(v) ? v.getUses().begin()->getOwner()->getBlock()
                                      : v.getParentBlock();
  for (OpOperand &use : v.getUses()) {
    Operation *user = use.getOwner();
    // A use in a branch of an scf.if that yields fragments (fragmentIf): the
    // branch's expressions compute fragment elements too, and the yields
    // pass registers (lowerFragmentIf).
    // (A branch being lowered belongs to the rebuilt if, which yields the
    // registers: fragmentIfBlocks.)
    auto inFragmentIf = [&](Operation *o) {
      auto branch = dyn_cast_or_null<scf::IfOp>(o->getParentOp());
      return branch && (fragmentIfBlocks.contains(o->getBlock()) ||
                        fragmentIf(branch, dot));
    };
    Block *at = home;
    if (user->getBlock() != home) {
      if (user->getParentOp()->getBlock() != home || !inFragmentIf(user))
        return false;
      at = user->getBlock();
      if (isa<scf::YieldOp>(user))
        continue;
    }
    // Yielded by an scf.if that yields fragments.
    if (isa<scf::YieldOp>(user) && inFragmentIf(user))
      continue;
    // Carried to the next iteration, or into a loop, in registers.
    if (isa<scf::YieldOp>(user)) {
      // (Decided by lowerFor before the body is lowered.)
      if (carriedYields.contains(v))
        continue;
      if (!carriedDots.contains(dot) || v != dot.getResult())
        return false;
      continue;
    }
    if (auto loop = dyn_cast<scf::ForOp>(user)) {
      if (use.getOperandNumber() < loop.getNumControlOperands())
        return false;
      DotOp carry =
          fragmentCarry(loop, use.getOperandNumber() - loop.getNumControlOperands());
      if (!carry || !sameRegisterTiling(carry, dot))
        return false;
      continue;
    }
    if (elementwiseOnly && isa<DotOp, ReduceOp>(user))
      return false;
    if (auto d2 = dyn_cast<DotOp>(user)) {
      if (d2.getLhs() != v || d2.getRhs() == v || d2.getAcc() == v ||
          !registerOperandA(dot, d2))
        return false;
      continue;
    }
    if (auto red = dyn_cast<ReduceOp>(user)) {
      ReduceKind k = red.getKind();
      if (red.getAxis() != 1 || shape.size() != 2 || !rowsInWarps(dot) ||
          !cast<RankedTensorType>(v.getType()).getElementType().isF32() ||
          (k != ReduceKind::sum && k != ReduceKind::max &&
           k != ReduceKind::min))
        return false;
      continue;
    }
    // Through deferred ops (each the only operand use of its single user) to
    // the elementwise op that is materialized.
    while (user->getBlock() == at && isElementwiseTileOp(user) &&
           !registerRowScales.count(user) && canDefer(user))
      user = *user->getResult(0).getUsers().begin();
    if (user->getBlock() != at || !isElementwiseTileOp(user) ||
        registerRowScales.count(user) || user->getNumResults() != 1 ||
        cast<RankedTensorType>(user->getResult(0).getType()).getShape() !=
            shape)
      return false;
  }
  return true;
}

/// An elementwise op worth recomputing per element rather than storing:
/// integer arithmetic (no division), comparisons, selects, casts.
static bool cheapToRecompute(Operation *op) {
  return isa<arith::AddIOp, arith::SubIOp, arith::MulIOp, arith::AndIOp,
             arith::OrIOp, arith::XOrIOp, arith::CmpIOp, arith::CmpFOp,
             arith::SelectOp, arith::ExtSIOp, arith::ExtUIOp, arith::TruncIOp,
             arith::IndexCastOp, arith::MaxSIOp, arith::MinSIOp>(op);
}

/// The dimension p at which a reshape of a broadcast merges two adjacent
/// dimensions ([.., a, b, ..] -> [.., a * b, ..], p the position of a), if
/// it does: element i of that dimension is the source's (i / b, i % b), so
/// it is read through the broadcast like an index computation
/// (dot_scaled's scales over their 32 elements of K, for either operand).
static std::optional<int64_t> mergedBroadcastDim(Operation *op) {
  auto reshape = dyn_cast<ReshapeOp>(op);
  if (!reshape || !reshape.getSrc().getDefiningOp<BroadcastOp>())
    return std::nullopt;
  ArrayRef<int64_t> src =
      cast<RankedTensorType>(reshape.getSrc().getType()).getShape();
  ArrayRef<int64_t> res =
      cast<RankedTensorType>(reshape.getResult().getType()).getShape();
  if (src.size() < 2 || res.size() + 1 != src.size())
    return std::nullopt;
  for (size_t p = 0; p < res.size(); ++p)
    if (src.take_front(p) == res.take_front(p) &&
        src.drop_front(p + 2) == res.drop_front(p + 1) &&
        src[p] * src[p + 1] == res[p])
      return p;
  return std::nullopt;
}

bool isTileSlice(tensor::ExtractSliceOp op) {
  auto isStatic = [](ArrayRef<int64_t> v) {
    return llvm::none_of(v, ShapedType::isDynamic);
  };
  return op.getSourceType().getRank() == op.getResultType().getRank() &&
         isStatic(op.getStaticOffsets()) && isStatic(op.getStaticSizes()) &&
         llvm::all_of(op.getStaticStrides(), [](int64_t s) { return s == 1; });
}

/// Whether every use of tile `v` is a dot's A or B operand, directly or
/// through further slices (the CPU's slice views).
static bool onlyDotOperands(Value v) {
  if (v.use_empty())
    return false;
  for (Operation *user : v.getUsers()) {
    if (auto sl = dyn_cast<tensor::ExtractSliceOp>(user)) {
      if (!isTileSlice(sl) || !onlyDotOperands(sl.getResult()))
        return false;
      continue;
    }
    auto dot = dyn_cast<DotOp>(user);
    if (!dot || dot.getAcc() == v)
      return false;
  }
  return true;
}

/// The positions of a shape's dimensions other than 1.
static SmallVector<int64_t> nonUnitDims(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> dims;
  for (auto [d, n] : llvm::enumerate(shape))
    if (n != 1)
      dims.push_back(d);
  return dims;
}

/// Whether a reshape only adds or drops unit dimensions (anywhere: a [B, 1]
/// column of indices read as [B]): element i of the result is the source's
/// at i's indices of the other dimensions, 0 in its unit ones.
static bool unitDimsOnly(ReshapeOp op) {
  ArrayRef<int64_t> from = op.getSrc().getType().getShape(),
                    to = op.getResult().getType().getShape();
  auto sizes = [](ArrayRef<int64_t> shape) {
    return llvm::map_to_vector(nonUnitDims(shape), [&](int64_t d) { return shape[d]; });
  };
  return !from.empty() && !to.empty() && sizes(from) == sizes(to);
}

/// Whether `op` computes an integer (or i1) tile from iotas, splats of
/// scalars and splat constants alone, through expand_dims, broadcasts and
/// cheap integer arithmetic: its elements are a few integer instructions
/// from their coordinates wherever they are needed. (Nothing loaded, no row
/// vector or dot fragment in registers, nothing expensive: such tiles keep
/// their buffers when read in a later block.)
static bool isIndexTile(Operation *op, DenseMap<Operation *, bool> &memo) {
  if (auto it = memo.find(op); it != memo.end())
    return it->second;
  auto decide = [&]() -> bool {
    if (op->getNumResults() != 1)
      return false;
    auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
    if (!type || !isa<IntegerType, IndexType>(type.getElementType()))
      return false;
    if (isa<ArangeOp, SplatOp>(op))
      return true;
    DenseElementsAttr cst;
    if (matchPattern(op->getResult(0), m_Constant(&cst)))
      return cst.isSplat();
    if (!isa<ExpandDimsOp, BroadcastOp>(op) &&
        !(cheapToRecompute(op) && !isa<arith::CmpFOp>(op)))
      return false;
    return llvm::all_of(op->getOperands(), [&](Value v) {
      if (!isa<RankedTensorType>(v.getType()))
        return true; // a scalar (a select's condition may be one)
      Operation *def = v.getDefiningOp();
      return def && isIndexTile(def, memo);
    });
  };
  // (Memoized: a DAG of shared subexpressions is walked once, not once per
  // path.)
  bool r = decide();
  memo[op] = r;
  return r;
}

bool KernelLowering::storesElements(Operation *user, Value v) {
  if (simt || user->getBlock() != v.getParentBlock())
    return false;
  if (auto reshape = dyn_cast<ReshapeOp>(user)) {
    if (!unitDimsOnly(reshape) || !reshape.getResult().hasOneUse() ||
        reshape.getResult().getType().getShape().back() !=
            reshape.getSrc().getType().getShape().back())
      return false;
    user = *reshape.getResult().getUsers().begin();
    v = reshape.getResult();
    if (user->getBlock() != reshape->getBlock())
      return false;
  }
  auto store = dyn_cast<StoreOp>(user);
  return store && store.getValue() == v;
}

bool KernelLowering::canDefer(Operation *op) {
  // A splat, broadcast, iota or expand_dims costs a read (or nothing) per
  // element wherever it is inlined, so it may have several users, and those
  // may be such ops themselves; an elementwise op has one user. So does a
  // reshape merging two dimensions of a broadcast (an index division).
  bool cheap = isa<SplatOp, BroadcastOp, ArangeOp, ExpandDimsOp>(op) ||
               mergedBroadcastDim(op).has_value();
  if (op->getNumResults() != 1 || op->use_empty() ||
      (!cheap && !op->hasOneUse()))
    return false;
  if (!cheap && !isElementwiseTileOp(op))
    return false;
  // A row vector in registers expands to a row vector (lowerReshape).
  if (isa<ExpandDimsOp>(op) && rowFragments.count(op->getOperand(0)))
    return false;
  auto shape = cast<RankedTensorType>(op->getResult(0).getType()).getShape();
  DenseMap<Operation *, bool> indexTiles;
  return llvm::all_of(op->getUsers(), [&](Operation *user) {
    // On a GPU, an index tile (isIndexTile) read in a loop or an if after
    // it is recomputed there, per element, from the element's coordinates:
    // as a buffer it was filled behind barriers and read back from shared
    // memory at every use (attention's query and key positions, once per
    // score in each masked block). The CPU keeps the buffer, whose vectors
    // it reads once per use.
    if (user->getBlock() != op->getBlock() &&
        !(simt && isIndexTile(op, indexTiles) &&
          op->getBlock()->findAncestorOpInBlock(*user)))
      return false;
    // CPU: a store computes the elements as it writes them (an epilogue's
    // bias or cast: no tile of them, no pass writing it and reading it back).
    if (storesElements(user, op->getResult(0)))
      return true;
    // Through a broadcast an op is computed once per element of the result:
    // only cheap ones (integer and comparison arithmetic: the masks' index
    // tiles), not exponentials or divisions.
    if (isa<BroadcastOp, ExpandDimsOp>(user))
      return (cheap || cheapToRecompute(op)) && canDefer(user);
    if (mergedBroadcastDim(user))
      return isa<BroadcastOp>(op) && canDefer(user);
    return isElementwiseTileOp(user) &&
           user->getResult(0).getType() ==
               RankedTensorType::get(
                   shape, cast<RankedTensorType>(user->getResult(0).getType())
                              .getElementType());
  });
}

void KernelLowering::collectTypes(Value v, SmallVectorImpl<Type> &types) {
  types.push_back(getElementTypeOrSelf(v.getType()));
  Operation *def = v.getDefiningOp();
  if (!def || !deferred.contains(def))
    return;
  for (Value o : def->getOperands())
    collectTypes(o, types);
}

/// The elements of tile `v` at `idx` (a vector of `width`, or a scalar when
/// width is 1): loaded from its buffer, or computed inline when its
/// producer was deferred.
Value KernelLowering::emitElems(ImplicitLocOpBuilder &ib, Value v,
                                ValueRange idx, int64_t width) {
  if (!memoElems)
    return emitElemsAt(ib, v, idx, width);
  // A register loop's body is all deferred, shared values included: each
  // (value, index, width, group) computed once, or a DAG of shared
  // subexpressions would be emitted once per path (exponentially many).
  // Constant indices count by value (broadcasts make new zeros).
  std::vector<std::pair<bool, intptr_t>> at;
  for (Value i : idx) {
    APInt c;
    if (matchPattern(i, m_ConstantInt(&c)))
      at.push_back({true, intptr_t(c.getSExtValue())});
    else
      at.push_back({false, reinterpret_cast<intptr_t>(i.getAsOpaquePointer())});
  }
  // (The group counts only for values computed from the carried tiles:
  // the others' elements at an index are the same in every group.)
  auto key = std::make_tuple(v.getAsOpaquePointer(), std::move(at), width,
                             fromCarried(v) ? curGroup : int64_t(-1));
  if (auto it = elemMemo.find(key); it != elemMemo.end())
    return it->second;
  Value r = emitElemsAt(ib, v, idx, width);
  elemMemo[key] = r;
  return r;
}

bool KernelLowering::fromCarried(Value v) {
  if (groupOverride.count(v))
    return true;
  Operation *def = v.getDefiningOp();
  if (!def || !deferred.contains(def))
    return false;
  if (auto it = carriedMemo.find(v); it != carriedMemo.end())
    return it->second;
  bool from = llvm::any_of(def->getOperands(), [&](Value o) { return fromCarried(o); });
  carriedMemo[v] = from;
  return from;
}

Value KernelLowering::emitElemsAt(ImplicitLocOpBuilder &ib, Value v,
                                  ValueRange idx, int64_t width) {
  Type elt = getElementTypeOrSelf(v.getType());
  auto vecOf = [&](Type e) { return VectorType::get({width}, e); };
  if (width == 1)
    if (Value o = elemOverride.lookup(v))
      return o;
  // A register loop's carried vectors.
  if (auto it = groupOverride.find(v); it != groupOverride.end())
    return it->second[curGroup];
  DenseElementsAttr splat;
  if (matchPattern(v, m_Constant(&splat)) && splat.isSplat())
    return splatConstant(ib, cast<TypedAttr>(splat.getSplatValue<Attribute>()),
                         width);
  Operation *def = v.getDefiningOp();
  if (!def || !deferred.contains(def))
    return loadElems(ib, buffers.lookup(v), idx, elt, width);
  if (auto splat = dyn_cast<SplatOp>(def)) {
    Value s = splat.getValue();
    return width == 1 ? s : Value(vector::BroadcastOp::create(ib, vecOf(elt), s));
  }
  if (auto ar = dyn_cast<ArangeOp>(def)) {
    // start + i, lanes i .. i + width - 1.
    auto it = cast<IntegerType>(elt);
    Value v = arith::AddIOp::create(
        ib, arith::IndexCastOp::create(ib, it, idx[0]),
        arith::ConstantIntOp::create(ib, it, ar.getStart()));
    if (width == 1)
      return v;
    SmallVector<APInt> lanes;
    for (int64_t l = 0; l < width; ++l)
      lanes.push_back(APInt(it.getWidth(), l));
    return arith::AddIOp::create(
        ib, vector::BroadcastOp::create(ib, vecOf(elt), v),
        arith::ConstantOp::create(
            ib, DenseElementsAttr::get(cast<ShapedType>(vecOf(elt)), lanes)));
  }
  if (auto ex = dyn_cast<ExpandDimsOp>(def)) {
    // The source's element: the index without the unit dimension.
    SmallVector<Value> sidx(idx.begin(), idx.end());
    sidx.erase(sidx.begin() + ex.getAxis());
    return emitElems(ib, ex.getSrc(), sidx, width);
  }
  if (auto bc = dyn_cast<BroadcastOp>(def)) {
    auto srcType = bc.getSrc().getType();
    auto type = bc.getResult().getType();
    Value c0 = arith::ConstantIndexOp::create(ib, 0);
    SmallVector<Value> sidx;
    for (auto [d, iv] : llvm::enumerate(idx))
      sidx.push_back(srcType.getDimSize(d) == type.getDimSize(d) ? iv : c0);
    // A row vector in registers (rowFragments) broadcast over the columns
    // of the fragments being walked: this element's row value.
    if (fragmentRowSlot >= 0 && width == 1)
      if (auto it = rowFragments.find(bc.getSrc());
          it != rowFragments.end() && sameRows(it->second.first, fragmentRowDot))
        return it->second.second[fragmentRowSlot];
    bool innerBroadcast = srcType.getShape().back() != type.getShape().back();
    Operation *srcDef = bc.getSrc().getDefiningOp();
    // (A splat constant source too: it has a buffer only once something
    // asked bufferOf, and a register loop's body reads it inline.)
    DenseElementsAttr srcSplat;
    bool inlineSrc = (srcDef && deferred.contains(srcDef)) ||
                     (matchPattern(bc.getSrc(), m_Constant(&srcSplat)) &&
                      srcSplat.isSplat());
    if (innerBroadcast) {
      Value s = inlineSrc ? emitElems(ib, bc.getSrc(), sidx, 1)
                          : loadElems(ib, buffers.lookup(bc.getSrc()), sidx, elt, 1);
      return width == 1 ? s : Value(vector::BroadcastOp::create(ib, vecOf(elt), s));
    }
    if (inlineSrc)
      return emitElems(ib, bc.getSrc(), sidx, width);
    return loadElems(ib, buffers.lookup(bc.getSrc()), sidx, elt, width);
  }
  if (auto reshape = dyn_cast<ReshapeOp>(def);
      reshape && unitDimsOnly(reshape)) {
    // Only unit dimensions added or dropped (a register loop's [1, 1, R, C]
    // load as [R, C], a [B, 1] column as [B]): the same element, at the
    // indices of the dimensions other than 1 (0 in the source's unit ones).
    ArrayRef<int64_t> srcShape = reshape.getSrc().getType().getShape(),
                      resShape = reshape.getResult().getType().getShape();
    SmallVector<int64_t> srcDims = nonUnitDims(srcShape), resDims = nonUnitDims(resShape);
    auto sourceIndex = [&](ValueRange at) {
      SmallVector<Value> sidx(srcShape.size(), Value());
      for (auto [sd, rd] : llvm::zip(srcDims, resDims))
        sidx[sd] = at[rd];
      for (Value &i : sidx)
        if (!i)
          i = cIdx(ib, 0);
      return sidx;
    };
    // A vector along the result's last dimension is one along the source's
    // when that dimension is the source's last too; else lane by lane.
    const int64_t resLast = resShape.size() - 1, srcLast = srcShape.size() - 1;
    bool sameLast = resShape[resLast] == 1 ||
                    (!resDims.empty() && resDims.back() == resLast && srcDims.back() == srcLast);
    if (width == 1 || sameLast)
      return emitElems(ib, reshape.getSrc(), sourceIndex(idx), width);
    SmallVector<Value> lanes;
    for (int64_t l = 0; l < width; ++l) {
      SmallVector<Value> at(idx.begin(), idx.end());
      at.back() = arith::AddIOp::create(ib, at.back(), cIdx(ib, l));
      lanes.push_back(emitElems(ib, reshape.getSrc(), sourceIndex(at), 1));
    }
    return vector::FromElementsOp::create(ib, VectorType::get({width}, lanes[0].getType()),
                                          lanes);
  }
  if (auto reshape = dyn_cast<ReshapeOp>(def)) {
    // mergedBroadcastDim p: element i of dimension p is the source's
    // (i / b, i % b). Along the last dimension a vector of lanes within one
    // group of b reads the source's vector there, else lane by lane.
    int64_t p = *mergedBroadcastDim(def);
    auto srcType = cast<RankedTensorType>(reshape.getSrc().getType());
    int64_t b = srcType.getDimSize(p + 1);
    bool last = p + 1 == static_cast<int64_t>(idx.size());
    auto split = [&](Value i) {
      SmallVector<Value> sidx(idx.take_front(p));
      sidx.push_back(arith::DivUIOp::create(ib, i, cIdx(ib, b)));
      sidx.push_back(arith::RemUIOp::create(ib, i, cIdx(ib, b)));
      llvm::append_range(sidx, idx.drop_front(p + 1));
      return sidx;
    };
    if (!last || width == 1 || b % width == 0)
      return emitElems(ib, reshape.getSrc(), split(idx[p]), width);
    // Groups narrower than the vector of a tile repeated over a new last
    // dimension (reshape(broadcast(expand_dims(x)))): e2m1's bytes, each
    // read for its two nibbles. The vector is width / b consecutive
    // elements of x, each repeated b times (a shuffle), where the vectors
    // start at multiples of width and so of b.
    if (width % b == 0)
      if (auto bc = reshape.getSrc().getDefiningOp<BroadcastOp>();
          bc && deferred.contains(bc))
        if (auto ex = bc.getSrc().getDefiningOp<ExpandDimsOp>();
            ex && deferred.contains(ex) && ex.getAxis() == p + 1 &&
            bc.getSrc().getType().getDimSize(p) == srcType.getDimSize(p)) {
          // x's index: the broadcast's source index (a broadcast dimension
          // reads 0) without expand_dims' unit dimension p + 1.
          ArrayRef<int64_t> bcSrc = bc.getSrc().getType().getShape();
          SmallVector<Value> xidx;
          for (int64_t d = 0; d < p; ++d)
            xidx.push_back(bcSrc[d] == srcType.getDimSize(d) ? idx[d]
                                                             : cIdx(ib, 0));
          xidx.push_back(arith::DivUIOp::create(ib, idx[p], cIdx(ib, b)));
          Value narrow = emitElems(ib, ex.getSrc(), xidx, width / b);
          SmallVector<int64_t> mask;
          for (int64_t l = 0; l < width; ++l)
            mask.push_back(l / b);
          return vector::ShuffleOp::create(ib, narrow, narrow, mask);
        }
    SmallVector<Value> lanes;
    for (int64_t l = 0; l < width; ++l)
      lanes.push_back(emitElems(
          ib, reshape.getSrc(),
          split(arith::AddIOp::create(ib, idx[p], cIdx(ib, l))), 1));
    return vector::FromElementsOp::create(ib, vecOf(elt), lanes);
  }
  // A register loop's read (lowerRegisterLoop).
  if (isa<LoadOp, GatherOp>(def))
    return readViewElems(ib, def, idx, width);
  // A deferred elementwise op: its operands, then the op on vectors.
  bool isSelect = isa<arith::SelectOp>(def);
  SmallVector<Value> operands;
  for (auto [i, o] : llvm::enumerate(def->getOperands())) {
    if (isa<RankedTensorType>(o.getType()))
      operands.push_back(emitElems(ib, o, idx, width));
    else if (width > 1 && !(isSelect && i == 0))
      operands.push_back(vector::BroadcastOp::create(ib, vecOf(o.getType()), o));
    else
      operands.push_back(o);
  }
  Type rt = width == 1 ? elt : Type(vecOf(elt));
  OperationState state(def->getLoc(), def->getName().getStringRef(), operands,
                       TypeRange{rt}, def->getAttrs());
  return ib.create(state)->getResult(0);
}

LogicalResult KernelLowering::lowerElementwise(Operation *op) {
  if (simt)
    if (std::optional<LogicalResult> rows = lowerRowElementwise(op))
      return *rows;
  auto resultType = cast<RankedTensorType>(op->getResult(0).getType());
  SmallVector<Type> types;
  for (Value v : op->getOperands())
    collectTypes(v, types);
  for (Type t : op->getResultTypes())
    types.push_back(getElementTypeOrSelf(t));
  int64_t w = vectorWidth(types, resultType.getShape().back());
  // SIMT: dot results kept in registers that this expression reads
  // (fragmentUses): each lane computes the elements of its own fragments.
  // Leaves of several dots' layouts are stored first (bufferOf).
  SmallVector<Value> fragmentLeaves;
  std::function<void(Value)> findFragments = [&](Value v) {
    if (fragmentResults.count(v) && !llvm::is_contained(fragmentLeaves, v))
      fragmentLeaves.push_back(v);
    Operation *def = v.getDefiningOp();
    if (def && deferred.contains(def) && !isa<BroadcastOp>(def))
      for (Value o : def->getOperands())
        findFragments(o);
  };
  if (simt)
    for (Value v : op->getOperands())
      findFragments(v);
  DotOp fragmentDot;
  if (!fragmentLeaves.empty()) {
    fragmentDot = fragmentResults[fragmentLeaves[0]].first;
    if (llvm::any_of(fragmentLeaves, [&](Value l) {
          return fragmentResults[l].first != fragmentDot;
        }))
      fragmentLeaves.clear(); // checkLeaves stores them all
  }
  // Every tile the fused expression reads must have a buffer, but for
  // fragments and row vectors of the fragments' rows (rowFragments).
  // (`leafBufs`: the shared buffers the leaves are read from.)
  SmallVector<Value> leafBufs;
  auto readLeaf = [&](Value v) -> LogicalResult {
    FailureOr<Value> buf = bufferOf(v, op);
    if (failed(buf))
      return failure();
    leafBufs.push_back(*buf);
    return success();
  };
  std::function<LogicalResult(Value)> checkLeaves = [&](Value v) -> LogicalResult {
    if (!isa<RankedTensorType>(v.getType()) ||
        llvm::is_contained(fragmentLeaves, v))
      return success();
    Operation *def = v.getDefiningOp();
    if (!def || !deferred.contains(def))
      return readLeaf(v);
    if (auto bc = dyn_cast<BroadcastOp>(def)) {
      auto it = rowFragments.find(bc.getSrc());
      if (!fragmentLeaves.empty() && it != rowFragments.end() &&
          sameRows(it->second.first, fragmentDot))
        return success();
      Operation *srcDef = bc.getSrc().getDefiningOp();
      if (srcDef && deferred.contains(srcDef))
        return checkLeaves(bc.getSrc());
      return readLeaf(bc.getSrc());
    }
    for (Value o : def->getOperands())
      if (failed(checkLeaves(o)))
        return failure();
    return success();
  };
  for (Value v : op->getOperands())
    if (failed(checkLeaves(v)))
      return failure();
  SmallVector<Value> resultBufs;
  for (Value r : op->getResults()) {
    // SIMT: a result only mma.sync dots read (fp8 operands decoded to
    // bf16, DSA's probabilities) takes their operand layout, XOR-swizzled
    // or padded rows (allocMmaSyncOperandTile), not an operand's buffer:
    // stored element by element through tileIndices.
    if (simt && op->getNumResults() == 1)
      if (Value rows = allocMmaSyncOperandTile(r, op->getLoc())) {
        resultBufs.push_back(rows);
        continue;
      }
    // Write in place over an operand that dies here (its only use, in this
    // block: e.g. a loop-carried accumulator): element i is read before it
    // is written, so the loop's yield then copies nothing.
    Value reuse;
    if (op->getNumResults() == 1)
      for (Value v : op->getOperands()) {
        Operation *def = v.getDefiningOp();
        if (v.getType() == r.getType() && v.hasOneUse() &&
            definingBlock(v) == op->getBlock() &&
            !(def && deferred.contains(def)) && buffers.lookup(v)) {
          reuse = buffers.lookup(v);
          break;
        }
      }
    resultBufs.push_back(reuse ? reuse : allocResultTile(r, op->getLoc()));
  }
  ImplicitLocOpBuilder b(op->getLoc(), op);
  bool isSelect = isa<arith::SelectOp>(op);
  // A fragment expression's result stays in registers too when its uses
  // allow (fragmentUses), else it is stored element by element.
  bool keepFragments =
      !fragmentLeaves.empty() && op->getNumResults() == 1 &&
      (fragmentUses(op->getResult(0), fragmentDot) ||
       fragmentUses(op->getResult(0), fragmentDot, /*elementwiseOnly=*/true));
  SmallVector<Value> keptRegs;
  auto forEach = [&](function_ref<void(ImplicitLocOpBuilder &, ValueRange)> fn) {
    if (fragmentLeaves.empty()) {
      forEachIndex(b, resultType.getShape(), w, fn);
      return;
    }
    size_t n = 0;
    forEachFragment(b, fragmentDot, fragmentResults[fragmentLeaves[0]].second,
                    [&](ImplicitLocOpBuilder &ib, ValueRange idx, Value) {
                      for (Value leaf : fragmentLeaves)
                        elemOverride[leaf] = fragmentResults[leaf].second[n];
                      ++n;
                      fn(ib, idx);
                    });
    for (Value leaf : fragmentLeaves)
      elemOverride.erase(leaf);
    if (!keepFragments)
      barrier(b);
    else if (llvm::any_of(leafBufs, [&](Value buf) {
               return !pipelinedBuffers.count(buf) &&
                      (!op->getParentOfType<scf::ForOp>() ||
                       rewrittenInLoop(buf, op));
             }))
      // No barrier follows these reads: the next write of a tile, or the
      // loop's back edge, syncs first where the buffer's bytes may be
      // another tile's later (the narrow dsa_indexer's per-head weights and
      // the next head's query rows at one stage raced). A pipelined stage
      // is rewritten only after the next iteration's first barrier.
      unsyncedReads = true;
  };
  forEach([&](ImplicitLocOpBuilder &ib, ValueRange idx) {
    SmallVector<Value> operands;
    for (auto [i, v] : llvm::enumerate(op->getOperands())) {
      if (isa<RankedTensorType>(v.getType())) {
        operands.push_back(emitElems(ib, v, idx, w));
      } else if (w > 1 && !(isSelect && i == 0)) {
        operands.push_back(vector::BroadcastOp::create(
            ib, VectorType::get({w}, v.getType()), v));
      } else {
        operands.push_back(v);
      }
    }
    SmallVector<Type> resultTypes;
    for (Type t : op->getResultTypes()) {
      Type e = getElementTypeOrSelf(t);
      resultTypes.push_back(w == 1 ? e : Type(VectorType::get({w}, e)));
    }
    OperationState state(op->getLoc(), op->getName().getStringRef(), operands,
                         resultTypes, op->getAttrs());
    Operation *scalarOp = ib.create(state);
    if (keepFragments) {
      keptRegs.push_back(scalarOp->getResult(0));
      return;
    }
    for (auto [r, buf] : llvm::zip(scalarOp->getResults(), resultBufs))
      storeElems(ib, r, buf, idx, w);
  });
  if (keepFragments)
    fragmentResults[op->getResult(0)] = {fragmentDot, keptRegs};
  else
    fenceCoreWrites(b, resultBufs);
  for (auto [r, buf] : llvm::zip(op->getResults(), resultBufs))
    buffers[r] = buf;
  toErase.push_back(op);
  return success();
}

/// The register-blocked micro-kernel: for each MR x (NV*W) block of the
/// result, MR*NV vector accumulators stay in registers across the whole
/// contraction loop; each step loads NV vectors of a row of rhs and
/// broadcasts MR elements of a column of lhs.
LogicalResult KernelLowering::lowerDot(DotOp op) {
  if (simt && registerTiles.count(op.getAcc()))
    return lowerRegisterDot(op); // a loop-carried accumulator in registers
  auto lhsType = op.getLhs().getType();
  auto accType = op.getAcc().getType();
  int64_t M = lhsType.getDimSize(0), K = lhsType.getDimSize(1),
          N = accType.getDimSize(1);
  Type inElt = lhsType.getElementType(), accElt = accType.getElementType();
  TypedAttr accSplat;
  // A splat accumulator (the usual zeros) starts in registers: no buffer to
  // read, and none to copy when it is defined outside the dot's loop.
  TypedAttr cpuSplat;
  DenseElementsAttr dense;
  if (simt)
    accSplat = splatAccumulator(op);
  else if (matchPattern(op.getAcc(), m_Constant(&dense)) && dense.isSplat())
    cpuSplat = dense.getSplatValue<TypedAttr>();
  // (A's tile may be a load deferred to the dot: emitOnTile below.)
  auto a = deferredSource(op.getLhs()).first ? FailureOr<Value>(Value())
                                             : bufferOf(op.getLhs(), op);
  Value ntSource = ntSources.lookup(op.getRhs()), ntTile = ntDeferred.lookup(op.getRhs());
  auto [rhsLoad, rhsReshape] = deferredSource(op.getRhs());
  auto rhsBuf = ntSource  ? FailureOr<Value>(ntSource)
                : ntTile  ? FailureOr<Value>(Value()) // (read by emitDotNT)
                : rhsLoad ? deferredRhs(op, rhsLoad, rhsReshape)
                          : bufferOf(op.getRhs(), op);
  // (A splat accumulator in registers needs no buffer.)
  FailureOr<Value> c = accSplat || cpuSplat ? FailureOr<Value>(Value())
                                            : bufferOf(op.getAcc(), op);
  if (failed(a) || failed(rhsBuf) || failed(c))
    return failure();
  FailureOr<Value> bb = rhsBuf; // (the kernel below widens its own copy)
  ImplicitLocOpBuilder b(op.getLoc(), op);

  // Accumulate in place when the accumulator dies here (its only use is this
  // dot, in the same block: a loop-carried accumulator); otherwise copy it.
  Value out;
  Value acc = op.getAcc();
  bool sameBlock = definingBlock(acc) == op->getBlock();
  if (accSplat || cpuSplat) {
    out = allocTile(accType, op.getLoc()); // the result only
  } else if (acc.hasOneUse() && sameBlock) {
    out = *c;
  } else {
    out = allocTile(accType, op.getLoc());
    copyTile(b, *c, out, accType);
  }
  if (simt) {
    if (failed(lowerDotSimt(op, *a, *bb, out, accSplat)))
      return failure();
    buffers[op.getResult()] = out;
    toErase.push_back(op);
    return success();
  }
  if (ntSource) {
    if (failed(emitOnTile(b, op.getLhs(), op, [&](ImplicitLocOpBuilder &ib, TileReader readA) {
          emitDotNT(ib, readA, bufferReader(ntSource), inElt, out, cpuSplat, M, K, N);
        })))
      return failure();
    buffers[op.getResult()] = out;
    toErase.push_back(op);
    return success();
  }
  if (ntTile) {
    // x's rows read in place where its tile is interior (ntReadsOnce: the
    // lhs is not deferred, so its buffer serves both branches).
    if (failed(emitOnTile(b, ntTile, op, [&](ImplicitLocOpBuilder &ib, TileReader readX) {
          emitDotNT(ib, bufferReader(*a), readX, inElt, out, cpuSplat, M, K, N);
        })))
      return failure();
    buffers[op.getResult()] = out;
    toErase.push_back(op);
    return success();
  }

  // The micro-kernel, on A's buffer `a` (once, or once per branch below).
  // The kernel's own buffers (widened B and A, B in pairs), shared by its
  // two emissions for a direct A: they run in exclusive branches.
  Value scratchTiles[3];
  auto emitKernel = [&](ImplicitLocOpBuilder &b, TileReader readA, Type inElt) {
  FailureOr<Value> bb = rhsBuf;
  Type rhsElt = inElt; // (B's elements as the k loop reads them)
  bool isFloat = isa<FloatType>(accElt);
  // AVX512-BF16 (bf16Dot): a bf16 x bf16 dot accumulating in f32 or bf16
  // runs on vdpbf16ps, each lane adding the two products of a pair of k
  // steps: B's rows are interleaved in pairs once (packed[k/2, 2j + k%2] =
  // B[k, j]), and each step broadcasts the pair A[i, k..k+1] as one 32-bit
  // word. The f32 lanes are at most 16 wide (one zmm), at least 4 (xmm).
  int64_t pairWidth = vectorWidth({Float32Type::get(op.getContext())}, N);
  bool pairs = bf16Dot && inElt.isBF16() && isFloat &&
               accElt.getIntOrFloatBitWidth() <= 32 && K >= 2 &&
               pairWidth >= 4 && pairWidth <= 16;
  int64_t w = pairs ? pairWidth : vectorWidth({accElt}, N);
  int64_t nvec = N / w;
  // The block must fit the vector registers: 32 with AVX-512, 16 with AVX2
  // and SSE. AVX-512 takes up to 4 vectors of a row of B (6 x 4 = 24
  // accumulators + 4 B vectors + 1 broadcast <= 32 zmm), the others 2
  // (6 x 2 = 12 + 2 + 1 <= 16 ymm, Haswell's 6 x 16 block): at 6 x 4 an
  // AVX2 kernel kept half its accumulators on the stack, a load and a store
  // around every FMA.
  int64_t registers = vectorBits >= 512 ? 32 : 16;
  int64_t nv = 1;
  for (int64_t cand : {4, 3, 2, 1})
    if (cand <= registers / 8 && nvec % cand == 0) {
      nv = cand;
      break;
    }
  // Rows per register block: as many as the registers hold, at most 6; the
  // M % mr remainder rows get a second, smaller static block.
  int64_t mr = std::max<int64_t>(
      1, std::min<int64_t>({M, (registers - nv - 1) / nv, int64_t(6)}));
  int64_t mMain = M - M % mr, mRem = M % mr;
  // An f16/bf16 accumulator is carried in f32 through the k loop and
  // rounded once at its end (as GPUs' f32-accumulating dots and Triton do):
  // x86 has no f16 FMA, and LLVM's f16 FMA is an f64 one rounded by
  // compiler-rt's __truncdfhf2, which the kernel loader does not provide.
  Type calcElt = isFloat && accElt.getIntOrFloatBitWidth() < 32
                     ? Type(Float32Type::get(accElt.getContext()))
                     : accElt;
  // Width 1 (N not a multiple of 2) works on scalars.
  Type vt = w == 1 ? calcElt : Type(VectorType::get({w}, calcElt));
  auto extend = [&](ImplicitLocOpBuilder &ib, Value v, Type to) -> Value {
    if (getElementTypeOrSelf(v.getType()) == getElementTypeOrSelf(to))
      return v;
    if (isFloat)
      return arith::ExtFOp::create(ib, to, v);
    return arith::ExtSIOp::create(ib, to, v);
  };

  Value c0 = arith::ConstantIndexOp::create(b, 0);
  Value cN = arith::ConstantIndexOp::create(b, N);
  Value cK = arith::ConstantIndexOp::create(b, K);
  Value c1 = arith::ConstantIndexOp::create(b, 1);
  Value cNB = arith::ConstantIndexOp::create(b, nv * w);
  // Without vdpbf16ps, narrow float operands (bf16, f16; fp8 and the
  // microscaling formats arrive decoded to bf16) are widened to f32 once per
  // dot, so the k loop is the f32 one: B's rows are plain vector loads and
  // A's elements broadcasts from memory, with no conversion per step (each
  // element of A is read N / (nv * w) times there, each of B M / mr times).
  // A B read once (M rows in one register block: decoding attention's P x V)
  // is widened as the k loop reads it instead: its f32 copy was a write and
  // a read of every element for nothing.
  if (!pairs && isFloat && isa<FloatType>(inElt) &&
      inElt.getIntOrFloatBitWidth() < 32 && w > 1) {
    Type f32 = b.getF32Type();
    // (Each buffer allocated once, for both branches of a direct A.)
    readA = bufferReader(widenToF32(b, readA, M, K, inElt, scratchTiles[1]));
    if (M > mr) {
      bb = widenToF32(b, bufferReader(*bb), K, N, inElt, scratchTiles[0]);
      rhsElt = f32;
    }
    inElt = f32;
  }
  Value packed;
  Type i16 = b.getI16Type(), i32 = b.getI32Type();
  auto pairType = VectorType::get({2 * w}, b.getBF16Type());
  if (pairs) {
    if (!scratchTiles[2])
      scratchTiles[2] = allocTile(RankedTensorType::get({K / 2, 2 * N}, inElt), op.getLoc());
    packed = scratchTiles[2];
    SmallVector<int64_t> interleave;
    for (int64_t l = 0; l < w; ++l)
      interleave.append({l, w + l});
    Value c2 = arith::ConstantIndexOp::create(b, 2);
    forEachIndex(b, {K / 2, N}, w, [&](ImplicitLocOpBuilder &ib, ValueRange idx) {
      Value k0 = arith::MulIOp::create(ib, idx[0], c2);
      Value k1 = arith::AddIOp::create(ib, k0, c1);
      Value lo = loadElems(ib, *bb, ValueRange{k0, idx[1]}, i16, w);
      Value hi = loadElems(ib, *bb, ValueRange{k1, idx[1]}, i16, w);
      Value both = vector::ShuffleOp::create(ib, lo, hi, interleave);
      Value col = arith::MulIOp::create(ib, idx[1], c2);
      vector::StoreOp::create(ib, both, packed, ValueRange{idx[0], col});
    });
  }
  // vdpbf16ps on f32 lanes `acc`, bf16 pairs `x` and `y` (2w lanes each).
  auto pairDot = [&](ImplicitLocOpBuilder &ib, Value acc, Value x, Value y) -> Value {
    std::string name = "llvm.x86.avx512bf16.dpbf16ps." + std::to_string(32 * w);
    return LLVM::CallIntrinsicOp::create(ib, acc.getType(), ib.getStringAttr(name),
                                         ValueRange{acc, x, y})
        .getResult(0);
  };
  // One register block of `rowsHere` rows starting at row i0, over all of N.
  auto emitRows = [&](ImplicitLocOpBuilder &b1, Value i0, int64_t rowsHere) {
    scf::ForOp::create(b1, c0, cN, cNB, ValueRange{}, [&](OpBuilder &ob2,
                                                          Location loc2,
                                                          Value j0,
                                                          ValueRange) {
      ImplicitLocOpBuilder b2(loc2, ob2);
      SmallVector<Value> rows, cols, init;
      for (int64_t r = 0; r < rowsHere; ++r)
        rows.push_back(arith::AddIOp::create(
            b2, i0, arith::ConstantIndexOp::create(b2, r)));
      for (int64_t v = 0; v < nv; ++v)
        cols.push_back(arith::AddIOp::create(
            b2, j0, arith::ConstantIndexOp::create(b2, v * w)));
      Value splatInit;
      if (cpuSplat) {
        TypedAttr start = cpuSplat;
        if (auto f = dyn_cast<FloatAttr>(cpuSplat); f && calcElt != accElt)
          start = FloatAttr::get(calcElt, f.getValueAsDouble()); // exact: bf16/f16 in f32
        splatInit = splatConstant(b2, start, w);
      }
      for (int64_t r = 0; r < rowsHere; ++r)
        for (int64_t v = 0; v < nv; ++v)
          init.push_back(splatInit ? splatInit
                                   : extend(b2,
                                            loadElems(b2, out, ValueRange{rows[r], cols[v]},
                                                      accElt, w),
                                            vt));
      // One k step of FMAs (all k steps, or the last one of an odd K after
      // the pairs).
      auto fmaStep = [&](ImplicitLocOpBuilder &b3, Value k, ValueRange accs) {
        SmallVector<Value> bv;
        for (int64_t v = 0; v < nv; ++v) {
          Value raw = loadElems(b3, *bb, ValueRange{k, cols[v]}, rhsElt, w);
          bv.push_back(extend(b3, raw, vt));
        }
        SmallVector<Value> next;
        for (int64_t r = 0; r < rowsHere; ++r) {
          Value s = readA(b3, rows[r], k, inElt, 1);
          s = extend(b3, s, calcElt);
          Value av = w == 1 ? s : Value(vector::BroadcastOp::create(b3, vt, s));
          for (int64_t v = 0; v < nv; ++v) {
            Value accv = accs[r * nv + v];
            if (isFloat) {
              next.push_back(w == 1 ? Value(math::FmaOp::create(b3, av, bv[v], accv))
                                    : Value(vector::FMAOp::create(b3, av, bv[v], accv)));
            } else {
              Value p = arith::MulIOp::create(b3, av, bv[v]);
              next.push_back(arith::AddIOp::create(b3, accv, p));
            }
          }
        }
        return next;
      };
      SmallVector<Value> results;
      if (pairs) {
        Value c2 = arith::ConstantIndexOp::create(b2, 2);
        SmallVector<Value> packedCols;
        for (Value col : cols)
          packedCols.push_back(arith::MulIOp::create(b2, col, c2));
        auto kLoop = scf::ForOp::create(
            b2, c0, arith::ConstantIndexOp::create(b2, K / 2), c1, init,
            [&](OpBuilder &ob3, Location loc3, Value kp, ValueRange accs) {
              ImplicitLocOpBuilder b3(loc3, ob3);
              Value k = arith::MulIOp::create(b3, kp, c2);
              SmallVector<Value> bv;
              for (int64_t v = 0; v < nv; ++v) {
                Value raw = vector::LoadOp::create(
                    b3, VectorType::get({2 * w}, i16), packed,
                    ValueRange{kp, packedCols[v]});
                bv.push_back(vector::BitCastOp::create(b3, pairType, raw));
              }
              SmallVector<Value> next;
              for (int64_t r = 0; r < rowsHere; ++r) {
                Value pair = readA(b3, rows[r], k, i16, 2);
                Value word = vector::ExtractOp::create(
                    b3, vector::BitCastOp::create(b3, VectorType::get({1}, i32), pair),
                    ArrayRef<int64_t>{0});
                Value av = vector::BitCastOp::create(
                    b3, pairType,
                    vector::BroadcastOp::create(b3, VectorType::get({w}, i32), word));
                for (int64_t v = 0; v < nv; ++v)
                  next.push_back(pairDot(b3, accs[r * nv + v], av, bv[v]));
              }
              scf::YieldOp::create(b3, next);
            });
        results.assign(kLoop.getResults().begin(), kLoop.getResults().end());
        if (K % 2)
          results = fmaStep(b2, arith::ConstantIndexOp::create(b2, K - 1), results);
      } else {
        auto kLoop = scf::ForOp::create(
            b2, c0, cK, c1, init,
            [&](OpBuilder &ob3, Location loc3, Value k, ValueRange accs) {
              ImplicitLocOpBuilder b3(loc3, ob3);
              scf::YieldOp::create(b3, fmaStep(b3, k, accs));
            });
        results.assign(kLoop.getResults().begin(), kLoop.getResults().end());
      }
      for (int64_t r = 0; r < rowsHere; ++r)
        for (int64_t v = 0; v < nv; ++v) {
          Value result = results[r * nv + v];
          if (calcElt != accElt)
            result = arith::TruncFOp::create(
                b2, w == 1 ? accElt : Type(VectorType::get({w}, accElt)), result);
          storeElems(b2, result, out, ValueRange{rows[r], cols[v]}, w);
        }
      scf::YieldOp::create(b2);
    });
  };
  if (mMain > 0) {
    Value cMain = arith::ConstantIndexOp::create(b, mMain);
    Value cMR = arith::ConstantIndexOp::create(b, mr);
    scf::ForOp::create(b, c0, cMain, cMR, ValueRange{},
                       [&](OpBuilder &ob1, Location loc, Value i0, ValueRange) {
                         ImplicitLocOpBuilder b1(loc, ob1);
                         emitRows(b1, i0, mr);
                         scf::YieldOp::create(b1);
                       });
  }
  if (mRem > 0)
    emitRows(b, arith::ConstantIndexOp::create(b, mMain), mRem);
  };
  // (An interior A loaded for the dot alone is read from its view: the
  // micro-kernel reads each element of A once per N / (nv * w) column
  // blocks, once for N = 64, so its copy was pure overhead.)
  if (failed(emitOnTile(b, op.getLhs(), op, [&](ImplicitLocOpBuilder &ib, TileReader readA) {
        emitKernel(ib, readA, inElt);
      })))
    return failure();
  buffers[op.getResult()] = out;
  toErase.push_back(op);
  return success();
}

Value KernelLowering::widenToF32(ImplicitLocOpBuilder &b, TileReader read, int64_t rows,
                                 int64_t cols, Type narrow, Value &wide) {
  Type f32 = b.getF32Type();
  if (!wide)
    wide = allocTile(RankedTensorType::get({rows, cols}, f32), b.getLoc());
  int64_t ww = vectorWidth({f32}, cols);
  forEachIndex(b, {rows, cols}, ww, [&](ImplicitLocOpBuilder &ib, ValueRange idx) {
    Value v = read(ib, idx[0], idx[1], narrow, ww);
    Type to = ww == 1 ? f32 : Type(VectorType::get({ww}, f32));
    storeElems(ib, arith::ExtFOp::create(ib, to, v), wide, idx, ww);
  });
  return wide;
}

bool KernelLowering::dotNTOnly(TransOp tr) {
  auto type = tr.getResult().getType();
  Type elt = type.getElementType();
  // f32, or bf16 / f16 widened to f32 once (not where vdpbf16ps takes bf16).
  bool narrow = (elt.isBF16() && !bf16Dot) || elt.isF16();
  if (simt || type.getRank() != 2 || tr.getOrder()[0] != 1 || !(elt.isF32() || narrow) ||
      tr.getResult().use_empty())
    return false;
  // (A key tile loaded for the transpose alone is read from its view by
  // the blocked transpose: attention's, with K = 64 against 64 query rows,
  // gains nothing here. directDotOperand asks first and does not defer
  // the load of a transpose taken here.)
  if (deferredSource(tr.getSrc()).first)
    return false;
  const int64_t K = type.getDimSize(0);
  const int64_t w = vectorWidth({Float32Type::get(tr.getContext())}, K);
  for (Operation *user : tr.getResult().getUsers()) {
    auto dot = dyn_cast<DotOp>(user);
    if (!dot || dot.getRhs() != tr.getResult() || dot.getLhs() == tr.getResult() ||
        dot.getLhs().getType().getElementType() != elt ||
        !dot.getAcc().getType().getElementType().isF32())
      return false;
    // Each output element ends with a horizontal sum (about 8 instructions);
    // the transpose costs about one per element of x. For K >= 8 M the
    // sums cost less (sparse attention: M = 16 heads, K = 576).
    if (w < 4 || K % w != 0 || K < 8 * dot.getLhs().getType().getDimSize(0))
      return false;
  }
  return true;
}

bool KernelLowering::ntReadsOnce(TransOp tr) {
  if (!tr.getResult().hasOneUse())
    return false;
  auto dot = dyn_cast<DotOp>(*tr.getResult().getUsers().begin());
  // (emitDotNT's blocks take all of M <= 4 rows; an lhs read in place
  // itself would be lowered in both of the rhs's branches: emitOnTile.)
  return dot && dot->getBlock() == tr->getBlock() &&
         dot.getLhs().getType().getDimSize(0) <= 4 && !deferredSource(dot.getLhs()).first;
}

void KernelLowering::emitDotNT(ImplicitLocOpBuilder &b, TileReader readA, TileReader readX,
                               Type inElt, Value out, TypedAttr splat, int64_t M, int64_t K,
                               int64_t N) {
  Type f32 = b.getF32Type();
  const int64_t w = vectorWidth({f32}, K);
  // Register blocks of mr rows of a x nr rows of x: mr * nr accumulators,
  // nr vectors of x and one of a live (16 ymm: 2 x 4; 32 zmm: 4 x 4).
  const int64_t registers = vectorBits >= 512 ? 32 : 16;
  int64_t nr = std::min<int64_t>(N, 4);
  int64_t mr = std::max<int64_t>(1, std::min<int64_t>({M, 4, (registers - nr - 1) / nr}));
  // Up to 4 rows of a take blocks of M x 2 (as many loads per FMA as
  // 2 x 4), so that x is read once: in place from its view (ntReadsOnce),
  // and, narrow, widened as the k loop reads it.
  if (mr < M && M <= 4 && N >= 2) {
    nr = 2;
    mr = M;
  }
  // bf16 / f16 operands widened to f32 once (x read M / mr times, a N / nr
  // times in the k loops); an x read once (M <= mr: decoding attention's
  // keys, against a GQA group's 4 rows) is widened as the k loop reads it,
  // not copied first.
  Type xElt = inElt;
  if (!inElt.isF32()) {
    Value wideX, wideA;
    if (M > mr) {
      readX = bufferReader(widenToF32(b, readX, N, K, inElt, wideX));
      xElt = f32;
    }
    readA = bufferReader(widenToF32(b, readA, M, K, inElt, wideA));
  }
  Value c0 = cIdx(b, 0), cK = cIdx(b, K), cW = cIdx(b, w);
  auto block = [&](ImplicitLocOpBuilder &b1, Value i0, Value j0, int64_t rowsHere,
                   int64_t colsHere) {
    SmallVector<Value> rows, cols;
    for (int64_t r = 0; r < rowsHere; ++r)
      rows.push_back(arith::AddIOp::create(b1, i0, cIdx(b1, r)));
    for (int64_t c = 0; c < colsHere; ++c)
      cols.push_back(arith::AddIOp::create(b1, j0, cIdx(b1, c)));
    Value zero = splatConstant(b1, b1.getF32FloatAttr(0.0), w);
    SmallVector<Value> init(rowsHere * colsHere, zero);
    auto kLoop = scf::ForOp::create(
        b1, c0, cK, cW, init, [&](OpBuilder &ob, Location loc, Value k, ValueRange accs) {
          ImplicitLocOpBuilder b2(loc, ob);
          SmallVector<Value> xv;
          for (Value col : cols) {
            Value v = readX(b2, col, k, xElt, w);
            xv.push_back(xElt == f32 ? v
                                     : arith::ExtFOp::create(
                                           b2, w == 1 ? f32 : Type(VectorType::get({w}, f32)), v)
                                           .getResult());
          }
          SmallVector<Value> next;
          for (int64_t r = 0; r < rowsHere; ++r) {
            Value av = readA(b2, rows[r], k, f32, w);
            for (int64_t c = 0; c < colsHere; ++c)
              next.push_back(vector::FMAOp::create(b2, av, xv[c], accs[r * colsHere + c]));
          }
          scf::YieldOp::create(b2, next);
        });
    for (int64_t r = 0; r < rowsHere; ++r)
      for (int64_t c = 0; c < colsHere; ++c) {
        auto sum = vector::ReductionOp::create(b1, vector::CombiningKind::ADD,
                                               kLoop.getResult(r * colsHere + c));
        sum.setFastmath(arith::FastMathFlags::reassoc);
        Value prior = splat ? Value(arith::ConstantOp::create(b1, splat))
                            : loadElems(b1, out, ValueRange{rows[r], cols[c]}, f32, 1);
        storeElems(b1, arith::AddFOp::create(b1, prior, sum), out, ValueRange{rows[r], cols[c]}, 1);
      }
  };
  // Rows in blocks of mr (then the rest), each over N in blocks of nr (then
  // the rest).
  auto rowBlock = [&](ImplicitLocOpBuilder &b1, Value i0, int64_t rowsHere) {
    const int64_t nMain = N - N % nr;
    if (nMain > 0)
      scf::ForOp::create(b1, c0, cIdx(b1, nMain), cIdx(b1, nr), ValueRange{},
                         [&](OpBuilder &ob, Location loc, Value j0, ValueRange) {
                           ImplicitLocOpBuilder b2(loc, ob);
                           block(b2, i0, j0, rowsHere, nr);
                           scf::YieldOp::create(b2);
                         });
    if (N % nr)
      block(b1, i0, cIdx(b1, nMain), rowsHere, N % nr);
  };
  const int64_t mMain = M - M % mr;
  if (mMain > 0)
    scf::ForOp::create(b, c0, cIdx(b, mMain), cIdx(b, mr), ValueRange{},
                       [&](OpBuilder &ob, Location loc, Value i0, ValueRange) {
                         ImplicitLocOpBuilder b1(loc, ob);
                         rowBlock(b1, i0, mr);
                         scf::YieldOp::create(b1);
                       });
  if (M % mr)
    rowBlock(b, cIdx(b, mMain), M % mr);
}

Value KernelLowering::deferredInterior(ImplicitLocOpBuilder &b, LoadOp load) {
  const ViewInfo &vi = views[load.getView()];
  ArrayRef<int64_t> shape = load.getResult().getType().getShape();
  return interiorTile(b, vi, load.getOffsets(), shape);
}

Value KernelLowering::readDeferred(ImplicitLocOpBuilder &b, LoadOp load, Value row,
                                   Value col, Type elt, int64_t width) {
  ArrayRef<int64_t> shape = load.getResult().getType().getShape();
  int64_t rank = shape.size();
  // The tile dimension of the rows: the non-unit one before the last (unit
  // dimensions are reshaped away).
  int64_t rowDim = 0;
  for (int64_t d = 0; d + 1 < rank; ++d)
    if (shape[d] != 1)
      rowDim = d;
  SmallVector<Value> at(load.getOffsets().begin(), load.getOffsets().end());
  at[rank - 1] = arith::AddIOp::create(b, at[rank - 1], col);
  at[rowDim] = arith::AddIOp::create(b, at[rowDim], row);
  return loadElems(b, views[load.getView()].unitMemref, at, elt, width);
}

KernelLowering::TileReader KernelLowering::bufferReader(Value buf) {
  return [this, buf](ImplicitLocOpBuilder &ib, Value row, Value col, Type elt,
                     int64_t width) {
    return loadElems(ib, buf, ValueRange{row, col}, elt, width);
  };
}

std::pair<LoadOp, Operation *> KernelLowering::deferredSource(Value tile) {
  Operation *def = tile.getDefiningOp();
  if (!def || !deferredDotLoads.contains(def))
    return {};
  if (isa<ReshapeOp>(def))
    return {cast<LoadOp>(def->getOperand(0).getDefiningOp()), def};
  return {cast<LoadOp>(def), nullptr};
}

LogicalResult KernelLowering::emitOnTile(
    ImplicitLocOpBuilder &b, Value tile, Operation *user,
    function_ref<void(ImplicitLocOpBuilder &, TileReader)> emit) {
  auto source = deferredSource(tile);
  LoadOp load = source.first;
  Operation *reshape = source.second;
  if (!load) {
    auto buf = bufferOf(tile, user);
    if (failed(buf))
      return failure();
    emit(b, bufferReader(*buf));
    return success();
  }
  // Interior: read the view; else the load (and its reshape) lowered here,
  // into its tile, as where it stood.
  auto ifOp = scf::IfOp::create(b, TypeRange{}, deferredInterior(b, load),
                                /*withElseRegion=*/true);
  ImplicitLocOpBuilder tb(b.getLoc(), OpBuilder::atBlockTerminator(ifOp.thenBlock()));
  emit(tb, [this, load](ImplicitLocOpBuilder &ib, Value row, Value col, Type elt,
                        int64_t width) {
    return readDeferred(ib, load, row, col, elt, width);
  });
  if (failed(materializeDeferred(load, reshape, ifOp.elseBlock())))
    return failure();
  auto buf = bufferOf(tile, user);
  if (failed(buf))
    return failure();
  ImplicitLocOpBuilder eb(b.getLoc(), OpBuilder::atBlockTerminator(ifOp.elseBlock()));
  emit(eb, bufferReader(*buf));
  return success();
}

bool KernelLowering::rhsReadInPlace(DotOp dot) {
  // f32 operands only: the bf16 / f16 paths widen B or interleave its rows
  // into a buffer of their own anyway.
  return dot.getLhs().getType().getElementType().isF32() &&
         dot.getRhs().getType().getElementType().isF32() &&
         dot.getAcc().getType().getElementType().isF32();
}

FailureOr<Value> KernelLowering::deferredRhs(DotOp op, LoadOp load, Operation *reshape) {
  ImplicitLocOpBuilder b(op.getLoc(), op);
  MLIRContext *ctx = op.getContext();
  auto tileType = op.getRhs().getType();
  int64_t K = tileType.getDimSize(0), N = tileType.getDimSize(1);
  Type elt = storageType(tileType.getElementType());
  auto strided = MemRefType::get(
      {K, N}, elt,
      StridedLayoutAttr::get(ctx, ShapedType::kDynamic, {ShapedType::kDynamic, 1}));
  const ViewInfo &vi = views[load.getView()];
  ArrayRef<int64_t> shape = load.getResult().getType().getShape();
  int64_t rank = shape.size();
  // In place when the tile is interior (deferredInterior: unit last
  // stride too) and
  // - one block of memory: each dimension before the last one block of
  //   those after it ([R, C, N] read as [R C, N], a convolution's kernel
  //   rows). B's reads are then those of the copy; a matrix's tile of rows
  //   4 KiB apart, read in place, would map every row to the same L1 sets,
  //   where the copy packs them.
  // - from a small view (outermost extent at most kRhsInPlaceBytes):
  //   weights every program reads stay in the caches, so their copy is
  //   pure overhead (conv2d 3x3 64 -> 64 channels: 0.95x the time). A large
  //   view is streamed, and the copy's sequential read fetched it faster
  //   than the micro-kernel's walk over column blocks (attention's values,
  //   4 MiB: 1.04x the time in place).
  constexpr int64_t kRhsInPlaceBytes = 256 * 1024;
  auto idx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  Value inPlace = deferredInterior(b, load);
  int64_t block = N;
  for (int64_t d = rank - 2; d >= 0; --d) {
    if (shape[d] == 1)
      continue;
    inPlace = arith::AndIOp::create(
        b, inPlace,
        arith::CmpIOp::create(b, arith::CmpIPredicate::eq, vi.strides[d], idx(block)));
    block *= shape[d];
  }
  Value extent = arith::MulIOp::create(b, vi.sizes[0], vi.strides[0]);
  inPlace = arith::AndIOp::create(
      b, inPlace,
      arith::CmpIOp::create(
          b, arith::CmpIPredicate::ule, extent,
          idx(kRhsInPlaceBytes / std::max<int64_t>(1, elt.getIntOrFloatBitWidth() / 8))));
  auto ifOp = scf::IfOp::create(b, TypeRange{strided}, inPlace, /*withElseRegion=*/true);
  {
    // The tile's first element, and rows N apart from it.
    ImplicitLocOpBuilder tb(b.getLoc(), OpBuilder::atBlockEnd(ifOp.thenBlock()));
    Value offset = arith::ConstantIndexOp::create(tb, 0);
    for (auto [off, stride] : llvm::zip(load.getOffsets(), vi.strides))
      offset = arith::AddIOp::create(tb, offset, arith::MulIOp::create(tb, off, stride));
    Value in = memref::ReinterpretCastOp::create(
        tb, strided, vi.unitMemref, OpFoldResult(offset),
        ArrayRef<OpFoldResult>{tb.getIndexAttr(K), tb.getIndexAttr(N)},
        ArrayRef<OpFoldResult>{OpFoldResult(arith::ConstantIndexOp::create(tb, N).getResult()),
                               tb.getIndexAttr(1)});
    scf::YieldOp::create(tb, ValueRange{in});
  }
  // materializeDeferred lowers the load before its block's terminator, and
  // the yield's value (the load's tile) exists only after that: the block
  // gets a yield of nothing first, and the real one after the load.
  ImplicitLocOpBuilder eb(b.getLoc(), OpBuilder::atBlockEnd(ifOp.elseBlock()));
  Operation *emptyYield = scf::YieldOp::create(eb);
  if (failed(materializeDeferred(load, reshape, ifOp.elseBlock())))
    return failure();
  auto buf = bufferOf(op.getRhs(), op);
  if (failed(buf))
    return failure();
  eb.setInsertionPoint(emptyYield);
  scf::YieldOp::create(eb, ValueRange{memref::CastOp::create(eb, strided, *buf)});
  emptyYield->erase();
  return ifOp.getResult(0);
}

LogicalResult KernelLowering::materializeDeferred(Operation *load, Operation *reshape,
                                                  Block *into) {
  llvm::SaveAndRestore<bool> materialize(materializingDotLoad, true);
  for (Operation *d : {load, reshape}) {
    if (!d)
      continue;
    deferredDotLoads.erase(d);
    d->moveBefore(into->getTerminator());
    if (failed(lowerOp(d)))
      return failure();
  }
  return success();
}

bool KernelLowering::directDotOperand(Operation *producer) {
  // (Not gathers: read in place, each element of A needs its row's index
  // and validity, and conv2d's micro-kernel measured 0.42-0.44x oneDNN that
  // way against 0.63-0.67x with the gathered tile: the per-row masks and
  // indices spill the accumulators.)
  if (simt || materializingDotLoad || !isa<LoadOp>(producer))
    return false;
  Value tile = producer->getResult(0);
  auto type = cast<RankedTensorType>(tile.getType());
  if (!tile.hasOneUse() || !views.count(producer->getOperand(0)) || type.getRank() < 2)
    return false;
  // [M, K] with unit dimensions before K ([1, M, K], [M, 1, K]), reshaped
  // away first when the tile has more than two.
  ArrayRef<int64_t> shape = type.getShape();
  // (More than one, reshaped to [rows, N]: a dot's rhs only, read in place
  // as one block of memory, deferredRhs.)
  bool severalRowDims =
      llvm::count_if(shape.drop_back(), [](int64_t d) { return d != 1; }) > 1;
  Operation *user = *tile.getUsers().begin();
  Operation *reshape = nullptr;
  if (isa<ReshapeOp>(user) && user->getBlock() == producer->getBlock()) {
    // Only a reshape that drops the unit dimensions: [M, K] from the tile's
    // one non-unit dimension before the last and the last (the in-place
    // reader maps rows and columns so).
    int64_t rows = 1;
    for (int64_t d : shape.drop_back())
      rows *= d;
    if (!user->getResult(0).hasOneUse() ||
        cast<RankedTensorType>(user->getResult(0).getType()).getShape() !=
            ArrayRef<int64_t>{rows, shape.back()})
      return false;
    reshape = user;
    user = *user->getResult(0).getUsers().begin();
  } else if (type.getRank() != 2) {
    return false;
  }
  Value lhs = reshape ? reshape->getResult(0) : tile;
  if (user->getBlock() != producer->getBlock())
    return false;
  TransOp nt; // a transpose whose dot reads the rows in place (ntInPlace)
  if (auto dot = dyn_cast<DotOp>(user)) {
    bool asRhs = dot.getRhs() == lhs && rhsReadInPlace(dot);
    if ((dot.getLhs() != lhs || severalRowDims) && !asRhs)
      return false;
    // (Not the lhs of a dot that reads its transposed rhs once: that rhs,
    // the larger operand, is read in place when it is a plain load, and
    // emitOnTile would lower a deferred lhs's load in each of its branches.
    // Where the rhs is gathered, the small lhs is copied.)
    if (auto tr = dot.getRhs().getDefiningOp<TransOp>();
        tr && (ntInPlace.contains(tr) || (dotNTOnly(tr) && ntReadsOnce(tr))))
      return false;
  } else if (severalRowDims) {
    return false;
  } else if (auto tr = dyn_cast<TransOp>(user)) {
    // A blocked transpose (lowerOp's TransOp) reads the rows in place too,
    // unless its dots take the rows without it (dotNTOnly: decode's one
    // query row against a key tile, which cost 8 times its dot to
    // transpose). Such a dot reads the rows in place itself when it reads
    // them once (ntReadsOnce).
    auto t = tr.getResult().getType();
    if (dotNTOnly(tr)) {
      if (!ntReadsOnce(tr))
        return false;
      nt = tr;
      user = *tr.getResult().getUsers().begin();
    } else if (t.getRank() != 2 || tr.getOrder()[0] != 1 ||
               vectorWidth({t.getElementType()}, std::gcd(t.getDimSize(0), t.getDimSize(1))) <
                   4) {
      return false;
    }
  } else {
    return false;
  }
  Operation *dot = user;
  // Nothing between them may write memory: the deferred read must see what
  // the load would have.
  for (Operation *at = producer->getNextNode(); at && at != dot; at = at->getNextNode())
    if (at != reshape && (at->getNumRegions() || mightHaveEffect<MemoryEffects::Write>(at)))
      return false;
  if (nt)
    ntInPlace.insert(nt);
  deferredDotLoads.insert(producer);
  if (reshape)
    deferredDotLoads.insert(reshape);
  return true;
}

TypedAttr reduceIdentity(Builder &b, ReduceKind kind, Type elt) {
  if (kind == ReduceKind::sum)
    return cast<TypedAttr>(b.getZeroAttr(elt));
  if (kind == ReduceKind::prod)
    return isa<FloatType>(elt) ? TypedAttr(b.getFloatAttr(elt, 1.0))
                               : TypedAttr(b.getIntegerAttr(elt, 1));
  bool isMax = kind == ReduceKind::max;
  if (auto ft = dyn_cast<FloatType>(elt))
    return b.getFloatAttr(
        elt, APFloat::getInf(ft.getFloatSemantics(), /*Negative=*/isMax));
  unsigned bits = elt.getIntOrFloatBitWidth();
  return b.getIntegerAttr(elt, isMax ? APInt::getSignedMinValue(bits)
                                     : APInt::getSignedMaxValue(bits));
}

Value combine(ImplicitLocOpBuilder &b, ReduceKind kind, Value x,
                     Value y) {
  bool isFloat = isa<FloatType>(getElementTypeOrSelf(x.getType()));
  switch (kind) {
  case ReduceKind::sum:
    if (isFloat)
      return arith::AddFOp::create(b, x, y, arith::FastMathFlags::reassoc);
    return arith::AddIOp::create(b, x, y);
  case ReduceKind::prod:
    if (isFloat)
      return arith::MulFOp::create(b, x, y, arith::FastMathFlags::reassoc);
    return arith::MulIOp::create(b, x, y);
  case ReduceKind::max:
    if (isFloat)
      return arith::MaximumFOp::create(b, x, y);
    return arith::MaxSIOp::create(b, x, y);
  case ReduceKind::min:
    if (isFloat)
      return arith::MinimumFOp::create(b, x, y);
    return arith::MinSIOp::create(b, x, y);
  case ReduceKind::argmax:
  case ReduceKind::argmin:
    break;
  }
  llvm_unreachable("arg reductions carry positions, not a combiner");
}

LogicalResult KernelLowering::lowerReduce(ReduceOp op) {
  if (simt)
    return lowerReduceSimt(op);
  auto srcType = op.getSrc().getType();
  auto src = bufferOf(op.getSrc(), op);
  if (failed(src))
    return failure();
  Type elt = srcType.getElementType();
  int64_t axis = op.getAxis();
  int64_t rank = srcType.getRank();
  ReduceKind kind = op.getKind();
  bool isArg = kind == ReduceKind::argmax || kind == ReduceKind::argmin;
  ImplicitLocOpBuilder b(op.getLoc(), op);
  Type resultType = op.getResult().getType();
  auto resultTensor = dyn_cast<RankedTensorType>(resultType);
  Value resultBuf;
  if (resultTensor)
    resultBuf = allocTile(resultTensor, op.getLoc());
  Value scalarResult;

  SmallVector<int64_t> outShape(srcType.getShape());
  outShape.erase(outShape.begin() + axis);
  int64_t axisSize = srcType.getDimSize(axis);
  Value c0 = arith::ConstantIndexOp::create(b, 0);
  Value c1 = arith::ConstantIndexOp::create(b, 1);
  Value cA = arith::ConstantIndexOp::create(b, axisSize);
  bool isFloat = isa<FloatType>(elt);

  auto srcIndex = [&](ValueRange outIdx, Value a) {
    SmallVector<Value> idx(outIdx.begin(), outIdx.end());
    idx.insert(idx.begin() + axis, a);
    return idx;
  };
  auto finish = [&](ImplicitLocOpBuilder &ib, Value v, ValueRange outIdx,
                    int64_t w) {
    if (resultTensor)
      storeElems(ib, v, resultBuf, outIdx, w);
    else
      scalarResult = v;
  };

  if (isArg) {
    // Position of the first extreme element; NaN counts as the extreme.
    bool isMax = kind == ReduceKind::argmax;
    auto body = [&](ImplicitLocOpBuilder &ib, ValueRange outIdx) {
      Value first = loadElems(ib, *src, srcIndex(outIdx, c0), elt, 1);
      Value zero = arith::ConstantIntOp::create(ib, 0, 32);
      auto loop = scf::ForOp::create(
          ib, c1, cA, c1, ValueRange{first, zero},
          [&](OpBuilder &ob, Location loc, Value a, ValueRange it) {
            ImplicitLocOpBuilder lb(loc, ob);
            Value x = loadElems(lb, *src, srcIndex(outIdx, a), elt, 1);
            Value better;
            if (isFloat) {
              better = arith::CmpFOp::create(
                  lb, isMax ? arith::CmpFPredicate::OGT
                            : arith::CmpFPredicate::OLT,
                  x, it[0]);
              Value xNaN = arith::CmpFOp::create(
                  lb, arith::CmpFPredicate::UNO, x, x);
              Value bestNaN = arith::CmpFOp::create(
                  lb, arith::CmpFPredicate::UNO, it[0], it[0]);
              Value notBestNaN = arith::XOrIOp::create(
                  lb, bestNaN, arith::ConstantIntOp::create(lb, 1, 1));
              better = arith::OrIOp::create(
                  lb, better, arith::AndIOp::create(lb, xNaN, notBestNaN));
            } else {
              better = arith::CmpIOp::create(
                  lb, isMax ? arith::CmpIPredicate::sgt
                            : arith::CmpIPredicate::slt,
                  x, it[0]);
            }
            Value ai = arith::IndexCastOp::create(lb, lb.getI32Type(), a);
            Value nb = arith::SelectOp::create(lb, better, x, it[0]);
            Value ni = arith::SelectOp::create(lb, better, ai, it[1]);
            scf::YieldOp::create(lb, ValueRange{nb, ni});
          });
      finish(ib, loop.getResult(1), outIdx, 1);
    };
    if (outShape.empty())
      body(b, ValueRange{});
    else
      forEachIndex(b, outShape, 1, body);
  } else if (axis == rank - 1) {
    // Reduce along the contiguous dimension: vector partial results, then a
    // horizontal reduction.
    int64_t w = vectorWidth({elt}, axisSize);
    TypedAttr ident = reduceIdentity(b, kind, elt);
    auto body = [&](ImplicitLocOpBuilder &ib, ValueRange outIdx) {
      Value init = splatConstant(ib, ident, w);
      Value cW = arith::ConstantIndexOp::create(ib, w);
      auto loop = scf::ForOp::create(
          ib, c0, cA, cW, ValueRange{init},
          [&](OpBuilder &ob, Location loc, Value a, ValueRange it) {
            ImplicitLocOpBuilder lb(loc, ob);
            Value x = loadElems(lb, *src, srcIndex(outIdx, a), elt, w);
            scf::YieldOp::create(lb, combine(lb, kind, it[0], x));
          });
      Value r = loop.getResult(0);
      if (w > 1) {
        vector::CombiningKind ck =
            kind == ReduceKind::sum    ? vector::CombiningKind::ADD
            : kind == ReduceKind::prod ? vector::CombiningKind::MUL
                : (kind == ReduceKind::max
                       ? (isFloat ? vector::CombiningKind::MAXIMUMF
                                  : vector::CombiningKind::MAXSI)
                       : (isFloat ? vector::CombiningKind::MINIMUMF
                                  : vector::CombiningKind::MINSI));
        auto red = vector::ReductionOp::create(ib, ck, r);
        if ((kind == ReduceKind::sum || kind == ReduceKind::prod) && isFloat)
          red.setFastmath(arith::FastMathFlags::reassoc);
        r = red;
      }
      finish(ib, r, outIdx, 1);
    };
    if (outShape.empty())
      body(b, ValueRange{});
    else
      forEachIndex(b, outShape, 1, body);
  } else {
    // Reduce along an outer dimension: vectors along the (kept) last one.
    int64_t w = vectorWidth({elt}, outShape.back());
    TypedAttr ident = reduceIdentity(b, kind, elt);
    forEachIndex(b, outShape, w, [&](ImplicitLocOpBuilder &ib,
                                     ValueRange outIdx) {
      Value init = splatConstant(ib, ident, w);
      auto loop = scf::ForOp::create(
          ib, c0, cA, c1, ValueRange{init},
          [&](OpBuilder &ob, Location loc, Value a, ValueRange it) {
            ImplicitLocOpBuilder lb(loc, ob);
            Value x = loadElems(lb, *src, srcIndex(outIdx, a), elt, w);
            scf::YieldOp::create(lb, combine(lb, kind, it[0], x));
          });
      finish(ib, loop.getResult(0), outIdx, w);
    });
  }
  if (resultTensor)
    buffers[op.getResult()] = resultBuf;
  else
    op.getResult().replaceAllUsesWith(scalarResult);
  toErase.push_back(op);
  return success();
}

LogicalResult KernelLowering::lowerScan(ScanOp op) {
  if (simt)
    return lowerScanSimt(op);
  auto type = op.getSrc().getType();
  auto src = bufferOf(op.getSrc(), op);
  if (failed(src))
    return failure();
  Type elt = type.getElementType();
  int64_t axis = op.getAxis();
  int64_t rank = type.getRank();
  ReduceKind kind = op.getKind();
  bool reverse = op.getReverse();
  ImplicitLocOpBuilder b(op.getLoc(), op);
  Value out = allocTile(type, op.getLoc());
  int64_t axisSize = type.getDimSize(axis);
  // One running value per line along the axis, carried by a loop over it;
  // when the axis is not the last dimension, lines side by side along the
  // last one share a vector.
  SmallVector<int64_t> lines(type.getShape());
  lines.erase(lines.begin() + axis);
  int64_t w = axis == rank - 1 ? 1 : vectorWidth({elt}, lines.back());
  TypedAttr ident = reduceIdentity(b, kind, elt);
  // Along the last axis, by whole vectors when they tile it (`along` lanes a
  // step): each vector's own scan in log2(W) steps (combined with itself
  // shifted by 1, 2, 4, ... lanes, the identity shifted in), then combined
  // with the carry (the last result so far, broadcast). One dependent scalar
  // combine per element was the running value's chain before (dsa_topk's
  // prefix sums: 20% of its time at 32768 keys).
  int64_t along = axis == rank - 1 ? vectorWidth({elt}, axisSize) : 1;
  if (axisSize % along != 0)
    along = 1;
  auto lanes = [&](ImplicitLocOpBuilder &ib, Value v, Value fill, auto lane) {
    SmallVector<int64_t> mask;
    for (int64_t i = 0; i < along; ++i) {
      int64_t from = lane(i);
      mask.push_back(from >= 0 && from < along ? from : along); // lane 0 of `fill`
    }
    return vector::ShuffleOp::create(ib, v, fill, mask).getResult();
  };
  const int64_t vecWidth = along > 1 ? along : w;
  auto body = [&](ImplicitLocOpBuilder &ib, ValueRange lineIdx) {
    Value init = splatConstant(ib, ident, vecWidth);
    scf::ForOp::create(
        ib, cIdx(ib, 0), cIdx(ib, axisSize), cIdx(ib, along), ValueRange{init},
        [&](OpBuilder &ob, Location loc, Value a, ValueRange it) {
          ImplicitLocOpBuilder lb(loc, ob);
          Value pos = reverse ? Value(arith::SubIOp::create(
                                    lb, cIdx(lb, axisSize - along), a))
                              : a;
          SmallVector<Value> idx(lineIdx.begin(), lineIdx.end());
          idx.insert(idx.begin() + axis, pos);
          Value x = loadElems(lb, *src, idx, elt, vecWidth);
          for (int64_t sh = 1; sh < along; sh *= 2)
            x = combine(lb, kind, x,
                        lanes(lb, x, init, [&](int64_t i) { return reverse ? i + sh : i - sh; }));
          Value r = combine(lb, kind, it[0], x);
          storeElems(lb, r, out, idx, vecWidth);
          if (along > 1) // the carry: the scan's last lane, broadcast
            r = lanes(lb, r, r, [&](int64_t) { return reverse ? 0 : along - 1; });
          scf::YieldOp::create(lb, r);
        });
  };
  if (lines.empty())
    body(b, ValueRange{});
  else
    forEachIndex(b, lines, w, body);
  buffers[op.getResult()] = out;
  toErase.push_back(op);
  return success();
}

//===----------------------------------------------------------------------===//
// Control flow carrying tiles
//===----------------------------------------------------------------------===//

static bool isTile(Value v) { return isa<RankedTensorType>(v.getType()); }

/// Maps the results of a rebuilt scf.for/scf.if: tile results to their
/// buffers, scalar results to the new op's results (in order).
void mapRebuiltResults(ResultRange oldResults, ArrayRef<Value> tileBufs,
                       ResultRange newResults, DenseMap<Value, Value> &buffers) {
  unsigned scalarIdx = 0;
  for (auto [i, r] : llvm::enumerate(oldResults)) {
    if (tileBufs[i])
      buffers[r] = tileBufs[i];
    else
      r.replaceAllUsesWith(newResults[scalarIdx++]);
  }
}

LogicalResult KernelLowering::lowerFor(scf::ForOp op) {
  if (simt)
    setupPipelining(op);
  bool carriesTiles = llvm::any_of(op.getInitArgs(), isTile);
  if (!carriesTiles) {
    llvm::SaveAndRestore<bool> pending(wgmmaPending);
    return lowerBlock(*op.getBody());
  }
  if (std::optional<LogicalResult> inRegisters = lowerRegisterLoop(op))
    return *inRegisters;

  ImplicitLocOpBuilder b(op.getLoc(), op);
  // SIMT: tensor-core accumulators carried in registers (after the scalars).
  SmallVector<unsigned> regPos = registerAccumulators(op);
  auto isReg = [&](unsigned i) { return llvm::is_contained(regPos, i); };
  // Their dots, found before the body moves into the new loop.
  SmallVector<DotOp> regDots;
  for (unsigned i : regPos)
    regDots.push_back(registerDotOfArg(op.getRegionIterArgs()[i]));
  auto regDot = [&](unsigned i) {
    return regDots[llvm::find(regPos, i) - regPos.begin()];
  };
  // SIMT on sm_90a: row vectors (flash attention's running max and sum)
  // carried in registers, in the rows of the first accumulator dot whose
  // warps hold whole rows (see rowFragments).
  DotOp rowDot;
  for (DotOp d : regDots)
    if (sameRows(d, d)) {
      rowDot = d;
      break;
    }
  SmallVector<unsigned> rowPos = registerRowVectors(op, rowDot);
  auto isRow = [&](unsigned i) { return llvm::is_contained(rowPos, i); };
  // Fragments carried to the next iteration (an overlapped loop's scores).
  SmallVector<unsigned> fragPos;
  SmallVector<DotOp> fragDots;
  for (unsigned i = 0; i < op.getNumRegionIterArgs(); ++i) {
    if (isReg(i) || isRow(i))
      continue;
    if (DotOp d = fragmentCarry(op, i)) {
      fragPos.push_back(i);
      fragDots.push_back(d);
      carriedDots.insert(d);
    } else if (DotOp d = elementwiseCarry(op, i)) {
      // An accumulator updated elementwise from a dot's fragments.
      fragPos.push_back(i);
      fragDots.push_back(d);
      carriedYields.insert(op.getBody()->getTerminator()->getOperand(i));
    }
  }
  auto isFrag = [&](unsigned i) { return llvm::is_contained(fragPos, i); };
  // Each other loop-carried tile lives in one buffer for the whole loop.
  SmallVector<Value> iterBufs(op.getNumRegionIterArgs());
  SmallVector<Value> scalarInits;
  for (auto [i, init] : llvm::enumerate(op.getInitArgs())) {
    if (!isTile(init)) {
      scalarInits.push_back(init);
      continue;
    }
    if (isReg(i) || isRow(i) || isFrag(i))
      continue;
    auto type = cast<RankedTensorType>(init.getType());
    iterBufs[i] = allocTile(type, op.getLoc());
    // A splat constant (the usual zeros) fills the buffer: no constant
    // tile filled and then copied (depthwise convolution: 16 KiB of stores
    // and loads a program).
    DenseElementsAttr dense;
    if (!buffers.count(init) && matchPattern(init, m_Constant(&dense)) && dense.isSplat()) {
      fillTile(b, iterBufs[i], type, cast<TypedAttr>(dense.getSplatValue<Attribute>()));
      continue;
    }
    auto src = bufferOf(init, op);
    if (failed(src))
      return failure();
    copyTile(b, *src, iterBufs[i], type);
  }
  size_t numScalars = scalarInits.size();
  SmallVector<size_t> regCounts;
  bool readInits = false;
  for (unsigned i : regPos) {
    Value init = op.getInitArgs()[i];
    SmallVector<Value> regs;
    // A splat constant (the usual zeros) needs no buffer read.
    DenseElementsAttr dense;
    TypedAttr splat;
    if (matchPattern(init, m_Constant(&dense)) &&
        (splat = registerSplat(dense))) {
      regs.assign(registerTileSize(regDot(i)),
                  arith::ConstantOp::create(b, splat));
    } else if (auto it = loopRegisters.find(init);
               it != loopRegisters.end() &&
               sameRegisterTiling(it->second.first, regDot(i))) {
      regs = it->second.second; // the previous loop's registers
    } else {
      auto buf = bufferOf(init, op);
      if (failed(buf))
        return failure();
      regs = loadRegisterTile(b, regDot(i), *buf);
      readInits = true;
    }
    regCounts.push_back(regs.size());
    llvm::append_range(scalarInits, regs);
  }
  // Row vectors: from a splat constant, from registers, or read.
  size_t rowCount = rowPos.empty() ? 0 : rowSlotCount(rowDot);
  for (unsigned i : rowPos) {
    Value init = op.getInitArgs()[i];
    SmallVector<Value> regs;
    DenseElementsAttr dense;
    if (matchPattern(init, m_Constant(&dense)) && dense.isSplat()) {
      regs.assign(rowCount, arith::ConstantOp::create(
                                b, b.getF32FloatAttr(dense.getSplatValue<APFloat>()
                                                         .convertToDouble())));
    } else {
      auto rows = rowValues(b, init, rowDot, op, readInits);
      if (failed(rows))
        return failure();
      regs = *rows;
    }
    llvm::append_range(scalarInits, regs);
  }
  // Carried fragments: the init dot kept its result in registers
  // (fragmentUses accepts this loop as its reader).
  SmallVector<size_t> fragCounts;
  for (auto [k, i] : llvm::enumerate(fragPos)) {
    Value init = op.getInitArgs()[i];
    SmallVector<Value> regs;
    DenseElementsAttr dense;
    if (auto it = fragmentResults.find(init); it != fragmentResults.end()) {
      regs = it->second.second;
      fragmentResults.erase(it);
    } else if (TypedAttr splat;
               matchPattern(init, m_Constant(&dense)) &&
               (splat = registerSplat(dense))) {
      // (elementwiseCarry's accumulators: the usual zeros.)
      regs.assign(registerTileSize(fragDots[k]),
                  arith::ConstantOp::create(b, splat));
    } else {
      // Stored after all (its dot saw other readers): read it back.
      auto buf = bufferOf(init, op);
      if (failed(buf))
        return failure();
      regs = loadRegisterTile(b, fragDots[k], *buf);
      readInits = true;
    }
    fragCounts.push_back(regs.size());
    llvm::append_range(scalarInits, regs);
  }
  // The initial tiles' buffers are free once every thread has read them
  // (the shared-memory planner ends a buffer's life at the next barrier).
  if (readInits)
    barrier(b);
  auto newLoop = scf::ForOp::create(b, op.getLowerBound(), op.getUpperBound(),
                                    op.getStep(), scalarInits);
  Block *newBody = newLoop.getBody();
  Block *oldBody = op.getBody();
  // Map the old block arguments: iv, then scalars to new args, tiles to bufs.
  SmallVector<Value> replacements;
  replacements.push_back(newLoop.getInductionVar());
  unsigned scalarIdx = 0;
  size_t regIdx = numScalars;
  size_t rowIdx = regIdx;
  for (unsigned i : regPos)
    rowIdx += regCounts[llvm::find(regPos, i) - regPos.begin()];
  const size_t firstRow = rowIdx;
  size_t fragIdx = rowIdx + rowPos.size() * rowCount;
  for (auto [i, arg] : llvm::enumerate(op.getRegionIterArgs())) {
    if (isReg(i)) {
      // Its only user, the dot, reads the registers.
      replacements.push_back(arg);
      size_t n = regCounts[llvm::find(regPos, i) - regPos.begin()];
      registerTiles[arg] = SmallVector<Value>(
          newLoop.getRegionIterArgs().slice(regIdx, n));
      regIdx += n;
    } else if (isRow(i)) {
      replacements.push_back(arg);
      rowFragments[arg] = {rowDot, SmallVector<Value>(newLoop.getRegionIterArgs()
                                                          .slice(rowIdx, rowCount))};
      rowIdx += rowCount;
    } else if (isFrag(i)) {
      replacements.push_back(arg);
      size_t k = llvm::find(fragPos, i) - fragPos.begin();
      fragmentResults[arg] = {fragDots[k], SmallVector<Value>(
                                               newLoop.getRegionIterArgs().slice(
                                                   fragIdx, fragCounts[k]))};
      fragIdx += fragCounts[k];
    } else if (iterBufs[i]) {
      // A tile argument keeps its value; its users read the iteration buffer.
      replacements.push_back(arg);
      buffers[arg] = iterBufs[i];
      movedArgBlocks[arg] = newBody;
    } else {
      replacements.push_back(newLoop.getRegionIterArgs()[scalarIdx++]);
    }
  }
  // Move the old body into the new loop (dropping the new loop's default
  // terminator if any).
  if (!newBody->empty())
    newBody->getTerminator()->erase();
  for (auto [i, arg] : llvm::enumerate(oldBody->getArguments())) {
    if (i > 0 && (iterBufs[i - 1] || isReg(i - 1) || isRow(i - 1) ||
                  isFrag(i - 1)))
      continue;
    arg.replaceAllUsesWith(replacements[i]);
  }
  newBody->getOperations().splice(newBody->end(), oldBody->getOperations());

  {
    // The body's own deferred groups are retired before its yield; an
    // outer one stays pending (the body's waits may not run).
    llvm::SaveAndRestore<bool> pending(wgmmaPending, false);
    if (failed(lowerBlock(*newBody)))
      return failure();
    // A carried dot's group that no later wgmma dot retired: its registers
    // go to the next iteration through the yield.
    retirePendingWgmma(newBody->getTerminator());
  }
  // (elementwiseCarry's yielded values are kept; the mark is done with.)
  for (unsigned i : fragPos)
    carriedYields.erase(newBody->getTerminator()->getOperand(i));

  // Rewrite the yield: copy yielded tiles into the iteration buffers. If a
  // yielded tile is another position's iteration buffer, stage through
  // temporaries so the parallel assignment stays correct.
  if (regPos.empty() && fragPos.empty()) {
    if (failed(rewriteYield(*newBody, iterBufs)))
      return failure();
    mapRebuiltResults(op.getResults(), iterBufs, newLoop.getResults(), buffers);
    toErase.push_back(op);
    return success();
  }
  // Register accumulators: the yield carries the dots' result registers
  // after the scalars; the loop's results are stored into buffers after it.
  auto yield = cast<scf::YieldOp>(newBody->getTerminator());
  SmallVector<Value> regVals, keep, keepDests;
  for (unsigned i : regPos)
    llvm::append_range(regVals, registerTiles.lookup(yield.getOperand(i)));
  bool readYield = false;
  for (unsigned i : rowPos) {
    // (Read from a buffer before anything is reassigned.)
    ImplicitLocOpBuilder yb(yield.getLoc(), yield);
    auto rows = rowValues(yb, yield.getOperand(i), rowDot, yield, readYield);
    if (failed(rows))
      return failure();
    llvm::append_range(regVals, *rows);
  }
  if (readYield) {
    ImplicitLocOpBuilder yb(yield.getLoc(), yield);
    barrier(yb);
  }
  for (unsigned i : fragPos) {
    auto it = fragmentResults.find(yield.getOperand(i));
    if (it == fragmentResults.end())
      return op.emitError("kiln GPU lowering: the fragments this loop carries "
                          "were not kept in registers");
    llvm::append_range(regVals, it->second.second);
  }
  for (auto [i, v] : llvm::enumerate(yield.getOperands()))
    if (!isReg(i) && !isRow(i) && !isFrag(i)) {
      keep.push_back(v);
      keepDests.push_back(iterBufs[i]);
    }
  {
    OpBuilder yb(yield);
    scf::YieldOp::create(yb, yield.getLoc(), keep);
    yield.erase();
  }
  if (failed(rewriteYield(*newBody, keepDests)))
    return failure();
  Operation *term = newBody->getTerminator();
  term->insertOperands(term->getNumOperands(), regVals);
  ImplicitLocOpBuilder ab(op.getLoc(), newLoop->getBlock(),
                          std::next(Block::iterator(newLoop)));
  // Every thread is done with the loop's buffers (stages, operands): the
  // shared-memory planner may give their bytes to the result buffers.
  barrier(ab);
  scalarIdx = 0;
  regIdx = numScalars;
  rowIdx = firstRow;
  bool stored = false;
  auto usedHereOnly = [&](Value r) {
    return llvm::all_of(r.getUsers(), [&](Operation *u) {
      return u->getBlock() == op->getBlock();
    });
  };
  // A result carried in registers: its users compute on the fragments (an
  // epilogue: a GEMM's cast to bf16, attention's division by the row sums),
  // as on a dot's result, and no f32 tile goes through shared memory.
  // Elementwise readers need no whole rows, so they do under any tiling
  // (the mma.sync warp grid).
  auto placeRegisters = [&](Value r, DotOp dot, SmallVector<Value> regs) {
    if (usedHereOnly(r) &&
        (fragmentUses(r, dot) ||
         fragmentUses(r, dot, /*elementwiseOnly=*/true))) {
      fragmentResults[r] = {dot, regs};
      return;
    }
    // Stays in registers while its users are in this block (the next loop
    // may carry it on: attention's partial then full key blocks); stored
    // when something reads it (bufferOf).
    if (usedHereOnly(r)) {
      loopRegisters[r] = {dot, regs};
      return;
    }
    Value buf = allocTile(cast<RankedTensorType>(r.getType()), op.getLoc());
    storeRegisterTile(ab, dot, regs, buf);
    stored = true;
    buffers[r] = buf;
  };
  size_t fragIdxOut = firstRow + rowPos.size() * rowCount;
  for (auto [i, r] : llvm::enumerate(op.getResults())) {
    if (isReg(i)) {
      size_t n = regCounts[llvm::find(regPos, i) - regPos.begin()];
      SmallVector<Value> regs(newLoop.getResults().slice(regIdx, n));
      regIdx += n;
      placeRegisters(r, regDot(i), regs);
    } else if (isRow(i)) {
      // Stays in registers while its users are in this block (defineRows).
      rowFragments[r] = {rowDot, SmallVector<Value>(
                                     newLoop.getResults().slice(rowIdx, rowCount))};
      rowIdx += rowCount;
      if (!usedHereOnly(r)) {
        Value buf = allocTile(cast<RankedTensorType>(r.getType()), op.getLoc());
        storeRows(ab, rowDot, rowFragments.lookup(r).second, buf);
        stored = true;
        rowFragments.erase(r);
        buffers[r] = buf;
      }
    } else if (isFrag(i)) {
      size_t k = llvm::find(fragPos, i) - fragPos.begin();
      SmallVector<Value> regs(newLoop.getResults().slice(fragIdxOut, fragCounts[k]));
      fragIdxOut += fragCounts[k];
      // (fragmentCarry's are unused; elementwiseCarry's may be read.)
      if (!r.use_empty())
        placeRegisters(r, fragDots[k], regs);
    } else if (iterBufs[i]) {
      buffers[r] = iterBufs[i];
    } else {
      r.replaceAllUsesWith(newLoop.getResult(scalarIdx++));
    }
  }
  if (stored)
    barrier(ab);
  toErase.push_back(op);
  return success();
}

//===----------------------------------------------------------------------===//
// Loops in registers
//===----------------------------------------------------------------------===//

bool KernelLowering::registerLoop(scf::ForOp op, int64_t &width,
                                  int64_t &unroll, int64_t &unrollRows) {
  if (simt || op.getNumResults() == 0 || !isTile(op.getInitArgs()[0]))
    return false;
  ArrayRef<int64_t> shape =
      cast<RankedTensorType>(op.getInitArgs()[0].getType()).getShape();
  if (shape.empty() || !llvm::all_of(op.getInitArgs(), isTile))
    return false;
  SmallVector<Type> types;
  for (Value init : op.getInitArgs()) {
    auto t = cast<RankedTensorType>(init.getType());
    if (t.getShape() != shape)
      return false;
    types.push_back(t.getElementType());
  }
  const int64_t carried = op.getNumResults();
  // Values computed from the carried tiles: each is read at the element
  // being walked only, so only elementwise ops of the loop's shape take them.
  DenseSet<Value> fromCarried(op.getRegionIterArgs().begin(),
                              op.getRegionIterArgs().end());
  auto takesCarried = [&](Operation &inner) {
    return llvm::any_of(inner.getOperands(),
                        [&](Value v) { return fromCarried.contains(v); });
  };
  for (Operation &inner : op.getBody()->without_terminator()) {
    // (Not a nested loop: run inside this one per group of elements, it
    // walks its reads in that order, and depthwise convolution's rows of
    // taps, so nested, measured 25 GFLOP/s against 34 with the outer loop
    // lowered as usual, its input rows no longer in L1.)
    if (inner.getNumRegions() || mightHaveEffect<MemoryEffects::Write>(&inner))
      return false;
    if (!llvm::any_of(inner.getOperands(), isTile) &&
        !llvm::any_of(inner.getResults(), isTile))
      continue; // scalar code: runs once per group of elements now
    if (inner.getNumResults() != 1 || !isTile(inner.getResult(0)) ||
        cast<RankedTensorType>(inner.getResult(0).getType()).getRank() == 0)
      return false;
    auto rt = cast<RankedTensorType>(inner.getResult(0).getType());
    DenseElementsAttr dense;
    bool allowed;
    if (isa<arith::ConstantOp>(inner))
      allowed = matchPattern(inner.getResult(0), m_Constant(&dense)) && dense.isSplat();
    else if (auto load = dyn_cast<LoadOp>(inner))
      allowed = load.getView().getDefiningOp<MakeViewOp>() != nullptr;
    else if (auto gather = dyn_cast<GatherOp>(inner))
      allowed = rt.getRank() >= 2 && gather.getView().getDefiningOp<MakeViewOp>();
    else if (auto reshape = dyn_cast<ReshapeOp>(inner))
      allowed = unitDimsOnly(reshape);
    else
      allowed = isa<SplatOp, ArangeOp, BroadcastOp, ExpandDimsOp>(inner) ||
                isElementwiseTileOp(&inner);
    if (!allowed)
      return false;
    // A tile of another shape is read through a broadcast (or as a gather's
    // indices), once per element of the loop's tiles: only what is cheap to
    // recompute (canDefer's rule), and reads.
    if (rt.getShape() != shape &&
        !isa<SplatOp, ArangeOp, BroadcastOp, ExpandDimsOp, LoadOp, GatherOp,
             ReshapeOp, arith::ConstantOp>(inner) &&
        !cheapToRecompute(&inner))
      return false;
    if (takesCarried(inner)) {
      if (!isElementwiseTileOp(&inner) || rt.getShape() != shape)
        return false;
      fromCarried.insert(inner.getResult(0));
    }
    if (rt.getShape().back() == shape.back())
      types.push_back(rt.getElementType());
  }
  width = vectorWidth(types, shape.back());
  // Several vectors of a row per iteration share its scalar code (a
  // gather's row index and validity); at most 8 carried vectors.
  int64_t chunks = shape.back() / width;
  unroll = 1;
  for (int64_t u = 2; u <= chunks && u * carried <= 8; ++u)
    if (chunks % u == 0)
      unroll = u;
  // Then rows, which share the loop's scalar code and the reads broadcast
  // over them (depthwise convolution's weights): at most 8 carried vectors,
  // or two rows of 5 or 6 (12 accumulators, a weight and the addresses fit
  // AVX2's 16 registers; depthwise 3x3 over blocks of 48 channels, 2 x 6
  // against 1 x 6: 0.86-0.92x the time).
  unrollRows = 1;
  if (shape.size() >= 2) {
    int64_t rows = shape[shape.size() - 2];
    for (int64_t r = 2;
         r <= rows && (r * unroll * carried <= 8 || (r == 2 && unroll * carried <= 6)); ++r)
      if (rows % r == 0)
        unrollRows = r;
  }
  return true;
}

SmallVector<Operation *> KernelLowering::epilogueStore(scf::ForOp op) {
  if (op.getNumResults() != 1 || !isTile(op.getResult(0)))
    return {};
  ArrayRef<int64_t> shape = cast<RankedTensorType>(op.getResult(0).getType()).getShape();
  SmallVector<Operation *> chain;
  for (Value v = op.getResult(0); v.hasOneUse();) {
    Operation *user = *v.getUsers().begin();
    chain.push_back(user);
    if (storesElements(user, v)) {
      if (isa<ReshapeOp>(user))
        chain.push_back(*user->getResult(0).getUsers().begin());
      // (Plain stores: storeEpilogue has no streaming version.)
      return cast<StoreOp>(chain.back()).getStreaming() ? SmallVector<Operation *>{} : chain;
    }
    if (user->getBlock() != op->getBlock() || !isElementwiseTileOp(user) ||
        cast<RankedTensorType>(user->getResult(0).getType()).getShape() != shape)
      return {};
    v = user->getResult(0);
  }
  return {};
}

void KernelLowering::sinkRegisterLoops(Block &block) {
  SmallVector<scf::ForOp> loops(block.getOps<scf::ForOp>());
  for (scf::ForOp loop : loops) {
    SmallVector<Operation *> chain = epilogueStore(loop);
    int64_t w, unroll, unrollRows;
    if (chain.empty() || !registerLoop(loop, w, unroll, unrollRows) || w == 1)
      continue;
    // (The loop writes no memory: it may move past reads, not writes.)
    Operation *store = chain.back();
    bool clear = true;
    for (Operation *at = loop->getNextNode(); at != store; at = at->getNextNode())
      if (!llvm::is_contained(chain, at) &&
          (at->getNumRegions() || mightHaveEffect<MemoryEffects::Write>(at)))
        clear = false;
    if (!clear)
      continue;
    loop->moveBefore(store);
    for (Operation *c : ArrayRef(chain).drop_back())
      c->moveBefore(store);
  }
}

std::optional<LogicalResult> KernelLowering::lowerRegisterLoop(scf::ForOp op) {
  int64_t w, unroll, unrollRows;
  if (!registerLoop(op, w, unroll, unrollRows))
    return std::nullopt;
  Block *oldBody = op.getBody();
  auto type = cast<RankedTensorType>(op.getInitArgs()[0].getType());
  // What the body reads from outside the loop: buffers, or deferred
  // expressions over them.
  std::function<LogicalResult(Value)> needBuffer = [&](Value v) -> LogicalResult {
    if (!isTile(v) || op.getBodyRegion().isAncestor(v.getParentRegion()))
      return success();
    Operation *def = v.getDefiningOp();
    DenseElementsAttr splat;
    if (matchPattern(v, m_Constant(&splat)) && splat.isSplat())
      return success();
    if (def && deferred.contains(def)) {
      for (Value o : def->getOperands())
        if (failed(needBuffer(o)))
          return failure();
      return success();
    }
    return bufferOf(v, op);
  };
  for (Value init : op.getInitArgs())
    if (failed(needBuffer(init)))
      return failure();
  LogicalResult outside = success();
  op.getBody()->walk([&](Operation *inner) {
    for (Value o : inner->getOperands())
      if (failed(needBuffer(o)))
        outside = failure();
  });
  if (failed(outside))
    return failure();
  // A result whose epilogue store follows the loop (sinkRegisterLoops): its
  // chain computed and stored per group, when every other tile the chain
  // reads has a buffer or is computed inline from ones that do.
  SmallVector<Operation *> epilogue = epilogueStore(op);
  std::function<bool(Value)> readable = [&](Value v) {
    Operation *def = v.getDefiningOp();
    DenseElementsAttr splat;
    if (matchPattern(v, m_Constant(&splat)) && splat.isSplat())
      return true;
    if (def && deferred.contains(def))
      return llvm::all_of(def->getOperands(), [&](Value o) { return !isTile(o) || readable(o); });
    return buffers.count(v) != 0;
  };
  // (The views the loop reads made before it: their extents are compared
  // with the store's.)
  if (llvm::any_of(op.getBody()->without_terminator(), [&](Operation &inner) {
        return isa<LoadOp, GatherOp>(inner) && !views.count(inner.getOperand(0));
      }))
    epilogue.clear();
  {
    Operation *next = op->getNextNode();
    Value prev = op.getResult(0);
    for (Operation *c : epilogue) {
      auto store = dyn_cast<StoreOp>(c);
      bool ok = w > 1 && c == next && (!store || views.count(store.getView()));
      for (Value o : c->getOperands())
        ok = ok && (o == prev || !isTile(o) || readable(o));
      if (!ok) {
        epilogue.clear();
        break;
      }
      next = c->getNextNode();
      prev = c->getNumResults() ? c->getResult(0) : Value();
    }
  }
  // The results' buffers: an init's when the loop is its last use (element
  // i is read before it is written).
  SmallVector<Value> resultBufs;
  for (auto [init, r] : llvm::zip(op.getInitArgs(), op.getResults())) {
    if (!epilogue.empty()) {
      resultBufs.push_back(Value());
      continue;
    }
    Operation *def = init.getDefiningOp();
    Value reuse;
    if (init.getType() == r.getType() && init.hasOneUse() &&
        definingBlock(init) == op->getBlock() && !(def && deferred.contains(def)))
      reuse = buffers.lookup(init);
    resultBufs.push_back(reuse ? reuse : allocResultTile(r, op.getLoc()));
  }
  const int64_t carried = op.getNumResults();
  // Each step of the walk: unrollRows rows x unroll vectors (`at`).
  const int64_t rank = type.getRank(), group = unroll * unrollRows;
  SmallVector<int64_t> walk(type.getShape());
  if (rank >= 2)
    walk[rank - 2] /= unrollRows;
  ImplicitLocOpBuilder b(op.getLoc(), op);
  // The epilogue's store: whether its tile is inside the view, and apart
  // from every view the loop reads (both tested once). Where it may overlap
  // one, the vectors go to a tile buffer stored after the walk (`spill`):
  // every read then precedes the store, as written.
  Value direct, apart, spill; // direct: apart and inside the view
  if (!epilogue.empty()) {
    auto store = cast<StoreOp>(epilogue.back());
    const ViewInfo &sv = views[store.getView()];
    ArrayRef<int64_t> storeShape = store.getValue().getType().getShape();
    Value interior = interiorTile(b, sv, store.getOffsets(), storeShape);
    Value dstLo, dstHi;
    apart = arith::ConstantIntOp::create(b, 1, 1);
    footprint(b, sv.memref, store.getOffsets(), cIdxs(b, storeShape), dstLo, dstHi, apart);
    DenseSet<Value> seen;
    for (Operation &inner : op.getBody()->without_terminator()) {
      if (!isa<LoadOp, GatherOp>(inner) || !seen.insert(inner.getOperand(0)).second)
        continue;
      const ViewInfo &vi = views[inner.getOperand(0)];
      Value lo, hi;
      footprint(b, vi.memref, cIdxs(b, SmallVector<int64_t>(vi.sizes.size(), 0)), vi.sizes,
                lo, hi, apart);
      apart = arith::AndIOp::create(b, apart, disjoint(b, lo, hi, dstLo, dstHi));
    }
    direct = arith::AndIOp::create(b, apart, interior);
    spill = allocTile(store.getValue().getType(), op.getLoc());
    for (Operation *c : epilogue) {
      if (!isa<StoreOp, ReshapeOp>(c))
        deferred.insert(c);
      fusedEpilogue.insert(c);
      toErase.push_back(c);
    }
  }
  LogicalResult result = success();
  // The loop's versions: `op`'s body moved (Fast), or cloned (its reads
  // then tested per vector: Checked; or, their columns starting inside
  // the views or past them with unit stride, masked: Masked).
  enum class Reads { Fast, Interior, Masked, Checked };
  // Reads whose vectors' columns are known before the loop (a view made
  // outside it, the last offset defined outside it), at the walk's columns
  // `colAt`: whether all are inside their views with unit stride (a
  // version reads them with no test per vector: fastReads), and whether all
  // start at column 0 or later with unit stride (a version reads each with
  // a mask of its columns: maskedReads). Null when there are none.
  auto readConditions = [&](ImplicitLocOpBuilder &ib,
                            ArrayRef<Value> colAt) -> std::pair<Value, Value> {
    Value allFast, allMasked;
    if (w == 1)
      return {allFast, allMasked};
    op.getBody()->walk([&](Operation *inner) {
      // (Reads at the walk's vectors only: a tile whose last dimension is
      // broadcast, or a gather's index tile, is read per element.)
      if (!isa<LoadOp, GatherOp>(inner) ||
          cast<RankedTensorType>(inner->getResult(0).getType()).getShape().back() !=
              type.getShape().back())
        return;
      Value view = inner->getOperand(0);
      ValueRange offs = isa<LoadOp>(inner) ? cast<LoadOp>(inner).getOffsets()
                                           : cast<GatherOp>(inner).getOffsets();
      if (!views.count(view) || offs.empty() ||
          op.getBodyRegion().isAncestor(offs.back().getParentRegion()))
        return;
      const ViewInfo &vi = views[view];
      auto both = [&](Value x, Value y) {
        return x ? arith::AndIOp::create(ib, x, y).getResult() : y;
      };
      for (Value c : colAt) {
        Value col = arith::AddIOp::create(ib, offs.back(), c);
        allFast = both(allFast, columnsInside(ib, vi, col, w));
        allMasked = both(allMasked, columnsInside(ib, vi, col, w, /*whole=*/false));
      }
      fastReads.insert(inner);
      auto tile = cast<RankedTensorType>(inner->getResult(0).getType());
      if (tile.getRank() >= 2 && !paddingRows.count(inner)) {
        auto rowType = RankedTensorType::get({tile.getShape().back()}, tile.getElementType());
        Value row = allocTile(rowType, inner->getLoc());
        ImplicitLocOpBuilder fb(inner->getLoc(), row.getDefiningOp()->getBlock(),
                                std::next(Block::iterator(row.getDefiningOp())));
        Attribute pad = isa<LoadOp>(inner) ? cast<LoadOp>(inner).getPaddingAttr()
                                           : cast<GatherOp>(inner).getPaddingAttr();
        fillTile(fb, row, rowType,
                 paddingAttr(fb, pad, storageType(tile.getElementType())));
        paddingRows[inner] = row;
      }
    });
    return {allFast, allMasked};
  };
  // The rows of fast reads of tiles with rows, for a version of the loop
  // with no row tests (Interior): per outer dimension of such a read, its
  // view index's least and greatest values over the loop's iterations (the
  // offset is linear in the induction variable: its extremes are at the
  // first and last iterations), and the loop dimension that walks it (-1:
  // a unit dimension). A read whose offset is computed otherwise keeps its
  // row tests in that version.
  struct RowBound {
    Value lo, hi, size;
    int64_t loopDim;
  };
  SmallVector<RowBound> rowBounds;
  DenseSet<Operation *> interiorCandidates;
  if (w > 1 && rank >= 2) {
    Value iv = op.getInductionVar();
    // `v` with the induction variable at `at`: the index arithmetic inside
    // the loop cloned before it, null when not linear in it.
    std::function<std::pair<Value, bool>(Value, Value, IRMapping &)> valueAt =
        [&](Value v, Value at, IRMapping &map) -> std::pair<Value, bool> {
      if (v == iv)
        return {at, true};
      if (!op.getBodyRegion().isAncestor(v.getParentRegion()))
        return {v, false};
      Operation *def = v.getDefiningOp();
      if (!def || !isa<arith::AddIOp, arith::SubIOp, arith::MulIOp, arith::ConstantOp>(def) ||
          !def->getResult(0).getType().isIndex())
        return {Value(), false};
      bool dep = false;
      int64_t depOperands = 0;
      for (Value o : def->getOperands()) {
        auto [m, d] = valueAt(o, at, map);
        if (!m)
          return {Value(), false};
        map.map(o, m);
        dep |= d;
        depOperands += d;
      }
      if (isa<arith::MulIOp>(def) && depOperands > 1)
        return {Value(), false};
      return {b.clone(*def, map)->getResult(0), dep};
    };
    Value lb = op.getLowerBound(), step = op.getStep();
    Value last = arith::AddIOp::create(
        b, lb,
        arith::MulIOp::create(
            b,
            arith::DivSIOp::create(
                b, arith::SubIOp::create(b, arith::SubIOp::create(b, op.getUpperBound(), lb),
                                         cIdx(b, 1)),
                step),
            step));
    ArrayRef<int64_t> loopShape = type.getShape();
    SmallVector<int64_t> loopNonUnit = nonUnitDims(loopShape);
    for (Operation &inner : op.getBody()->without_terminator()) {
      auto load = dyn_cast<LoadOp>(inner); // (a gather's rows come from its indices)
      if (!load)
        continue;
      ArrayRef<int64_t> shape = load.getResult().getType().getShape();
      if (shape.size() < 2 || shape.back() != loopShape.back() || !views.count(load.getView()) ||
          op.getBodyRegion().isAncestor(load.getOffsets().back().getParentRegion()))
        continue;
      // Its tile is the loop's with unit dimensions added or dropped, or a
      // row broadcast over the loop's rows.
      SmallVector<int64_t> readNonUnit = nonUnitDims(shape);
      SmallVector<int64_t> loopDimOf(shape.size(), -1);
      bool sameTile = readNonUnit.size() == loopNonUnit.size() &&
                      llvm::all_of(llvm::zip(readNonUnit, loopNonUnit), [&](auto p) {
                        return shape[std::get<0>(p)] == loopShape[std::get<1>(p)];
                      });
      if (sameTile) {
        for (auto [rd, ld] : llvm::zip(readNonUnit, loopNonUnit))
          loopDimOf[rd] = ld;
      } else if (readNonUnit.size() > 1 || (readNonUnit.size() == 1 &&
                                           readNonUnit[0] != int64_t(shape.size()) - 1)) {
        continue;
      }
      const ViewInfo &vi = views[load.getView()];
      SmallVector<RowBound> bounds;
      bool linear = true;
      for (size_t d = 0; d + 1 < shape.size(); ++d) {
        IRMapping m0, m1;
        Value e0 = valueAt(load.getOffsets()[d], lb, m0).first;
        Value e1 = e0 ? valueAt(load.getOffsets()[d], last, m1).first : Value();
        if (!e1) {
          linear = false;
          break;
        }
        bounds.push_back({arith::MinSIOp::create(b, e0, e1),
                          arith::MaxSIOp::create(b, e0, e1), vi.sizes[d], loopDimOf[d]});
      }
      if (!linear)
        continue;
      llvm::append_range(rowBounds, bounds);
      interiorCandidates.insert(&inner);
    }
  }
  // Whether every read in interiorCandidates has its rows inside its view
  // at every iteration, for the step at `idx` with rows `rowAt`.
  auto rowsInside = [&](ImplicitLocOpBuilder &ib, ValueRange idx,
                        ArrayRef<Value> rowAt) -> Value {
    Value ok;
    for (const RowBound &rb : rowBounds) {
      Value first = rb.lo, lastRow = rb.hi;
      if (rb.loopDim >= 0) {
        bool rows = rb.loopDim == rank - 2;
        first = arith::AddIOp::create(ib, first, rows ? rowAt.front() : idx[rb.loopDim]);
        lastRow = arith::AddIOp::create(ib, lastRow, rows ? rowAt.back() : idx[rb.loopDim]);
      }
      Value both = arith::AndIOp::create(
          ib, arith::CmpIOp::create(ib, arith::CmpIPredicate::sge, first, cIdx(ib, 0)),
          arith::CmpIOp::create(ib, arith::CmpIPredicate::slt, lastRow, rb.size));
      ok = ok ? arith::AndIOp::create(ib, ok, both).getResult() : both;
    }
    return ok;
  };
  // One step of the walk at `idx`, in the version `fixed`, or (none) in
  // the one its reads' columns select.
  auto step = [&](ImplicitLocOpBuilder &ib, ValueRange idx, std::optional<Reads> fixed) {
    // (One index value per row and per column of the group: the memo of
    // emitElems then shares a row's scalar reads, a gather's row index and
    // a broadcast row weight, among its vectors.)
    SmallVector<Value> rowAt, colAt;
    for (int64_t r = 0; r < unrollRows && rank >= 2; ++r)
      rowAt.push_back(arith::AddIOp::create(
          ib, arith::MulIOp::create(ib, idx[rank - 2], cIdx(ib, unrollRows)), cIdx(ib, r)));
    for (int64_t u = 0; u < unroll; ++u)
      colAt.push_back(arith::AddIOp::create(ib, idx.back(), cIdx(ib, u * w)));
    SmallVector<SmallVector<Value>> at;
    for (int64_t r = 0; r < unrollRows; ++r)
      for (int64_t u = 0; u < unroll; ++u) {
        SmallVector<Value> i(idx.begin(), idx.end());
        if (rank >= 2)
          i[rank - 2] = rowAt[r];
        i.back() = colAt[u];
        at.push_back(i);
      }
    // `v`'s vectors of the group, one per element of `at`.
    auto elems = [&](ImplicitLocOpBuilder &eb, Value v) {
      SmallVector<Value> out;
      for (int64_t g = 0; g < group; ++g) {
        llvm::SaveAndRestore<int64_t> in(curGroup, g);
        out.push_back(emitElems(eb, v, at[g], w));
      }
      return out;
    };
    // The loop over vectors, `op`'s body (moved or cloned into it) processed
    // op by op: tile ops computed where they are needed, scalar code lowered
    // in place; then the yield per vector. Its results are each tile's
    // vectors, k-major.
    auto fill = [&](scf::ForOp loop, IRMapping &map) -> LogicalResult {
      Block *body = loop.getBody();
      for (int64_t k = 0; k < carried; ++k) {
        SmallVector<Value> args(loop.getRegionIterArgs().slice(k * group, group));
        groupOverride[op.getRegionIterArgs()[k]] = args;
      }
      SmallVector<Operation *> ops;
      for (Operation &inner : *body)
        ops.push_back(&inner);
      for (Operation *inner : ops) {
        if (llvm::any_of(inner->getResults(), isTile)) {
          deferred.insert(inner);
          toErase.push_back(inner);
        } else if (failed(lowerOp(inner))) {
          return failure();
        }
      }
      ImplicitLocOpBuilder yb(op.getLoc(), OpBuilder::atBlockEnd(body));
      auto oldYield = cast<scf::YieldOp>(oldBody->getTerminator());
      SmallVector<Value> next;
      {
        // (Everything emitted here is in this block: reusable in it.)
        llvm::SaveAndRestore<bool> memo(memoElems, true);
        for (Value v : oldYield.getOperands())
          llvm::append_range(next, elems(yb, map.lookupOrDefault(v)));
        elemMemo.clear();
        carriedMemo.clear();
      }
      scf::YieldOp::create(yb, next);
      return success();
    };
    SmallVector<Value> inits;
    for (Value init : op.getInitArgs())
      llvm::append_range(inits, elems(ib, init));
    auto buildLoop = [&](ImplicitLocOpBuilder &lb, Reads reads) -> FailureOr<ValueRange> {
      auto loop = scf::ForOp::create(lb, op.getLowerBound(), op.getUpperBound(),
                                     op.getStep(), inits,
                                     [](OpBuilder &, Location, Value, ValueRange) {});
      Block *body = loop.getBody();
      IRMapping map;
      if (reads != Reads::Fast) {
        map.map(op.getInductionVar(), loop.getInductionVar());
        OpBuilder cb = OpBuilder::atBlockEnd(body);
        for (Operation &inner : oldBody->without_terminator()) {
          Operation *copy = cb.clone(inner, map);
          if (reads == Reads::Masked && fastReads.contains(&inner))
            maskedReads.insert(copy);
          if (reads == Reads::Interior && fastReads.contains(&inner)) {
            fastReads.insert(copy);
            if (auto pad = paddingRows.find(&inner); pad != paddingRows.end())
              paddingRows[copy] = pad->second;
            if (interiorCandidates.contains(&inner))
              interiorReads.insert(copy);
          }
        }
      } else {
        body->getOperations().splice(body->end(), oldBody->getOperations(),
                                     oldBody->begin(), std::prev(oldBody->end()));
        op.getInductionVar().replaceAllUsesWith(loop.getInductionVar());
      }
      if (failed(fill(loop, map)))
        return failure();
      return ValueRange(loop.getResults());
    };
    // A version in a branch of `cond`'s if, the other version in its else.
    auto versions = [&](ImplicitLocOpBuilder &vb, Value cond, auto thenVersion,
                        auto elseVersion) -> FailureOr<ValueRange> {
      SmallVector<Type> types(inits.size());
      for (auto [t, v] : llvm::zip(types, inits))
        t = v.getType();
      auto ifOp = scf::IfOp::create(vb, types, cond, /*withElse=*/true);
      ImplicitLocOpBuilder eb(op.getLoc(), OpBuilder::atBlockBegin(ifOp.elseBlock()));
      FailureOr<ValueRange> otherwise = elseVersion(eb); // (before the body moves)
      if (failed(otherwise))
        return failure();
      scf::YieldOp::create(eb, *otherwise);
      ImplicitLocOpBuilder tb(op.getLoc(), OpBuilder::atBlockBegin(ifOp.thenBlock()));
      FailureOr<ValueRange> then = thenVersion(tb);
      if (failed(then))
        return failure();
      scf::YieldOp::create(tb, *then);
      return ValueRange(ifOp.getResults());
    };
    auto version = [&](Reads reads) {
      return [&, reads](ImplicitLocOpBuilder &vb) -> FailureOr<ValueRange> {
        // The fast version, in two where the step's rows may all lie inside
        // their views: a clone with no row tests for those steps (in the
        // else branch: built first, before the fast version moves the body).
        if (reads == Reads::Fast && !rowBounds.empty()) {
          Value outside = arith::XOrIOp::create(vb, rowsInside(vb, idx, rowAt),
                                                arith::ConstantIntOp::create(vb, 1, 1));
          return versions(vb, outside,
                          [&](ImplicitLocOpBuilder &tb) { return buildLoop(tb, Reads::Fast); },
                          [&](ImplicitLocOpBuilder &eb) { return buildLoop(eb, Reads::Interior); });
        }
        return buildLoop(vb, reads);
      };
    };
    // A tile running past its views' columns (a channel block past C) reads
    // with masks, not tests per vector: depthwise convolution over 144
    // channels in blocks of 64 took 0.61x the time of the tests, 32 in
    // blocks of 64 0.44x (docs/performance.md).
    FailureOr<ValueRange> built = failure();
    if (fixed) {
      built = version(*fixed)(ib);
    } else {
      Value allFast, allMasked;
      std::tie(allFast, allMasked) = readConditions(ib, colAt);
      built = !allFast ? version(Reads::Fast)(ib)
                       : versions(ib, allFast, version(Reads::Fast), [&](ImplicitLocOpBuilder &eb) {
                           return versions(eb, allMasked, version(Reads::Masked),
                                           version(Reads::Checked));
                         });
    }
    if (failed(built)) {
      result = failure();
      return;
    }
    ValueRange results = *built;
    if (!epilogue.empty()) {
      storeEpilogue(ib, op.getResult(0), results, epilogue, at, w, direct, apart, spill);
      return;
    }
    for (int64_t k = 0; k < carried; ++k)
      for (int64_t g = 0; g < group; ++g)
        storeElems(ib, results[k * group + g], resultBufs[k], at[g], w);
  };
  auto walkIn = [&](ImplicitLocOpBuilder &wb, std::optional<Reads> fixed) {
    forEachIndex(wb, walk, w * unroll, [&](ImplicitLocOpBuilder &ib, ValueRange idx) {
      step(ib, idx, fixed);
    });
  };
  if (w > 1 && type.getShape().back() == w * unroll) {
    // One step of columns: every step's reads take the same version, chosen
    // once here. (Chosen per step, LLVM hoisted each version's invariants,
    // masks and row tests, out of the walk: depthwise convolution over
    // 14x14x576 spent 22% of its time there, once per program.)
    SmallVector<Value> colAt;
    for (int64_t u = 0; u < unroll; ++u)
      colAt.push_back(cIdx(b, u * w));
    Value allFast, allMasked;
    std::tie(allFast, allMasked) = readConditions(b, colAt);
    if (!allFast) {
      walkIn(b, Reads::Fast);
    } else {
      auto fastIf = scf::IfOp::create(b, TypeRange{}, allFast, /*withElse=*/true);
      // (The cloned versions first: the fast one moves the body.)
      ImplicitLocOpBuilder eb(op.getLoc(), fastIf.getElseBodyBuilder());
      auto maskedIf = scf::IfOp::create(eb, TypeRange{}, allMasked, /*withElse=*/true);
      ImplicitLocOpBuilder cb(op.getLoc(), maskedIf.getElseBodyBuilder());
      walkIn(cb, Reads::Checked);
      ImplicitLocOpBuilder mb(op.getLoc(), maskedIf.getThenBodyBuilder());
      walkIn(mb, Reads::Masked);
      ImplicitLocOpBuilder tb(op.getLoc(), fastIf.getThenBodyBuilder());
      walkIn(tb, Reads::Fast);
    }
  } else {
    walkIn(b, std::nullopt);
  }
  groupOverride.clear();
  fastReads.clear();
  maskedReads.clear();
  paddingRows.clear();
  interiorReads.clear();
  if (failed(result))
    return failure();
  for (auto [r, buf] : llvm::zip(op.getResults(), resultBufs))
    if (buf)
      buffers[r] = buf;
  toErase.push_back(op);
  if (epilogue.empty())
    return success();
  // The spilled tile's store, where the store may overlap what the loop read.
  auto store = cast<StoreOp>(epilogue.back());
  auto spilled = scf::IfOp::create(
      b, arith::XOrIOp::create(b, apart, arith::ConstantIntOp::create(b, 1, 1)),
      /*withElseRegion=*/false);
  // (A copy: lowerBlock's walk goes on from the store.)
  OpBuilder cb = OpBuilder::atBlockTerminator(spilled.thenBlock());
  auto copy = cast<StoreOp>(cb.clone(*store));
  toErase.push_back(copy);
  return lowerViewAccess(copy, copy.getView(), Value(), copy.getOffsets(), spill,
                         copy.getValue().getType(), Attribute(), /*isStore=*/true);
}

void KernelLowering::storeEpilogue(ImplicitLocOpBuilder &ib, Value result, ValueRange vectors,
                                   ArrayRef<Operation *> epilogue,
                                   ArrayRef<SmallVector<Value>> at, int64_t width,
                                   Value direct, Value apart, Value spill) {
  auto store = cast<StoreOp>(epilogue.back());
  const ViewInfo &vi = views[store.getView()];
  auto reshape = dyn_cast_or_null<ReshapeOp>(epilogue.size() > 1 ? epilogue.end()[-2] : nullptr);
  Value last = reshape ? reshape.getSrc() : store.getValue();
  ArrayRef<int64_t> loopShape = cast<RankedTensorType>(result.getType()).getShape(),
                    storeShape = store.getValue().getType().getShape();
  Type stored = storageType(store.getValue().getType().getElementType());
  groupOverride[result] = SmallVector<Value>(vectors);
  for (auto [g, idx] : llvm::enumerate(at)) {
    llvm::SaveAndRestore<int64_t> in(curGroup, g);
    Value v = toType(ib, ib.getLoc(), emitElems(ib, last, idx, width), stored);
    // The store's tile index: the loop's at the dimensions other than 1.
    SmallVector<Value> sidx(storeShape.size(), cIdx(ib, 0));
    for (auto [sd, ld] : llvm::zip(nonUnitDims(storeShape), nonUnitDims(loopShape)))
      sidx[sd] = idx[ld];
    SmallVector<Value> viewIdx;
    for (auto [o, i] : llvm::zip(store.getOffsets(), sidx))
      viewIdx.push_back(arith::AddIOp::create(ib, o, i));
    auto ifOp = scf::IfOp::create(ib, TypeRange{}, direct, /*withElse=*/true);
    ImplicitLocOpBuilder tb(ib.getLoc(), ifOp.getThenBodyBuilder());
    vector::StoreOp::create(tb, v, vi.unitMemref, viewIdx);
    ImplicitLocOpBuilder ob(ib.getLoc(), ifOp.getElseBodyBuilder());
    auto spillIf = scf::IfOp::create(ob, TypeRange{}, apart, /*withElse=*/true);
    ImplicitLocOpBuilder sb(ib.getLoc(), spillIf.getElseBodyBuilder());
    storeElems(sb, v, spill, sidx, width);
    // A tile not inside the view: a row outside it is skipped, the vector's
    // lanes tested.
    ImplicitLocOpBuilder eb(ib.getLoc(), spillIf.getThenBodyBuilder());
    Value rowOk = arith::ConstantIntOp::create(eb, 1, 1);
    for (size_t d = 0; d + 1 < viewIdx.size(); ++d)
      rowOk = arith::AndIOp::create(eb, rowOk, inRange(eb, viewIdx[d], vi.sizes[d]));
    auto rowIf = scf::IfOp::create(eb, TypeRange{}, rowOk, /*withElse=*/false);
    ImplicitLocOpBuilder rb(ib.getLoc(), rowIf.getThenBodyBuilder());
    writeVectorChecked(rb, vi, ArrayRef(viewIdx).drop_back(), rowOk, viewIdx.back(), v);
  }
  groupOverride.erase(result);
}

Value KernelLowering::readViewElems(ImplicitLocOpBuilder &ib, Operation *access,
                                    ValueRange idx, int64_t width) {
  auto gather = dyn_cast<GatherOp>(access);
  auto load = dyn_cast<LoadOp>(access);
  auto viewIt = views.find(access->getOperand(0));
  assert(viewIt != views.end() && "a register loop's view is made before it is read");
  const ViewInfo &vi = viewIt->second;
  auto type = cast<RankedTensorType>(access->getResult(0).getType());
  const int64_t rank = type.getRank();
  Type elt = type.getElementType(), stored = storageType(elt);
  TypedAttr pad = paddingAttr(ib, gather ? gather.getPaddingAttr() : load.getPaddingAttr(),
                              stored);
  ValueRange offsets = gather ? gather.getOffsets() : load.getOffsets();
  auto offset = [&](int64_t d) { return offsets[gather ? d - 1 : d]; };
  Value c0 = cIdx(ib, 0);
  auto both = [&](Value x, Value y) { return arith::AndIOp::create(ib, x, y).getResult(); };
  // The view indices of the outer dimensions (a gather's first: its row
  // index), whether all are inside the view, and the same clamped to 0.
  SmallVector<Value> outer, clamped;
  Value rowOk = arith::ConstantIntOp::create(ib, 1, 1);
  for (int64_t d = 0; d + 1 < rank; ++d) {
    Value i;
    if (gather && d == 0)
      i = arith::IndexCastOp::create(
          ib, ib.getIndexType(), emitElems(ib, gather.getIndices(), ValueRange{idx[0]}, 1));
    else
      i = arith::AddIOp::create(ib, offset(d), idx[d]);
    Value ok = inRange(ib, i, vi.sizes[d]);
    outer.push_back(i);
    clamped.push_back(arith::SelectOp::create(ib, ok, i, c0));
    rowOk = both(rowOk, ok);
  }
  Value col = arith::AddIOp::create(ib, offset(rank - 1), idx[rank - 1]);
  if (width == 1)
    return toType(ib, ib.getLoc(), readChecked(ib, vi, outer, rowOk, col, 1, pad), elt);
  // The vector's columns inside the view, with unit stride: one load (at
  // row 0 of each outer dimension for a row outside the view, then
  // replaced by the padding: no branch per row). Else readChecked.
  auto vecType = VectorType::get({width}, stored);
  auto fastRead = [&](ImplicitLocOpBuilder &fb) -> Value {
    SmallVector<Value> at(clamped);
    at.push_back(col);
    Value v = vector::LoadOp::create(fb, vecType, vi.unitMemref, at);
    // On a vector condition: x86 lowers a select of vectors on a scalar
    // condition to a branch around each one (its CMOV pseudo), which kept
    // depthwise convolution's loads out of its multiply-adds; a blend or an
    // AND takes the load as its operand (with fma, 3x3 and 7x7 depthwise
    // took 0.85x and 0.87x the time; docs/performance.md).
    Value rowMask =
        vector::BroadcastOp::create(fb, VectorType::get({width}, fb.getI1Type()), rowOk);
    return arith::SelectOp::create(fb, rowMask, v, splatConstant(fb, pad, width));
  };
  auto padRow = paddingRows.find(access);
  if (fastReads.contains(access) && padRow != paddingRows.end()) {
    // (lowerRegisterLoop tested the columns.) The row's address (at the
    // tile's first column) in the view, or that of the row of padding for
    // a row outside it, selected once for all its vectors; each vector is
    // then one load, which x86 folds into its multiply-add (a vector select
    // after the load cost 5-6 instructions per row for its mask, and an
    // AND per vector). Integer addresses and an llvm.load: a memref load
    // takes its base from one buffer, not from one of two per row.
    auto md = memref::ExtractStridedMetadataOp::create(ib, vi.unitMemref);
    Value elem = arith::AddIOp::create(ib, md.getOffset(), offset(rank - 1));
    for (auto [i, stride] : llvm::zip(outer, md.getStrides()))
      elem = arith::AddIOp::create(ib, elem, arith::MulIOp::create(ib, i, stride));
    const int64_t elemBytes = std::max<int64_t>(1, stored.getIntOrFloatBitWidth() / 8);
    Value bytes = cIdx(ib, elemBytes);
    Value inView = arith::AddIOp::create(
        ib, memref::ExtractAlignedPointerAsIndexOp::create(ib, vi.unitMemref),
        arith::MulIOp::create(ib, elem, bytes));
    Value row = interiorReads.contains(access)
                    ? inView
                    : Value(arith::SelectOp::create(
                          ib, rowOk, inView,
                          memref::ExtractAlignedPointerAsIndexOp::create(ib, padRow->second)));
    Value at = arith::AddIOp::create(ib, row, arith::MulIOp::create(ib, idx[rank - 1], bytes));
    Value v = LLVM::LoadOp::create(ib, vecType, pointerAt(ib, at, 0), elemBytes);
    return toType(ib, ib.getLoc(), v, elt);
  }
  if (fastReads.contains(access)) // (lowerRegisterLoop tested the columns)
    return toType(ib, ib.getLoc(), fastRead(ib), elt);
  if (maskedReads.contains(access)) {
    // (Its columns start inside or past the row, with unit stride: the mask
    // is loop-invariant, hoisted out of the register loop by LLVM. The row's
    // validity is applied as fastRead's: an AND of the mask with it cost 3
    // instructions per vector on AVX2, its i1 vectors packed and unpacked.)
    auto [colMask, at] = maskedColumns(ib, vi, col, width);
    SmallVector<Value> idxs(clamped);
    idxs.push_back(at);
    Value padVec = splatConstant(ib, pad, width);
    Value v = vector::MaskedLoadOp::create(ib, vecType, vi.unitMemref, idxs, colMask, padVec);
    Value rowMask =
        vector::BroadcastOp::create(ib, VectorType::get({width}, ib.getI1Type()), rowOk);
    return toType(ib, ib.getLoc(), arith::SelectOp::create(ib, rowMask, v, padVec), elt);
  }
  auto ifOp = scf::IfOp::create(ib, TypeRange{vecType}, columnsInside(ib, vi, col, width),
                                /*withElse=*/true);
  {
    ImplicitLocOpBuilder tb(ib.getLoc(), OpBuilder::atBlockBegin(ifOp.thenBlock()));
    scf::YieldOp::create(tb, fastRead(tb));
  }
  {
    ImplicitLocOpBuilder eb(ib.getLoc(), OpBuilder::atBlockBegin(ifOp.elseBlock()));
    scf::YieldOp::create(eb, readChecked(eb, vi, outer, rowOk, col, width, pad));
  }
  return toType(ib, ib.getLoc(), ifOp.getResult(0), elt);
}

/// A new scf.if before `op` on its condition, with results `types`, each of
/// `op`'s branches moved into the new one's block (its old yield last, for
/// the caller to rewrite). Returns the new if and the blocks that received a
/// branch.
static std::pair<scf::IfOp, SmallVector<Block *, 2>>
moveIntoNewIf(ImplicitLocOpBuilder &b, scf::IfOp op, TypeRange types) {
  auto newIf = scf::IfOp::create(b, types, op.getCondition(),
                                 /*withElseRegion=*/true);
  SmallVector<Block *, 2> blocks;
  for (auto [oldRegion, newRegion] :
       llvm::zip(op->getRegions(), newIf->getRegions())) {
    Block *newBlock = &newRegion.front();
    if (!newBlock->empty())
      newBlock->getTerminator()->erase();
    if (oldRegion.empty())
      continue;
    newBlock->getOperations().splice(newBlock->end(),
                                     oldRegion.front().getOperations());
    blocks.push_back(newBlock);
  }
  return {newIf, blocks};
}

/// An scf.if whose tile results stay in registers (fragmentIf): the rebuilt
/// if yields each result's fragment registers, which each branch computes
/// (its expressions on fragments keep theirs, fragmentUses) or reads from a
/// buffer (any other tile it yields).
LogicalResult KernelLowering::lowerFragmentIf(scf::IfOp op, DotOp dot,
                                              size_t numRegs, Type regType) {
  ImplicitLocOpBuilder b(op.getLoc(), op);
  SmallVector<Type> types;
  for (Value r : op.getResults()) {
    if (isTile(r))
      types.append(numRegs, regType);
    else
      types.push_back(r.getType());
  }
  auto [newIf, blocks] = moveIntoNewIf(b, op, types);
  for (Block *newBlock : blocks) {
    fragmentIfBlocks.insert(newBlock);
    llvm::SaveAndRestore<bool> pending(wgmmaPending);
    if (failed(lowerBlock(*newBlock)))
      return failure();
    auto yield = cast<scf::YieldOp>(newBlock->getTerminator());
    ImplicitLocOpBuilder yb(yield.getLoc(), yield);
    SmallVector<Value> values;
    for (Value y : yield.getOperands()) {
      if (!isTile(y)) {
        values.push_back(y);
        continue;
      }
      if (auto it = fragmentResults.find(y);
          it != fragmentResults.end() && it->second.first == dot) {
        llvm::append_range(values, it->second.second);
        continue;
      }
      FailureOr<Value> buf = bufferOf(y, yield);
      if (failed(buf))
        return failure();
      llvm::append_range(values, loadRegisterTile(yb, dot, *buf));
    }
    scf::YieldOp::create(yb, values);
    yield.erase();
  }
  size_t at = 0;
  for (Value r : op.getResults()) {
    if (isTile(r)) {
      fragmentResults[r] = {
          dot, SmallVector<Value>(newIf.getResults().slice(at, numRegs))};
      at += numRegs;
    } else {
      r.replaceAllUsesWith(newIf.getResult(at++));
    }
  }
  toErase.push_back(op);
  return success();
}

LogicalResult KernelLowering::lowerIf(scf::IfOp op) {
  bool yieldsTiles = llvm::any_of(op.getResults(), isTile);
  if (!yieldsTiles) {
    return lowerRegions(op);
  }
  // SIMT: a yielded fragment (a value kept in registers) of a dot whose
  // registers the if's results can stay in.
  if (simt && !op.getElseRegion().empty()) {
    for (Region *region : {&op.getThenRegion(), &op.getElseRegion()}) {
      for (Value y : region->front().getTerminator()->getOperands()) {
        // The yielded value, or a value an expression of the branch reads.
        SmallVector<Value> work{y};
        DenseSet<Value> seen;
        while (!work.empty()) {
          Value v = work.pop_back_val();
          if (!seen.insert(v).second)
            continue;
          if (auto it = fragmentResults.find(v); it != fragmentResults.end()) {
            DotOp dot = it->second.first;
            if (fragmentIf(op, dot))
              return lowerFragmentIf(op, dot, it->second.second.size(),
                                     it->second.second.front().getType());
            continue;
          }
          if (Operation *def = v.getDefiningOp();
              def && region->isAncestor(def->getParentRegion()) &&
              isElementwiseTileOp(def))
            llvm::append_range(work, def->getOperands());
        }
      }
    }
  }
  ImplicitLocOpBuilder b(op.getLoc(), op);
  SmallVector<Value> resultBufs(op.getNumResults());
  SmallVector<Type> scalarTypes;
  for (auto [i, r] : llvm::enumerate(op.getResults())) {
    if (isTile(r))
      resultBufs[i] = allocTile(cast<RankedTensorType>(r.getType()),
                                op.getLoc());
    else
      scalarTypes.push_back(r.getType());
  }
  auto [newIf, blocks] = moveIntoNewIf(b, op, scalarTypes);
  for (Block *newBlock : blocks) {
    llvm::SaveAndRestore<bool> pending(wgmmaPending);
    if (failed(lowerBlock(*newBlock)))
      return failure();
    if (failed(rewriteYield(*newBlock, resultBufs)))
      return failure();
  }
  mapRebuiltResults(op.getResults(), resultBufs, newIf.getResults(), buffers);
  toErase.push_back(op);
  return success();
}

/// scf.while carrying tiles: each tile carried into the "before" region lives
/// in one buffer (the init is copied in, the "after" region's yield copies
/// back), and each tile forwarded by scf.condition to the "after" region and
/// the results lives in another. The rebuilt loop carries only scalars.
LogicalResult KernelLowering::lowerWhile(scf::WhileOp op) {
  bool carriesTiles = llvm::any_of(op.getInits(), isTile) ||
                      llvm::any_of(op.getResults(), isTile);
  if (!carriesTiles) {
    return lowerRegions(op);
  }
  ImplicitLocOpBuilder b(op.getLoc(), op);
  Block *before = op.getBeforeBody(), *after = op.getAfterBody();
  // Buffers of the values carried into "before" and forwarded to "after".
  SmallVector<Value> inBufs(op.getInits().size()), outBufs(op.getNumResults());
  SmallVector<Value> scalarInits;
  SmallVector<Type> scalarInTypes, scalarOutTypes;
  for (auto [i, init] : llvm::enumerate(op.getInits())) {
    if (!isTile(init)) {
      scalarInits.push_back(init);
      scalarInTypes.push_back(init.getType());
      continue;
    }
    auto type = cast<RankedTensorType>(init.getType());
    auto src = bufferOf(init, op);
    if (failed(src))
      return failure();
    inBufs[i] = allocTile(type, op.getLoc());
    copyTile(b, *src, inBufs[i], type);
  }
  for (auto [i, r] : llvm::enumerate(op.getResults())) {
    if (isTile(r))
      outBufs[i] = allocTile(cast<RankedTensorType>(r.getType()), op.getLoc());
    else
      scalarOutTypes.push_back(r.getType());
  }
  auto newOp = scf::WhileOp::create(b, scalarOutTypes, scalarInits);
  Block *newBefore = b.createBlock(&newOp.getBefore());
  for (Type t : scalarInTypes)
    newBefore->addArgument(t, op.getLoc());
  Block *newAfter = b.createBlock(&newOp.getAfter());
  for (Type t : scalarOutTypes)
    newAfter->addArgument(t, op.getLoc());
  b.setInsertionPoint(op);

  // Move a region's body, mapping its tile arguments to buffers and its
  // scalar arguments to the new block's arguments.
  auto moveBody = [&](Block *from, Block *to, ArrayRef<Value> bufs) {
    unsigned scalarIdx = 0;
    for (auto [i, arg] : llvm::enumerate(from->getArguments())) {
      if (bufs[i])
        buffers[arg] = bufs[i];
      else
        arg.replaceAllUsesWith(to->getArgument(scalarIdx++));
    }
    to->getOperations().splice(to->end(), from->getOperations());
  };
  moveBody(before, newBefore, inBufs);
  llvm::SaveAndRestore<bool> pending(wgmmaPending);
  if (failed(lowerBlock(*newBefore)))
    return failure();
  auto cond = cast<scf::ConditionOp>(newBefore->getTerminator());
  {
    auto scalars = assignTiles(cond, cond.getArgs(), outBufs);
    if (failed(scalars))
      return failure();
    OpBuilder cb(cond);
    scf::ConditionOp::create(cb, cond.getLoc(), cond.getCondition(), *scalars);
    cond.erase();
  }
  moveBody(after, newAfter, outBufs);
  if (failed(lowerBlock(*newAfter)))
    return failure();
  if (failed(rewriteYield(*newAfter, inBufs)))
    return failure();
  mapRebuiltResults(op.getResults(), outBufs, newOp.getResults(), buffers);
  toErase.push_back(op);
  return success();
}

/// kiln.reshape and kiln.expand_dims: the same elements in the same
/// row-major order, so a flat copy.
LogicalResult KernelLowering::lowerReshape(Operation *op) {
  Location loc = op->getLoc();
  Value srcTile = op->getOperand(0);
  auto srcType = cast<RankedTensorType>(srcTile.getType());
  auto type = cast<RankedTensorType>(op->getResult(0).getType());
  // SIMT: a row vector in registers expanded to [M, 1] stays there (its
  // broadcasts read it per row).
  if (auto ex = dyn_cast<ExpandDimsOp>(op); ex && ex.getAxis() == 1)
    if (auto it = rowFragments.find(srcTile); it != rowFragments.end()) {
      ImplicitLocOpBuilder b(loc, op);
      auto [dot, regs] = it->second;
      defineRows(b, op->getResult(0), dot, regs);
      toErase.push_back(op);
      return success();
    }
  auto src = bufferOf(srcTile, op);
  if (failed(src))
    return failure();
  // SIMT: a [1, R, C] load laid out for wgmma (rank-4 core-matrix buffer)
  // or in XOR-swizzled rows for mma.sync (allocXorTile) reshaped to [R, C]:
  // the same buffer serves the 2-D tile.
  if (simt && (isCoreBuffer(*src) || isXorBuffer(*src)) &&
      unitLeadingReshape(srcType, type)) {
    buffers[op->getResult(0)] = *src;
    toErase.push_back(op);
    return success();
  }
  ImplicitLocOpBuilder b(loc, op);
  // SIMT: a [1, R, C] load with padded rows (an mma.sync operand,
  // allocPaddedTile) reshaped to [R, C]: the same rows, viewed in 2-D.
  if (simt && isPaddedBuffer(*src) && unitLeadingReshape(srcType, type)) {
    auto srcPadded = cast<MemRefType>(src->getType());
    SmallVector<int64_t> strides = {
        type.getDimSize(1) + rowPad(srcPadded.getElementType()), 1};
    auto viewType = MemRefType::get(
        type.getShape(), srcPadded.getElementType(),
        StridedLayoutAttr::get(b.getContext(), 0, strides),
        srcPadded.getMemorySpace());
    Value view = memref::ReinterpretCastOp::create(
        b, viewType, *src, /*offset=*/0, type.getShape(), strides);
    // A pipelined stage stays one (its readers need no barrier of their own).
    if (pipelinedBuffers.count(*src))
      pipelinedBuffers.insert(view);
    buffers[op->getResult(0)] = view;
    toErase.push_back(op);
    return success();
  }
  int64_t n = type.getNumElements();
  Type stored = storageType(type.getElementType());
  auto srcMemref = cast<MemRefType>(src->getType());
  auto flatType = MemRefType::get({n}, stored, MemRefLayoutAttrInterface{},
                                  srcMemref.getMemorySpace());
  auto flatten = [&](Value m, RankedTensorType t) -> Value {
    SmallVector<ReassociationIndices> re(1);
    for (int64_t d = 0; d < t.getRank(); ++d)
      re[0].push_back(d);
    if (t.getRank() == 1)
      return m;
    return memref::CollapseShapeOp::create(b, flatType, m, re);
  };
  // The only use of a row-major tile defined here: the same bytes viewed in
  // the new shape (row-major order does not change), no copy. (Not a block
  // argument: a loop's yield may reassign its buffer.)
  if (srcTile.hasOneUse() && srcTile.getDefiningOp() &&
      srcMemref.getLayout().isIdentity() && srcMemref.hasStaticShape() &&
      !deferredTrans.count(srcTile)) {
    Value view = flatten(*src, srcType);
    if (type.getRank() > 1) {
      SmallVector<ReassociationIndices> re(1);
      for (int64_t d = 0; d < type.getRank(); ++d)
        re[0].push_back(d);
      view = memref::ExpandShapeOp::create(
          b, MemRefType::get(type.getShape(), stored, MemRefLayoutAttrInterface{},
                             srcMemref.getMemorySpace()),
          view, re);
    }
    if (pipelinedBuffers.count(*src))
      pipelinedBuffers.insert(view);
    buffers[op->getResult(0)] = view;
    toErase.push_back(op);
    return success();
  }
  Value buf = allocTile(type, loc);
  Value from = flatten(*src, srcType);
  Value to = flatten(buf, type);
  auto flatTensor = RankedTensorType::get({n}, type.getElementType());
  copyTile(b, from, to, flatTensor);
  buffers[op->getResult(0)] = buf;
  toErase.push_back(op);
  return success();
}

//===----------------------------------------------------------------------===//
// Gather + store fusion
//===----------------------------------------------------------------------===//

bool KernelLowering::canFuseGatherStore(GatherOp gather) {
  RankedTensorType type = gather.getResult().getType();
  if (type.getRank() < 2 || !gather.getResult().hasOneUse())
    return false;
  // Whole vectors per row: the CPU's vector width, a GPU thread's chunk
  // (more than one element; from views with known strides).
  if (simt) {
    int64_t eltBytes = std::max<int64_t>(
        1, storageType(type.getElementType()).getIntOrFloatBitWidth() / 8);
    auto gi = views.find(gather.getView());
    if (asyncChunk(type) <= eltBytes || gi == views.end() ||
        gi->second.strides.empty())
      return false;
  } else if (vectorWidth({type.getElementType()}, type.getShape().back()) <= 1) {
    return false;
  }
  Operation *user = *gather.getResult().getUsers().begin();
  // Looking through a reshape that only adds leading unit dimensions (a 2-D
  // tile stored into a 3-D view): the elements keep their positions.
  if (isa<ReshapeOp, ExpandDimsOp>(user)) {
    auto to = cast<RankedTensorType>(user->getResult(0).getType());
    int64_t lead = to.getRank() - type.getRank();
    if (lead < 0 || !user->getResult(0).hasOneUse() ||
        user->getBlock() != gather->getBlock() ||
        to.getShape().drop_front(lead) != type.getShape() ||
        llvm::any_of(to.getShape().take_front(lead),
                     [](int64_t d) { return d != 1; }))
      return false;
    user = *user->getResult(0).getUsers().begin();
  }
  auto store = dyn_cast<StoreOp>(user);
  return store && store->getBlock() == gather->getBlock();
}

LogicalResult KernelLowering::lowerGatherStore(GatherOp gather,
                                               Operation *reshape,
                                               StoreOp store) {
  auto gi = views.find(gather.getView());
  auto si = views.find(store.getView());
  if (gi == views.end() || si == views.end())
    return store->emitError(who() + ": the view must be made by a "
                            "kiln.make_view in the same kernel");
  const ViewInfo &gv = gi->second, &sv = si->second;
  RankedTensorType type = gather.getResult().getType();
  ArrayRef<int64_t> shape = type.getShape();
  const int64_t rank = type.getRank();
  Type elt = storageType(type.getElementType());
  const int64_t width = vectorWidth({type.getElementType()}, shape.back());
  auto idxBuf = bufferOf(gather.getIndices(), gather);
  if (failed(idxBuf))
    return failure();
  TypedAttr padAttr = dyn_cast_or_null<TypedAttr>(gather.getPaddingAttr());
  if (!padAttr)
    padAttr = cast<TypedAttr>(OpBuilder(store).getZeroAttr(elt));
  padAttr = storagePadding(padAttr);
  ValueRange gOff = gather.getOffsets(), sOff = store.getOffsets();
  ArrayRef<int64_t> storeShape = store.getValue().getType().getShape();
  const int64_t lead = int64_t(storeShape.size()) - rank; // leading unit dims

  ImplicitLocOpBuilder b(store.getLoc(), store);
  Value c0 = cIdx(b, 0), c1 = cIdx(b, 1);
  auto cmp = [&](arith::CmpIPredicate p, Value x, Value y) -> Value {
    return arith::CmpIOp::create(b, p, x, y);
  };
  auto both = [&](Value x, Value y) -> Value { return arith::AndIOp::create(b, x, y); };
  // The gathered tile is a value: every row is read before any is written.
  // Copying row by row keeps that only when the destination tile does not
  // overlap the source view, so compare their byte ranges (computed from the
  // views' base pointers, offsets, sizes and strides; any negative stride
  // counts as an overlap). With unit innermost strides, what every fused
  // copy needs (`apart`).
  // The source's part is the rows the indices name (a front end's pointer
  // view has 2^62 rows: its whole range would always count as overlapping).
  Value srcLo, srcHi, dstLo, dstHi;
  Value apart = both(gv.unitStride, sv.unitStride);
  SmallVector<Value> srcStart(rank, c0), srcExtent(gv.sizes);
  std::tie(srcStart[0], srcExtent[0]) = indexedRows(b, *idxBuf, shape[0], gv.sizes[0]);
  footprint(b, gv.unitMemref, srcStart, srcExtent, srcLo, srcHi, apart);
  footprint(b, sv.unitMemref, sOff, cIdxs(b, storeShape), dstLo, dstHi, apart);
  apart = both(apart, disjoint(b, srcLo, srcHi, dstLo, dstHi));
  // Both tiles interior: every column of the gathered rows exists in the
  // source, and the whole tile lies inside the destination.
  Value interior = both(apart, both(interiorTile(b, gv, gOff, shape, /*firstDim=*/1),
                                    interiorTile(b, sv, sOff, storeShape)));
  if (simt)
    interior = both(interior, gatherStoreAlignedSimt(b, gv, gOff, sv, sOff, type));
  auto ifOp = scf::IfOp::create(b, TypeRange{}, interior, /*withElse=*/true);
  // Where the general gather and store go (below).
  Block *general = ifOp.elseBlock();
  if (simt) {
    // Each thread its chunks, through registers: no tile in shared memory,
    // no barrier (the index tile's reads are this op's last shared access).
    OpBuilder tb = ifOp.getThenBodyBuilder();
    ImplicitLocOpBuilder fb(store.getLoc(), tb);
    gatherStoreChunksSimt(fb, gv, gOff, sv, sOff, lead, *idxBuf, type, padAttr);
  } else {
    // The gathered tile's elements at a tile index (a vector of w, or a
    // scalar for 1; a row outside the source reads the padding), with a
    // mask of the vector's lanes to read or none; and their store at the
    // same index of the destination.
    auto readLanes = [&](ImplicitLocOpBuilder &ib, ValueRange idx, int64_t w,
                         Value mask) -> Value {
      Value raw = memref::LoadOp::create(ib, *idxBuf, ValueRange{idx[0]});
      Value row = arith::IndexCastOp::create(ib, ib.getIndexType(), raw);
      auto [src, dst, rowOk] = gatherStoreAt(ib, gv, row, idx, gOff, sOff, lead);
      Type t = w == 1 ? elt : Type(VectorType::get({w}, elt));
      auto rowIf = scf::IfOp::create(ib, TypeRange{t}, rowOk, true);
      ImplicitLocOpBuilder tb(ib.getLoc(), rowIf.getThenBodyBuilder());
      Value v;
      if (w == 1)
        v = memref::LoadOp::create(tb, gv.unitMemref, src);
      else if (mask)
        v = vector::MaskedLoadOp::create(tb, cast<VectorType>(t), gv.unitMemref, src, mask,
                                         splatConstant(tb, padAttr, w));
      else
        v = vector::LoadOp::create(tb, cast<VectorType>(t), gv.unitMemref, src);
      scf::YieldOp::create(tb, v);
      ImplicitLocOpBuilder eb(ib.getLoc(), rowIf.getElseBodyBuilder());
      scf::YieldOp::create(eb, splatConstant(eb, padAttr, w));
      return rowIf.getResult(0);
    };
    auto read = [&](ImplicitLocOpBuilder &ib, ValueRange idx, int64_t w) -> Value {
      return readLanes(ib, idx, w, Value());
    };
    auto destination = [&](ImplicitLocOpBuilder &ib, ValueRange idx) {
      SmallVector<Value> dst(sOff.take_front(lead));
      for (auto [d, i] : llvm::enumerate(idx))
        dst.push_back(arith::AddIOp::create(ib, sOff[lead + d], i));
      return dst;
    };
    auto write = [&](ImplicitLocOpBuilder &ib, ValueRange idx, Value v, bool nontemporal) {
      writeElems(ib, v, sv, destination(ib, idx), nontemporal);
    };
    // kiln.store {streaming}: non-temporal vector stores (lowerViewAccess).
    auto emitCopy = [&](ImplicitLocOpBuilder &fb, ValueRange extents,
                        function_ref<void(ImplicitLocOpBuilder &)> copy) {
      if (store.getStreaming())
        storeStreaming(fb, sv.unitMemref, sOff, elt, extents, width, read, write, copy);
      else
        copy(fb);
    };
    ImplicitLocOpBuilder fb(store.getLoc(), ifOp.getThenBodyBuilder());
    emitCopy(fb, cIdxs(fb, shape), [&](ImplicitLocOpBuilder &cb) {
      forEachIndex(cb, shape, width, [&](ImplicitLocOpBuilder &ib, ValueRange idx) {
        write(ib, idx, read(ib, idx, width), /*nontemporal=*/false);
      });
    });
    // (Computed in the else branch: an interior tile does not pay for it.)
    b.setInsertionPoint(ifOp.elseBlock()->getTerminator());
    // A tile running past the destination (a block past the end of the rows
    // or of a row: embedding's columns in blocks of 1024 over 576 took
    // 1.9-3.2x the time of blocks of 576 through the general gather and
    // store): on the CPU, the same copy over the part inside it (`clipped`),
    // when every offset is 0 or more and the source holds that part's
    // columns. Its extents: no rows when a leading unit dimension lies outside
    // the destination.
    SmallVector<Value> extents;
    Value clipped = apart, leadIn = c1;
    for (int64_t d = 0; d < lead + rank; ++d) {
      clipped = both(clipped, cmp(arith::CmpIPredicate::sge, sOff[d], c0));
      Value left = arith::SubIOp::create(b, sv.sizes[d], sOff[d]);
      Value e = arith::MaxSIOp::create(
          b, arith::MinSIOp::create(b, left, cIdx(b, storeShape[d])), c0);
      if (d < lead)
        leadIn = arith::MulIOp::create(b, leadIn, e);
      else
        extents.push_back(e);
    }
    extents[0] = arith::MulIOp::create(b, extents[0], leadIn);
    for (int64_t d = 1; d < rank; ++d) {
      Value off = gOff[d - 1],
            last = arith::SubIOp::create(b, gv.sizes[d], extents[d]);
      clipped = both(both(clipped, cmp(arith::CmpIPredicate::sge, off, c0)),
                     both(cmp(arith::CmpIPredicate::sge, gv.sizes[d], extents[d]),
                          cmp(arith::CmpIPredicate::sle, off, last)));
    }
    ImplicitLocOpBuilder eb(store.getLoc(), ifOp.getElseBodyBuilder());
    auto clipIf = scf::IfOp::create(eb, TypeRange{}, clipped, /*withElse=*/true);
    general = clipIf.elseBlock();
    ImplicitLocOpBuilder cb(store.getLoc(), clipIf.getThenBodyBuilder());
    emitCopy(cb, extents, [&](ImplicitLocOpBuilder &pb) {
      // Per row: whole vectors, then the last partial one, masked.
      Value n = extents.back(), cW = cIdx(pb, width);
      Value whole = arith::MulIOp::create(pb, arith::DivUIOp::create(pb, n, cW), cW);
      Value rest = arith::SubIOp::create(pb, n, whole);
      SmallVector<Value> rows(extents);
      rows.back() = c1;
      forEachIndex(pb, rows, 1, [&](ImplicitLocOpBuilder &rb, ValueRange outer) {
        auto at = [&](Value col) {
          SmallVector<Value> idx(outer.begin(), outer.end());
          idx.back() = col;
          return idx;
        };
        scf::ForOp::create(rb, c0, whole, cW, ValueRange{},
                           [&](OpBuilder &lb, Location loc, Value j, ValueRange) {
                             ImplicitLocOpBuilder ib(loc, lb);
                             write(ib, at(j), read(ib, at(j), width), /*nontemporal=*/false);
                             scf::YieldOp::create(ib);
                           });
        Value partial = arith::CmpIOp::create(rb, arith::CmpIPredicate::ne, rest, c0);
        auto restIf = scf::IfOp::create(rb, TypeRange{}, partial, /*withElse=*/false);
        ImplicitLocOpBuilder tb(store.getLoc(), restIf.getThenBodyBuilder());
        Value mask = vector::CreateMaskOp::create(
            tb, VectorType::get({width}, tb.getI1Type()), ValueRange{rest});
        vector::MaskedStoreOp::create(tb, sv.unitMemref, destination(tb, at(whole)), mask,
                                      readLanes(tb, at(whole), width, mask));
      });
    });
  }
  // Otherwise: the general gather into a tile buffer, then the general store,
  // both emitted inside the else branch (the ops move there to anchor them).
  Operation *elseYield = general->getTerminator();
  gather->moveBefore(elseYield);
  if (reshape)
    reshape->moveBefore(elseYield);
  store->moveBefore(elseYield);
  Value buf = allocTile(type, gather.getLoc());
  buffers[gather.getResult()] = buf;
  toErase.push_back(store);
  if (failed(lowerViewAccess(gather, gather.getView(), gather.getIndices(),
                             gOff, buf, type, gather.getPaddingAttr(),
                             /*isStore=*/false)))
    return failure();
  if (reshape && failed(lowerReshape(reshape)))
    return failure();
  auto stored = bufferOf(store.getValue(), store);
  if (failed(stored))
    return failure();
  if (failed(lowerViewAccess(store, store.getView(), Value(), sOff, *stored,
                             store.getValue().getType(), Attribute(),
                             /*isStore=*/true)))
    return failure();
  // SIMT: the fast path read the index tile from shared memory with no
  // barrier after it.
  if (simt)
    unsyncedReads = true;
  return success();
}

//===----------------------------------------------------------------------===//
// Dispatch
//===----------------------------------------------------------------------===//

LogicalResult KernelLowering::lowerBlock(Block &block) {
  if (!simt) {
    sinkRegisterLoops(block);
    for (Operation &op : llvm::make_early_inc_range(block))
      if (failed(lowerOp(&op)))
        return failure();
    return success();
  }
  // SIMT mode: a block of an op with regions starts in the state the op
  // began in (its regions are alternatives or iterations, not a sequence).
  if (!regionFrames.empty())
    unsyncedReads = regionFrames.back().entry;
  auto writesTiles = [](Operation &op) {
    return llvm::any_of(op.getResults(), isTile) ||
           (op.getNumRegions() > 0 && llvm::any_of(op.getOperands(), isTile));
  };
  // A loop body whose first tile write is a pipelined load starts each
  // iteration with that load's barrier (lowerPipelinedAccess): reads left
  // unsynced at its end need no barrier of their own on the back edge.
  bool entryBarrier = false;
  for (Operation &op : block)
    if (op.getNumRegions() > 0 || writesTiles(op)) {
      entryBarrier = pipelinedLoads.count(&op);
      break;
    }
  for (Operation &op : llvm::make_early_inc_range(block)) {
    if (unsyncedReads && writesTiles(op)) {
      ImplicitLocOpBuilder b(op.getLoc(), &op);
      barrier(b);
    }
    bool nested = op.getNumRegions() > 0;
    if (nested)
      regionFrames.push_back({unsyncedReads});
    LogicalResult result = lowerOp(&op);
    if (nested) {
      RegionFrame frame = regionFrames.pop_back_val();
      unsyncedReads = frame.entry || frame.exit;
    }
    if (failed(result))
      return failure();
  }
  // A deferred issue no wgmma group took (lowerPipelinedAccess): here, once.
  if (deferredIssue && deferredBlock == &block && !block.empty() &&
      block.back().hasTrait<OpTrait::IsTerminator>()) {
    ImplicitLocOpBuilder b(block.back().getLoc(), &block.back());
    flushDeferredIssue(b);
  }
  // The next iteration may overwrite what this one read.
  Operation *parent = block.getParentOp();
  if (unsyncedReads && !entryBarrier && parent &&
      isa<LoopLikeOpInterface, scf::WhileOp>(parent) &&
      !block.empty() && block.back().hasTrait<OpTrait::IsTerminator>()) {
    ImplicitLocOpBuilder b(block.back().getLoc(), &block.back());
    barrier(b);
  }
  if (!regionFrames.empty())
    regionFrames.back().exit |= unsyncedReads;
  return success();
}

LogicalResult KernelLowering::lowerOp(Operation *op) {
  Location loc = op->getLoc();
  llvm::SaveAndRestore<Operation *> lowering(current, op);

  // Terminators carrying tiles are rewritten by their parent's lowering.
  if (isa<scf::YieldOp, scf::ConditionOp>(op))
    return success();
  // Computed and stored with its register loop (lowerRegisterLoop).
  if (fusedEpilogue.contains(op))
    return success();
  // Only a pipelined gather's index tile reads it: evaluated at issue.
  if (issuedIndexOps.contains(op)) {
    toErase.push_back(op);
    return success();
  }
  if (auto pid = dyn_cast<ProgramIdOp>(op)) {
    pid.getResult().replaceAllUsesWith(grid[static_cast<int>(pid.getAxis())]);
    toErase.push_back(op);
    return success();
  }
  if (auto np = dyn_cast<NumProgramsOp>(op)) {
    np.getResult().replaceAllUsesWith(
        grid[3 + static_cast<int>(np.getAxis())]);
    toErase.push_back(op);
    return success();
  }
  if (auto ip = dyn_cast<IntToPtrOp>(op)) {
    // The memref kernel pointer arguments have: memref<?xT> on the CPU, the
    // bare memref<1xT> in SIMT mode (make_view reinterprets either).
    ImplicitLocOpBuilder b(loc, op);
    Type elt = storageType(ip.getResult().getType().getElementType());
    auto type = MemRefType::get({simt ? 1 : ShapedType::kDynamic}, elt);
    Value ptr = LLVM::IntToPtrOp::create(
        b, LLVM::LLVMPointerType::get(b.getContext()), ip.getAddr());
    ip.getResult().replaceAllUsesWith(memrefOverPointer(b, loc, ptr, type));
    toErase.push_back(op);
    return success();
  }
  if (auto mv = dyn_cast<MakeViewOp>(op))
    return lowerMakeView(mv);
  if (simt)
    if (auto it = registerRowScales.find(op); it != registerRowScales.end())
      return lowerRegisterRowScale(op, it->second);
  if (auto load = dyn_cast<LoadOp>(op)) {
    if (auto it = pipelinedLoads.find(op); it != pipelinedLoads.end())
      return lowerPipelinedAccess(load, *it->second);
    if (directDotOperand(op))
      return success(); // lowered by its dot (lowerDot)
    Value buf = allocLoadTile(load);
    // sm_90a: a wgmma operand of 128-byte rows loaded outside any pipelined
    // loop (attention's q) takes the 128B swizzle too, written by cp.async
    // chunks at their swizzled places (emitTileLoadSimt): wgmma reads it
    // as it reads the pipelined stages.
    if (simt && simt->swizzle && simt->asyncCopy && isCoreBuffer(buf) &&
        asyncChunk(load.getResult().getType()) == 16 &&
        swizzleCandidate(*simt, load)) {
      swizzledBuffers.insert(buf);
      simt->bufferAlign[buf.getDefiningOp<memref::ReinterpretCastOp>()
                            .getSource()
                            .getDefiningOp()] = 1024;
    }
    buffers[load.getResult()] = buf;
    toErase.push_back(op);
    return lowerViewAccess(op, load.getView(), Value(), load.getOffsets(), buf,
                           load.getResult().getType(),
                           load.getPaddingAttr(), /*isStore=*/false);
  }
  if (auto gather = dyn_cast<GatherOp>(op)) {
    if (auto it = pipelinedLoads.find(op); it != pipelinedLoads.end())
      return lowerPipelinedAccess(gather, *it->second);
    if (canFuseGatherStore(gather)) {
      fusedGathers.insert(op);
      toErase.push_back(op);
      return success();
    }
    Value buf = allocLoadTile(gather);
    buffers[gather.getResult()] = buf;
    toErase.push_back(op);
    return lowerViewAccess(op, gather.getView(), gather.getIndices(),
                           gather.getOffsets(), buf,
                           gather.getResult().getType(),
                           gather.getPaddingAttr(), /*isStore=*/false);
  }
  if (auto store = dyn_cast<StoreOp>(op)) {
    Operation *def = store.getValue().getDefiningOp();
    Operation *reshape = nullptr;
    if (def && isa<ReshapeOp, ExpandDimsOp>(def)) {
      reshape = def;
      def = def->getOperand(0).getDefiningOp();
    }
    if (auto gather = dyn_cast_or_null<GatherOp>(def);
        gather && fusedGathers.contains(gather))
      return lowerGatherStore(gather, reshape, store);
    toErase.push_back(op);
    // A deferred value: computed as it is stored (canDefer).
    if (Operation *value = store.getValue().getDefiningOp(); value && deferred.contains(value))
      return lowerViewAccess(op, store.getView(), Value(), store.getOffsets(), Value(),
                             store.getValue().getType(), Attribute(), /*isStore=*/true,
                             store.getValue());
    auto buf = bufferOf(store.getValue(), op);
    if (failed(buf))
      return failure();
    return lowerViewAccess(op, store.getView(), Value(), store.getOffsets(),
                           *buf, store.getValue().getType(), Attribute(),
                           /*isStore=*/true);
  }
  if (auto scatter = dyn_cast<ScatterOp>(op)) {
    auto buf = bufferOf(scatter.getValue(), op);
    if (failed(buf))
      return failure();
    toErase.push_back(op);
    return lowerViewAccess(op, scatter.getView(), scatter.getIndices(),
                           scatter.getOffsets(), *buf,
                           scatter.getValue().getType(), Attribute(),
                           /*isStore=*/true);
  }
  if (auto add = dyn_cast<AtomicAddOp>(op))
    return lowerAtomicAdd(op, add.getValue(), add.getView(), Value(),
                          add.getOffsets(), add.getOld());
  if (auto add = dyn_cast<ScatterAddOp>(op))
    return lowerAtomicAdd(op, add.getValue(), add.getView(), add.getIndices(),
                          add.getOffsets(), add.getOld());
  if (auto rmw = dyn_cast<AtomicRMWOp>(op))
    return lowerAtomicAdd(op, rmw.getValue(), rmw.getView(), Value(),
                          rmw.getOffsets(), rmw.getOld(), rmw.getKind());
  if (auto cas = dyn_cast<AtomicCASOp>(op))
    return lowerAtomicAdd(op, cas.getValue(), cas.getView(), Value(),
                          cas.getOffsets(), cas.getOld(), AtomicKind::xchg,
                          cas.getCmp());
  if (auto rmw = dyn_cast<ScatterRMWOp>(op))
    return lowerAtomicAdd(op, rmw.getValue(), rmw.getView(), rmw.getIndices(),
                          rmw.getOffsets(), rmw.getOld(), rmw.getKind());
  if (auto as = dyn_cast<AssertOp>(op))
    return lowerAssert(as);
  if (auto pr = dyn_cast<PrintOp>(op))
    return lowerPrint(pr);
  if (auto clk = dyn_cast<ClockOp>(op))
    return lowerClock(clk);
  if (auto pid = dyn_cast<ProcessorIdOp>(op))
    return lowerProcessorId(pid);
  if (auto dot = dyn_cast<DotOp>(op))
    return lowerDot(dot);
  if (auto red = dyn_cast<ReduceOp>(op))
    return lowerReduce(red);
  if (auto scan = dyn_cast<ScanOp>(op))
    return lowerScan(scan);
  if (auto forOp = dyn_cast<scf::ForOp>(op))
    return lowerFor(forOp);
  if (auto ifOp = dyn_cast<scf::IfOp>(op))
    return lowerIf(ifOp);
  if (auto whileOp = dyn_cast<scf::WhileOp>(op))
    return lowerWhile(whileOp);

  if (canDefer(op)) {
    deferred.insert(op);
    toErase.push_back(op);
    return success();
  }
  if (auto splat = dyn_cast<SplatOp>(op)) {
    auto type = splat.getResult().getType();
    Value buf = allocTile(type, loc);
    ImplicitLocOpBuilder b(loc, op);
    int64_t w = vectorWidth({type.getElementType()}, type.getShape().back());
    Value v = splat.getValue();
    if (w > 1)
      v = vector::BroadcastOp::create(
          b, VectorType::get({w}, type.getElementType()), v);
    forEachIndex(b, type.getShape(), w, [&](ImplicitLocOpBuilder &ib,
                                            ValueRange idx) {
      storeElems(ib, v, buf, idx, w);
    });
    buffers[splat.getResult()] = buf;
    toErase.push_back(op);
    return success();
  }
  if (auto cst = dyn_cast<arith::ConstantOp>(op)) {
    auto type = dyn_cast<RankedTensorType>(cst.getType());
    if (!type)
      return success();
    auto splat = dyn_cast<SplatElementsAttr>(cst.getValue());
    if (!splat)
      return op->emitError(who() + ": only splat tile constants are "
                           "supported; build other constant tiles with "
                           "kiln.arange and arithmetic");
    // Filled only when something reads a buffer (bufferOf): expressions
    // use the value itself (emitElems), dots and loops a splat as such.
    toErase.push_back(op);
    return success();
  }
  if (auto ar = dyn_cast<ArangeOp>(op)) {
    auto type = ar.getResult().getType();
    Value buf = allocTile(type, loc);
    ImplicitLocOpBuilder b(loc, op);
    Type elt = type.getElementType();
    forEachIndex(b, type.getShape(), 1, [&](ImplicitLocOpBuilder &ib,
                                            ValueRange idx) {
      Value i = arith::IndexCastOp::create(ib, elt, idx[0]);
      Value s = arith::ConstantIntOp::create(ib, elt, ar.getStart());
      storeElems(ib, arith::AddIOp::create(ib, i, s), buf, idx, 1);
    });
    buffers[ar.getResult()] = buf;
    toErase.push_back(op);
    return success();
  }
  if (auto bc = dyn_cast<BroadcastOp>(op)) {
    auto srcType = bc.getSrc().getType();
    auto type = bc.getResult().getType();
    auto src = bufferOf(bc.getSrc(), op);
    if (failed(src))
      return failure();
    Value buf = allocTile(type, loc);
    ImplicitLocOpBuilder b(loc, op);
    bool innerBroadcast = srcType.getShape().back() != type.getShape().back();
    int64_t w = vectorWidth({type.getElementType()}, type.getShape().back());
    Value c0 = arith::ConstantIndexOp::create(b, 0);
    forEachIndex(b, type.getShape(), w, [&](ImplicitLocOpBuilder &ib,
                                            ValueRange idx) {
      SmallVector<Value> sidx;
      for (auto [d, iv] : llvm::enumerate(idx))
        sidx.push_back(srcType.getDimSize(d) == type.getDimSize(d) ? iv : c0);
      Value v;
      if (innerBroadcast) {
        v = loadElems(ib, *src, sidx, type.getElementType(), 1);
        if (w > 1)
          v = vector::BroadcastOp::create(
              ib, VectorType::get({w}, type.getElementType()), v);
      } else {
        v = loadElems(ib, *src, sidx, type.getElementType(), w);
      }
      storeElems(ib, v, buf, idx, w);
    });
    buffers[bc.getResult()] = buf;
    toErase.push_back(op);
    return success();
  }
  if (deferredDotLoads.contains(op))
    return success(); // a reshape of a dot's deferred operand (lowerDot)
  if (isa<ExpandDimsOp, ReshapeOp>(op)) {
    if (auto gather = op->getOperand(0).getDefiningOp<GatherOp>();
        gather && fusedGathers.contains(gather))
      return success(); // lowered with its store (lowerGatherStore)
    // Between a deferred op and the store that computes it (canDefer).
    Operation *src = op->getOperand(0).getDefiningOp();
    if (src && deferred.contains(src) && storesElements(op, op->getOperand(0))) {
      deferred.insert(op);
      toErase.push_back(op);
      return success();
    }
    return lowerReshape(op);
  }
  if (auto tr = dyn_cast<TransOp>(op)) {
    auto type = tr.getResult().getType();
    // (The source may be a load deferred to the transpose: emitOnTile.)
    auto src = deferredSource(tr.getSrc()).first ? FailureOr<Value>(Value())
                                                 : bufferOf(tr.getSrc(), op);
    if (failed(src))
      return failure();
    if (simt && deferTransToTensorCores(tr, *src)) {
      buffers[tr.getResult()] = *src;
      deferredTrans.insert(tr.getResult());
      toErase.push_back(op);
      return success();
    }
    if (*src && dotNTOnly(tr)) {
      // Read in place by its dots (emitDotNT): no transpose.
      ntSources[tr.getResult()] = *src;
      toErase.push_back(op);
      return success();
    }
    if (ntInPlace.contains(tr)) {
      // Its source load deferred to its dot (directDotOperand).
      ntDeferred[tr.getResult()] = tr.getSrc();
      toErase.push_back(op);
      return success();
    }
    // (SIMT: a transpose that only dots read, a dot(trans(x), y)'s A,
    // is written in their operand layout: allocResultTile.)
    Value buf = simt ? allocResultTile(tr.getResult(), loc) : allocTile(type, loc);
    ImplicitLocOpBuilder b(loc, op);
    ArrayRef<int32_t> order = tr.getOrder();
    if (!simt && type.getRank() == 2 && order[0] == 1) {
      // A 2-D transpose in square blocks of w x w (w the vector width that
      // divides both dimensions): w row loads, log2(w) rounds of two-source
      // shuffles that swap the off-diagonal halves of ever smaller blocks,
      // w row stores. (Attention's q . k^T transposes a key tile per step.)
      int64_t rows = type.getDimSize(0), cols = type.getDimSize(1);
      int64_t w = vectorWidth({type.getElementType()}, std::gcd(rows, cols));
      if (w >= 4) {
        Type st = storageType(type.getElementType());
        Value c0 = arith::ConstantIndexOp::create(b, 0);
        Value cw = arith::ConstantIndexOp::create(b, w);
        auto blockLoop = [&](ImplicitLocOpBuilder &lb, int64_t n,
                             function_ref<void(ImplicitLocOpBuilder &, Value)> body) {
          scf::ForOp::create(lb, c0, arith::ConstantIndexOp::create(lb, n), cw,
                             ValueRange{},
                             [&](OpBuilder &ob, Location l, Value iv, ValueRange) {
                               ImplicitLocOpBuilder ib(l, ob);
                               body(ib, iv);
                               scf::YieldOp::create(ib);
                             });
        };
        // Block (p0, q0) of the source [cols, rows]: X[t][j] = src[p0 + t, q0 + j];
        // its transpose's row j goes to result[q0 + j, p0 .. p0 + w).
        auto emitBlocks = [&](ImplicitLocOpBuilder &b, TileReader readRow) {
        blockLoop(b, cols, [&](ImplicitLocOpBuilder &b1, Value p0) {
          blockLoop(b1, rows, [&](ImplicitLocOpBuilder &b2, Value q0) {
            SmallVector<Value> x;
            for (int64_t t = 0; t < w; ++t) {
              Value p = arith::AddIOp::create(b2, p0, arith::ConstantIndexOp::create(b2, t));
              x.push_back(readRow(b2, p, q0, st, w));
            }
            transposeBlock(b2, x);
            for (int64_t j = 0; j < w; ++j) {
              Value q = arith::AddIOp::create(b2, q0, arith::ConstantIndexOp::create(b2, j));
              storeElems(b2, x[j], buf, ValueRange{q, p0}, w);
            }
          });
        });
        };
        // (A source loaded for the transpose alone is read from its view
        // when interior: attention's key tile, no copy first.)
        if (failed(emitOnTile(b, tr.getSrc(), op, emitBlocks)))
          return failure();
        buffers[tr.getResult()] = buf;
        toErase.push_back(op);
        return success();
      }
    }
    int64_t bits = storageType(type.getElementType()).getIntOrFloatBitWidth();
    if (simt && *src && type.getRank() == 2 && order[0] == 1 && bits == 8 &&
        type.getDimSize(0) % 4 == 0 && type.getDimSize(1) % 4 == 0) {
      // 8-bit elements (an N-major fp8 / int8 B copied K-major for the
      // tensor cores, transposeNMajorBytes): a 4 x 4 block of bytes per
      // thread, read as four words of source rows and written as four words
      // of result rows after two rounds of byte shuffles, where one byte per
      // access went before. Consecutive threads take consecutive blocks
      // along the source's rows, so a warp's reads are whole 128-byte lines.
      int64_t rows = type.getDimSize(0), cols = type.getDimSize(1), w = 4;
      Type elt = type.getElementType();
      forEachIndexSimt(b, {cols / w, rows / w}, [&](ImplicitLocOpBuilder &ib,
                                                    ValueRange blk) {
        Value p0 = arith::MulIOp::create(ib, blk[0], cIdx(ib, w));
        Value q0 = arith::MulIOp::create(ib, blk[1], cIdx(ib, w));
        SmallVector<Value> x;
        for (int64_t t = 0; t < w; ++t)
          x.push_back(loadElems(ib, *src, ValueRange{arith::AddIOp::create(ib, p0, cIdx(ib, t)), q0},
                                elt, w));
        transposeBlock(ib, x);
        for (int64_t j = 0; j < w; ++j)
          storeElems(ib, x[j], buf, ValueRange{arith::AddIOp::create(ib, q0, cIdx(ib, j)), p0},
                     w);
      });
    } else {
      forEachIndex(b, type.getShape(), 1, [&](ImplicitLocOpBuilder &ib,
                                              ValueRange idx) {
        SmallVector<Value> sidx(idx.size());
        for (auto [i, d] : llvm::enumerate(order))
          sidx[d] = idx[i];
        Value v = loadElems(ib, *src, sidx, type.getElementType(), 1);
        storeElems(ib, v, buf, idx, 1);
      });
    }
    fenceCoreWrites(b, {buf});
    buffers[tr.getResult()] = buf;
    toErase.push_back(op);
    return success();
  }
  if (auto ge = dyn_cast<GatherElementsOp>(op)) {
    // Per result element: the index, checked against the axis (outside it
    // reads zero), then the source element there.
    auto type = ge.getResult().getType();
    auto src = bufferOf(ge.getSrc(), op);
    if (failed(src))
      return failure();
    auto idxBuf = bufferOf(ge.getIndices(), op);
    if (failed(idxBuf))
      return failure();
    Value buf = allocTile(type, loc);
    ImplicitLocOpBuilder b(loc, op);
    int64_t axis = ge.getAxis();
    Type ielt = ge.getIndices().getType().getElementType();
    Type elt = type.getElementType();
    Value size = arith::ConstantIndexOp::create(
        b, ge.getSrc().getType().getDimSize(axis));
    Value c0 = arith::ConstantIndexOp::create(b, 0);
    Value zero = arith::ConstantOp::create(
        b, cast<TypedAttr>(b.getZeroAttr(elt)));
    forEachIndex(b, type.getShape(), 1, [&](ImplicitLocOpBuilder &ib,
                                            ValueRange idx) {
      Value i = arith::IndexCastOp::create(
          ib, ib.getIndexType(), loadElems(ib, *idxBuf, idx, ielt, 1));
      // (Unsigned: a negative index is out of range too.)
      Value ok = arith::CmpIOp::create(ib, arith::CmpIPredicate::ult, i, size);
      SmallVector<Value> sidx(idx.begin(), idx.end());
      sidx[axis] = arith::SelectOp::create(ib, ok, i, c0);
      Value v = loadElems(ib, *src, sidx, elt, 1);
      storeElems(ib, arith::SelectOp::create(ib, ok, v, zero), buf, idx, 1);
    });
    buffers[ge.getResult()] = buf;
    toErase.push_back(op);
    return success();
  }
  if (auto sl = dyn_cast<tensor::ExtractSliceOp>(op)) {
    // A block of the source tile: on a GPU a view of the source's buffer
    // when only tensor-core dots read it (DSA's values, the first d_v
    // columns of the gathered key rows), else a copy.
    if (!isTileSlice(sl))
      return op->emitError(who() + ": a tile slice needs static offsets and "
                           "sizes, unit strides and the source's rank (reshape "
                           "the result to drop dimensions)");
    auto src = bufferOf(sl.getSource(), op);
    if (failed(src))
      return failure();
    // CPU: read by dots only (as A or B, not accumulated into), the slice
    // is a view of the source's buffer (the dots read any strides; every
    // tile has its own buffer here, so nothing reuses the source's bytes).
    if (!simt && onlyDotOperands(sl.getResult())) {
      ImplicitLocOpBuilder b(loc, op);
      SmallVector<int64_t> unit(sl.getResultType().getRank(), 1);
      buffers[sl.getResult()] = memref::SubViewOp::create(
          b, *src, sl.getStaticOffsets(), sl.getStaticSizes(), unit);
      toErase.push_back(op);
      return success();
    }
    if (simt)
      if (Value view = deferSliceToTensorCores(sl, *src)) {
        if (pipelinedBuffers.count(*src))
          pipelinedBuffers.insert(view);
        buffers[sl.getResult()] = view;
        toErase.push_back(op);
        return success();
      }
    auto type = sl.getResultType();
    Value buf = allocResultTile(sl.getResult(), loc);
    ImplicitLocOpBuilder b(loc, op);
    ArrayRef<int64_t> off = sl.getStaticOffsets();
    int64_t w = vectorWidth({type.getElementType()}, type.getShape().back());
    Type stored = storageType(type.getElementType());
    forEachIndex(b, type.getShape(), w, [&](ImplicitLocOpBuilder &ib,
                                            ValueRange idx) {
      SmallVector<Value> sidx;
      for (auto [d, i] : llvm::enumerate(idx))
        sidx.push_back(off[d] ? arith::AddIOp::create(
                                    ib, i, arith::ConstantIndexOp::create(ib, off[d]))
                              : i);
      // (The source may be a wgmma core-matrix buffer: loadElems maps.)
      Value v = loadElems(ib, *src, sidx, stored, w);
      storeElems(ib, v, buf, idx, w);
    });
    fenceCoreWrites(b, {buf});
    buffers[sl.getResult()] = buf;
    toErase.push_back(op);
    return success();
  }
  if (auto ex = dyn_cast<tensor::ExtractOp>(op)) {
    // (A constant index outside the tile read another buffer's bytes.)
    for (auto [d, i] : llvm::enumerate(ex.getIndices())) {
      int64_t size = ex.getTensor().getType().getDimSize(d);
      std::optional<int64_t> c = getConstantIntValue(i);
      if (c && (*c < 0 || *c >= size))
        return op->emitError(who() + ": index " + std::to_string(*c) + " is outside dimension " +
                             std::to_string(d) + " of the tile (size " + std::to_string(size) +
                             ")");
    }
    auto src = bufferOf(ex.getTensor(), op);
    if (failed(src))
      return failure();
    ImplicitLocOpBuilder b(loc, op);
    // A computed index outside the tile fails the launch, as a kiln.assert
    // would (it read another buffer's bytes); the element read is then at
    // index 0, never outside.
    SmallVector<Value> at;
    Value inside;
    for (auto [d, i] : llvm::enumerate(ex.getIndices())) {
      if (getConstantIntValue(i)) {
        at.push_back(i);
        continue;
      }
      Value ok = inRange(b, i, cIdx(b, ex.getTensor().getType().getDimSize(d)));
      inside = inside ? arith::AndIOp::create(b, inside, ok).getResult() : ok;
      at.push_back(arith::SelectOp::create(b, ok, i, cIdx(b, 0)));
    }
    if (inside)
      failUnless(b, inside, "tensor.extract: index outside the tile", op);
    Value v = loadElems(b, *src, at, ex.getType(), 1);
    ex.getResult().replaceAllUsesWith(v);
    // (A pipelined stage is rewritten only after the next iteration's first
    // barrier: reading it needs none of its own.)
    if (simt && !pipelinedBuffers.count(*src))
      unsyncedReads = true;
    toErase.push_back(op);
    return success();
  }
  bool touchesTiles = llvm::any_of(op->getOperands(), isTile) ||
                      llvm::any_of(op->getResults(), isTile);
  if (touchesTiles && op->hasTrait<OpTrait::Elementwise>() &&
      op->getNumRegions() == 0 && op->getNumResults() >= 1 &&
      llvm::all_of(op->getResults(), isTile))
    return lowerElementwise(op);
  if (touchesTiles)
    return op->emitError(who() + ": '")
           << op->getName() << "' on tiles is not supported by the " << target()
           << " target";
  return lowerRegions(op);
}

LogicalResult KernelLowering::lowerRegions(Operation *op) {
  // A wait inside a region may not run: it retires nothing out here.
  llvm::SaveAndRestore<bool> pending(wgmmaPending);
  for (Region &r : op->getRegions())
    for (Block &blk : r)
      if (failed(lowerBlock(blk)))
        return failure();
  return success();
}

LogicalResult KernelLowering::run(Block &body, ArrayRef<Value> gridArgs) {
  grid.assign(gridArgs.begin(), gridArgs.end());
  if (failed(lowerBlock(body)))
    return failure();
  // Erase the lowered ops, users first. Tile values have no users left but
  // other lowered ops, which are erased before them.
  // Drop every operand first: a moved loop body still refers to the old
  // loop's block arguments until the old loop is gone.
  for (Operation *op : toErase)
    op->dropAllReferences();
  for (Operation *op : llvm::reverse(toErase)) {
    op->dropAllUses();
    op->erase();
  }
  return success();
}

std::tuple<SmallVector<Value>, SmallVector<Value>, Value>
gatherStoreAt(ImplicitLocOpBuilder &b, const ViewInfo &gv, Value row,
              ValueRange idx, ValueRange gOff, ValueRange sOff, int64_t lead) {
  int64_t rank = idx.size();
  SmallVector<Value> src{row}, dst;
  for (int64_t d = 1; d < rank; ++d)
    src.push_back(arith::AddIOp::create(b, gOff[d - 1], idx[d]));
  for (int64_t d = 0; d < lead; ++d)
    dst.push_back(sOff[d]);
  for (int64_t d = 0; d < rank; ++d)
    dst.push_back(arith::AddIOp::create(b, sOff[lead + d], idx[d]));
  return {src, dst, inRange(b, row, gv.sizes[0])};
}

Value viewIndexAt(ImplicitLocOpBuilder &b, Value idxBuf, ValueRange offsets,
                  int64_t d, Value iv) {
  if (idxBuf && d == 0) {
    Value raw = memref::LoadOp::create(b, idxBuf, ValueRange{iv});
    return arith::IndexCastOp::create(b, b.getIndexType(), raw);
  }
  return arith::AddIOp::create(b, offsets[idxBuf ? d - 1 : d], iv);
}

LogicalResult checkTileSizes(Operation *kernel, bool gpu) {
  constexpr uint64_t kMaxElements = uint64_t(1) << 31;
  auto tooLarge = [&](Type type) {
    auto t = dyn_cast<RankedTensorType>(type);
    if (!t)
      return false;
    uint64_t n = 1;
    for (int64_t d : t.getShape()) {
      if (d < 0 || uint64_t(d) > kMaxElements)
        return true;
      n *= uint64_t(d); // both factors <= 2^31: no overflow before the check
      if (n > kMaxElements)
        return true;
    }
    return false;
  };
  auto rank0 = [](Type type) {
    auto t = dyn_cast<RankedTensorType>(type);
    return t && t.getRank() == 0;
  };
  // Tiles of index have no storage size; on a GPU, values (tiles or
  // scalars) wider than 64 bits have no arithmetic (NVPTX aborts on f80 and
  // f128 in instruction selection).
  auto badElements = [&](Type type) -> std::optional<std::string> {
    auto tile = dyn_cast<RankedTensorType>(type);
    Type e = tile ? tile.getElementType() : type;
    if (tile && e.isIndex())
      return std::string("tiles of index are not supported (use i32 or i64)");
    if (gpu && e.isIntOrFloat() && e.getIntOrFloatBitWidth() > 64)
      return (tile ? "tiles of " : "") + std::to_string(e.getIntOrFloatBitWidth()) +
             (tile ? "-bit elements" : "-bit values") +
             " are not supported on a GPU (64 bits at most)";
    return std::nullopt;
  };
  WalkResult walk = kernel->walk([&](Operation *op) {
    SmallVector<Type> types(op->getResultTypes());
    for (Region &r : op->getRegions())
      for (Block &blk : r)
        llvm::append_range(types, blk.getArgumentTypes());
    for (Type t : types) {
      if (auto why = badElements(t)) {
        op->emitError(*why);
        return WalkResult::interrupt();
      }
      if (rank0(t)) {
        // (Every tile loop nest walks a last dimension.)
        op->emitError("rank-0 tiles (")
            << t << ") are not supported; use a scalar or a 1-element tile";
        return WalkResult::interrupt();
      }
      if (tooLarge(t)) {
        op->emitError("a tile of type ") << t << " has more than 2^31 elements; use smaller tiles";
        return WalkResult::interrupt();
      }
    }
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

TypedAttr paddingAttr(Builder &b, Attribute padding, Type storage) {
  TypedAttr padAttr = dyn_cast_or_null<TypedAttr>(padding);
  if (!padAttr)
    padAttr = cast<TypedAttr>(b.getZeroAttr(storage));
  return storagePadding(padAttr);
}

/// A rank-1 memref over a raw pointer (!llvm.ptr). Kernels only
/// reinterpret its base, so its size and stride are nominal.
Value memrefOverPointer(OpBuilder &b, Location loc, Value ptr,
                        MemRefType type) {
  MLIRContext *ctx = b.getContext();
  auto ptrType = LLVM::LLVMPointerType::get(ctx);
  auto i64 = b.getI64Type();
  auto arrTy = LLVM::LLVMArrayType::get(i64, 1);
  auto descTy =
      LLVM::LLVMStructType::getLiteral(ctx, {ptrType, ptrType, i64, arrTy, arrTy});
  Value d = LLVM::UndefOp::create(b, loc, descTy);
  Value zero = LLVM::ConstantOp::create(b, loc, i64, 0);
  Value one = LLVM::ConstantOp::create(b, loc, i64, 1);
  d = LLVM::InsertValueOp::create(b, loc, d, ptr, ArrayRef<int64_t>{0});
  d = LLVM::InsertValueOp::create(b, loc, d, ptr, ArrayRef<int64_t>{1});
  d = LLVM::InsertValueOp::create(b, loc, d, zero, ArrayRef<int64_t>{2});
  d = LLVM::InsertValueOp::create(b, loc, d, zero, ArrayRef<int64_t>{3, 0});
  d = LLVM::InsertValueOp::create(b, loc, d, one, ArrayRef<int64_t>{4, 0});
  return UnrealizedConversionCastOp::create(b, loc, TypeRange{type}, d)
      .getResult(0);
}

/// The CPU launch ABI around `bodyFunc` (user arguments, then pid x3 and
/// grid x3 as i32): void NAME(void **args, i32 pid x3, i32 grid x3), where
/// args[i] points at the value of user argument i (for pointers, at the
/// pointer).
func::FuncOp buildLaunchEntry(OpBuilder &b, Location loc, StringRef name,
                              func::FuncOp bodyFunc, size_t numUser) {
  MLIRContext *ctx = b.getContext();
  auto ptrType = LLVM::LLVMPointerType::get(ctx);
  SmallVector<Type> entryArgs{ptrType};
  for (int i = 0; i < 6; ++i)
    entryArgs.push_back(b.getI32Type());
  auto entryFunc =
      func::FuncOp::create(b, loc, name, b.getFunctionType(entryArgs, {}));
  Block *eb = entryFunc.addEntryBlock();
  OpBuilder e = OpBuilder::atBlockBegin(eb);
  Value argv = eb->getArgument(0);
  SmallVector<Value> callArgs;
  auto i64 = e.getI64Type();
  for (size_t i = 0; i < numUser; ++i) {
    Value slot = LLVM::GEPOp::create(e, loc, ptrType, ptrType, argv,
                                     ArrayRef<LLVM::GEPArg>{int32_t(i)});
    Value p = LLVM::LoadOp::create(e, loc, ptrType, slot);
    Type t = bodyFunc.getArgumentTypes()[i];
    if (auto mt = dyn_cast<MemRefType>(t)) {
      callArgs.push_back(memrefOverPointer(
          e, loc, LLVM::LoadOp::create(e, loc, ptrType, p), mt));
    } else if (t.isIndex()) {
      Value v = LLVM::LoadOp::create(e, loc, i64, p);
      callArgs.push_back(arith::IndexCastOp::create(e, loc, t, v));
    } else {
      callArgs.push_back(LLVM::LoadOp::create(e, loc, t, p));
    }
  }
  for (int i = 1; i <= 6; ++i)
    callArgs.push_back(eb->getArgument(i));
  func::CallOp::create(e, loc, bodyFunc, callArgs);
  func::ReturnOp::create(e, loc);
  return entryFunc;
}

} // namespace mlir::kiln::detail

namespace {
using namespace mlir::kiln::detail;

//===----------------------------------------------------------------------===//
// Kernel signature and the launch entry
//===----------------------------------------------------------------------===//

/// Converts one kiln.func into the kernel body and its launch entry.
LogicalResult lowerKernel(FuncOp kernel, unsigned vectorBits, bool bf16Dot) {
  OpBuilder b(kernel);
  Location loc = kernel.getLoc();
  SmallVector<Type> argTypes;
  SmallVector<Attribute> signature;
  for (auto [i, t] : llvm::enumerate(kernel.getArgumentTypes())) {
    std::string name = "arg" + std::to_string(i);
    if (auto ptr = dyn_cast<PtrType>(t)) {
      argTypes.push_back(MemRefType::get({ShapedType::kDynamic},
                                         storageType(ptr.getElementType())));
      std::string dt = runtimeDTypeName(ptr.getElementType());
      if (dt.empty())
        return kernel.emitError("kiln CPU lowering: unsupported pointee type ")
               << ptr.getElementType();
      signature.push_back(b.getStringAttr("ptr " + dt));
    } else {
      argTypes.push_back(t);
      std::string dt = runtimeDTypeName(t);
      if (dt.empty())
        return kernel.emitError("kiln CPU lowering: unsupported scalar "
                                "argument type ")
               << t;
      signature.push_back(b.getStringAttr("scalar " + dt));
    }
  }
  size_t numUser = argTypes.size();
  for (int i = 0; i < 6; ++i)
    argTypes.push_back(b.getI32Type());
  auto bodyFunc = func::FuncOp::create(b, loc, kernel.getSymName(),
                                       b.getFunctionType(argTypes, {}));
  bodyFunc.setPrivate();
  bodyFunc->setAttr("kiln.signature", b.getArrayAttr(signature));
  bodyFunc->setAttr("kiln.grid_rank", b.getI64IntegerAttr(kernel.getGridRank()));
  if (kernel.isExternal())
    return kernel.emitError("kiln CPU lowering: kernel has no body");

  // Move the body; retype pointer arguments to memrefs (their only users,
  // kiln.make_view, are lowered to reinterpret casts of them).
  Region &body = bodyFunc.getBody();
  body.takeBody(kernel.getBody());
  Block &entry = body.front();
  for (auto [i, arg] : llvm::enumerate(entry.getArguments()))
    arg.setType(argTypes[i]);
  SmallVector<Value> gridArgs;
  for (int i = 0; i < 6; ++i)
    gridArgs.push_back(entry.addArgument(b.getI32Type(), loc));
  // kiln.return becomes func.return.
  bodyFunc.walk([&](ReturnOp ret) {
    OpBuilder rb(ret);
    func::ReturnOp::create(rb, ret.getLoc());
    ret.erase();
  });
  expandFp8Dots(bodyFunc, /*simt=*/nullptr);
  KernelLowering lowering(bodyFunc, vectorBits);
  lowering.setBF16Dot(bf16Dot);
  if (failed(lowering.run(entry, gridArgs)))
    return failure();
  // Tile buffers live in the stack frame of the thread that runs a program
  // (a runtime worker or the launching thread, typically 8 MiB stacks).
  // Refuse kernels whose tiles would overflow it instead of crashing at launch.
  int64_t scratchBytes = 0;
  bodyFunc.walk([&](memref::AllocaOp alloca) {
    MemRefType t = alloca.getType();
    if (t.hasStaticShape())
      scratchBytes += t.getNumElements() *
                      std::max<int64_t>(1, t.getElementTypeBitWidth() / 8);
  });
  if (scratchBytes > kMaxProgramScratchBytes)
    return emitError(kernel.getLoc())
           << "kernel '" << kernel.getSymName() << "' needs "
           << (scratchBytes + 1023) / 1024
           << " KiB of tile buffers per program; the CPU target allows "
           << kMaxProgramScratchBytes / 1024
           << " KiB (tiles live on the stack of the thread running the "
              "program): use smaller tiles";

  // The launch entry: void kiln_entry_NAME(void **args, i32 pid x3, grid x3).
  auto entryFunc = buildLaunchEntry(
      b, loc, ("kiln_entry_" + kernel.getSymName()).str(), bodyFunc, numUser);
  entryFunc->setAttr("kiln.kernel", b.getStringAttr(kernel.getSymName()));
  kernel.erase();
  return success();
}

struct ConvertKilnToCPUPass
    : kiln::impl::ConvertKilnToCPUBase<ConvertKilnToCPUPass> {
  using Base::Base;
  void runOnOperation() override {
    SmallVector<FuncOp> kernels;
    getOperation().walk([&](FuncOp f) { kernels.push_back(f); });
    for (FuncOp k : kernels)
      if (failed(checkTileSizes(k, /*gpu=*/false)) || failed(lowerKernel(k, vectorBits, bf16Dot)))
        return signalPassFailure();
  }
};

} // namespace
