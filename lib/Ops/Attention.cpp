//===- Attention.cpp - Block-sparse attention (FlexAttention's BlockMask) --===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// One program per (query block, batch x query head). It walks the key blocks
// listed for it: first the partial blocks (the mask is evaluated per element:
// keys past the sequence, the built-in mask, the user mask_mod), then the full
// blocks (no mask). Scores go through score_mod, then an online softmax
// (running max m, denominator l, rescaled accumulator). A row that sees no
// key gets out = 0 and lse = -inf. GQA/MQA: query head h reads key/value
// head h / group.
//
//===----------------------------------------------------------------------===//

#include "OpDefs.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Matchers.h"

#include <cfloat>
#include <cmath>
#include <tuple>
#include <utility>

namespace kiln::ops {
using namespace mlir;
namespace kd = mlir::kiln;

/// The key block size: `block_kv`, or `block` when it is 0 (square blocks).
static int64_t keyBlock(const Config &c) {
  int64_t kv = c.getInt("block_kv");
  return kv == 0 ? c.getInt("block") : kv;
}

/// pack_gqa's refusal of what may depend on the head. A user's score_mod
/// is refused where it arrives (buildRegistered: the built-in softcap also
/// comes as a score mod, and it does not), a mask_mod or profile here.
static llvm::Error packGqaRefusal() {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "block_sparse_attention: pack_gqa takes no "
                                 "mask_mod, score_mod or profile");
}

