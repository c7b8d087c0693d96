//===- KilnToGPU.cpp - Lower kiln kernels to SIMT code for NVIDIA GPUs -----===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The GPU lowering of tile programs: one thread block (CTA) per program id.
// It shares the buffer-per-tile lowering with the CPU target
// (KernelLowering.h) in "SIMT mode":
//
//   * every tile value lives in a statically sized buffer carved out of the
//     kernel's dynamic shared memory (a bump planner; the total becomes the
//     bundle's `shared_bytes`);
//   * every tile op's loop nest is distributed over the block's threads in
//     the "linear" layout: thread t handles the row-major elements t, t + T,
//     t + 2T, ... (consecutive threads touch consecutive addresses, so global
//     accesses coalesce), followed by a block barrier;
//   * loads of interior 4-byte tiles use cp.async (global -> shared without
//     registers); other loads and stores are per-element with exact masks;
//   * kiln.dot on bf16/f16 with M % 16 == 0, N % 8 == 0 and K % 16 == 0 runs
//     on tensor cores with mma.sync.m16n8k16 (one warp per 16x8 output tile);
//     other dots are one FMA chain per output element;
//   * kiln.reduce assigns each output to a group of up to 32 lanes that
//     reduce a strided slice each and combine with butterfly warp shuffles.
//
// Scalars are computed redundantly by every thread (they are uniform: kiln
// scalars derive from arguments, program ids and tensor.extract of shared
// tiles), so control flow stays uniform and barriers inside loops are legal.
//
//===----------------------------------------------------------------------===//

#include "KernelLowering.h"
#include "SimtSupport.h"
#include "kiln/Conversion/Passes.h"
#include "kiln/Dialect/Kiln/IR/Kiln.h"
#include "kiln/Target/GPUChips.h"

#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/CallInterfaces.h"
#include "mlir/Interfaces/LoopLikeInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "llvm/Support/SaveAndRestore.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_CONVERTKILNTOGPU
#include "kiln/Dialect/Kiln/Passes.h.inc"
} // namespace mlir::kiln

using namespace mlir;
using namespace mlir::kiln;
using namespace mlir::kiln::detail;

namespace mlir::kiln::detail {

Value cIdx(ImplicitLocOpBuilder &b, int64_t v) {
  return arith::ConstantIndexOp::create(b, v);
}

SmallVector<Value> cIdxs(ImplicitLocOpBuilder &b, ArrayRef<int64_t> values) {
  return llvm::map_to_vector(values, [&](int64_t v) { return cIdx(b, v); });
}

Value interiorTile(ImplicitLocOpBuilder &b, const ViewInfo &vi, ValueRange offsets,
                   ArrayRef<int64_t> shape, int64_t firstDim) {
  Value c0 = cIdx(b, 0);
  Value interior = vi.unitStride;
  for (auto [i, off] : llvm::enumerate(offsets)) {
    int64_t d = firstDim + i;
    // size >= shape and off <= size - shape, not off + shape <= size: an
    // offset near 2^63 wrapped the sum, and the tile was taken as interior
    // (it read and wrote outside the view). Both new terms are
    // loop-invariant where the offset is not.
    Value last = arith::SubIOp::create(b, vi.sizes[d], cIdx(b, shape[d]));
    Value ge = arith::AndIOp::create(
        b, arith::CmpIOp::create(b, arith::CmpIPredicate::sge, off, c0),
        arith::CmpIOp::create(b, arith::CmpIPredicate::sge, vi.sizes[d],
                              cIdx(b, shape[d])));
    Value le = arith::CmpIOp::create(b, arith::CmpIPredicate::sle, off, last);
    interior = arith::AndIOp::create(b, interior, arith::AndIOp::create(b, ge, le));
  }
  return interior;
}


Value KernelLowering::allocSharedTile(RankedTensorType type, Location loc) {
  Type stored = storageType(type.getElementType());
  int64_t bytes = type.getNumElements() *
                  std::max<int64_t>(1, stored.getIntOrFloatBitWidth() / 8);
  // 16-byte alignment: what cp.async and vector accesses need.
  int64_t offset = (simt->sharedBytes + 15) / 16 * 16;
  simt->sharedBytes = offset + bytes;
  OpBuilder b(func->getContext());
  b.setInsertionPointAfterValue(simt->sharedBase);
  auto space = gpu::AddressSpaceAttr::get(func->getContext(),
                                          gpu::AddressSpace::Workgroup);
  auto memrefType = MemRefType::get(type.getShape(), stored,
                                    MemRefLayoutAttrInterface{}, space);
  Value off = arith::ConstantIndexOp::create(b, loc, offset);
  auto view = memref::ViewOp::create(b, loc, memrefType, simt->sharedBase, off,
                                     ValueRange{});
  simt->bufferHome[view] = current ? current->getBlock() : nullptr;
  return view;
}

/// Row-major delinearization of `linear` over `shape`.
SmallVector<Value> delinearize(ImplicitLocOpBuilder &b, Value linear,
                                      ArrayRef<int64_t> shape) {
  SmallVector<Value> idx(shape.size());
  for (int64_t d = shape.size() - 1; d >= 0; --d) {
    if (d == 0) {
      idx[d] = linear;
      break;
    }
    Value extent = cIdx(b, shape[d]);
    idx[d] = arith::RemUIOp::create(b, linear, extent);
    linear = arith::DivUIOp::create(b, linear, extent);
  }
  return idx;
}

/// The indices of tile element `idx` in `buf`: the same, or for a rank-4
/// core-matrix buffer of a rank-2 tile (wgmma operands loaded in place, see
/// allocLoadTile) (r / 8, r % 8, c / 8, c % 8).
SmallVector<Value> tileIndices(ImplicitLocOpBuilder &b, Value buf,
                               ValueRange idx) {
  // A core or XOR buffer has rank 4; its tile rank 2, or more with unit
  // leading dimensions (a [1, R, C] or [1, 1, R, C] load reshaped to
  // [R, C]).
  bool xorRows = isXorBuffer(buf);
  if (!isCoreBuffer(buf) && !xorRows)
    return SmallVector<Value>(idx);
  // (Columns in chunks of 16 bytes: 8 elements, or 16 of fp8's bytes.)
  int64_t per = cast<MemRefType>(buf.getType()).getDimSize(3);
  Value r = idx[idx.size() - 2], c = idx.back(), c8 = cIdx(b, 8),
        cPer = cIdx(b, per);
  Value rHi = arith::DivUIOp::create(b, r, c8),
        rLo = arith::RemUIOp::create(b, r, c8),
        chunk = arith::DivUIOp::create(b, c, cPer);
  if (xorRows)
    chunk = arith::XOrIOp::create(b, chunk, rLo);
  return {rHi, rLo, chunk, arith::RemUIOp::create(b, c, cPer)};
}

/// The element offset, in a 128B-swizzled stage of a rows x cols tile, of
/// tile element (r, c) = `idx` (trailing two indices), `per` elements to 16
/// bytes (8 of 16-bit elements, 16 of fp8's bytes): column slabs of 8 per
/// elements, rows of 128 bytes in each, the 16-byte chunk c / per % 8 of row
/// r at chunk position (c / per % 8) ^ (r % 8):
///   (c / 8per) rows 8per + r 8per + ((c / per % 8) ^ (r % 8)) per + c % per.
/// The stage starts on 1024 bytes, so this is the hardware's address-bit
/// swizzle. Writers address the stage through swizzledView.
Value swizzledOffset(ImplicitLocOpBuilder &b, int64_t rows, ValueRange idx,
                     int64_t per) {
  Value r = idx[idx.size() - 2], c = idx.back(), c8 = cIdx(b, 8),
        cPer = cIdx(b, per);
  Value chunk = arith::XOrIOp::create(
      b, arith::RemUIOp::create(b, arith::DivUIOp::create(b, c, cPer), c8),
      arith::RemUIOp::create(b, r, c8));
  Value off = arith::MulIOp::create(
      b, arith::DivUIOp::create(b, c, cIdx(b, 8 * per)),
      cIdx(b, rows * 8 * per));
  off = arith::AddIOp::create(b, off,
                              arith::MulIOp::create(b, r, cIdx(b, 8 * per)));
  off = arith::AddIOp::create(b, off, arith::MulIOp::create(b, chunk, cPer));
  return arith::AddIOp::create(b, off, arith::RemUIOp::create(b, c, cPer));
}

/// A swizzled stage (a core buffer's rank-4 view) as the flat elements
/// swizzledOffset indexes.
Value swizzledView(ImplicitLocOpBuilder &b, Value stage) {
  auto t = cast<MemRefType>(stage.getType());
  int64_t n = t.getNumElements();
  return memref::ReinterpretCastOp::create(
      b,
      MemRefType::get({n}, t.getElementType(), MemRefLayoutAttrInterface{},
                      t.getMemorySpace()),
      stage, /*offset=*/0, ArrayRef<int64_t>{n}, ArrayRef<int64_t>{1});
}

/// Runs `fn` for the elements of `shape` this thread owns (linear layout),
/// without the trailing barrier.
void distribute(ImplicitLocOpBuilder &b, SimtConfig &simt,
                       ArrayRef<int64_t> shape,
                       function_ref<void(ImplicitLocOpBuilder &, ValueRange)> fn) {
  int64_t n = 1;
  for (int64_t s : shape)
    n *= s;
  Value tid = simt.threadId;
  if (n <= simt.numThreads) {
    Value active = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, tid,
                                         cIdx(b, n));
    auto ifOp = scf::IfOp::create(b, TypeRange{}, active, false);
    ImplicitLocOpBuilder tb(b.getLoc(), ifOp.getThenBodyBuilder());
    fn(tb, delinearize(tb, tid, shape));
    return;
  }
  scf::ForOp::create(b, tid, cIdx(b, n), cIdx(b, simt.numThreads),
                     ValueRange{},
                     [&](OpBuilder &ob, Location loc, Value l, ValueRange) {
                       ImplicitLocOpBuilder ib(loc, ob);
                       fn(ib, delinearize(ib, l, shape));
                       scf::YieldOp::create(ib);
                     });
}

/// Runs `fn` for the chunks of `per` consecutive elements of the tile's
/// rows that this thread owns (linear layout over the chunks), with the
/// tile index of each chunk's first element; no trailing barrier.
static void distributeChunks(
    ImplicitLocOpBuilder &b, SimtConfig &simt, ArrayRef<int64_t> shape,
    int64_t per, function_ref<void(ImplicitLocOpBuilder &, ValueRange)> fn) {
  SmallVector<int64_t> chunks(shape);
  chunks.back() /= per;
  distribute(b, simt, chunks, [&](ImplicitLocOpBuilder &cb, ValueRange cidx) {
    SmallVector<Value> idx(cidx);
    idx.back() = arith::MulIOp::create(cb, idx.back(), cIdx(cb, per));
    fn(cb, idx);
  });
}

