//===- KilnOps.cpp - Verifiers, folders and patterns of kiln ops -----------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kiln/IR/Kiln.h"

#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/FunctionImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallBitVector.h"

using namespace mlir;
using namespace mlir::kiln;

#define GET_OP_CLASSES
#include "kiln/Dialect/Kiln/IR/KilnOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// If `value` is a constant splat tile, returns the splat attribute.
static SplatElementsAttr getConstantSplat(Attribute value) {
  return dyn_cast_or_null<SplatElementsAttr>(value);
}

/// Folds a shape-only op whose operand is a constant splat into a constant
/// splat of the result type.
static OpFoldResult foldSplatThroughShape(Attribute operand, Type resultType) {
  if (auto splat = getConstantSplat(operand))
    return SplatElementsAttr::get(cast<ShapedType>(resultType),
                                  splat.getSplatValue<Attribute>());
  return {};
}

/// Checks the offsets and tile of a view access (load, store, atomic_add).
static LogicalResult verifyViewAccess(Operation *op, ViewType view,
                                      size_t numOffsets,
                                      RankedTensorType tile,
                                      std::optional<ArrayRef<bool>> inBounds) {
  if (numOffsets != view.getRank())
    return op->emitOpError("expected ")
           << view.getRank() << " offsets for a view of rank "
           << view.getRank() << ", got " << numOffsets;
  if (tile.getRank() != static_cast<int64_t>(view.getRank()))
    return op->emitOpError("tile rank (")
           << tile.getRank() << ") must equal the view rank ("
           << view.getRank() << ")";
  if (tile.getElementType() != view.getElementType())
    return op->emitOpError("tile element type (")
           << tile.getElementType() << ") must match the view's ("
           << view.getElementType() << ")";
  if (inBounds && inBounds->size() != view.getRank())
    return op->emitOpError("'in_bounds' has ")
           << inBounds->size() << " entries, expected one per view dimension ("
           << view.getRank() << ")";
  return success();
}

static LogicalResult verifyPadding(Operation *op, std::optional<TypedAttr> pad,
                                   Type elementType) {
  if (pad && pad->getType() != elementType)
    return op->emitOpError("padding type (")
           << pad->getType() << ") must be the tile element type ("
           << elementType << ")";
  return success();
}

/// Checks the index tile of a gather or scatter against the view and tile.
static LogicalResult verifyIndexedAccess(Operation *op, ViewType view,
                                         RankedTensorType indices,
                                         size_t numOffsets,
                                         RankedTensorType tile) {
  if (!indices.getElementType().isSignlessInteger())
    return op->emitOpError("index tile must have a signless integer element "
                           "type, got ")
           << indices.getElementType();
  if (indices.getRank() != 1)
    return op->emitOpError("index tile must be 1-D, got rank ")
           << indices.getRank();
  if (numOffsets + 1 != view.getRank())
    return op->emitOpError("expected ")
           << view.getRank() - 1
           << " offsets (one per view dimension after the first), got "
           << numOffsets;
  if (tile.getRank() != static_cast<int64_t>(view.getRank()))
    return op->emitOpError("tile rank (")
           << tile.getRank() << ") must equal the view rank ("
           << view.getRank() << ")";
  if (tile.getDimSize(0) != indices.getDimSize(0))
    return op->emitOpError("tile's first dimension (")
           << tile.getDimSize(0) << ") must equal the number of indices ("
           << indices.getDimSize(0) << ")";
  if (tile.getElementType() != view.getElementType())
    return op->emitOpError("tile element type (")
           << tile.getElementType() << ") must match the view's ("
           << view.getElementType() << ")";
  return success();
}

/// Checks that `axis` of the launch grid exists in the enclosing kernel.
static LogicalResult verifyGridAxis(Operation *op, Axis axis) {
  auto func = op->getParentOfType<FuncOp>();
  if (!func)
    return success();
  unsigned rank = func.getGridRank();
  if (static_cast<unsigned>(axis) >= rank)
    return op->emitOpError("grid axis '")
           << stringifyAxis(axis) << "' is out of range for a kernel with "
           << "grid_rank " << rank;
  return success();
}

//===----------------------------------------------------------------------===//
// FuncOp
//===----------------------------------------------------------------------===//

