//===- GPUTensorCores.cpp - kiln.dot on mma.sync and wgmma --------------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The GPU lowering of kiln.dot on tensor cores (mma.sync, and wgmma on
// sm_90a), the register-resident values around them (accumulators, wgmma
// fragments, row vectors) and warp-shuffle reductions. See KilnToGPU.cpp
// for the SIMT mode as a whole and docs/gpu.md for the why.
//
//===----------------------------------------------------------------------===//

#include "KernelLowering.h"
#include "SimtSupport.h"
#include "kiln/Dialect/Kiln/IR/Kiln.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/Support/SaveAndRestore.h"

#include <cmath>

using namespace mlir;
using namespace mlir::kiln;
using namespace mlir::kiln::detail;

namespace mlir::kiln::detail {
//===----------------------------------------------------------------------===//
// Tensor cores: mma.sync.m16n8k16 over 16x8 output tiles
//===----------------------------------------------------------------------===//

static Value arithAdd(ImplicitLocOpBuilder &b, Value x, Value y) {
  return arith::AddIOp::create(b, x, y);
}

/// A power of two that index `v` is known to be a multiple of (at most
/// 2^20): from constants, products, sums, shifts and scf.for induction
/// variables (their lower bound and step); 1 when nothing is known.
static int64_t knownMultiple(Value v, int depth = 0) {
  constexpr int64_t kMax = int64_t(1) << 20;
  if (depth > 8)
    return 1;
  APInt c;
  if (matchPattern(v, m_ConstantInt(&c))) {
    int64_t x = c.getSExtValue();
    return x == 0 ? kMax : std::min<int64_t>(kMax, x & -x);
  }
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    auto loop = dyn_cast_or_null<scf::ForOp>(arg.getOwner()->getParentOp());
    if (loop && arg == loop.getInductionVar())
      return std::min(knownMultiple(loop.getLowerBound(), depth + 1),
                      knownMultiple(loop.getStep(), depth + 1));
    return 1;
  }
  Operation *op = v.getDefiningOp();
  if (!op || op->getNumOperands() != 2)
    return 1;
  int64_t x = knownMultiple(op->getOperand(0), depth + 1),
          y = knownMultiple(op->getOperand(1), depth + 1);
  if (isa<arith::MulIOp>(op))
    return std::min(kMax, x * y);
  if (isa<arith::AddIOp, arith::SubIOp>(op))
    return std::min(x, y);
  if (isa<arith::ShLIOp>(op) && matchPattern(op->getOperand(1), m_ConstantInt(&c)) &&
      c.getZExtValue() < 20)
    return std::min(kMax, x << c.getZExtValue());
  return 1;
}

/// A register of two 16-bit floats (`lo` in the low half) as an i32, built
/// as a 2-element vector so that two f32 -> bf16/f16 roundings feeding it
/// become one cvt.rn.bf16x2.f32 (cvt.rn.f16x2.f32) on NVPTX.
static Value packHalves(ImplicitLocOpBuilder &b, Value lo, Value hi) {
  Value pair = vector::FromElementsOp::create(
      b, VectorType::get({2}, lo.getType()), ValueRange{lo, hi});
  return LLVM::BitcastOp::create(b, b.getI32Type(), pair);
}

/// mma.sync.m16n8k16 (row.col) on 16-bit operands in shared memory, f32
/// accumulators in registers. Fragments per the PTX ISA, lane = 4 g + q:
///   A (16x16): reg r holds A[g + 8 (r & 1)][2q + 8 (r >> 1) + {0, 1}]
///   B (16x8):  reg r holds B[2q + 8 r + {0, 1}][g]
///   C (16x8):  c[e] = C[g + 8 (e >> 1)][2q + (e & 1)]
/// Two 16-bit elements per 32-bit register, the lower index in the low half.
/// They are loaded with ldmatrix (A: .x4; B, stored row-major: .x2.trans)
/// from plain row-major buffers (16-byte rows: K % 16 and N % 8 hold, and
/// buffers are 16-byte aligned), element by element otherwise.
///
/// int8 operands (`pairs`: mma.sync.m16n8k32.s32.s8.s8) are the same with
/// each 16-bit element a pair of bytes along K: m16n8k32's s8 fragments
/// hold A[g + 8 (r & 1)][4q + 16 (r >> 1) + {0..3}] and B[4q + 16 r +
/// {0..3}][g], which are byte pairs 2q + 8 (r >> 1) + {0, 1} and 2q + 8 r +
/// {0, 1}, and its s32 C fragments are laid out as f32 ones. So the code
/// below runs on pair indices (columns of A and of X = Bᵀ, both K-major:
/// ldmatrix cannot transpose bytes), reading them with ldmatrix at byte
/// addresses (ldmatrixAt); K-major rows of 16-byte multiples only.
struct MmaTiles {
  Value a, bm;
  Type inElt;
  bool plainOperands; // identity-layout, static 16-bit operand buffers
  bool useLdmatrix;
  bool pairs = false; // int8 operands, K counted in byte pairs
  // B given as X = Bᵀ [N, K] row-major (a kiln.trans not materialized,
  // deferTransToTensorCores): its rows are B's columns.
  bool bKMajor = false;
  Value warp, lane, g, q2, r8, rowOff, colOff;

  /// The indices of tile element (r, c) in operand buffer `buf`: rows, or
  /// XOR-swizzled rows (allocXorTile) through tileIndices.
  static SmallVector<Value> at(ImplicitLocOpBuilder &b, Value buf, Value r,
                               Value c) {
    if (isXorBuffer(buf))
      return tileIndices(b, buf, ValueRange{r, c});
    return {r, c};
  }
  /// The 32-bit register of two 16-bit elements buf[r0][c0], buf[r1][c1].
  Value pack(ImplicitLocOpBuilder &b, Value buf, Value r0, Value c0, Value r1,
             Value c1) const {
    auto i32 = b.getI32Type();
    Value lo = arith::ExtUIOp::create(
        b, i32, memref::LoadOp::create(b, buf, at(b, buf, r0, c0)));
    Value hi = arith::ExtUIOp::create(
        b, i32, memref::LoadOp::create(b, buf, at(b, buf, r1, c1)));
    hi = arith::ShLIOp::create(b, hi, arith::ConstantIntOp::create(b, i32, 16));
    return typed(b, arith::OrIOp::create(b, lo, hi));
  }
  /// NVVM types f16 fragments as vector<2xf16>, bf16 ones as i32.
  Value typed(ImplicitLocOpBuilder &b, Value reg) const {
    if (!inElt.isF16())
      return reg;
    return LLVM::BitcastOp::create(b, VectorType::get({2}, b.getF16Type()),
                                   reg);
  }
  /// ldmatrix.xN at this lane's row address (rowU + rowL, colU + colL):
  /// N registers. The U parts are the same in the whole warp (a tile's
  /// base, a k step: multiples of 8; known multiples of `rowStep` and
  /// `colStep`), the L parts this lane's row and column inside the
  /// matrices it names (colL 0 or 8; null is 0).
  SmallVector<Value> ldmatrix(ImplicitLocOpBuilder &b, Value buf, Value rowU,
                              int64_t rowStep, Value rowL, Value colU,
                              int64_t colStep, Value colL, int64_t n,
                              bool trans) const {
    if (isXorBuffer(buf))
      return ldmatrixXor(b, buf, rowU, rowStep, rowL, colU, colStep, colL, n,
                         trans);
    Type elt = cast<MemRefType>(buf.getType()).getElementType();
    Value row = arithAdd(b, rowU, rowL);
    Value col = colL ? arithAdd(b, colU, colL) : colU;
    // (Byte pair c of an int8 row is its bytes 2c, 2c + 1: four bytes per
    // register.)
    if (pairs)
      col = arith::MulIOp::create(b, col, cIdx(b, 2));
    Value m = nvgpu::LdMatrixOp::create(
        b, VectorType::get({n, pairs ? 4 : 2}, elt), buf, ValueRange{row, col},
        trans, n);
    SmallVector<Value> regs;
    for (int64_t i = 0; i < n; ++i) {
      Value pair = vector::ExtractOp::create(b, m, ArrayRef<int64_t>{i});
      regs.push_back(typed(b, LLVM::BitcastOp::create(b, b.getI32Type(), pair)));
    }
    return regs;
  }
  /// ldmatrix.xN from XOR-swizzled rows (allocXorTile: the buffer starts
  /// on 128 bytes, its rows are whole 128-byte lines, and the 16-byte chunk
  /// c / 8 % 8 of row r sits at chunk (c / 8 % 8) ^ (r % 8) of its line):
  /// the address in plain rows of the same pitch with its bits 4-6 XORed
  /// with r % 8. Where the warp's column part is a multiple of 16 (or the
  /// lane adds none) and its row part a multiple of 8, that is
  ///   ((lane + 16 ((colL / 8) ^ (rowL % 8))) ^ 16 (colU / 8 % 8))
  ///     + 2 pitch rowU + 128 (colU / 64),
  /// lane = base + 2 pitch rowL: one xor per fragment load by a k step's
  /// constant, the rest folding into the instruction's offset as for plain
  /// rows. (Swizzled indices into the rank-4 view would be loop-invariant
  /// offsets per k step, which LLVM hoists and keeps live across the loop:
  /// 15 registers more in the head-dim-128 attention.)
  SmallVector<Value> ldmatrixXor(ImplicitLocOpBuilder &b, Value buf,
                                 Value rowU, int64_t rowStep, Value rowL,
                                 Value colU, int64_t colStep, Value colL,
                                 int64_t n, bool trans) const {
    // (pitch in 16-bit elements, 8 per 16-byte chunk; an int8 buffer's
    // columns here are byte pairs, `pairs`, so the same.)
    auto t = cast<MemRefType>(buf.getType());
    int64_t pitch = t.getDimSize(2) * 8;
    auto mul = [&](Value v, int64_t c) -> Value {
      return arith::MulIOp::create(b, v, cIdx(b, c));
    };
    auto chunkOf = [&](Value col) -> Value { // 16 * (col / 8 % 8)
      return arith::AndIOp::create(b, mul(col, 2), cIdx(b, 0x70));
    };
    Value base = byteAddress(b, buf);
    Value addr;
    if (rowStep % 8 == 0 && (!colL || colStep % 16 == 0)) {
      Value rowChunk = arith::AndIOp::create(b, rowL, cIdx(b, 7));
      if (colL)
        rowChunk = arith::XOrIOp::create(
            b, rowChunk, arith::DivUIOp::create(b, colL, cIdx(b, 8)));
      Value lane = arithAdd(b, arithAdd(b, base, mul(rowL, 2 * pitch)),
                            mul(rowChunk, 16));
      addr = arith::XOrIOp::create(b, lane, chunkOf(colU));
      addr = arithAdd(
          b, addr,
          arithAdd(b, mul(rowU, 2 * pitch),
                   mul(arith::DivUIOp::create(b, colU, cIdx(b, 64)), 128)));
    } else {
      Value row = arithAdd(b, rowU, rowL);
      Value col = colL ? arithAdd(b, colU, colL) : colU;
      Value plain = arithAdd(b, base, mul(arithAdd(b, mul(row, pitch), col), 2));
      addr = arith::XOrIOp::create(
          b, plain, mul(arith::AndIOp::create(b, row, cIdx(b, 7)), 16));
    }
    return ldmatrixAt(b, addr, n, trans);
  }
  /// ldmatrix.xN (of 16-bit elements, .trans with `trans`) at this lane's
  /// row address `addr` (a shared-memory byte address): N registers.
  SmallVector<Value> ldmatrixAt(ImplicitLocOpBuilder &b, Value addr, int64_t n,
                                bool trans) const {
    MLIRContext *ctx = b.getContext();
    Type i32 = b.getI32Type();
    Type res = n == 1 ? i32
                      : Type(LLVM::LLVMStructType::getLiteral(
                            ctx, SmallVector<Type>(n, i32)));
    Value m = NVVM::LdMatrixOp::create(
        b, res, pointerAt(b, addr, 3), uint32_t(n),
        trans ? NVVM::MMALayout::col : NVVM::MMALayout::row,
        NVVM::LdStMatrixShapeAttr::get(ctx, 8, 8),
        NVVM::LdStMatrixEltType::B16);
    if (n == 1)
      return {typed(b, m)};
    SmallVector<Value> regs;
    for (int64_t i = 0; i < n; ++i)
      regs.push_back(typed(b, LLVM::ExtractValueOp::create(b, m, i)));
    return regs;
  }
  /// The k steps (`k0` below) are multiples of 16: m16n8k16's depth.
  static constexpr int64_t kStep = 16;
  /// The A fragment of rows [row, row + 16), columns [k0, k0 + 16).
  SmallVector<Value> fragA(ImplicitLocOpBuilder &b, Value row, Value k0) const {
    if (useLdmatrix)
      // Lane l names row l % 8 of matrix l / 8: (rows +0/+8) x (k +0/+8).
      return ldmatrix(b, a, row, knownMultiple(row),
                      arith::AddIOp::create(b, r8, rowOff), k0, kStep, colOff,
                      4, false);
    Value r0 = arith::AddIOp::create(b, row, g);
    Value r1 = arith::AddIOp::create(b, r0, cIdx(b, 8));
    Value k = arith::AddIOp::create(b, k0, q2);
    Value k1 = arith::AddIOp::create(b, k, cIdx(b, 1));
    Value k8 = arith::AddIOp::create(b, k, cIdx(b, 8));
    Value k9 = arith::AddIOp::create(b, k, cIdx(b, 9));
    return {pack(b, a, r0, k, r0, k1), pack(b, a, r1, k, r1, k1),
            pack(b, a, r0, k8, r0, k9), pack(b, a, r1, k8, r1, k9)};
  }
  /// The B fragment of rows [k0, k0 + 16), columns [col, col + 8).
  SmallVector<Value> fragB(ImplicitLocOpBuilder &b, Value k0, Value col) const {
    if (bKMajor) {
      // Register r holds B[2q + 8r + {0, 1}][g] = X[g][2q + 8r + {0, 1}]:
      // X's 8x8 matrices (col, k0) and (col, k0 + 8), untransposed.
      if (useLdmatrix)
        return ldmatrix(b, bm, col, knownMultiple(col), r8, k0, kStep, rowOff,
                        2, false);
      Value c = arithAdd(b, col, g);
      Value k = arithAdd(b, k0, q2);
      return {pack(b, bm, c, k, c, arithAdd(b, k, cIdx(b, 1))),
              pack(b, bm, c, arithAdd(b, k, cIdx(b, 8)), c,
                   arithAdd(b, k, cIdx(b, 9)))};
    }
    if (useLdmatrix)
      // Lanes 0-15 name the rows of k +0 and k +8 (transposed on load).
      return ldmatrix(b, bm, k0, kStep, arith::AddIOp::create(b, r8, rowOff),
                      col, knownMultiple(col), Value(), 2, true);
    Value c = arith::AddIOp::create(b, col, g);
    Value k = arith::AddIOp::create(b, k0, q2);
    Value k1 = arith::AddIOp::create(b, k, cIdx(b, 1));
    Value k8 = arith::AddIOp::create(b, k, cIdx(b, 8));
    Value k9 = arith::AddIOp::create(b, k, cIdx(b, 9));
    return {pack(b, bm, k, c, k1, c), pack(b, bm, k8, c, k9, c)};
  }
  /// The B fragments of rows [k0, k0 + 16) for the column tiles `cols`,
  /// which a warp tiling makes consecutive (cols[j + 1] = cols[j] + 8): with
  /// ldmatrix, two tiles per `.x4` (lanes 16-31 name the second tile's
  /// matrices, the colOff of A's `.x4`), else one fragB each.
  SmallVector<SmallVector<Value>> fragBs(ImplicitLocOpBuilder &b, Value k0,
                                         ArrayRef<Value> cols) const {
    SmallVector<SmallVector<Value>> out;
    size_t j = 0;
    if (useLdmatrix)
      for (; j + 1 < cols.size(); j += 2) {
        SmallVector<Value> r =
            bKMajor
                // X [N, K]: matrices (col, k0), (col, k0 + 8), (col + 8, k0),
                // (col + 8, k0 + 8), untransposed.
                ? ldmatrix(b, bm, cols[j], knownMultiple(cols[j]),
                           arithAdd(b, r8, colOff), k0, kStep, rowOff, 4, false)
                // B [K, N]: (k0, col), (k0 + 8, col), (k0, col + 8),
                // (k0 + 8, col + 8), transposed on load.
                : ldmatrix(b, bm, k0, kStep, arithAdd(b, r8, rowOff), cols[j],
                           knownMultiple(cols[j]), colOff, 4, true);
        out.push_back({r[0], r[1]});
        out.push_back({r[2], r[3]});
      }
    for (; j < cols.size(); ++j)
      out.push_back(fragB(b, k0, cols[j]));
    return out;
  }
  SmallVector<Value> mma(ImplicitLocOpBuilder &b, ArrayRef<Value> aRegs,
                         ArrayRef<Value> bRegs, ValueRange acc) const {
    // (s8: s32 accumulators, sums wrapping as the hardware's without
    // .satfinite.)
    Type accElt = pairs ? Type(b.getI32Type()) : Type(b.getF32Type());
    auto resType = LLVM::LLVMStructType::getLiteral(
        b.getContext(), SmallVector<Type>(4, accElt));
    auto type = inElt.isBF16() ? NVVM::MMATypes::bf16 : NVVM::MMATypes::f16;
    if (pairs)
      type = NVVM::MMATypes::s8;
    Value r = NVVM::MmaOp::create(
        b, resType, aRegs, bRegs, acc,
        /*shape=*/{16, 8, pairs ? 32 : 16},
        /*b1Op=*/std::nullopt,
        /*intOverflow=*/pairs ? std::optional(NVVM::MMAIntOverflow::wrapped)
                              : std::nullopt,
        /*multiplicandPtxTypes=*/std::array<NVVM::MMATypes, 2>{type, type},
        /*multiplicandLayouts=*/
        std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row,
                                       NVVM::MMALayout::col});
    SmallVector<Value> d;
    for (int64_t i = 0; i < 4; ++i)
      d.push_back(LLVM::ExtractValueOp::create(b, r, i));
    return d;
  }
  /// Element e of this lane's C fragment of tile (row, col).
  std::array<Value, 2> cIndex(ImplicitLocOpBuilder &b, Value row, Value col,
                              int64_t e) const {
    return {arith::AddIOp::create(
                b, row, arith::AddIOp::create(b, g, cIdx(b, 8 * (e >> 1)))),
            arith::AddIOp::create(
                b, col, arith::AddIOp::create(b, q2, cIdx(b, e & 1)))};
  }
  /// This lane's accumulators of the tiles rows x cols (row-major pairs, 4
  /// each) from/to a buffer.
  SmallVector<Value> loadAcc(ImplicitLocOpBuilder &b, ArrayRef<Value> rows,
                             ArrayRef<Value> cols, Value buf) const {
    SmallVector<Value> regs;
    for (Value r : rows)
      for (Value c : cols)
        for (int64_t e = 0; e < 4; ++e) {
          auto [i, j] = cIndex(b, r, c, e);
          regs.push_back(memref::LoadOp::create(b, buf, ValueRange{i, j}));
        }
    return regs;
  }
  void storeAcc(ImplicitLocOpBuilder &b, ArrayRef<Value> rows,
                ArrayRef<Value> cols, ValueRange regs, Value buf) const {
    size_t n = 0;
    for (Value r : rows)
      for (Value c : cols)
        for (int64_t e = 0; e < 4; ++e) {
          auto [i, j] = cIndex(b, r, c, e);
          memref::StoreOp::create(b, regs[n++], buf, ValueRange{i, j});
        }
  }
  /// The K loop: per 16-deep step, one A fragment per row tile and one B
  /// fragment per column tile, then every pair's mma.sync.
  /// The accumulators after the k steps of a K-deep dot: a loop over the
  /// steps, or (operands in XOR-swizzled rows, at most kUnrolledSteps
  /// steps) the steps one after the other. LLVM unrolls such loops itself
  /// when each step's fragment addresses are the previous ones plus a
  /// constant (plain or padded rows); a swizzled address takes a few more
  /// integer operations, which tipped DSA's 36-step score loop into staying
  /// a loop (a wait for each step's fragments), so those are unrolled here,
  /// where the steps' XORs fold to constants.
  SmallVector<Value> run(ImplicitLocOpBuilder &b, ArrayRef<Value> rows,
                         ArrayRef<Value> cols, int64_t K,
                         ValueRange cInit) const {
    if (pairs)
      K /= 2; // (k steps of 16 byte pairs: m16n8k32)
    auto step = [&](ImplicitLocOpBuilder &lb, Value k0, ValueRange acc) {
      SmallVector<SmallVector<Value>> aFr;
      for (Value r : rows)
        aFr.push_back(fragA(lb, r, k0));
      SmallVector<SmallVector<Value>> bFr = fragBs(lb, k0, cols);
      SmallVector<Value> next;
      for (size_t i = 0; i < rows.size(); ++i)
        for (size_t j = 0; j < cols.size(); ++j)
          llvm::append_range(next,
                             mma(lb, aFr[i], bFr[j],
                                 acc.slice((i * cols.size() + j) * 4, 4)));
      return next;
    };
    constexpr int64_t kUnrolledSteps = 64;
    if ((isXorBuffer(a) || isXorBuffer(bm)) && K / kStep <= kUnrolledSteps) {
      SmallVector<Value> acc(cInit);
      for (int64_t k0 = 0; k0 < K; k0 += kStep)
        acc = step(b, cIdx(b, k0), acc);
      return acc;
    }
    auto loop = scf::ForOp::create(
        b, cIdx(b, 0), cIdx(b, K), cIdx(b, kStep), cInit,
        [&](OpBuilder &kb, Location kl, Value k0, ValueRange acc) {
          ImplicitLocOpBuilder lb(kl, kb);
          scf::YieldOp::create(lb, step(lb, k0, acc));
        });
    return SmallVector<Value>(loop.getResults());
  }
};