void KernelLowering::barrier(ImplicitLocOpBuilder &b) {
  gpu::BarrierOp::create(b);
  unsyncedReads = false;
}

/// fence.proxy.async.shared::cta: this thread's prior (generic-proxy) writes
/// to shared memory are ordered before later async-proxy reads (wgmma), once
/// a barrier hands them over (PTX ISA, "Async Proxy").
void atomicFence(ImplicitLocOpBuilder &b) {
  LLVM::FenceOp::create(b, LLVM::AtomicOrdering::acq_rel, "device");
}

void asyncProxyFence(ImplicitLocOpBuilder &b) {
  NVVM::FenceProxyOp::create(
      b, NVVM::ProxyKind::async_shared,
      NVVM::SharedSpaceAttr::get(b.getContext(), NVVM::SharedSpace::shared_cta));
}

/// The strides of a rank-4 core-matrix view (r / 8, r % 8, c / 8, c % 8) of
/// a rows x cols tile, the one layout of wgmma operands here: each column
/// chunk of 8 elements (16 bytes) holds all rows contiguously, so core
/// matrix (r / 8, c / 8) starts at (c / 8 * rows / 8 + r / 8) * 128 bytes.
/// A TMA box of 8 columns by `rows` lands exactly as one chunk. The same
/// buffer serves as a K-major operand (cols are K: k groups rows / 8 * 128
/// bytes apart, row groups 128) and as an MN-major one (rows are K: k groups
/// 128 apart, MN groups rows / 8 * 128); see runTiledDot.
SmallVector<int64_t> coreStrides(int64_t rows, int64_t chunk) {
  // (`chunk`: elements per 16 bytes, 8 for 16-bit elements, 16 for fp8's
  // bytes: their core matrices are 8 rows of 16 bytes too.)
  return {8 * chunk, chunk, rows / 8 * 8 * chunk, 1};
}

/// Whether `buf` is an mma.sync operand buffer with padded rows (see
/// allocPaddedTile): the tile's shape, unit innermost stride, rows rowPad
/// elements longer than the tile's.
bool isPaddedBuffer(Value buf) {
  if (!buf)
    return false;
  auto t = cast<MemRefType>(buf.getType());
  auto layout = dyn_cast<StridedLayoutAttr>(t.getLayout());
  int64_t rank = t.getRank();
  if (!layout || rank < 2 || !t.hasStaticShape() ||
      layout.getOffset() != 0)
    return false;
  ArrayRef<int64_t> strides = layout.getStrides();
  return strides[rank - 1] == 1 &&
         strides[rank - 2] ==
             t.getDimSize(rank - 1) + rowPad(t.getElementType());
}

bool isXorBuffer(Value buf) {
  if (!buf)
    return false;
  auto t = cast<MemRefType>(buf.getType());
  auto layout = dyn_cast<StridedLayoutAttr>(t.getLayout());
  // (16-byte chunks: 8 16-bit elements, or 16 int8 ones.)
  int64_t bits = t.getElementTypeBitWidth();
  int64_t per = bits == 16 || bits == 8 ? 128 / bits : 0;
  if (t.getRank() != 4 || !layout || !t.hasStaticShape() ||
      layout.getOffset() != 0 || !per || t.getDimSize(1) != 8 ||
      t.getDimSize(3) != per || t.getDimSize(2) % 8)
    return false;
  int64_t cols = t.getDimSize(2) * per;
  return layout.getStrides() == ArrayRef<int64_t>{8 * cols, cols, per, 1};
}

/// Whether `buf` is a wgmma operand buffer in the core-matrix layout (see
/// allocLoadTile): read by wgmma, so its writers fence the async proxy.
/// (Ordinary tile buffers, of any rank, have the identity layout; mma.sync
/// operands may have padded rows, isPaddedBuffer.)
bool isCoreBuffer(Value buf) {
  if (!buf)
    return false;
  auto t = cast<MemRefType>(buf.getType());
  auto layout = dyn_cast<StridedLayoutAttr>(t.getLayout());
  int64_t bits = t.getElementTypeBitWidth();
  if (t.getRank() != 4 || !layout || t.getDimSize(1) != 8 ||
      (bits != 8 && bits != 16) || t.getDimSize(3) != 128 / bits)
    return false;
  return layout.getStrides() ==
         ArrayRef<int64_t>(coreStrides(t.getDimSize(0) * 8, 128 / bits));
}

void KernelLowering::forEachIndexSimt(
    ImplicitLocOpBuilder &b, ArrayRef<int64_t> shape,
    function_ref<void(ImplicitLocOpBuilder &, ValueRange)> fn) {
  if (shape.empty()) {
    SmallVector<int64_t> one{1};
    distribute(b, *simt, one,
               [&](ImplicitLocOpBuilder &ib, ValueRange) { fn(ib, {}); });
  } else {
    distribute(b, *simt, shape, fn);
  }
  barrier(b);
}

/// One element of a tile access with an exact bounds check of `viewIdx`
/// against the view: a load reads the padding outside it, a store skips.
static void accessElement(ImplicitLocOpBuilder &b, const ViewInfo &vi,
                          ArrayRef<Value> viewIdx, Value tileBuf,
                          ValueRange idx, Type elt, TypedAttr padAttr,
                          bool isStore) {
  Value c0 = cIdx(b, 0);
  Value valid = arith::ConstantIntOp::create(b, 1, 1);
  for (auto [d, i] : llvm::enumerate(viewIdx)) {
    Value ge = arith::CmpIOp::create(b, arith::CmpIPredicate::sge, i, c0);
    Value lt =
        arith::CmpIOp::create(b, arith::CmpIPredicate::slt, i, vi.sizes[d]);
    valid = arith::AndIOp::create(b, valid, arith::AndIOp::create(b, ge, lt));
  }
  Location loc = b.getLoc();
  SmallVector<Value> at = tileIndices(b, tileBuf, idx);
  if (isStore) {
    Value v = memref::LoadOp::create(b, tileBuf, at);
    auto ifOp = scf::IfOp::create(b, TypeRange{}, valid, false);
    OpBuilder tb = ifOp.getThenBodyBuilder();
    memref::StoreOp::create(tb, loc, v, vi.memref, viewIdx);
    return;
  }
  auto ifOp = scf::IfOp::create(b, TypeRange{elt}, valid, true);
  OpBuilder tb = ifOp.getThenBodyBuilder();
  Value l = memref::LoadOp::create(tb, loc, vi.memref, viewIdx);
  scf::YieldOp::create(tb, loc, l);
  OpBuilder eb = ifOp.getElseBodyBuilder();
  Value p = arith::ConstantOp::create(eb, loc, padAttr);
  scf::YieldOp::create(eb, loc, p);
  memref::StoreOp::create(b, ifOp.getResult(0), tileBuf, at);
}

/// Whether `v`-byte chunks of a tile at `offsets` have `v`-aligned global
/// addresses: the tile's first element and every row start (run time).
static Value chunkAligned(ImplicitLocOpBuilder &b, const ViewInfo &vi,
                          ValueRange offsets, int64_t eltBytes, int64_t v) {
  Value zero = cIdx(b, 0), vv = cIdx(b, v), eb = cIdx(b, eltBytes);
  Value addr = memref::ExtractAlignedPointerAsIndexOp::create(b, vi.memref);
  Value ok = arith::ConstantIntOp::create(b, 1, 1);
  int64_t rank = offsets.size();
  for (int64_t d = 0; d < rank; ++d) {
    Value strideBytes = arith::MulIOp::create(b, vi.strides[d], eb);
    addr = arith::AddIOp::create(
        b, addr, arith::MulIOp::create(b, offsets[d], strideBytes));
    if (d + 1 < rank)
      ok = arith::AndIOp::create(
          b, ok,
          arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                arith::RemUIOp::create(b, strideBytes, vv),
                                zero));
  }
  return arith::AndIOp::create(
      b, ok,
      arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                            arith::RemUIOp::create(b, addr, vv), zero));
}

/// Whether an access's padding is all zero bits (what cp.async's zero fill
/// writes; -0.0 is not).
bool zeroBits(TypedAttr pad) {
  if (auto f = dyn_cast<FloatAttr>(pad))
    return f.getValue().isPosZero();
  if (auto i = dyn_cast<IntegerAttr>(pad))
    return i.getValue().isZero();
  return false;
}

LogicalResult KernelLowering::lowerViewAccessSimt(
    Operation *op, const ViewInfo &vi, Value idxBuf, ValueRange offsets,
    Value tileBuf, RankedTensorType tileType, TypedAttr padAttr,
    bool isStore) {
  ImplicitLocOpBuilder b(op->getLoc(), op);
  Type elt = storageType(tileType.getElementType());
  ArrayRef<int64_t> shape = tileType.getShape();
  int64_t rank = tileType.getRank();
  Value indices = idxBuf;
  auto viewIndex = [&](ImplicitLocOpBuilder &ib, int64_t d, Value iv) -> Value {
    return viewIndexAt(ib, idxBuf, offsets, d, iv);
  };
  auto general = [&](ImplicitLocOpBuilder &ib, ValueRange idx) {
    SmallVector<Value> viewIdx;
    for (int64_t d = 0; d < rank; ++d)
      viewIdx.push_back(viewIndex(ib, d, idx[d]));
    accessElement(ib, vi, viewIdx, tileBuf, idx, elt, padAttr, isStore);
  };

  int64_t eltBytes = std::max<int64_t>(1, elt.getIntOrFloatBitWidth() / 8);
  int64_t chunk = asyncChunk(tileType);
  if (isStore && !indices && tmaStoreCandidate(op, tileBuf, tileType)) {
    // sm_90a: one TMA box from shared memory when the view allows it
    // (emitTmaStore; out-of-range elements are not written); else by
    // threads, as below.
    int64_t hostMap = addHostMap(vi, tileType, "plain");
    Value allowed = hostMap >= 0 ? hostMapUsable(b, hostMap)
                                 : tmaViewAllows(b, vi, rank, eltBytes, false);
    if (Value in = tmaInRange(b, vi, offsets, tileType))
      allowed = arith::AndIOp::create(b, allowed, in);
    auto ifOp = scf::IfOp::create(b, TypeRange{}, allowed, true);
    ImplicitLocOpBuilder tb(b.getLoc(), ifOp.getThenBodyBuilder());
    emitTmaStore(tb, op, vi, offsets, tileBuf, tileType, hostMap);
    ImplicitLocOpBuilder eb(b.getLoc(), ifOp.getElseBodyBuilder());
    storeByThreads(eb, vi, offsets, tileBuf, tileType, padAttr);
    barrier(b);
    return success();
  }
  if (isStore && !indices && chunk > eltBytes && !vi.strides.empty()) {
    storeByThreads(b, vi, offsets, tileBuf, tileType, padAttr);
    barrier(b);
    return success();
  }
  if (indices && rank >= 2 && chunk > 0 && !vi.strides.empty()) {
    // Gathers and scatters of rows: whole chunks per row where the view
    // allows (emitRowChunksSimt), element by element otherwise.
    if (!isStore && simt->asyncCopy && zeroBits(padAttr)) {
      emitRowChunksSimt(b, vi, idxBuf, offsets, tileBuf, tileType, padAttr,
                        /*isStore=*/false);
      NVVM::CpAsyncCommitGroupOp::create(b);
      NVVM::CpAsyncWaitGroupOp::create(b, 0);
      if (isCoreBuffer(tileBuf))
        asyncProxyFence(b);
      barrier(b);
      return success();
    }
    if (isStore) {
      emitRowChunksSimt(b, vi, idxBuf, offsets, tileBuf, tileType, padAttr,
                        /*isStore=*/true);
      barrier(b);
      return success();
    }
  }
  bool swizzled = swizzledBuffers.count(tileBuf);
  if (isStore || indices || !simt->asyncCopy || chunk == 0) {
    if (swizzled)
      return op->emitError("kiln GPU lowering: a 128B-swizzled tile is "
                           "written only by chunks (emitTileLoadSimt)");
    forEachIndexSimt(b, shape, general);
    // A gather with another padding may write a wgmma operand in place
    // (allocLoadTile): its writes are fenced for the async proxy.
    if (!isStore)
      fenceCoreWrites(b, {tileBuf});
    return success();
  }
  emitTileLoadSimt(b, vi, offsets, tileBuf, tileType, padAttr, /*wait=*/true,
                   swizzled);
  if (isCoreBuffer(tileBuf))
    asyncProxyFence(b);
  barrier(b);
  return success();
}

