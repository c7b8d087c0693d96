//===- CompilerBindings.cpp - The IR builder and JIT for Python ------------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The Python front end builds kiln IR through this builder, op by op, with a
// source location (file:line:col of the Python kernel) on every op. Each op is
// verified as it is created, so a type or shape error surfaces at the line
// that caused it. Nothing here formats MLIR text to build IR.
//
//===----------------------------------------------------------------------===//

#include "Bindings.h"

#include "kiln/Dialect/Kiln/IR/Kiln.h"
#include "kiln/JIT/JIT.h"
#include "kiln/Ops/Ops.h"
#include "kiln/Target/CPU/Compiler.h"
#include "kiln/Target/GPUChips.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <cstdlib>
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <map>

namespace py = pybind11;
using namespace mlir;
namespace kd = mlir::kiln;

namespace {

/// An error in the IR being built; Python turns it into a CompilationError
/// pointing at the kernel line being translated.
struct IRError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class PyBuilder {
public:
  PyBuilder() {
    DialectRegistry registry;
    ::kiln::registerDialects(registry);
    ctx = std::make_unique<MLIRContext>(registry,
                                        MLIRContext::Threading::DISABLED);
    ctx->loadAllAvailableDialects();
    handler = std::make_unique<ScopedDiagnosticHandler>(
        ctx.get(), [this](Diagnostic &d) {
          diagnostics += d.str();
          for (Diagnostic &n : d.getNotes())
            diagnostics += "\n  note: " + n.str();
          return success();
        });
    loc = UnknownLoc::get(ctx.get());
    module = ModuleOp::create(loc);
    b = std::make_unique<OpBuilder>(ctx.get());
    b->setInsertionPointToEnd(module->getBody());
  }

  MLIRContext *context() { return ctx.get(); }

  void setLoc(const std::string &file, unsigned line, unsigned col) {
    loc = FileLineColLoc::get(ctx.get(), file, line, col);
  }

  // Types ------------------------------------------------------------------
  Type scalarType(const std::string &name) {
    MLIRContext *c = ctx.get();
    if (name == "f32")
      return Float32Type::get(c);
    if (name == "f64")
      return Float64Type::get(c);
    if (name == "f16")
      return Float16Type::get(c);
    if (name == "bf16")
      return BFloat16Type::get(c);
    if (name == "index")
      return IndexType::get(c);
    if (name.size() > 1 && name[0] == 'i')
      return IntegerType::get(c, std::stoi(name.substr(1)));
    throw IRError("unknown scalar type '" + name + "'");
  }
  Type tileType(const std::vector<int64_t> &shape, Type elt) {
    for (int64_t d : shape)
      if (d <= 0)
        throw IRError("tile dimensions must be positive, got " +
                      std::to_string(d));
    return RankedTensorType::get(shape, elt);
  }
  Type ptrType(Type elt) { return kd::PtrType::get(ctx.get(), elt); }
  Type viewType(unsigned rank, Type elt) {
    return kd::ViewType::get(ctx.get(), rank, elt);
  }

  // Kernels --------------------------------------------------------------------
  std::vector<Value> beginKernel(const std::string &name,
                                 const std::vector<Type> &args,
                                 const std::vector<std::string> &names,
                                 unsigned gridRank) {
    auto fn = kd::FuncOp::create(*b, loc, name,
                                   b->getFunctionType(args, {}));
    fn->setAttr("grid_rank", b->getI64IntegerAttr(gridRank));
    for (size_t i = 0; i < names.size() && i < args.size(); ++i)
      fn.setArgAttr(i, "kiln.name", b->getStringAttr(names[i]));
    Block *entry = fn.addEntryBlock();
    b->setInsertionPointToStart(entry);
    kernel = fn;
    return std::vector<Value>(entry->args_begin(), entry->args_end());
  }
  /// A func.func (a function to fuse into a library kernel, e.g. mask_mod);
  /// its result types are set by endFunction.
  std::vector<Value> beginFunction(const std::string &name,
                                   const std::vector<Type> &args) {
    auto fn = func::FuncOp::create(*b, loc, name, b->getFunctionType(args, {}));
    Block *entry = fn.addEntryBlock();
    b->setInsertionPointToStart(entry);
    function = fn;
    return std::vector<Value>(entry->args_begin(), entry->args_end());
  }
  void endFunction(const std::vector<Value> &results) {
    func::ReturnOp::create(*b, loc, results);
    SmallVector<Type> types;
    for (Value v : results)
      types.push_back(v.getType());
    function.setFunctionType(b->getFunctionType(function.getArgumentTypes(), types));
    b->setInsertionPointToEnd(module->getBody());
    if (failed(verify(*module)))
      throw IRError(takeDiagnostics("the function does not verify"));
  }

  void endKernel() {
    kd::ReturnOp::create(*b, loc);
    b->setInsertionPointToEnd(module->getBody());
    if (failed(verify(*module)))
      throw IRError(takeDiagnostics("the kernel does not verify"));
  }
  std::string text(bool withLocations) {
    std::string s;
    llvm::raw_string_ostream os(s);
    OpPrintingFlags flags;
    if (withLocations)
      flags.enableDebugInfo();
    module->print(os, flags);
    return s;
  }