/// Which warp owns which 16x8 output tiles of a tensor-core dot, each warp
/// keeping TM x TN of them in registers (at most 128 f32 per thread).
///  - mma.sync: the warps form a WM x WN grid; warp w at (w / WN, w % WN)
///    owns row tiles [wm TM, (wm + 1) TM) and column tiles [wn TN, ...).
///  - wgmma (sm_90a): the warpgroups (4 warps) form a grid with WN columns;
///    warpgroup g at (g / WN, g % WN) owns TM blocks of 64 rows and TN * 8
///    columns, and warp i of it rows 16 i to 16 i + 15 of each block: the
///    register layout of wgmma.m64nNk16's accumulators, which per warp is
///    that of TN mma.sync C fragments side by side.
/// The tiling fixes the register layout; the instruction is chosen per dot
/// (mma.sync also computes a wgmma tiling, when operands do not fit wgmma).
struct WarpTiling {
  int64_t WN, TM, TN;
  bool wgmma = false;
};

/// The tile `v` is a load used once, by `user`.
static bool loadOnlyFor(Value v, Operation *user) {
  return v.getDefiningOp<LoadOp>() && v.hasOneUse() &&
         *v.getUsers().begin() == user;
}

/// `v` is a transpose [1, 0] used once.
static TransOp onlyTranspose(Value v) {
  auto tr = v.getDefiningOp<TransOp>();
  return tr && tr.getOrder() == ArrayRef<int32_t>{1, 0} && v.hasOneUse()
             ? tr
             : TransOp();
}

/// Whether a dot reads both operands K-major from loads laid out for it: A
/// a load only the dot reads, B the transpose [1, 0] of a load ([N, K]
/// rows) only that transpose reads, or of the transposed copy of an
/// N-major load (transposeNMajorBytes). What 8-bit tensor-core operands
/// (fp8, s8) need: neither their wgmma forms nor ldmatrix transpose bytes.
static bool kMajorLoads(DotOp dot) {
  TransOp tr = onlyTranspose(dot.getRhs());
  if (!loadOnlyFor(dot.getLhs(), dot) || !tr)
    return false;
  if (loadOnlyFor(tr.getSrc(), tr))
    return true;
  TransOp copy = onlyTranspose(tr.getSrc());
  return copy && loadOnlyFor(copy.getSrc(), copy);
}

static std::optional<WarpTiling> planWgmmaTiling(int64_t M, int64_t N,
                                                 int64_t warps);

static bool isTensorCoreDot(const SimtConfig &simt, DotOp op) {
  auto lhsType = op.getLhs().getType();
  auto accType = op.getAcc().getType();
  int64_t M = lhsType.getDimSize(0), K = lhsType.getDimSize(1),
          N = accType.getDimSize(1);
  Type inElt = lhsType.getElementType();
  // An empty dot (K = 0: the accumulator; M or N = 0: nothing) is no
  // tensor-core dot: 0 passed the multiple-of-16 tests, and the operand
  // layouts divided by a zero dimension (SIGFPE in the compiler).
  if (M == 0 || N == 0 || K == 0)
    return false;
  // (An fp8 dot still here runs on wgmma's e4m3 / e5m2 forms: expandFp8Dots
  // decoded the others.)
  if (op.isFp8())
    return simt.wgmma && M % 64 == 0 && N % 8 == 0 && K % 32 == 0 &&
           simt.numThreads % 128 == 0;
  // i8 x i8 -> i32 on wgmma's s8 form (sm_90a) or mma.sync.m16n8k32.s8
  // (read by ldmatrix as byte pairs, MmaTiles::pairs), which like fp8's
  // wgmma read both operands K-major where they land: A a load only the dot
  // reads, B the transpose of a load only that transpose reads. Others run
  // as FMA chains.
  if (inElt.isSignlessInteger(8)) {
    if (K % 32 || !kMajorLoads(op))
      return false;
    if (simt.wgmma && simt.asyncCopy && M % 64 == 0 && N % 8 == 0 &&
        simt.numThreads % 128 == 0 &&
        planWgmmaTiling(M, N, simt.numThreads / 32))
      return true;
    return simt.tensorCores && simt.ldmatrix && M % 16 == 0 && N % 8 == 0 &&
           simt.numThreads % 32 == 0;
  }
  return simt.tensorCores && (inElt.isBF16() || inElt.isF16()) &&
         accType.getElementType().isF32() && M % 16 == 0 && N % 8 == 0 &&
         K % 16 == 0 && simt.numThreads % 32 == 0;
}

static std::optional<WarpTiling> planWarpTiling(int64_t M, int64_t N,
                                                int64_t warps) {
  int64_t tilesM = M / 16, tilesN = N / 8, bestCost = INT64_MAX;
  std::optional<WarpTiling> best;
  for (int64_t wm = 1; wm <= warps; ++wm) {
    int64_t wn = warps / wm;
    if (warps % wm || tilesM % wm || tilesN % wn)
      continue;
    int64_t tm = tilesM / wm, tn = tilesN / wn;
    if (tm * tn * 4 > 128)
      continue;
    int64_t cost = 4 * tm + 2 * tn;
    if (cost < bestCost) {
      bestCost = cost;
      best = WarpTiling{wn, tm, tn};
    }
  }
  return best;
}

/// The wgmma tiling: warpgroups over (M / 64) x N, each issuing
/// m64nNk16 with N = TN * 8 <= 256, fewest shared-memory bytes read per
/// 16-deep step (TM (64 + N) 16 per warpgroup), at most 128 accumulators.
static std::optional<WarpTiling> planWgmmaTiling(int64_t M, int64_t N,
                                                 int64_t warps) {
  if (warps % 4 || M % 64 || N % 8)
    return std::nullopt;
  int64_t groups = warps / 4, blocksM = M / 64, bestCost = INT64_MAX;
  std::optional<WarpTiling> best;
  for (int64_t gm = 1; gm <= groups; ++gm) {
    int64_t gn = groups / gm;
    if (groups % gm || blocksM % gm || N % (8 * gn))
      continue;
    int64_t tm = blocksM / gm, n = N / gn;
    if (n > 256 || tm * n / 2 > 128)
      continue;
    int64_t cost = tm * (64 + n);
    if (cost < bestCost) {
      bestCost = cost;
      best = WarpTiling{gn, tm, n / 8, /*wgmma=*/true};
    }
  }
  return best;
}

/// mma.sync with whole rows per warp (WN = 1): warp w owns row tiles
/// [w TM, (w + 1) TM) and every column, as a warpgroup's warps do under
/// wgmma; at most 128 accumulators per thread.
static std::optional<WarpTiling> planRowTiling(int64_t M, int64_t N,
                                               int64_t warps) {
  int64_t tilesM = M / 16, tilesN = N / 8;
  if (tilesM % warps || (tilesM / warps) * tilesN * 4 > 128)
    return std::nullopt;
  return WarpTiling{1, tilesM / warps, tilesN};
}

/// The tiling of a tensor-core dot's accumulators (see WarpTiling): wgmma's
/// where it applies; for mma.sync, whole rows per warp for the dots
/// planRowDots picked (their results stay in registers), else the warp
/// grid that reads the fewest operand bytes.
static std::optional<WarpTiling> planDotTiling(const SimtConfig &simt,
                                               DotOp dot) {
  int64_t M = dot.getLhs().getType().getDimSize(0),
          N = dot.getAcc().getType().getDimSize(1);
  int64_t warps = simt.numThreads / 32;
  // (wgmma reads 8-bit operands, fp8 or s8, only in place: in the core
  // matrices that loads by cp.async or TMA write, allocLoadTile.)
  bool eightBit = dot.getLhs().getType().getElementType().isSignlessInteger(8);
  if (simt.wgmma && (simt.asyncCopy || !eightBit))
    if (auto wt = planWgmmaTiling(M, N, warps))
      return wt;
  if (simt.rowDots.count(dot))
    if (auto wt = planRowTiling(M, N, warps))
      return wt;
  return planWarpTiling(M, N, warps);
}

static Value rowBroadcastSource(Value v);

/// Whether a dot's result goes, through elementwise ops (and an scf.if's
/// yield, to its result), into a row reduction or another dot's A, or its
/// accumulator is rescaled per row: flash attention's scores and P·V.
static bool wantsRows(DotOp dot) {
  if (auto mul = dot.getAcc().getDefiningOp<arith::MulFOp>())
    if (rowBroadcastSource(mul.getLhs()) || rowBroadcastSource(mul.getRhs()))
      return true;
  SmallVector<Value> work{dot.getResult()};
  DenseSet<Value> seen;
  auto shape = dot.getResult().getType().getShape();
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    for (Operation *user : v.getUsers()) {
      if (auto red = dyn_cast<ReduceOp>(user)) {
        if (red.getAxis() == 1)
          return true;
      } else if (auto d2 = dyn_cast<DotOp>(user)) {
        if (d2.getLhs() == v)
          return true;
      } else if (isa<scf::YieldOp>(user) && isa<scf::IfOp>(user->getParentOp())) {
        // Through a branch: the if's result (a mask under a runtime
        // condition, block_sparse_attention's one_loop).
        for (OpOperand &use : v.getUses())
          if (use.getOwner() == user)
            work.push_back(user->getParentOp()->getResult(use.getOperandNumber()));
      } else if (user->hasTrait<OpTrait::Elementwise>() &&
                 user->getNumResults() == 1) {
        auto t = dyn_cast<RankedTensorType>(user->getResult(0).getType());
        if (t && t.getShape() == shape)
          work.push_back(user->getResult(0));
      }
    }
  }
  return false;
}

/// An fp8 tile's bits (i8) as bfloat16 values, exactly: the front end's
/// chain (frontend.py, fp8_dot_operand), one use of each result, which the
/// GPU lowering fuses into the write of the tensor-core operand. e4m3
/// S.EEEE.MMM -> S.000EEEE.MMM0000, a bfloat16 of 2^-120 times the value,
/// scaled by 2^120, NaN (S.1111.111) selected; e5m2 is a float16's top byte.
static Value decodeFp8(OpBuilder &b, Location loc, Value raw, StringRef fmt) {
  auto type = cast<RankedTensorType>(raw.getType());
  auto as = [&](Type e) { return RankedTensorType::get(type.getShape(), e); };
  Type i8 = b.getI8Type(), i16 = b.getI16Type(), bf16 = b.getBF16Type();
  // (Scalars splatted with kiln.splat, as the front end writes them: the
  // lowering keeps those in registers, where a dense tensor constant would
  // take a buffer of its own.)
  auto splat = [&](Type e, Attribute a) -> Value {
    Value c = arith::ConstantOp::create(b, loc, cast<TypedAttr>(a));
    return SplatOp::create(b, loc, as(e), c);
  };
  auto intSplat = [&](Type e, int64_t v) {
    return splat(e, b.getIntegerAttr(e, v));
  };
  Value wide = arith::ExtSIOp::create(b, loc, as(i16), raw);
  if (fmt == "e5m2") {
    Value h = arith::BitcastOp::create(
        b, loc, as(b.getF16Type()),
        arith::ShLIOp::create(b, loc, wide, intSplat(i16, 8)));
    // (Exact: every e5m2 value, infinities and NaN too, is a bfloat16.)
    return arith::TruncFOp::create(
        b, loc, as(bf16), arith::ExtFOp::create(b, loc, as(b.getF32Type()), h));
  }
  Value bits = arith::AndIOp::create(
      b, loc, arith::ShLIOp::create(b, loc, wide, intSplat(i16, 4)),
      intSplat(i16, -0x7801));
  Value v = arith::MulFOp::create(
      b, loc, arith::BitcastOp::create(b, loc, as(bf16), bits),
      splat(bf16, b.getFloatAttr(bf16, std::ldexp(1.0, 120))));
  Value nan = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::eq,
      arith::AndIOp::create(b, loc, raw, intSplat(i8, 0x7F)), intSplat(i8, 0x7F));
  return arith::SelectOp::create(
      b, loc, nan, splat(bf16, b.getFloatAttr(bf16, std::nan(""))), v);
}

/// Whether fp8 dot `dot` can run on wgmma's e4m3 / e5m2 forms in place:
/// sm_90a, a wgmma tiling, A [M, K] a load only it reads and B the
/// transpose of a load ([N, K] rows: K-major, which 8-bit wgmma operands
/// must be), both laid out in core matrices where they land.
static bool nativeFp8Dot(const SimtConfig &simt, DotOp dot) {
  if (!simt.wgmma || !simt.fp8Wgmma || !isTensorCoreDot(simt, dot) ||
      !kMajorLoads(dot))
    return false;
  auto wt = planDotTiling(simt, dot);
  return wt && wt->wgmma;
}