/// A store of a whole tile to a strided view by threads, without the
/// trailing barrier: interior tiles with aligned rows in whole chunks (16, 8
/// or 4 bytes: one vector load from shared memory, one vector store to
/// global memory), other tiles element by element with exact masks.
void KernelLowering::storeByThreads(ImplicitLocOpBuilder &b,
                                    const ViewInfo &vi, ValueRange offsets,
                                    Value tileBuf, RankedTensorType tileType,
                                    TypedAttr padAttr) {
  Type elt = storageType(tileType.getElementType());
  ArrayRef<int64_t> shape = tileType.getShape();
  int64_t rank = tileType.getRank();
  int64_t eltBytes = std::max<int64_t>(1, elt.getIntOrFloatBitWidth() / 8);
  int64_t chunk = asyncChunk(tileType);
  auto general = [&](ImplicitLocOpBuilder &ib, ValueRange idx) {
    SmallVector<Value> viewIdx;
    for (int64_t d = 0; d < rank; ++d)
      viewIdx.push_back(arith::AddIOp::create(ib, offsets[d], idx[d]));
    accessElement(ib, vi, viewIdx, tileBuf, idx, elt, padAttr, true);
  };
  if (chunk <= eltBytes || vi.strides.empty()) {
    distribute(b, *simt, shape, general);
    return;
  }
  {
    auto ifOp = scf::IfOp::create(
        b, TypeRange{},
        arith::AndIOp::create(b, interiorTile(b, vi, offsets, shape),
                              chunkAligned(b, vi, offsets, eltBytes, chunk)),
        true);
    {
      ImplicitLocOpBuilder tb(b.getLoc(), ifOp.getThenBodyBuilder());
      int64_t per = chunk / eltBytes;
      auto vecType = VectorType::get({per}, elt);
      distributeChunks(tb, *simt, shape, per, [&](ImplicitLocOpBuilder &cb,
                                                  ValueRange idx) {
        SmallVector<Value> viewIdx;
        for (int64_t d = 0; d < rank; ++d)
          viewIdx.push_back(arith::AddIOp::create(cb, offsets[d], idx[d]));
        // (A chunk of a tensor-core operand buffer is 16 contiguous bytes
        // at its own indices.)
        Value v = vector::LoadOp::create(cb, vecType, tileBuf,
                                         tileIndices(cb, tileBuf, idx),
                                         /*nontemporal=*/false,
                                         llvm::MaybeAlign(chunk));
        vector::StoreOp::create(cb, v, vi.unitMemref, viewIdx,
                                /*nontemporal=*/false, llvm::MaybeAlign(chunk));
      });
    }
    {
      ImplicitLocOpBuilder eb(b.getLoc(), ifOp.getElseBodyBuilder());
      distribute(eb, *simt, shape, general);
    }
  }
}

/// A gather (`isStore` false) or scatter of the rows named by `idxBuf`, in
/// chunks of a tile row. Where the view's innermost stride is 1, the column
/// offset is not negative and every row start of the tile is aligned to the
/// chunk (run time, uniform; 16, 8 or 4 bytes; 4-byte elements otherwise by
/// element-sized copies, narrower ones element by element), each
/// thread moves whole chunks:
/// * a gather issues one cp.async per chunk (no wait, no barrier: the caller
///   commits), with a source size of the chunk's elements inside the view
///   (0 for a row index outside it, fewer at the view's last columns):
///   cp.async zero-fills the rest, which is the (zero) padding;
/// * a scatter writes a chunk whose row is valid and whose columns are all
///   inside with one vector load from shared memory and one vector store to
///   global memory, and the elements of a chunk at the view's edge one by one.
/// Otherwise every element goes by itself with its bounds check. The index
/// tile is read once per chunk, not once per element.
void KernelLowering::emitRowChunksSimt(
    ImplicitLocOpBuilder &b, const ViewInfo &vi, Value idxBuf,
    ValueRange offsets, Value tileBuf, RankedTensorType tileType,
    TypedAttr padAttr, bool isStore,
    function_ref<Value(ImplicitLocOpBuilder &, Value)> rowIndex) {
  Type elt = storageType(tileType.getElementType());
  ArrayRef<int64_t> shape = tileType.getShape();
  int64_t rank = tileType.getRank();
  int64_t eltBytes = std::max<int64_t>(1, elt.getIntOrFloatBitWidth() / 8);
  int64_t chunk = asyncChunk(tileType);
  auto cmp = [](ImplicitLocOpBuilder &ib, arith::CmpIPredicate p, Value x,
                Value y) -> Value { return arith::CmpIOp::create(ib, p, x, y); };
  // (A gather's offsets name the dimensions after the first.)
  auto indexAt = [&](ImplicitLocOpBuilder &ib, int64_t d, Value i) -> Value {
    if (!rowIndex)
      return viewIndexAt(ib, idxBuf, offsets, d, i);
    if (d == 0)
      return rowIndex(ib, i);
    return arith::AddIOp::create(ib, offsets[d - 1], i);
  };
  auto general = [&](ImplicitLocOpBuilder &ib, ValueRange idx) {
    SmallVector<Value> viewIdx;
    for (int64_t d = 0; d < rank; ++d)
      viewIdx.push_back(indexAt(ib, d, idx[d]));
    accessElement(ib, vi, viewIdx, tileBuf, idx, elt, padAttr, isStore);
  };
  // Every row start of the tile is v-aligned: chunkAligned with row 0 for
  // the indexed dimension (its stride is checked, its offset is the row's).
  auto aligned = [&](ImplicitLocOpBuilder &ib, int64_t v) -> Value {
    SmallVector<Value> at{cIdx(ib, 0)};
    llvm::append_range(at, offsets);
    return chunkAligned(ib, vi, at, eltBytes, v);
  };
  auto chunks = [&](ImplicitLocOpBuilder &ib, int64_t v) {
    int64_t per = v / eltBytes;
    distributeChunks(ib, *simt, shape, per, [&](ImplicitLocOpBuilder &cb,
                                                ValueRange idx) {
      Value c0 = cIdx(cb, 0);
      // The row (and any middle dimension) inside the view, and how many
      // of the chunk's elements are (the column start is >= 0).
      Value rowOk = arith::ConstantIntOp::create(cb, 1, 1);
      SmallVector<Value> src;
      for (int64_t d = 0; d + 1 < rank; ++d) {
        Value i = indexAt(cb, d, idx[d]);
        rowOk = arith::AndIOp::create(
            cb, rowOk,
            arith::AndIOp::create(cb, cmp(cb, arith::CmpIPredicate::sge, i, c0),
                                  cmp(cb, arith::CmpIPredicate::slt, i,
                                      vi.sizes[d])));
        src.push_back(i);
      }
      Value col = arith::AddIOp::create(cb, offsets.back(), idx.back());
      Value left = arith::SubIOp::create(cb, vi.sizes[rank - 1], col);
      Value n = arith::MinSIOp::create(
          cb, arith::MaxSIOp::create(cb, left, c0), cIdx(cb, per));
      n = arith::SelectOp::create(cb, rowOk, n, c0);
      // A chunk with nothing to move points at row 0 (no byte is read or
      // written there), not at an index outside the view.
      for (Value &i : src)
        i = arith::SelectOp::create(cb, rowOk, i, c0);
      src.push_back(col);
      SmallVector<Value> at = tileIndices(cb, tileBuf, idx);
      if (!isStore) {
        nvgpu::DeviceAsyncCopyOp::create(
            cb, nvgpu::DeviceAsyncTokenType::get(cb.getContext()), tileBuf,
            at, vi.unitMemref, src, cb.getIndexAttr(per), n,
            v == 16 ? cb.getUnitAttr() : UnitAttr());
        return;
      }
      auto full = scf::IfOp::create(
          cb, TypeRange{}, cmp(cb, arith::CmpIPredicate::eq, n, cIdx(cb, per)),
          true);
      {
        ImplicitLocOpBuilder tb(cb.getLoc(), full.getThenBodyBuilder());
        auto vecType = VectorType::get({per}, elt);
        Value vec = vector::LoadOp::create(tb, vecType, tileBuf, at,
                                           /*nontemporal=*/false,
                                           llvm::MaybeAlign(v));
        vector::StoreOp::create(tb, vec, vi.unitMemref, src,
                                /*nontemporal=*/false, llvm::MaybeAlign(v));
      }
      {
        // The view's last columns (or nothing): element by element.
        ImplicitLocOpBuilder eb(cb.getLoc(), full.getElseBodyBuilder());
        for (int64_t e = 0; e < per; ++e) {
          auto inside = scf::IfOp::create(
              eb, TypeRange{},
              cmp(eb, arith::CmpIPredicate::slt, cIdx(eb, e), n), false);
          ImplicitLocOpBuilder ib(eb.getLoc(), inside.getThenBodyBuilder());
          SmallVector<Value> tileAt(idx), viewAt(src);
          tileAt.back() = arith::AddIOp::create(ib, idx.back(), cIdx(ib, e));
          viewAt.back() = arith::AddIOp::create(ib, col, cIdx(ib, e));
          Value x = memref::LoadOp::create(ib, tileBuf,
                                           tileIndices(ib, tileBuf, tileAt));
          memref::StoreOp::create(ib, x, vi.unitMemref, viewAt);
        }
      }
    });
  };
  Value c0 = cIdx(b, 0);
  Value uniform = arith::AndIOp::create(
      b, vi.unitStride, cmp(b, arith::CmpIPredicate::sge, offsets.back(), c0));
  auto ifOp = scf::IfOp::create(
      b, TypeRange{}, arith::AndIOp::create(b, uniform, aligned(b, chunk)),
      true);
  ImplicitLocOpBuilder tb(b.getLoc(), ifOp.getThenBodyBuilder());
  chunks(tb, chunk);
  ImplicitLocOpBuilder eb(b.getLoc(), ifOp.getElseBodyBuilder());
  if (chunk > eltBytes && eltBytes == 4) {
    // Element-sized copies of 4-byte elements are always aligned.
    auto narrow = scf::IfOp::create(eb, TypeRange{}, uniform, true);
    ImplicitLocOpBuilder nb(b.getLoc(), narrow.getThenBodyBuilder());
    chunks(nb, 4);
    ImplicitLocOpBuilder gb(b.getLoc(), narrow.getElseBodyBuilder());
    distribute(gb, *simt, shape, general);
  } else {
    // (Narrower elements: a 4-byte path as well cost the DSA sparse
    // attention's loop 15 registers and 88 bytes of spills on sm_90a.)
    distribute(eb, *simt, shape, general);
  }
}