  // Op creation with per-op verification -----------------------------------------
  template <typename OpTy, typename... Args> Value make(Args &&...args) {
    auto op = OpTy::create(*b, loc, std::forward<Args>(args)...);
    check(op.getOperation());
    return op->getNumResults() ? op->getResult(0) : Value();
  }
  void check(Operation *op) {
    if (failed(mlir::verify(op, /*verifyRecursively=*/false))) {
      op->erase();
      throw IRError(takeDiagnostics("invalid operation"));
    }
  }
  std::string takeDiagnostics(const std::string &fallback) {
    std::string d = diagnostics.empty() ? fallback : diagnostics;
    diagnostics.clear();
    return d;
  }

  Value constant(py::object value, Type type) {
    if (isa<FloatType>(type))
      return make<arith::ConstantOp>(
          cast<TypedAttr>(b->getFloatAttr(type, value.cast<double>())));
    if (type.isIndex())
      return make<arith::ConstantOp>(
          cast<TypedAttr>(b->getIndexAttr(value.cast<int64_t>())));
    if (auto it = dyn_cast<IntegerType>(type)) {
      if (it.getWidth() == 1)
        return make<arith::ConstantOp>(
            cast<TypedAttr>(b->getBoolAttr(value.cast<bool>())));
      return make<arith::ConstantOp>(
          cast<TypedAttr>(b->getIntegerAttr(type, value.cast<int64_t>())));
    }
    if (auto tt = dyn_cast<RankedTensorType>(type)) {
      Type e = tt.getElementType();
      Attribute a;
      if (isa<FloatType>(e))
        a = b->getFloatAttr(e, value.cast<double>());
      else if (e.isInteger(1))
        a = b->getBoolAttr(value.cast<bool>());
      else
        a = b->getIntegerAttr(e, value.cast<int64_t>());
      return make<arith::ConstantOp>(
          cast<TypedAttr>(SplatElementsAttr::get(tt, a)));
    }
    throw IRError("cannot make a constant of type " + str(type));
  }

  /// The high half of the unsigned product of two i32 or i64 values
  /// (tiles or scalars of one type): through i64 for i32; for i64 from
  /// 32-bit limbs (no i128 tiles), exact.
  Value umulhi(Value l, Value r) {
    Type t = l.getType();
    auto it = dyn_cast<IntegerType>(getElementTypeOrSelf(t));
    if (t != r.getType() || !it || (it.getWidth() != 32 && it.getWidth() != 64))
      throw IRError("umulhi takes two int32 or two int64 values of one shape");
    auto like = [&](Type elt) -> Type {
      if (auto shaped = dyn_cast<ShapedType>(t))
        return shaped.clone(elt);
      return elt;
    };
    auto splat = [&](Type type, int64_t v) -> Value {
      Type e = getElementTypeOrSelf(type);
      TypedAttr a = b->getIntegerAttr(e, v);
      if (auto tt = dyn_cast<RankedTensorType>(type))
        a = SplatElementsAttr::get(tt, a);
      return make<arith::ConstantOp>(a);
    };
    Type i64 = like(b->getI64Type());
    if (it.getWidth() == 32) {
      Value p = make<arith::MulIOp>(make<arith::ExtUIOp>(i64, l),
                                    make<arith::ExtUIOp>(i64, r));
      return make<arith::TruncIOp>(t, make<arith::ShRUIOp>(p, splat(i64, 32)));
    }
    Value c32 = splat(i64, 32), lowMask = splat(i64, 0xffffffffLL);
    Value a0 = make<arith::AndIOp>(l, lowMask), a1 = make<arith::ShRUIOp>(l, c32);
    Value b0 = make<arith::AndIOp>(r, lowMask), b1 = make<arith::ShRUIOp>(r, c32);
    Value p00 = make<arith::MulIOp>(a0, b0), p01 = make<arith::MulIOp>(a0, b1);
    Value p10 = make<arith::MulIOp>(a1, b0), p11 = make<arith::MulIOp>(a1, b1);
    Value mid = make<arith::AddIOp>(
        make<arith::AddIOp>(make<arith::ShRUIOp>(p00, c32),
                            make<arith::AndIOp>(p01, lowMask)),
        make<arith::AndIOp>(p10, lowMask));
    Value hi = make<arith::AddIOp>(p11, make<arith::ShRUIOp>(p01, c32));
    hi = make<arith::AddIOp>(hi, make<arith::ShRUIOp>(p10, c32));
    return make<arith::AddIOp>(hi, make<arith::ShRUIOp>(mid, c32));
  }

