//===- GPUPipelining.cpp - Pipelined tile loads, cp.async and TMA -------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The GPU lowering's software pipelining of tile loads in loops
// (num_stages; cp.async, and TMA on sm_90a). See KilnToGPU.cpp for the
// SIMT mode as a whole and docs/gpu.md for the why.
//
//===----------------------------------------------------------------------===//

#include "KernelLowering.h"
#include "SimtSupport.h"
#include "kiln/Dialect/Kiln/IR/Kiln.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Dominance.h"

#include <optional>
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/LoopLikeInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::kiln;
using namespace mlir::kiln::detail;

namespace mlir::kiln::detail {
//===----------------------------------------------------------------------===//
// TMA (sm_90a): pipelined loads by cp.async.bulk.tensor
//===----------------------------------------------------------------------===//
//
// A pipelined load whose view is made before its loop loads by TMA when the
// view allows it (checked at run time, uniformly: otherwise cp.async as on
// sm_80). Kiln views are built inside the kernel, so the host cannot encode
// tensor maps: before the loop, thread 0 writes one per such view into this
// program's slot of the scratch the runtime passes (128 bytes each, zeroed,
// then `tensormap.replace` per field), releases it to the tensor-map proxy
// and acquires it. Each stage has an mbarrier (count 1): a fill is thread
// 0's `mbarrier.arrive.expect_tx` of the stage's bytes and the loads' boxes;
// iteration k waits for phase parity (k / S) & 1 of stage k % S. A wgmma
// operand stage is a core buffer (coreStrides), which a box of 8 columns by
// all rows fills as one column chunk; other tiles are one box. Out-of-range
// elements read zero (the fill mode), which is kiln.load's padding.

/// The byte address (index) of `m`'s first element.
Value byteAddress(ImplicitLocOpBuilder &b, Value m) {
  auto type = cast<MemRefType>(m.getType());
  auto meta = memref::ExtractStridedMetadataOp::create(b, m);
  return arith::AddIOp::create(
      b, memref::ExtractAlignedPointerAsIndexOp::create(b, m),
      arith::MulIOp::create(
          b, meta.getOffset(),
          cIdx(b, std::max<int64_t>(1, type.getElementTypeBitWidth() / 8))));
}

/// An !llvm.ptr in address space `space` at byte address `addr` (index).
Value pointerAt(ImplicitLocOpBuilder &b, Value addr, unsigned space) {
  return LLVM::IntToPtrOp::create(
      b, LLVM::LLVMPointerType::get(b.getContext(), space),
      Value(arith::IndexCastOp::create(b, b.getI64Type(), addr)));
}

Value i32Const(ImplicitLocOpBuilder &b, int64_t v) {
  return arith::ConstantIntOp::create(b, b.getI32Type(), v);
}

/// Runs `body` on thread 0 only.
void onThread0(ImplicitLocOpBuilder &b, Value threadId,
                      function_ref<void(ImplicitLocOpBuilder &)> body) {
  auto ifOp = scf::IfOp::create(
      b, TypeRange{},
      arith::CmpIOp::create(b, arith::CmpIPredicate::eq, threadId, cIdx(b, 0)),
      false);
  ImplicitLocOpBuilder tb(b.getLoc(), ifOp.getThenBodyBuilder());
  body(tb);
}

/// Runs `body` when `cond` (i1) holds.
void when(ImplicitLocOpBuilder &b, Value cond,
                 function_ref<void(ImplicitLocOpBuilder &)> body) {
  auto ifOp = scf::IfOp::create(b, TypeRange{}, cond, false);
  ImplicitLocOpBuilder tb(b.getLoc(), ifOp.getThenBodyBuilder());
  body(tb);
}

/// The address (index) of this program's tensor map `slot` in the scratch.
static Value tensorMapAddress(ImplicitLocOpBuilder &b, const SimtConfig &simt,
                              int64_t slot) {
  Value off = arith::AddIOp::create(
      b,
      arith::MulIOp::create(b, simt.programLinear, simt.scratchStride),
      cIdx(b, slot * 128));
  return arith::AddIOp::create(
      b, memref::ExtractAlignedPointerAsIndexOp::create(b, simt.scratch), off);
}

static int64_t storageBytes(RankedTensorType type) {
  return std::max<int64_t>(
      1, storageType(type.getElementType()).getIntOrFloatBitWidth() / 8);
}

/// A tile TMA can move as one map's box: rank 2 to 5, every dimension but
/// the last two of size 1.
static bool boxShaped(RankedTensorType type) {
  int64_t rank = type.getRank();
  if (rank < 2 || rank > 5)
    return false;
  for (int64_t d = 0; d + 2 < rank; ++d)
    if (type.getDimSize(d) != 1)
      return false;
  return true;
}

/// A TMA coordinate: `v` clamped into [-2^30, 2^30] as i32 (out of range
/// stays out of range: sizes are at most 2^30, see tmaViewAllows).
static Value tmaCoord(ImplicitLocOpBuilder &b, Value v) {
  v = arith::MaxSIOp::create(b, v, cIdx(b, -(int64_t(1) << 30)));
  v = arith::MinSIOp::create(b, v, cIdx(b, int64_t(1) << 30));
  return arith::IndexCastOp::create(b, b.getI32Type(), v);
}

/// A view size that is a constant above 2^30 (the front end's unbounded
/// dimensions: a batch or head offset's, a pointer access's unmasked rows).
/// Its map takes 2^30 instead (mapSize), which is exact for a box that ends
/// at or below 2^30; a fill or store whose box does not goes by threads
/// (tmaInRange).
static bool unboundedSize(Value size) {
  APInt c;
  return matchPattern(size, m_ConstantInt(&c)) &&
         c.getSExtValue() > (int64_t(1) << 30);
}

static Value mapSize(ImplicitLocOpBuilder &b, Value size) {
  return unboundedSize(size) ? cIdx(b, int64_t(1) << 30) : size;
}

Value KernelLowering::tmaInRange(ImplicitLocOpBuilder &b, const ViewInfo &vi,
                                 ValueRange offsets, RankedTensorType type) {
  Value ok;
  for (auto [d, size] : llvm::enumerate(vi.sizes)) {
    if (!unboundedSize(size) || d >= offsets.size())
      continue;
    Value in = arith::CmpIOp::create(
        b, arith::CmpIPredicate::sle, offsets[d],
        cIdx(b, (int64_t(1) << 30) - type.getDimSize(d)));
    ok = ok ? arith::AndIOp::create(b, ok, in).getResult() : in;
  }
  return ok;
}

//===----------------------------------------------------------------------===//
// Host maps: tensor maps the runtime encodes at launch
//===----------------------------------------------------------------------===//
//
// A view made from a pointer argument with sizes and strides computed from
// scalar arguments and constants is the same for every program of a launch,
// so its tensor map is too: the bundle records how to compute it (a
// `tensor_map` manifest line) and the runtime encodes it once per launch
// (cuTensorMapEncodeTiled on the GPU; the emulator's encoder for emu-sm_XY)
// and passes it as a 128-byte kernel parameter (byval, __grid_constant__),
// as CUTLASS and FlashAttention 3 do. No program builds, copies, releases or
// acquires a map. The runtime also decides whether the view allows TMA (the
// conditions of tmaViewAllows) and passes the answers as one i32 of flags.

/// Appends `v`'s postfix expression over the kernel's scalar arguments
/// (tokens separated by commas: decimal integers, `aN` for user argument N,
/// and + - * sdiv udiv srem urem smax smin umax umin on 64 bits) to `out`;
/// false when `v` is computed otherwise. The runtime evaluates it with the
/// launch's argument values (docs/bundle-format.md, "tensor_map").
static bool argExpression(Value v, const SimtConfig &simt, std::string &out,
                          int &budget) {
  if (--budget < 0)
    return false;
  auto sep = [&] {
    if (!out.empty())
      out += ',';
  };
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    // (Not i1: index_cast sign-extends it, true to -1, where the runtime
    // reads an i1 argument as 0 or 1.)
    if (arg.getOwner() != simt.entry || arg.getArgNumber() >= simt.numUserArgs ||
        !arg.getType().isSignlessInteger() || arg.getType().isSignlessInteger(1))
      return false;
    sep();
    out += "a" + std::to_string(arg.getArgNumber());
    return true;
  }
  Operation *op = v.getDefiningOp();
  if (!op || !(v.getType().isIndex() || v.getType().isSignlessInteger(64)))
    return false;
  APInt c;
  if (matchPattern(v, m_ConstantInt(&c))) {
    sep();
    out += std::to_string(c.getSExtValue());
    return true;
  }
  if (auto cast = dyn_cast<arith::IndexCastOp>(op)) {
    // From an argument (sign-extended by its type, as the runtime does) or
    // a 64-bit value; not from narrower arithmetic, which wraps at its width.
    Value in = cast.getIn();
    if (!isa<BlockArgument>(in) && !in.getType().isSignlessInteger(64))
      return false;
    return argExpression(in, simt, out, budget);
  }
  const char *name = llvm::TypeSwitch<Operation *, const char *>(op)
                         .Case<arith::AddIOp>([](auto) { return "+"; })
                         .Case<arith::SubIOp>([](auto) { return "-"; })
                         .Case<arith::MulIOp>([](auto) { return "*"; })
                         .Case<arith::DivSIOp>([](auto) { return "sdiv"; })
                         .Case<arith::DivUIOp>([](auto) { return "udiv"; })
                         .Case<arith::RemSIOp>([](auto) { return "srem"; })
                         .Case<arith::RemUIOp>([](auto) { return "urem"; })
                         .Case<arith::MaxSIOp>([](auto) { return "smax"; })
                         .Case<arith::MinSIOp>([](auto) { return "smin"; })
                         .Case<arith::MaxUIOp>([](auto) { return "umax"; })
                         .Case<arith::MinUIOp>([](auto) { return "umin"; })
                         .Default([](Operation *) { return nullptr; });
  if (!name || op->getNumOperands() != 2)
    return false;
  if (!argExpression(op->getOperand(0), simt, out, budget) ||
      !argExpression(op->getOperand(1), simt, out, budget))
    return false;
  out += ',';
  out += name;
  return true;
}