llvm::Error buildBlockSparseAttention(ModuleOp module,
                                                 const Config &c,
                                                 const MaskMod &maskMod,
                                                 const ScoreMod &scoreMod) {
  MLIRContext *ctx = module.getContext();
  const int64_t D = c.getInt("head_dim"), BMq = c.getInt("block"),
                BN = keyBlock(c);
  const int64_t group = c.getInt("gqa_group");
  if (D <= 0 || BMq <= 0 || BN <= 0 || group <= 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "block_sparse_attention: head_dim, block, "
                                   "block_kv and gqa_group must be positive");
  // pack_gqa: a program takes the query block of every head of a GQA group
  // (their rows stacked: head-major, BMq query rows each), so the group's
  // keys and values are read once, not once per query head. The block
  // lists are the group's first head's (kiln.ops packs only where every
  // head of a group has the same lists) and nothing may depend on the head
  // (no mask_mod or score_mod: buildRegistered refuses them).
  const bool pack = c.getInt("pack_gqa") != 0;
  if (pack && (maskMod || c.getInt("profile")))
    return packGqaRefusal();
  const int64_t BM = pack ? BMq * group : BMq; // the program's rows
  const std::string mask = c.getString("mask");
  if (c.getInt("one_loop") && c.getInt("overlap"))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "block_sparse_attention: one_loop and overlap "
                                   "cannot be combined (the overlap is a schedule "
                                   "of the full blocks' own loop)");
  // The masks compare int32 positions; softcap multiplies by 1 / cap.
  const int64_t window = c.getInt("window"), prefix = c.getInt("prefix");
  const double cap = c.getFloat("softcap");
  if (mask == "sliding_window" && (window < 1 || window > INT32_MAX))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "block_sparse_attention: window must be in "
                                   "[1, 2^31 - 1], got %lld", (long long)window);
  if (mask == "prefix_lm" && (prefix < 0 || prefix > INT32_MAX))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "block_sparse_attention: prefix must be in "
                                   "[0, 2^31 - 1], got %lld", (long long)prefix);
  if (!(cap == 0 || (cap >= FLT_MIN && cap <= FLT_MAX)))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "block_sparse_attention: softcap must be 0 "
                                   "(off) or a positive normal float, got %g",
                                   cap);
  Type f32 = Float32Type::get(ctx), i32 = IntegerType::get(ctx, 32),
       i64 = IntegerType::get(ctx, 64);
  // q, k and v in `dtype`; scores, softmax state and lse in f32; out in
  // `out_dtype` (f32 by default; bf16/f16 round the normalized f32 output
  // once, as flex_attention and SDPA return it for bf16/f16 inputs).
  Type t = elementType(ctx, c.getString("dtype"));
  Type outT = elementType(ctx, c.getString("out_dtype"));
  const bool lowPrecision = t != f32;
  auto P = [&](Type ty) { return kd::PtrType::get(ctx, ty); };
  std::vector<KernelBuilder::Arg> args = {
      {"q", P(t)},            {"k", P(t)},            {"v", P(t)},
      {"out", P(outT)},       {"lse", P(f32)},        {"kv_num", P(i32)},
      {"kv_idx", P(i32)},     {"full_num", P(i32)},   {"full_idx", P(i32)},
      {"doc_ids", P(i32)},    {"batch", i64},         {"heads", i64},
      {"seq_q", i64},         {"seq_kv", i64},        {"nqb", i64},
      {"maxb", i64},          {"scale", f32}};
  // profile: a trailing i64 [programs, 6] per program, in launch order: five
  // clock readings and the processor (docs/ops.md, "Profiling a program").
  const bool profile = c.getInt("profile") != 0;
  if (profile)
    args.push_back({"stamps", P(i64)});
  KernelBuilder k(module, "block_sparse_attention", args, 2, &c.statics);
  Value entryClock = profile ? k.clock() : Value();
  Value batch = k.arg("batch"), heads = k.arg("heads"), seqQ = k.arg("seq_q"),
        seqKV = k.arg("seq_kv"), nqb = k.arg("nqb"), maxb = k.arg("maxb");
  // Programs start in launch order (x fastest), so the query blocks go from
  // the last to the first, each over every (batch, head): with a causal or
  // sliding-window mask the longest programs start first and the short ones
  // fill the last wave (longest-processing-time-first). At seq 4096, block
  // 128 and 16 heads on 132 SMs, a causal launch in the plain order ends 85
  // block-times after it starts, this order 65: the ideal is 64. The grid stays
  // (query blocks, batch x heads); this is a bijection of it.
  Value np0 = k.numPrograms(0), np1 = k.numPrograms(1);
  Value linear = k.add(k.pid(0), k.mul(np0, k.pid(1)));
  // The readings: at entry, before the partial blocks' loop (both lists'
  // counts and first indices read, q issued), after it, after the full
  // blocks' loop, after lse's store (before out's); then the processor (SM)
  // that ran the program, whose clock they read. Each but the second
  // (held below) is stored when taken, by one thread, so that no reading
  // stays live in a register across a loop. (None after out's store: a store after
  // it would make its TMA box wait for its global writes, which it otherwise
  // does not; the time from that reading to the SM's next program holds
  // out's store, the exit and the next launch.)
  constexpr int64_t kStamps = 6;
  Value vStamps;
  auto stamp = [&](int64_t i, Value t) {
    if (profile)
      k.store(k.splat(t ? t : k.clock(), {1, 1}), vStamps, {linear, k.cIndex(i)});
  };
  // Column 1's reading is held in a 1 x 1 tile (shared memory on a GPU) and
  // stored just before column 2's: a global store there, between the
  // counts' wait and the first fill, would end the overlap of q's load with
  // that fill (deferLastAsyncCopyGroup stops at writes of global memory),
  // and the profiled prologue would not be the timed one.
  Value heldStamp;
  auto holdStamp = [&] {
    if (profile)
      heldStamp = k.splat(k.clock(), {1, 1});
  };
  auto storeHeldStamp = [&] {
    if (heldStamp)
      k.store(heldStamp, vStamps, {linear, k.cIndex(1)});
    heldStamp = Value();
  };
  if (profile) {
    vStamps = k.denseView(k.arg("stamps"), {k.mul(np0, np1), k.cIndex(kStamps)});
    stamp(0, entryClock);
    stamp(5, k.convert(k.processorId(), i64));
  }
  Value qb = k.sub(k.sub(np0, k.cIndex(1)), k.div(linear, np1));
  Value kvHeads = k.div(k.toIndex(heads), k.cIndex(group));
  // The grid's y: (batch, query head), or (batch, KV head) with pack_gqa;
  // bh the (batch, head) whose block lists the program reads.
  Value b, h, bh, bkv;
  if (pack) {
    bkv = k.rem(linear, np1);
    b = k.div(bkv, kvHeads);
    h = k.mul(k.rem(bkv, kvHeads), k.cIndex(group));
    bh = k.add(k.mul(b, k.toIndex(heads)), h);
  } else {
    bh = k.rem(linear, np1);
    b = k.div(bh, k.toIndex(heads));
    h = k.rem(bh, k.toIndex(heads));
    bkv = k.add(k.mul(b, kvHeads), k.div(h, k.cIndex(group)));
  }
  Value bhAll = k.mul(k.toIndex(batch), k.toIndex(heads));
  Value q0 = k.mul(qb, k.cIndex(BMq));
  // pack_gqa: q, out and lse seen as [batch x KV heads, group, ...].
  Value bkvAll = k.mul(k.toIndex(batch), kvHeads);
  auto groupView = [&](const char *arg, bool rows) {
    SmallVector<Value> sizes = {bkvAll, k.cIndex(group), seqQ};
    SmallVector<Value> strides = {k.mul(k.mul(k.cIndex(group), k.toIndex(seqQ)),
                                        k.cIndex(rows ? D : 1)),
                                  k.mul(k.toIndex(seqQ), k.cIndex(rows ? D : 1)),
                                  k.cIndex(rows ? D : 1)};
    if (rows) {
      sizes.push_back(k.cIndex(D));
      strides.push_back(k.cIndex(1));
    }
    return k.view(k.arg(arg), sizes, strides);
  };

  Value vq = k.denseView(k.arg("q"), {bhAll, seqQ, k.cIndex(D)});
  Value vk = k.denseView(k.arg("k"), {k.mul(k.toIndex(batch), kvHeads), seqKV, k.cIndex(D)});
  Value vv = k.denseView(k.arg("v"), {k.mul(k.toIndex(batch), kvHeads), seqKV, k.cIndex(D)});
  Value vo = k.denseView(k.arg("out"), {bhAll, seqQ, k.cIndex(D)});
  Value vl = k.denseView(k.arg("lse"), {bhAll, seqQ});
  Value vNum = k.denseView(k.arg("kv_num"), {bhAll, nqb});
  Value vIdx = k.denseView(k.arg("kv_idx"), {bhAll, nqb, maxb});
  Value vFullNum = k.denseView(k.arg("full_num"), {bhAll, nqb});
  Value vFullIdx = k.denseView(k.arg("full_idx"), {bhAll, nqb, maxb});
  // doc_ids [batch, max(seq_q, seq_kv)]: position i's document, for queries
  // and keys alike (row stride max(seq_q, seq_kv) in both views).
  Value docLen = k.max(k.toIndex(seqQ), k.toIndex(seqKV));
  Value vDoc = k.view(k.arg("doc_ids"), {batch, seqQ}, {docLen, k.cIndex(1)});
  Value vDocKV = k.view(k.arg("doc_ids"), {batch, seqKV}, {docLen, k.cIndex(1)});

  // Both lists' block counts and first block indices, read with q: four
  // one-element loads whose copies (on a GPU) are issued with q's, their
  // waits merged into one (deferAsyncCopyWaits) before any is extracted.
  // Each loop's first block then takes its index from here (kb0), not from
  // a read at the loop: a loop's fill issued its keys' and values' loads only after its
  // count, then its first index, had come back from memory, two round trips
  // in a row, and the full blocks' loop paid both after the partial blocks'
  // loop had ended. A list's entry 0 is read even when its count is 0 (and
  // goes unused then; a masked read, 0 when the lists have no columns).
  Value zero = k.cIndex(0);
  Value numT = k.load(vNum, {bh, qb}, {1, 1}, 0);
  Value fullNumT = k.load(vFullNum, {bh, qb}, {1, 1}, 0);
  Value idx0T = k.load(vIdx, {bh, qb, zero}, {1, 1, 1}, 0);
  Value fullIdx0T = k.load(vFullIdx, {bh, qb, zero}, {1, 1, 1}, 0);
  // q last: on a GPU its copies are the last group, and the counts' wait
  // lets it stay in flight (deferLastAsyncCopyGroup) until the first use of
  // its bytes, past each loop's mbarrier set-up and the first fill's issue:
  // q's and the first keys' and values' loads overlap.
  Value qt = pack ? k.reshape(k.load(groupView("q", true), {bkv, k.cIndex(0), q0, k.cIndex(0)},
                                     {1, group, BMq, D}),
                              {BM, D})
                   : k.reshape(k.load(vq, {bh, q0, k.cIndex(0)}, {1, BM, D}), {BM, D});
  // (The two loops take the full list's values out where its loop starts:
  // kept in registers across the partial blocks' loop they cost a register
  // there, and at block 128 on mma.sync 8-16 bytes of spills.)
  Value nPart = k.toIndex(k.extract(numT, {0, 0}));
  Value kbPart0 = k.extract(idx0T, {0, 0, 0});
  auto fullFirst = [&] {
    return std::make_pair(k.toIndex(k.extract(fullNumT, {0, 0})),
                          k.extract(fullIdx0T, {0, 0, 0}));
  };
  // Block j's index: kb0 for j = 0 (a constant there in the loop's fill,
  // where the read of entry 0 then folds away), else read at the loop.
  auto blockIndex = [&](Value j, Value kb0, Value later) {
    return k.select(k.cmp(Cmp::EQ, j, zero), kb0, later);
  };
  // The softmax runs in base 2, as FlashAttention and Triton's tutorial do:
  // scores s2 = s c with c = scale log2(e), so p = 2^(s2 - m2) is one fma
  // (s c - m2, on NVIDIA) and the GPU's ex2 per score, and the rescale
  // 2^(m2_old - m2_new) subtracts the very m2 values p was shifted by (the
  // fma's unrounded s c puts the maximum's p within half an ulp of m2 of 1;
  // that shift is per row and cancels). The log-sum-exp goes back to base e
  // at the end. The scale and log2(e) are one factor unless a score_mod
  // needs the scaled scores in base e.
  const double log2e = 1.4426950408889634;
  // The scale must be positive (as in FlashAttention, which takes the row
  // maximum of the unscaled scores too): kiln.ops refuses others, and where
  // the kernel relies on it (bf16/f16 without a score_mod, below) a scale that
  // is not > 0 makes every output NaN rather than a wrong number.
  Value scale2 = k.mul(k.arg("scale"), k.cF32(log2e));
  if (lowPrecision && !scoreMod && !c.getInt("overlap"))
    scale2 = k.select(k.cmp(Cmp::GT, k.arg("scale"), k.cF32(0.0)), scale2,
                      k.cF32(NAN));
  // f32: scale q once. bf16/f16: q stays in its type for the dot (f32
  // accumulation) and the scale is applied to the f32 scores instead.
  Value qs = lowPrecision ? qt : k.mul(qt, scoreMod ? k.arg("scale") : scale2);
  // Each row's query position: row r is query q0 + r (pack_gqa: q0 + r % BMq).
  Value rowPos = k.arange(BM);
  if (pack)
    rowPos = k.rem(rowPos, k.splat(k.cI32(BMq), {BM}));
  Value qIdx = k.expand(k.add(rowPos, k.convert(q0, i32)), 1); // [BM, 1]
  Value negInf = k.cF32(-INFINITY);
  Value zeroAcc = k.constant(k.tile({BM, D}, f32), 0.0);
  Value zeroS = k.constant(k.tile({BM, BN}, f32), 0.0);
  Value docQ;
  if (mask == "document")
    docQ = k.expand(pack ? k.reshape(k.broadcastTo(k.load(vDoc, {b, q0}, {1, BMq}, -1),
                                                   {group, BMq}),
                                     {BM})
                         : k.reshape(k.load(vDoc, {b, q0}, {1, BM}, -1), {BM}),
                    1);

  // applyMask: the block is partial (the built-in mask and mask_mod per
  // element). maskWhen (one_loop): a runtime i1, partial when true, under an
  // scf.if so that full blocks skip the mask's work.
  auto block = [&](Value kb, bool applyMask, Value maskWhen, ValueRange state) {
    Value m = state[0], l = state[1], acc = state[2];
    Value krow = k.mul(k.toIndex(kb), k.cIndex(BN));
    Value kt = k.reshape(k.load(vk, {bkv, krow, k.cIndex(0)}, {1, BN, D}), {BN, D});
    Value s = k.dot(qs, k.trans(kt), zeroS);
    // bf16/f16 without a score_mod: s stays unscaled. The row maximum of
    // s c is c max(s) for c > 0 (rounding is monotonic, so bit for bit), and
    // p = 2^(s c - m2) is one fma per score: the scale costs one product per
    // row, not one per score. (Not with overlap: at block 128 and 8 warps
    // the carried unscaled scores then spill 100 bytes.)
    const bool scaleLate = lowPrecision && !scoreMod && !c.getInt("overlap");
    if (lowPrecision && !scaleLate)
      s = k.mul(s, scoreMod ? k.arg("scale") : scale2);
    Value kvIdx = k.expand(k.add(k.arange(BN), k.convert(krow, i32)), 0); // [1, BN]
    if (scoreMod) {
      // Back to base 2 after the score_mod. A mod that ends in a product by
      // a constant (softcap: cap tanh(s / cap)) takes log2(e) into it.
      Value r = scoreMod(k, s, b, h, qIdx, kvIdx);
      double factor = log2e;
      FloatAttr cst;
      if (auto mul = r.getDefiningOp<arith::MulFOp>(); mul && mul->use_empty())
        if (auto sp = mul.getRhs().getDefiningOp<kd::SplatOp>())
          if (matchPattern(sp.getOperand(), m_Constant(&cst)) &&
              std::isnormal(float(factor * cst.getValueAsDouble()))) {
            factor *= cst.getValueAsDouble();
            r = mul.getLhs();
            mul->erase();
          }
      s = k.mul(r, k.cF32(factor));
    }
    auto masked = [&](Value s) -> Value {
      // The built-in masks as a range of keys per query row, [lo, hi] with
      // hi < seq_kv: one or two comparisons per score against values
      // computed once per row (causal: kv <= min(q, seq_kv - 1); prefix
      // LM: kv <= min(max(q, prefix - 1), seq_kv - 1); sliding window: and
      // kv >= q - window + 1), instead of a comparison per rule and their
      // conjunction per score.
      Value lastKV = k.sub(k.convert(seqKV, i32), k.cI32(1));
      Value keep, builtin;
      if (mask == "causal" || mask == "sliding_window") {
        keep = k.cmp(Cmp::LE, kvIdx, k.min(qIdx, lastKV));
        if (mask == "sliding_window")
          keep = k.andI(keep, k.cmp(Cmp::GE, kvIdx,
                                    k.sub(qIdx, k.cI32(c.getInt("window") - 1))));
      } else if (mask == "prefix_lm") {
        Value hi = k.min(k.max(qIdx, k.cI32(c.getInt("prefix") - 1)), lastKV);
        keep = k.cmp(Cmp::LE, kvIdx, hi);
      } else {
        keep = k.cmp(Cmp::LE, kvIdx, lastKV);
        if (mask == "document") {
          Value docK = k.expand(k.reshape(k.load(vDocKV, {b, krow}, {1, BN}, -2), {BN}), 0);
          builtin = k.cmp(Cmp::EQ, docQ, docK);
        }
      }
      keep = k.broadcastTo(keep, {BM, BN});
      if (builtin)
        keep = k.andI(keep, k.broadcastTo(builtin, {BM, BN}));
      if (maskMod)
        keep = k.andI(keep, k.broadcastTo(maskMod(k, b, h, qIdx, kvIdx), {BM, BN}));
      return k.select(keep, s, negInf);
    };
    if (applyMask && maskWhen) {
      Value raw = s;
      s = k.ifElse(maskWhen, TypeRange{s.getType()},
                   [&] { return SmallVector<Value>{masked(raw)}; },
                   [&] { return SmallVector<Value>{raw}; })[0];
    } else if (applyMask) {
      s = masked(s);
    }
    Value rowMax = k.reduce(kd::ReduceKind::max, s, 1);
    if (scaleLate)
      rowMax = k.mul(rowMax, scale2);
    Value mNew = k.max(m, rowMax);
    Value mSafe = k.select(k.cmp(Cmp::EQ, mNew, negInf), k.cF32(0.0), mNew);
    Value p = k.exp2(k.sub(scaleLate ? k.mul(s, scale2) : s,
                           k.broadcastTo(k.expand(mSafe, 1), {BM, BN})));
    Value alpha = k.exp2(k.sub(m, mSafe));
    Value lNew = k.add(k.mul(l, alpha), k.reduce(kd::ReduceKind::sum, p, 1));
    Value vt = k.reshape(k.load(vv, {bkv, krow, k.cIndex(0)}, {1, BN, D}), {BN, D});
    // bf16/f16: P is rounded to v's type for the second dot, as
    // FlashAttention does; accumulation stays f32.
    Value accNew = k.dot(k.convert(p, t), vt, k.mul(acc, k.broadcastTo(k.expand(alpha, 1), {BM, D})));
    return SmallVector<Value>{mNew, lNew, accNew};
  };

  SmallVector<Value> state = {k.constant(k.tile({BM}, f32), -INFINITY),
                              k.constant(k.tile({BM}, f32), 0.0), zeroAcc};
  if (c.getInt("one_loop")) {
    // One loop over the partial blocks then the full ones: one pipeline
    // (one fill and one drain per program instead of two: the first full
    // block's keys and values are fetched while the last partial block
    // runs). The mask runs under a branch on j < kv_num, whose scores stay
    // in registers on the GPU (an scf.if over fragments, lowerFragmentIf).
    // Both lists are read at clamped indices and one index is selected.
    // The same blocks in the same order as the two loops: the same bits.
    holdStamp();
    Value lastSlot = k.max(k.sub(k.toIndex(maxb), k.cIndex(1)), k.cIndex(0));
    Value nFull, kbFull0;
    std::tie(nFull, kbFull0) = fullFirst();
    Value kbFirst = k.select(k.cmp(Cmp::GT, nPart, zero), kbPart0, kbFull0);
    state = k.forLoop(
        k.cIndex(0), k.add(nPart, nFull), k.cIndex(1), state,
        [&](Value j, ValueRange it) {
          Value isPartial = k.cmp(Cmp::LT, j, nPart);
          Value jp = k.min(j, lastSlot);
          Value jf = k.min(k.max(k.sub(j, nPart), k.cIndex(0)), lastSlot);
          Value later = k.select(isPartial, k.loadScalar(vIdx, {bh, qb, jp}, 0),
                                 k.loadScalar(vFullIdx, {bh, qb, jf}, 0));
          return block(blockIndex(j, kbFirst, later), true, isPartial, it);
        });
    storeHeldStamp();
    stamp(2, Value());
    stamp(3, Value());
  }
  for (bool partial : {true, false}) {
    if (c.getInt("one_loop"))
      break;
    Value idxView = partial ? vIdx : vFullIdx;
    Value count = nPart, kb0 = kbPart0;
    if (!partial)
      std::tie(count, kb0) = fullFirst();
    if (partial)
      holdStamp();
    state = k.forLoop(k.cIndex(0), count, k.cIndex(1), state,
                      [&](Value j, ValueRange it) {
                        Value later = k.loadScalar(idxView, {bh, qb, j}, 0);
                        return block(blockIndex(j, kb0, later), partial, Value(), it);
                      });
    storeHeldStamp();
    stamp(partial ? 2 : 3, Value());
    // On sm_90a the scores of the next full block are computed while this
    // one's softmax runs (GPUOverlap.cpp; it costs one more q kᵀ per loop,
    // so not for the partial blocks, one or two per query block). Not with
    // a score_mod either: the next scores' registers stay live across it,
    // and softcap's tanh at block 128 and 8 warps then spills 284 bytes
    // (20 without the overlap).
    if (!partial && !scoreMod && c.getInt("overlap"))
      state[0].getDefiningOp()->setAttr("kiln.overlap",
                                        UnitAttr::get(state[0].getContext()));
  }
  Value l = state[1];
  Value seesNothing = k.cmp(Cmp::EQ, l, k.cF32(0.0));
  Value lSafe = k.select(seesNothing, k.cF32(1.0), l);
  // One division per row, then products (as FlashAttention): within 1.5 ulp.
  Value rl = k.div(k.constant(k.tile({BM}, f32), 1.0), lSafe);
  Value o = k.mul(state[2], k.broadcastTo(k.expand(rl, 1), {BM, D}));
  // A row that sees no key is 0 (its lse -inf), whatever its accumulator
  // holds: a NaN value at a key hidden inside a computed block made it NaN
  // (0 x NaN in P V), where the docs promise 0.
  o = k.select(k.broadcastTo(k.expand(seesNothing, 1), {BM, D}),
               k.constant(k.tile({BM, D}, f32), 0.0), o);
  if (outT != f32)
    o = k.convert(o, outT);
  // lse first (a row the threads store), out last: on sm_90a out's TMA box
  // is then the kernel's last access, which waits only until its shared
  // memory has been read (the kernel's end completes the writes). Stored
  // first, the box waited for its writes (an L2 round trip) before lse's
  // store, in every program. The last reading is taken before out's store
  // for the same reason: a store after the box would make it wait.
  Value lse = k.add(k.mul(state[0], k.cF32(1.0 / log2e)), k.log(l));
  if (pack) {
    k.store(k.reshape(lse, {1, group, BMq}), groupView("lse", false), {bkv, k.cIndex(0), q0});
    k.store(k.reshape(o, {1, group, BMq, D}), groupView("out", true),
            {bkv, k.cIndex(0), q0, k.cIndex(0)});
  } else {
    k.store(k.expand(lse, 0), vl, {bh, q0});
    stamp(4, Value());
    k.store(k.reshape(o, {1, BM, D}), vo, {bh, q0, k.cIndex(0)});
  }
  k.finish();
  return llvm::Error::success();
}

