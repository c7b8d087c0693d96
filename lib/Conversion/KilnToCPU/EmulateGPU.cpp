//===- EmulateGPU.cpp - Run the GPU lowering's kernels on the CPU ----------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// `kiln-emulate-gpu` rewrites the kernels `convert-kiln-to-gpu` produced so
// that they run on the host under the SIMT emulator (lib/Target/GPUEmu). The
// tile lowering is untouched: only the handful of GPU-specific operations
// become calls into the emulator. This is what lets CI check the numerics of
// the GPU lowering (thread distribution, the shared-memory plan, barriers,
// cp.async ordering, shuffles, mma.sync and wgmma fragment layouts and
// matrix descriptors) without a GPU.
//
// Emulator ABI (C, see kiln_gpu_emu.c):
//   i32  kiln_emu_thread_id()
//   i64  kiln_emu_shared()                         window base address
//   void kiln_emu_barrier()
//   void kiln_emu_named_barrier(i32 id, i32 count, i32 wait)
//                                    bar.sync (wait 1) / bar.arrive (0)
//   i32  kiln_emu_shfl_xor_b32(i32 v, i32 offset, i32 width)
//   i64  kiln_emu_shfl_xor_b64(i64 v, i32 offset, i32 width)
//   void kiln_emu_cp_async(i64 dst, i64 src, i64 bytes, i64 srcBytes,
//                          i64 site)
//   void kiln_emu_cp_async_commit()
//   void kiln_emu_cp_async_wait(i32 n)
//   void kiln_emu_mma_m16n8k16(i32 f16, i32 a x4, i32 b x2, f32 c x4, i64 out)
//   void kiln_emu_ldmatrix(i64 rowAddr, i32 numTiles, i32 trans, i64 out,
//                          i64 site)
//   void kiln_emu_fence_proxy_async()
//   void kiln_emu_wgmma_fence() / kiln_emu_wgmma_commit()
//   void kiln_emu_wgmma_wait(i32 n)
//   void kiln_emu_wgmma(i64 descA, i64 descB, i32 n, i32 types, i32 transA,
//                       i32 transB, i32 scaleD, i64 acc, i64 site)
//                                     acc: this thread's n/2 f32, in/out
//   void kiln_emu_tensormap_replace(i64 map, i32 field, i32 ord, i64 value)
//                 field: global_address, rank, box_dim, global_dim,
//                 global_stride, element_stride, elemtype, interleave_layout,
//                 swizzle_mode, fill_mode (0 .. 9)
//   void kiln_emu_tensormap_release() / kiln_emu_tensormap_acquire(i64 map)
//   void kiln_emu_mbarrier_init(i64 bar, i32 count)
//   void kiln_emu_mbarrier_arrive_expect_tx(i64 bar, i32 bytes)
//   void kiln_emu_mbarrier_wait(i64 bar, i32 parity)   (until completed)
//   void kiln_emu_mbarrier_inval(i64 bar)
//   void kiln_emu_tma_load(i64 dst, i64 map, i32 rank, i32 c0..c4, i64 bar,
//                          i64 site)
//   void kiln_emu_tma_store(i64 src, i64 map, i32 rank, i32 c0..c4, i64 site)
//   void kiln_emu_bulk_commit() / kiln_emu_bulk_wait(i32 n)
//   void kiln_emu_wgmma_rs(i32 a x4, i64 descB, i32 n, i32 f16, i32 transB,
//                          i32 scaleD, i64 acc, i64 site)   A in registers
//   void kiln_emu_shared_access(i64 addr, i32 bytes, i32 isWrite, i64 site)
//   i64  kiln_emu_clock()           %clock64: the host's monotonic clock, ns
//   i32  kiln_emu_smid()            %smid: the host thread's core
//   void kiln_emu_assert_fail(i64 message, i64 site, i64 hook)
//                 a kiln.assert failed in this thread: the emulator stops
//                 the block and calls the hook (DebugOps.cpp) at
//                 `hook` (the kernel's kiln_assert_hook) from the host stack
//   void kiln_emu_run_block(fn, ptr argv, i32 pid x3, i32 grid x3,
//                           i32 numThreads, i64 sharedBytes, i64 name)
// where `site` and `name` are addresses of C strings: the op's location and
// the kernel's name, for the emulator's reports.
//
//===----------------------------------------------------------------------===//

#include "SimtSupport.h"
#include "kiln/Conversion/Passes.h"

#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_EMULATEGPU
#include "kiln/Dialect/Kiln/Passes.h.inc"
} // namespace mlir::kiln

using namespace mlir;

namespace {

/// The emulator's functions, declared once per module.
struct EmulatorABI {
  ModuleOp module;

  func::FuncOp get(StringRef name, TypeRange args, TypeRange results) {
    if (auto f = module.lookupSymbol<func::FuncOp>(name))
      return f;
    OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
    auto f = func::FuncOp::create(b, module.getLoc(), name,
                                  b.getFunctionType(args, results));
    f.setPrivate();
    return f;
  }

