//===- KernelBuilder.cpp - Write kiln kernels from C++ ---------------------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "kiln/Ops/KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace kiln::ops {
using namespace mlir;
namespace kd = mlir::kiln;

KernelBuilder::KernelBuilder(ModuleOp module, llvm::StringRef name,
                             llvm::ArrayRef<Arg> args, unsigned gridRank,
                             const std::map<std::string, int64_t> *fixed)
    : b(module.getContext()), location(b.getUnknownLoc()) {
  if (fixed)
    statics = *fixed;
  location = NameLoc::get(b.getStringAttr("kiln.ops." + name.str()));
  b.setInsertionPointToEnd(module.getBody());
  SmallVector<Type> types;
  for (const Arg &a : args) {
    types.push_back(a.type);
    argNames.push_back(a.name);
  }
  func = kd::FuncOp::create(b, location, name, b.getFunctionType(types, {}));
  func->setAttr("grid_rank", b.getI64IntegerAttr(gridRank));
  for (size_t i = 0; i < args.size(); ++i)
    func.setArgAttr(i, "kiln.name", b.getStringAttr(args[i].name));
  Block *entry = func.addEntryBlock();
  b.setInsertionPointToStart(entry);
}

Type KernelBuilder::ptr(Type elt) { return kd::PtrType::get(ctx(), elt); }

Value KernelBuilder::arg(llvm::StringRef name) {
  for (size_t i = 0; i < argNames.size(); ++i)
    if (argNames[i] == name) {
      Value a = func.getArgument(i);
      auto it = statics.find(name.str());
      // (An integer constant, not through a double: past 2^53 that
      // rounded, and 2^63 - 1 became -2^63.)
      if (it != statics.end() && isa<IndexType>(a.getType()))
        return cIndex(it->second);
      if (it != statics.end() && isa<IntegerType>(a.getType()))
        return arith::ConstantIntOp::create(b, location, a.getType(), it->second);
      return a;
    }
  llvm::report_fatal_error(("kernel has no argument " + name).str().c_str());
}

Value KernelBuilder::cIndex(int64_t v) {
  return arith::ConstantIndexOp::create(b, location, v);
}
Value KernelBuilder::cI32(int64_t v) {
  return arith::ConstantIntOp::create(b, location, b.getI32Type(), v);
}
Value KernelBuilder::cF32(double v) {
  return arith::ConstantOp::create(b, location, b.getF32FloatAttr(v));
}
Value KernelBuilder::constant(Type type, double v) {
  if (auto tt = dyn_cast<RankedTensorType>(type)) {
    Type e = tt.getElementType();
    Attribute a = isa<FloatType>(e)
                      ? Attribute(b.getFloatAttr(e, v))
                      : Attribute(b.getIntegerAttr(e, static_cast<int64_t>(v)));
    return arith::ConstantOp::create(b, location,
                                     cast<TypedAttr>(SplatElementsAttr::get(tt, a)));
  }
  if (isa<FloatType>(type))
    return arith::ConstantOp::create(b, location, b.getFloatAttr(type, v));
  if (type.isIndex())
    return cIndex(static_cast<int64_t>(v));
  return arith::ConstantIntOp::create(b, location, type,
                                      static_cast<int64_t>(v));
}

Value KernelBuilder::pid(int axis) {
  Value p = kd::ProgramIdOp::create(b, location, static_cast<kd::Axis>(axis));
  return toIndex(p);
}
Value KernelBuilder::clock() { return kd::ClockOp::create(b, location); }
Value KernelBuilder::processorId() {
  return kd::ProcessorIdOp::create(b, location);
}
Value KernelBuilder::numPrograms(int axis) {
  Value p = kd::NumProgramsOp::create(b, location, static_cast<kd::Axis>(axis));
  return toIndex(p);
}

Value KernelBuilder::toIndex(Value v) {
  if (v.getType().isIndex())
    return v;
  return arith::IndexCastOp::create(b, location, b.getIndexType(), v);
}