/// Checks that `fn` (a func.func of the fused functions) has the signature
/// the kernel calls it with, and a body: inlineFunction cannot fail then
/// (its callers rely on it; a declaration crashed the build).
static llvm::Error checkModSignature(Operation *op, llvm::StringRef what,
                                     ArrayRef<Type> args, Type result) {
  auto fn = dyn_cast<func::FuncOp>(op);
  if (fn && fn.getBody().getBlocks().size() != 1)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   what + " must be a func.func with one block (a body), "
                                          "got a declaration or several blocks");
  auto str = [](auto range) {
    std::string s;
    llvm::raw_string_ostream os(s);
    llvm::interleaveComma(range, os);
    return s;
  };
  if (!fn || fn.getArgumentTypes() != args || fn.getResultTypes().size() != 1 ||
      fn.getResultTypes()[0] != result)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        what + " must take (" + str(args) + ") and return " + str(ArrayRef<Type>{result}) +
            (fn ? ", got (" + str(fn.getArgumentTypes()) + ") -> (" +
                      str(fn.getResultTypes()) + ")"
                : std::string(", got no func.func")));
  return llvm::Error::success();
}

/// The registered operator: built-in masks, soft-capping, and the mask_mod /
/// score_mod functions of `c.mods` (from Python's @kiln.jit) inlined.
static llvm::Error buildRegistered(ModuleOp module, const Config &c) {
  MLIRContext *ctx = module.getContext();
  int64_t BM = c.getInt("block"), BN = keyBlock(c);
  if (BM <= 0 || BN <= 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "block_sparse_attention: block and block_kv must be "
                                   "positive");
  Type i32 = IntegerType::get(ctx, 32), f32 = Float32Type::get(ctx),
       i1 = IntegerType::get(ctx, 1);
  Type qTy = RankedTensorType::get({BM, 1}, i32), kvTy = RankedTensorType::get({1, BN}, i32);
  Type sTy = RankedTensorType::get({BM, BN}, f32), mTy = RankedTensorType::get({BM, BN}, i1);
  MaskMod maskMod;
  ScoreMod scoreMod;
  if (Operation *fn = c.lookupMod("mask_mod")) {
    if (auto e = checkModSignature(fn, "mask_mod", {i32, i32, qTy, kvTy}, mTy))
      return e;
    maskMod = [fn, i32](KernelBuilder &k, Value b, Value h, Value q, Value kv) {
      auto r = inlineFunction(k, fn, {k.convert(b, i32), k.convert(h, i32), q, kv});
      return llvm::cantFail(std::move(r))[0];
    };
  }
  Operation *userScore = c.lookupMod("score_mod");
  if (userScore && c.getInt("pack_gqa"))
    return packGqaRefusal();
  if (userScore)
    if (auto e = checkModSignature(userScore, "score_mod", {sTy, i32, i32, qTy, kvTy}, sTy))
      return e;
  double cap = c.getFloat("softcap");
  if (userScore || cap > 0)
    scoreMod = [userScore, cap, i32](KernelBuilder &k, Value s, Value b, Value h, Value q,
                                     Value kv) {
      if (userScore)
        s = llvm::cantFail(inlineFunction(
            k, userScore, {s, k.convert(b, i32), k.convert(h, i32), q, kv}))[0];
      if (cap > 0) {
        // Gemma-style soft capping: cap * tanh(s / cap).
        // s / cap as s (1 / cap): a division is a long sequence on GPUs;
        // the reciprocal's rounding is 2^-24 relative.
        Value t = math::TanhOp::create(k.builder(), k.loc(), k.mul(s, k.cF32(1.0 / cap)));
        s = k.mul(t, k.cF32(cap));
      }
      return s;
    };
  return buildBlockSparseAttention(module, c, maskMod, scoreMod);
}