  /// The address (i64) of a NUL-terminated constant string (one global per
  /// text: DebugOps.cpp's cStringPtr).
  Value string(ImplicitLocOpBuilder &b, StringRef text) {
    Value p = kiln::detail::cStringPtr(b, b.getLoc(), module, text, "kiln_emu_str");
    return LLVM::PtrToIntOp::create(b, b.getI64Type(), p);
  }

  /// "file:line:col (op)" of an op (for the emulator's reports).
  Value site(ImplicitLocOpBuilder &b, Operation *op) {
    return string(b, kiln::detail::siteOf(op->getLoc()) + " (" +
                         op->getName().getStringRef().str() + ")");
  }

  Value call(ImplicitLocOpBuilder &b, StringRef name, ValueRange args,
             TypeRange results = {}) {
    auto f = get(name, args.getTypes(), results);
    auto c = func::CallOp::create(b, f, args);
    return results.empty() ? Value() : c.getResult(0);
  }
};

bool isShared(Type t) {
  auto m = dyn_cast<MemRefType>(t);
  if (!m || !m.getMemorySpace())
    return false;
  auto space = dyn_cast<gpu::AddressSpaceAttr>(m.getMemorySpace());
  return space && space.getValue() == gpu::AddressSpace::Workgroup;
}

int64_t elementBytes(MemRefType t) {
  return std::max<int64_t>(1, t.getElementTypeBitWidth() / 8);
}

/// The address (i64) of m[indices].
Value elementAddress(ImplicitLocOpBuilder &b, Value m, ValueRange indices) {
  auto type = cast<MemRefType>(m.getType());
  auto meta = memref::ExtractStridedMetadataOp::create(b, m);
  Value linear = meta.getOffset();
  for (auto [i, idx] : llvm::enumerate(indices))
    linear = arith::AddIOp::create(
        b, linear, arith::MulIOp::create(b, idx, meta.getStrides()[i]));
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, m);
  Value bytes = arith::MulIOp::create(
      b, linear, arith::ConstantIndexOp::create(b, elementBytes(type)));
  return arith::IndexCastOp::create(b, b.getI64Type(),
                                    arith::AddIOp::create(b, base, bytes));
}

/// Drops the workgroup memory space from a memref type (host memory).
Type hostType(Type t) {
  auto m = dyn_cast<MemRefType>(t);
  if (!m || !m.getMemorySpace())
    return t;
  return MemRefType::get(m.getShape(), m.getElementType(), m.getLayout());
}

struct EmulateGPUPass : kiln::impl::EmulateGPUBase<EmulateGPUPass> {
  using Base::Base;

  LogicalResult emulate(gpu::GPUFuncOp kernel, EmulatorABI &abi);
  void runOnOperation() override;
};

