//===- DebugOps.cpp - Debugging and timing ops on every target ------------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The debugging and timing ops, shared by the CPU and the GPU lowering.
//
// kiln.assert. On the CPU, a failing element calls the function whose
// address the runtime stores, at load, in the kernel's exported global
//
//   i64 kiln_assert_hook    (docs/bundle-format.md, "Kernel ABI")
//
// as hook(message, site, pid_x, pid_y, pid_z, thread = -1) with C strings
// for the message and the op's "file:line:col". The runtime's hook records
// the failure and does not return: it jumps back into the runtime, which
// stops the grid and fails the launch (runtime/src/Launch.cpp). A kernel
// without kiln.assert has no such global. In SIMT mode (the GPU targets) each
// thread checks its elements with cf.assert, which convert-gpu-to-nvvm turns
// into CUDA's __assertfail and the emulator (EmulateGPU.cpp) into its own
// report through the same hook.
//
// kiln.print. One printf per element on the CPU (then fflush), one
// gpu.printf (vprintf) per element in SIMT mode, scalars from thread 0.
//
// kiln.clock. llvm.readcyclecounter on the CPU, %clock64 (nvvm.read.ptx.
// sreg.clock64) in SIMT mode, which the emulator turns into its own clock.
// kiln.processor_id: libc's sched_getcpu on the CPU, %smid in SIMT mode (the
// emulator's: the host thread's core).
//
//===----------------------------------------------------------------------===//

#include "KernelLowering.h"
#include "SimtSupport.h"

#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "llvm/Support/xxhash.h"

using namespace mlir;
using namespace mlir::kiln;
using namespace mlir::kiln::detail;