Value KernelLowering::gatherStoreAlignedSimt(ImplicitLocOpBuilder &b,
                                             const ViewInfo &gv, ValueRange gOff,
                                             const ViewInfo &sv, ValueRange sOff,
                                             RankedTensorType type) {
  int64_t eltBytes = std::max<int64_t>(
      1, storageType(type.getElementType()).getIntOrFloatBitWidth() / 8);
  int64_t chunk = asyncChunk(type);
  // (A view whose strides are not known takes the general path.)
  if (gv.strides.empty() || sv.strides.empty())
    return arith::ConstantIntOp::create(b, 0, 1);
  // Every gathered row start: row 0 with the column offsets (the row
  // stride is checked); the destination tile at its offsets.
  SmallVector<Value> at{cIdx(b, 0)};
  llvm::append_range(at, gOff);
  return arith::AndIOp::create(b, chunkAligned(b, gv, at, eltBytes, chunk),
                               chunkAligned(b, sv, sOff, eltBytes, chunk));
}

void KernelLowering::gatherStoreChunksSimt(ImplicitLocOpBuilder &b,
                                           const ViewInfo &gv, ValueRange gOff,
                                           const ViewInfo &sv, ValueRange sOff,
                                           int64_t lead, Value idxBuf,
                                           RankedTensorType type,
                                           TypedAttr pad) {
  Type elt = storageType(type.getElementType());
  int64_t eltBytes = std::max<int64_t>(1, elt.getIntOrFloatBitWidth() / 8);
  int64_t chunk = asyncChunk(type), per = chunk / eltBytes;
  auto vecType = VectorType::get({per}, elt);
  SmallVector<int64_t> chunks(type.getShape());
  chunks.back() /= per;
  int64_t total = 1;
  for (int64_t c : chunks)
    total *= c;
  // Thread t moves chunks t, t + T, t + 2T, ... (T threads), a group of up
  // to 8 at a time: the group's loads first, then its stores, so that its
  // loads are in flight together (a load then its store per chunk would
  // wait for memory once per chunk).
  const int64_t T = simt->numThreads, group = 8;
  int64_t perThread = (total + T - 1) / T;
  int64_t groups = (perThread + group - 1) / group;
  int64_t inGroup = std::min(group, perThread);
  Value c0 = cIdx(b, 0);
  scf::ForOp::create(
      b, c0, cIdx(b, groups), cIdx(b, 1), ValueRange{},
      [&](OpBuilder &ob, Location loc, Value g, ValueRange) {
        ImplicitLocOpBuilder gb(loc, ob);
        SmallVector<Value> values, valid;
        SmallVector<SmallVector<Value>> dsts;
        for (int64_t j = 0; j < inGroup; ++j) {
          // Chunk (g * group + j) * T + t.
          Value lin = arith::AddIOp::create(
              gb, simt->threadId,
              arith::MulIOp::create(
                  gb, arith::AddIOp::create(gb, arith::MulIOp::create(
                                                    gb, g, cIdx(gb, group)),
                                            cIdx(gb, j)),
                  cIdx(gb, T)));
          Value inside = arith::CmpIOp::create(gb, arith::CmpIPredicate::ult,
                                               lin, cIdx(gb, total));
          // (Past the tile: chunk 0's position, read but not stored.)
          SmallVector<Value> idx = delinearize(
              gb, arith::SelectOp::create(gb, inside, lin, cIdx(gb, 0)), chunks);
          idx.back() = arith::MulIOp::create(gb, idx.back(), cIdx(gb, per));
          Value row = viewIndexAt(gb, idxBuf, gOff, 0, idx[0]);
          auto [src, dst, rowOk] =
              gatherStoreAt(gb, gv, row, idx, gOff, sOff, lead);
          auto rowIf = scf::IfOp::create(gb, TypeRange{vecType}, rowOk, true);
          {
            ImplicitLocOpBuilder rb(loc, rowIf.getThenBodyBuilder());
            scf::YieldOp::create(
                rb, Value(vector::LoadOp::create(rb, vecType, gv.unitMemref, src,
                                                 /*nontemporal=*/false,
                                                 llvm::MaybeAlign(chunk))));
          }
          {
            ImplicitLocOpBuilder eb(loc, rowIf.getElseBodyBuilder());
            scf::YieldOp::create(
                eb, Value(arith::ConstantOp::create(
                        eb, DenseElementsAttr::get(cast<ShapedType>(vecType),
                                                   cast<Attribute>(pad)))));
          }
          values.push_back(rowIf.getResult(0));
          valid.push_back(inside);
          dsts.push_back(std::move(dst));
        }
        for (int64_t j = 0; j < inGroup; ++j) {
          auto st = scf::IfOp::create(gb, TypeRange{}, valid[j], false);
          ImplicitLocOpBuilder tb(loc, st.getThenBodyBuilder());
          vector::StoreOp::create(tb, values[j], sv.unitMemref, dsts[j],
                                  /*nontemporal=*/false, llvm::MaybeAlign(chunk));
        }
        scf::YieldOp::create(gb);
      });
}

int64_t KernelLowering::asyncChunk(RankedTensorType tileType) {
  // cp.async copies 4, 8 or 16 bytes: the widest chunk that divides a tile
  // row (and holds whole elements).
  Type elt = storageType(tileType.getElementType());
  int64_t eltBytes = std::max<int64_t>(1, elt.getIntOrFloatBitWidth() / 8);
  if (tileType.getRank() < 1)
    return 0;
  int64_t rowBytes = tileType.getShape().back() * eltBytes;
  for (int64_t v : {16, 8, 4})
    if (v >= eltBytes && rowBytes % v == 0)
      return v;
  return 0;
}

void KernelLowering::emitTileLoadSimt(ImplicitLocOpBuilder &b,
                                      const ViewInfo &vi, ValueRange offsets,
                                      Value tileBuf, RankedTensorType tileType,
                                      TypedAttr padAttr, bool wait,
                                      bool swizzled) {
  Type elt = storageType(tileType.getElementType());
  ArrayRef<int64_t> shape = tileType.getShape();
  int64_t rank = tileType.getRank();
  int64_t swizzledRows = swizzled ? shape[rank - 2] : 0;
  int64_t swizzledPer = 128 / elt.getIntOrFloatBitWidth();
  // A swizzled stage is written through its flat view (swizzledOffset).
  Value target = swizzled ? swizzledView(b, tileBuf) : tileBuf;
  auto indicesIn = [&](ImplicitLocOpBuilder &ib, ValueRange idx) {
    return swizzled
               ? SmallVector<Value>{swizzledOffset(ib, swizzledRows, idx,
                                                   swizzledPer)}
               : tileIndices(ib, tileBuf, idx);
  };
  int64_t eltBytes = std::max<int64_t>(1, elt.getIntOrFloatBitWidth() / 8);
  int64_t chunk = asyncChunk(tileType);
  auto viewIndex = [&](ImplicitLocOpBuilder &ib, int64_t d, Value i) -> Value {
    return arith::AddIOp::create(ib, offsets[d], i);
  };
  auto general = [&](ImplicitLocOpBuilder &ib, ValueRange idx) {
    SmallVector<Value> viewIdx;
    for (int64_t d = 0; d < rank; ++d)
      viewIdx.push_back(viewIndex(ib, d, idx[d]));
    accessElement(ib, vi, viewIdx, tileBuf, idx, elt, padAttr, false);
  };
  // A swizzled stage's element path: one 16-byte chunk per thread step,
  // eight checked element reads (the padding outside the view) and one
  // vector store at the chunk's swizzled place. (Element by element, the
  // swizzle's row-dependent XOR cost ptxas some 45 registers in attention.)
  auto elementChunks = [&](ImplicitLocOpBuilder &ib) {
    auto vecType = VectorType::get({8}, elt);
    distributeChunks(ib, *simt, shape, 8, [&](ImplicitLocOpBuilder &cb,
                                              ValueRange idx) {
      Value c0 = cIdx(cb, 0);
      Value rowValid = arith::ConstantIntOp::create(cb, 1, 1);
      SmallVector<Value> viewIdx;
      for (int64_t d = 0; d < rank; ++d) {
        viewIdx.push_back(viewIndex(cb, d, idx[d]));
        if (d + 1 == rank)
          continue;
        rowValid = arith::AndIOp::create(
            cb, rowValid,
            arith::AndIOp::create(
                cb,
                arith::CmpIOp::create(cb, arith::CmpIPredicate::sge,
                                      viewIdx[d], c0),
                arith::CmpIOp::create(cb, arith::CmpIPredicate::slt,
                                      viewIdx[d], vi.sizes[d])));
      }
      Value vec = arith::ConstantOp::create(
          cb, DenseElementsAttr::get(vecType, padAttr));
      for (int64_t e = 0; e < 8; ++e) {
        SmallVector<Value> at(viewIdx);
        at.back() = arith::AddIOp::create(cb, viewIdx.back(), cIdx(cb, e));
        Value valid = arith::AndIOp::create(
            cb, rowValid,
            arith::AndIOp::create(
                cb,
                arith::CmpIOp::create(cb, arith::CmpIPredicate::sge,
                                      at.back(), c0),
                arith::CmpIOp::create(cb, arith::CmpIPredicate::slt,
                                      at.back(), vi.sizes[rank - 1])));
        auto ifOp = scf::IfOp::create(cb, TypeRange{vecType}, valid, true);
        OpBuilder tb = ifOp.getThenBodyBuilder();
        Value l = memref::LoadOp::create(tb, cb.getLoc(), vi.memref, at);
        scf::YieldOp::create(
            tb, cb.getLoc(),
            Value(vector::InsertOp::create(tb, cb.getLoc(), l, vec,
                                           ArrayRef<int64_t>{e})));
        OpBuilder eb = ifOp.getElseBodyBuilder();
        scf::YieldOp::create(eb, cb.getLoc(), vec);
        vec = ifOp.getResult(0);
      }
      vector::StoreOp::create(
          cb, vec, target,
          ValueRange{swizzledOffset(cb, swizzledRows, idx, swizzledPer)},
          /*nontemporal=*/false, llvm::MaybeAlign(16));
    });
  };
  auto elements = [&](ImplicitLocOpBuilder &ib) {
    if (swizzled)
      elementChunks(ib);
    else
      distribute(ib, *simt, shape, general);
  };
  // Interior tile with a unit innermost stride (uniform over the block):
  // each thread issues cp.async copies global -> shared.
  Value interior = interiorTile(b, vi, offsets, shape);
  auto alignedTo = [&](ImplicitLocOpBuilder &ib, int64_t v) -> Value {
    return chunkAligned(ib, vi, offsets, eltBytes, v);
  };
  auto copies = [&](ImplicitLocOpBuilder &ib, int64_t v) {
    int64_t per = v / eltBytes;
    distributeChunks(ib, *simt, shape, per, [&](ImplicitLocOpBuilder &cb,
                                                ValueRange idx) {
      SmallVector<Value> viewIdx;
      for (int64_t d = 0; d < rank; ++d)
        viewIdx.push_back(viewIndex(cb, d, idx[d]));
      nvgpu::DeviceAsyncCopyOp::create(
          cb, nvgpu::DeviceAsyncTokenType::get(cb.getContext()), target,
          indicesIn(cb, idx), vi.unitMemref, viewIdx,
          cb.getIndexAttr(per), Value(),
          // 16-byte copies may bypass L1 (cp.async.cg): tiles are staged
          // in shared memory, not re-read through L1.
          v == 16 ? cb.getUnitAttr() : UnitAttr());
    });
  };
  auto ifOp = scf::IfOp::create(b, TypeRange{}, interior, true);
  {
    ImplicitLocOpBuilder tb(b.getLoc(), ifOp.getThenBodyBuilder());
    // Element-sized 4-byte copies are always aligned; wider ones, and any
    // copy of 1- or 2-byte elements, only when the addresses say so.
    if (chunk == eltBytes) {
      copies(tb, chunk);
    } else {
      auto wide = scf::IfOp::create(tb, TypeRange{}, alignedTo(tb, chunk),
                                    true);
      ImplicitLocOpBuilder wb(b.getLoc(), wide.getThenBodyBuilder());
      copies(wb, chunk);
      ImplicitLocOpBuilder nb(b.getLoc(), wide.getElseBodyBuilder());
      if (eltBytes == 4)
        copies(nb, 4);
      else
        elements(nb);
    }
  }
  {
    ImplicitLocOpBuilder eb(b.getLoc(), ifOp.getElseBodyBuilder());
    elements(eb);
  }
  if (wait) {
    // Committed and awaited by every thread (uniform), copies or not.
    NVVM::CpAsyncCommitGroupOp::create(b);
    NVVM::CpAsyncWaitGroupOp::create(b, 0);
  }
}

} // namespace mlir::kiln::detail