  Value binary(const std::string &op, Value l, Value r) {
    if (op == "addf") return make<arith::AddFOp>(l, r);
    if (op == "subf") return make<arith::SubFOp>(l, r);
    if (op == "mulf") return make<arith::MulFOp>(l, r);
    if (op == "divf") return make<arith::DivFOp>(l, r);
    if (op == "remf") return make<arith::RemFOp>(l, r);
    if (op == "maximumf") return make<arith::MaximumFOp>(l, r);
    if (op == "minimumf") return make<arith::MinimumFOp>(l, r);
    if (op == "addi") return make<arith::AddIOp>(l, r);
    if (op == "subi") return make<arith::SubIOp>(l, r);
    if (op == "muli") return make<arith::MulIOp>(l, r);
    if (op == "divsi") return make<arith::DivSIOp>(l, r);
    if (op == "floordivsi") return make<arith::FloorDivSIOp>(l, r);
    if (op == "remsi") return make<arith::RemSIOp>(l, r);
    if (op == "maxsi") return make<arith::MaxSIOp>(l, r);
    if (op == "minsi") return make<arith::MinSIOp>(l, r);
    if (op == "andi") return make<arith::AndIOp>(l, r);
    if (op == "ori") return make<arith::OrIOp>(l, r);
    if (op == "xori") return make<arith::XOrIOp>(l, r);
    if (op == "shli") return make<arith::ShLIOp>(l, r);
    if (op == "shrsi") return make<arith::ShRSIOp>(l, r);
    if (op == "shrui") return make<arith::ShRUIOp>(l, r);
    if (op == "powf") return make<math::PowFOp>(l, r);
    if (op == "atan2") return make<math::Atan2Op>(l, r);
    if (op == "copysign") return make<math::CopySignOp>(l, r);
    if (op == "maxnumf") return make<arith::MaxNumFOp>(l, r);
    if (op == "minnumf") return make<arith::MinNumFOp>(l, r);
    throw IRError("unknown binary op '" + op + "'");
  }

  Value cmp(const std::string &pred, Value l, Value r) {
    if (isa<FloatType>(getElementTypeOrSelf(l.getType()))) {
      auto p = arith::symbolizeCmpFPredicate(pred);
      if (!p)
        throw IRError("unknown float comparison '" + pred + "'");
      return make<arith::CmpFOp>(*p, l, r);
    }
    auto p = arith::symbolizeCmpIPredicate(pred);
    if (!p)
      throw IRError("unknown integer comparison '" + pred + "'");
    return make<arith::CmpIOp>(*p, l, r);
  }

  Value unary(const std::string &op, Value x) {
    if (op == "exp") return make<math::ExpOp>(x);
    if (op == "exp2") return make<math::Exp2Op>(x);
    if (op == "log") return make<math::LogOp>(x);
    if (op == "log2") return make<math::Log2Op>(x);
    if (op == "sqrt") return make<math::SqrtOp>(x);
    if (op == "rsqrt") return make<math::RsqrtOp>(x);
    if (op == "tanh") return make<math::TanhOp>(x);
    if (op == "sin") return make<math::SinOp>(x);
    if (op == "cos") return make<math::CosOp>(x);
    if (op == "erf") return make<math::ErfOp>(x);
    if (op == "absf") return make<math::AbsFOp>(x);
    if (op == "absi") return make<math::AbsIOp>(x);
    if (op == "floor") return make<math::FloorOp>(x);
    if (op == "ceil") return make<math::CeilOp>(x);
    if (op == "negf") return make<arith::NegFOp>(x);
    // (f32 only: polynomials or expansions, ApproximateMath.cpp.)
    if (op == "asin") return make<math::AsinOp>(x);
    if (op == "acos") return make<math::AcosOp>(x);
    if (op == "atan") return make<math::AtanOp>(x);
    if (op == "sinh") return make<math::SinhOp>(x);
    if (op == "cosh") return make<math::CoshOp>(x);
    if (op == "tan") return make<math::TanOp>(x);
    if (op == "log1p") return make<math::Log1pOp>(x);
    if (op == "expm1") return make<math::ExpM1Op>(x);
    if (op == "cbrt") return make<math::CbrtOp>(x);
    if (op == "erfc") return make<math::ErfcOp>(x);
    if (op == "log10") return make<math::Log10Op>(x);
    if (op == "round") return make<math::RoundOp>(x);
    if (op == "roundeven") return make<math::RoundEvenOp>(x);
    throw IRError("unknown unary op '" + op + "'");
  }

  Value castTo(Value x, Type to) {
    Type from = getElementTypeOrSelf(x.getType());
    Type toElt = getElementTypeOrSelf(to);
    if (from == toElt)
      return x;
    bool fF = isa<FloatType>(from), tF = isa<FloatType>(toElt);
    // To bool: nonzero is true (NumPy's astype(bool); NaN too), not the
    // low bit of an integer or a float converted to a 1-bit integer.
    if (toElt.isInteger(1)) {
      Value zero = make<arith::ConstantOp>(
          x.getType(), cast<TypedAttr>(b->getZeroAttr(x.getType())));
      return fF ? make<arith::CmpFOp>(arith::CmpFPredicate::UNE, x, zero)
                : make<arith::CmpIOp>(arith::CmpIPredicate::ne, x, zero);
    }
    if (fF && tF) {
      unsigned fw = from.getIntOrFloatBitWidth(),
               tw = toElt.getIntOrFloatBitWidth();
      if (fw == tw) { // f16 <-> bf16: exactly to f32, then one rounding
        Type f32 = b->getF32Type();
        if (auto shaped = dyn_cast<ShapedType>(x.getType()))
          f32 = shaped.clone(f32);
        return make<arith::TruncFOp>(to, make<arith::ExtFOp>(f32, x));
      }
      return fw < tw ? make<arith::ExtFOp>(to, x) : make<arith::TruncFOp>(to, x);
    }
    if (from.isIndex() || toElt.isIndex()) {
      if (tF) {
        Value i = make<arith::IndexCastOp>(b->getI64Type(), x);
        return make<arith::SIToFPOp>(to, i);
      }
      return make<arith::IndexCastOp>(to, x);
    }
    if (!fF && !tF) {
      unsigned fw = from.getIntOrFloatBitWidth(),
               tw = toElt.getIntOrFloatBitWidth();
      if (fw < tw)
        return fw == 1 ? make<arith::ExtUIOp>(to, x)
                       : make<arith::ExtSIOp>(to, x);
      return make<arith::TruncIOp>(to, x);
    }
    if (fF) // saturating, NaN to 0: the pipelines' SaturateFloatToInt
      return make<arith::FPToSIOp>(to, x);
    if (from.isInteger(1))
      return make<arith::UIToFPOp>(to, x);
    return make<arith::SIToFPOp>(to, x);
  }