void transposeNMajorBytes(Operation *root, const SimtConfig &simt) {
  SmallVector<DotOp> dots;
  root->walk([&](DotOp d) {
    if (d.getLhs().getType().getElementType().isSignlessInteger(8) &&
        loadOnlyFor(d.getRhs(), d))
      dots.push_back(d);
  });
  for (DotOp d : dots) {
    // B [K, N] -> trans(trans(B)): the inner transpose [N, K] is written in
    // the operand layout by threads (the dot is its only reader, through
    // the outer one), the outer one is deferred to the dot (K-major B).
    OpBuilder b(d);
    Value load = d.getRhs();
    auto type = cast<RankedTensorType>(load.getType());
    auto order = b.getDenseI32ArrayAttr({1, 0});
    auto copy = TransOp::create(
        b, d.getLoc(),
        RankedTensorType::get({type.getDimSize(1), type.getDimSize(0)},
                              type.getElementType()),
        load, order);
    auto back = TransOp::create(b, d.getLoc(), type, copy.getResult(), order);
    d.getRhsMutable().assign(back.getResult());
    // Kept where the dot then runs on tensor cores (natively, for fp8).
    bool keep = d.isFp8() ? nativeFp8Dot(simt, d) : isTensorCoreDot(simt, d);
    if (!keep) {
      d.getRhsMutable().assign(load);
      back.erase();
      copy.erase();
    }
  }
}

void expandFp8Dots(Operation *root, const SimtConfig *simt) {
  SmallVector<DotOp> dots;
  root->walk([&](DotOp d) {
    if (d.isFp8() && !(simt && nativeFp8Dot(*simt, d)))
      dots.push_back(d);
  });
  for (DotOp d : dots) {
    OpBuilder b(d);
    // An operand that is a transpose used only here is decoded before it
    // (the decode is elementwise): the dot then takes the transpose of the
    // decoded tile, which the lowering defers (a K-major B), instead of a
    // transposed copy of the bytes and a decode of that.
    SmallVector<TransOp> dead;
    auto operand = [&](Value v, StringRef fmt) -> Value {
      auto tr = v.getDefiningOp<TransOp>();
      if (!tr || !v.hasOneUse())
        return decodeFp8(b, d.getLoc(), v, fmt);
      Value src = decodeFp8(b, d.getLoc(), tr.getSrc(), fmt);
      auto type = cast<RankedTensorType>(v.getType());
      dead.push_back(tr);
      return TransOp::create(
          b, d.getLoc(),
          RankedTensorType::get(type.getShape(), b.getBF16Type()), src,
          tr.getOrderAttr());
    };
    Value lhs = operand(d.getLhs(), *d.getLhsFp8());
    Value rhs = operand(d.getRhs(), *d.getRhsFp8());
    auto decoded =
        DotOp::create(b, d.getLoc(), d.getType(), lhs, rhs, d.getAcc());
    d.getResult().replaceAllUsesWith(decoded.getResult());
    d.erase();
    for (TransOp tr : dead)
      tr.erase();
  }
}

void planRowDots(SimtConfig &simt, Operation *body) {
  if (!simt.tensorCores || !simt.registerAccumulators || !simt.rowFragments)
    return;
  body->walk([&](DotOp dot) {
    if (isTensorCoreDot(simt, dot) && wantsRows(dot))
      simt.rowDots.insert(dot);
  });
}

/// A row-major (identity-layout), static buffer of 16-bit elements.
static bool isPlain16(Value buf) {
  auto t = cast<MemRefType>(buf.getType());
  return t.getLayout().isIdentity() && t.hasStaticShape() &&
         t.getElementTypeBitWidth() == 16;
}

/// A static rank-2 buffer of 16-bit elements in rows, plain or padded
/// (allocPaddedTile), or a slice of one (deferSliceToTensorCores) whose
/// rows start on 16 bytes, or rows with XOR-swizzled chunks (allocXorTile,
/// rank 4, read through MmaTiles::at): what mma.sync's ldmatrix and
/// element reads take. Or such rows of 8-bit elements (int8 operands, read
/// as byte pairs by ldmatrix only: MmaTiles::pairs), plain or padded.
static bool isLdmatrixRows(Value buf) {
  if (isXorBuffer(buf))
    return true;
  auto t = cast<MemRefType>(buf.getType());
  unsigned bits = t.getElementTypeBitWidth();
  if (t.getRank() != 2 || (bits != 16 && bits != 8))
    return false;
  if ((bits == 16 && isPlain16(buf)) || isPaddedBuffer(buf))
    return true;
  SmallVector<int64_t> strides;
  int64_t offset, chunk = 128 / bits;
  if (!t.hasStaticShape() || failed(t.getStridesAndOffset(strides, offset)))
    return false;
  return strides[1] == 1 && !ShapedType::isDynamic(strides[0]) &&
         !ShapedType::isDynamic(offset) && strides[0] % chunk == 0 &&
         offset % chunk == 0;
}

static MmaTiles mmaTiles(ImplicitLocOpBuilder &b, const SimtConfig &simt,
                         Value a, Value bm, Type inElt) {
  auto plain = isLdmatrixRows;
  MmaTiles mt;
  mt.a = a;
  mt.bm = bm;
  mt.inElt = inElt;
  mt.plainOperands = a && bm && plain(a) && plain(bm);
  mt.useLdmatrix = simt.ldmatrix && mt.plainOperands;
  mt.pairs = inElt.isSignlessInteger(8);
  Value c32 = cIdx(b, 32);
  mt.warp = arith::DivUIOp::create(b, simt.threadId, c32);
  mt.lane = arith::RemUIOp::create(b, simt.threadId, c32);
  mt.g = arith::DivUIOp::create(b, mt.lane, cIdx(b, 4));
  mt.q2 = arith::MulIOp::create(
      b, arith::RemUIOp::create(b, mt.lane, cIdx(b, 4)), cIdx(b, 2));
  mt.r8 = arith::RemUIOp::create(b, mt.lane, cIdx(b, 8));
  Value mi = arith::DivUIOp::create(b, mt.lane, cIdx(b, 8));
  mt.rowOff = arith::MulIOp::create(
      b, arith::RemUIOp::create(b, mi, cIdx(b, 2)), cIdx(b, 8));
  mt.colOff = arith::MulIOp::create(
      b, arith::DivUIOp::create(b, mi, cIdx(b, 2)), cIdx(b, 8));
  return mt;
}

/// This warp's tile row and column bases under a warp tiling.
static std::pair<SmallVector<Value>, SmallVector<Value>>
warpTileBases(ImplicitLocOpBuilder &b, const MmaTiles &mt,
              const WarpTiling &wt) {
  Value unit = wt.wgmma ? arith::DivUIOp::create(b, mt.warp, cIdx(b, 4))
                        : mt.warp;
  Value wm = arith::DivUIOp::create(b, unit, cIdx(b, wt.WN));
  Value wn = arith::RemUIOp::create(b, unit, cIdx(b, wt.WN));
  SmallVector<Value> rows, cols;
  for (int64_t i = 0; i < wt.TM; ++i) {
    Value tile =
        arith::AddIOp::create(b, arith::MulIOp::create(b, wm, cIdx(b, wt.TM)),
                              cIdx(b, i));
    if (!wt.wgmma) {
      rows.push_back(arith::MulIOp::create(b, tile, cIdx(b, 16)));
      continue;
    }
    // Block of 64 rows; this warp's 16 of them.
    Value inGroup = arith::RemUIOp::create(b, mt.warp, cIdx(b, 4));
    rows.push_back(arith::AddIOp::create(
        b, arith::MulIOp::create(b, tile, cIdx(b, 64)),
        arith::MulIOp::create(b, inGroup, cIdx(b, 16))));
  }
  for (int64_t j = 0; j < wt.TN; ++j)
    cols.push_back(arith::MulIOp::create(
        b, arith::AddIOp::create(b, arith::MulIOp::create(b, wn, cIdx(b, wt.TN)),
                                 cIdx(b, j)),
        cIdx(b, 8)));
  return {rows, cols};
}

/// `v` as broadcast(expand_dims(rowVector [M], 1)) to [M, N]: the row vector.
static Value rowBroadcastSource(Value v) {
  auto bc = v.getDefiningOp<BroadcastOp>();
  if (!bc)
    return Value();
  auto ex = bc.getSrc().getDefiningOp<ExpandDimsOp>();
  if (!ex || ex.getAxis() != 1 || ex.getSrc().getType().getRank() != 1)
    return Value();
  return ex.getSrc();
}

/// The dot an accumulator iter_arg feeds (directly, or through a row
/// rescaling by an arith.mulf), if that is its only use; else null.
static DotOp registerDotOf(BlockArgument arg, Value *rowVector) {
  if (!arg.hasOneUse())
    return DotOp();
  Operation *user = *arg.getUsers().begin();
  Value acc = arg;
  if (auto mul = dyn_cast<arith::MulFOp>(user)) {
    Value other = mul.getLhs() == arg ? mul.getRhs() : mul.getLhs();
    Value rv = rowBroadcastSource(other);
    if (!rv || other == arg || !mul->hasOneUse() ||
        mul->getBlock() != arg.getOwner())
      return DotOp();
    if (rowVector)
      *rowVector = rv;
    acc = mul.getResult();
    user = *mul->getUsers().begin();
  }
  auto dot = dyn_cast<DotOp>(user);
  if (!dot || dot.getAcc() != acc || dot.getLhs() == acc ||
      dot.getRhs() == acc || dot->getBlock() != arg.getOwner())
    return DotOp();
  return dot;
}

bool isWgmmaRowDot(const SimtConfig &simt, DotOp op) {
  if (!isTensorCoreDot(simt, op))
    return false;
  auto wt = planDotTiling(simt, op);
  return wt && wt->wgmma && wt->WN == 1;
}

bool isWgmmaDot(const SimtConfig &simt, DotOp op) {
  if (!isTensorCoreDot(simt, op))
    return false;
  auto wt = planDotTiling(simt, op);
  return wt && wt->wgmma;
}

void KernelLowering::flushDeferredIssue(ImplicitLocOpBuilder &b, bool once) {
  if (!deferredIssue || (!once && b.getInsertionBlock() != deferredBlock))
    return;
  Block &held = deferredIssue->getRegion(0).front();
  b.getInsertionBlock()->getOperations().splice(
      b.getInsertionPoint(), held.getOperations(), held.begin(),
      std::prev(held.end()));
  deferredIssue->erase();
  deferredIssue = nullptr;
  deferredBlock = nullptr;
}

void KernelLowering::retirePendingWgmma(Operation *before) {
  if (!wgmmaPending)
    return;
  ImplicitLocOpBuilder b(before->getLoc(), before);
  NVVM::WgmmaWaitGroupSyncOp::create(b, 0);
  wgmmaPending = false;
}

DotOp KernelLowering::fragmentCarry(scf::ForOp loop, unsigned i) {
  if (!simt || !simt->wgmma || i >= loop.getNumRegionIterArgs())
    return DotOp();
  auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
  auto next = yield.getOperand(i).getDefiningOp<DotOp>();
  auto init = loop.getInitArgs()[i].getDefiningOp<DotOp>();
  BlockArgument arg = loop.getRegionIterArgs()[i];
  if (!next || !init || next->getBlock() != loop.getBody() ||
      !next.getResult().hasOneUse() || !init.getResult().hasOneUse() ||
      !loop.getResult(i).use_empty() || !isTensorCoreDot(*simt, next) ||
      !isTensorCoreDot(*simt, init) || !fragmentTiled(next) ||
      !sameRegisterTiling(init, next) || !fragmentUses(arg, next))
    return DotOp();
  return next;
}

DotOp KernelLowering::elementwiseCarry(scf::ForOp loop, unsigned i) {
  if (!simt || !simt->registerAccumulators || i >= loop.getNumRegionIterArgs())
    return DotOp();
  Block *body = loop.getBody();
  auto yield = cast<scf::YieldOp>(body->getTerminator());
  BlockArgument arg = loop.getRegionIterArgs()[i];
  auto type = dyn_cast<RankedTensorType>(arg.getType());
  Operation *next = yield.getOperand(i).getDefiningOp();
  if (!type || type.getRank() != 2 || !type.getElementType().isF32() ||
      !next || next->getBlock() != body || next->getNumResults() != 1 ||
      next->getResult(0).getType() != type ||
      !next->getResult(0).hasOneUse() ||
      next->getNumRegions() != 0 ||
      !next->hasTrait<OpTrait::Elementwise>() ||
      !llvm::is_contained(next->getOperands(), Value(arg)))
    return DotOp();
  // The one dot whose result the update reads, through elementwise ops of
  // the body (each used once: they are fused into `next`) and the
  // broadcasts of row or column vectors.
  DotOp dot;
  bool ok = true;
  std::function<void(Value)> visit = [&](Value v) {
    if (!ok || v == arg || !isa<RankedTensorType>(v.getType()))
      return;
    Operation *def = v.getDefiningOp();
    if (!def) {
      // Another of the loop's tiles: it may be carried in registers of
      // another dot (whose fragments do not mix with this one's).
      if (cast<BlockArgument>(v).getOwner() == body)
        ok = false;
      return;
    }
    if (def->getBlock() != body)
      return; // defined before the loop: a buffer
    if (auto d = dyn_cast<DotOp>(def)) {
      if (dot && dot != d)
        ok = false;
      dot = d;
      return;
    }
    if (isa<BroadcastOp, ExpandDimsOp, SplatOp, ArangeOp>(def))
      return; // read per element (a vector's buffer)
    if (def->getNumRegions() != 0 || !def->hasTrait<OpTrait::Elementwise>() ||
        !v.hasOneUse() || cast<RankedTensorType>(v.getType()) .getShape() !=
                              type.getShape()) {
      ok = false;
      return;
    }
    for (Value o : def->getOperands())
      visit(o);
  };
  for (Value o : next->getOperands())
    visit(o);
  if (!ok || !dot || !dot.getResult().hasOneUse() ||
      dot.getAcc().getType() != type || !isTensorCoreDot(*simt, dot) ||
      !warpTiled(dot) || dot.getAcc() == Value(arg))
    return DotOp();
  // Every reader of the argument is an elementwise op of the body that
  // keeps the dot's fragments (the update itself, or ops fused into it).
  for (Operation *user : arg.getUsers())
    if (user->getBlock() != body || user->getNumRegions() != 0 ||
        !user->hasTrait<OpTrait::Elementwise>())
      return DotOp();
  return dot;
}

DotOp KernelLowering::registerDotOfArg(BlockArgument arg) {
  return registerDotOf(arg, nullptr);
}

SmallVector<unsigned> KernelLowering::registerAccumulators(scf::ForOp loop) {
  SmallVector<unsigned> positions;
  if (!simt || !simt->registerAccumulators)
    return positions;
  auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
  for (auto [i, arg] : llvm::enumerate(loop.getRegionIterArgs())) {
    Value init = loop.getInitArgs()[i];
    DenseElementsAttr splat;
    if (!isa<RankedTensorType>(arg.getType()) ||
        (!buffers.count(init) && !loopRegisters.count(init) &&
         !(matchPattern(init, m_Constant(&splat)) && splat.isSplat())))
      continue;
    Value rowVector;
    DotOp dot = registerDotOf(arg, &rowVector);
    if (!dot || !dot.getResult().hasOneUse() ||
        yield.getOperand(i) != dot.getResult() || !isTensorCoreDot(*simt, dot))
      continue;
    if (!planDotTiling(*simt, dot))
      continue;
    if (rowVector)
      registerRowScales[*arg.getUsers().begin()] = rowVector;
    positions.push_back(i);
  }
  return positions;
}

/// A GEMM loop's dot can leave its wgmma groups in flight at the end of an
/// iteration (`wgmma.wait_group 1`: the next iteration's groups are issued
/// while they run) when nothing but the next iteration's dot reads its
/// accumulators and nothing overwrites its operands before they are
/// retired: it is the loop's only dot, on wgmma (sm_90a), its accumulator a
/// plain register loop-carried tile (no row rescale; see
/// registerAccumulators), and both operands pipelined loads of this loop
/// laid out in place for wgmma (B possibly through a deferred transpose).
/// That takes a stage: the distance becomes S - 2, so S >= 3.
DotOp KernelLowering::inFlightDot(scf::ForOp loop,
                                  const PipelinedLoop &state) {
  if (!simt->wgmma || !simt->registerAccumulators || simt->numStages < 3)
    return DotOp();
  DotOp dot;
  bool several = false;
  loop.getBody()->walk([&](DotOp d) {
    several |= bool(dot);
    dot = d;
  });
  if (!dot || several || dot->getBlock() != loop.getBody() ||
      !isTensorCoreDot(*simt, dot))
    return DotOp();
  auto wt = planDotTiling(*simt, dot);
  if (!wt || !wt->wgmma)
    return DotOp();
  auto arg = dyn_cast<BlockArgument>(dot.getAcc());
  Value rowVector;
  if (!arg || arg.getOwner() != loop.getBody() ||
      registerDotOf(arg, &rowVector) != dot || rowVector ||
      !dot.getResult().hasOneUse() ||
      loop.getBody()->getTerminator()->getOperand(arg.getArgNumber() - 1) !=
          dot.getResult())
    return DotOp();
  auto pipelinedCore = [&](Value v) {
    auto load = v.getDefiningOp<LoadOp>();
    return load && llvm::any_of(state.loads, [&](const PipelinedLoad &pl) {
             return pl.load == load && isCoreBuffer(pl.stages[0]);
           });
  };
  Value rhs = dot.getRhs();
  if (auto tr = rhs.getDefiningOp<TransOp>())
    rhs = tr.getSrc();
  if (!pipelinedCore(dot.getLhs()) || !pipelinedCore(rhs))
    return DotOp();
  return dot;
}

/// The MmaTiles of a warp-tiled dot and this warp's tile bases (`a`, `bm`:
/// its operand buffers, or null when only accumulators move).
static std::tuple<MmaTiles, SmallVector<Value>, SmallVector<Value>>
warpTiledDot(ImplicitLocOpBuilder &b, const SimtConfig &simt, DotOp dot,
             Value a, Value bm) {
  auto lhsType = dot.getLhs().getType();
  MmaTiles mt = mmaTiles(b, simt, a, bm, lhsType.getElementType());
  auto wt = *planDotTiling(simt, dot);
  auto [rows, cols] = warpTileBases(b, mt, wt);
  return {mt, rows, cols};
}