//===----------------------------------------------------------------------===//
// Kernel signature
//===----------------------------------------------------------------------===//

namespace {

/// Largest dynamic shared memory per block (opt-in) of the architecture
/// (the pass refuses chips outside the table first).
int64_t maxSharedBytes(StringRef chip) {
  return ::kiln::findGPUChip(chip)->maxSharedPerBlock;
}

/// Shared memory per SM (bytes; 1 KiB of it is reserved per block).
static int64_t sharedPerSM(StringRef chip) { return ::kiln::findGPUChip(chip)->sharedPerSM; }

constexpr const char *kSharedName = "__kiln_smem";

/// Erases the stores to tile buffers that nothing reads. A constant tile
/// hoisted out of a loop (attention's -inf for masked scores) is
/// materialized where it was hoisted, but its readers, lowered later in
/// registers, compute it themselves: 64 stores per thread at block 128 and
/// 8 warps, never read. Every reader of a buffer uses its view (loads,
/// ldmatrix, its address for wgmma and TMA, aliases), so a view whose every
/// use is the destination of a store is write-only. (The buffer then takes
/// no bytes; the loop left empty is dead code.)
static void eraseWriteOnlyStores(Value window) {
  for (Operation *user : llvm::to_vector(window.getUsers())) {
    auto view = dyn_cast<memref::ViewOp>(user);
    if (!view || view->use_empty())
      continue;
    bool writeOnly = llvm::all_of(view->getUses(), [](OpOperand &use) {
      return isa<memref::StoreOp, vector::StoreOp>(use.getOwner()) &&
             use.getOperandNumber() == 1; // the destination, not the value
    });
    if (!writeOnly)
      continue;
    for (Operation *store : llvm::to_vector(view->getUsers()))
      store->erase();
  }
}

/// Bytes [first, second) of the shared window.
using ByteRange = std::pair<int64_t, int64_t>;

/// The shared-memory reads and writes of some ops, as byte ranges of the
/// window; `unknown` when one cannot be placed (or an op may touch memory
/// in a way not modelled here, or writes global memory).
struct SharedAccesses {
  SmallVector<ByteRange> reads, writes;
  bool unknown = false;
};

/// A memref's memory: global (no memory space), the block's shared memory,
/// or anything else.
enum class Memory { Global, Shared, Other };
Memory memoryOf(Type t) {
  auto m = dyn_cast<MemRefType>(t);
  if (!m)
    return Memory::Other;
  if (!m.getMemorySpace())
    return Memory::Global;
  auto space = dyn_cast<gpu::AddressSpaceAttr>(m.getMemorySpace());
  return space && space.getValue() == gpu::AddressSpace::Workgroup
             ? Memory::Shared
             : Memory::Other;
}

/// The window bytes a workgroup memref derived from one planned view of
/// `window` covers (the whole view, whatever casts and reshapes lie
/// between), or nullopt.
std::optional<ByteRange> windowBytes(Value memref, Value window) {
  Value v = memref;
  while (Operation *def = v.getDefiningOp()) {
    if (auto view = dyn_cast<memref::ViewOp>(def)) {
      std::optional<int64_t> offset = getConstantIntValue(view.getByteShift());
      MemRefType type = view.getType();
      if (view.getSource() != window || !offset || !type.hasStaticShape())
        return std::nullopt;
      int64_t bytes =
          type.getNumElements() * ((type.getElementTypeBitWidth() + 7) / 8);
      return ByteRange{*offset, *offset + bytes};
    }
    // (A reinterpret_cast addresses from its source's base: only one at
    // offset 0 stays inside it, as every one of this lowering does.)
    if (auto cast = dyn_cast<memref::ReinterpretCastOp>(def))
      if (cast.getMixedOffsets().size() != 1 ||
          getConstantIntValue(cast.getMixedOffsets()[0]) != 0)
        return std::nullopt;
    if (!isa<memref::ReinterpretCastOp, memref::CastOp,
             memref::CollapseShapeOp, memref::ExpandShapeOp,
             memref::SubViewOp>(def))
      return std::nullopt;
    v = def->getOperand(0);
  }
  return std::nullopt;
}

/// Adds the shared accesses of `root` and the ops nested in it.
void collectSharedAccesses(Operation *root, Value window,
                           SharedAccesses &out) {
  root->walk([&](Operation *op) {
    auto add = [&](Value memref, bool write) {
      Memory memory = memoryOf(memref.getType());
      if (memory == Memory::Other) {
        out.unknown = true;
        return;
      }
      if (memory == Memory::Global) {
        // Reads are free to move past a barrier; a write might be what the
        // barrier orders for another thread.
        out.unknown |= write;
        return;
      }
      if (std::optional<ByteRange> r = windowBytes(memref, window))
        (write ? out.writes : out.reads).push_back(*r);
      else
        out.unknown = true;
    };
    if (auto load = dyn_cast<memref::LoadOp>(op))
      return add(load.getMemRef(), false);
    if (auto store = dyn_cast<memref::StoreOp>(op))
      return add(store.getMemRef(), true);
    if (auto load = dyn_cast<vector::LoadOp>(op))
      return add(load.getBase(), false);
    if (auto store = dyn_cast<vector::StoreOp>(op))
      return add(store.getBase(), true);
    if (auto copy = dyn_cast<nvgpu::DeviceAsyncCopyOp>(op)) {
      add(copy.getSrc(), false);
      return add(copy.getDst(), true);
    }
    if (auto pointer = dyn_cast<memref::ExtractAlignedPointerAsIndexOp>(op)) {
      // A shared address may be used for anything (mbarriers, TMA, wgmma);
      // a global one only by ops that are themselves accesses.
      if (memoryOf(pointer.getSource().getType()) == Memory::Global)
        return;
      add(pointer.getSource(), false);
      return add(pointer.getSource(), true);
    }
    if (isa<gpu::BarrierOp, NVVM::CpAsyncCommitGroupOp,
            NVVM::CpAsyncWaitGroupOp, scf::IfOp, scf::ForOp, scf::YieldOp>(op) ||
        isMemoryEffectFree(op))
      return;
    out.unknown = true;
  });
}

bool overlap(ArrayRef<ByteRange> a, ArrayRef<ByteRange> b) {
  for (const ByteRange &x : a)
    for (const ByteRange &y : b)
      if (x.first < y.second && y.first < x.second)
        return true;
  return false;
}
/// A `cp.async.wait_group 0; [fence.proxy.async;] barrier` at `op`: its
/// barrier and fence (null when none), or a null barrier.
std::pair<Operation *, Operation *> retiringWait(Operation *op) {
  auto wait = dyn_cast_or_null<NVVM::CpAsyncWaitGroupOp>(op);
  if (!wait || wait.getN() != 0)
    return {nullptr, nullptr};
  Operation *next = wait->getNextNode(), *fence = nullptr;
  if (auto f = dyn_cast_or_null<NVVM::FenceProxyOp>(next);
      f && f.getKind() == NVVM::ProxyKind::async_shared) {
    fence = f;
    next = next->getNextNode();
  }
  if (!next || !isa<gpu::BarrierOp>(next))
    return {nullptr, nullptr};
  return {next, fence};
}

/// Lets the async copies of a prologue load land while later prologue work
/// runs: a `commit; wait_group 0; barrier` whose group only wrote shared
/// bytes (since the previous barrier) that nothing touches before the next
/// top-level `wait_group 0; barrier` loses its wait and barrier, and that
/// next wait retires the group with its own. Attention loaded its query
/// tile, waited, then loaded its block count and waited again: two memory
/// round trips in a row at every program's start; now they overlap. The
/// bytes are the planned views' (their offsets are constants by now), so a
/// buffer sharing bytes with the group keeps the barrier. A group written
/// for wgmma (a core-matrix buffer: `wait_group 0; fence.proxy.async;
/// barrier`, fenceCoreWrites) is deferred the same way, its fence moving
/// to the wait that retires it (each thread fences its own copies once
/// they landed, before the barrier that hands them to wgmma).
void deferAsyncCopyWaits(gpu::GPUFuncOp func, Value window) {
  Block &body = func.getBody().front();
  // The bytes of groups whose wait was removed and that no kept top-level
  // `wait_group 0; barrier` has retired yet: still in flight; and whether
  // one of them needs the async-proxy fence where it is retired.
  SmallVector<ByteRange> inFlight;
  bool inFlightFence = false;
  for (Operation *op = &body.front(); op; op = op->getNextNode()) {
    std::pair<Operation *, Operation *> found = retiringWait(op);
    Operation *barrier = found.first, *fence = found.second;
    if (!barrier)
      continue;
    Operation *wait = op, *commit = wait->getPrevNode();
    // Unless removed below, this wait and barrier retire everything (with
    // the fence a deferred core group needs).
    SmallVector<ByteRange> pending = std::move(inFlight);
    inFlight.clear();
    bool pendingFence = std::exchange(inFlightFence, false);
    auto keep = [&] {
      if (pendingFence && !fence) {
        ImplicitLocOpBuilder fb(barrier->getLoc(), barrier);
        asyncProxyFence(fb);
      }
    };
    if (!commit || !isa<NVVM::CpAsyncCommitGroupOp>(commit)) {
      keep();
      continue;
    }
    // Since the previous barrier: shared writes only (the group's copies,
    // and the plain stores of its unaligned or edge path).
    SharedAccesses group;
    for (Operation *p = commit->getPrevNode(); p && !isa<gpu::BarrierOp>(p);
         p = p->getPrevNode())
      collectSharedAccesses(p, window, group);
    if (group.unknown || !group.reads.empty() || group.writes.empty()) {
      keep();
      continue;
    }
    // Groups deferred to this wait stay in flight with this one.
    llvm::append_range(group.writes, pending);
    // Up to the next wait_group 0 + barrier: nothing on those bytes.
    SharedAccesses between;
    Operation *next = barrier->getNextNode();
    for (; next; next = next->getNextNode()) {
      if (retiringWait(next).first)
        break;
      collectSharedAccesses(next, window, between);
      if (between.unknown)
        break;
    }
    if (!next || between.unknown || overlap(group.writes, between.reads) ||
        overlap(group.writes, between.writes)) {
      keep();
      continue;
    }
    op = commit;
    wait->erase();
    if (fence)
      fence->erase();
    barrier->erase();
    inFlight = std::move(group.writes);
    inFlightFence = pendingFence || fence;
  }
}

/// The ops that may address bytes of `bytes` in the shared window: every op
/// with an operand computed from a shared address that may lie in `bytes`
/// (an `extract_aligned_pointer_as_index` of a view overlapping them or of
/// one that cannot be placed, or a shared global's address), following
/// values through arithmetic, casts and the results, iteration arguments
/// and yields of structured control flow.
DenseSet<Operation *> addressUsers(gpu::GPUFuncOp func, Value window,
                                   ArrayRef<ByteRange> bytes) {
  DenseSet<Value> tainted;
  SmallVector<Value> work;
  auto taint = [&](Value v) {
    if (tainted.insert(v).second)
      work.push_back(v);
  };
  func.walk([&](Operation *op) {
    if (auto p = dyn_cast<memref::ExtractAlignedPointerAsIndexOp>(op)) {
      Memory memory = memoryOf(p.getSource().getType());
      if (memory == Memory::Global)
        return;
      std::optional<ByteRange> r =
          memory == Memory::Shared ? windowBytes(p.getSource(), window)
                                   : std::nullopt;
      if (!r || overlap(*r, bytes))
        taint(p.getResult());
    } else if (auto g = dyn_cast<LLVM::AddressOfOp>(op)) {
      if (cast<LLVM::LLVMPointerType>(g.getType()).getAddressSpace() != 0)
        taint(g.getResult());
    }
  });
  DenseSet<Operation *> users;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      users.insert(user);
      if (isa<scf::YieldOp>(user)) {
        Operation *parent = user->getParentOp();
        unsigned i = use.getOperandNumber();
        if (i < parent->getNumResults())
          taint(parent->getResult(i));
        if (auto loop = dyn_cast<scf::ForOp>(parent))
          taint(loop.getRegionIterArgs()[i]);
        else if (!isa<scf::IfOp>(parent))
          for (Value r : parent->getResults())
            taint(r);
        continue;
      }
      if (auto loop = dyn_cast<scf::ForOp>(user)) {
        unsigned i = use.getOperandNumber();
        if (i < 3) {
          taint(loop.getInductionVar());
        } else {
          taint(loop.getRegionIterArgs()[i - 3]);
          taint(loop.getResult(i - 3));
        }
        continue;
      }
      for (Region &r : user->getRegions())
        for (Block &blk : r)
          for (BlockArgument a : blk.getArguments())
            taint(a);
      for (Value r : user->getResults())
        taint(r);
    }
  }
  return users;
}