Value KernelBuilder::convert(Value v, Type elt) {
  Type from = getElementTypeOrSelf(v.getType());
  if (from == elt)
    return v;
  Type to = elt;
  if (auto t = dyn_cast<RankedTensorType>(v.getType()))
    to = RankedTensorType::get(t.getShape(), elt);
  bool fF = isa<FloatType>(from), tF = isa<FloatType>(elt);
  if (from.isIndex() || elt.isIndex())
    return arith::IndexCastOp::create(b, location, to, v);
  if (fF && tF) {
    unsigned fw = from.getIntOrFloatBitWidth(), tw = elt.getIntOrFloatBitWidth();
    if (fw == tw) { // f16 <-> bf16: exactly to f32, then one rounding
      Type f32 = b.getF32Type();
      if (auto t = dyn_cast<RankedTensorType>(v.getType()))
        f32 = RankedTensorType::get(t.getShape(), f32);
      v = arith::ExtFOp::create(b, location, f32, v);
    }
    return fw < tw ? Value(arith::ExtFOp::create(b, location, to, v))
                   : Value(arith::TruncFOp::create(b, location, to, v));
  }
  if (!fF && !tF)
    return from.getIntOrFloatBitWidth() < elt.getIntOrFloatBitWidth()
               ? (from.isInteger(1)
                      ? Value(arith::ExtUIOp::create(b, location, to, v))
                      : Value(arith::ExtSIOp::create(b, location, to, v)))
               : Value(arith::TruncIOp::create(b, location, to, v));
  if (fF)
    return arith::FPToSIOp::create(b, location, to, v);
  if (from.isInteger(1))
    return arith::UIToFPOp::create(b, location, to, v);
  return arith::SIToFPOp::create(b, location, to, v);
}

std::pair<Value, Value> KernelBuilder::unify(Value x, Value y) {
  // Element types: index wins over integers, wider over narrower, float over
  // integer.
  Type ex = getElementTypeOrSelf(x.getType()), ey = getElementTypeOrSelf(y.getType());
  if (ex != ey) {
    auto rank = [](Type t) {
      if (isa<FloatType>(t))
        return 1000 + (int)t.getIntOrFloatBitWidth();
      if (t.isIndex())
        return 500;
      return (int)t.getIntOrFloatBitWidth();
    };
    if (rank(ex) >= rank(ey))
      y = convert(y, ex);
    else
      x = convert(x, ey);
  }
  auto tx = dyn_cast<RankedTensorType>(x.getType());
  auto ty = dyn_cast<RankedTensorType>(y.getType());
  if (tx && !ty)
    y = splat(y, tx.getShape());
  else if (!tx && ty)
    x = splat(x, ty.getShape());
  else if (tx && ty && tx.getShape() != ty.getShape()) {
    SmallVector<int64_t> shape;
    for (auto [a, c] : llvm::zip(tx.getShape(), ty.getShape()))
      shape.push_back(std::max(a, c));
    x = broadcastTo(x, shape);
    y = broadcastTo(y, shape);
  }
  return {x, y};
}

#define KILN_BINARY(NAME, FOP, IOP)                                            \
  Value KernelBuilder::NAME(Value x, Value y) {                                \
    auto [l, r] = unify(x, y);                                                 \
    if (isa<FloatType>(getElementTypeOrSelf(l.getType())))                     \
      return FOP::create(b, location, l, r);                                   \
    return IOP::create(b, location, l, r);                                     \
  }
KILN_BINARY(add, arith::AddFOp, arith::AddIOp)
KILN_BINARY(sub, arith::SubFOp, arith::SubIOp)
KILN_BINARY(mul, arith::MulFOp, arith::MulIOp)
KILN_BINARY(div, arith::DivFOp, arith::DivSIOp)
KILN_BINARY(rem, arith::RemFOp, arith::RemSIOp)
KILN_BINARY(max, arith::MaximumFOp, arith::MaxSIOp)
KILN_BINARY(min, arith::MinimumFOp, arith::MinSIOp)
#undef KILN_BINARY