void FuncOp::build(OpBuilder &builder, OperationState &state, StringRef name,
                   FunctionType type) {
  state.addAttribute(SymbolTable::getSymbolAttrName(),
                     builder.getStringAttr(name));
  state.addAttribute(getFunctionTypeAttrName(state.name), TypeAttr::get(type));
  state.addRegion();
}

ParseResult FuncOp::parse(OpAsmParser &parser, OperationState &result) {
  auto buildFuncType = [](Builder &builder, ArrayRef<Type> argTypes,
                          ArrayRef<Type> results,
                          function_interface_impl::VariadicFlag,
                          std::string &) {
    return builder.getFunctionType(argTypes, results);
  };
  return function_interface_impl::parseFunctionOp(
      parser, result, /*allowVariadic=*/false,
      getFunctionTypeAttrName(result.name), buildFuncType,
      getArgAttrsAttrName(result.name), getResAttrsAttrName(result.name));
}

void FuncOp::print(OpAsmPrinter &p) {
  function_interface_impl::printFunctionOp(
      p, *this, /*isVariadic=*/false, getFunctionTypeAttrName(),
      getArgAttrsAttrName(), getResAttrsAttrName());
}

unsigned FuncOp::getGridRank() {
  if (auto attr = (*this)->getAttrOfType<IntegerAttr>("grid_rank"))
    return static_cast<unsigned>(attr.getInt());
  return 1;
}

LogicalResult FuncOp::verify() {
  if (!getResultTypes().empty())
    return emitOpError("a kernel must not return values (it writes its "
                       "results to memory), but the type has ")
           << getResultTypes().size() << " result(s)";
  if (Attribute attr = (*this)->getAttr("grid_rank")) {
    auto rank = dyn_cast<IntegerAttr>(attr);
    if (!rank || rank.getInt() < 1 || rank.getInt() > 3)
      return emitOpError("'grid_rank' must be an integer 1, 2 or 3, got ")
             << attr;
  }
  for (auto [i, type] : llvm::enumerate(getArgumentTypes())) {
    if (!isa<PtrType, IntegerType, IndexType, FloatType>(type))
      return emitOpError("argument #")
             << i << " has type " << type
             << "; kernel arguments must be !kiln.ptr or integer, index or "
                "float scalars";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Launch grid
//===----------------------------------------------------------------------===//

LogicalResult ProgramIdOp::verify() { return verifyGridAxis(*this, getAxis()); }

LogicalResult NumProgramsOp::verify() {
  return verifyGridAxis(*this, getAxis());
}

//===----------------------------------------------------------------------===//
// ArangeOp
//===----------------------------------------------------------------------===//

LogicalResult ArangeOp::verify() {
  int64_t start = getStart(), end = getEnd();
  auto type = getResult().getType();
  if (end <= start)
    return emitOpError("end (") << end << ") must be greater than start ("
                                << start << ")";
  if (type.getRank() != 1)
    return emitOpError("result must be a 1-D tile, got rank ")
           << type.getRank();
  if (type.getDimSize(0) != end - start)
    return emitOpError("result has ")
           << type.getDimSize(0) << " elements but the range [" << start
           << ", " << end << ") has " << end - start;
  unsigned width = type.getElementType().getIntOrFloatBitWidth();
  if (width < 64 && (end - 1 > (int64_t(1) << (width - 1)) - 1 ||
                     start < -(int64_t(1) << (width - 1))))
    return emitOpError("the range [")
           << start << ", " << end << ") does not fit the element type "
           << type.getElementType();
  return success();
}

//===----------------------------------------------------------------------===//
// SplatOp
//===----------------------------------------------------------------------===//

// kiln.splat (arith.constant c) => arith.constant dense<c>
OpFoldResult SplatOp::fold(FoldAdaptor adaptor) {
  Attribute value = adaptor.getValue();
  if (!value || !isa<IntegerAttr, FloatAttr>(value))
    return {};
  return SplatElementsAttr::get(getResult().getType(), value);
}

//===----------------------------------------------------------------------===//
// BroadcastOp
//===----------------------------------------------------------------------===//

LogicalResult BroadcastOp::verify() {
  auto src = getSrc().getType();
  auto res = getResult().getType();
  if (src.getElementType() != res.getElementType())
    return emitOpError("element type of the result (")
           << res.getElementType() << ") must match the source's ("
           << src.getElementType() << ")";
  if (src.getRank() != res.getRank())
    return emitOpError("rank of the source (")
           << src.getRank() << ") must equal the rank of the result ("
           << res.getRank() << "); use kiln.expand_dims to add dimensions";
  for (int64_t i = 0; i < src.getRank(); ++i) {
    if (src.getDimSize(i) != 1 && src.getDimSize(i) != res.getDimSize(i))
      return emitOpError("source dimension ")
             << i << " (size " << src.getDimSize(i)
             << ") must be 1 or equal to the result's (" << res.getDimSize(i)
             << ")";
  }
  return success();
}

OpFoldResult BroadcastOp::fold(FoldAdaptor adaptor) {
  if (getSrc().getType() == getResult().getType())
    return getSrc();
  return foldSplatThroughShape(adaptor.getSrc(), getResult().getType());
}

namespace {
// kiln.broadcast (kiln.splat %x) => kiln.splat %x
struct BroadcastOfSplat : OpRewritePattern<BroadcastOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(BroadcastOp op,
                                PatternRewriter &rewriter) const override {
    auto splat = op.getSrc().getDefiningOp<SplatOp>();
    if (!splat)
      return failure();
    rewriter.replaceOpWithNewOp<SplatOp>(op, op.getResult().getType(),
                                         splat.getValue());
    return success();
  }
};

// kiln.broadcast (kiln.broadcast %x) => kiln.broadcast %x
struct BroadcastOfBroadcast : OpRewritePattern<BroadcastOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(BroadcastOp op,
                                PatternRewriter &rewriter) const override {
    auto inner = op.getSrc().getDefiningOp<BroadcastOp>();
    if (!inner)
      return failure();
    rewriter.replaceOpWithNewOp<BroadcastOp>(op, op.getResult().getType(),
                                             inner.getSrc());
    return success();
  }
};
} // namespace

void BroadcastOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                              MLIRContext *context) {
  results.add<BroadcastOfSplat, BroadcastOfBroadcast>(context);
}

//===----------------------------------------------------------------------===//
// ExpandDimsOp
//===----------------------------------------------------------------------===//

LogicalResult ExpandDimsOp::verify() {
  auto src = getSrc().getType();
  auto res = getResult().getType();
  int64_t axis = getAxis();
  if (axis < 0 || axis > src.getRank())
    return emitOpError("axis ") << axis << " is out of range [0, "
                                << src.getRank() << "]";
  SmallVector<int64_t> shape(src.getShape());
  shape.insert(shape.begin() + axis, 1);
  auto expected = RankedTensorType::get(shape, src.getElementType());
  if (res != expected)
    return emitOpError("result type must be the source type with a size-1 "
                       "dimension at axis ")
           << axis << ", i.e. " << expected << ", got " << res;
  return success();
}

OpFoldResult ExpandDimsOp::fold(FoldAdaptor adaptor) {
  return foldSplatThroughShape(adaptor.getSrc(), getResult().getType());
}

//===----------------------------------------------------------------------===//
// ReshapeOp
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  auto src = getSrc().getType();
  auto res = getResult().getType();
  if (src.getElementType() != res.getElementType())
    return emitOpError("element type of the result (")
           << res.getElementType() << ") must match the source's ("
           << src.getElementType() << ")";
  if (src.getNumElements() != res.getNumElements())
    return emitOpError("source and result must have the same number of "
                       "elements (")
           << src.getNumElements() << " vs " << res.getNumElements() << ")";
  return success();
}

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (getSrc().getType() == getResult().getType())
    return getSrc();
  // kiln.reshape (kiln.reshape %x) => kiln.reshape %x
  if (auto inner = getSrc().getDefiningOp<ReshapeOp>()) {
    getSrcMutable().assign(inner.getSrc());
    return getResult();
  }
  return foldSplatThroughShape(adaptor.getSrc(), getResult().getType());
}

//===----------------------------------------------------------------------===//
// TransOp
//===----------------------------------------------------------------------===//