LogicalResult EmulateGPUPass::emulate(gpu::GPUFuncOp kernel,
                                      EmulatorABI &abi) {
  MLIRContext *ctx = kernel.getContext();
  ModuleOp module = abi.module;
  Location loc = kernel.getLoc();
  auto maxntid = kernel->getAttrOfType<DenseI32ArrayAttr>("nvvm.maxntid");
  auto sharedAttr = kernel->getAttrOfType<IntegerAttr>("kiln.shared_bytes");
  if (!maxntid || maxntid.empty() || !sharedAttr)
    return kernel.emitError("kiln-emulate-gpu: the kernel was not produced by "
                            "convert-kiln-to-gpu (no nvvm.maxntid or "
                            "kiln.shared_bytes)");
  int32_t numThreads = maxntid[0];
  int64_t sharedBytes = sharedAttr.getInt();

  // The body: user arguments, then pid x3 and grid x3 (the CPU ABI).
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  SmallVector<Type> argTypes;
  for (Type t : kernel.getArgumentTypes())
    argTypes.push_back(t);
  size_t numUser = argTypes.size();
  for (int i = 0; i < 6; ++i)
    argTypes.push_back(b.getI32Type());
  auto body = func::FuncOp::create(b, loc, kernel.getName(),
                                   b.getFunctionType(argTypes, {}));
  body.setPrivate();
  for (StringRef attr : {"kiln.signature", "kiln.grid_rank"})
    if (Attribute a = kernel->getAttr(attr))
      body->setAttr(attr, a);
  body.getBody().takeBody(kernel.getBody());
  Block &entry = body.getBody().front();
  SmallVector<Value> grid;
  for (int i = 0; i < 6; ++i)
    grid.push_back(entry.addArgument(b.getI32Type(), loc));

  auto i32 = b.getI32Type(), i64 = b.getI64Type();
  SmallVector<Operation *> toErase;
  Value mmaOut, ldmOut, wgmmaAcc;
  // wgmma accumulators go to the emulator through a per-thread buffer: the
  // values stored (returns its address), then the results read back.
  auto spillAcc = [&](ImplicitLocOpBuilder &ib, ValueRange values) -> Value {
    if (!wgmmaAcc) {
      ImplicitLocOpBuilder eb(loc, &entry, entry.begin());
      wgmmaAcc =
          memref::AllocaOp::create(eb, MemRefType::get({128}, eb.getF32Type()));
    }
    // (s32 accumulators travel as their bits: llvm.bitcast, whose folder
    // leaves an undef operand alone. The first wgmma's accumulator is
    // undef, and arith.bitcast's folder read the folded undef as an
    // IntegerAttr: a segfault in the compiler, some runs.)
    for (auto [e, v] : llvm::enumerate(values))
      memref::StoreOp::create(
          ib,
          v.getType().isInteger(32)
              ? LLVM::BitcastOp::create(ib, ib.getF32Type(), v).getResult()
              : v,
          wgmmaAcc,
          ValueRange{arith::ConstantIndexOp::create(ib, int64_t(e))});
    return arith::IndexCastOp::create(
        ib, i64, memref::ExtractAlignedPointerAsIndexOp::create(ib, wgmmaAcc));
  };
  auto reloadAcc = [&](ImplicitLocOpBuilder &ib, Type structType,
                       int64_t count) -> Value {
    Value r = LLVM::UndefOp::create(ib, structType);
    auto body = cast<LLVM::LLVMStructType>(structType).getBody();
    for (int64_t e = 0; e < count; ++e) {
      Value v = memref::LoadOp::create(
          ib, wgmmaAcc, ValueRange{arith::ConstantIndexOp::create(ib, e)});
      if (body[e].isInteger(32))
        v = LLVM::BitcastOp::create(ib, body[e], v);
      r = LLVM::InsertValueOp::create(ib, r, v, ArrayRef<int64_t>{e});
    }
    return r;
  };
  WalkResult walk = body.walk([&](Operation *op) -> WalkResult {
    ImplicitLocOpBuilder ib(op->getLoc(), op);
    // The integer address behind an !llvm.ptr operand.
    auto address = [&](Value ptr) -> Value {
      if (auto cast = ptr.getDefiningOp<LLVM::IntToPtrOp>())
        return cast.getArg();
      return LLVM::PtrToIntOp::create(ib, i64, ptr);
    };
    auto toIndex = [&](Value v) {
      return arith::IndexCastOp::create(ib, ib.getIndexType(), v);
    };
    // ldmatrix of `n` matrices at this lane's row address (i64): the n
    // words the emulator returns, through a 4-word buffer of the thread.
    auto ldmatrix = [&](Value rowAddr, int64_t n, bool trans) {
      if (!ldmOut) {
        ImplicitLocOpBuilder eb(loc, &entry, entry.begin());
        ldmOut = memref::AllocaOp::create(eb, MemRefType::get({4}, i32));
      }
      Value outAddr = arith::IndexCastOp::create(
          ib, i64, memref::ExtractAlignedPointerAsIndexOp::create(ib, ldmOut));
      abi.call(ib, "kiln_emu_ldmatrix",
               {rowAddr, arith::ConstantIntOp::create(ib, i32, n),
                arith::ConstantIntOp::create(ib, i32, trans), outAddr,
                abi.site(ib, op)});
      SmallVector<Value> words;
      for (int64_t i = 0; i < n; ++i)
        words.push_back(memref::LoadOp::create(
            ib, ldmOut, ValueRange{arith::ConstantIndexOp::create(ib, i)}));
      return words;
    };
    // A TMA copy's leading arguments: the shared address, the map, the rank
    // and five coordinates (unused ones 0).
    auto tmaArgs = [&](Value smem, Value map, ValueRange coords) {
      SmallVector<Value> args{
          address(smem), address(map),
          arith::ConstantIntOp::create(ib, i32, int64_t(coords.size()))};
      for (size_t i = 0; i < 5; ++i)
        args.push_back(i < coords.size()
                           ? coords[i]
                           : Value(arith::ConstantIntOp::create(ib, i32, 0)));
      return args;
    };
    if (auto id = dyn_cast<gpu::BlockIdOp>(op)) {
      op->getResult(0).replaceAllUsesWith(
          toIndex(grid[static_cast<int>(id.getDimension())]));
    } else if (auto dim = dyn_cast<gpu::GridDimOp>(op)) {
      op->getResult(0).replaceAllUsesWith(
          toIndex(grid[3 + static_cast<int>(dim.getDimension())]));
    } else if (auto tid = dyn_cast<gpu::ThreadIdOp>(op)) {
      Value v = tid.getDimension() == gpu::Dimension::x
                    ? toIndex(abi.call(ib, "kiln_emu_thread_id", {}, {i32}))
                    : arith::ConstantIndexOp::create(ib, 0).getResult();
      op->getResult(0).replaceAllUsesWith(v);
    } else if (auto bd = dyn_cast<gpu::BlockDimOp>(op)) {
      op->getResult(0).replaceAllUsesWith(arith::ConstantIndexOp::create(
          ib, bd.getDimension() == gpu::Dimension::x ? numThreads : 1));
    } else if (isa<gpu::BarrierOp>(op)) {
      abi.call(ib, "kiln_emu_barrier", {});
    } else if (auto nb = dyn_cast<NVVM::BarrierOp>(op)) {
      // Named barriers (GPUPingpong.cpp's turns): bar.sync id, count.
      if (!nb.getBarrierId() || !nb.getNumberOfThreads() ||
          nb.getReductionOp() || nb.getRes())
        return op->emitError("kiln-emulate-gpu: only nvvm.barrier with an id "
                             "and a thread count is emulated");
      abi.call(ib, "kiln_emu_named_barrier",
               {nb.getBarrierId(), nb.getNumberOfThreads(),
                arith::ConstantIntOp::create(ib, i32, 1)});
    } else if (auto na = dyn_cast<NVVM::BarrierArriveOp>(op)) {
      if (!na.getBarrierId())
        return op->emitError("kiln-emulate-gpu: nvvm.barrier.arrive without "
                             "an id is not emulated");
      abi.call(ib, "kiln_emu_named_barrier",
               {na.getBarrierId(), na.getNumberOfThreads(),
                arith::ConstantIntOp::create(ib, i32, 0)});
    } else if (auto as = dyn_cast<cf::AssertOp>(op)) {
      // kiln.assert's per-thread check (DebugOps.cpp): the emulator stops
      // the block and reports through the kernel's hook.
      Value bad = arith::XOrIOp::create(
          ib, as.getArg(), arith::ConstantIntOp::create(ib, 1, 1));
      auto ifOp = scf::IfOp::create(ib, TypeRange{}, bad, false);
      ImplicitLocOpBuilder tb(op->getLoc(), ifOp.getThenBodyBuilder());
      Value msg = abi.string(tb, as.getMsg());
      Value site = abi.string(tb, kiln::detail::siteOf(op->getLoc()));
      Value hook = LLVM::PtrToIntOp::create(
          tb, i64, kiln::detail::assertHookAddress(tb, op->getLoc(), module));
      abi.call(tb, "kiln_emu_assert_fail", {msg, site, hook});
    } else if (auto pr = dyn_cast<gpu::PrintfOp>(op)) {
      // kiln.print's per-thread lines (DebugOps.cpp): printf on the host.
      kiln::detail::hostPrintf(ib, op->getLoc(), module, pr.getFormat(),
                               pr.getArgs());
      kiln::detail::hostFlush(ib, op->getLoc(), module);
    } else if (auto shfl = dyn_cast<gpu::ShuffleOp>(op)) {
      if (shfl.getMode() != gpu::ShuffleMode::XOR ||
          !shfl.getValid().use_empty())
        return op->emitError("kiln-emulate-gpu: only xor shuffles whose "
                             "'valid' result is unused are emulated");
      Type t = shfl.getValue().getType();
      unsigned bits = t.getIntOrFloatBitWidth();
      if (bits != 32 && bits != 64)
        return op->emitError("kiln-emulate-gpu: shuffle of ") << t;
      Type bitsType = bits == 32 ? i32 : i64;
      Value v = shfl.getValue();
      if (t != bitsType)
        v = arith::BitcastOp::create(ib, bitsType, v);
      Value r = abi.call(ib,
                         bits == 32 ? "kiln_emu_shfl_xor_b32"
                                    : "kiln_emu_shfl_xor_b64",
                         {v, shfl.getOffset(), shfl.getWidth()}, {bitsType});
      if (t != bitsType)
        r = arith::BitcastOp::create(ib, t, r);
      shfl.getShuffleResult().replaceAllUsesWith(r);
    } else if (auto copy = dyn_cast<nvgpu::DeviceAsyncCopyOp>(op)) {
      if (!copy->use_empty())
        return op->emitError("kiln-emulate-gpu: async-copy tokens are not "
                             "emulated");
      int64_t eb = elementBytes(copy.getDst().getType());
      Value dst = elementAddress(ib, copy.getDst(), copy.getDstIndices());
      Value src = elementAddress(ib, copy.getSrc(), copy.getSrcIndices());
      int64_t n = copy.getDstElements().getSExtValue();
      Value bytes = arith::ConstantIntOp::create(ib, i64, n * eb);
      Value srcBytes = bytes;
      if (Value se = copy.getSrcElements())
        srcBytes = arith::MulIOp::create(
            ib, arith::IndexCastOp::create(ib, i64, se),
            arith::ConstantIntOp::create(ib, i64, eb));
      abi.call(ib, "kiln_emu_cp_async",
               {dst, src, bytes, srcBytes, abi.site(ib, op)});
    } else if (isa<NVVM::CpAsyncCommitGroupOp>(op)) {
      abi.call(ib, "kiln_emu_cp_async_commit", {});
    } else if (auto wait = dyn_cast<NVVM::CpAsyncWaitGroupOp>(op)) {
      abi.call(ib, "kiln_emu_cp_async_wait",
               {arith::ConstantIntOp::create(ib, i32, wait.getN())});
    } else if (auto mma = dyn_cast<NVVM::MmaOp>(op)) {
      auto shape = mma.getShape();
      auto type = mma.getMultiplicandAPtxType();
      bool sixteen = shape.getK() == 16 && type &&
                     (*type == NVVM::MMATypes::bf16 ||
                      *type == NVVM::MMATypes::f16) &&
                     mma.getOperandC()[0].getType().isF32();
      bool s8 = shape.getK() == 32 && type && *type == NVVM::MMATypes::s8 &&
                mma.getMultiplicandBPtxType() == NVVM::MMATypes::s8 &&
                mma.getOperandC()[0].getType().isInteger(32) &&
                mma.getIntOverflowBehavior() == NVVM::MMAIntOverflow::wrapped;
      if (shape.getM() != 16 || shape.getN() != 8 || !(sixteen || s8) ||
          mma.getOperandA().size() != 4 || mma.getOperandB().size() != 2 ||
          mma.getOperandC().size() != 4)
        return op->emitError("kiln-emulate-gpu: only mma.sync m16n8k16 "
                             "bf16/f16 with f32 accumulators and m16n8k32 s8 "
                             "with s32 ones (wrapping) are emulated");
      // The result buffer lives at the entry: an alloca in a loop would
      // grow the (fiber's) stack every iteration.
      if (!mmaOut) {
        ImplicitLocOpBuilder eb(loc, &entry, entry.begin());
        mmaOut = memref::AllocaOp::create(
            eb, MemRefType::get({4}, eb.getF32Type()));
      }
      Value out = mmaOut;
      Value outAddr = arith::IndexCastOp::create(
          ib, i64, memref::ExtractAlignedPointerAsIndexOp::create(ib, out));
      SmallVector<Value> args;
      if (!s8)
        args.push_back(arith::ConstantIntOp::create(
            ib, i32, *type == NVVM::MMATypes::f16 ? 1 : 0));
      // Fragments travel as i32 (f16 ones are typed vector<2xf16>); s32
      // accumulators as they are, their results as f32 bits in `out`.
      for (Value v : llvm::concat<Value>(mma.getOperandA(), mma.getOperandB()))
        args.push_back(v.getType() == i32
                           ? v
                           : LLVM::BitcastOp::create(ib, i32, v).getResult());
      llvm::append_range(args, mma.getOperandC());
      args.push_back(outAddr);
      abi.call(ib, s8 ? "kiln_emu_mma_m16n8k32_s8" : "kiln_emu_mma_m16n8k16",
               args);
      Value s = LLVM::UndefOp::create(ib, mma.getResult().getType());
      for (int64_t i = 0; i < 4; ++i) {
        Value e = memref::LoadOp::create(
            ib, out, ValueRange{arith::ConstantIndexOp::create(ib, i)});
        if (s8)
          e = arith::BitcastOp::create(ib, i32, e);
        s = LLVM::InsertValueOp::create(ib, s, e, ArrayRef<int64_t>{i});
      }
      mma.getResult().replaceAllUsesWith(s);
    } else if (auto fence = dyn_cast<NVVM::FenceProxyOp>(op)) {
      // fence.proxy.async.global orders global memory across the proxies;
      // the emulator's TMA stores write at issue, so there is nothing to
      // model for it.
      NVVM::ProxyKind kind = fence.getKind();
      if (kind != NVVM::ProxyKind::async &&
          kind != NVVM::ProxyKind::async_shared &&
          kind != NVVM::ProxyKind::async_global)
        return op->emitError("kiln-emulate-gpu: only fence.proxy.async "
                             "(all, .shared::cta, .global) is emulated");
      if (kind != NVVM::ProxyKind::async_global)
        abi.call(ib, "kiln_emu_fence_proxy_async", {});
    } else if (isa<NVVM::WgmmaFenceAlignedOp>(op)) {
      abi.call(ib, "kiln_emu_wgmma_fence", {});
    } else if (isa<NVVM::WgmmaGroupSyncAlignedOp>(op)) {
      abi.call(ib, "kiln_emu_wgmma_commit", {});
    } else if (auto wait = dyn_cast<NVVM::WgmmaWaitGroupSyncOp>(op)) {
      abi.call(ib, "kiln_emu_wgmma_wait",
               {arith::ConstantIntOp::create(ib, i32, wait.getGroup())});
    } else if (auto wg = dyn_cast<NVVM::WgmmaMmaAsyncOp>(op)) {
      auto shape = wg.getShape();
      auto acc = cast<LLVM::LLVMStructType>(wg.getInouts().getType());
      int64_t n = shape.getN();
      // Operand types as kiln_emu_wgmma takes them: 0 bf16, 1 f16, 2 e4m3,
      // 3 e5m2, 4 s8 (A in bits 0-3, B in 4-7).
      auto code = [](NVVM::WGMMATypes t) -> int {
        switch (t) {
        case NVVM::WGMMATypes::bf16: return 0;
        case NVVM::WGMMATypes::f16: return 1;
        case NVVM::WGMMATypes::e4m3: return 2;
        case NVVM::WGMMATypes::e5m2: return 3;
        case NVVM::WGMMATypes::s8: return 4;
        default: return -1;
        }
      };
      int ta = code(wg.getTypeA()), tb = code(wg.getTypeB());
      bool sixteen = ta >= 0 && ta < 2 && tb == ta && shape.getK() == 16;
      bool kMajor = shape.getK() == 32 &&
                    wg.getLayoutA() == NVVM::MMALayout::row &&
                    wg.getLayoutB() == NVVM::MMALayout::col;
      bool fp8 = ta >= 2 && ta < 4 && tb >= 2 && tb < 4 && kMajor &&
                 wg.getTypeD() == NVVM::WGMMATypes::f32;
      bool s8 = ta == 4 && tb == 4 && kMajor &&
                wg.getTypeD() == NVVM::WGMMATypes::s32;
      if (shape.getM() != 64 || !(sixteen || fp8 || s8) ||
          (sixteen && wg.getTypeD() != NVVM::WGMMATypes::f32) ||
          wg.getScaleA() != NVVM::WGMMAScaleIn::one ||
          wg.getScaleB() != NVVM::WGMMAScaleIn::one ||
          acc.getBody().size() != size_t(n / 2))
        return op->emitError("kiln-emulate-gpu: only wgmma.mma_async "
                             "m64nNk16 bf16/f16 and m64nNk32 e4m3/e5m2 "
                             "(K-major) with f32 accumulators, and "
                             "m64nNk32 s8 (K-major) with s32 ones, are "
                             "emulated");
      SmallVector<Value> accIn;
      for (int64_t e = 0; e < n / 2; ++e)
        accIn.push_back(LLVM::ExtractValueOp::create(ib, wg.getInouts(),
                                                     ArrayRef<int64_t>{e}));
      Value accAddr = spillAcc(ib, accIn);
      auto flag = [&](bool v) {
        return arith::ConstantIntOp::create(ib, i32, v ? 1 : 0);
      };
      abi.call(ib, "kiln_emu_wgmma",
               {wg.getDescriptorA(), wg.getDescriptorB(),
                arith::ConstantIntOp::create(ib, i32, n),
                arith::ConstantIntOp::create(ib, i32, ta | tb << 4),
                flag(wg.getLayoutA() == NVVM::MMALayout::col),
                flag(wg.getLayoutB() == NVVM::MMALayout::row),
                flag(wg.getScaleD() == NVVM::WGMMAScaleOut::one), accAddr,
                abi.site(ib, op)});
      wg.getResult().replaceAllUsesWith(reloadAcc(ib, acc, n / 2));
    } else if (auto rs = dyn_cast<LLVM::InlineAsmOp>(op);
               rs && rs->hasAttr(kiln::detail::kWgmmaRsAttr)) {
      // wgmma.mma_async with A in registers (runRegisterADot): operands are
      // the N/2 accumulators, A's four registers, B's descriptor, scale-d.
      ArrayRef<int64_t> info =
          rs->getAttrOfType<DenseI64ArrayAttr>(kiln::detail::kWgmmaRsAttr)
              .asArrayRef();
      int64_t n = info[0];
      ValueRange ops = rs.getOperands();
      if (info.size() != 3 || ops.size() != size_t(n / 2 + 6))
        return op->emitError("kiln-emulate-gpu: malformed wgmma with A in "
                             "registers");
      Value accAddr = spillAcc(ib, ops.take_front(n / 2));
      auto c32 = [&](int64_t v) {
        return arith::ConstantIntOp::create(ib, i32, v);
      };
      abi.call(ib, "kiln_emu_wgmma_rs",
               {ops[n / 2], ops[n / 2 + 1], ops[n / 2 + 2], ops[n / 2 + 3],
                ops[n / 2 + 4], c32(n), c32(info[1]), c32(info[2]), c32(1),
                accAddr, abi.site(ib, op)});
      rs.getResult(0).replaceAllUsesWith(
          reloadAcc(ib, rs.getResult(0).getType(), n / 2));
    } else if (auto ldm = dyn_cast<nvgpu::LdMatrixOp>(op)) {
      auto vt = cast<VectorType>(ldm.getRes().getType());
      int64_t n = ldm.getNumTiles();
      // (Rows of bytes, untransposed: int8 operands read as 16-bit pairs.)
      bool sixteen = vt.getRank() == 2 && vt.getDimSize(1) == 2 &&
                     vt.getElementTypeBitWidth() == 16;
      bool bytes = vt.getRank() == 2 && vt.getDimSize(1) == 4 &&
                   vt.getElementTypeBitWidth() == 8 && !ldm.getTranspose();
      if (vt.getDimSize(0) != n || !(sixteen || bytes))
        return op->emitError("kiln-emulate-gpu: only ldmatrix of 16-bit "
                             "elements (or of 8-bit ones untransposed) is "
                             "emulated");
      SmallVector<Value> words =
          ldmatrix(elementAddress(ib, ldm.getSrcMemref(), ldm.getIndices()), n,
                   ldm.getTranspose());
      Value v = arith::ConstantOp::create(ib, vt, ib.getZeroAttr(vt));
      auto pairType = VectorType::get({vt.getDimSize(1)}, vt.getElementType());
      for (int64_t i = 0; i < n; ++i) {
        Value pair = LLVM::BitcastOp::create(ib, pairType, words[i]);
        v = vector::InsertOp::create(ib, pair, v, ArrayRef<int64_t>{i});
      }
      ldm.getRes().replaceAllUsesWith(v);
    } else if (auto ldm = dyn_cast<NVVM::LdMatrixOp>(op)) {
      // The same on a pointer (XOR-swizzled rows, ldmatrixXor): n i32
      // registers, one or a struct of them.
      int64_t n = ldm.getNum();
      if (ldm.getEltType() != NVVM::LdStMatrixEltType::B16 ||
          ldm.getShape().getM() != 8 || ldm.getShape().getN() != 8)
        return op->emitError("kiln-emulate-gpu: only ldmatrix.m8n8 of "
                             "16-bit elements is emulated");
      SmallVector<Value> words = ldmatrix(
          address(ldm.getPtr()), n, ldm.getLayout() == NVVM::MMALayout::col);
      Value v = words[0];
      if (n > 1) {
        v = LLVM::UndefOp::create(ib, ldm.getRes().getType());
        for (int64_t i = 0; i < n; ++i)
          v = LLVM::InsertValueOp::create(ib, v, words[i],
                                          ArrayRef<int64_t>{i});
      }
      ldm.getRes().replaceAllUsesWith(v);
    } else if (auto intr = dyn_cast<LLVM::CallIntrinsicOp>(op);
               intr && intr.getIntrin().starts_with(
                           "llvm.nvvm.tensormap.replace.")) {
      // tensormap.replace.tile.FIELD [map], (ord,) value
      StringRef field =
          intr.getIntrin().drop_front(strlen("llvm.nvvm.tensormap.replace."));
      static const char *const fields[] = {
          "global.address", "rank",          "box.dim",
          "global.dim",     "global.stride", "element.stride",
          "elemtype",       "interleave.layout", "swizzle.mode",
          "fill.mode"};
      auto it = llvm::find(fields, field);
      if (it == std::end(fields))
        return op->emitError("kiln-emulate-gpu: no emulation for "
                             "tensormap.replace of ")
               << field;
      ValueRange args = intr.getArgs();
      Value ord = args.size() == 3 ? args[1]
                                   : Value(arith::ConstantIntOp::create(ib, i32, 0));
      Value value = args.back();
      if (value.getType() != i64)
        value = arith::ExtUIOp::create(ib, i64, value);
      abi.call(ib, "kiln_emu_tensormap_replace",
               {address(args[0]),
                arith::ConstantIntOp::create(ib, i32, it - std::begin(fields)),
                ord, value});
    } else if (auto rel = dyn_cast<NVVM::FenceProxyReleaseOp>(op)) {
      abi.call(ib, "kiln_emu_tensormap_release", {});
    } else if (auto acq = dyn_cast<NVVM::FenceProxyAcquireOp>(op)) {
      abi.call(ib, "kiln_emu_tensormap_acquire", {address(acq.getAddr())});
    } else if (auto init = dyn_cast<NVVM::MBarrierInitOp>(op)) {
      abi.call(ib, "kiln_emu_mbarrier_init",
               {address(init.getAddr()), init.getCount()});
    } else if (auto arrive = dyn_cast<NVVM::MBarrierArriveExpectTxOp>(op)) {
      abi.call(ib, "kiln_emu_mbarrier_arrive_expect_tx",
               {address(arrive.getAddr()), arrive.getTxcount()});
    } else if (auto wait = dyn_cast<NVVM::MBarrierTryWaitParityOp>(op)) {
      abi.call(ib, "kiln_emu_mbarrier_wait",
               {address(wait.getAddr()), wait.getPhase()});
    } else if (auto inval = dyn_cast<NVVM::MBarrierInvalOp>(op)) {
      abi.call(ib, "kiln_emu_mbarrier_inval", {address(inval.getAddr())});
    } else if (auto tma =
                   dyn_cast<NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp>(
                       op)) {
      SmallVector<Value> args = tmaArgs(tma.getDstMem(),
                                        tma.getTmaDescriptor(),
                                        tma.getCoordinates());
      args.push_back(address(tma.getMbar()));
      args.push_back(abi.site(ib, op));
      abi.call(ib, "kiln_emu_tma_load", args);
    } else if (auto st =
                   dyn_cast<NVVM::CpAsyncBulkTensorSharedCTAToGlobalOp>(op)) {
      if (st.getL2CacheHint() || st.getPredicate() ||
          st.getMode() != NVVM::TMAStoreMode::TILE)
        return op->emitError("kiln-emulate-gpu: TMA stores are emulated in "
                             "tile mode, without a cache hint or predicate");
      SmallVector<Value> args =
          tmaArgs(st.getSrcMem(), st.getTmaDescriptor(), st.getCoordinates());
      args.push_back(abi.site(ib, op));
      abi.call(ib, "kiln_emu_tma_store", args);
    } else if (isa<NVVM::Clock64Op>(op)) {
      op->getResult(0).replaceAllUsesWith(
          abi.call(ib, "kiln_emu_clock", {}, {i64}));
    } else if (isa<NVVM::SmIdOp>(op)) {
      op->getResult(0).replaceAllUsesWith(
          abi.call(ib, "kiln_emu_smid", {}, {i32}));
    } else if (auto pf = dyn_cast<NVVM::PrefetchOp>(op);
               pf && pf.getTensormap()) {
      // prefetch.tensormap: a hint, nothing to emulate.
    } else if (isa<NVVM::CpAsyncBulkCommitGroupOp>(op)) {
      abi.call(ib, "kiln_emu_bulk_commit", {});
    } else if (auto bw = dyn_cast<NVVM::CpAsyncBulkWaitGroupOp>(op)) {
      // .read waits only for the source reads; the emulator writes global
      // memory at issue, so it waits for more than that. (The lowering uses
      // .read only where nothing after the store reads memory, readsAfter
      // in GPUPipelining.cpp: an ordering the emulator would not check.)
      abi.call(ib, "kiln_emu_bulk_wait",
               {arith::ConstantIntOp::create(ib, i32, bw.getGroup())});
    } else if (auto ret = dyn_cast<gpu::ReturnOp>(op)) {
      func::ReturnOp::create(ib);
    } else if (auto global = dyn_cast<memref::GetGlobalOp>(op)) {
      // The window: a rank-1 descriptor over the emulator's buffer.
      Value addr = abi.call(ib, "kiln_emu_shared", {}, {i64});
      Value p = LLVM::IntToPtrOp::create(
          ib, LLVM::LLVMPointerType::get(ctx), addr);
      global.getResult().replaceAllUsesWith(kiln::detail::memrefOverPointer(
          ib, ib.getLoc(), p, cast<MemRefType>(hostType(global.getType()))));
    } else if (isa<memref::LoadOp, memref::StoreOp, vector::LoadOp,
                   vector::StoreOp>(op)) {
      // Shared-memory accesses (elements, or whole chunks of a tile row)
      // are reported to the checker.
      bool isWrite = isa<memref::StoreOp, vector::StoreOp>(op);
      Value base = op->getOperand(isWrite ? 1 : 0);
      auto mt = cast<MemRefType>(base.getType());
      int64_t bytes = elementBytes(mt);
      ValueRange indices = op->getOperands().drop_front(isWrite ? 2 : 1);
      if (auto vl = dyn_cast<vector::LoadOp>(op))
        bytes *= vl.getVectorType().getNumElements();
      if (auto vs = dyn_cast<vector::StoreOp>(op))
        bytes *= vs.getVectorType().getNumElements();
      if (checkShared && isShared(mt))
        abi.call(ib, "kiln_emu_shared_access",
                 {elementAddress(ib, base, indices),
                  arith::ConstantIntOp::create(ib, i32, bytes),
                  arith::ConstantIntOp::create(ib, i32, isWrite ? 1 : 0),
                  abi.site(ib, op)});
      return WalkResult::advance();
    } else if (op->getDialect() &&
               isa<gpu::GPUDialect, NVVM::NVVMDialect, nvgpu::NVGPUDialect>(
                   op->getDialect())) {
      return op->emitError("kiln-emulate-gpu: no emulation for '")
             << op->getName() << "'";
    } else {
      return WalkResult::advance();
    }
    toErase.push_back(op);
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  for (Operation *op : toErase)
    op->erase();

  // Shared memory is host memory now: drop the memory space everywhere.
  body.walk([&](Operation *op) {
    for (Value r : op->getResults())
      r.setType(hostType(r.getType()));
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (BlockArgument arg : block.getArguments())
          arg.setType(hostType(arg.getType()));
  });

  // Each emulated thread runs the CPU-ABI entry; kiln_entry_NAME runs a
  // whole block of them.
  b.setInsertionPointToEnd(module.getBody());
  auto thread = kiln::detail::buildLaunchEntry(
      b, loc, ("kiln_emu_thread_" + kernel.getName()).str(), body, numUser);
  thread.setPrivate();
  auto launch = kiln::detail::buildLaunchEntry(
      b, loc, ("kiln_entry_" + kernel.getName()).str(), body, numUser);
  launch->setAttr("kiln.kernel", b.getStringAttr(kernel.getName()));
  // Replace the entry's call of the body by the emulator's block launch.
  auto call = *launch.getOps<func::CallOp>().begin();
  {
    ImplicitLocOpBuilder ib(loc, call);
    Block &eb = launch.getBody().front();
    Value fn = func::ConstantOp::create(ib, thread.getFunctionType(),
                                        thread.getSymName());
    SmallVector<Value> args{fn};
    for (BlockArgument a : eb.getArguments())
      args.push_back(a);
    args.push_back(arith::ConstantIntOp::create(ib, i32, numThreads));
    args.push_back(arith::ConstantIntOp::create(ib, i64, sharedBytes));
    args.push_back(abi.string(ib, kernel.getName()));
    abi.call(ib, "kiln_emu_run_block", args);
  }
  // The argument unpacking the entry built is dead now.
  SmallVector<Operation *> dead;
  for (Operation &op : llvm::reverse(launch.getBody().front()))
    if (&op != call && !isa<func::ReturnOp, func::CallOp>(op))
      dead.push_back(&op);
  call.erase();
  for (Operation *op : dead)
    if (op->use_empty())
      op->erase();
  return success();
}

void EmulateGPUPass::runOnOperation() {
  ModuleOp module = getOperation();
  EmulatorABI abi{module};
  SmallVector<gpu::GPUModuleOp> gpuModules(module.getOps<gpu::GPUModuleOp>());
  for (gpu::GPUModuleOp gm : gpuModules) {
    SmallVector<gpu::GPUFuncOp> kernels(gm.getOps<gpu::GPUFuncOp>());
    for (gpu::GPUFuncOp k : kernels)
      if (failed(emulate(k, abi)))
        return signalPassFailure();
    gm.erase();
  }
  module->removeAttr(gpu::GPUDialect::getContainerModuleAttrName());
}

} // namespace