Value KernelBuilder::fma(Value x, Value y, Value z) {
  auto [l, r] = unify(x, y);
  auto [l2, c] = unify(l, z);  // (z may widen the product's shape or type:
  auto [r2, c2] = unify(r, c); //  r follows)
  assert(isa<FloatType>(getElementTypeOrSelf(c2.getType())) && "fma takes floats");
  return math::FmaOp::create(b, location, l2, r2, c2);
}

Value KernelBuilder::cmp(Cmp kind, Value x, Value y) {
  auto [l, r] = unify(x, y);
  if (isa<FloatType>(getElementTypeOrSelf(l.getType()))) {
    arith::CmpFPredicate p[] = {arith::CmpFPredicate::OLT, arith::CmpFPredicate::OLE,
                                arith::CmpFPredicate::OGT, arith::CmpFPredicate::OGE,
                                arith::CmpFPredicate::OEQ, arith::CmpFPredicate::UNE};
    return arith::CmpFOp::create(b, location, p[static_cast<int>(kind)], l, r);
  }
  arith::CmpIPredicate p[] = {arith::CmpIPredicate::slt, arith::CmpIPredicate::sle,
                              arith::CmpIPredicate::sgt, arith::CmpIPredicate::sge,
                              arith::CmpIPredicate::eq,  arith::CmpIPredicate::ne};
  return arith::CmpIOp::create(b, location, p[static_cast<int>(kind)], l, r);
}

Value KernelBuilder::andI(Value x, Value y) {
  auto [l, r] = unify(x, y);
  return arith::AndIOp::create(b, location, l, r);
}
Value KernelBuilder::orI(Value x, Value y) {
  auto [l, r] = unify(x, y);
  return arith::OrIOp::create(b, location, l, r);
}

Value KernelBuilder::select(Value c, Value x, Value y) {
  // A tile condition with scalar values selects between splats.
  if (auto ct = dyn_cast<RankedTensorType>(c.getType())) {
    if (!isa<RankedTensorType>(x.getType()))
      x = splat(x, ct.getShape());
    if (!isa<RankedTensorType>(y.getType()))
      y = splat(y, ct.getShape());
  }
  auto [l, r] = unify(x, y);
  if (auto t = dyn_cast<RankedTensorType>(l.getType()))
    if (!isa<RankedTensorType>(c.getType()) ||
        cast<RankedTensorType>(c.getType()).getShape() != t.getShape())
      c = isa<RankedTensorType>(c.getType()) ? broadcastTo(c, t.getShape())
                                             : splat(c, t.getShape());
  return arith::SelectOp::create(b, location, c, l, r);
}

Value KernelBuilder::exp(Value x) { return math::ExpOp::create(b, location, x); }
Value KernelBuilder::exp2(Value x) { return math::Exp2Op::create(b, location, x); }
Value KernelBuilder::log(Value x) { return math::LogOp::create(b, location, x); }
Value KernelBuilder::relu(Value x) {
  return max(x, constant(getElementTypeOrSelf(x.getType()), 0.0));
}

Value KernelBuilder::splat(Value scalar, llvm::ArrayRef<int64_t> shape) {
  return kd::SplatOp::create(b, location,
                             RankedTensorType::get(shape, scalar.getType()),
                             scalar);
}

Value KernelBuilder::broadcastTo(Value t, llvm::ArrayRef<int64_t> shape) {
  auto tt = cast<RankedTensorType>(t.getType());
  while (tt.getRank() < static_cast<int64_t>(shape.size())) {
    t = expand(t, 0);
    tt = cast<RankedTensorType>(t.getType());
  }
  if (tt.getShape() == shape)
    return t;
  return kd::BroadcastOp::create(
      b, location, RankedTensorType::get(shape, tt.getElementType()), t);
}

Value KernelBuilder::expand(Value t, int axis) {
  auto tt = cast<RankedTensorType>(t.getType());
  SmallVector<int64_t> shape(tt.getShape());
  shape.insert(shape.begin() + axis, 1);
  return kd::ExpandDimsOp::create(
      b, location, RankedTensorType::get(shape, tt.getElementType()), t,
      static_cast<int32_t>(axis));
}