/// Lets the last async copy group of a program's prologue land during the
/// work that follows its wait, up to the first op that may touch its bytes.
/// After deferAsyncCopyWaits, a top-level `commit; wait_group 0; [fence;]
/// barrier` may retire several groups issued one after another. When the
/// group committed last (its async copies: those since the commit before
/// it) is not touched by the ops right after that barrier, the wait becomes
/// `wait_group 1` (every group but the last), and a `wait_group N; [fence;]
/// barrier` (N: the groups committed at the top level in between) retires
/// the last group before the first op that may touch it: an access of its
/// bytes, an op computed from an address that may lie in them, a write of
/// global memory (which its copies still read), a nested commit or any
/// other cp.async wait, any op with memory effects not known to be harmless
/// here (calls, inline asm, atomics among them), or the end of the
/// function. Where that op is a later `wait_group 0; [fence;] barrier`,
/// that wait retires the group and nothing is added. Nothing changes unless
/// an op in between has a latency to overlap (a loop, a global read, an
/// async copy).
///
/// Attention reads its lists' counts and first indices, then issues q (the
/// last group): the counts are extracted and the first pipeline fill issues
/// its keys and values while q's copies are still in flight, so that the
/// two loads' latencies overlap instead of adding up. A fence at the wait
/// stays there and is added at the later one: it orders the wgmma operand
/// writes of whichever groups each retires.
void deferLastAsyncCopyGroup(gpu::GPUFuncOp func, Value window) {
  Block &body = func.getBody().front();
  for (Operation *op = &body.front(); op; op = op->getNextNode()) {
    auto [barrier, fence] = retiringWait(op);
    auto commit = dyn_cast_or_null<NVVM::CpAsyncCommitGroupOp>(
        op->getPrevNode());
    if (!barrier || !commit)
      continue;
    auto wait = cast<NVVM::CpAsyncWaitGroupOp>(op);
    // The last group: the async copies since the commit before it (through
    // barriers and waits: a copy belongs to the next commit), which must
    // all be top-level or in ops that commit nothing.
    SharedAccesses group;
    bool placed = true;
    for (Operation *p = commit->getPrevNode();
         p && !isa<NVVM::CpAsyncCommitGroupOp>(p) && placed;
         p = p->getPrevNode())
      p->walk([&](Operation *inner) {
        if (isa<NVVM::CpAsyncCommitGroupOp>(inner)) {
          placed = false;
        } else if (auto copy = dyn_cast<nvgpu::DeviceAsyncCopyOp>(inner)) {
          std::optional<ByteRange> r = windowBytes(copy.getDst(), window);
          if (r)
            group.writes.push_back(*r);
          placed &= r.has_value();
        }
      });
    if (!placed || group.writes.empty())
      continue;
    DenseSet<Operation *> users = addressUsers(func, window, group.writes);
    // The first top-level op after the barrier that may touch the group.
    int64_t commits = 0;
    Operation *stop = barrier->getNextNode();
    for (; stop; stop = stop->getNextNode()) {
      if (isa<NVVM::CpAsyncCommitGroupOp>(stop)) {
        ++commits;
        continue;
      }
      WalkResult touches = stop->walk([&](Operation *inner) {
        if (users.contains(inner) ||
            (inner == stop && inner->hasTrait<OpTrait::IsTerminator>()) ||
            isa<NVVM::CpAsyncWaitGroupOp, NVVM::CpAsyncCommitGroupOp,
                LLVM::InlineAsmOp, CallOpInterface>(inner))
          return WalkResult::interrupt();
        if (isa<ViewLikeOpInterface, memref::ExtractAlignedPointerAsIndexOp,
                memref::ExtractStridedMetadataOp, memref::CastOp>(inner))
          return WalkResult::advance();
        // The copies still read global memory: no write there may come
        // first (the same thread's store could be read by its own copy, and
        // stores are what a barrier orders for other threads). So beside
        // effect-free ops, only these may: reads, async copies into shared
        // memory, shared-memory stores (their bytes checked below),
        // barriers, fences, mbarrier set-up and waits, TMA loads, tensor
        // map prefetches, clock reads and wgmma's fences, commits and waits.
        bool globalStore = false;
        if (auto st = dyn_cast<memref::StoreOp>(inner))
          globalStore = memoryOf(st.getMemRef().getType()) != Memory::Shared;
        else if (auto st = dyn_cast<vector::StoreOp>(inner))
          globalStore = memoryOf(st.getBase().getType()) != Memory::Shared;
        if (globalStore ||
            !(isMemoryEffectFree(inner) ||
              isa<memref::LoadOp, vector::LoadOp, memref::StoreOp,
                  vector::StoreOp, nvgpu::DeviceAsyncCopyOp, gpu::BarrierOp,
                  scf::IfOp, scf::ForOp, scf::YieldOp, NVVM::BarrierOp,
                  NVVM::BarrierArriveOp, NVVM::FenceProxyOp,
                  NVVM::MBarrierInitOp, NVVM::MBarrierInvalOp,
                  NVVM::MBarrierArriveExpectTxOp,
                  NVVM::MBarrierTryWaitParityOp,
                  NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp,
                  NVVM::PrefetchOp, NVVM::Clock64Op, NVVM::WgmmaFenceAlignedOp,
                  NVVM::WgmmaGroupSyncAlignedOp, NVVM::WgmmaWaitGroupSyncOp>(
                  inner)))
          return WalkResult::interrupt();
        for (Value v : inner->getOperands()) {
          if (!isa<BaseMemRefType>(v.getType()))
            continue;
          Memory memory = memoryOf(v.getType());
          if (memory == Memory::Global)
            continue;
          std::optional<ByteRange> r =
              memory == Memory::Shared ? windowBytes(v, window) : std::nullopt;
          if (!r || overlap(*r, group.writes))
            return WalkResult::interrupt();
        }
        return WalkResult::advance();
      });
      if (touches.wasInterrupted())
        break;
    }
    // Worth it only where something in between has a latency of its own to
    // overlap with the group's: a loop, a read of global memory, an async
    // copy (cp.async or TMA). Not for an address's arithmetic or a fence.
    bool work = false;
    for (Operation *w = barrier->getNextNode(); w && w != stop && !work;
         w = w->getNextNode())
      w->walk([&](Operation *inner) {
        if (isa<scf::ForOp, nvgpu::DeviceAsyncCopyOp,
                NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp>(inner))
          work = true;
        else if (auto load = dyn_cast<memref::LoadOp>(inner))
          work |= memoryOf(load.getMemRef().getType()) == Memory::Global;
        else if (auto load = dyn_cast<vector::LoadOp>(inner))
          work |= memoryOf(load.getBase().getType()) == Memory::Global;
      });
    if (!stop || !work)
      continue;
    wait.setN(1);
    // A `wait_group 0; [fence;] barrier` there retires the group itself
    // (with the fence it needs).
    if (auto [laterBarrier, laterFence] = retiringWait(stop); laterBarrier) {
      if (fence && !laterFence) {
        ImplicitLocOpBuilder b(laterBarrier->getLoc(), laterBarrier);
        asyncProxyFence(b);
      }
    } else {
      ImplicitLocOpBuilder b(stop->getLoc(), stop);
      NVVM::CpAsyncWaitGroupOp::create(b, commits);
      if (fence)
        asyncProxyFence(b);
      gpu::BarrierOp::create(b);
    }
    // Go on from `stop` (a later wait may defer its own last group).
    op = stop->getPrevNode();
  }
}