SmallVector<Value> KernelLowering::loadRegisterTile(ImplicitLocOpBuilder &b,
                                                    DotOp dot, Value buf) {
  auto [mt, rows, cols] = warpTiledDot(b, *simt, dot, Value(), Value());
  return mt.loadAcc(b, rows, cols, buf);
}

bool KernelLowering::sameRegisterTiling(DotOp a, DotOp b) {
  auto shape = [](DotOp d) {
    return std::make_pair(d.getLhs().getType().getDimSize(0),
                          d.getAcc().getType().getDimSize(1));
  };
  // The tiling is a function of M, N and (mma.sync) whether the dot takes
  // whole rows per warp (planRowDots).
  auto ta = planDotTiling(*simt, a), tb = planDotTiling(*simt, b);
  return shape(a) == shape(b) && ta && tb && ta->WN == tb->WN && ta->TM == tb->TM &&
         ta->TN == tb->TN && ta->wgmma == tb->wgmma;
}

int64_t KernelLowering::registerTileSize(DotOp dot) {
  auto wt = *planDotTiling(*simt, dot);
  return wt.TM * wt.TN * 4;
}

void KernelLowering::forEachFragment(
    ImplicitLocOpBuilder &b, DotOp dot, ValueRange regs,
    function_ref<void(ImplicitLocOpBuilder &, ValueRange, Value)> fn) {
  auto [mt, rows, cols] = warpTiledDot(b, *simt, dot, Value(), Value());
  llvm::SaveAndRestore<DotOp> rowDot(fragmentRowDot, dot);
  llvm::SaveAndRestore<int64_t> rowSlot(fragmentRowSlot);
  size_t n = 0;
  for (auto [ri, r] : llvm::enumerate(rows))
    for (Value c : cols)
      for (int64_t e = 0; e < 4; ++e) {
        auto [i, j] = mt.cIndex(b, r, c, e);
        fragmentRowSlot = 2 * ri + (e >> 1);
        fn(b, ValueRange{i, j}, regs[n++]);
      }
}

static Value shuffleXor(ImplicitLocOpBuilder &b, Value v, int64_t offset);
/// How a wgmma operand buffer is laid out: K-major ([mn, k]: A, or B
/// through a deferred transpose) or MN-major ([k, mn]: B), in the
/// no-swizzle core layout (coreStrides) or the 128B swizzle
/// (swizzledOffset).
struct OperandLayout {
  bool kMajor, swizzled;
  int64_t mn, k;

  /// The 64-bit matrix descriptor (PTX ISA, "Matrix Descriptor Format") of
  /// the operand at the start of `buf`: start address, leading and stride
  /// byte offsets (each >> 4), the layout type (1: 128B swizzle).
  ///   no swizzle, K-major: k groups mn / 8 * 128 bytes apart (LBO), MN
  ///     groups 128 (SBO); MN-major: k groups 128 apart (LBO), MN groups
  ///     k / 8 * 128 (SBO);
  ///   128B swizzle, K-major: rows of 128 bytes, 8-row groups 1024 apart
  ///     (SBO; LBO unused, 16); MN-major: k rows of 128 bytes, 8-k groups
  ///     1024 apart (SBO), 64-element MN slabs k * 128 apart (LBO).
  Value descriptor(ImplicitLocOpBuilder &b, Value buf) const {
    int64_t lbo, sbo;
    if (swizzled) {
      lbo = kMajor ? 16 : k * 128;
      sbo = 1024;
    } else {
      lbo = kMajor ? mn / 8 * 128 : 128;
      sbo = kMajor ? 128 : k / 8 * 128;
    }
    auto i64 = b.getI64Type();
    auto type = cast<MemRefType>(buf.getType());
    auto meta = memref::ExtractStridedMetadataOp::create(b, buf);
    Value addr = arith::AddIOp::create(
        b, memref::ExtractAlignedPointerAsIndexOp::create(b, buf),
        arith::MulIOp::create(b, meta.getOffset(),
                              cIdx(b, type.getElementTypeBitWidth() / 8)));
    Value a = arith::IndexCastOp::create(b, i64, addr);
    auto c64 = [&](int64_t v) {
      return arith::ConstantIntOp::create(b, i64, v);
    };
    Value start = arith::ShRUIOp::create(
        b, arith::AndIOp::create(b, a, c64(0x3FFFF)), c64(4));
    return arith::OrIOp::create(
        b, start,
        c64((lbo >> 4) << 16 | (sbo >> 4) << 32 |
            (swizzled ? int64_t(1) << 62 : 0)));
  }

  /// What to add to the descriptor (16-byte units, i64) for the operand's
  /// 8-row MN group `group` (an index, MN / 8) and k step at `k0` (a
  /// multiple of 16): no swizzle, the core matrix's offset; swizzled, the
  /// row group's (K-major: and the 64-column slab's, plus 32 bytes per
  /// k step inside it, which the hardware swizzles with the rest) or the
  /// k rows' and the MN slab's (MN-major).
  Value units(ImplicitLocOpBuilder &b, Value group, Value k0) const {
    auto mul = [&](Value x, int64_t c) {
      return arith::MulIOp::create(b, x, cIdx(b, c)).getResult();
    };
    auto div = [&](Value x, int64_t c) {
      return arith::DivUIOp::create(b, x, cIdx(b, c)).getResult();
    };
    auto add = [&](Value x, Value y) {
      return arith::AddIOp::create(b, x, y).getResult();
    };
    Value u;
    if (!swizzled)
      u = kMajor ? mul(add(mul(div(k0, 8), mn / 8), group), 8)
                 : mul(add(mul(group, k / 8), div(k0, 8)), 8);
    else if (kMajor)
      u = add(add(mul(group, 64), mul(div(k0, 64), mn * 8)),
              div(arith::RemUIOp::create(b, k0, cIdx(b, 64)), 8));
    else
      u = add(mul(div(group, 8), k * 8), mul(k0, 8));
    return arith::IndexCastOp::create(b, b.getI64Type(), u);
  }
};


void KernelLowering::materializeFragments(Value v, Operation *user) {
  auto [dot, regs] = fragmentResults.lookup(v);
  fragmentResults.erase(v);
  ImplicitLocOpBuilder b(user->getLoc(), user);
  Value buf = buffers.lookup(v);
  if (!buf) {
    // Fragments carried by a loop (lowerFor) have no buffer of their own.
    buf = allocTile(cast<RankedTensorType>(v.getType()), user->getLoc());
    buffers[v] = buf;
  }
  forEachFragment(b, dot, regs,
                  [&](ImplicitLocOpBuilder &ib, ValueRange idx, Value e) {
                    storeElems(ib, e, buf, idx, 1);
                  });
  if (isCoreBuffer(buf))
    asyncProxyFence(b);
  barrier(b);
}

bool KernelLowering::registerOperandA(DotOp producer, DotOp consumer) {
  if (!fragmentTiled(producer) || !fragmentTiled(consumer) ||
      !isTensorCoreDot(*simt, consumer))
    return false;
  int64_t M = producer.getLhs().getType().getDimSize(0);
  auto p = *planDotTiling(*simt, producer);
  auto c = *planDotTiling(*simt, consumer);
  // Each warpgroup holds whole rows of the producer's result (all of the
  // consumer's K) and computes whole rows of the consumer's, the same ones.
  return consumer.getLhs().getType().getDimSize(0) == M && p.WN == 1 &&
         p.wgmma == c.wgmma &&
         c.WN == 1 && p.TM == c.TM &&
         consumer.getLhs().getType().getDimSize(1) ==
             producer.getAcc().getType().getDimSize(1);
}

SmallVector<Value> KernelLowering::runRegisterADot(
    ImplicitLocOpBuilder &b, DotOp op, const MmaTiles &mt,
    ArrayRef<Value> rows, ArrayRef<Value> cols, ValueRange acc,
    ArrayRef<Value> aRegs) {
  int64_t K = op.getLhs().getType().getDimSize(1),
          N = op.getAcc().getType().getDimSize(1);
  auto wt = *planDotTiling(*simt, op);
  bool bKMajor = deferredTrans.count(op.getRhs());
  Value bCore = mt.bm;
  if (!isCoreBuffer(bCore)) {
    if (bKMajor || !isPlain16(bCore)) {
      op.emitError("kiln GPU lowering: the B operand of a wgmma with A in "
                   "registers is not a plain buffer");
      return {};
    }
    bCore = coreMatrices(b, mt.bm, K, N, mt.inElt);
    asyncProxyFence(b);
    barrier(b);
  }
  OperandLayout bLayout{bKMajor, swizzledBuffers.count(bCore) > 0, N, K};
  Value descB = bLayout.descriptor(b, bCore);
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  int64_t n = wt.TN * 8, perBlock = n / 2, producerTN = K / 8;
  bool f16 = mt.inElt.isF16();
  // A register of two 16-bit elements, the lower k in the low half.
  auto pack = [&](Value lo, Value hi) { return packHalves(b, lo, hi); };
  std::string type = f16 ? "f16" : "bf16";
  std::string text = "{\n.reg .pred p;\nsetp.ne.b32 p, $" +
                     std::to_string(2 * perBlock + 5) +
                     ", 0;\nwgmma.mma_async.sync.aligned.m64n" +
                     std::to_string(n) + "k16.f32." + type + "." + type + " {";
  std::string constraints;
  for (int64_t e = 0; e < perBlock; ++e) {
    text += (e ? ", $" : "$") + std::to_string(e);
    constraints += "=f,";
  }
  for (int64_t e = 0; e < perBlock; ++e)
    constraints += std::to_string(e) + ",";
  constraints += "r,r,r,r,l,n";
  for (int r = 0; r < 4; ++r)
    text += (r ? ", $" : "}, {$") + std::to_string(2 * perBlock + r);
  text += "}, $" + std::to_string(2 * perBlock + 4) + ", p, 1, 1, " +
          (bKMajor ? "0" : "1") + ";\n}\n";
  auto accType = LLVM::LLVMStructType::getLiteral(
      b.getContext(), SmallVector<Type>(perBlock, f32));

  SmallVector<Value> regs(acc.begin(), acc.end());
  // Every A register is packed before the fence: ptxas otherwise injects a
  // warpgroup.arrive before each wgmma whose registers were just written.
  // The producer's accumulator blocks 2 step and 2 step + 1 (columns
  // 16 step .. 16 step + 15) are k step `step`'s A (MmaTiles::cIndex: e
  // 0, 1 row g, e 2, 3 row g + 8).
  SmallVector<Value> aPacked;
  for (size_t t = 0; t < rows.size(); ++t)
    for (int64_t step = 0; step < K / 16; ++step) {
      auto at = [&](int64_t block, int64_t e) {
        return aRegs[(t * producerTN + block) * 4 + e];
      };
      aPacked.push_back(pack(at(2 * step, 0), at(2 * step, 1)));
      aPacked.push_back(pack(at(2 * step, 2), at(2 * step, 3)));
      aPacked.push_back(pack(at(2 * step + 1, 0), at(2 * step + 1, 1)));
      aPacked.push_back(pack(at(2 * step + 1, 2), at(2 * step + 1, 3)));
    }
  NVVM::WgmmaFenceAlignedOp::create(b);
  Value nGroup = arith::DivUIOp::create(b, cols[0], cIdx(b, 8));
  for (int64_t step = 0; step < K / 16; ++step) {
    Value db = arith::AddIOp::create(
        b, descB, bLayout.units(b, nGroup, cIdx(b, 16 * step)));
    for (size_t t = 0; t < rows.size(); ++t) {
      SmallVector<Value> operands(regs.begin() + t * perBlock,
                                  regs.begin() + (t + 1) * perBlock);
      llvm::append_range(operands, ArrayRef<Value>(aPacked).slice(
                                       (t * (K / 16) + step) * 4, 4));
      operands.push_back(db);
      operands.push_back(arith::ConstantIntOp::create(b, i32, 1));
      auto asmOp = LLVM::InlineAsmOp::create(
          b, accType, operands, text, constraints, /*has_side_effects=*/true,
          /*is_align_stack=*/false, LLVM::tailcallkind::TailCallKind::None,
          LLVM::AsmDialectAttr(), ArrayAttr());
      // What the emulator reads (kiln-emulate-gpu): N, f16, N-major B.
      asmOp->setAttr(kWgmmaRsAttr,
                     b.getDenseI64ArrayAttr({n, f16 ? 1 : 0, bKMajor ? 0 : 1}));
      for (int64_t e = 0; e < perBlock; ++e)
        regs[t * perBlock + e] = LLVM::ExtractValueOp::create(
            b, asmOp.getResult(0), ArrayRef<int64_t>{e});
    }
  }
  NVVM::WgmmaGroupSyncAlignedOp::create(b);
  flushDeferredIssue(b);
  NVVM::WgmmaWaitGroupSyncOp::create(b, 0);
  wgmmaPending = false;
  return regs;
}

SmallVector<Value> KernelLowering::runRegisterADotSync(
    ImplicitLocOpBuilder &b, DotOp op, ArrayRef<Value> rows,
    ArrayRef<Value> cols, ValueRange acc, ArrayRef<Value> aRegs, Value bBuf) {
  int64_t K = op.getLhs().getType().getDimSize(1);
  Type inElt = op.getLhs().getType().getElementType();
  // Only B is read from shared memory: ldmatrix when it is a plain buffer.
  MmaTiles mt = mmaTiles(b, *simt, Value(), bBuf, inElt);
  mt.useLdmatrix = simt->ldmatrix && isLdmatrixRows(bBuf);
  mt.bKMajor = deferredTrans.count(op.getRhs());
  auto pack = [&](Value lo, Value hi) {
    return mt.typed(b, packHalves(b, lo, hi));
  };
  // The producer's C tiles 2 s and 2 s + 1 (columns 16 s .. 16 s + 15) are
  // k step s's A: C elements 0, 1 (row g) and 2, 3 (row g + 8) of each, in
  // A's register order (rows g, g + 8 at k 2q; then at k 2q + 8).
  int64_t producerTN = K / 8;
  SmallVector<Value> regs(acc.begin(), acc.end());
  for (int64_t step = 0; step < K / 16; ++step) {
    Value k0 = cIdx(b, 16 * step);
    SmallVector<SmallVector<Value>> bFr = mt.fragBs(b, k0, cols);
    for (size_t t = 0; t < rows.size(); ++t) {
      auto at = [&](int64_t block, int64_t e) {
        return aRegs[(t * producerTN + block) * 4 + e];
      };
      SmallVector<Value> aFr = {pack(at(2 * step, 0), at(2 * step, 1)),
                                pack(at(2 * step, 2), at(2 * step, 3)),
                                pack(at(2 * step + 1, 0), at(2 * step + 1, 1)),
                                pack(at(2 * step + 1, 2), at(2 * step + 1, 3))};
      for (size_t j = 0; j < cols.size(); ++j) {
        size_t base = (t * cols.size() + j) * 4;
        auto d = mt.mma(b, aFr, bFr[j], ValueRange(regs).slice(base, 4));
        std::copy(d.begin(), d.end(), regs.begin() + base);
      }
    }
  }
  return regs;
}

bool KernelLowering::fragmentTiled(DotOp dot) {
  auto wt = planDotTiling(*simt, dot);
  return wt && (wt->wgmma || (simt->rowDots.count(dot) && wt->WN == 1));
}

bool KernelLowering::warpTiled(DotOp dot) {
  return planDotTiling(*simt, dot).has_value();
}

bool KernelLowering::rowsInWarps(DotOp dot) {
  auto wt = planDotTiling(*simt, dot);
  return wt && wt->WN == 1;
}

SmallVector<Value> KernelLowering::reduceFragmentRows(ReduceOp op) {
  auto [dot, regs] = fragmentResults.lookup(op.getSrc());
  ImplicitLocOpBuilder b(op.getLoc(), op);
  auto [mt, rows, cols] = warpTiledDot(b, *simt, dot, Value(), Value());
  // Lane 4 g + q holds rows g and g + 8 of each 16-row tile, columns
  // 2 q, 2 q + 1 of each 8-column tile (MmaTiles::cIndex): combine those,
  // then across q (the four lanes of a row). The butterflies leave every
  // lane of the row with the same value (the combiners commute).
  SmallVector<Value> result;
  for (size_t ri = 0; ri < rows.size(); ++ri)
    for (int64_t h = 0; h < 2; ++h) {
      Value acc;
      for (size_t ci = 0; ci < cols.size(); ++ci)
        for (int64_t e = 2 * h; e < 2 * h + 2; ++e) {
          Value v = regs[(ri * cols.size() + ci) * 4 + e];
          acc = acc ? combine(b, op.getKind(), acc, v) : v;
        }
      for (int64_t off : {1, 2})
        acc = combine(b, op.getKind(), acc, shuffleXor(b, acc, off));
      result.push_back(acc);
    }
  return result;
}

bool KernelLowering::sameRows(DotOp a, DotOp b) {
  if (!a || !b || !fragmentTiled(a) || !fragmentTiled(b) || !rowsInWarps(a) ||
      !rowsInWarps(b))
    return false;
  int64_t M = a.getLhs().getType().getDimSize(0);
  auto ta = *planDotTiling(*simt, a);
  auto tb = *planDotTiling(*simt, b);
  // WN = 1: warpgroup (mma.sync: warp) g owns row blocks [g TM, (g + 1) TM)
  // in both.
  return b.getLhs().getType().getDimSize(0) == M && ta.TM == tb.TM &&
         ta.wgmma == tb.wgmma;
}