int64_t KernelLowering::addHostMap(const ViewInfo &vi, RankedTensorType type,
                                   StringRef kind) {
  if (!simt->hostMaps || !simt->kernelFunc || !vi.base)
    return -1;
  // Core-matrix maps step through a dimension (the column chunks, 16 bytes)
  // whose stride is below the rows'. cuTensorMapEncodeTiled documents its
  // strides as each including the previous dimension's; whether it refuses
  // others is unknown until a GPU run (no driver here), and the device-built
  // ones ran on an H200: they stay device-built.
  if (kind == "core")
    return -1;
  auto base = dyn_cast<BlockArgument>(vi.base);
  if (!base || base.getOwner() != simt->entry ||
      base.getArgNumber() >= simt->numUserArgs ||
      !isa<MemRefType>(base.getType()))
    return -1;
  int64_t rank = type.getRank();
  if (int64_t(vi.sizes.size()) != rank || int64_t(vi.strides.size()) != rank)
    return -1;
  std::string spec;
  llvm::raw_string_ostream os(spec);
  os << kind << " " << storageBytes(type) << " " << base.getArgNumber() << " "
     << rank << " " << type.getDimSize(rank - 2) << " "
     << type.getDimSize(rank - 1);
  for (ArrayRef<Value> values : {ArrayRef<Value>(vi.sizes), ArrayRef<Value>(vi.strides)})
    for (Value v : values) {
      std::string expr;
      int budget = 64;
      if (values.data() == vi.sizes.data() && unboundedSize(v))
        expr = std::to_string(int64_t(1) << 30); // mapSize
      else if (!argExpression(v, *simt, expr, budget))
        return -1;
      os << " " << expr;
    }
  // The same map twice (two loops over one view): one parameter.
  for (auto [i, s] : llvm::enumerate(simt->hostMapSpecs))
    if (s == spec)
      return i;
  // At most 16: 2 KiB of parameters, well inside the 4 KiB that every
  // driver and ptxas allow a kernel (the runtime reads up to 32, the flags'
  // bits). Further maps are built on the device.
  if (simt->hostMapSpecs.size() >= 16)
    return -1;
  auto fn = cast<gpu::GPUFuncOp>(simt->kernelFunc);
  MLIRContext *ctx = fn.getContext();
  Location loc = fn.getLoc();
  if (!simt->hostMapFlags) {
    unsigned at = fn.getNumArguments();
    (void)fn.insertArgument(at, IntegerType::get(ctx, 32), DictionaryAttr(), loc);
    simt->hostMapFlags = fn.getArgument(at);
  }
  unsigned at = fn.getNumArguments();
  // 64-byte aligned (a CUtensorMap); the NVGPU target makes it byval and
  // __grid_constant__ once the function is an llvm.func.
  (void)fn.insertArgument(
      at, LLVM::LLVMPointerType::get(ctx),
      DictionaryAttr::get(ctx, {NamedAttribute(StringAttr::get(ctx, "llvm.align"),
                                               IntegerAttr::get(IntegerType::get(ctx, 64), 64))}),
      loc);
  simt->hostMapArgs.push_back(fn.getArgument(at));
  simt->hostMapSpecs.push_back(spec);
  // Thread 0 brings it into the tensor-map cache at the kernel's start, as
  // CUTLASS's kernels do (prefetch.tensormap), ahead of its first copy.
  if (Operation *tid = simt->threadId.getDefiningOp()) {
    ImplicitLocOpBuilder pb(loc, tid->getBlock(), std::next(Block::iterator(tid)));
    int64_t index = int64_t(simt->hostMapSpecs.size()) - 1;
    onThread0(pb, simt->threadId, [&](ImplicitLocOpBuilder &tb) {
      when(tb, hostMapUsable(tb, index), [&](ImplicitLocOpBuilder &ub) {
        NVVM::PrefetchOp::create(ub, NVVM::PrefetchCacheLevelAttr(),
                                 NVVM::CacheEvictionPriorityAttr(),
                                 simt->hostMapArgs[index], Value(),
                                 /*tensormap=*/true);
      });
    });
  }
  return int64_t(simt->hostMapSpecs.size()) - 1;
}

Value KernelLowering::hostMapUsable(ImplicitLocOpBuilder &b, int64_t index) {
  Value bit = arith::AndIOp::create(
      b,
      arith::ShRUIOp::create(b, simt->hostMapFlags,
                             arith::ConstantIntOp::create(b, b.getI32Type(), index)),
      arith::ConstantIntOp::create(b, b.getI32Type(), 1));
  return arith::CmpIOp::create(b, arith::CmpIPredicate::ne, bit,
                               arith::ConstantIntOp::create(b, b.getI32Type(), 0));
}

/// The kind of map a pipelined load of a tile of this layout takes.
static StringRef mapKind(bool core, bool swizzled) {
  return swizzled ? "swizzled" : core ? "core" : "plain";
}

bool KernelLowering::tmaCandidate(const PipelinedLoad &pl, scf::ForOp loop) {
  LoadOp load = pl.load;
  Value view = load.getView();
  if (!simt->tma || !simt->scratch || pl.feedsGather ||
      loop.getRegion().isAncestor(view.getParentRegion()) ||
      !views.count(view))
    return false;
  // The fill mode reads zero bits out of range.
  if (TypedAttr pad = load.getPaddingAttr()) {
    bool zero = false;
    if (auto f = dyn_cast<FloatAttr>(pad))
      zero = f.getValue().bitcastToAPInt().isZero();
    else if (auto i = dyn_cast<IntegerAttr>(pad))
      zero = i.getValue().isZero();
    if (!zero)
      return false;
  }
  RankedTensorType type = load.getResult().getType();
  int64_t rank = type.getRank(), eb = storageBytes(type);
  if (!boxShaped(type))
    return false;
  int64_t rows = type.getDimSize(rank - 2), cols = type.getDimSize(rank - 1);
  // Box dimensions are at most 256 elements; the innermost spans a multiple
  // of 16 bytes. The destination must be 128-byte aligned, which the
  // shared-memory planner gives buffers of whole 128-byte lines.
  if (rows > 256 || (eb != 1 && eb != 2 && eb != 4 && eb != 8) ||
      rows * cols * eb % 128 != 0)
    return false;
  // A swizzled stage takes boxes of 128-byte rows (64 16-bit columns, 128
  // fp8 bytes); a core buffer's map has one dimension more (the column
  // chunks; 16-bit elements only: fp8 core stages take cp.async).
  if (pl.swizzled)
    return (eb == 2 || eb == 1) && cols % (128 / eb) == 0;
  if (isCoreBuffer(pl.stages[0]))
    return cols % 8 == 0 && eb == 2 && rank <= 4;
  // A box lands dense: not in a buffer with padded or XOR-swizzled rows
  // (mma.sync operands).
  if (isPaddedBuffer(pl.stages[0]) || isXorBuffer(pl.stages[0]))
    return false;
  return cols <= 256 && cols * eb % 16 == 0;
}

/// The dimensions of `pl`'s tensor map, innermost first: global size, byte
/// stride (none for dimension 0) and box size. A plain tile's map is its
/// view's, reversed, with the tile as the box. A core buffer's splits the
/// columns into chunks of 8 elements (16 bytes): (8 elements, rows, column
/// chunks at a 16-byte stride, outer dimensions), box (8, R, C / 8, 1...):
/// the box lands in shared memory as the core buffer's column chunks of all
/// rows (coreStrides). Its view's column count must be a multiple of 8 (run
/// time), or the last chunk would read past the row. A swizzled stage's
/// map is the view's with boxes of 64 columns (128 bytes) by R rows, one
/// per column slab, written in the 128B swizzle.
static SmallVector<TmaDim> tmaDims(ImplicitLocOpBuilder &b, const ViewInfo &vi,
                                   RankedTensorType type, bool core,
                                   bool swizzled) {
  int64_t rank = type.getRank(), eb = storageBytes(type);
  int64_t rows = type.getShape()[rank - 2], cols = type.getShape()[rank - 1];
  auto stride = [&](int64_t d) {
    return arith::MulIOp::create(b, vi.strides[d], cIdx(b, eb)).getResult();
  };
  auto size = [&](int64_t d) { return mapSize(b, vi.sizes[d]); };
  SmallVector<TmaDim> dims;
  if (core && !swizzled) {
    dims.push_back({cIdx(b, 8), Value(), 8});
    dims.push_back({size(rank - 2), stride(rank - 2), rows});
    dims.push_back({arith::DivUIOp::create(b, size(rank - 1), cIdx(b, 8)),
                    cIdx(b, 16), cols / 8});
  } else {
    // (A swizzled box is one 128-byte slab wide: 64 16-bit columns, 128
    // of fp8's bytes.)
    dims.push_back({size(rank - 1), Value(), swizzled ? 128 / eb : cols});
    dims.push_back({size(rank - 2), stride(rank - 2), rows});
  }
  for (int64_t d = rank - 3; d >= 0; --d)
    dims.push_back({size(d), stride(d), 1});
  return dims;
}