  // Control flow -----------------------------------------------------------------
  py::tuple forBegin(Value lb, Value ub, Value step,
                     const std::vector<Value> &inits, bool overlap) {
    auto op = scf::ForOp::create(*b, loc, lb, ub, step, inits);
    if (overlap) // kl.range(overlap=True): see GPUOverlap.cpp
      op->setAttr("kiln.overlap", UnitAttr::get(op.getContext()));
    stack.push_back(b->saveInsertionPoint());
    Block *body = op.getBody();
    if (!body->empty() && body->back().hasTrait<OpTrait::IsTerminator>())
      b->setInsertionPoint(&body->back());
    else
      b->setInsertionPointToEnd(body);
    regionOps.push_back(op);
    std::vector<Value> iters(op.getRegionIterArgs().begin(),
                             op.getRegionIterArgs().end());
    return py::make_tuple(op.getInductionVar(), iters);
  }
  std::vector<Value> forEnd(const std::vector<Value> &yields) {
    auto op = cast<scf::ForOp>(regionOps.back());
    Block *body = op.getBody();
    if (!body->empty() && isa<scf::YieldOp>(body->back()))
      body->back().erase();
    b->setInsertionPointToEnd(body);
    scf::YieldOp::create(*b, loc, yields);
    b->restoreInsertionPoint(stack.back());
    stack.pop_back();
    regionOps.pop_back();
    if (failed(mlir::verify(op)))
      throw IRError(takeDiagnostics("invalid loop"));
    return std::vector<Value>(op->result_begin(), op->result_end());
  }

  void ifBegin(Value cond, const std::vector<Type> &resultTypes) {
    auto op = scf::IfOp::create(*b, loc, resultTypes, cond,
                                /*withElseRegion=*/true);
    stack.push_back(b->saveInsertionPoint());
    regionOps.push_back(op);
    Block *then = &op.getThenRegion().front();
    if (!then->empty() && then->back().hasTrait<OpTrait::IsTerminator>())
      then->back().erase();
    b->setInsertionPointToEnd(then);
  }
  void ifElse(const std::vector<Value> &thenYields) {
    auto op = cast<scf::IfOp>(regionOps.back());
    scf::YieldOp::create(*b, loc, thenYields);
    Block *els = &op.getElseRegion().front();
    if (!els->empty() && els->back().hasTrait<OpTrait::IsTerminator>())
      els->back().erase();
    b->setInsertionPointToEnd(els);
  }
  std::vector<Value> ifEnd(const std::vector<Value> &elseYields) {
    auto op = cast<scf::IfOp>(regionOps.back());
    scf::YieldOp::create(*b, loc, elseYields);
    b->restoreInsertionPoint(stack.back());
    stack.pop_back();
    regionOps.pop_back();
    if (failed(mlir::verify(op)))
      throw IRError(takeDiagnostics("invalid if"));
    return std::vector<Value>(op->result_begin(), op->result_end());
  }

  std::vector<Value> whileBegin(const std::vector<Value> &inits) {
    std::vector<Type> types;
    for (Value v : inits)
      types.push_back(v.getType());
    auto op = scf::WhileOp::create(*b, loc, types, inits);
    stack.push_back(b->saveInsertionPoint());
    regionOps.push_back(op);
    Block *before = b->createBlock(&op.getBefore());
    std::vector<Value> args;
    for (Type t : types)
      args.push_back(before->addArgument(t, loc));
    b->setInsertionPointToEnd(before);
    return args;
  }
  std::vector<Value> whileBody(Value cond, const std::vector<Value> &carried) {
    auto op = cast<scf::WhileOp>(regionOps.back());
    scf::ConditionOp::create(*b, loc, cond, carried);
    Block *after = b->createBlock(&op.getAfter());
    std::vector<Value> args;
    for (Value v : carried)
      args.push_back(after->addArgument(v.getType(), loc));
    b->setInsertionPointToEnd(after);
    return args;
  }
  std::vector<Value> whileEnd(const std::vector<Value> &yields) {
    auto op = cast<scf::WhileOp>(regionOps.back());
    scf::YieldOp::create(*b, loc, yields);
    b->restoreInsertionPoint(stack.back());
    stack.pop_back();
    regionOps.pop_back();
    if (failed(mlir::verify(op)))
      throw IRError(takeDiagnostics("invalid while loop"));
    return std::vector<Value>(op->result_begin(), op->result_end());
  }

  /// Discards everything built so far (after an error).
  void abandon() {
    stack.clear();
    regionOps.clear();
    module->getBody()->clear();
    b->setInsertionPointToEnd(module->getBody());
  }

  OpBuilder &builder() { return *b; }
  Location location() { return loc; }
  ModuleOp getModule() { return *module; }