int64_t KernelLowering::rowSlotCount(DotOp dot) {
  auto wt = *planDotTiling(*simt, dot);
  return 2 * wt.TM;
}

SmallVector<Value> KernelLowering::rowSlots(ImplicitLocOpBuilder &b,
                                            DotOp dot) {
  auto [mt, rows, cols] = warpTiledDot(b, *simt, dot, Value(), Value());
  SmallVector<Value> slots;
  for (Value r : rows)
    for (int64_t h = 0; h < 2; ++h)
      slots.push_back(mt.cIndex(b, r, cols[0], 2 * h)[0]);
  return slots;
}

/// The indices of row `row` in a buffer of `buf`'s rank ([M] or [M, 1]).
static SmallVector<Value> rowIndices(ImplicitLocOpBuilder &b, Value buf,
                                     Value row) {
  SmallVector<Value> idx{row};
  for (int64_t d = 1; d < cast<MemRefType>(buf.getType()).getRank(); ++d)
    idx.push_back(cIdx(b, 0));
  return idx;
}

void KernelLowering::storeRows(ImplicitLocOpBuilder &b, DotOp dot,
                               ArrayRef<Value> regs, Value buf) {
  Value lane = arith::RemUIOp::create(b, simt->threadId, cIdx(b, 32));
  Value first = arith::CmpIOp::create(
      b, arith::CmpIPredicate::eq, arith::RemUIOp::create(b, lane, cIdx(b, 4)),
      cIdx(b, 0));
  auto ifOp = scf::IfOp::create(b, TypeRange{}, first, false);
  ImplicitLocOpBuilder tb(b.getLoc(), ifOp.getThenBodyBuilder());
  for (auto [row, v] : llvm::zip_equal(rowSlots(tb, dot), regs))
    storeElems(tb, v, buf, rowIndices(tb, buf, row), 1);
}

SmallVector<Value> KernelLowering::loadRows(ImplicitLocOpBuilder &b,
                                            DotOp dot, Value buf,
                                            Type elementType) {
  SmallVector<Value> regs;
  for (Value row : rowSlots(b, dot))
    regs.push_back(loadElems(b, buf, rowIndices(b, buf, row), elementType, 1));
  return regs;
}

FailureOr<SmallVector<Value>>
KernelLowering::rowValues(ImplicitLocOpBuilder &b, Value v, DotOp dot,
                          Operation *user, bool &read) {
  if (auto it = rowFragments.find(v);
      it != rowFragments.end() && sameRows(it->second.first, dot))
    return it->second.second;
  auto buf = bufferOf(v, user);
  if (failed(buf))
    return failure();
  read = true;
  return loadRows(b, dot, *buf, getElementTypeOrSelf(v.getType()));
}

void KernelLowering::materializeRows(ImplicitLocOpBuilder &b, Value v) {
  auto [dot, regs] = rowFragments.lookup(v);
  rowFragments.erase(v);
  Value buf = allocTile(cast<RankedTensorType>(v.getType()), b.getLoc());
  storeRows(b, dot, regs, buf);
  barrier(b);
  buffers[v] = buf;
}

void KernelLowering::defineRows(ImplicitLocOpBuilder &b, Value v, DotOp dot,
                                SmallVector<Value> regs) {
  rowFragments[v] = {dot, std::move(regs)};
  Block *home = v.getParentBlock();
  if (llvm::any_of(v.getUsers(),
                   [&](Operation *u) { return u->getBlock() != home; }))
    materializeRows(b, v);
}

std::optional<LogicalResult>
KernelLowering::lowerRowElementwise(Operation *op) {
  if (op->getNumResults() != 1 ||
      cast<RankedTensorType>(op->getResult(0).getType()).getRank() != 1)
    return std::nullopt;
  // The tiles the fused expression reads: row vectors, splat constants
  // (emitElems makes the value), and buffers (read at the lane's rows).
  SmallVector<Value> rowLeaves, bufferLeaves;
  bool mixed = false;
  std::function<void(Value)> walk = [&](Value v) {
    if (!isa<RankedTensorType>(v.getType()))
      return;
    if (auto it = rowFragments.find(v); it != rowFragments.end()) {
      if (!rowLeaves.empty() &&
          !sameRows(rowFragments.lookup(rowLeaves[0]).first, it->second.first))
        mixed = true;
      if (!llvm::is_contained(rowLeaves, v))
        rowLeaves.push_back(v);
      return;
    }
    Operation *def = v.getDefiningOp();
    if (def && deferred.contains(def)) {
      for (Value o : def->getOperands())
        walk(o);
      return;
    }
    DenseElementsAttr dense;
    if (matchPattern(v, m_Constant(&dense)) && dense.isSplat())
      return;
    bufferLeaves.push_back(v);
  };
  for (Value v : op->getOperands())
    walk(v);
  if (rowLeaves.empty() || mixed)
    return std::nullopt;
  DotOp dot = rowFragments.lookup(rowLeaves[0]).first;
  for (Value v : bufferLeaves)
    if (failed(bufferOf(v, op)))
      return failure();
  ImplicitLocOpBuilder b(op->getLoc(), op);
  SmallVector<Value> slots = rowSlots(b, dot), regs;
  for (auto [s, row] : llvm::enumerate(slots)) {
    for (Value leaf : rowLeaves)
      elemOverride[leaf] = rowFragments.lookup(leaf).second[s];
    SmallVector<Value> operands;
    for (Value v : op->getOperands())
      operands.push_back(isa<RankedTensorType>(v.getType())
                             ? emitElems(b, v, ValueRange{row}, 1)
                             : v);
    OperationState state(
        op->getLoc(), op->getName().getStringRef(), operands,
        TypeRange{getElementTypeOrSelf(op->getResult(0).getType())},
        op->getAttrs());
    regs.push_back(b.create(state)->getResult(0));
  }
  for (Value leaf : rowLeaves)
    elemOverride.erase(leaf);
  if (!bufferLeaves.empty())
    unsyncedReads = true; // no barrier follows these reads
  defineRows(b, op->getResult(0), dot, std::move(regs));
  toErase.push_back(op);
  return success();
}

SmallVector<unsigned> KernelLowering::registerRowVectors(scf::ForOp loop,
                                                         DotOp layout) {
  SmallVector<unsigned> positions;
  if (!layout || !sameRows(layout, layout))
    return positions;
  int64_t M = layout.getLhs().getType().getDimSize(0);
  Block *body = loop.getBody();
  for (auto [i, arg] : llvm::enumerate(loop.getRegionIterArgs())) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type || type.getRank() != 1 || type.getDimSize(0) != M ||
        !type.getElementType().isF32() || registerDotOfArg(arg))
      continue;
    if (llvm::any_of(arg.getUsers(),
                     [&](Operation *u) { return u->getBlock() != body; }))
      continue;
    positions.push_back(i);
  }
  return positions;
}

void KernelLowering::storeRegisterTile(ImplicitLocOpBuilder &b, DotOp dot,
                                       ValueRange regs, Value buf) {
  auto [mt, rows, cols] = warpTiledDot(b, *simt, dot, Value(), Value());
  mt.storeAcc(b, rows, cols, regs, buf);
}

LogicalResult KernelLowering::lowerRegisterRowScale(Operation *mulf,
                                                    Value rowVector) {
  auto mul = cast<arith::MulFOp>(mulf);
  auto dot = cast<DotOp>(*mul->getUsers().begin());
  Value acc = registerTiles.count(mul.getLhs()) ? mul.getLhs() : mul.getRhs();
  ImplicitLocOpBuilder b(mulf->getLoc(), mulf);
  // The scale of each row slot: from registers (a row vector of the same
  // rows), else read from its buffer.
  bool read = false;
  auto scales = rowValues(b, rowVector, dot, mulf, read);
  if (failed(scales))
    return failure();
  if (read)
    unsyncedReads = true;
  auto [mt, rowBases, colBases] =
      warpTiledDot(b, *simt, dot, Value(), Value());
  // Each lane's element (i, j, e) sits in row slot 2 i + (e >> 1).
  SmallVector<Value> scaled;
  ArrayRef<Value> regs = registerTiles[acc];
  size_t n = 0;
  for (size_t i = 0; i < rowBases.size(); ++i)
    for (size_t j = 0; j < colBases.size(); ++j)
      for (int64_t e = 0; e < 4; ++e, ++n)
        scaled.push_back(
            arith::MulFOp::create(b, regs[n], (*scales)[2 * i + (e >> 1)]));
  registerTiles[mul.getResult()] = scaled;
  toErase.push_back(mulf);
  return success();
}

LogicalResult KernelLowering::lowerRegisterDot(DotOp op) {
  // A in registers: the fragments of a producer dot's layout.
  SmallVector<Value> aRegs;
  if (auto it = fragmentResults.find(op.getLhs());
      it != fragmentResults.end() && registerOperandA(it->second.first, op))
    aRegs = it->second.second;
  FailureOr<Value> a = Value();
  if (aRegs.empty())
    a = bufferOf(op.getLhs(), op);
  auto bm = bufferOf(op.getRhs(), op);
  if (failed(a) || failed(bm))
    return failure();
  ImplicitLocOpBuilder b(op.getLoc(), op);
  auto [mt, rows, cols] = warpTiledDot(b, *simt, op, *a, *bm);
  SmallVector<Value> regs;
  if (aRegs.empty())
    regs = runTiledDot(b, op, mt, rows, cols, registerTiles.lookup(op.getAcc()));
  else if (planDotTiling(*simt, op)->wgmma)
    regs = runRegisterADot(b, op, mt, rows, cols, registerTiles.lookup(op.getAcc()),
                           aRegs);
  else
    regs = runRegisterADotSync(b, op, rows, cols, registerTiles.lookup(op.getAcc()),
                               aRegs, *bm);
  if (regs.empty())
    return failure();
  registerTiles[op.getResult()] = regs;
  // The operand tiles may be overwritten next (the next iteration's loads),
  // unless both are pipelined stages: those are overwritten only after the
  // next iteration's first barrier (lowerPipelinedAccess).
  if ((*a && !pipelinedBuffers.count(*a)) || !pipelinedBuffers.count(*bm))
    barrier(b);
  toErase.push_back(op);
  return success();
}

Value KernelLowering::coreMatrices(ImplicitLocOpBuilder &b, Value src,
                                   int64_t rows, int64_t cols, Type elt) {
  Value core =
      allocSharedTile(RankedTensorType::get({rows * cols}, elt), b.getLoc());
  auto vt = VectorType::get(
      {8}, cast<MemRefType>(core.getType()).getElementType());
  distribute(b, *simt, {rows, cols / 8},
             [&](ImplicitLocOpBuilder &ib, ValueRange idx) {
               Value r = idx[0], cg = idx[1];
               Value v = vector::LoadOp::create(
                   ib, vt, src,
                   ValueRange{r, arith::MulIOp::create(ib, cg, cIdx(ib, 8))});
               // Row r of column chunk cg (coreStrides): element
               // cg * rows * 8 + r * 8.
               Value dst = arith::MulIOp::create(
                   ib,
                   arith::AddIOp::create(
                       ib, arith::MulIOp::create(ib, cg, cIdx(ib, rows)), r),
                   cIdx(ib, 8));
               vector::StoreOp::create(ib, v, core, ValueRange{dst});
             });
  return core;
}

/// The tensor-core dot that tile `v` is only an operand (A or B) of, if
/// any: directly, through a transpose (B = trans(X),
/// deferTransToTensorCores), or as a [1, R, C] load reshaped to [R, C]
/// (attention's k and v; any number of leading unit dimensions,
/// unitLeadingReshape; the reshape aliases the buffer, lowerReshape).
static DotOp tensorCoreOperandDot(const SimtConfig &simt, Value v) {
  if (!v.hasOneUse())
    return DotOp();
  Operation *user = *v.getUsers().begin();
  auto type = cast<RankedTensorType>(v.getType());
  if (auto reshape = dyn_cast<ReshapeOp>(user)) {
    auto to = cast<RankedTensorType>(reshape.getResult().getType());
    // (A load, or a slice: a batched dot's [1, M, K] slices of [B, M, K].)
    if (!isa_and_nonnull<LoadOp, tensor::ExtractSliceOp>(v.getDefiningOp()) ||
        !unitLeadingReshape(type, to) || !reshape.getResult().hasOneUse())
      return DotOp();
    v = reshape.getResult();
    user = *v.getUsers().begin();
  } else if (type.getRank() != 2) {
    return DotOp();
  }
  // B = trans(X): X is laid out as a K-major B, which is A's layout of X.
  bool transposed = false;
  if (auto tr = dyn_cast<TransOp>(user)) {
    if (tr.getOrder() != ArrayRef<int32_t>{1, 0} ||
        !tr.getResult().hasOneUse())
      return DotOp();
    v = tr.getResult();
    user = *v.getUsers().begin();
    transposed = true;
  }
  auto dot = dyn_cast<DotOp>(user);
  if (!dot || dot.getLhs() == dot.getRhs() || dot.getAcc() == v ||
      (v != dot.getLhs() && v != dot.getRhs()) ||
      (transposed && v != dot.getRhs()) || !isTensorCoreDot(simt, dot))
    return DotOp();
  return dot;
}

/// Whether `user` reads tile `v` element by element only, through
/// loadElems (which maps a tile index into an operand buffer's layout,
/// tileIndices): an elementwise op on tiles, or a kiln.store of it (whose
/// buffer, not of the identity layout, is stored by threads, not TMA).
static bool elementReader(Operation *user, Value v) {
  if (auto store = dyn_cast<StoreOp>(user))
    return store.getValue() == v;
  return user->hasTrait<OpTrait::Elementwise>() &&
         user->getNumRegions() == 0 && user->getNumResults() >= 1 &&
         llvm::all_of(user->getResults(), [](Value r) {
           return isa<RankedTensorType>(r.getType());
         });
}

/// Collects the tensor-core dots that every use of tile `v` is an operand
/// (A or B) of (or, with `readers`, a use that elementReader takes, which
/// it collects there): directly, as B through a transpose [1, 0], or through
/// slices (tensor.extract_slice, isTileSlice), whose uses are followed the
/// same way and which are collected in `slices`. False when a use is
/// anything else.
static bool collectOperandDots(const SimtConfig &simt, Value v,
                               SmallVectorImpl<DotOp> &dots,
                               SmallVectorImpl<tensor::ExtractSliceOp> &slices,
                               SmallVectorImpl<Operation *> *readers = nullptr) {
  if (v.use_empty())
    return false;
  for (Operation *user : v.getUsers()) {
    if (auto sl = dyn_cast<tensor::ExtractSliceOp>(user)) {
      if (!isTileSlice(sl) ||
          !collectOperandDots(simt, sl.getResult(), dots, slices, readers))
        return false;
      slices.push_back(sl);
      continue;
    }
    if (readers && elementReader(user, v)) {
      readers->push_back(user);
      continue;
    }
    Value operand = v;
    bool transposed = false;
    if (auto tr = dyn_cast<TransOp>(user)) {
      if (tr.getOrder() != ArrayRef<int32_t>{1, 0} ||
          !tr.getResult().hasOneUse())
        return false;
      operand = tr.getResult();
      user = *operand.getUsers().begin();
      transposed = true;
    }
    auto dot = dyn_cast<DotOp>(user);
    if (!dot || dot.getLhs() == dot.getRhs() || dot.getAcc() == operand ||
        (transposed && dot.getRhs() != operand) || !isTensorCoreDot(simt, dot))
      return false;
    dots.push_back(dot);
  }
  return true;
}

/// The dots of a rank-2 tile that tensor-core dots read (directly, through
/// transposes or through slices) and other ops only element by element
/// (elementReader), in `dots` and `slices`; false when a use is anything
/// else or no dot reads it: DSA's gathered key rows (B of q . kᵀ through a
/// transpose, and their first d_v columns B of p . v), attention's q (A of
/// the scores' dot in the loops over partial and over full key blocks), an
/// x of x . W1 and x . W2, a key tile both stored to a cache and multiplied.
static bool operandDots(const SimtConfig &simt, Value v,
                        SmallVectorImpl<DotOp> &dots,
                        SmallVectorImpl<tensor::ExtractSliceOp> &slices) {
  SmallVector<Operation *> readers;
  return cast<RankedTensorType>(v.getType()).getRank() == 2 &&
         collectOperandDots(simt, v, dots, slices, &readers) && !dots.empty();
}

/// Whether a slice of a rank-2 tile in wgmma's core-matrix layout is one
/// too, a view of the same bytes: whole rows (the descriptors' strides
/// follow the row count, coreStrides) and columns in whole core matrices.
static bool coreSliceable(tensor::ExtractSliceOp sl) {
  ArrayRef<int64_t> off = sl.getStaticOffsets(), size = sl.getStaticSizes();
  return sl.getSourceType().getRank() == 2 && off[0] == 0 &&
         size[0] == sl.getSourceType().getDimSize(0) && off[1] % 8 == 0 &&
         size[1] % 8 == 0;
}

static bool onWgmma(const SimtConfig &simt, DotOp dot) {
  auto wt = planDotTiling(simt, dot);
  return wt && wt->wgmma;
}