LogicalResult TransOp::verify() {
  auto src = getSrc().getType();
  auto res = getResult().getType();
  ArrayRef<int32_t> order = getOrder();
  if (static_cast<int64_t>(order.size()) != src.getRank())
    return emitOpError("order has ")
           << order.size() << " entries but the source has rank "
           << src.getRank();
  llvm::SmallBitVector seen(order.size());
  for (int32_t d : order) {
    if (d < 0 || d >= src.getRank() || seen.test(d))
      return emitOpError("order must be a permutation of [0, ")
             << src.getRank() << ")";
    seen.set(d);
  }
  SmallVector<int64_t> shape;
  for (int32_t d : order)
    shape.push_back(src.getDimSize(d));
  auto expected = RankedTensorType::get(shape, src.getElementType());
  if (res != expected)
    return emitOpError("result type must be the permuted source type ")
           << expected << ", got " << res;
  return success();
}

OpFoldResult TransOp::fold(FoldAdaptor adaptor) {
  ArrayRef<int32_t> order = getOrder();
  auto isIdentity = [](ArrayRef<int32_t> perm) {
    for (auto [i, d] : llvm::enumerate(perm))
      if (static_cast<int32_t>(i) != d)
        return false;
    return true;
  };
  if (isIdentity(order))
    return getSrc();
  // kiln.trans (kiln.trans %x, p), q => kiln.trans %x, p∘q (or %x).
  if (auto inner = getSrc().getDefiningOp<TransOp>()) {
    SmallVector<int32_t> composed;
    for (int32_t d : order)
      composed.push_back(inner.getOrder()[d]);
    if (isIdentity(composed))
      return inner.getSrc();
    getSrcMutable().assign(inner.getSrc());
    setOrder(composed);
    return getResult();
  }
  return foldSplatThroughShape(adaptor.getSrc(), getResult().getType());
}

//===----------------------------------------------------------------------===//
// MakeViewOp
//===----------------------------------------------------------------------===//

LogicalResult MakeViewOp::verify() {
  ViewType view = getResult().getType();
  PtrType ptr = getBase().getType();
  if (getSizes().size() != view.getRank())
    return emitOpError("expected ")
           << view.getRank() << " sizes for a view of rank " << view.getRank()
           << ", got " << getSizes().size();
  if (getStrides().size() != view.getRank())
    return emitOpError("expected ")
           << view.getRank() << " strides for a view of rank "
           << view.getRank() << ", got " << getStrides().size();
  if (ptr.getElementType() != view.getElementType())
    return emitOpError("element type of the view (")
           << view.getElementType() << ") must match the pointer's ("
           << ptr.getElementType() << ")";
  return success();
}

//===----------------------------------------------------------------------===//
// LoadOp, StoreOp, AtomicAddOp
//===----------------------------------------------------------------------===//

LogicalResult LoadOp::verify() {
  if (failed(verifyViewAccess(*this, getView().getType(), getOffsets().size(),
                              getResult().getType(), getInBounds())))
    return failure();
  return verifyPadding(*this, getPadding(),
                       getResult().getType().getElementType());
}

LogicalResult StoreOp::verify() {
  return verifyViewAccess(*this, getView().getType(), getOffsets().size(),
                          getValue().getType(), getInBounds());
}

/// The element types atomic additions support.
static LogicalResult verifyAtomicElement(Operation *op, Type elt) {
  if (!elt.isF32() && !elt.isF64() && !elt.isSignlessInteger(32) &&
      !elt.isSignlessInteger(64))
    return op->emitOpError("supports f32, f64, i32 and i64 elements, got ")
           << elt;
  return success();
}

/// The element types an atomic of `kind` supports.
static LogicalResult verifyAtomicKind(Operation *op, AtomicKind kind, Type elt) {
  bool bitwise = kind == AtomicKind::bit_and || kind == AtomicKind::bit_or ||
                 kind == AtomicKind::bit_xor;
  if (bitwise && !elt.isSignlessInteger(32) && !elt.isSignlessInteger(64))
    return op->emitOpError("'") << stringifyAtomicKind(kind)
                                << "' supports i32 and i64 elements, got " << elt;
  return verifyAtomicElement(op, elt);
}

LogicalResult AtomicRMWOp::verify() {
  if (failed(verifyViewAccess(*this, getView().getType(), getOffsets().size(),
                              getValue().getType(), std::nullopt)))
    return failure();
  return verifyAtomicKind(*this, getKind(), getValue().getType().getElementType());
}