/// Places the tile buffers (memref.view ops of the shared window) so that
/// buffers whose live ranges are disjoint share bytes, and returns the total.
/// A buffer's live range is the span, in program order, from its first to
/// its last access (through view-like aliases), widened to the whole of the
/// outermost loop around an access that does not also hold the buffer's
/// home (the op it was allocated for): there a value may live across
/// iterations, while a buffer allocated inside a loop body holds a value
/// that each iteration defines before using it (SSA dominance).
/// Control flow is structured, so a buffer is never touched outside its span
/// and each op's trailing barrier orders the hand-over between two buffers
/// that share bytes.
int64_t planSharedMemory(gpu::GPUFuncOp func, Value window,
                         const DenseMap<Operation *, Block *> &home,
                         const DenseMap<Operation *, int64_t> &alignment) {
  DenseMap<Operation *, int64_t> first, last;
  // Positions of an Euler tour: an op spans [entry, exit], around the spans
  // of the ops nested in it.
  int64_t pos = 0;
  std::function<void(Operation *)> tour = [&](Operation *op) {
    first[op] = pos++;
    for (Region &r : op->getRegions())
      for (Block &blk : r)
        for (Operation &inner : blk)
          tour(&inner);
    last[op] = pos++;
  };
  tour(func);
  // A buffer read in a barrier phase stays live until that phase ends: a
  // thread may still read it after another thread has moved on to the next
  // op of the same phase. The phase ends at the next barrier at the same or
  // an enclosing level (barriers nested in a following op may not run).
  auto phaseEnd = [&](Operation *op) -> int64_t {
    for (Operation *o = op; o && o != func.getOperation();
         o = o->getParentOp())
      for (Operation *n = o->getNextNode(); n; n = n->getNextNode())
        if (isa<gpu::BarrierOp>(n))
          return first[n];
    return last[func];
  };
  struct Buffer {
    memref::ViewOp view;
    int64_t begin, end, bytes, order, offset = -1;
  };
  SmallVector<Buffer> bufs;
  for (Operation *user : window.getUsers()) {
    auto view = dyn_cast<memref::ViewOp>(user);
    if (!view)
      continue;
    MemRefType t = view.getType();
    int64_t bytes = t.getNumElements() *
                    std::max<int64_t>(1, t.getElementTypeBitWidth() / 8);
    int64_t begin = INT64_MAX, end = -1;
    SmallVector<Value> worklist{view.getResult()};
    while (!worklist.empty()) {
      Value v = worklist.pop_back_val();
      for (Operation *u : v.getUsers()) {
        if (isa<memref::CollapseShapeOp, memref::ExpandShapeOp, memref::CastOp,
                memref::SubViewOp, memref::ReinterpretCastOp,
                arith::SelectOp>(u)) {
          worklist.push_back(u->getResult(0));
          continue;
        }
        Operation *span = u;
        Block *hb = home.lookup(view);
        Operation *h = hb ? hb->getParentOp() : nullptr;
        for (Operation *p = u->getParentOp(); p && p != func;
             p = p->getParentOp())
          if (isa<LoopLikeOpInterface>(p) && !(h && p->isAncestor(h)))
            span = p;
        begin = std::min(begin, first[span]);
        end = std::max(end, phaseEnd(span));
      }
    }
    if (end < 0) {
      // Never accessed (a result kept in registers): no bytes.
      OpBuilder ob(view);
      view.getByteShiftMutable().assign(
          arith::ConstantIndexOp::create(ob, view.getLoc(), 0));
      continue;
    }
    bufs.push_back({view, begin, end, bytes, int64_t(bufs.size())});
  }
  // Largest first, each at the lowest 16-byte-aligned offset that does not
  // overlap a placed buffer with an intersecting live range.
  // (Ties keep program order: a deterministic plan.)
  llvm::sort(bufs, [](const Buffer &a, const Buffer &b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.order < b.order;
  });
  int64_t total = 0;
  for (size_t i = 0; i < bufs.size(); ++i) {
    // Tiles of whole 128-byte lines start on one: a TMA destination must.
    int64_t align = bufs[i].bytes % 128 == 0 ? 128 : 16;
    align = std::max(align, alignment.lookup(bufs[i].view));
    SmallVector<std::pair<int64_t, int64_t>> taken;
    for (size_t j = 0; j < i; ++j)
      if (bufs[j].begin <= bufs[i].end && bufs[i].begin <= bufs[j].end)
        taken.push_back({bufs[j].offset, bufs[j].offset + bufs[j].bytes});
    llvm::sort(taken);
    int64_t offset = 0;
    for (auto [lo, hi] : taken) {
      if (offset + bufs[i].bytes <= lo)
        break;
      offset = std::max(offset, (hi + align - 1) / align * align);
    }
    bufs[i].offset = offset;
    total = std::max(total, offset + bufs[i].bytes);
    OpBuilder b(bufs[i].view);
    bufs[i].view.getByteShiftMutable().assign(
        arith::ConstantIndexOp::create(b, bufs[i].view.getLoc(), offset));
  }
  return total;
}