/// Whether view `vi` allows a TMA map of a rank-`rank` tile of `eb`-byte
/// elements (i1, uniform, run time): unit innermost stride, a 16-byte
/// aligned base, positive outer strides that are multiples of 16 bytes below
/// 2^40, and sizes in [1, 2^30] (coordinates are clamped into
/// [-2^30, 2^30], so they stay out of range when they were); with
/// `chunkColumns`, a column count that is a multiple of 8 (core-matrix maps).
Value KernelLowering::tmaViewAllows(ImplicitLocOpBuilder &b, const ViewInfo &vi,
                                    int64_t rank, int64_t eb,
                                    bool chunkColumns) {
  Value c0 = cIdx(b, 0), c16 = cIdx(b, 16);
  auto cmp = [&](arith::CmpIPredicate p, Value x, Value y) {
    return arith::CmpIOp::create(b, p, x, y);
  };
  Value ok = vi.unitStride;
  auto both = [&](Value c) { ok = arith::AndIOp::create(b, ok, c); };
  if (chunkColumns)
    both(cmp(arith::CmpIPredicate::eq,
             arith::RemUIOp::create(b, vi.sizes[rank - 1], cIdx(b, 8)), c0));
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, vi.memref);
  both(cmp(arith::CmpIPredicate::eq, arith::RemUIOp::create(b, base, c16), c0));
  for (int64_t d = 0; d < rank; ++d) {
    Value size = mapSize(b, vi.sizes[d]);
    both(cmp(arith::CmpIPredicate::sge, size, cIdx(b, 1)));
    both(cmp(arith::CmpIPredicate::sle, size, cIdx(b, 1 << 30)));
    if (d + 1 == rank)
      continue;
    Value bytes = arith::MulIOp::create(b, vi.strides[d], cIdx(b, eb));
    both(cmp(arith::CmpIPredicate::sgt, vi.strides[d], c0));
    both(cmp(arith::CmpIPredicate::slt, vi.strides[d],
             cIdx(b, (int64_t(1) << 40) / eb)));
    both(cmp(arith::CmpIPredicate::eq, arith::RemUIOp::create(b, bytes, c16),
             c0));
  }
  return ok;
}

/// Thread 0 (at `mb`): writes tensor map `slot` of this program's scratch
/// for view `vi` and `dims` (tmaDims) of `eb`-byte elements: zero-filled
/// first (fields not replaced stay zero), then each field by
/// `tensormap.replace`; the caller releases and acquires it.
void KernelLowering::buildTensorMap(ImplicitLocOpBuilder &mb, int64_t slot,
                                    const ViewInfo &vi, ArrayRef<TmaDim> dims,
                                    int64_t eb, int64_t swizzleMode) {
  Value addr = tensorMapAddress(mb, *simt, slot);
  // Built in shared memory, then copied to the scratch in global memory as
  // 16-byte stores: each `tensormap.replace` is a read-modify-write of the
  // map, and on global memory each waits out the memory's latency (about 29
  // µs per program for attention's six maps on an H200, docs/performance.md).
  // The copy is generic-proxy writes, which the caller's
  // fence.proxy.tensormap release orders before the map's use, as it did the
  // replaces.
  Value staging = allocSharedTile(
      RankedTensorType::get({128}, mb.getI8Type()), mb.getLoc());
  Value local = byteAddress(mb, staging);
  // Chunk j (16 bytes) of the map at `base` in address space `space`.
  auto chunkAt = [&](Value base, int64_t j, unsigned space) {
    return pointerAt(mb, arith::AddIOp::create(mb, base, cIdx(mb, 16 * j)), space);
  };
  auto v4 = VectorType::get({4}, mb.getI32Type());
  auto zeros = arith::ConstantOp::create(
      mb, DenseElementsAttr::get(v4, mb.getI32IntegerAttr(0)));
  for (int64_t j = 0; j < 8; ++j)
    LLVM::StoreOp::create(mb, zeros, chunkAt(local, j, 3), /*alignment=*/16);
  Value map = pointerAt(mb, local, 3);
  auto replace = [&](StringRef field, ValueRange args) {
    SmallVector<Value> operands{map};
    operands.append(args.begin(), args.end());
    LLVM::CallIntrinsicOp::create(
        mb, mb.getStringAttr("llvm.nvvm.tensormap.replace." + field), operands);
  };
  replace("global.address",
          {arith::IndexCastOp::create(
              mb, mb.getI64Type(),
              memref::ExtractAlignedPointerAsIndexOp::create(mb, vi.memref))});
  replace("rank", {i32Const(mb, int64_t(dims.size()) - 1)});
  for (auto [i, dim] : llvm::enumerate(dims)) {
    int64_t ord = i;
    replace("box.dim", {i32Const(mb, ord), i32Const(mb, dim.box)});
    replace("global.dim",
            {i32Const(mb, ord),
             arith::IndexCastOp::create(mb, mb.getI32Type(), dim.size)});
    replace("element.stride", {i32Const(mb, ord), i32Const(mb, 1)});
    // global_stride ord i - 1 is dimension i's.
    if (dim.strideBytes)
      replace("global.stride",
              {i32Const(mb, ord - 1),
               arith::IndexCastOp::create(mb, mb.getI64Type(), dim.strideBytes)});
  }
  // Unsigned integers of the element's size: TMA copies bits.
  int64_t elemtype = eb == 1 ? 0 : eb == 2 ? 1 : eb == 4 ? 2 : 4;
  replace("elemtype", {i32Const(mb, elemtype)});
  replace("interleave.layout", {i32Const(mb, 0)});
  // 3: the 128B swizzle (its boxes' rows are 128 bytes).
  replace("swizzle.mode", {i32Const(mb, swizzleMode)});
  replace("fill.mode", {i32Const(mb, 0)});
  // Both ends are 128-byte aligned: eight 16-byte copies. (The emulator
  // takes a map acquired at an address it was not built at for a copy of
  // the released map with the same bytes, kiln_emu_tensormap_acquire.)
  for (int64_t j = 0; j < 8; ++j)
    LLVM::StoreOp::create(
        mb, LLVM::LoadOp::create(mb, v4, chunkAt(local, j, 3), /*alignment=*/16),
        chunkAt(addr, j, 1), /*alignment=*/16);
}