/// Whether tile `v` is only an operand (A or B) of a dot that runs on
/// wgmma: then whatever produces it (a load, an elementwise op) writes it in
/// wgmma's core-matrix layout directly and the dot copies nothing for it.
/// Or of several, or beside element readers (operandDots: those read
/// through tileIndices, at the core matrices' indices), through slices only
/// where they are views of that layout (coreSliceable).
static bool wgmmaOperand(const SimtConfig &simt, Value v) {
  if (!simt.wgmma)
    return false;
  if (DotOp dot = tensorCoreOperandDot(simt, v))
    return onWgmma(simt, dot);
  // (A [1, R, C] load reshaped to [R, C], attention's q: the reshape's
  // uses; the reshape aliases the buffer, lowerReshape.)
  if (v.hasOneUse() && v.getDefiningOp<LoadOp>())
    if (auto reshape = dyn_cast<ReshapeOp>(*v.getUsers().begin());
        reshape && unitLeadingReshape(cast<RankedTensorType>(v.getType()),
                                      reshape.getResult().getType()))
      v = reshape.getResult();
  SmallVector<DotOp> dots;
  SmallVector<tensor::ExtractSliceOp> slices;
  return operandDots(simt, v, dots, slices) &&
         llvm::all_of(dots, [&](DotOp d) { return onWgmma(simt, d); }) &&
         llvm::all_of(slices, coreSliceable);
}

/// Whether loaded tile `v` is only an operand of a dot that runs on
/// mma.sync and reads it with ldmatrix, in rows of an even number of
/// 16-byte chunks: then its buffer gets XOR-swizzled rows (allocXorTile)
/// or padded ones (allocPaddedTile). ldmatrix reads eight rows at one
/// column; at a pitch of 2^j odd 16-byte chunks those fall in 8 / 2^j
/// different chunks of the 128-byte bank cycle (a 2^j-way conflict: 8-way
/// at a multiple of 128 bytes, 2-way at 32 or 96). A pitch of 16 bytes
/// more (an odd number of chunks), or each row's chunks permuted by the
/// row, covers all 32 banks.
/// `sliced` tells whether a use goes through a tile slice (which reads the
/// rows through strides: padded or plain ones only).
static bool mmaSyncOperand(const SimtConfig &simt, Value v, bool &sliced) {
  sliced = false;
  auto type = cast<RankedTensorType>(v.getType());
  // (8-bit: int8 operands, which only K-major tensor-core dots read.)
  unsigned bits = storageType(type.getElementType()).getIntOrFloatBitWidth();
  if (!simt.ldmatrix || !type.hasStaticShape() || (bits != 16 && bits != 8) ||
      type.getShape().back() * bits / 8 % 32)
    return false;
  // (A tensor-core dot without a warp tiling runs on mma.sync too, one
  // warp per 16x8 tile: lowerDotSimt.)
  auto onMmaSync = [&](DotOp dot) {
    auto wt = planDotTiling(simt, dot);
    return !wt || !wt->wgmma;
  };
  if (DotOp dot = tensorCoreOperandDot(simt, v))
    return onMmaSync(dot);
  // Possibly through the unit reshape (attention's q: a [1, R, C] load).
  if (v.hasOneUse())
    if (auto reshape = dyn_cast<ReshapeOp>(*v.getUsers().begin());
        reshape && v.getDefiningOp<LoadOp>() &&
        unitLeadingReshape(type, reshape.getResult().getType()))
      v = reshape.getResult();
  if (cast<RankedTensorType>(v.getType()).getRank() != 2 || v.use_empty())
    return false;
  // Or an operand of several, directly, through transposes or through
  // slices (views of the padded rows), and of ops that read it element by
  // element (an `acc += dot(x, y * s)` beside `dot(x, y)`; a key tile both
  // stored to a cache and multiplied): those read the rows through
  // tileIndices, so the layout only costs them an index computation.
  SmallVector<DotOp> dots;
  SmallVector<tensor::ExtractSliceOp> slices;
  if (operandDots(simt, v, dots, slices)) {
    sliced = !slices.empty();
    return llvm::all_of(dots, onMmaSync);
  }
  // Or both operands of one dot, dot(t, t): ldmatrix reads it as A and,
  // transposing, as B, either layout.
  return llvm::all_of(v.getUsers(), [&](Operation *user) {
    auto dot = dyn_cast<DotOp>(user);
    return dot && dot.getLhs() == v && dot.getAcc() != v &&
           isTensorCoreDot(simt, dot) && onMmaSync(dot);
  });
}

/// Whether a load that wgmmaOperand lays out in place can take the 128B
/// swizzle instead (a pipelined stage: written only by TMA and the loop's
/// copies, read only by wgmma): a rank-2 tile (or [1, R, C] reshaped to
/// [R, C]) of 16-bit elements with
/// whole 64-element slabs of columns (128-byte rows) and whole 8-row
/// groups. As a K-major operand (A [M, K], or B [N, K] through a deferred
/// transpose) any such tile; as an N-major B [K, N] each warpgroup's N
/// block must be whole slabs too (its descriptor steps 64 columns by LBO).
bool swizzleCandidate(const SimtConfig &simt, LoadOp load) {
  Value v = load.getResult();
  auto type = cast<RankedTensorType>(v.getType());
  int64_t rank = type.getRank();
  // (fp8 operands, bytes: slabs of 128 columns. Only K-major operands are
  // fp8's, which is all their dots take.)
  unsigned bits = storageType(type.getElementType()).getIntOrFloatBitWidth();
  if (!wgmmaOperand(simt, v) || (bits != 16 && bits != 8) ||
      type.getDimSize(rank - 1) % (1024 / bits) || type.getDimSize(rank - 2) % 8)
    return false;
  // Or the A operand (K-major) of several dots and nothing else, possibly
  // through the unit reshape (attention's q, read by the loops over partial
  // and over full key blocks). (Slices are not: wgmmaOperand's other case
  // reads through views of the no-swizzle layout.)
  if (!tensorCoreOperandDot(simt, v)) {
    if (v.hasOneUse())
      if (auto reshape = dyn_cast<ReshapeOp>(*v.getUsers().begin());
          reshape && unitLeadingReshape(type, reshape.getResult().getType()))
        v = reshape.getResult();
    return cast<RankedTensorType>(v.getType()).getRank() == 2 &&
           !v.use_empty() && llvm::all_of(v.getUsers(), [&](Operation *user) {
             auto dot = dyn_cast<DotOp>(user);
             return dot && dot.getLhs() == v && dot.getRhs() != v &&
                    dot.getAcc() != v && onWgmma(simt, dot);
           });
  }
  Operation *user = *v.getUsers().begin();
  // A [1, R, C] load reshaped to [R, C] (attention's k and v): the reshape
  // aliases the stage (lowerReshape).
  if (auto reshape = dyn_cast<ReshapeOp>(user)) {
    v = reshape.getResult();
    user = *v.getUsers().begin();
  }
  if (isa<TransOp>(user))
    return true; // K-major B
  auto dot = cast<DotOp>(user);
  if (dot.getLhs() == v)
    return true; // A
  auto wt = planDotTiling(simt, dot);
  return wt && wt->TN * 8 % 64 == 0;
}

/// A strided view (`shape`, `strides`, offset 0) of flat shared buffer
/// `flat`, made right after it.
static Value stridedView(Value flat, ArrayRef<int64_t> shape,
                         ArrayRef<int64_t> strides, Location loc) {
  auto flatType = cast<MemRefType>(flat.getType());
  auto type = MemRefType::get(
      shape, flatType.getElementType(),
      StridedLayoutAttr::get(flat.getContext(), 0, strides),
      flatType.getMemorySpace());
  OpBuilder b(flat.getContext());
  b.setInsertionPointAfterValue(flat);
  return memref::ReinterpretCastOp::create(b, loc, type, flat, /*offset=*/0,
                                           shape, strides);
}

Value KernelLowering::allocCoreTile(RankedTensorType type, Location loc) {
  // The core-matrix layout (coreStrides) as a strided rank-4 view (r / 8,
  // r % 8, c / 8, c % 8) of a flat buffer, as coreMatrices lays it out.
  // (fp8 operands, i8: core matrices of 8 rows of 16 bytes, 16 elements.)
  int64_t R = type.getShape().drop_back().back(), C = type.getShape().back();
  int64_t per = 128 / storageType(type.getElementType()).getIntOrFloatBitWidth();
  Value flat = allocSharedTile(
      RankedTensorType::get({R * C}, type.getElementType()), loc);
  return stridedView(flat, {R / 8, 8, C / per, per}, coreStrides(R, per), loc);
}