/// Counts, per (batch x head, query block, key block), the (q, kv) pairs that
/// are visible (inside both sequences and kept by mask_mod): the input of the
/// host-side block-mask builder when mask_mod is device code.
static llvm::Error buildBlockMaskCounts(ModuleOp module, const Config &c) {
  MLIRContext *ctx = module.getContext();
  int64_t BM = c.getInt("block"), BN = keyBlock(c);
  if (BM <= 0 || BN <= 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "block_mask_counts: block and block_kv must be positive");
  Type i32 = IntegerType::get(ctx, 32), i64 = IntegerType::get(ctx, 64),
       i1 = IntegerType::get(ctx, 1);
  Type qTy = RankedTensorType::get({BM, 1}, i32), kvTy = RankedTensorType::get({1, BN}, i32);
  Operation *fn = c.lookupMod("mask_mod");
  if (fn)
    if (auto e = checkModSignature(fn, "mask_mod", {i32, i32, qTy, kvTy},
                                   RankedTensorType::get({BM, BN}, i1)))
      return e;
  KernelBuilder k(module, "block_mask_counts",
                  {{"counts", kd::PtrType::get(ctx, i32)}, {"heads", i64},
                   {"seq_q", i64}, {"seq_kv", i64}, {"nqb", i64}, {"nkb", i64}},
                  3, &c.statics);
  Value heads = k.arg("heads");
  Value qb = k.pid(0), kb = k.pid(1), bh = k.pid(2);
  Value b = k.div(bh, k.toIndex(heads)), h = k.rem(bh, k.toIndex(heads));
  Value qIdx = k.expand(k.add(k.arange(BM), k.convert(k.mul(qb, k.cIndex(BM)), i32)), 1);
  Value kvIdx = k.expand(k.add(k.arange(BN), k.convert(k.mul(kb, k.cIndex(BN)), i32)), 0);
  Value vis = k.andI(k.broadcastTo(k.cmp(Cmp::LT, qIdx, k.convert(k.arg("seq_q"), i32)), {BM, BN}),
                     k.broadcastTo(k.cmp(Cmp::LT, kvIdx, k.convert(k.arg("seq_kv"), i32)), {BM, BN}));
  if (fn) {
    auto r = inlineFunction(k, fn, {k.convert(b, i32), k.convert(h, i32), qIdx, kvIdx});
    if (!r)
      return r.takeError();
    vis = k.andI(vis, (*r)[0]);
  }
  Value n = k.reduce(kd::ReduceKind::sum,
                     k.reshape(k.select(vis, k.cI32(1), k.cI32(0)), {BM * BN}), 0);
  Value counts = k.denseView(k.arg("counts"), {k.mul(k.numPrograms(2), k.cIndex(1)),
                                               k.arg("nqb"), k.arg("nkb")});
  k.store(k.splat(n, {1, 1, 1}), counts, {bh, qb, kb});
  k.finish();
  return llvm::Error::success();
}