void KernelLowering::setupTma(ImplicitLocOpBuilder &b, scf::ForOp loop,
                              PipelinedLoop &state) {
  SmallVector<PipelinedLoad *> tmaLoads;
  for (PipelinedLoad &pl : state.loads)
    if (tmaCandidate(pl, loop))
      tmaLoads.push_back(&pl);
  if (tmaLoads.empty())
    return;
  Value anyTma = arith::ConstantIntOp::create(b, 0, 1);
  SmallVector<PipelinedLoad *> newMaps; // the others reuse a built map
  std::optional<DominanceInfo> dom;     // built at the first cached map
  for (PipelinedLoad *pl : tmaLoads) {
    const ViewInfo &vi = views[pl->load.getView()];
    RankedTensorType type = pl->load.getResult().getType();
    int64_t eb = storageBytes(type);
    pl->tmaBytes = type.getNumElements() * eb;
    auto key = std::make_tuple(pl->load.getView().getAsOpaquePointer(),
                               type.getAsOpaquePointer(),
                               isCoreBuffer(pl->stages[0]), pl->swizzled);
    auto it = builtMaps.find(key);
    if (it != builtMaps.end() && !dom)
      dom.emplace(func);
    if (it != builtMaps.end() && dom->properlyDominates(it->second.ok, loop)) {
      pl->useTma = it->second.ok;
      pl->tensorMap = it->second.slot;
      pl->hostMap = it->second.hostMap;
    } else if (int64_t host = addHostMap(
                   vi, type, mapKind(isCoreBuffer(pl->stages[0]), pl->swizzled));
               host >= 0) {
      pl->useTma = hostMapUsable(b, host);
      pl->hostMap = host;
      builtMaps[key] = {-1, host, pl->useTma};
    } else {
      pl->useTma = tmaViewAllows(b, vi, type.getRank(), eb,
                                 isCoreBuffer(pl->stages[0]) && !pl->swizzled);
      pl->tensorMap = simt->tensorMaps++;
      builtMaps[key] = {pl->tensorMap, -1, pl->useTma};
      newMaps.push_back(pl);
    }
    anyTma = arith::OrIOp::create(b, anyTma, pl->useTma);
  }
  state.anyTma = anyTma;
  int64_t stages = simt->numStages;
  state.barriers = allocSharedTile(
      RankedTensorType::get({stages}, b.getI64Type()), loop.getLoc());
  // Used across the loop (the planner keeps it for the whole loop).
  simt->bufferHome[state.barriers.getDefiningOp()] = loop->getBlock();

  onThread0(b, simt->threadId, [&](ImplicitLocOpBuilder &tb) {
    for (PipelinedLoad *pl : newMaps)
      when(tb, pl->useTma, [&](ImplicitLocOpBuilder &mb) {
        const ViewInfo &vi = views[pl->load.getView()];
        RankedTensorType type = pl->load.getResult().getType();
        buildTensorMap(mb, pl->tensorMap, vi,
                       tmaDims(mb, vi, type, isCoreBuffer(pl->stages[0]),
                               pl->swizzled),
                       storageBytes(type), pl->swizzled ? 3 : 0);
      });
    if (!newMaps.empty())
      NVVM::FenceProxyReleaseOp::create(tb, NVVM::MemScopeKind::GPU);
    for (PipelinedLoad *pl : newMaps)
      when(tb, pl->useTma, [&](ImplicitLocOpBuilder &ab) {
        NVVM::FenceProxyAcquireOp::create(
            ab, NVVM::MemScopeKind::GPU,
            pointerAt(ab, tensorMapAddress(ab, *simt, pl->tensorMap), 0),
            i32Const(ab, 128));
      });
    when(tb, anyTma, [&](ImplicitLocOpBuilder &ib) {
      Value bars = byteAddress(ib, state.barriers);
      for (int64_t s = 0; s < stages; ++s)
        NVVM::MBarrierInitOp::create(
            ib, pointerAt(ib, arith::AddIOp::create(ib, bars, cIdx(ib, 8 * s)), 3),
            i32Const(ib, 1), Value());
    });
  });
  // The initialized barriers, to every thread and to the async proxy.
  asyncProxyFence(b);
  barrier(b);

  // After the loop: every thread has passed its last wait (each iteration
  // waits before its barrier), so the barriers can be invalidated before
  // their bytes are reused.
  ImplicitLocOpBuilder ab(loop.getLoc(), loop->getBlock(),
                          std::next(Block::iterator(loop)));
  onThread0(ab, simt->threadId, [&](ImplicitLocOpBuilder &tb) {
    when(tb, anyTma, [&](ImplicitLocOpBuilder &ib) {
      Value bars = byteAddress(ib, state.barriers);
      for (int64_t s = 0; s < stages; ++s)
        NVVM::MBarrierInvalOp::create(
            ib,
            pointerAt(ib, arith::AddIOp::create(ib, bars, cIdx(ib, 8 * s)), 3));
    });
  });
}

Value KernelLowering::tmaIssuable(ImplicitLocOpBuilder &b,
                                  const PipelinedLoad &pl,
                                  ValueRange offsets) {
  Value ok = pl.useTma;
  // A box past 2^30 in an unbounded dimension (mapSize): cp.async.
  LoadOp load = pl.load;
  if (Value in = tmaInRange(b, views[load.getView()], offsets,
                            load.getResult().getType()))
    ok = arith::AndIOp::create(b, ok, in);
  if (!isCoreBuffer(pl.stages[0]) || pl.swizzled)
    return ok;
  // A core buffer's box starts at a column chunk: an offset that is a
  // multiple of 8 (else this fill takes cp.async).
  Value col = offsets.back();
  return arith::AndIOp::create(
      b, ok,
      arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                            arith::RemSIOp::create(b, col, cIdx(b, 8)),
                            cIdx(b, 0)));
}

void KernelLowering::issueTma(ImplicitLocOpBuilder &b, PipelinedLoad &pl,
                              ValueRange offsets, Value dst, Value barrier) {
  RankedTensorType type = pl.load.getResult().getType();
  int64_t rank = type.getRank();
  Value map = pl.hostMap >= 0
                  ? simt->hostMapArgs[pl.hostMap]
                  : pointerAt(b, tensorMapAddress(b, *simt, pl.tensorMap), 0);
  auto coord = [&](Value v) { return tmaCoord(b, v); };
  SmallVector<Value> coords;
  if (pl.swizzled) {
    // One box per slab of 128-byte rows (64 16-bit columns, 128 fp8
    // bytes), each R rows (and the unit outer dimensions).
    int64_t slab = 128 / storageBytes(type);
    int64_t rows = type.getDimSize(rank - 2),
            slabs = type.getDimSize(rank - 1) / slab;
    Value base = byteAddress(b, dst);
    for (int64_t s = 0; s < slabs; ++s) {
      SmallVector<Value> at{
          coord(arith::AddIOp::create(b, offsets[rank - 1], cIdx(b, slab * s))),
          coord(offsets[rank - 2])};
      for (int64_t d = rank - 3; d >= 0; --d)
        at.push_back(coord(offsets[d]));
      NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp::create(
          b,
          pointerAt(b, arith::AddIOp::create(b, base, cIdx(b, s * rows * 128)),
                    7),
          map, at, pointerAt(b, barrier, 3), ValueRange{}, Value(), Value(),
          NVVM::TMALoadMode::TILE, false, NVVM::CTAGroupKindAttr(), Value());
    }
    return;
  }
  if (isCoreBuffer(pl.stages[0])) {
    coords.push_back(i32Const(b, 0));
    coords.push_back(coord(offsets[rank - 2]));
    coords.push_back(coord(
        arith::DivSIOp::create(b, offsets[rank - 1], cIdx(b, 8))));
  } else {
    coords.push_back(coord(offsets[rank - 1]));
    coords.push_back(coord(offsets[rank - 2]));
  }
  for (int64_t d = rank - 3; d >= 0; --d)
    coords.push_back(coord(offsets[d]));
  // (A shared::cta address is this block's shared::cluster address.)
  NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp::create(
      b, pointerAt(b, byteAddress(b, dst), 7), map, coords,
      pointerAt(b, barrier, 3), ValueRange{}, Value(), Value(),
      NVVM::TMALoadMode::TILE, false, NVVM::CTAGroupKindAttr(), Value());
}

bool KernelLowering::tmaStoreCandidate(Operation *op, Value tileBuf,
                                       RankedTensorType type) {
  // Stores outside loops (an epilogue): the map is built where the store
  // is, once. Only in kernels that already build maps for their pipelined
  // loads (a GEMM's or attention's epilogue): in a small kernel (a
  // softmax, a gather) thread 0's map building and its fences would not be
  // paid back by one store.
  if (!simt || !simt->tma || !simt->scratch ||
      simt->tensorMaps + int64_t(simt->hostMapSpecs.size()) == 0 ||
      op->getParentOfType<LoopLikeOpInterface>())
    return false;
  auto bufType = cast<MemRefType>(tileBuf.getType());
  int64_t rank = type.getRank(), eb = storageBytes(type);
  if (!bufType.getLayout().isIdentity() || !bufType.hasStaticShape() ||
      bufType.getRank() != rank || !boxShaped(type) ||
      (eb != 1 && eb != 2 && eb != 4 && eb != 8))
    return false;
  int64_t rows = type.getDimSize(rank - 2), cols = type.getDimSize(rank - 1);
  // A tile of at most 16 bytes per thread (attention's lse row; one 16-byte
  // store each when row-major, a few narrower ones from dot fragments): by
  // threads. They need no fence, no thread 0
  // issuing a box and no wait for it, which the kernel's end would pay
  // (a box with any access after it even waits for its global writes).
  if (rows * cols * eb <= simt->numThreads * 16)
    return false;
  // A box of the whole tile (at most 256 x 256, rows of a multiple of 16
  // bytes) from a buffer of whole 128-byte lines (the planner starts those
  // on one).
  return rows <= 256 && cols <= 256 && cols * eb % 16 == 0 &&
         rows * cols * eb % 128 == 0;
}

/// Whether anything after `op` (in program order, to the kernel's end) may
/// access memory: a kiln load, gather, store, scatter or atomic, or an op of
/// another dialect with a read or write effect. (A later write to the same
/// memory must land after the box's: a box whose writes are still in flight
/// could overwrite it.)
static bool accessesAfter(Operation *op) {
  for (Operation *o = op; o; o = o->getParentOp()) {
    if (isa<FunctionOpInterface>(o))
      break;
    for (Operation *n = o->getNextNode(); n; n = n->getNextNode()) {
      bool accesses = false;
      n->walk([&](Operation *x) {
        if (isa<LoadOp, GatherOp, StoreOp, ScatterOp, AtomicAddOp, ScatterAddOp,
                AtomicRMWOp, ScatterRMWOp, AtomicCASOp>(x))
          accesses = true;
        else if (auto me = dyn_cast<MemoryEffectOpInterface>(x))
          accesses |= me.hasEffect<MemoryEffects::Read>() ||
                      me.hasEffect<MemoryEffects::Write>();
      });
      if (accesses)
        return true;
    }
  }
  return false;
}