/// Lowers one kernel into `gpuModule`. With `overLimit`, a kernel whose
/// tiles exceed the architecture's shared memory is not an error: the
/// generated function is erased, the kernel kept, and *overLimit set.
LogicalResult lowerKernelGPU(FuncOp kernel, gpu::GPUModuleOp gpuModule,
                             SimtConfig config, StringRef chip,
                             bool *overLimit = nullptr) {
  MLIRContext *ctx = kernel.getContext();
  if (kernel.isExternal())
    return kernel.emitError("kiln GPU lowering: kernel has no body");
  OpBuilder b(ctx);
  b.setInsertionPointToEnd(gpuModule.getBody());
  Location loc = kernel.getLoc();
  SmallVector<Type> argTypes;
  SmallVector<Attribute> signature;
  for (auto t : kernel.getArgumentTypes()) {
    if (auto ptr = dyn_cast<PtrType>(t)) {
      // One element, bare pointer: the .u64 device address of the ABI.
      argTypes.push_back(
          MemRefType::get({1}, storageType(ptr.getElementType())));
      std::string dt = runtimeDTypeName(ptr.getElementType());
      if (dt.empty())
        return kernel.emitError("kiln GPU lowering: unsupported pointee type ")
               << ptr.getElementType();
      signature.push_back(b.getStringAttr("ptr " + dt));
    } else {
      std::string dt = runtimeDTypeName(t);
      if (dt.empty())
        return kernel.emitError("kiln GPU lowering: unsupported scalar "
                                "argument type ")
               << t;
      // index travels as i64 (the manifest's dtype) and is cast at entry.
      argTypes.push_back(t.isIndex() ? Type(b.getI64Type()) : t);
      signature.push_back(b.getStringAttr("scalar " + dt));
    }
  }
  // TMA: the hidden per-program scratch (a bare global pointer, last);
  // dropped again if no tensor map needs it.
  size_t numUser = argTypes.size();
  if (config.tma)
    argTypes.push_back(MemRefType::get({1}, b.getI8Type()));
  auto gpuFunc = gpu::GPUFuncOp::create(b, loc, kernel.getSymName(),
                                        b.getFunctionType(argTypes, {}));
  gpuFunc->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  gpuFunc->setAttr("nvvm.maxntid",
                   b.getDenseI32ArrayAttr({int32_t(config.numThreads), 1, 1}));
  gpuFunc->setAttr("kiln.signature", b.getArrayAttr(signature));
  gpuFunc->setAttr("kiln.grid_rank", b.getI64IntegerAttr(kernel.getGridRank()));

  // Move the body in; the entry block keeps its arguments (retyped).
  Region &body = gpuFunc.getBody();
  body.getBlocks().clear();
  body.takeBody(kernel.getBody());
  Block &entry = body.front();
  if (config.tma)
    entry.addArgument(argTypes.back(), loc);
  {
    OpBuilder ab = OpBuilder::atBlockBegin(&entry);
    for (auto [i, arg] : llvm::enumerate(entry.getArguments().take_front(numUser))) {
      bool isIndex = arg.getType().isIndex();
      arg.setType(argTypes[i]);
      if (!isIndex)
        continue;
      auto cast = arith::IndexCastOp::create(ab, loc, ab.getIndexType(), arg);
      arg.replaceAllUsesExcept(cast, cast);
    }
  }
  gpuFunc.walk([&](ReturnOp ret) {
    OpBuilder rb(ret);
    gpu::ReturnOp::create(rb, ret.getLoc());
    ret.erase();
  });

  // Grid, thread id and the shared-memory window at the entry.
  ImplicitLocOpBuilder eb(loc, &entry, entry.begin());
  SmallVector<Value> grid;
  for (auto dim : {gpu::Dimension::x, gpu::Dimension::y, gpu::Dimension::z})
    grid.push_back(arith::IndexCastOp::create(
        eb, eb.getI32Type(), gpu::BlockIdOp::create(eb, dim)));
  for (auto dim : {gpu::Dimension::x, gpu::Dimension::y, gpu::Dimension::z})
    grid.push_back(arith::IndexCastOp::create(
        eb, eb.getI32Type(), gpu::GridDimOp::create(eb, dim)));
  config.threadId = gpu::ThreadIdOp::create(eb, gpu::Dimension::x);
  if (config.tma) {
    // memref<?xi8> over the scratch; program (x, y, z) owns bytes
    // [((z gy + y) gx + x) * stride, + stride).
    config.scratch = memref::ReinterpretCastOp::create(
        eb, MemRefType::get({ShapedType::kDynamic}, eb.getI8Type()),
        entry.getArguments().back(), OpFoldResult(eb.getIndexAttr(0)),
        ArrayRef<OpFoldResult>{eb.getIndexAttr(int64_t(1) << 40)},
        ArrayRef<OpFoldResult>{eb.getIndexAttr(1)});
    auto idx = [&](Value v) {
      return arith::IndexCastOp::create(eb, eb.getIndexType(), v);
    };
    config.programLinear = arith::AddIOp::create(
        eb,
        arith::MulIOp::create(
            eb,
            arith::AddIOp::create(
                eb, arith::MulIOp::create(eb, idx(grid[2]), idx(grid[4])),
                idx(grid[1])),
            idx(grid[3])),
        idx(grid[0]));
    config.scratchStride = arith::ConstantIndexOp::create(eb, 0);
  }
  auto space = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  auto windowType = MemRefType::get({0}, eb.getI8Type(),
                                    MemRefLayoutAttrInterface{}, space);
  Value window = memref::GetGlobalOp::create(eb, windowType, kSharedName);
  config.sharedBase = memref::CastOp::create(
      eb,
      MemRefType::get({ShapedType::kDynamic}, eb.getI8Type(),
                      MemRefLayoutAttrInterface{}, space),
      window);

  config.kernelFunc = gpuFunc;
  config.entry = &entry;
  config.numUserArgs = numUser;
  transposeNMajorBytes(gpuFunc, config);
  expandFp8Dots(gpuFunc, &config);
  planRowDots(config, gpuFunc);
  KernelLowering lowering(gpuFunc, /*vectorBits=*/32);
  lowering.setSimt(&config);
  if (failed(lowering.run(entry, grid)))
    return failure();
  eraseWriteOnlyStores(config.sharedBase);
  config.sharedBytes =
      planSharedMemory(gpuFunc, config.sharedBase, config.bufferHome,
                       config.bufferAlign);
  deferAsyncCopyWaits(gpuFunc, config.sharedBase);
  deferLastAsyncCopyGroup(gpuFunc, config.sharedBase);
  if (config.pingpong)
    scheduleWarpgroupPingpong(gpuFunc, config);
  int64_t scratchBytes = 128 * config.tensorMaps;
  if (config.tma) {
    if (scratchBytes) {
      config.scratchStride.getDefiningOp<arith::ConstantOp>().setValueAttr(
          b.getIndexAttr(scratchBytes));
    } else {
      // No tensor map: no hidden argument.
      config.scratch.getDefiningOp()->erase();
      config.scratchStride.getDefiningOp()->erase();
      (void)gpuFunc.eraseArgument(numUser);
    }
  }
  int64_t limit = maxSharedBytes(chip);
  if (config.sharedBytes > limit && overLimit) {
    // The caller retries with fewer pipeline stages, then without padding.
    *overLimit = true;
    gpuFunc.erase();
    return failure();
  }
  if (config.sharedBytes > limit)
    return emitError(kernel.getLoc())
           << "kernel '" << kernel.getSymName() << "' needs "
           << (config.sharedBytes + 1023) / 1024
           << " KiB of shared memory for its tiles; " << chip << " allows "
           << limit / 1024 << " KiB per block: use smaller tiles";
  // Registers: when shared memory allows only `fit` blocks per SM and
  // `fit` blocks may each use 255 registers per thread (65536 per SM), or
  // `fit` is 1 (a hint of 1 caps nothing below the hardware's own limit),
  // ptxas is told `fit` (.minnctapersm): it otherwise aims at more blocks than
  // can be resident and spills (168 registers and 52 bytes of spills for an
  // sm_90 attention kernel of 122 KiB alone on its SM, 232 and none with a
  // hint of 1; 168 and 8-60 B for the 80 KiB mma.sync attention at 2 per SM).
  // Where the hint would cap registers, the trade of occupancy against
  // spills is left to ptxas: a hint of 2 held a 256-thread kernel to 128
  // registers and 2 KiB of spills.
  if (config.sharedBytes > 0) {
    int64_t fit = sharedPerSM(chip) / (config.sharedBytes + 1024);
    if (fit == 1 || (fit > 1 && fit * config.numThreads * 255 <= 65536))
      gpuFunc->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(),
                       b.getI32IntegerAttr(fit));
  }
  // Recorded on the outer module too: it survives the NVVM conversion.
  auto attr = b.getI64IntegerAttr(config.sharedBytes);
  gpuFunc->setAttr("kiln.shared_bytes", attr);
  gpuModule->getParentOfType<ModuleOp>()->setAttr(
      ("kiln.shared_bytes." + kernel.getSymName()).str(), attr);
  if (scratchBytes) {
    auto sattr = b.getI64IntegerAttr(scratchBytes);
    gpuFunc->setAttr("kiln.scratch_bytes", sattr);
    gpuModule->getParentOfType<ModuleOp>()->setAttr(
        ("kiln.scratch_bytes." + kernel.getSymName()).str(), sattr);
  }
  // Host maps: the manifest's `tensor_map` lines, in parameter order (after
  // the user arguments and the scratch: the flags, then one per map).
  if (!config.hostMapSpecs.empty()) {
    SmallVector<Attribute> specs;
    for (const std::string &s : config.hostMapSpecs)
      specs.push_back(b.getStringAttr(s));
    auto mattr = b.getArrayAttr(specs);
    gpuFunc->setAttr("kiln.tensor_maps", mattr);
    gpuModule->getParentOfType<ModuleOp>()->setAttr(
        ("kiln.tensor_maps." + kernel.getSymName()).str(), mattr);
  }
  kernel.erase();
  return success();
}

struct ConvertKilnToGPUPass
    : mlir::kiln::impl::ConvertKilnToGPUBase<ConvertKilnToGPUPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (numWarps < 1 || numWarps > 32) {
      module.emitError("convert-kiln-to-gpu: num-warps must be in [1, 32]");
      return signalPassFailure();
    }
    if (numStages < 1 || numStages > 8) {
      module.emitError("convert-kiln-to-gpu: num-stages must be in [1, 8]");
      return signalPassFailure();
    }
    if (!::kiln::findGPUChip(chip)) {
      module.emitError("convert-kiln-to-gpu: unknown chip '")
          << chip << "'; known: " << ::kiln::knownGPUChips();
      return signalPassFailure();
    }
    SmallVector<FuncOp> kernels;
    module.walk([&](FuncOp f) { kernels.push_back(f); });
    if (kernels.empty())
      return;
    for (FuncOp k : kernels)
      if (failed(mlir::kiln::detail::checkTileSizes(k, /*gpu=*/true)))
        return signalPassFailure();
    MLIRContext *ctx = module.getContext();
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    UnitAttr::get(ctx));
    OpBuilder b(ctx);
    b.setInsertionPointToEnd(module.getBody());
    auto gpuModule = gpu::GPUModuleOp::create(b, module.getLoc(), "kiln_gpu");
    b.setInsertionPointToStart(gpuModule.getBody());
    // The dynamic shared-memory window: a zero-size extern array (see
    // ../shared/MLIR22-NOTES.md: gpu.dynamic_shared_memory would overlap).
    auto space = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
    memref::GlobalOp::create(
        b, module.getLoc(), kSharedName, b.getStringAttr("public"),
        MemRefType::get({0}, b.getI8Type(), MemRefLayoutAttrInterface{}, space),
        Attribute(), /*constant=*/false, b.getI64IntegerAttr(1024));
    for (FuncOp k : kernels) {
      SimtConfig config;
      config.numThreads = 32 * numWarps;
      config.tensorCores = tensorCores;
      config.wgmma = tensorCores && wgmma && chip == "sm_90a";
      config.tma = tma && asyncCopy && chip == "sm_90a";
      config.swizzle = swizzle;
      config.fp8Wgmma = fp8Wgmma;
      config.pingpong = pingpong;
      config.hostMaps = hostMaps;
      config.asyncCopy = asyncCopy;
      // Loops marked for overlap compute their wgmma scores an iteration
      // ahead (GPUOverlap.cpp), in each try with at least two stages: the
      // deferred wait needs the next key block in a pipelined stage, which
      // outlives the iteration. Otherwise the marks are dropped.
      auto prepare = [&](FuncOp f) {
        if (overlap && config.numStages >= 2)
          overlapMarkedLoops(f, config);
        else
          f.walk([](scf::ForOp loop) { loop->removeAttr(kOverlapAttr); });
      };
      // Pipelining costs a stage buffer per load, and padded mma.sync rows
      // 16 bytes per row: a kernel whose tiles do not fit is lowered again
      // with one stage less at a time, then without the padding (the
      // lowering consumes the kernel, so the tries before the last work on
      // a copy). The padding goes last: on the H200, 8-way ldmatrix
      // conflicts cost the mma.sync GEMM and attention 5-10x, one stage
      // instead of two cost attention about 25%, so neither a stage nor a
      // second block per SM is worth the conflicts. A kernel with gathers
      // first tries them pipelined (each takes a stage buffer per stage:
      // DSA's key rows), down to two stages, then the loads alone.
      struct Try {
        int64_t stages;
        bool pad, gathers;
      };
      bool hasGathers =
          pipelineGathers &&
          k.walk([](GatherOp) { return WalkResult::interrupt(); })
              .wasInterrupted();
      SmallVector<Try> tries;
      for (bool pad : {true, false}) {
        if (hasGathers)
          for (int64_t s = numStages; s >= 2; --s)
            tries.push_back({s, pad, true});
        for (int64_t s = numStages; s >= 1; --s)
          tries.push_back({s, pad, false});
      }
      bool done = false;
      for (auto [i, t] : llvm::enumerate(tries)) {
        config.numStages = t.stages;
        config.padRows = t.pad;
        config.pipelineGathers = t.gathers;
        if (i + 1 == tries.size()) {
          prepare(k);
          if (failed(lowerKernelGPU(k, gpuModule, config, chip)))
            return signalPassFailure();
          done = true;
          break;
        }
        OpBuilder cb(k);
        auto copy = cast<FuncOp>(cb.clone(*k.getOperation()));
        prepare(copy);
        bool overLimit = false;
        if (succeeded(lowerKernelGPU(copy, gpuModule, config, chip,
                                     &overLimit))) {
          k.erase();
          done = true;
          break;
        }
        if (!overLimit)
          return signalPassFailure();
        copy.erase();
      }
      (void)done;
    }
  }
};

} // namespace