LogicalResult AtomicCASOp::verify() {
  if (failed(verifyViewAccess(*this, getView().getType(), getOffsets().size(),
                              getValue().getType(), std::nullopt)))
    return failure();
  // (The elements an exchange takes: 32 and 64 bits.)
  return verifyAtomicKind(*this, AtomicKind::xchg,
                          getValue().getType().getElementType());
}

LogicalResult AtomicAddOp::verify() {
  if (failed(verifyViewAccess(*this, getView().getType(), getOffsets().size(),
                              getValue().getType(), std::nullopt)))
    return failure();
  return verifyAtomicElement(*this, getValue().getType().getElementType());
}

namespace {
/// Computes, per dimension, whether a tile access at `offsets` into the view
/// made by `view` provably stays inside it: sizes and offsets are constants
/// and `0 <= offset` and `offset + tile <= size`. Returns std::nullopt when
/// nothing new can be proved.
static std::optional<SmallVector<bool>>
proveInBounds(Value view, OperandRange offsets, ArrayRef<int64_t> tileShape,
              std::optional<ArrayRef<bool>> known) {
  auto make = view.getDefiningOp<MakeViewOp>();
  if (!make)
    return std::nullopt;
  SmallVector<bool> flags(tileShape.size(), false);
  if (known)
    flags.assign(known->begin(), known->end());
  bool changed = false;
  for (size_t d = 0; d < tileShape.size(); ++d) {
    if (flags[d])
      continue;
    std::optional<int64_t> size = getConstantIntValue(make.getSizes()[d]);
    std::optional<int64_t> offset = getConstantIntValue(offsets[d]);
    // (offset <= size - shape: the sum overflowed for an offset near 2^63.)
    if (size && offset && *offset >= 0 && *size >= tileShape[d] &&
        *offset <= *size - tileShape[d]) {
      flags[d] = true;
      changed = true;
    }
  }
  if (!changed)
    return std::nullopt;
  return flags;
}

// kiln.load %v[%c0] (constant sizes, tile inside) => kiln.load {in_bounds}
struct MarkLoadInBounds : OpRewritePattern<LoadOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(LoadOp op,
                                PatternRewriter &rewriter) const override {
    auto flags = proveInBounds(op.getView(), op.getOffsets(),
                               op.getResult().getType().getShape(),
                               op.getInBounds());
    if (!flags)
      return failure();
    rewriter.modifyOpInPlace(op, [&] { op.setInBounds(*flags); });
    return success();
  }
};

// kiln.store %t, %v[%c0] (constant sizes, tile inside) => kiln.store {in_bounds}
struct MarkStoreInBounds : OpRewritePattern<StoreOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(StoreOp op,
                                PatternRewriter &rewriter) const override {
    auto flags = proveInBounds(op.getView(), op.getOffsets(),
                               op.getValue().getType().getShape(),
                               op.getInBounds());
    if (!flags)
      return failure();
    rewriter.modifyOpInPlace(op, [&] { op.setInBounds(*flags); });
    return success();
  }
};
} // namespace

void LoadOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                         MLIRContext *context) {
  results.add<MarkLoadInBounds>(context);
}

void StoreOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                          MLIRContext *context) {
  results.add<MarkStoreInBounds>(context);
}

//===----------------------------------------------------------------------===//
// GatherOp, ScatterOp
//===----------------------------------------------------------------------===//

LogicalResult GatherOp::verify() {
  if (failed(verifyIndexedAccess(*this, getView().getType(),
                                 getIndices().getType(), getOffsets().size(),
                                 getResult().getType())))
    return failure();
  return verifyPadding(*this, getPadding(),
                       getResult().getType().getElementType());
}

LogicalResult ScatterOp::verify() {
  return verifyIndexedAccess(*this, getView().getType(),
                             getIndices().getType(), getOffsets().size(),
                             getValue().getType());
}

LogicalResult ScatterRMWOp::verify() {
  if (failed(verifyIndexedAccess(*this, getView().getType(),
                                 getIndices().getType(), getOffsets().size(),
                                 getValue().getType())))
    return failure();
  return verifyAtomicKind(*this, getKind(), getValue().getType().getElementType());
}