void KernelLowering::emitTmaStore(ImplicitLocOpBuilder &b, Operation *op,
                                  const ViewInfo &vi, ValueRange offsets,
                                  Value tileBuf, RankedTensorType type,
                                  int64_t hostMap) {
  int64_t rank = type.getRank(), slot = hostMap >= 0 ? -1 : simt->tensorMaps++;
  // Nothing after the store touches memory: waiting until the box has been
  // read out of shared memory is enough (the kernel's end completes the
  // writes), as CUTLASS's epilogues do.
  bool readOnly = !accessesAfter(op);
  // Every thread's earlier writes to the async proxy (`fence.proxy.async`,
  // all state spaces: the tile in shared memory, and any earlier generic
  // store to the same global memory, which the box must land after), then
  // thread 0 alone: it builds the map, issues the box and waits for the
  // whole bulk group (the global writes done, the tile read) before the
  // caller's barrier frees the buffer.
  NVVM::FenceProxyOp::create(b, NVVM::ProxyKind::async,
                             NVVM::SharedSpaceAttr());
  barrier(b);
  onThread0(b, simt->threadId, [&](ImplicitLocOpBuilder &tb) {
    // (Building it with the loop's maps, under their fence, measured no
    // faster on an H200 and kept its values live across the loop: the
    // 128x128 GEMM at 8 warps went from 127 to 136 registers, one block per
    // SM instead of two, 409 -> 245 TFLOP/s.)
    Value map;
    if (hostMap >= 0) {
      map = simt->hostMapArgs[hostMap];
    } else {
      buildTensorMap(tb, slot, vi,
                     tmaDims(tb, vi, type, /*core=*/false, /*swizzled=*/false),
                     storageBytes(type), /*swizzleMode=*/0);
      NVVM::FenceProxyReleaseOp::create(tb, NVVM::MemScopeKind::GPU);
      map = pointerAt(tb, tensorMapAddress(tb, *simt, slot), 0);
      NVVM::FenceProxyAcquireOp::create(tb, NVVM::MemScopeKind::GPU, map,
                                        i32Const(tb, 128));
    }
    // The box's elements outside the view are not written.
    SmallVector<Value> coords;
    for (int64_t d = rank - 1; d >= 0; --d)
      coords.push_back(tmaCoord(tb, offsets[d]));
    NVVM::CpAsyncBulkTensorSharedCTAToGlobalOp::create(
        tb, map, pointerAt(tb, byteAddress(tb, tileBuf), 3), coords, Value(),
        NVVM::TMAStoreMode::TILE, Value());
    NVVM::CpAsyncBulkCommitGroupOp::create(tb);
    NVVM::CpAsyncBulkWaitGroupOp::create(tb, 0,
                                         readOnly ? tb.getUnitAttr() : UnitAttr());
    // The async proxy's global writes, ordered before this thread's later
    // generic accesses (and, through the caller's barrier, the block's):
    // a later load of the same memory in this kernel sees them.
    if (!readOnly)
      NVVM::FenceProxyOp::create(tb, NVVM::ProxyKind::async_global,
                                 NVVM::SharedSpaceAttr());
  });
}

//===----------------------------------------------------------------------===//
// Software pipelining of tile loads in loops (num_stages)
//===----------------------------------------------------------------------===//

/// `stages[index]` as one SSA value (all stage buffers have one type).
static Value selectStage(ImplicitLocOpBuilder &b, ArrayRef<Value> stages,
                         Value index) {
  Value v = stages[0];
  for (size_t s = 1; s < stages.size(); ++s)
    v = arith::SelectOp::create(
        b,
        arith::CmpIOp::create(b, arith::CmpIPredicate::eq, index,
                              cIdx(b, int64_t(s))),
        stages[s], v);
  return v;
}

/// The element `ex` extracts from a one-element kiln.load, read from global
/// memory at `b` (view and offsets mapped by `map`): every thread reads it
/// (uniform), the padding where it lies outside the view.
Value KernelLowering::scalarReadAt(ImplicitLocOpBuilder &b,
                                   tensor::ExtractOp ex, IRMapping &map) {
  auto load = ex.getTensor().getDefiningOp<LoadOp>();
  const ViewInfo &vi = views[map.lookupOrDefault(load.getView())];
  RankedTensorType type = load.getResult().getType();
  Type storage = storageType(type.getElementType());
  Value valid = arith::ConstantIntOp::create(b, 1, 1);
  SmallVector<Value> at;
  for (auto [d, off] : llvm::enumerate(load.getOffsets())) {
    Value i = arith::AddIOp::create(b, map.lookupOrDefault(off),
                                    map.lookupOrDefault(ex.getIndices()[d]));
    valid = arith::AndIOp::create(
        b, valid,
        arith::AndIOp::create(
            b, arith::CmpIOp::create(b, arith::CmpIPredicate::sge, i, cIdx(b, 0)),
            arith::CmpIOp::create(b, arith::CmpIPredicate::slt, i,
                                  vi.sizes[d])));
    at.push_back(i);
  }
  auto ifOp = scf::IfOp::create(b, TypeRange{storage}, valid, true);
  OpBuilder tb = ifOp.getThenBodyBuilder();
  scf::YieldOp::create(
      tb, b.getLoc(),
      Value(memref::LoadOp::create(tb, b.getLoc(), vi.memref, at)));
  OpBuilder eb = ifOp.getElseBodyBuilder();
  scf::YieldOp::create(
      eb, b.getLoc(),
      Value(arith::ConstantOp::create(
          eb, b.getLoc(),
          paddingAttr(b, load.getPaddingAttr(), storage))));
  return toType(b, b.getLoc(), ifOp.getResult(0), type.getElementType());
}

SmallVector<Value> KernelLowering::pipelinedAccessAt(
    ImplicitLocOpBuilder &b, ArrayRef<Operation *> slice, Value view,
    ValueRange offsets, Value ivOld, Value ivNew, const ViewInfo *&vi,
    IRMapping *mapOut) {
  IRMapping local;
  IRMapping &map = mapOut ? *mapOut : local;
  map.map(ivOld, ivNew);
  for (Operation *op : slice) {
    if (auto ex = dyn_cast<tensor::ExtractOp>(op)) {
      map.map(ex.getResult(), scalarReadAt(b, ex, map));
      continue;
    }
    if (auto pid = dyn_cast<ProgramIdOp>(op)) {
      map.map(pid.getResult(), grid[static_cast<int>(pid.getAxis())]);
      continue;
    }
    if (auto np = dyn_cast<NumProgramsOp>(op)) {
      map.map(np.getResult(), grid[3 + static_cast<int>(np.getAxis())]);
      continue;
    }
    Operation *copy = b.clone(*op, map);
    if (auto mv = dyn_cast<MakeViewOp>(copy))
      (void)lowerMakeView(mv);
  }
  vi = &views[map.lookupOrDefault(view)];
  SmallVector<Value> result;
  for (Value off : offsets)
    result.push_back(map.lookupOrDefault(off));
  return result;
}

/// The stage of `stages` that iteration number `iter` uses (iter modulo
/// their count; the stage itself for a constant `iter`).
static Value stageOf(ImplicitLocOpBuilder &b, ArrayRef<Value> stages,
                     Value iter) {
  int64_t n = stages.size();
  if (std::optional<int64_t> c = getConstantIntValue(iter))
    return stages[*c % n];
  return selectStage(b, stages, arith::RemUIOp::create(b, iter, cIdx(b, n)));
}

/// The position of flat element `r` in a tile of `shape` with at most one
/// dimension above 1 (the index tiles evaluated at issue).
static SmallVector<Value> rowPosition(ImplicitLocOpBuilder &b,
                                      ArrayRef<int64_t> shape, Value r) {
  SmallVector<Value> at;
  for (int64_t d : shape)
    at.push_back(d == 1 ? cIdx(b, 0) : r);
  return at;
}

/// Whether a tile has at most one dimension above 1.
static bool rowLike(Type t) {
  auto type = dyn_cast<RankedTensorType>(t);
  return type && type.hasStaticShape() &&
         llvm::count_if(type.getShape(), [](int64_t d) { return d != 1; }) <= 1;
}