namespace mlir::kiln::detail {

std::string siteOf(Location loc) {
  std::string text;
  llvm::raw_string_ostream os(text);
  FileLineColLoc fl;
  loc->walk([&](Location l) {
    if (auto f = dyn_cast<FileLineColLoc>(l)) {
      fl = f;
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  if (fl)
    os << fl.getFilename().getValue() << ":" << fl.getLine() << ":"
       << fl.getColumn();
  else
    loc.print(os);
  return text;
}

Value cStringPtr(OpBuilder &b, Location loc, ModuleOp module, StringRef text,
                 StringRef stem) {
  std::string data = text.str();
  data.push_back('\0');
  // Same text, same global: named by the text's hash (a collision, which
  // holds another text, takes the next free suffix).
  std::string name;
  uint64_t h = llvm::xxh3_64bits(data);
  for (unsigned i = 0;; ++i) {
    name = (stem + "_" + Twine::utohexstr(h) + (i ? "_" + Twine(i) : Twine())).str();
    auto g = module.lookupSymbol<LLVM::GlobalOp>(name);
    if (!g)
      break;
    if (auto s = dyn_cast_or_null<StringAttr>(g.getValueOrNull());
        s && s.getValue() == data)
      return LLVM::AddressOfOp::create(b, loc, g);
  }
  OpBuilder mb = OpBuilder::atBlockBegin(module.getBody());
  auto type = LLVM::LLVMArrayType::get(mb.getI8Type(), data.size());
  auto g = LLVM::GlobalOp::create(mb, loc, type, /*isConstant=*/true,
                                  LLVM::Linkage::Internal, name,
                                  mb.getStringAttr(data));
  return LLVM::AddressOfOp::create(b, loc, g);
}

Value assertHookAddress(OpBuilder &b, Location loc, ModuleOp module) {
  auto g = module.lookupSymbol<LLVM::GlobalOp>("kiln_assert_hook");
  if (!g) {
    OpBuilder mb = OpBuilder::atBlockBegin(module.getBody());
    g = LLVM::GlobalOp::create(mb, loc, mb.getI64Type(), /*isConstant=*/false,
                               LLVM::Linkage::External, "kiln_assert_hook",
                               mb.getI64IntegerAttr(0));
  }
  return LLVM::AddressOfOp::create(b, loc, g);
}

void callAssertHook(OpBuilder &b, Location loc, ModuleOp module,
                    Value message, Value site, ValueRange pid,
                    Value thread) {
  auto ptr = LLVM::LLVMPointerType::get(b.getContext());
  Value addr = assertHookAddress(b, loc, module);
  Value raw = LLVM::LoadOp::create(b, loc, b.getI64Type(), addr);
  // No hook (code loaded by something else than the runtime): stop here
  // rather than call address 0 or run what the assert guards.
  Value none = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, raw,
                                     arith::ConstantIntOp::create(b, loc, 0, 64));
  auto noHook = scf::IfOp::create(b, loc, TypeRange{}, none, false);
  {
    OpBuilder nb = noHook.getThenBodyBuilder();
    LLVM::Trap::create(nb, loc);
  }
  Value fn = LLVM::IntToPtrOp::create(b, loc, ptr, raw);
  Type i32 = b.getI32Type();
  auto fnType = LLVM::LLVMFunctionType::get(
      LLVM::LLVMVoidType::get(b.getContext()), {ptr, ptr, i32, i32, i32, i32});
  SmallVector<Value> args{fn, message, site};
  args.append(pid.begin(), pid.end());
  args.push_back(thread);
  LLVM::CallOp::create(b, loc, fnType, args);
}

void hostPrintf(OpBuilder &b, Location loc, ModuleOp module,
                StringRef format, ValueRange args) {
  MLIRContext *ctx = b.getContext();
  auto ptr = LLVM::LLVMPointerType::get(ctx);
  auto printfType = LLVM::LLVMFunctionType::get(IntegerType::get(ctx, 32),
                                                {ptr}, /*isVarArg=*/true);
  auto printf = module.lookupSymbol<LLVM::LLVMFuncOp>("printf");
  if (!printf) {
    OpBuilder mb = OpBuilder::atBlockBegin(module.getBody());
    printf = LLVM::LLVMFuncOp::create(mb, loc, "printf", printfType);
  }
  SmallVector<Value> operands{cStringPtr(b, loc, module, format, "kiln_fmt")};
  operands.append(args.begin(), args.end());
  LLVM::CallOp::create(b, loc, printf, operands);
}

void hostFlush(OpBuilder &b, Location loc, ModuleOp module) {
  MLIRContext *ctx = b.getContext();
  auto ptr = LLVM::LLVMPointerType::get(ctx);
  auto fflush = module.lookupSymbol<LLVM::LLVMFuncOp>("fflush");
  if (!fflush) {
    OpBuilder mb = OpBuilder::atBlockBegin(module.getBody());
    fflush = LLVM::LLVMFuncOp::create(
        mb, loc, "fflush",
        LLVM::LLVMFunctionType::get(IntegerType::get(ctx, 32), {ptr}));
  }
  Value null = LLVM::ZeroOp::create(b, loc, ptr);
  LLVM::CallOp::create(b, loc, fflush, ValueRange{null});
}

} // namespace mlir::kiln::detail

namespace {

/// Escapes `%` for a printf format.
std::string formatText(StringRef text) {
  std::string out;
  for (char c : text) {
    out.push_back(c);
    if (c == '%')
      out.push_back('%');
  }
  return out;
}

/// The printf argument and conversion for element `v` of type `elt`:
/// floats as f64 (%.9g, or %.17g for f64: either reads back exactly),
/// integers as i64 (signed; i1 as 0 / 1), or with `hex` the element's bits
/// as an unsigned i64.
std::pair<Value, std::string> printArgument(ImplicitLocOpBuilder &b, Value v,
                                            Type elt, bool hex) {
  Type i64 = b.getI64Type();
  unsigned bits = elt.getIntOrFloatBitWidth();
  if (hex) {
    if (isa<FloatType>(elt))
      v = arith::BitcastOp::create(b, b.getIntegerType(bits), v);
    if (bits < 64)
      v = arith::ExtUIOp::create(b, i64, v);
    return {v, "0x%llx"};
  }
  if (isa<FloatType>(elt)) {
    if (bits < 64)
      v = arith::ExtFOp::create(b, b.getF64Type(), v);
    return {v, bits == 64 ? "%.17g" : "%.9g"};
  }
  if (bits == 1)
    return {arith::ExtUIOp::create(b, i64, v), "%lld"};
  if (bits < 64)
    v = arith::ExtSIOp::create(b, i64, v);
  return {v, "%lld"};
}

} // namespace

void KernelLowering::failUnless(ImplicitLocOpBuilder &ib, Value ok, StringRef message,
                                Operation *siteOp) {
  if (simt) {
    cf::AssertOp::create(ib, ok, message);
    return;
  }
  // The CPU's report: the hook call when `ok` is false.
  // (From the op: a block being built may not be in its op yet.)
  auto module = siteOp->getParentOfType<ModuleOp>();
  Value bad = arith::XOrIOp::create(ib, ok, arith::ConstantIntOp::create(ib, 1, 1));
  auto ifOp = scf::IfOp::create(ib, TypeRange{}, bad, false);
  OpBuilder tb = ifOp.getThenBodyBuilder();
  Location loc = ib.getLoc();
  Value msg = cStringPtr(tb, loc, module, message, "kiln_assert_msg");
  Value site = cStringPtr(tb, loc, module, siteOf(siteOp->getLoc()), "kiln_assert_site");
  Value noThread = arith::ConstantIntOp::create(tb, loc, -1, 32);
  callAssertHook(tb, loc, module, msg, site, ValueRange{grid[0], grid[1], grid[2]}, noThread);
}

LogicalResult KernelLowering::lowerAssert(AssertOp op) {
  ImplicitLocOpBuilder b(op.getLoc(), op);
  std::string message = op.getMessage().str();
  auto fail = [&](ImplicitLocOpBuilder &ib, Value ok) {
    failUnless(ib, ok, message, op);
  };
  auto type = dyn_cast<RankedTensorType>(op.getCond().getType());
  if (!type) {
    if (!simt) {
      fail(b, op.getCond());
    } else {
      // Every thread holds the scalar: thread 0 reports it, and the others
      // wait for it at a barrier, so none runs what the assert guards first
      // (on the GPU __assertfail ends the kernel; the emulator stops the
      // block).
      Value t0 = arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                       simt->threadId, cIdx(b, 0));
      auto ifOp = scf::IfOp::create(b, TypeRange{}, t0, false);
      ImplicitLocOpBuilder tb(op.getLoc(), ifOp.getThenBodyBuilder());
      fail(tb, op.getCond());
      barrier(b);
    }
    toErase.push_back(op);
    return success();
  }
  auto buf = bufferOf(op.getCond(), op);
  if (failed(buf))
    return failure();
  forEachIndex(b, type.getShape(), 1,
               [&](ImplicitLocOpBuilder &ib, ValueRange idx) {
                 fail(ib, loadElems(ib, *buf, idx, ib.getI1Type(), 1));
               });
  toErase.push_back(op);
  return success();
}

LogicalResult KernelLowering::lowerPrint(PrintOp op) {
  ImplicitLocOpBuilder b(op.getLoc(), op);
  auto module = op->getParentOfType<ModuleOp>();
  std::string prefix = formatText(op.getPrefix());
  bool several = op.getArgs().size() > 1;
  auto emit = [&](ImplicitLocOpBuilder &ib, const std::string &format,
                  ValueRange args) {
    if (simt)
      gpu::PrintfOp::create(ib, ib.getStringAttr(format), args);
    else
      hostPrintf(ib, ib.getLoc(), module, format, args);
  };
  SmallVector<Value> pid{grid[0], grid[1], grid[2]};
  if (op.getArgs().empty()) {
    // (Triton prints the prefix alone, once per program.)
    ImplicitLocOpBuilder *at = &b;
    std::optional<ImplicitLocOpBuilder> tb;
    if (simt) {
      Value t0 = arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                       simt->threadId, cIdx(b, 0));
      auto ifOp = scf::IfOp::create(b, TypeRange{}, t0, false);
      tb.emplace(op.getLoc(), ifOp.getThenBodyBuilder());
      at = &*tb;
    }
    emit(*at, "pid (%d, %d, %d) " + prefix + "\n", pid);
  }
  for (auto [k, operand] : llvm::enumerate(op.getArgs())) {
    Value v = operand;
    std::string label = prefix;
    if (several)
      label += "(operand " + std::to_string(k) + ") ";
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (!type) {
      auto body = [&](ImplicitLocOpBuilder &ib) {
        auto [arg, conv] = printArgument(ib, v, v.getType(), op.getHex());
        SmallVector<Value> args(pid);
        args.push_back(arg);
        emit(ib, "pid (%d, %d, %d) " + label + conv + "\n", args);
      };
      if (simt) {
        Value t0 = arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                         simt->threadId, cIdx(b, 0));
        auto ifOp = scf::IfOp::create(b, TypeRange{}, t0, false);
        ImplicitLocOpBuilder tb(op.getLoc(), ifOp.getThenBodyBuilder());
        body(tb);
      } else {
        body(b);
      }
      continue;
    }
    auto buf = bufferOf(v, op);
    if (failed(buf))
      return failure();
    Type elt = type.getElementType();
    std::string idxFormat = "idx (";
    for (int64_t d = 0; d < type.getRank(); ++d)
      idxFormat += d ? ", %lld" : "%lld";
    idxFormat += ") ";
    forEachIndex(b, type.getShape(), 1,
                 [&](ImplicitLocOpBuilder &ib, ValueRange idx) {
                   Value e = loadElems(ib, *buf, idx, elt, 1);
                   auto [arg, conv] = printArgument(ib, e, elt, op.getHex());
                   SmallVector<Value> args(pid);
                   for (Value i : idx)
                     args.push_back(arith::IndexCastOp::create(
                         ib, ib.getI64Type(), i));
                   args.push_back(arg);
                   emit(ib, "pid (%d, %d, %d) " + idxFormat + label + conv +
                                "\n",
                        args);
                 });
  }
  if (!simt)
    hostFlush(b, op.getLoc(), module);
  toErase.push_back(op);
  return success();
}