  static std::string str(Type t) {
    std::string s;
    llvm::raw_string_ostream os(s);
    os << t;
    return s;
  }

private:
  std::unique_ptr<MLIRContext> ctx;
  std::unique_ptr<ScopedDiagnosticHandler> handler;
  std::string diagnostics;
  Location loc = Location(UnknownLoc());
  OwningOpRef<ModuleOp> module;
  std::unique_ptr<OpBuilder> b;
  kd::FuncOp kernel;
  func::FuncOp function;
  std::vector<OpBuilder::InsertPoint> stack;
  std::vector<Operation *> regionOps;
};

std::string typeStr(Type t) { return PyBuilder::str(t); }

/// The padding attribute of a load/gather (None: no attribute, zero).
TypedAttr paddingAttr(PyBuilder &p, Type tileType, const py::object &padding) {
  if (padding.is_none())
    return nullptr;
  Type e = cast<RankedTensorType>(tileType).getElementType();
  if (isa<FloatType>(e))
    return p.builder().getFloatAttr(e, padding.cast<double>());
  return p.builder().getIntegerAttr(e, padding.cast<int64_t>());
}

} // namespace

namespace {
/// sm_90a: TMA loads unless $KILN_TMA is 0 (an escape hatch while TMA is
/// checked on the emulator only; kilnc has --no-tma).
bool tmaFromEnvironment() {
  const char *v = std::getenv("KILN_TMA");
  return !(v && std::string(v) == "0");
}
/// 128B-swizzled wgmma operand stages (sm_90a) and XOR-swizzled mma.sync
/// operand rows unless $KILN_SWIZZLE is 0 (the same kind of escape hatch;
/// kilnc has --no-swizzle).
bool swizzleFromEnvironment() {
  const char *v = std::getenv("KILN_SWIZZLE");
  return !(v && std::string(v) == "0");
}
/// sm_90a: kiln.overlap marks honoured unless $KILN_OVERLAP is 0 (kilnc has
/// --no-overlap).
bool overlapFromEnvironment() {
  const char *v = std::getenv("KILN_OVERLAP");
  return !(v && std::string(v) == "0");
}
/// sm_90a: tensor maps encoded by the runtime at launch unless
/// $KILN_TMA_MAPS is "device" (kilnc has --device-maps).
/// GPU targets: gathers by loaded or computed indices pipelined unless
/// $KILN_PIPELINE_GATHERS is 0 (kilnc has --no-pipelined-gathers).
bool pipelineGathersFromEnvironment() {
  const char *v = std::getenv("KILN_PIPELINE_GATHERS");
  return !(v && std::string(v) == "0");
}
/// sm_90a: fp8 dots on wgmma's fp8 forms unless $KILN_FP8_WGMMA is 0
/// (kilnc has --no-fp8-wgmma).
bool fp8WgmmaFromEnvironment() {
  const char *v = std::getenv("KILN_FP8_WGMMA");
  return !(v && std::string(v) == "0");
}
/// sm_90a: warpgroups take turns at attention's wgmma groups unless
/// $KILN_PINGPONG is 0 (kilnc has --no-pingpong).
bool pingpongFromEnvironment() {
  const char *v = std::getenv("KILN_PINGPONG");
  return !(v && std::string(v) == "0");
}
bool hostMapsFromEnvironment() {
  const char *v = std::getenv("KILN_TMA_MAPS");
  return !(v && std::string(v) == "device");
}
} // namespace