Value KernelBuilder::reshape(Value t, llvm::ArrayRef<int64_t> shape) {
  auto tt = cast<RankedTensorType>(t.getType());
  return kd::ReshapeOp::create(
      b, location, RankedTensorType::get(shape, tt.getElementType()), t);
}

Value KernelBuilder::slice(Value t, ArrayRef<int64_t> offsets,
                           ArrayRef<int64_t> sizes) {
  auto tt = cast<RankedTensorType>(t.getType());
  SmallVector<int64_t> strides(sizes.size(), 1);
  return tensor::ExtractSliceOp::create(
      b, location, RankedTensorType::get(sizes, tt.getElementType()), t,
      ValueRange{}, ValueRange{}, ValueRange{}, offsets, sizes, strides);
}

Value KernelBuilder::trans(Value t) {
  auto tt = cast<RankedTensorType>(t.getType());
  return kd::TransOp::create(
      b, location,
      RankedTensorType::get({tt.getDimSize(1), tt.getDimSize(0)},
                            tt.getElementType()),
      t, ArrayRef<int32_t>{1, 0});
}

Value KernelBuilder::arange(int64_t n) {
  return kd::ArangeOp::create(b, location,
                              RankedTensorType::get({n}, b.getI32Type()), 0, n);
}

Value KernelBuilder::view(Value p, llvm::ArrayRef<Value> sizes,
                          llvm::ArrayRef<Value> strides) {
  SmallVector<Value> s, st;
  for (Value v : sizes)
    s.push_back(toIndex(v));
  for (Value v : strides)
    st.push_back(toIndex(v));
  Type elt = cast<kd::PtrType>(p.getType()).getElementType();
  return kd::MakeViewOp::create(b, location,
                                kd::ViewType::get(ctx(), s.size(), elt), p, s,
                                st);
}

Value KernelBuilder::denseView(Value p, llvm::ArrayRef<Value> sizes) {
  SmallVector<Value> idx, strides(sizes.size());
  for (Value v : sizes)
    idx.push_back(toIndex(v));
  Value stride = cIndex(1);
  for (int i = static_cast<int>(sizes.size()) - 1; i >= 0; --i) {
    strides[i] = stride;
    if (i > 0)
      stride = mul(stride, idx[i]);
  }
  return view(p, idx, strides);
}

static TypedAttr padAttr(OpBuilder &b, Type elt, std::optional<double> pad) {
  if (!pad)
    return nullptr;
  if (isa<FloatType>(elt))
    return b.getFloatAttr(elt, *pad);
  return b.getIntegerAttr(elt, static_cast<int64_t>(*pad));
}

Value KernelBuilder::load(Value v, llvm::ArrayRef<Value> offsets,
                          llvm::ArrayRef<int64_t> shape,
                          std::optional<double> padding) {
  Type elt = cast<kd::ViewType>(v.getType()).getElementType();
  SmallVector<Value> offs;
  for (Value o : offsets)
    offs.push_back(toIndex(o));
  return kd::LoadOp::create(b, location, RankedTensorType::get(shape, elt), v,
                            offs, padAttr(b, elt, padding), nullptr);
}

void KernelBuilder::store(Value t, Value v, llvm::ArrayRef<Value> offsets,
                          bool streaming) {
  SmallVector<Value> offs;
  for (Value o : offsets)
    offs.push_back(toIndex(o));
  kd::StoreOp::create(b, location, t, v, offs, nullptr, streaming);
}

Value KernelBuilder::gather(Value v, Value indices,
                            llvm::ArrayRef<Value> offsets,
                            llvm::ArrayRef<int64_t> shape,
                            std::optional<double> padding) {
  Type elt = cast<kd::ViewType>(v.getType()).getElementType();
  SmallVector<Value> offs;
  for (Value o : offsets)
    offs.push_back(toIndex(o));
  return kd::GatherOp::create(b, location, RankedTensorType::get(shape, elt), v,
                              indices, offs, padAttr(b, elt, padding));
}