bool KernelLowering::indexExpression(Value v, scf::ForOp loop,
                                     const PipelinedLoop &state,
                                     SmallVectorImpl<Value> &scalars,
                                     SmallPtrSetImpl<Operation *> &indexLoads,
                                     SmallPtrSetImpl<Operation *> &ops) {
  if (!rowLike(v.getType()))
    return false;
  Region &region = loop.getRegion();
  // Defined before the loop: read from its buffer (one it has now), or
  // computed where it is read (an index tile deferred into the loop).
  if (!region.isAncestor(v.getParentRegion())) {
    DenseElementsAttr cst;
    Operation *def = v.getDefiningOp();
    return matchPattern(v, m_Constant(&cst))
               ? cst.isSplat()
               : bool(buffers.lookup(v)) || (def && deferred.contains(def));
  }
  Operation *def = v.getDefiningOp();
  if (!def || def->getBlock() != loop.getBody())
    return false;
  if (ops.contains(def) || indexLoads.contains(def))
    return true;
  if (auto load = dyn_cast<LoadOp>(def)) {
    // A pipelined load with a plain row-major stage.
    auto it = llvm::find_if(state.loads, [&](const PipelinedLoad &pl) {
      return pl.load == load;
    });
    if (it == state.loads.end() || isCoreBuffer(it->stages[0]) ||
        isPaddedBuffer(it->stages[0]) || isXorBuffer(it->stages[0]))
      return false;
    indexLoads.insert(def);
    return true;
  }
  // A gather of single elements (a block table's entries, `table + tok //
  // PAGE`) from a view made before the loop, by an index expression: each
  // element read from global memory at issue (the loop writes no memory).
  if (auto g = dyn_cast<GatherOp>(def)) {
    Value view = g.getView();
    if (g.getResult().getType().getRank() != 1 || !g.getOffsets().empty() ||
        loop.getRegion().isAncestor(view.getParentRegion()) ||
        !views.count(view))
      return false;
    ops.insert(def);
    return indexExpression(g.getIndices(), loop, state, scalars, indexLoads,
                           ops);
  }
  DenseElementsAttr cst;
  if (matchPattern(v, m_Constant(&cst)))
    return cst.isSplat() && ops.insert(def).second;
  if (auto splat = dyn_cast<SplatOp>(def)) {
    scalars.push_back(splat.getValue());
    ops.insert(def);
    return true;
  }
  if (isa<ArangeOp>(def)) {
    ops.insert(def);
    return true;
  }
  if (isa<ReshapeOp, ExpandDimsOp>(def)) {
    ops.insert(def);
    return indexExpression(def->getOperand(0), loop, state, scalars,
                           indexLoads, ops);
  }
  if (!isa<arith::ArithDialect>(def->getDialect()) ||
      def->getNumRegions() != 0 || def->getNumResults() != 1 ||
      !def->hasTrait<OpTrait::Elementwise>() || !isMemoryEffectFree(def))
    return false;
  auto shape = cast<RankedTensorType>(v.getType()).getShape();
  ops.insert(def);
  for (Value operand : def->getOperands()) {
    auto t = dyn_cast<RankedTensorType>(operand.getType());
    if (!t || t.getShape() != shape ||
        !indexExpression(operand, loop, state, scalars, indexLoads, ops))
      return false;
  }
  return true;
}

Value KernelLowering::evalIndexAt(ImplicitLocOpBuilder &b, Value v, Value r,
                                  Value iter, scf::ForOp loop, IRMapping &map,
                                  PipelinedLoop &state,
                                  DenseMap<Value, Value> &memo) {
  if (Value known = memo.lookup(v))
    return known;
  auto type = cast<RankedTensorType>(v.getType());
  Type elt = type.getElementType();
  Value result;
  Operation *def = v.getDefiningOp();
  DenseElementsAttr cst;
  if (matchPattern(v, m_Constant(&cst))) {
    result = arith::ConstantOp::create(
        b, cast<TypedAttr>(cst.getSplatValue<Attribute>()));
  } else if (!loop.getRegion().isAncestor(v.getParentRegion())) {
    // Its buffer, or (an index tile deferred into the loop: indexExpression)
    // its value computed here.
    SmallVector<Value> at = rowPosition(b, type.getShape(), r);
    Value buf = buffers.lookup(v);
    Value e = buf ? Value(memref::LoadOp::create(b, buf, tileIndices(b, buf, at)))
                  : emitElems(b, v, at, 1);
    result = toType(b, b.getLoc(), e, elt);
  } else if (auto load = dyn_cast<LoadOp>(def)) {
    auto it = llvm::find_if(state.loads, [&](const PipelinedLoad &pl) {
      return pl.load == load;
    });
    Value stage = stageOf(b, it->stages, iter);
    result = toType(b, b.getLoc(),
                    memref::LoadOp::create(b, stage,
                                           rowPosition(b, type.getShape(), r)),
                    elt);
  } else if (auto g = dyn_cast<GatherOp>(def)) {
    // Element r of a gather of single elements: its index, then a read
    // when inside the view (the padding otherwise).
    const ViewInfo &vi = views[g.getView()];
    Value i = arith::IndexCastOp::create(
        b, b.getIndexType(),
        evalIndexAt(b, g.getIndices(), r, iter, loop, map, state, memo));
    Value inside = arith::AndIOp::create(
        b, arith::CmpIOp::create(b, arith::CmpIPredicate::sge, i, cIdx(b, 0)),
        arith::CmpIOp::create(b, arith::CmpIPredicate::slt, i, vi.sizes[0]));
    Type storage = storageType(elt);
    auto ifOp = scf::IfOp::create(b, TypeRange{storage}, inside, true);
    {
      ImplicitLocOpBuilder tb(b.getLoc(), ifOp.getThenBodyBuilder());
      scf::YieldOp::create(tb, Value(memref::LoadOp::create(tb, vi.memref,
                                                            ValueRange{i})));
    }
    {
      ImplicitLocOpBuilder eb(b.getLoc(), ifOp.getElseBodyBuilder());
      scf::YieldOp::create(
          eb, Value(arith::ConstantOp::create(
                  eb, paddingAttr(eb, g.getPaddingAttr(), storage))));
    }
    result = toType(b, b.getLoc(), ifOp.getResult(0), elt);
  } else if (auto splat = dyn_cast<SplatOp>(def)) {
    result = map.lookupOrDefault(splat.getValue());
  } else if (auto ar = dyn_cast<ArangeOp>(def)) {
    result = arith::AddIOp::create(
        b, arith::IndexCastOp::create(b, elt, r),
        arith::ConstantIntOp::create(b, elt, ar.getStart()));
  } else if (isa<ReshapeOp, ExpandDimsOp>(def)) {
    result = evalIndexAt(b, def->getOperand(0), r, iter, loop, map, state, memo);
  } else {
    // An elementwise arith op: the same op on the operands' elements.
    OperationState os(def->getLoc(), def->getName());
    for (Value operand : def->getOperands())
      os.addOperands(evalIndexAt(b, operand, r, iter, loop, map, state, memo));
    os.addTypes(elt);
    os.addAttributes(def->getAttrs());
    result = b.create(os)->getResult(0);
  }
  memo[v] = result;
  return result;
}

void KernelLowering::issuePipelinedLoads(ImplicitLocOpBuilder &b,
                                         scf::ForOp loop, PipelinedLoop &state,
                                         Value iter, bool ahead) {
  Value ivAt = arith::AddIOp::create(
      b, loop.getLowerBound(), arith::MulIOp::create(b, loop.getStep(), iter));
  // Only iterations the loop runs: ivAt < upper bound (uniform).
  auto ifOp = scf::IfOp::create(
      b, TypeRange{},
      arith::CmpIOp::create(b, arith::CmpIPredicate::slt, ivAt,
                            loop.getUpperBound()),
      false);
  ImplicitLocOpBuilder tb(b.getLoc(), ifOp.getThenBodyBuilder());
  Value iv = loop.getInductionVar();
  struct Fill {
    PipelinedLoad *pl;
    const ViewInfo *vi;
    SmallVector<Value> offsets;
    Value dst, tma; // tma: i1, this fill by TMA (null: never)
  };
  SmallVector<Fill> fills;
  for (PipelinedLoad &pl : state.loads) {
    if (pl.feedsGather != ahead)
      continue;
    Fill f;
    f.pl = &pl;
    f.offsets = pipelinedAccessAt(tb, pl.slice, pl.load.getView(),
                                  pl.load.getOffsets(), iv, ivAt, f.vi);
    f.dst = stageOf(tb, pl.stages, iter);
    if (pl.useTma)
      f.tma = tmaIssuable(tb, pl, f.offsets);
    fills.push_back(std::move(f));
  }
  // TMA: every fill of a loop with tensor maps arms its stage's mbarrier
  // (thread 0: one arrival, expecting the bytes of the boxes it then
  // issues; none when every load of this fill takes cp.async). The index
  // loads issued ahead never take TMA and arm nothing.
  Value bar;
  if (state.barriers && !ahead) {
    Value stageIndex = arith::RemUIOp::create(tb, iter, cIdx(tb, simt->numStages));
    bar = arith::AddIOp::create(
        tb, byteAddress(tb, state.barriers),
        arith::MulIOp::create(tb, stageIndex, cIdx(tb, 8)));
    Value tx = i32Const(tb, 0);
    for (Fill &f : fills)
      if (f.tma)
        tx = arith::AddIOp::create(
            tb, tx,
            arith::SelectOp::create(tb, f.tma, i32Const(tb, f.pl->tmaBytes),
                                    i32Const(tb, 0)));
    onThread0(tb, simt->threadId, [&](ImplicitLocOpBuilder &t0) {
      when(t0, state.anyTma, [&](ImplicitLocOpBuilder &ab) {
        NVVM::MBarrierArriveExpectTxOp::create(
            ab, Type(), pointerAt(ab, bar, 3), tx, NVVM::MemScopeKind::CTA,
            false, Value());
      });
    });
  }
  for (Fill &f : fills) {
    PipelinedLoad &pl = *f.pl;
    RankedTensorType type = pl.load.getResult().getType();
    auto asyncCopies = [&](ImplicitLocOpBuilder &cb) {
      emitTileLoadSimt(cb, *f.vi, f.offsets, f.dst, type,
                       paddingAttr(cb, pl.load.getPaddingAttr(),
                                   storageType(type.getElementType())),
                       /*wait=*/false, pl.swizzled);
    };
    if (!f.tma) {
      asyncCopies(tb);
      continue;
    }
    auto tmaIf = scf::IfOp::create(tb, TypeRange{}, f.tma, true);
    ImplicitLocOpBuilder yes(tb.getLoc(), tmaIf.getThenBodyBuilder());
    onThread0(yes, simt->threadId, [&](ImplicitLocOpBuilder &t0) {
      issueTma(t0, pl, f.offsets, f.dst, bar);
    });
    ImplicitLocOpBuilder no(tb.getLoc(), tmaIf.getElseBodyBuilder());
    asyncCopies(no);
  }
  if (ahead)
    return;
  // The gathers of iteration `iter`: their rows by the indices that
  // iteration's index stage holds (landed: see setupPipelining).
  for (PipelinedGather &pg : state.gathers) {
    GatherOp gather = pg.gather;
    RankedTensorType type = gather.getResult().getType();
    const ViewInfo *vi;
    IRMapping map;
    SmallVector<Value> offsets =
        pipelinedAccessAt(tb, pg.slice, gather.getView(), gather.getOffsets(),
                          iv, ivAt, vi, &map);
    // Each thread computes the index of the rows it moves (a chunk's, an
    // element's) itself: no shared index tile, no barrier.
    auto rowIndex = [&](ImplicitLocOpBuilder &rb, Value r) -> Value {
      DenseMap<Value, Value> memo;
      Value x = evalIndexAt(rb, gather.getIndices(), r, iter, loop, map,
                            state, memo);
      return arith::IndexCastOp::create(rb, rb.getIndexType(), x);
    };
    emitRowChunksSimt(tb, *vi, Value(), offsets, stageOf(tb, pg.stages, iter),
                      type,
                      paddingAttr(tb, gather.getPaddingAttr(),
                                  storageType(type.getElementType())),
                      /*isStore=*/false, rowIndex);
  }
}