namespace kiln::python {
void bindCompiler(py::module &m) {
  py::register_exception<IRError>(m, "IRError", PyExc_ValueError);

  py::class_<Type>(m, "Type")
      .def("__str__", &typeStr)
      .def("__repr__", [](Type t) { return "Type(" + typeStr(t) + ")"; })
      .def("__eq__", [](Type a, Type b) { return a == b; })
      .def("__hash__", [](Type t) { return hash_value(t); })
      .def_property_readonly("is_tile",
                             [](Type t) { return isa<RankedTensorType>(t); })
      .def_property_readonly("shape",
                             [](Type t) {
                               if (auto tt = dyn_cast<RankedTensorType>(t))
                                 return std::vector<int64_t>(
                                     tt.getShape().begin(), tt.getShape().end());
                               return std::vector<int64_t>();
                             })
      .def_property_readonly("element",
                             [](Type t) { return getElementTypeOrSelf(t); })
      .def_property_readonly("is_float", [](Type t) {
        return isa<FloatType>(getElementTypeOrSelf(t));
      });

  py::class_<Value>(m, "Value")
      .def_property_readonly("type", [](Value v) { return v.getType(); })
      .def("__repr__", [](Value v) { return "Value(" + typeStr(v.getType()) + ")"; });

  py::class_<PyBuilder>(m, "Builder")
      .def(py::init<>())
      .def("set_loc", &PyBuilder::setLoc)
      .def("scalar_type", &PyBuilder::scalarType)
      .def("tile_type", &PyBuilder::tileType)
      .def("ptr_type", &PyBuilder::ptrType)
      .def("view_type", &PyBuilder::viewType)
      .def("begin_kernel", &PyBuilder::beginKernel)
      .def("end_kernel", &PyBuilder::endKernel)
      .def("begin_function", &PyBuilder::beginFunction)
      .def("end_function", &PyBuilder::endFunction)
      .def("text", &PyBuilder::text, py::arg("with_locations") = true)
      .def("abandon", &PyBuilder::abandon)
      .def("constant", &PyBuilder::constant)
      .def("binary", &PyBuilder::binary)
      .def("cmp", &PyBuilder::cmp)
      .def("unary", &PyBuilder::unary)
      .def("cast", &PyBuilder::castTo)
      .def("select",
           [](PyBuilder &p, Value c, Value t, Value f) {
             return p.make<arith::SelectOp>(c, t, f);
           })
      .def("umulhi", &PyBuilder::umulhi)
      .def("int_to_ptr",
           [](PyBuilder &p, Value addr, Type ptrType) {
             if (!isa<kd::PtrType>(ptrType) || !addr.getType().isInteger(64))
               throw IRError("int_to_ptr takes an i64 address and a pointer type");
             return p.make<kd::IntToPtrOp>(ptrType, addr);
           })
      .def("gather_elements",
           [](PyBuilder &p, Value src, Value indices, int axis, Type type) {
             return p.make<kd::GatherElementsOp>(type, src, indices, axis);
           })
      .def("bitcast",
           [](PyBuilder &p, Value x, Type to) {
             return p.make<arith::BitcastOp>(to, x);
           })
      .def("fma",
           [](PyBuilder &p, Value a, Value b, Value c) {
             return p.make<math::FmaOp>(a, b, c);
           })
      .def("program_id",
           [](PyBuilder &p, int axis) {
             return p.make<kd::ProgramIdOp>(static_cast<kd::Axis>(axis));
           })
      .def("num_programs",
           [](PyBuilder &p, int axis) {
             return p.make<kd::NumProgramsOp>(static_cast<kd::Axis>(axis));
           })
      .def("clock", [](PyBuilder &p) { return p.make<kd::ClockOp>(); })
      .def("processor_id", [](PyBuilder &p) { return p.make<kd::ProcessorIdOp>(); })
      .def("arange",
           [](PyBuilder &p, int64_t start, int64_t end, Type type) {
             return p.make<kd::ArangeOp>(type, start, end);
           })
      .def("splat",
           [](PyBuilder &p, Value v, Type type) {
             return p.make<kd::SplatOp>(type, v);
           })
      .def("broadcast",
           [](PyBuilder &p, Value v, Type type) {
             return p.make<kd::BroadcastOp>(type, v);
           })
      .def("expand_dims",
           [](PyBuilder &p, Value v, int axis) {
             auto t = dyn_cast<RankedTensorType>(v.getType());
             if (!t)
               throw IRError("expand_dims needs a tile, got a scalar");
             SmallVector<int64_t> shape(t.getShape());
             if (axis < 0 || axis > t.getRank())
               throw IRError("expand_dims axis out of range");
             shape.insert(shape.begin() + axis, 1);
             return p.make<kd::ExpandDimsOp>(
                 RankedTensorType::get(shape, t.getElementType()), v,
                 static_cast<int32_t>(axis));
           })
      .def("reshape",
           [](PyBuilder &p, Value v, Type type) {
             return p.make<kd::ReshapeOp>(type, v);
           })
      .def("trans",
           [](PyBuilder &p, Value v, std::vector<int32_t> order, Type type) {
             if (!isa<RankedTensorType>(v.getType()))
               throw IRError("trans needs a tile");
             return p.make<kd::TransOp>(type, v, order);
           })
      .def("slice",
           [](PyBuilder &p, Value v, std::vector<int64_t> offsets,
              std::vector<int64_t> sizes) {
             auto t = dyn_cast<RankedTensorType>(v.getType());
             if (!t || t.getRank() != static_cast<int64_t>(offsets.size()) ||
                 offsets.size() != sizes.size())
               throw IRError("slice needs a tile and an offset and a size per dimension");
             std::vector<int64_t> strides(sizes.size(), 1);
             return p.make<tensor::ExtractSliceOp>(
                 RankedTensorType::get(sizes, t.getElementType()), v, ValueRange{},
                 ValueRange{}, ValueRange{}, offsets, sizes, strides);
           })
      .def("make_view",
           [](PyBuilder &p, Value ptr, std::vector<Value> sizes,
              std::vector<Value> strides, Type type) {
             return p.make<kd::MakeViewOp>(type, ptr, sizes, strides);
           })
      .def("load",
           [](PyBuilder &p, Value view, std::vector<Value> offsets, Type type,
              py::object padding) {
             if (!isa<RankedTensorType>(type) || !isa<kd::ViewType>(view.getType()))
               throw IRError("load needs a view and a tile type");
             return p.make<kd::LoadOp>(type, view, offsets, paddingAttr(p, type, padding),
                                       nullptr);
           })
      .def("store",
           [](PyBuilder &p, Value value, Value view,
              std::vector<Value> offsets, bool streaming) {
             p.make<kd::StoreOp>(value, view, offsets, nullptr, streaming);
           },
           py::arg("value"), py::arg("view"), py::arg("offsets"),
           py::arg("streaming") = false)
      .def("atomic_add",
           [](PyBuilder &p, Value value, Value view,
              std::vector<Value> offsets) {
             return p.make<kd::AtomicAddOp>(value, view, offsets);
           })
      .def("gather",
           [](PyBuilder &p, Value view, Value indices,
              std::vector<Value> offsets, Type type, py::object padding) {
             if (!isa<RankedTensorType>(type) || !isa<kd::ViewType>(view.getType()) ||
                 !isa<RankedTensorType>(indices.getType()))
               throw IRError("gather needs a view, an index tile and a tile type");
             return p.make<kd::GatherOp>(type, view, indices, offsets,
                                         paddingAttr(p, type, padding));
           })
      .def("scatter",
           [](PyBuilder &p, Value value, Value view, Value indices,
              std::vector<Value> offsets) {
             p.make<kd::ScatterOp>(value, view, indices, offsets);
           })
      .def("atomic_rmw",
           [](PyBuilder &p, const std::string &kind, Value value, Value view,
              std::vector<Value> offsets) {
             auto k = kd::symbolizeAtomicKind(kind);
             if (!k)
               throw IRError("unknown atomic '" + kind + "'");
             return p.make<kd::AtomicRMWOp>(*k, value, view, offsets);
           })
      .def("atomic_cas",
           [](PyBuilder &p, Value cmp, Value value, Value view,
              std::vector<Value> offsets) {
             return p.make<kd::AtomicCASOp>(cmp, value, view, offsets);
           })
      .def("device_assert",
           [](PyBuilder &p, Value cond, const std::string &message) {
             p.make<kd::AssertOp>(cond, message);
           })
      .def("device_print",
           [](PyBuilder &p, const std::string &prefix,
              std::vector<Value> args, bool hex) {
             p.make<kd::PrintOp>(prefix, args, hex);
           })
      .def("scatter_rmw",
           [](PyBuilder &p, const std::string &kind, Value value, Value view,
              Value indices, std::vector<Value> offsets) {
             auto k = kd::symbolizeAtomicKind(kind);
             if (!k)
               throw IRError("unknown atomic '" + kind + "'");
             return p.make<kd::ScatterRMWOp>(*k, value, view, indices, offsets);
           })
      .def("scatter_add",
           [](PyBuilder &p, Value value, Value view, Value indices,
              std::vector<Value> offsets) {
             return p.make<kd::ScatterAddOp>(value, view, indices, offsets);
           })
      .def("dot",
           [](PyBuilder &p, Value a, Value b, Value acc) {
             if (!isa<RankedTensorType>(a.getType()) || !isa<RankedTensorType>(b.getType()) ||
                 !isa<RankedTensorType>(acc.getType()))
               throw IRError("dot needs tiles");
             return p.make<kd::DotOp>(acc.getType(), a, b, acc);
           })
      .def("dot_fp8",
           [](PyBuilder &p, Value a, Value b, Value acc, const std::string &fa,
              const std::string &fb) {
             if (!isa<RankedTensorType>(a.getType()) || !isa<RankedTensorType>(b.getType()) ||
                 !isa<RankedTensorType>(acc.getType()))
               throw IRError("dot needs tiles");
             MLIRContext *ctx = acc.getContext();
             return p.make<kd::DotOp>(acc.getType(), a, b, acc, StringAttr::get(ctx, fa),
                                      StringAttr::get(ctx, fb));
           })
      .def("reduce",
           [](PyBuilder &p, const std::string &kind, Value v, int axis,
              Type type) {
             if (!isa<RankedTensorType>(v.getType()))
               throw IRError("reduce needs a tile");
             auto k = kd::symbolizeReduceKind(kind);
             if (!k)
               throw IRError("unknown reduction '" + kind + "'");
             return p.make<kd::ReduceOp>(type, *k, v,
                                           static_cast<int32_t>(axis));
           })
      .def("scan",
           [](PyBuilder &p, const std::string &kind, Value v, int axis,
              bool reverse) {
             if (!isa<RankedTensorType>(v.getType()))
               throw IRError("scan needs a tile");
             auto k = kd::symbolizeReduceKind(kind);
             if (!k)
               throw IRError("unknown scan '" + kind + "'");
             return p.make<kd::ScanOp>(v.getType(), *k, v,
                                         static_cast<int32_t>(axis), reverse);
           })
      .def("extract",
           [](PyBuilder &p, Value tile, std::vector<Value> idx) {
             auto t = dyn_cast<RankedTensorType>(tile.getType());
             if (!t || t.getRank() != static_cast<int64_t>(idx.size()))
               throw IRError("extract needs a tile and one index per dimension");
             return p.make<tensor::ExtractOp>(tile, idx);
           })
      .def("for_begin", &PyBuilder::forBegin, py::arg("lb"), py::arg("ub"),
           py::arg("step"), py::arg("inits"), py::arg("overlap") = false)
      .def("for_end", &PyBuilder::forEnd)
      .def("if_begin", &PyBuilder::ifBegin)
      .def("if_else", &PyBuilder::ifElse)
      .def("if_end", &PyBuilder::ifEnd)
      .def("while_begin", &PyBuilder::whileBegin)
      .def("while_body", &PyBuilder::whileBody)
      .def("while_end", &PyBuilder::whileEnd);

  // Compilation: the same JIT and cache as C++.
  py::class_<::kiln::JIT>(m, "JIT")
      .def_static(
          "create",
          [](const std::string &target, const std::string &cacheDir,
             int numThreads) {
            ::kiln::JITOptions o;
            o.target = target;
            o.cacheDir = cacheDir;
            o.numThreads = numThreads;
            auto j = ::kiln::JIT::create(o);
            if (!j)
              throw std::runtime_error(llvm::toString(j.takeError()));
            return std::move(*j);
          },
          py::arg("target") = "host", py::arg("cache_dir") = "",
          py::arg("num_threads") = 0)
      .def(
          "compile",
          [](::kiln::JIT &jit, const std::string &source,
             const std::string &name, unsigned numWarps, unsigned numStages) {
            ::kiln::CompileOptions options;
            // GPU targets (and emu-sm_XY) only.
            options.numWarps = numWarps;
            options.numStages = numStages;
            options.tma = tmaFromEnvironment();
            options.swizzle = swizzleFromEnvironment();
            options.overlap = overlapFromEnvironment();
            options.hostMaps = hostMapsFromEnvironment();
            options.pipelineGathers = pipelineGathersFromEnvironment();
            options.fp8Wgmma = fp8WgmmaFromEnvironment();
            options.pingpong = pingpongFromEnvironment();
            llvm::Expected<std::shared_ptr<::kiln::Kernel>> k =
                std::shared_ptr<::kiln::Kernel>();
            {
              py::gil_scoped_release release;
              k = jit.compile(source, name, options);
            }
            if (!k)
              throw IRError(llvm::toString(k.takeError()));
            return ::kiln::python::wrapKernel(*k, jit.getRuntime());
          },
          py::arg("source"), py::arg("name"), py::arg("num_warps") = 4,
          py::arg("num_stages") = 2,
          // The kernel launches on the JIT's runtime (its thread pool): the
          // JIT lives as long as the kernel (it was freed under it).
          py::keep_alive<0, 1>())
      .def_property_readonly("target",
                             [](::kiln::JIT &j) { return j.getTarget().name; })
      .def_property_readonly("cache_dir", &::kiln::JIT::getCacheDir)
      .def_property_readonly("cache_limit", &::kiln::JIT::getCacheLimit)
      .def("disk_cache_usage", &::kiln::JIT::diskCacheUsage,
           "(entries, bytes) of the disk cache")
      .def("clear_disk_cache", &::kiln::JIT::clearDiskCache,
           "removes the disk cache's entries and temporary files; returns how many")
      .def_property_readonly("stats", [](::kiln::JIT &j) {
        py::dict d;
        d["memory_hits"] = j.getStats().memoryHits.load();
        d["disk_hits"] = j.getStats().diskHits.load();
        d["compiles"] = j.getStats().compiles.load();
        d["corrupt_entries"] = j.getStats().corruptEntries.load();
        d["disk_write_failures"] = j.getStats().diskWriteFailures.load();
        d["evictions"] = j.getStats().evictions.load();
        return d;
      });

  m.def(
      "build_op_source",
      [](const std::string &name, const std::map<std::string, std::string> &config,
         const std::string &mods) {
        auto src = ::kiln::ops::buildOpSource(name, config, mods);
        if (!src)
          throw IRError(llvm::toString(src.takeError()));
        return *src;
      },
      py::arg("name"), py::arg("config") = std::map<std::string, std::string>(),
      py::arg("mods") = "",
      "The kiln IR of an operator of the library (see docs/ops.md); `mods` holds "
      "functions to fuse into it (e.g. func.func @mask_mod).");
  m.def(
      "gpu_chips",
      [] {
        std::vector<std::string> names;
        for (const ::kiln::GPUChip &c : ::kiln::kGPUChips)
          names.push_back(c.name);
        return names;
      },
      "The NVIDIA architectures the compiler targets (sm_80, ..., sm_90a, ...).");
  m.def("list_ops", [] {
    py::list out;
    for (const auto &op : ::kiln::ops::registry()) {
      py::dict params;
      for (const auto &p : op.params)
        params[py::str(p.name)] = p.defaultValue;
      out.append(py::make_tuple(op.name, op.summary, params));
    }
    return out;
  });
  m.def(
      "compile_stage",
      [](const std::string &source, const std::string &name,
         const std::string &stage, const std::string &target,
         unsigned numWarps, unsigned numStages) {
        mlir::DialectRegistry registry;
        ::kiln::registerDialects(registry);
        mlir::MLIRContext ctx(registry, MLIRContext::Threading::DISABLED);
        ::kiln::EmitKind kind;
        if (stage == "mlir" || stage == "llvm-mlir")
          kind = ::kiln::EmitKind::MLIR;
        else if (stage == "llvm")
          kind = ::kiln::EmitKind::LLVM;
        else if (stage == "asm")
          kind = ::kiln::EmitKind::Asm;
        else if (stage == "c-header")
          kind = ::kiln::EmitKind::CHeader;
        else
          throw std::invalid_argument("unknown stage '" + stage +
                                      "'; known: kiln, llvm-mlir, llvm, asm, "
                                      "c-header");
        ::kiln::CompileOptions o;
        o.target = target;
        o.numWarps = numWarps;
        o.numStages = numStages;
        o.tma = tmaFromEnvironment();
        o.swizzle = swizzleFromEnvironment();
        o.overlap = overlapFromEnvironment();
        o.hostMaps = hostMapsFromEnvironment();
        o.pipelineGathers = pipelineGathersFromEnvironment();
        o.fp8Wgmma = fp8WgmmaFromEnvironment();
        o.pingpong = pingpongFromEnvironment();
        auto r = ::kiln::compileSource(ctx, source, name, o, kind);
        if (!r)
          throw IRError(llvm::toString(r.takeError()));
        return r->bytes;
      },
      py::arg("source"), py::arg("name"), py::arg("stage"),
      py::arg("target") = "host", py::arg("num_warps") = 4,
      py::arg("num_stages") = 2);
}
} // namespace kiln::python