LogicalResult KernelLowering::lowerProcessorId(ProcessorIdOp op) {
  ImplicitLocOpBuilder b(op.getLoc(), op);
  Value id;
  if (simt) {
    id = NVVM::SmIdOp::create(b, b.getI32Type());
  } else {
    auto module = op->getParentOfType<ModuleOp>();
    auto fn = module.lookupSymbol<LLVM::LLVMFuncOp>("sched_getcpu");
    if (!fn) {
      OpBuilder mb = OpBuilder::atBlockBegin(module.getBody());
      fn = LLVM::LLVMFuncOp::create(
          mb, op.getLoc(), "sched_getcpu",
          LLVM::LLVMFunctionType::get(b.getI32Type(), {}));
    }
    id = LLVM::CallOp::create(b, fn, ValueRange{}).getResult();
  }
  op.getResult().replaceAllUsesWith(id);
  toErase.push_back(op);
  return success();
}

LogicalResult KernelLowering::lowerClock(ClockOp op) {
  ImplicitLocOpBuilder b(op.getLoc(), op);
  Value now;
  if (simt)
    now = NVVM::Clock64Op::create(b, b.getI64Type());
  else
    now = LLVM::CallIntrinsicOp::create(b, b.getI64Type(),
                                        b.getStringAttr("llvm.readcyclecounter"),
                                        ValueRange{})
              .getResult(0);
  op.getResult().replaceAllUsesWith(now);
  toErase.push_back(op);
  return success();
}