void KernelLowering::setupPipelining(scf::ForOp loop) {
  if (!simt || simt->numStages < 2 || !simt->asyncCopy)
    return;
  // A kiln.assert guards what follows it; a load issued iterations ahead
  // would run before the assert that guards it (debug builds: no pipelining).
  if (loop->walk([](AssertOp) { return WalkResult::interrupt(); })
          .wasInterrupted())
    return;
  Block *body = loop.getBody();
  Region &region = loop.getRegion();
  Value iv = loop.getInductionVar();
  auto state = std::make_unique<PipelinedLoop>();
  // Whether anything in the loop writes memory: if not, a value the loop
  // reads (a block-sparse index) can be read again, ahead of time.
  bool writes = false;
  // The pointers its stores, atomics and scatters write through. A load
  // through one of them is not issued ahead: it would read, iterations
  // early, rows this iteration still writes (`t = load(row s); store(row
  // s + R)` read the old row s + R next iteration). Different pointer
  // arguments are taken as different arrays, as Triton does; a pointer
  // from int_to_ptr may be any of them.
  auto baseOf = [&](Value view) -> Value {
    if (auto it = views.find(view); it != views.end())
      return it->second.base;
    if (auto made = view.getDefiningOp<MakeViewOp>())
      return made.getBase();
    return view;
  };
  auto isArgument = [](Value v) {
    auto arg = dyn_cast<BlockArgument>(v);
    return arg && arg.getOwner()->isEntryBlock() &&
           isa_and_nonnull<FunctionOpInterface>(arg.getOwner()->getParentOp());
  };
  SmallVector<Value> written;
  body->walk([&](Operation *op) {
    auto effects = dyn_cast<MemoryEffectOpInterface>(op);
    if (!effects || !effects.hasEffect<MemoryEffects::Write>())
      return;
    writes = true;
    for (Value operand : op->getOperands())
      if (isa<ViewType>(operand.getType()))
        written.push_back(baseOf(operand));
  });
  auto mayBeWritten = [&](Value view) {
    Value base = baseOf(view);
    return llvm::any_of(written, [&](Value w) {
      return w == base || !isArgument(w) || !isArgument(base);
    });
  };
  // The ops of the body that compute `roots` from the induction variable
  // and loop invariants, in body order: side-effect-free arith (and
  // kiln.make_view) in the body block itself; false when another op does.
  auto sliceOf = [&](ArrayRef<Value> roots,
                     SmallVector<Operation *> &slice) -> bool {
    DenseSet<Operation *> seen;
    bool ok = true;
    std::function<void(Value)> visit = [&](Value v) {
      if (!ok || v == iv || !region.isAncestor(v.getParentRegion()))
        return;
      Operation *def = v.getDefiningOp();
      // An element of a one-element load in the body (an entry of a
      // block-sparse index list): read from global memory again at issue
      // (scalarReadAt), when the loop writes no memory.
      if (auto ex = dyn_cast_or_null<tensor::ExtractOp>(def)) {
        auto src = ex.getTensor().getDefiningOp<LoadOp>();
        if (!writes && src && src->getBlock() == body &&
            src.getResult().getType().getNumElements() == 1) {
          if (!seen.insert(def).second)
            return;
          visit(src.getView());
          for (Value off : src.getOffsets())
            visit(off);
          for (Value idx : ex.getIndices())
            visit(idx);
          slice.push_back(def);
          return;
        }
      }
      // (Program ids and counts, which front ends emit where they are
      // used, are the grid's values wherever the slice is issued.)
      if (!def || def->getBlock() != body || def->getNumRegions() != 0 ||
          !isMemoryEffectFree(def) ||
          (!isa<arith::ArithDialect>(def->getDialect()) &&
           !isa<MakeViewOp, ProgramIdOp, NumProgramsOp>(def))) {
        ok = false;
        return;
      }
      if (!seen.insert(def).second)
        return;
      for (Value operand : def->getOperands())
        visit(operand);
      slice.push_back(def);
    };
    for (Value r : roots)
      visit(r);
    llvm::sort(slice, [](Operation *a, Operation *b) {
      return a->isBeforeInBlock(b);
    });
    return ok;
  };
  for (Operation &o : *body) {
    auto load = dyn_cast<LoadOp>(&o);
    if (!load || asyncChunk(load.getResult().getType()) == 0)
      continue;
    // The view and offsets: loop-invariant values, or side-effect-free
    // arith (and kiln.make_view) on the induction variable and invariants
    // in the body block itself.
    Value view = load.getView();
    if (!region.isAncestor(view.getParentRegion()) && !views.count(view))
      continue;
    if (mayBeWritten(view))
      continue;
    SmallVector<Value> roots{view};
    llvm::append_range(roots, load.getOffsets());
    SmallVector<Operation *> slice;
    if (!sliceOf(roots, slice))
      continue;
    PipelinedLoad pl;
    pl.load = load;
    pl.slice = std::move(slice);
    for (int64_t s = 0; s < simt->numStages; ++s)
      pl.stages.push_back(allocLoadTile(load));
    if (simt->swizzle && isCoreBuffer(pl.stages[0]) &&
        swizzleCandidate(*simt, load)) {
      // The 128B swizzle is anchored to address bits 7-9: each stage starts
      // on 1024 bytes (the window does).
      pl.swizzled = true;
      for (Value stage : pl.stages)
        simt->bufferAlign[stage.getDefiningOp<memref::ReinterpretCastOp>()
                              .getSource()
                              .getDefiningOp()] = 1024;
    }
    state->loads.push_back(std::move(pl));
  }
  // Gathers of whole rows (chunks by cp.async, zero padding) from a view
  // made before the loop, whose indices are an index expression
  // (indexExpression: DSA's top-k block, MoE's slot column, conv's pixel
  // numbers): pipelined too, the loads the expression reads issued further
  // ahead (feedsGather). Not in a loop that writes memory: rows and indices
  // read iterations ahead could be ones an earlier iteration's scatter or
  // store still has to write.
  Builder attrs(loop.getContext());
  SmallVector<Operation *> indexOps;
  if (simt->pipelineGathers && !writes)
    for (Operation &o : *body) {
      auto gather = dyn_cast<GatherOp>(&o);
      if (!gather)
        continue;
      RankedTensorType type = gather.getResult().getType();
      Value view = gather.getView();
      if (type.getRank() < 2 || asyncChunk(type) == 0 ||
          !zeroBits(paddingAttr(attrs, gather.getPaddingAttr(),
                                storageType(type.getElementType()))) ||
          region.isAncestor(view.getParentRegion()) || !views.count(view) ||
          views[view].strides.empty())
        continue;
      SmallVector<Value> scalars;
      SmallPtrSet<Operation *, 8> indexLoads, ops;
      if (!indexExpression(gather.getIndices(), loop, *state, scalars,
                           indexLoads, ops))
        continue;
      SmallVector<Value> roots(gather.getOffsets());
      llvm::append_range(roots, scalars);
      SmallVector<Operation *> slice;
      if (!sliceOf(roots, slice))
        continue;
      for (PipelinedLoad &pl : state->loads)
        if (indexLoads.contains(pl.load))
          pl.feedsGather = true;
      PipelinedGather pg;
      pg.gather = gather;
      pg.slice = std::move(slice);
      for (int64_t s = 0; s < simt->numStages; ++s)
        pg.stages.push_back(allocLoadTile(gather));
      state->gathers.push_back(std::move(pg));
      llvm::append_range(indexOps, ops);
    }
  // The index expressions' ops that nothing else reads are not lowered
  // where they stand (evaluated at issue instead): users first.
  {
    DenseSet<Operation *> gathers;
    for (PipelinedGather &pg : state->gathers)
      gathers.insert(pg.gather);
    llvm::sort(indexOps, [](Operation *a, Operation *b) {
      return b->isBeforeInBlock(a);
    });
    indexOps.erase(std::unique(indexOps.begin(), indexOps.end()),
                   indexOps.end());
    for (Operation *op : indexOps)
      if (llvm::all_of(op->getUsers(), [&](Operation *user) {
            return gathers.contains(user) || issuedIndexOps.contains(user);
          }))
        issuedIndexOps.insert(op);
  }
  if (state->loads.empty() && state->gathers.empty())
    return;
  ImplicitLocOpBuilder b(loop.getLoc(), loop);
  setupTma(b, loop, *state);
  // A swizzled stage is filled by TMA exactly when its view allows it (a
  // uniform condition, for the whole loop); a core-matrix one also needs
  // each fill's column offset on a chunk, so any of its fills may be
  // written by threads, as every gather's are.
  auto threadWritten = [&](Value byThreads) {
    state->threadWrittenCores =
        state->threadWrittenCores
            ? Value(arith::OrIOp::create(b, state->threadWrittenCores,
                                         byThreads))
            : byThreads;
  };
  for (PipelinedLoad &pl : state->loads) {
    if (!isCoreBuffer(pl.stages[0]))
      continue;
    threadWritten(pl.useTma && pl.swizzled
                      ? Value(arith::XOrIOp::create(
                            b, pl.useTma, arith::ConstantIntOp::create(b, 1, 1)))
                      : Value(arith::ConstantIntOp::create(b, 1, 1)));
  }
  for (PipelinedGather &pg : state->gathers)
    if (isCoreBuffer(pg.stages[0]))
      threadWritten(arith::ConstantIntOp::create(b, 1, 1));
  state->distance = simt->numStages - 1;
  // (The in-flight dot's last iteration retires its groups: runTiledDot.)
  if ((state->inFlight = inFlightDot(loop, *state)))
    state->distance = simt->numStages - 2;
  int64_t distance = state->distance;
  // Index loads of gathers: 2D + 1 stages, iterations 0 .. 2D - 1 issued
  // before the loop as one group, retired at once (the prologue's gathers
  // read the first D of them).
  bool ahead = false;
  for (PipelinedLoad &pl : state->loads)
    if (pl.feedsGather) {
      ahead = true;
      while (int64_t(pl.stages.size()) < 2 * distance + 1)
        pl.stages.push_back(allocLoadTile(pl.load));
    }
  if (ahead) {
    for (int64_t j = 0; j < 2 * distance; ++j)
      issuePipelinedLoads(b, loop, *state, cIdx(b, j), /*ahead=*/true);
    NVVM::CpAsyncCommitGroupOp::create(b);
    NVVM::CpAsyncWaitGroupOp::create(b, 0);
    barrier(b);
  }
  // Prologue: iterations 0 .. D-1 (D: the distance), one cp.async group
  // each (committed even when empty, so that group counts stay uniform).
  for (int64_t j = 0; j < distance; ++j) {
    issuePipelinedLoads(b, loop, *state, cIdx(b, j), /*ahead=*/false);
    NVVM::CpAsyncCommitGroupOp::create(b);
  }
  for (PipelinedLoad &pl : state->loads)
    pipelinedLoads[pl.load] = state.get();
  for (PipelinedGather &pg : state->gathers)
    pipelinedLoads[pg.gather] = state.get();
  pipelinedLoops.push_back(std::move(state));
}