LogicalResult ScatterAddOp::verify() {
  if (failed(verifyIndexedAccess(*this, getView().getType(),
                                 getIndices().getType(), getOffsets().size(),
                                 getValue().getType())))
    return failure();
  return verifyAtomicElement(*this, getValue().getType().getElementType());
}

//===----------------------------------------------------------------------===//
// DotOp
//===----------------------------------------------------------------------===//

LogicalResult DotOp::verify() {
  auto lhs = getLhs().getType();
  auto rhs = getRhs().getType();
  auto acc = getAcc().getType();
  if (lhs.getRank() != 2 || rhs.getRank() != 2 || acc.getRank() != 2)
    return emitOpError("lhs, rhs and accumulator must be 2-D tiles, got ranks ")
           << lhs.getRank() << ", " << rhs.getRank() << " and "
           << acc.getRank();
  if (lhs.getDimSize(1) != rhs.getDimSize(0))
    return emitOpError("contraction dimension of lhs (")
           << lhs.getDimSize(1) << ") must equal the leading dimension of rhs ("
           << rhs.getDimSize(0) << ")";
  if (acc.getDimSize(0) != lhs.getDimSize(0) ||
      acc.getDimSize(1) != rhs.getDimSize(1))
    return emitOpError("accumulator shape must be ")
           << lhs.getDimSize(0) << "x" << rhs.getDimSize(1)
           << " (rows of lhs x columns of rhs), got " << acc.getDimSize(0)
           << "x" << acc.getDimSize(1);
  Type a = lhs.getElementType(), b = rhs.getElementType(),
       c = acc.getElementType();
  if (getLhsFp8().has_value() != getRhsFp8().has_value())
    return emitOpError("lhs_fp8 and rhs_fp8 go together (a lone fp8 operand "
                       "is decoded before the dot)");
  if (isFp8()) {
    for (StringRef f : {*getLhsFp8(), *getRhsFp8()})
      if (f != "e4m3" && f != "e5m2")
        return emitOpError("fp8 formats are \"e4m3\" and \"e5m2\", got \"")
               << f << "\"";
    if (!a.isSignlessInteger(8) || !b.isSignlessInteger(8) || !c.isF32())
      return emitOpError("an fp8 dot takes i8 operands (the fp8 bits) into "
                         "an f32 accumulator, got ")
             << a << " x " << b << " -> " << c;
    return success();
  }
  bool ok = a == b && ((a.isF32() && c.isF32()) || (a.isF64() && c.isF64()) ||
                       (a.isF16() && (c.isF16() || c.isF32())) ||
                       (a.isBF16() && c.isF32()) ||
                       (a.isSignlessInteger(8) && c.isSignlessInteger(32)));
  if (!ok)
    return emitOpError("unsupported element types ")
           << a << " x " << b << " -> " << c
           << "; supported: f32 x f32 -> f32, f64 x f64 -> f64, "
              "f16 x f16 -> f16|f32, bf16 x bf16 -> f32, i8 x i8 -> i32";
  return success();
}

namespace {
/// `add(acc, dot(a, b, zeros))` (either operand order) -> `dot(a, b, acc)`:
/// the dot's only use, in its block (a dot before a loop is not moved into
/// it), its accumulator a splat zero, `acc` of the result's type and used
/// only here (an accumulator that other ops read stays an elementwise
/// update, which the GPU lowering carries in registers: elementwiseCarry).
template <typename AddOp>
struct AddOfDotFromZeros : OpRewritePattern<AddOp> {
  using OpRewritePattern<AddOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(AddOp add,
                                PatternRewriter &rewriter) const override {
    for (unsigned i = 0; i < 2; ++i) {
      auto dot = add->getOperand(i).template getDefiningOp<DotOp>();
      Value acc = add->getOperand(1 - i);
      if (!dot || !dot.getResult().hasOneUse() ||
          dot->getBlock() != add->getBlock() || !acc.hasOneUse() ||
          acc.getType() != dot.getType() || acc == dot.getResult())
        continue;
      bool zeros = matchPattern(dot.getAcc(), m_AnyZeroFloat()) ||
                   matchPattern(dot.getAcc(), m_Zero());
      if (!zeros)
        continue;
      rewriter.replaceOpWithNewOp<DotOp>(add, dot.getType(), dot.getLhs(),
                                         dot.getRhs(), acc, dot.getLhsFp8Attr(),
                                         dot.getRhsFp8Attr());
      rewriter.eraseOp(dot);
      return success();
    }
    return failure();
  }
};
} // namespace

void DotOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                        MLIRContext *context) {
  results.add<AddOfDotFromZeros<arith::AddFOp>, AddOfDotFromZeros<arith::AddIOp>>(
      context);
}

//===----------------------------------------------------------------------===//
// ReduceOp
//===----------------------------------------------------------------------===//

LogicalResult ReduceOp::verify() {
  auto src = getSrc().getType();
  int64_t axis = getAxis();
  if (axis < 0 || axis >= src.getRank())
    return emitOpError("axis ") << axis << " is out of range for a tile of rank "
                                << src.getRank();
  bool isArg = getKind() == ReduceKind::argmax || getKind() == ReduceKind::argmin;
  Type elt = isArg ? IntegerType::get(getContext(), 32) : src.getElementType();
  if (!isa<IntegerType, FloatType>(src.getElementType()))
    return emitOpError("source element type must be an integer or float, got ")
           << src.getElementType();
  SmallVector<int64_t> shape(src.getShape());
  shape.erase(shape.begin() + axis);
  Type expected =
      shape.empty() ? elt : Type(RankedTensorType::get(shape, elt));
  if (getResult().getType() != expected)
    return emitOpError("result type must be ")
           << expected << " (the source without dimension " << axis
           << (isArg ? ", as i32 positions" : "") << "), got "
           << getResult().getType();
  return success();
}

//===----------------------------------------------------------------------===//
// ScanOp
//===----------------------------------------------------------------------===//

LogicalResult ScanOp::verify() {
  auto src = getSrc().getType();
  int64_t axis = getAxis();
  if (axis < 0 || axis >= src.getRank())
    return emitOpError("axis ") << axis << " is out of range for a tile of rank "
                                << src.getRank();
  if (getKind() == ReduceKind::argmax || getKind() == ReduceKind::argmin)
    return emitOpError("scans combine with sum, max, min or prod, not ")
           << stringifyReduceKind(getKind());
  if (!isa<IntegerType, FloatType>(src.getElementType()))
    return emitOpError("source element type must be an integer or float, got ")
           << src.getElementType();
  return success();
}

//===----------------------------------------------------------------------===//
// PrintOp
//===----------------------------------------------------------------------===//

LogicalResult PrintOp::verify() {
  for (auto [i, v] : llvm::enumerate(getArgs())) {
    Type t = v.getType();
    Type elt = t;
    if (auto tile = dyn_cast<RankedTensorType>(t)) {
      if (!tile.hasStaticShape())
        return emitOpError("operand ") << i << " is a tile of dynamic shape";
      elt = tile.getElementType();
    }
    if (!isa<IntegerType, FloatType>(elt))
      return emitOpError("prints integers and floats (scalars or tiles of "
                         "them); operand ")
             << i << " is " << t;
    if (elt.getIntOrFloatBitWidth() > 64)
      return emitOpError("operand ") << i << ": elements of more than 64 "
                                     << "bits, got " << elt;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// GatherElementsOp
//===----------------------------------------------------------------------===//

LogicalResult GatherElementsOp::verify() {
  auto src = getSrc().getType();
  auto idx = getIndices().getType();
  auto res = getResult().getType();
  int64_t axis = getAxis();
  if (axis < 0 || axis >= src.getRank())
    return emitOpError("axis ") << axis << " is out of range for a tile of rank "
                                << src.getRank();
  if (idx.getRank() != src.getRank())
    return emitOpError("indices must have the source's rank (")
           << src.getRank() << "), got " << idx;
  for (int64_t d = 0; d < src.getRank(); ++d)
    if (d != axis && idx.getDimSize(d) != src.getDimSize(d))
      return emitOpError("indices and source differ in dimension ")
             << d << " (" << idx.getDimSize(d) << " vs " << src.getDimSize(d)
             << "); only dimension " << axis << " (the axis) may";
  if (res.getShape() != idx.getShape() ||
      res.getElementType() != src.getElementType())
    return emitOpError("result type must be ")
           << RankedTensorType::get(idx.getShape(), src.getElementType())
           << " (the indices' shape, the source's elements), got " << res;
  return success();
}