void KernelBuilder::scatter(Value t, Value v, Value indices,
                            llvm::ArrayRef<Value> offsets) {
  SmallVector<Value> offs;
  for (Value o : offsets)
    offs.push_back(toIndex(o));
  kd::ScatterOp::create(b, location, t, v, indices, offs);
}

void KernelBuilder::atomicAdd(Value t, Value v, llvm::ArrayRef<Value> offsets) {
  SmallVector<Value> offs;
  for (Value o : offsets)
    offs.push_back(toIndex(o));
  kd::AtomicAddOp::create(b, location, t, v, offs);
}

Value KernelBuilder::loadScalar(Value v, llvm::ArrayRef<Value> offsets,
                                std::optional<double> padding) {
  SmallVector<int64_t> ones(offsets.size(), 1), zeros(offsets.size(), 0);
  return extract(load(v, offsets, ones, padding), zeros);
}

Value KernelBuilder::dot(Value x, Value y, Value acc) {
  return kd::DotOp::create(b, location, acc.getType(), x, y, acc);
}

Value KernelBuilder::dotFp8(Value x, Value y, Value acc, llvm::StringRef lhsFp8,
                            llvm::StringRef rhsFp8) {
  return kd::DotOp::create(b, location, acc.getType(), x, y, acc,
                           b.getStringAttr(lhsFp8), b.getStringAttr(rhsFp8));
}

Value KernelBuilder::reduce(kd::ReduceKind kind, Value t, int axis) {
  auto tt = cast<RankedTensorType>(t.getType());
  SmallVector<int64_t> shape(tt.getShape());
  shape.erase(shape.begin() + axis);
  Type elt = (kind == kd::ReduceKind::argmax || kind == kd::ReduceKind::argmin)
                 ? b.getI32Type()
                 : tt.getElementType();
  Type result = shape.empty() ? elt : Type(RankedTensorType::get(shape, elt));
  return kd::ReduceOp::create(b, location, result, kind, t,
                              static_cast<int32_t>(axis));
}

Value KernelBuilder::scan(kd::ReduceKind kind, Value t, int axis,
                          bool reverse) {
  return kd::ScanOp::create(b, location, t.getType(), kind, t,
                            static_cast<int32_t>(axis), reverse);
}

Value KernelBuilder::extract(Value t, llvm::ArrayRef<int64_t> index) {
  SmallVector<Value> idx;
  for (int64_t i : index)
    idx.push_back(cIndex(i));
  return tensor::ExtractOp::create(b, location, t, idx);
}

SmallVector<Value> KernelBuilder::forLoop(Value lb, Value ub, Value step,
                                          ValueRange inits,
                                          const LoopBody &body) {
  auto loop = scf::ForOp::create(b, location, toIndex(lb), toIndex(ub),
                                 toIndex(step), inits);
  OpBuilder::InsertionGuard guard(b);
  Block *blk = loop.getBody();
  if (!blk->empty() && isa<scf::YieldOp>(blk->back()))
    blk->back().erase();
  b.setInsertionPointToEnd(blk);
  SmallVector<Value> yields = body(loop.getInductionVar(), loop.getRegionIterArgs());
  scf::YieldOp::create(b, location, yields);
  return SmallVector<Value>(loop.getResults());
}

SmallVector<Value> KernelBuilder::ifElse(Value cond, TypeRange types,
                                         const Branch &thenBranch,
                                         const Branch &elseBranch) {
  auto op = scf::IfOp::create(b, location, types, cond, /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(b);
  for (auto [region, fn] :
       {std::pair<Region *, const Branch *>{&op.getThenRegion(), &thenBranch},
        {&op.getElseRegion(), &elseBranch}}) {
    Block *blk = &region->front();
    if (!blk->empty() && isa<scf::YieldOp>(blk->back()))
      blk->back().erase();
    b.setInsertionPointToEnd(blk);
    SmallVector<Value> yields = (*fn)();
    scf::YieldOp::create(b, location, yields);
  }
  return SmallVector<Value>(op.getResults());
}

void KernelBuilder::finish() { kd::ReturnOp::create(b, location); }

} // namespace kiln::ops