LogicalResult KernelLowering::lowerPipelinedAccess(Operation *op,
                                                   PipelinedLoop &state) {
  auto loop = cast<scf::ForOp>(op->getParentOp());
  ImplicitLocOpBuilder b(op->getLoc(), op);
  int64_t stages = simt->numStages;
  if (!state.current) {
    // At the first pipelined access of iteration k: wait until iteration
    // k's copies have landed (of the D + k groups committed so far, at most
    // D - 1 are newer), fence them for wgmma if it reads them, and sync.
    // Past that barrier every thread has finished iteration k - 1, so
    // iteration k + D is issued into stage (k + D) % S: with D = S - 1 the
    // one iteration k - 1 read; with D = S - 2 (an in-flight dot, whose
    // groups of iteration k - 1 may still read its stage) the one iteration
    // k - 2 read, whose groups every thread retired in iteration k - 1.
    // (Issuing after the barrier is what lets a dot on pipelined operands
    // end without one: see lowerRegisterDot.) Gathers' index loads go to
    // iteration k + 2D, stage (k + 2D) % (2D + 1), the one iteration k - 1
    // read; the gathers of iteration k + D read the indices iteration k - D
    // issued (or the prologue did), which this wait retired.
    int64_t distance = state.distance;
    Value iv = loop.getInductionVar();
    Value k = arith::DivUIOp::create(
        b, arith::SubIOp::create(b, iv, loop.getLowerBound()), loop.getStep());
    Value cS = cIdx(b, stages);
    state.iteration = k;
    state.current = arith::RemUIOp::create(b, k, cS);
    NVVM::CpAsyncWaitGroupOp::create(b, distance - 1);
    if (state.barriers)
      when(b, state.anyTma, [&](ImplicitLocOpBuilder &wb) {
        // Fill k / S of stage k % S: phase parity (k / S) & 1.
        Value parity = arith::IndexCastOp::create(
            wb, wb.getI32Type(),
            arith::RemUIOp::create(wb, arith::DivUIOp::create(wb, k, cS),
                                   cIdx(wb, 2)));
        Value bar = arith::AddIOp::create(
            wb, byteAddress(wb, state.barriers),
            arith::MulIOp::create(wb, state.current, cIdx(wb, 8)));
        NVVM::MBarrierTryWaitParityOp::create(wb, pointerAt(wb, bar, 3),
                                              parity, i32Const(wb, 10000000));
      });
    if (state.threadWrittenCores)
      when(b, state.threadWrittenCores, asyncProxyFence);
    barrier(b);
    auto issue = [&](ImplicitLocOpBuilder &ib) {
      issuePipelinedLoads(ib, loop, state,
                          arith::AddIOp::create(ib, k, cIdx(ib, distance)),
                          /*ahead=*/false);
      if (llvm::any_of(state.loads,
                       [](const PipelinedLoad &pl) { return pl.feedsGather; }))
        issuePipelinedLoads(
            ib, loop, state, arith::AddIOp::create(ib, k, cIdx(ib, 2 * distance)),
            /*ahead=*/true);
      NVVM::CpAsyncCommitGroupOp::create(ib);
    };
    // Offsets computed from memory (a block index read at issue,
    // scalarReadAt) make every thread wait for that read where the issue
    // uses it: with a wgmma dot of this iteration still to come in the
    // body, the issue moves to just after its group is committed, while it
    // runs (the stage written was last read in iteration k - 1 either way).
    // It is built here, where the loop body's ops are still as written (the
    // offsets are clones of them), in a region the dot's lowering splices in
    // (flushDeferredIssue).
    auto readsMemory = [](ArrayRef<Operation *> slice) {
      return llvm::any_of(slice,
                          [](Operation *o) { return isa<tensor::ExtractOp>(o); });
    };
    bool indexed =
        llvm::any_of(state.loads,
                     [&](const PipelinedLoad &pl) { return readsMemory(pl.slice); }) ||
        llvm::any_of(state.gathers, [&](const PipelinedGather &pg) {
          return readsMemory(pg.slice);
        });
    bool dotFollows = false;
    if (simt->wgmma && indexed && !deferredIssue)
      for (Operation *o = op->getNextNode(); o; o = o->getNextNode()) {
        if (o->getNumRegions() > 0)
          break;
        if (auto dot = dyn_cast<DotOp>(o)) {
          dotFollows = isWgmmaDot(*simt, dot);
          break;
        }
      }
    if (dotFollows) {
      auto held = scf::ExecuteRegionOp::create(b, TypeRange{});
      Block *body = new Block();
      held.getRegion().push_back(body);
      ImplicitLocOpBuilder hb(b.getLoc(), body, body->end());
      issue(hb);
      scf::YieldOp::create(hb);
      deferredIssue = held;
      deferredBlock = op->getBlock();
    } else {
      issue(b);
    }
  }
  Value result;
  for (PipelinedLoad &pl : state.loads)
    if (pl.load == op) {
      result = pl.feedsGather ? stageOf(b, pl.stages, state.iteration)
                              : selectStage(b, pl.stages, state.current);
      if (pl.swizzled)
        swizzledBuffers.insert(result);
    }
  for (PipelinedGather &pg : state.gathers)
    if (pg.gather == op)
      result = selectStage(b, pg.stages, state.current);
  buffers[op->getResult(0)] = result;
  pipelinedBuffers.insert(result);
  toErase.push_back(op);
  return success();
}

} // namespace mlir::kiln::detail