void registerAttentionOps(std::vector<OpInfo> &ops) {
  ops.push_back(
      {"block_sparse_attention",
       "FlexAttention-style block-sparse attention forward with built-in "
       "masks, GQA/MQA and score soft-capping; returns out and log-sum-exp",
       {dtypeParam(),
        {"out_dtype", Param::String, "f32",
         "element type of out (lse is f32): bf16/f16 halve the output's bytes",
         {"f32", "bf16", "f16"}},
        {"head_dim", Param::Int, "64", "head dimension D", {}},
        {"block", Param::Int, "64", "query block size (and key block size unless block_kv)", {}},
        {"block_kv", Param::Int, "0", "key block size; 0: the same as block", {}},
        {"mask", Param::String, "none", "mask applied inside partial blocks",
         {"none", "causal", "sliding_window", "prefix_lm", "document"}},
        {"window", Param::Int, "256", "sliding_window: keys with q - kv < window", {}},
        {"prefix", Param::Int, "0", "prefix_lm: keys < prefix are visible to all", {}},
        {"gqa_group", Param::Int, "1", "query heads per key/value head (GQA; MQA = heads)", {}},
        {"softcap", Param::Float, "0", "score_mod cap * tanh(s / cap) when > 0", {}},
        {"overlap", Param::Int, "0",
         "1: on sm_90a, the next full block's scores run during this one's softmax "
         "(off by default: 5-8% slower on an H200, docs/performance.md)",
         {}},
        {"one_loop", Param::Int, "0",
         "1: the partial and the full blocks in one loop, the mask under a branch (one "
         "pipeline fill per program instead of two; not measured on a GPU yet)",
         {}},
        {"pack_gqa", Param::Int, "0",
         "1: a program takes the query block of every head of a GQA group (block x "
         "gqa_group rows; grid (nqb, batch x KV heads)), reading their keys and values "
         "once; the group's heads must share their block lists (no mask_mod, score_mod "
         "or profile)",
         {}},
        {"profile", Param::Int, "0",
         "1: a trailing argument stamps (i64 [programs, 6]) gets each program's clock "
         "at entry, before and after the partial blocks, after the full blocks and "
         "after lse's store (before out's), then its processor (SM) (launch order: x fastest)",
         {}}},
       buildRegistered});
  ops.push_back({"block_mask_counts",
                 "per (batch x head, query block, key block), how many (q, kv) pairs "
                 "mask_mod keeps: builds a block mask from a device mask_mod",
                 {{"block", Param::Int, "64", "query block size", {}},
                  {"block_kv", Param::Int, "0", "key block size; 0: the same as block", {}}},
                 buildBlockMaskCounts});
}

} // namespace kiln::ops