Value KernelLowering::allocPaddedTile(RankedTensorType type, Location loc) {
  // Rows of C + rowPad elements (16 more bytes) in a flat buffer, viewed
  // as the tile's shape with those strides (isPaddedBuffer).
  ArrayRef<int64_t> shape = type.getShape();
  int64_t rank = type.getRank(), C = shape.back(),
          pitch = C + rowPad(storageType(type.getElementType()));
  int64_t rows = type.getNumElements() / C;
  Value flat = allocSharedTile(
      RankedTensorType::get({rows * pitch}, type.getElementType()), loc);
  SmallVector<int64_t> strides(rank, 1);
  if (rank >= 2)
    strides[rank - 2] = pitch;
  for (int64_t d = rank - 3; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return stridedView(flat, shape, strides, loc);
}

Value KernelLowering::allocXorTile(RankedTensorType type, Location loc) {
  // Rows of C elements in a flat buffer, viewed as (r / 8, r % 8, chunk,
  // c % 8) with row-major strides; writers address chunk (c / 8) ^ (r % 8)
  // (tileIndices), ldmatrix the same bytes by address (ldmatrixXor), so
  // the eight rows an ldmatrix reads at one column are eight different
  // 16-byte chunks of their 128-byte lines: all 32 banks (isXorBuffer). No
  // bytes added.
  // (Chunks of 16 bytes: 8 16-bit elements, 16 int8 ones, whose byte pairs
  // ldmatrixXor reads as the 16-bit elements of rows half as long.)
  int64_t C = type.getShape().back(), R = type.getNumElements() / C;
  int64_t per = 128 / storageType(type.getElementType()).getIntOrFloatBitWidth();
  Value flat = allocSharedTile(
      RankedTensorType::get({R * C}, type.getElementType()), loc);
  // The fragment loads swizzle the address's bits 4-6 (ldmatrixXor).
  auto &align = simt->bufferAlign[flat.getDefiningOp()];
  align = std::max<int64_t>(align, 128);
  return stridedView(flat, {R / 8, 8, C / per, per}, {8 * C, C, per, 1}, loc);
}

Value KernelLowering::allocMmaSyncOperandTile(Value v, Location loc) {
  auto type = cast<RankedTensorType>(v.getType());
  bool sliced;
  if (!simt || !mmaSyncOperand(*simt, v, sliced))
    return Value();
  // XOR-swizzled rows where they are whole 128-byte lines (no bytes
  // added), padded rows otherwise.
  int64_t cols = type.getShape().back();
  int64_t bytes = storageType(type.getElementType()).getIntOrFloatBitWidth() / 8;
  if (simt->swizzle && !sliced && cols * bytes % 128 == 0 &&
      type.getNumElements() / cols % 8 == 0)
    return allocXorTile(type, loc);
  if (simt->padRows)
    return allocPaddedTile(type, loc);
  return Value();
}

Value KernelLowering::allocLoadTile(Operation *access) {
  assert((isa<LoadOp, GatherOp>(access)) && "a load or a gather");
  Value v = access->getResult(0);
  auto type = cast<RankedTensorType>(v.getType());
  if (simt && simt->asyncCopy && wgmmaOperand(*simt, v))
    return allocCoreTile(type, access->getLoc());
  if (Value rows = allocMmaSyncOperandTile(v, access->getLoc()))
    return rows;
  return allocTile(type, access->getLoc());
}

void KernelLowering::fenceCoreWrites(ImplicitLocOpBuilder &b,
                                     ArrayRef<Value> bufs) {
  if (!simt || llvm::none_of(bufs, isCoreBuffer))
    return;
  // The op just lowered ends with its barrier: fence before it, so that the
  // barrier hands the writes to wgmma (async proxy).
  Block *block = b.getInsertionBlock();
  auto it = b.getInsertionPoint();
  if (it != block->begin())
    if (auto bar = dyn_cast<gpu::BarrierOp>(*std::prev(it))) {
      ImplicitLocOpBuilder fb(bar.getLoc(), bar);
      asyncProxyFence(fb);
      return;
    }
  asyncProxyFence(b);
  barrier(b);
}

Value KernelLowering::allocResultTile(Value result, Location loc) {
  auto type = cast<RankedTensorType>(result.getType());
  if (simt && wgmmaOperand(*simt, result))
    return allocCoreTile(type, loc);
  if (Value rows = allocMmaSyncOperandTile(result, loc))
    return rows;
  return allocTile(type, loc);
}

bool KernelLowering::deferTransToTensorCores(TransOp op, Value srcBuf) {
  if (op.getOrder() != ArrayRef<int32_t>{1, 0} || !op.getResult().hasOneUse())
    return false;
  auto dot = dyn_cast<DotOp>(*op.getResult().getUsers().begin());
  if (!dot || dot.getRhs() != op.getResult() ||
      dot.getLhs() == op.getResult() || dot.getAcc() == op.getResult() ||
      !isTensorCoreDot(*simt, dot))
    return false;
  auto wt = planDotTiling(*simt, dot);
  // wgmma: the source in place (a core buffer [N, K] is a K-major B, see
  // coreStrides), or a row-major buffer the dot copies from. mma.sync: a
  // row-major buffer (rows padded or not), whose 8x8 matrices are B's
  // fragments untransposed.
  if (wt && wt->wgmma)
    return isCoreBuffer(srcBuf) || isPlain16(srcBuf);
  return isLdmatrixRows(srcBuf);
}

Value KernelLowering::deferSliceToTensorCores(tensor::ExtractSliceOp op,
                                              Value srcBuf) {
  SmallVector<DotOp> dots;
  SmallVector<tensor::ExtractSliceOp> slices;
  if (!collectOperandDots(*simt, op.getResult(), dots, slices))
    return Value();
  ImplicitLocOpBuilder b(op.getLoc(), op);
  ArrayRef<int64_t> off = op.getStaticOffsets(), size = op.getStaticSizes();
  auto t = cast<MemRefType>(srcBuf.getType());
  // A core-matrix buffer (its tile only feeds wgmma, wgmmaOperand): the
  // core matrices of the sliced columns, at their offset (which the
  // descriptors add), with the same strides.
  if (isCoreBuffer(srcBuf)) {
    if (!coreSliceable(op))
      return Value();
    return memref::SubViewOp::create(
        b, srcBuf, ArrayRef<int64_t>{0, 0, off[1] / 8, 0},
        ArrayRef<int64_t>{t.getDimSize(0), 8, size[1] / 8, 8},
        ArrayRef<int64_t>{1, 1, 1, 1});
  }
  // Rows (plain or padded) for mma.sync, which reads any strides (ldmatrix
  // where rows start on 16 bytes, isLdmatrixRows). wgmma takes only core
  // matrices or plain rows, which a slice is not: a copy.
  if (t.getRank() != 2 ||
      llvm::any_of(dots, [&](DotOp d) { return onWgmma(*simt, d); }))
    return Value();
  return memref::SubViewOp::create(b, srcBuf, off, size,
                                   ArrayRef<int64_t>{1, 1});
}

SmallVector<Value> KernelLowering::runTiledDot(ImplicitLocOpBuilder &b,
                                               DotOp op, const MmaTiles &mt,
                                               ArrayRef<Value> rows,
                                               ArrayRef<Value> cols,
                                               ValueRange acc) {
  auto lhsType = op.getLhs().getType();
  int64_t M = lhsType.getDimSize(0), K = lhsType.getDimSize(1),
          N = op.getAcc().getType().getDimSize(1);
  auto wt = *planDotTiling(*simt, op);
  // B = trans(X) not materialized (deferTransToTensorCores): X [N, K] row-major
  // is B K-major, laid out as A is.
  bool bKMajor = deferredTrans.count(op.getRhs());
  // An 8-bit dot (fp8: nativeFp8Dot; s8: isTensorCoreDot) reads both
  // operands K-major where they landed: in core matrices for wgmma, in rows
  // ldmatrix reads as byte pairs for mma.sync (s8 only).
  bool fp8 = op.isFp8();
  bool s8 = !fp8 && mt.inElt.isSignlessInteger(8);
  bool eightBit = fp8 || s8;
  bool syncS8 = s8 && !wt.wgmma && bKMajor && mt.useLdmatrix;
  if (eightBit && !syncS8 &&
      !(wt.wgmma && bKMajor && isCoreBuffer(mt.a) && isCoreBuffer(mt.bm))) {
    op.emitError("kiln GPU lowering: an 8-bit dot's operands are not both "
                 "K-major in core matrices for wgmma or in rows for ldmatrix "
                 "(expandFp8Dots decodes fp8 ones; isTensorCoreDot should "
                 "have kept this int8 one off the tensor cores)");
    return {};
  }
  auto usable = [](Value v) { return isCoreBuffer(v) || isPlain16(v); };
  if (!wt.wgmma || !usable(mt.a) || !usable(mt.bm)) {
    // mma.sync (a deferred transpose's source is read as X = Bᵀ).
    if (isCoreBuffer(mt.a) || isCoreBuffer(mt.bm)) {
      op.emitError("kiln GPU lowering: an operand of this dot was laid out "
                   "for wgmma, whose other operand turned out not to be a "
                   "plain buffer");
      return {};
    }
    MmaTiles sync = mt;
    sync.bKMajor = bKMajor;
    return sync.run(b, rows, cols, K, acc);
  }
  bool inPlace = isCoreBuffer(mt.a) && isCoreBuffer(mt.bm);

  // wgmma.mma_async.m64nNk16 with both operands in shared memory, in the
  // canonical no-swizzle layouts (8 x 16-byte core matrices, 128 contiguous
  // bytes): A K-major, B MN-major (imm-trans-b). Loads feeding only this dot
  // wrote them so (allocLoadTile); other operands are copied over, each
  // 16-byte row chunk of the row-major tiles whole (vectorized).
  Value aCore = mt.a, bCore = mt.bm;
  if (!inPlace) {
    // An operand defined outside the loop around the dot (attention's q) is
    // laid out once, before that loop; the others here.
    auto loop = op->getParentOfType<scf::ForOp>();
    bool copied = false;
    auto core = [&](Value tile, Value buf, int64_t rows,
                    int64_t cols) -> Value {
      // A loop's carried value (an iteration argument) changes every
      // iteration, whichever loop the lowering has moved it into: it was
      // copied once before the loop, and every iteration read its first
      // value (X = dot(A, X) in a loop).
      auto inside = [&](Value v) {
        if (auto arg = dyn_cast<BlockArgument>(v))
          if (isa_and_nonnull<scf::ForOp, scf::WhileOp>(arg.getOwner()->getParentOp()))
            return true;
        return loop->isAncestor(v.getParentBlock()->getParentOp());
      };
      if (loop && (inside(tile) || inside(buf))) {
        copied = true;
        return coreMatrices(b, buf, rows, cols, mt.inElt);
      }
      auto &entry = hoistedCores[tile];
      Value &cached = entry.first;
      Operation *&point = entry.second;
      // A copy made before `point` serves at `at` when `point` dominates it.
      auto dominates = [&](Operation *at) {
        if (!cached)
          return false;
        Operation *a = point->getBlock()->findAncestorOpInBlock(*at);
        return a && (a == point || point->isBeforeInBlock(a));
      };
      if (!loop) {
        // Outside any loop (an overlapped loop's first scores, before it):
        // the copy is kept for the dots of later loops over the operand.
        if (!dominates(op)) {
          copied = true;
          cached = coreMatrices(b, buf, rows, cols, mt.inElt);
          point = op;
        }
        return cached;
      }
      if (!dominates(loop)) {
        ImplicitLocOpBuilder hb(loop.getLoc(), loop);
        cached = coreMatrices(hb, buf, rows, cols, mt.inElt);
        point = loop;
        // It lives across the loop (the planner widens it to the loop).
        simt->bufferHome[cached.getDefiningOp()] = loop->getBlock();
        asyncProxyFence(hb);
        gpu::BarrierOp::create(hb);
      }
      return cached;
    };
    if (!isCoreBuffer(mt.a))
      aCore = core(op.getLhs(), mt.a, M, K);
    if (!isCoreBuffer(mt.bm))
      bCore = bKMajor ? core(op.getRhs(), mt.bm, N, K)
                      : core(op.getRhs(), mt.bm, K, N);
    if (copied) {
      asyncProxyFence(b);
      barrier(b);
    }
  }
  // The loop's in-flight dot (inFlightDot) as it was planned: its groups
  // are retired by the next iteration's (wait_group 1), or after the loop.
  bool inFlight =
      inPlace && !acc.empty() && registerTiles.count(op.getAcc()) &&
      pipelinedBuffers.count(mt.a) && pipelinedBuffers.count(mt.bm) &&
      llvm::any_of(pipelinedLoops, [&](const auto &pl) {
        return pl->inFlight == op;
      });
  // Scores computed an iteration ahead (carriedDots: the result only goes to
  // the next iteration) are not waited for here, so they run while the
  // iteration's softmax does: the next wait_group 0 (the p v dot's) retires
  // them, or lowerFor waits before the yield (wgmmaPending). Only when both
  // operands outlive the iteration's barriers: a pipelined stage (refilled
  // after the next iteration's first barrier), a copy made before the loop,
  // or the core matrices of a tile defined before it (attention's q, loaded
  // into them: its buffer lives across the loop); a buffer of this
  // iteration may be given to a later tile while the group still reads it.
  auto outlivesIteration = [&](Value tile, Value buf) {
    Operation *def = tile.getDefiningOp();
    return pipelinedBuffers.count(buf) ||
           (isCoreBuffer(buf) && def &&
            !op->getParentOp()->isProperAncestor(def)) ||
           llvm::any_of(hoistedCores, [&](const auto &kv) {
             return kv.second.first == buf &&
                    !op->getParentOp()->isProperAncestor(kv.second.second);
           });
  };
  bool deferWait = !inFlight && carriedDots.contains(op) &&
                   outlivesIteration(op.getLhs(), aCore) &&
                   outlivesIteration(op.getRhs(), bCore);
  // fp8 operands count K in pairs of bytes: their core matrices are those
  // of a 16-bit operand of half the columns (coreStrides), so the
  // descriptors and their offsets (OperandLayout) are the same, and one k32
  // step of wgmma's e4m3 / e5m2 forms is 16 pairs.
  int64_t kUnits = eightBit ? K / 2 : K;
  int64_t n = wt.TN * 8, steps = kUnits / 16, unroll = 1;
  for (int64_t u = 8; u >= 1; --u)
    if (steps % u == 0) {
      unroll = u;
      break;
    }
  // A +0 accumulator (attention's scores) is not moved into the registers:
  // the first k step runs with scale-d = 0 (D = A B), so the k loop is
  // unrolled whole (up to 16 steps: head dim 256).
  // (s8 accumulates in s32 registers.)
  Type accElt = s8 ? Type(b.getI32Type()) : Type(b.getF32Type());
  bool zeroInit = !acc.empty() && steps <= 16 && llvm::all_of(acc, [](Value v) {
    return matchPattern(v, m_PosZeroFloat()) || matchPattern(v, m_Zero());
  });
  SmallVector<Value> init(acc.begin(), acc.end());
  if (zeroInit) {
    unroll = steps;
    init.assign(acc.size(), LLVM::UndefOp::create(b, accElt));
  }
  // In-flight accumulators must not pass through the k loop's carried
  // values (ptxas may move them): defer only a k loop of one iteration.
  deferWait &= unroll == steps;
  // A [M, K] K-major; B [K, N] N-major, or [N, K] K-major (a deferred
  // transpose); each in the core layout or, as a pipelined stage of
  // 128-byte rows, the 128B swizzle (OperandLayout).
  OperandLayout aLayout{true, swizzledBuffers.count(aCore) > 0, M, kUnits};
  OperandLayout bLayout{bKMajor, swizzledBuffers.count(bCore) > 0, N, kUnits};
  Value descA = aLayout.descriptor(b, aCore);
  Value descB = bLayout.descriptor(b, bCore);
  MLIRContext *ctx = b.getContext();
  auto accType = LLVM::LLVMStructType::getLiteral(
      ctx, SmallVector<Type>(n / 2, accElt));
  auto type = mt.inElt.isBF16() ? NVVM::WGMMATypes::bf16 : NVVM::WGMMATypes::f16;
  if (s8)
    type = NVVM::WGMMATypes::s8;
  auto typeB = type;
  if (fp8) {
    auto fmt = [](StringRef f) {
      return f == "e4m3" ? NVVM::WGMMATypes::e4m3 : NVVM::WGMMATypes::e5m2;
    };
    type = fmt(*op.getLhsFp8());
    typeB = fmt(*op.getRhsFp8());
  }
  int64_t perBlock = n / 2;
  // A pipelined loop's deferred issue goes right after this group's commit
  // when the k loop runs once (it then runs while the group does), else
  // before the k loop.
  bool issueAfterCommit = deferredIssue &&
                          b.getInsertionBlock() == deferredBlock &&
                          unroll == steps;
  if (!issueAfterCommit)
    flushDeferredIssue(b);
  auto loop = scf::ForOp::create(
      b, cIdx(b, 0), cIdx(b, kUnits), cIdx(b, 16 * unroll), init,
      [&](OpBuilder &kb, Location kl, Value kk, ValueRange it) {
        ImplicitLocOpBuilder lb(kl, kb);
        // The accumulators were last written by other instructions.
        NVVM::WgmmaFenceAlignedOp::create(lb);
        SmallVector<Value> structs;
        for (size_t t = 0; t < rows.size(); ++t) {
          Value s = LLVM::UndefOp::create(lb, accType);
          for (int64_t e = 0; e < perBlock; ++e)
            s = LLVM::InsertValueOp::create(lb, s, it[t * perBlock + e],
                                            ArrayRef<int64_t>{e});
          structs.push_back(s);
        }
        Value nGroup = arith::DivUIOp::create(lb, cols[0], cIdx(lb, 8));
        for (int64_t u = 0; u < unroll; ++u) {
          Value k0 = arith::AddIOp::create(lb, kk, cIdx(lb, 16 * u));
          Value db = arith::AddIOp::create(lb, descB,
                                           bLayout.units(lb, nGroup, k0));
          for (size_t t = 0; t < rows.size(); ++t) {
            // The warpgroup's block of 64 rows: 8 groups of 8 from row / 64 * 8.
            Value mGroup = arith::MulIOp::create(
                lb, arith::DivUIOp::create(lb, rows[t], cIdx(lb, 64)),
                cIdx(lb, 8));
            Value da = arith::AddIOp::create(lb, descA,
                                             aLayout.units(lb, mGroup, k0));
            structs[t] = NVVM::WgmmaMmaAsyncOp::create(
                lb, accType, structs[t], da, db,
                NVVM::MMAShapeAttr::get(ctx, 64, n, eightBit ? 32 : 16), type,
                typeB, s8 ? NVVM::WGMMATypes::s32 : NVVM::WGMMATypes::f32,
                zeroInit && u == 0 ? NVVM::WGMMAScaleOut::zero
                                   : NVVM::WGMMAScaleOut::one,
                NVVM::WGMMAScaleIn::one, NVVM::WGMMAScaleIn::one,
                NVVM::MMALayout::row,
                bKMajor ? NVVM::MMALayout::col : NVVM::MMALayout::row,
                NVVM::MMAIntOverflowAttr());
          }
        }
        NVVM::WgmmaGroupSyncAlignedOp::create(lb);
        if (issueAfterCommit)
          flushDeferredIssue(lb, /*once=*/true);
        if (!deferWait)
          NVVM::WgmmaWaitGroupSyncOp::create(lb, inFlight ? 1 : 0);
        // Any wait retires the older groups (wait_group 1 all but this one).
        wgmmaPending = deferWait;
        SmallVector<Value> next;
        for (Value s : structs)
          for (int64_t e = 0; e < perBlock; ++e)
            next.push_back(
                LLVM::ExtractValueOp::create(lb, s, ArrayRef<int64_t>{e}));
        scf::YieldOp::create(lb, next);
      });
  if (inFlight) {
    // The loop's last iteration retires its groups itself: a wait after
    // the loop would follow the merge with the path that skips the loop,
    // whose definitions of the accumulators make ptxas serialize every
    // wgmma (C7515).
    auto outer = cast<scf::ForOp>(op->getParentOp());
    Value last = arith::CmpIOp::create(
        b, arith::CmpIPredicate::sge,
        arith::AddIOp::create(b, outer.getInductionVar(), outer.getStep()),
        outer.getUpperBound());
    when(b, last, [](ImplicitLocOpBuilder &wb) {
      NVVM::WgmmaWaitGroupSyncOp::create(wb, 0);
    });
  }
  return SmallVector<Value>(loop.getResults());
}

/// Converts an element loaded from a buffer (storage type) to the type a dot
/// accumulates in.
static Value toAcc(ImplicitLocOpBuilder &b, Value v, Type inElt, Type accElt) {
  v = toType(b, b.getLoc(), v, inElt);
  if (inElt == accElt)
    return v;
  if (isa<FloatType>(accElt))
    return arith::ExtFOp::create(b, accElt, v);
  return arith::ExtSIOp::create(b, accElt, v);
}

TypedAttr registerSplat(DenseElementsAttr dense) {
  if (!dense || !dense.isSplat())
    return {};
  Type elt = dense.getElementType();
  Builder b(dense.getContext());
  if (isa<FloatType>(elt))
    return b.getF32FloatAttr(dense.getSplatValue<APFloat>().convertToDouble());
  if (elt.isSignlessInteger(32))
    return b.getI32IntegerAttr(dense.getSplatValue<APInt>().getSExtValue());
  return {};
}

TypedAttr KernelLowering::splatAccumulator(DotOp op) {
  DenseElementsAttr dense;
  if (!matchPattern(op.getAcc(), m_Constant(&dense)) ||
      !isTensorCoreDot(*simt, op) || !planDotTiling(*simt, op))
    return {};
  return registerSplat(dense);
}

bool KernelLowering::rewrittenInLoop(Value buf, Operation *at) {
  if (!buf || pipelinedBuffers.count(buf))
    return false; // (a stage is rewritten after the next first barrier)
  auto loop = at->getParentOfType<scf::ForOp>();
  if (!loop)
    return false;
  // The buffer's allocation (views of it: padded, XOR or core layouts,
  // slices, reshapes: expand_dims' and reshape's buffers) and the block it
  // was made for: written there.
  Value root = buf;
  while (Operation *def = root.getDefiningOp()) {
    if (auto cast = dyn_cast<memref::ReinterpretCastOp>(def))
      root = cast.getSource();
    else if (auto sub = dyn_cast<memref::SubViewOp>(def))
      root = sub.getSource();
    else if (auto ex = dyn_cast<memref::ExpandShapeOp>(def))
      root = ex.getSrc();
    else if (auto co = dyn_cast<memref::CollapseShapeOp>(def))
      root = co.getSrc();
    else
      break;
  }
  Operation *view = root.getDefiningOp();
  auto it = view ? simt->bufferHome.find(view) : simt->bufferHome.end();
  if (it == simt->bufferHome.end() || !it->second)
    return true; // (unknown: assume so)
  return loop->isAncestor(it->second->getParentOp());
}

LogicalResult KernelLowering::lowerDotSimt(DotOp op, Value a, Value bm,
                                           Value out,
                                           TypedAttr accSplat) {
  auto lhsType = op.getLhs().getType();
  auto accType = op.getAcc().getType();
  int64_t M = lhsType.getDimSize(0), K = lhsType.getDimSize(1),
          N = accType.getDimSize(1);
  Type inElt = lhsType.getElementType(), accElt = accType.getElementType();
  ImplicitLocOpBuilder b(op.getLoc(), op);
  if (!isTensorCoreDot(*simt, op)) {
    // One FMA chain per output element, operands read from shared memory.
    forEachIndexSimt(b, {M, N}, [&](ImplicitLocOpBuilder &ib, ValueRange idx) {
      Value acc0 = toType(ib, ib.getLoc(),
                          memref::LoadOp::create(ib, out, idx), accElt);
      auto loop = scf::ForOp::create(
          ib, cIdx(ib, 0), cIdx(ib, K), cIdx(ib, 1), ValueRange{acc0},
          [&](OpBuilder &ob, Location loc, Value k, ValueRange it) {
            ImplicitLocOpBuilder lb(loc, ob);
            Value x = toAcc(lb, memref::LoadOp::create(lb, a, ValueRange{idx[0], k}),
                            inElt, accElt);
            Value y = toAcc(lb, memref::LoadOp::create(lb, bm, ValueRange{k, idx[1]}),
                            inElt, accElt);
            Value r;
            if (isa<FloatType>(accElt))
              r = math::FmaOp::create(lb, x, y, it[0]);
            else
              r = arith::AddIOp::create(lb, it[0], arith::MulIOp::create(lb, x, y));
            scf::YieldOp::create(lb, r);
          });
      Value r = toType(ib, ib.getLoc(), loop.getResult(0),
                       cast<MemRefType>(out.getType()).getElementType());
      memref::StoreOp::create(ib, r, out, idx);
    });
    return success();
  }

  // mma.sync.m16n8k16 (row.col), fragments per the PTX ISA (MmaTiles).
  MmaTiles mt = mmaTiles(b, *simt, a, bm, inElt);
  mt.bKMajor = deferredTrans.count(op.getRhs());
  auto tiling = planDotTiling(*simt, op);
  if (mt.pairs && (!tiling || !tiling->wgmma) &&
      (!mt.useLdmatrix || !mt.bKMajor)) {
    op.emitError("kiln GPU lowering: an int8 mma.sync dot's operands are not "
                 "both K-major rows that ldmatrix reads as byte pairs");
    return failure();
  }
  int64_t tilesM = M / 16, tilesN = N / 8;
  if (auto wt = planDotTiling(*simt, op)) {
    auto [rows, cols] = warpTileBases(b, mt, *wt);
    SmallVector<Value> init;
    if (accSplat)
      init.assign(registerTileSize(op),
                  arith::ConstantOp::create(b, accSplat));
    else
      init = mt.loadAcc(b, rows, cols, out);
    SmallVector<Value> regs = runTiledDot(b, op, mt, rows, cols, init);
    if (regs.empty())
      return failure();
    if (fragmentUses(op.getResult(), op) ||
        fragmentUses(op.getResult(), op, /*elementwiseOnly=*/true)) {
      // Its readers take the fragments (lowerElementwise, lowerReduceSimt;
      // elementwise ones under any warp tiling). No barrier follows the
      // operands' reads, so where an operand is rewritten by the loop
      // around the dot (the next iteration's loads: fp8_blockwise_matmul at
      // one stage raced here), the next write of a tile syncs first.
      fragmentResults[op.getResult()] = {op, regs};
      if (rewrittenInLoop(a, op) || rewrittenInLoop(bm, op))
        unsyncedReads = true;
      return success();
    }
    mt.storeAcc(b, rows, cols, regs, out);
    barrier(b);
    return success();
  }
  // Shapes that do not tile over the warps: one warp per 16x8 tile.
  scf::ForOp::create(
      b, mt.warp, cIdx(b, tilesM * tilesN), cIdx(b, simt->numThreads / 32),
      ValueRange{}, [&](OpBuilder &ob, Location loc, Value t, ValueRange) {
        ImplicitLocOpBuilder ib(loc, ob);
        SmallVector<Value> rows{arith::MulIOp::create(
            ib, arith::DivUIOp::create(ib, t, cIdx(ib, tilesN)), cIdx(ib, 16))};
        SmallVector<Value> cols{arith::MulIOp::create(
            ib, arith::RemUIOp::create(ib, t, cIdx(ib, tilesN)), cIdx(ib, 8))};
        mt.storeAcc(ib, rows, cols,
                    mt.run(ib, rows, cols, K, mt.loadAcc(ib, rows, cols, out)),
                    out);
        scf::YieldOp::create(ib);
      });
  barrier(b);
  return success();
}

/// A butterfly shuffle of any scalar up to 64 bits (as one or two i32).
static Value shuffleXor(ImplicitLocOpBuilder &b, Value v, int64_t offset) {
  Type t = v.getType();
  unsigned bits = t.getIntOrFloatBitWidth();
  auto i32 = b.getI32Type();
  Value off = arith::ConstantIntOp::create(b, i32, offset);
  Value width = arith::ConstantIntOp::create(b, i32, 32);
  auto shfl = [&](Value x) {
    return gpu::ShuffleOp::create(b, x, off, width, gpu::ShuffleMode::XOR)
        .getShuffleResult();
  };
  if (bits == 32)
    return shfl(v);
  auto i64 = b.getI64Type();
  Value w = isa<FloatType>(t) ? Value(arith::BitcastOp::create(b, i64, v)) : v;
  Value lo = arith::TruncIOp::create(b, i32, w);
  Value hi = arith::TruncIOp::create(
      b, i32, arith::ShRUIOp::create(b, w, arith::ConstantIntOp::create(b, i64, 32)));
  lo = arith::ExtUIOp::create(b, i64, shfl(lo));
  hi = arith::ExtUIOp::create(b, i64, shfl(hi));
  Value r = arith::OrIOp::create(
      b, lo, arith::ShLIOp::create(b, hi, arith::ConstantIntOp::create(b, i64, 32)));
  return isa<FloatType>(t) ? Value(arith::BitcastOp::create(b, t, r)) : r;
}

/// The type a reduction or scan combines in across lanes: shuffles carry
/// 32 or 64 bits, so 16-bit and narrower values widen to f32 / i32 (integer
/// sums and products wrap the same way after truncation).
struct ShuffleType {
  Type elt, work;
  bool isFloat;
  ShuffleType(Builder &b, Type elt)
      : elt(elt), work(elt), isFloat(isa<FloatType>(elt)) {
    if (elt.getIntOrFloatBitWidth() < 32)
      work = isFloat ? Type(b.getF32Type()) : Type(b.getI32Type());
  }
  /// A value read from a buffer (storage type) in the work type.
  Value widen(ImplicitLocOpBuilder &b, Value v) const {
    v = toType(b, b.getLoc(), v, elt);
    if (work == elt)
      return v;
    return isFloat ? Value(arith::ExtFOp::create(b, work, v))
                   : Value(arith::ExtSIOp::create(b, work, v));
  }
  Value narrow(ImplicitLocOpBuilder &b, Value v) const {
    if (work == elt)
      return v;
    return isFloat ? Value(arith::TruncFOp::create(b, elt, v))
                   : Value(arith::TruncIOp::create(b, elt, v));
  }
};

LogicalResult KernelLowering::lowerReduceSimt(ReduceOp op) {
  // Rows of a dot result (or of an expression on it) still in registers.
  if (fragmentResults.count(op.getSrc()) && op.getAxis() == 1 &&
      fragmentUses(op.getSrc(), fragmentResults.lookup(op.getSrc()).first)) {
    SmallVector<Value> rows = reduceFragmentRows(op);
    ImplicitLocOpBuilder b(op.getLoc(), op);
    defineRows(b, op.getResult(), fragmentResults.lookup(op.getSrc()).first,
               std::move(rows));
    toErase.push_back(op);
    return success();
  }
  auto srcType = op.getSrc().getType();
  auto src = bufferOf(op.getSrc(), op);
  if (failed(src))
    return failure();
  Type elt = srcType.getElementType();
  int64_t axis = op.getAxis();
  ReduceKind kind = op.getKind();
  bool isArg = kind == ReduceKind::argmax || kind == ReduceKind::argmin;
  bool isMax = kind == ReduceKind::argmax;
  bool isFloat = isa<FloatType>(elt);
  ImplicitLocOpBuilder b(op.getLoc(), op);
  auto resultTensor = dyn_cast<RankedTensorType>(op.getResult().getType());
  SmallVector<int64_t> outShape(srcType.getShape());
  outShape.erase(outShape.begin() + axis);
  int64_t outCount = 1;
  for (int64_t s : outShape)
    outCount *= s;
  // A scalar result goes through a one-element shared buffer.
  Type resultElt = isArg ? Type(b.getI32Type()) : elt;
  RankedTensorType bufType =
      resultTensor ? resultTensor : RankedTensorType::get({1}, resultElt);
  Value resultBuf = allocTile(bufType, op.getLoc());

  ShuffleType st(b, elt);
  Type work = st.work;
  auto widen = [&](ImplicitLocOpBuilder &ib, Value v) { return st.widen(ib, v); };
  auto narrow = [&](ImplicitLocOpBuilder &ib, Value v) { return st.narrow(ib, v); };
  // Arg reductions carry (value, index); the better of two: the more extreme
  // value, NaN beating numbers, ties to the lower index.
  auto better = [&](ImplicitLocOpBuilder &ib, Value xv, Value xi, Value yv,
                    Value yi) -> Value {
    Value lowerIdx =
        arith::CmpIOp::create(ib, arith::CmpIPredicate::slt, yi, xi);
    if (!isFloat) {
      Value strict = arith::CmpIOp::create(
          ib, isMax ? arith::CmpIPredicate::sgt : arith::CmpIPredicate::slt,
          yv, xv);
      Value eq = arith::CmpIOp::create(ib, arith::CmpIPredicate::eq, yv, xv);
      return arith::OrIOp::create(ib, strict,
                                  arith::AndIOp::create(ib, eq, lowerIdx));
    }
    Value strict = arith::CmpFOp::create(
        ib, isMax ? arith::CmpFPredicate::OGT : arith::CmpFPredicate::OLT, yv,
        xv);
    Value eq = arith::CmpFOp::create(ib, arith::CmpFPredicate::OEQ, yv, xv);
    Value yNaN = arith::CmpFOp::create(ib, arith::CmpFPredicate::UNO, yv, yv);
    Value xNaN = arith::CmpFOp::create(ib, arith::CmpFPredicate::UNO, xv, xv);
    Value xNum = arith::XOrIOp::create(ib, xNaN,
                                       arith::ConstantIntOp::create(ib, 1, 1));
    Value bothNaN = arith::AndIOp::create(ib, xNaN, yNaN);
    Value r = arith::OrIOp::create(ib, strict,
                                   arith::AndIOp::create(ib, eq, lowerIdx));
    r = arith::OrIOp::create(ib, r, arith::AndIOp::create(ib, yNaN, xNum));
    return arith::OrIOp::create(ib, r,
                                arith::AndIOp::create(ib, bothNaN, lowerIdx));
  };

  int64_t axisSize = srcType.getDimSize(axis);
  int64_t group = 1;
  while (group * 2 <= std::min<int64_t>(32, axisSize))
    group *= 2;
  int64_t groups = simt->numThreads / group;
  int64_t rounds = (outCount + groups - 1) / groups;
  Value tid = simt->threadId;
  Value gi = arith::DivUIOp::create(b, tid, cIdx(b, group));
  Value li = arith::RemUIOp::create(b, tid, cIdx(b, group));
  TypedAttr ident = isArg ? TypedAttr() : reduceIdentity(b, kind, work);
  if (isArg) {
    // -inf / +inf (or the integer extreme) loses to every element.
    ident = reduceIdentity(b, isMax ? ReduceKind::max : ReduceKind::min, work);
  }
  auto i32 = b.getI32Type();
  scf::ForOp::create(
      b, cIdx(b, 0), cIdx(b, rounds), cIdx(b, 1), ValueRange{},
      [&](OpBuilder &ob, Location loc, Value round, ValueRange) {
        ImplicitLocOpBuilder ib(loc, ob);
        Value o = arith::AddIOp::create(
            ib, arith::MulIOp::create(ib, round, cIdx(ib, groups)), gi);
        Value valid = arith::CmpIOp::create(ib, arith::CmpIPredicate::ult, o,
                                            cIdx(ib, outCount));
        // Lanes past the last output work on output 0 and discard it, so
        // that every lane of a warp reaches the shuffles.
        Value oc = arith::SelectOp::create(ib, valid, o, cIdx(ib, 0));
        SmallVector<Value> outIdx =
            outShape.empty() ? SmallVector<Value>{} : delinearize(ib, oc, outShape);
        SmallVector<Value> inits{arith::ConstantOp::create(ib, ident)};
        if (isArg)
          inits.push_back(arith::ConstantIntOp::create(ib, i32, INT32_MAX));
        auto loop = scf::ForOp::create(
            ib, li, cIdx(ib, axisSize), cIdx(ib, group), inits,
            [&](OpBuilder &lb2, Location l2, Value r, ValueRange it) {
              ImplicitLocOpBuilder lb(l2, lb2);
              SmallVector<Value> idx(outIdx);
              idx.insert(idx.begin() + axis, r);
              Value x = widen(lb, memref::LoadOp::create(lb, *src, idx));
              if (!isArg) {
                scf::YieldOp::create(lb, combine(lb, kind, it[0], x));
                return;
              }
              Value ri = arith::IndexCastOp::create(lb, i32, r);
              Value take = better(lb, it[0], it[1], x, ri);
              scf::YieldOp::create(
                  lb, ValueRange{arith::SelectOp::create(lb, take, x, it[0]),
                                 arith::SelectOp::create(lb, take, ri, it[1])});
            });
        Value v = loop.getResult(0);
        Value vi = isArg ? loop.getResult(1) : Value();
        for (int64_t off = group / 2; off >= 1; off /= 2) {
          Value ov = shuffleXor(ib, v, off);
          if (!isArg) {
            v = combine(ib, kind, v, ov);
            continue;
          }
          Value oi = shuffleXor(ib, vi, off);
          Value take = better(ib, v, vi, ov, oi);
          v = arith::SelectOp::create(ib, take, ov, v);
          vi = arith::SelectOp::create(ib, take, oi, vi);
        }
        Value leader = arith::CmpIOp::create(ib, arith::CmpIPredicate::eq, li,
                                             cIdx(ib, 0));
        auto ifOp = scf::IfOp::create(ib, TypeRange{},
                                      arith::AndIOp::create(ib, valid, leader),
                                      false);
        ImplicitLocOpBuilder tb(loc, ifOp.getThenBodyBuilder());
        Value result = isArg ? vi : narrow(tb, v);
        result = toType(tb, loc, result,
                        cast<MemRefType>(resultBuf.getType()).getElementType());
        SmallVector<Value> storeIdx(outIdx);
        if (!resultTensor)
          storeIdx.assign({cIdx(tb, 0)});
        memref::StoreOp::create(tb, result, resultBuf, storeIdx);
        scf::YieldOp::create(ib);
      });
  barrier(b);
  if (resultTensor) {
    buffers[op.getResult()] = resultBuf;
  } else {
    // Every thread reads the scalar, and no barrier follows: the next
    // write of a tile syncs first (the one-element buffer may share its
    // bytes with a later tile: dsa_topk's next chunk at one stage raced).
    Value v = memref::LoadOp::create(b, resultBuf, ValueRange{cIdx(b, 0)});
    op.getResult().replaceAllUsesWith(toType(b, b.getLoc(), v, resultElt));
    unsyncedReads = true;
  }
  toErase.push_back(op);
  return success();
}

LogicalResult KernelLowering::lowerScanSimt(ScanOp op) {
  // Each line along the axis goes to a group of G lanes of one warp (G the
  // largest power of two up to 32 and the axis length); lane l owns the l-th
  // of G consecutive chunks of the line. A lane combines its chunk, a
  // butterfly of xor shuffles gives every lane the combination of the
  // chunks before its own (its exclusive prefix), and the lane rescans its
  // chunk from that prefix, writing the result.
  auto type = op.getSrc().getType();
  auto src = bufferOf(op.getSrc(), op);
  if (failed(src))
    return failure();
  Type elt = type.getElementType();
  int64_t axis = op.getAxis();
  ReduceKind kind = op.getKind();
  bool reverse = op.getReverse();
  ImplicitLocOpBuilder b(op.getLoc(), op);
  Value out = allocTile(type, op.getLoc());
  SmallVector<int64_t> lineShape(type.getShape());
  lineShape.erase(lineShape.begin() + axis);
  int64_t lineCount = 1;
  for (int64_t s : lineShape)
    lineCount *= s;
  ShuffleType st(b, elt);
  Type work = st.work;
  auto widen = [&](ImplicitLocOpBuilder &ib, Value v) { return st.widen(ib, v); };
  auto narrow = [&](ImplicitLocOpBuilder &ib, Value v) { return st.narrow(ib, v); };
  int64_t axisSize = type.getDimSize(axis);
  int64_t group = 1;
  while (group * 2 <= std::min<int64_t>(32, axisSize))
    group *= 2;
  int64_t chunk = (axisSize + group - 1) / group;
  int64_t groups = simt->numThreads / group;
  int64_t rounds = (lineCount + groups - 1) / groups;
  Value tid = simt->threadId;
  Value gi = arith::DivUIOp::create(b, tid, cIdx(b, group));
  Value li = arith::RemUIOp::create(b, tid, cIdx(b, group));
  TypedAttr ident = reduceIdentity(b, kind, work);
  scf::ForOp::create(
      b, cIdx(b, 0), cIdx(b, rounds), cIdx(b, 1), ValueRange{},
      [&](OpBuilder &ob, Location loc, Value round, ValueRange) {
        ImplicitLocOpBuilder ib(loc, ob);
        Value o = arith::AddIOp::create(
            ib, arith::MulIOp::create(ib, round, cIdx(ib, groups)), gi);
        Value valid = arith::CmpIOp::create(ib, arith::CmpIPredicate::ult, o,
                                            cIdx(ib, lineCount));
        // Lanes past the last line scan line 0 without writing, so that
        // every lane of a warp reaches the shuffles.
        Value oc = arith::SelectOp::create(ib, valid, o, cIdx(ib, 0));
        SmallVector<Value> lineIdx =
            lineShape.empty() ? SmallVector<Value>{}
                              : delinearize(ib, oc, lineShape);
        // This lane's chunk, in scan order: [lo, hi).
        Value lo = arith::MulIOp::create(ib, li, cIdx(ib, chunk));
        Value hi = arith::MinUIOp::create(
            ib, arith::AddIOp::create(ib, lo, cIdx(ib, chunk)),
            cIdx(ib, axisSize));
        lo = arith::MinUIOp::create(ib, lo, hi);
        auto at = [&](ImplicitLocOpBuilder &lb, Value a) {
          Value pos = reverse ? Value(arith::SubIOp::create(
                                    lb, cIdx(lb, axisSize - 1), a))
                              : a;
          SmallVector<Value> idx(lineIdx);
          idx.insert(idx.begin() + axis, pos);
          return idx;
        };
        Value identV = arith::ConstantOp::create(ib, ident);
        auto total = scf::ForOp::create(
            ib, lo, hi, cIdx(ib, 1), ValueRange{identV},
            [&](OpBuilder &lb2, Location l2, Value a, ValueRange it) {
              ImplicitLocOpBuilder lb(l2, lb2);
              Value x = widen(lb, memref::LoadOp::create(lb, *src, at(lb, a)));
              scf::YieldOp::create(lb, combine(lb, kind, it[0], x));
            });
        // Butterfly: after the step of `off`, `sum` is the combination of
        // this lane's aligned block of 2 off lanes and `before` that of the
        // lanes before this one inside it (the partner's block comes first
        // when this lane is in the upper half).
        Value sum = total.getResult(0);
        Value before = identV;
        for (int64_t off = 1; off < group; off *= 2) {
          Value other = shuffleXor(ib, sum, off);
          Value upper = arith::CmpIOp::create(
              ib, arith::CmpIPredicate::ne,
              arith::AndIOp::create(ib, li, cIdx(ib, off)), cIdx(ib, 0));
          before = arith::SelectOp::create(
              ib, upper, combine(ib, kind, other, before), before);
          sum = combine(ib, kind, sum, other);
        }
        auto ifOp = scf::IfOp::create(ib, TypeRange{}, valid, false);
        ImplicitLocOpBuilder tb(loc, ifOp.getThenBodyBuilder());
        scf::ForOp::create(
            tb, lo, hi, cIdx(tb, 1), ValueRange{before},
            [&](OpBuilder &lb2, Location l2, Value a, ValueRange it) {
              ImplicitLocOpBuilder lb(l2, lb2);
              SmallVector<Value> idx = at(lb, a);
              Value x = widen(lb, memref::LoadOp::create(lb, *src, idx));
              Value r = combine(lb, kind, it[0], x);
              Value stored = toType(
                  lb, l2, narrow(lb, r),
                  cast<MemRefType>(out.getType()).getElementType());
              memref::StoreOp::create(lb, stored, out, idx);
              scf::YieldOp::create(lb, r);
            });
        scf::YieldOp::create(ib);
      });
  barrier(b);
  buffers[op.getResult()] = out;
  toErase.push_back(op);
  return success();
}

} // namespace mlir::kiln::detail
