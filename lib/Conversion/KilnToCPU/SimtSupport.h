//===- SimtSupport.h - Helpers shared by the GPU lowering's files -*- C++ -*-===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The small builders and layout predicates that the GPU lowering's files
// (KilnToGPU.cpp: SIMT mode, shared memory and the pass;
// GPUPipelining.cpp: cp.async and TMA pipelining; GPUTensorCores.cpp:
// mma.sync, wgmma and register-resident values; GPUOverlap.cpp: a loop's
// scores an iteration ahead) share. Internal to
// lib/Conversion/KilnToCPU.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_CONVERSION_KILNTOCPU_SIMTSUPPORT_H
#define KILN_LIB_CONVERSION_KILNTOCPU_SIMTSUPPORT_H

#include "KernelLowering.h"

namespace mlir::kiln::detail {

/// An index constant.
Value cIdx(ImplicitLocOpBuilder &b, int64_t v);
/// An index constant per element of `values` (a static shape as extents).
SmallVector<Value> cIdxs(ImplicitLocOpBuilder &b, ArrayRef<int64_t> values);
/// Whether a tile of `shape` at `offsets` (of view dimensions `firstDim`
/// on: a gather's after its rows) lies inside the view, whose innermost
/// stride is 1.
Value interiorTile(ImplicitLocOpBuilder &b, const ViewInfo &vi, ValueRange offsets,
                   ArrayRef<int64_t> shape, int64_t firstDim = 0);
/// An i32 constant.
Value i32Const(ImplicitLocOpBuilder &b, int64_t v);
/// Row-major delinearization of `linear` over `shape`.
SmallVector<Value> delinearize(ImplicitLocOpBuilder &b, Value linear,
                               ArrayRef<int64_t> shape);
/// Runs `fn` for the elements of `shape` this thread owns (linear layout:
/// thread t takes t, t + T, ...), without the trailing barrier.
void distribute(ImplicitLocOpBuilder &b, SimtConfig &simt,
                ArrayRef<int64_t> shape,
                function_ref<void(ImplicitLocOpBuilder &, ValueRange)> fn);
/// `fence.proxy.async.shared::cta`: this thread's generic shared-memory
/// writes become visible to the async proxy (wgmma, TMA).
void asyncProxyFence(ImplicitLocOpBuilder &b);
/// `fence.acq_rel.gpu`: orders this thread's accesses before it (and those
/// it observed) before its accesses after it, at GPU scope (atomics).
void atomicFence(ImplicitLocOpBuilder &b);
/// Runs `body` on thread 0 only; when `cond` (i1) holds.
void onThread0(ImplicitLocOpBuilder &b, Value threadId,
               function_ref<void(ImplicitLocOpBuilder &)> body);
void when(ImplicitLocOpBuilder &b, Value cond,
          function_ref<void(ImplicitLocOpBuilder &)> body);
/// The byte address (index) of memref `m`'s first element, and an address
/// as an LLVM pointer in address space `space`.
Value byteAddress(ImplicitLocOpBuilder &b, Value m);
Value pointerAt(ImplicitLocOpBuilder &b, Value addr, unsigned space);

/// wgmma operand buffers: the strides of the rank-4 core-matrix view of a
/// rows-row tile, whether a buffer is one (KilnToGPU.cpp), and the 128B
/// swizzle of pipelined stages (element offsets, the flat view writers use,
/// which loads take it; GPUTensorCores.cpp).
SmallVector<int64_t> coreStrides(int64_t rows, int64_t chunk = 8);
bool isCoreBuffer(Value buf);
/// Elements added to each row of an mma.sync operand buffer of `storage`
/// elements: 16 bytes (8 16-bit elements, 16 int8 ones), so that
/// ldmatrix's eight rows fall in different banks.
inline int64_t rowPad(Type storage) {
  return 128 / storage.getIntOrFloatBitWidth();
}
bool isPaddedBuffer(Value buf);
/// Whether `buf` is an mma.sync operand buffer with XOR-swizzled rows (see
/// allocXorTile): rank 4, (r / 8, r % 8, (c / 8) ^ (r % 8), c % 8) of a
/// rows x cols tile whose rows are whole 128-byte lines.
bool isXorBuffer(Value buf);
Value swizzledOffset(ImplicitLocOpBuilder &b, int64_t rows, ValueRange idx,
                     int64_t per = 8);
Value swizzledView(ImplicitLocOpBuilder &b, Value stage);
bool swizzleCandidate(const SimtConfig &simt, LoadOp load);

/// The mark on an scf.for whose first dot from a constant accumulator is
/// computed an iteration ahead on sm_90a (GPUOverlap.cpp); the other
/// lowerings ignore it.
constexpr llvm::StringLiteral kOverlapAttr = "kiln.overlap";
/// The mark on the inline asm of a wgmma with A in registers (N, f16, N-major
/// B): the emulator reads it (kiln-emulate-gpu) and the pingpong recognizes
/// such a dot by it (GPUPingpong.cpp).
constexpr llvm::StringLiteral kWgmmaRsAttr = "kiln.wgmma_rs";
/// Rotates the marked loops of `kernel` whose first dot runs on wgmma with
/// whole rows per warpgroup under `simt` (removing every mark); returns how many were rotated.
int overlapMarkedLoops(Operation *kernel, const SimtConfig &simt);
/// FlashAttention 3's pingpong on sm_90a: in loops of `kernel` (a gpu.func) whose wgmma
/// groups are separated by work on a register-A dot's operand (attention's
/// key-block loops), the warpgroups take turns issuing each group, ordered
/// by named barriers (GPUPingpong.cpp); returns how many loops.
int scheduleWarpgroupPingpong(Operation *kernel, const SimtConfig &simt);
/// Whether `op` runs as wgmma under `simt` with whole rows in each
/// warpgroup, so that row reductions of its result stay in registers
/// (GPUTensorCores.cpp).
bool isWgmmaRowDot(const SimtConfig &simt, DotOp op);
/// Whether `op` runs as wgmma under `simt` (any warp tiling).
bool isWgmmaDot(const SimtConfig &simt, DotOp op);

/// The value of splat tile constant `dense` as a register-resident dot
/// accumulator holds it: an f32 for float splats, an i32 for i32 splats (s8
/// dots' accumulators); null for other element types.
TypedAttr registerSplat(DenseElementsAttr dense);

/// Gives 8-bit dots (fp8, s8) whose B is an N-major load ([K, N] rows,
/// used only by the dot) a transposed copy of it, B = trans(trans(load)),
/// where the dot then runs on tensor cores: their forms read 8-bit operands
/// K-major only. Runs before expandFp8Dots (GPUTensorCores.cpp).
void transposeNMajorBytes(Operation *root, const SimtConfig &simt);

/// Decodes the operands of fp8 dots (kiln.dot with lhs_fp8 / rhs_fp8) to
/// bfloat16, exactly, except those `simt` multiplies natively (wgmma's
/// e4m3 / e5m2 forms on sm_90a; every dot when `simt` is null: the CPU).
/// Runs before the lowering plans anything (GPUTensorCores.cpp).
void expandFp8Dots(Operation *root, const SimtConfig *simt);

} // namespace mlir::kiln::detail

#endif // KILN_LIB_CONVERSION_KILNTOCPU_SIMTSUPPORT_H
