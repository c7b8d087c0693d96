//===- DSA.cpp - DeepSeek sparse attention: indexer, top-k, sparse attention ===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The three kernels of DeepSeek's sparse attention path:
//
//   dsa_indexer   I[t, s] = sum_j w[t, j] * ReLU(q[t, j, :] . k[s, :]),
//                 -inf where s is not visible (causal: s > q_offset + t)
//   dsa_topk      per row, the indices of the k largest scores (finite or
//                 +inf; NaN and -inf never count), in ascending index
//                 order; ties go to the lower index; -1 pads when fewer
//                 than k count
//   dsa_sparse_attention
//                 MQA attention of q [Sq, Hq, Dqk] over the selected rows of
//                 kv [Skv, Dqk] (values: the first Dv columns), -1 skipped;
//                 returns out [Sq, Hq, Dv] and lse [Sq, Hq]
//
//===----------------------------------------------------------------------===//

#include "OpDefs.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

#include <climits>
#include <cmath>

namespace kiln::ops {
using namespace mlir;
namespace kd = mlir::kiln;

static llvm::Error buildIndexer(ModuleOp module, const Config &c) {
  MLIRContext *ctx = module.getContext();
  int64_t H = c.getInt("index_heads"), D = c.getInt("index_dim"),
          BT = c.getInt("block_t"), BS = c.getInt("block_s");
  bool causal = c.getInt("causal") != 0;
  Type f32 = Float32Type::get(ctx), i32 = IntegerType::get(ctx, 32),
       i64 = IntegerType::get(ctx, 64);
  // q and k in `dtype`: f32, bf16 / f16 (f32 sums), or e4m3 (fp8 bytes, as
  // DeepSeek-V3.2's indexer keeps them; k with a per-key scale, q's scale
  // folded into w by the caller). w, the scores and out stay f32.
  std::string dtype = c.getString("dtype");
  const bool fp8 = dtype == "e4m3";
  Type t = fp8 ? Type(IntegerType::get(ctx, 8)) : elementType(ctx, dtype);
  auto P = [&](Type ty) { return kd::PtrType::get(ctx, ty); };
  SmallVector<KernelBuilder::Arg> args{{"q", P(t)}, {"w", P(f32)}, {"k", P(t)}};
  if (fp8)
    args.push_back({"k_scale", P(f32)});
  args.append({{"out", P(f32)}, {"tokens", i64}, {"keys", i64}, {"q_offset", i64}});
  KernelBuilder k(module, "dsa_indexer", args, 2, &c.statics);
  Value T = k.arg("tokens"), S = k.arg("keys");
  Value t0 = k.mul(k.pid(0), k.cIndex(BT)), s0 = k.mul(k.pid(1), k.cIndex(BS));
  Value vw = k.denseView(k.arg("w"), {T, k.cIndex(H)});
  Value vk = k.denseView(k.arg("k"), {S, k.cIndex(D)});
  Value kt = k.trans(k.load(vk, {s0, k.cIndex(0)}, {BS, D}));
  Value zero = k.constant(k.tile({BT, BS}, f32), 0.0);
  // Each head's query rows, [BT, D]: through a [BT, 1, D] block of q
  // [T, H, D] for f32; as a 2-D block of q viewed [T, H D] for the narrow
  // types, so that the dot's A is a plain load (wgmma's fp8 form reads it
  // in place: both operands K-major).
  Value vq = t == f32 ? k.denseView(k.arg("q"), {T, k.cIndex(H), k.cIndex(D)})
                      : k.denseView(k.arg("q"), {T, k.cIndex(H * D)});
  auto acc = k.forLoop(k.cIndex(0), k.cIndex(H), k.cIndex(1), {zero},
                       [&](Value j, ValueRange it) {
                         Value qj =
                             t == f32
                                 ? k.reshape(k.load(vq, {t0, j, k.cIndex(0)}, {BT, 1, D}),
                                             {BT, D})
                                 : k.load(vq, {t0, k.mul(j, k.cIndex(D))}, {BT, D});
                         Value sc = k.relu(fp8 ? k.dotFp8(qj, kt, zero, "e4m3", "e4m3")
                                               : k.dot(qj, kt, zero));
                         Value wj = k.load(vw, {t0, j}, {BT, 1});
                         return SmallVector<Value>{k.add(it[0], k.mul(sc, wj))};
                       });
  Value r = acc[0];
  // (relu(x) s = relu(x s) for the non-negative scales of fp8 keys.)
  if (fp8)
    r = k.mul(r, k.load(k.denseView(k.arg("k_scale"), {k.cIndex(1), S}),
                        {k.cIndex(0), s0}, {1, BS}));
  if (causal) {
    Value tIdx = k.expand(k.add(k.arange(BT), k.convert(k.add(t0, k.toIndex(k.arg("q_offset"))), i32)), 1);
    Value sIdx = k.expand(k.add(k.arange(BS), k.convert(s0, i32)), 0);
    r = k.select(k.cmp(Cmp::LE, sIdx, tIdx), r, k.cF32(-INFINITY));
  }
  k.store(r, k.denseView(k.arg("out"), {T, S}), {t0, s0});
  k.finish();
  return llvm::Error::success();
}

static llvm::Error buildTopK(ModuleOp module, const Config &c) {
  MLIRContext *ctx = module.getContext();
  int64_t K = c.getInt("k"), B = c.getInt("block");
  if (K <= 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "dsa_topk: k must be positive");
  Type f32 = Float32Type::get(ctx), i32 = IntegerType::get(ctx, 32),
       i64 = IntegerType::get(ctx, 64);
  auto P = [&](Type t) { return kd::PtrType::get(ctx, t); };
  KernelBuilder k(module, "dsa_topk",
                  {{"scores", P(f32)}, {"out", P(i32)}, {"tokens", i64}, {"keys", i64}},
                  1, &c.statics);
  OpBuilder &b = k.builder();
  Value T = k.arg("tokens"), S = k.arg("keys");
  Value t = k.pid(0);
  Value vs = k.denseView(k.arg("scores"), {T, S});
  Value vo = k.denseView(k.arg("out"), {T, k.cIndex(K)});
  // Order-preserving integer keys of the floats (signed compare = float
  // compare), and whether an element counts (finite or +inf).
  // The map between a float's bits and its key (its own inverse): negative
  // floats' magnitude bits flipped.
  auto flipNegative = [&](Value v) {
    auto tt = dyn_cast<RankedTensorType>(v.getType());
    auto cst = [&](int64_t c) { return tt ? k.splat(k.cI32(c), tt.getShape()) : k.cI32(c); };
    Value sign = arith::ShRSIOp::create(b, k.loc(), v, cst(31));
    Value flip = arith::AndIOp::create(b, k.loc(), sign, cst(0x7fffffff));
    return Value(arith::XOrIOp::create(b, k.loc(), v, flip));
  };
  auto keysOf = [&](Value x) {
    auto tt = dyn_cast<RankedTensorType>(x.getType());
    Type it = tt ? k.tile(tt.getShape(), i32) : i32;
    // -0.0 and +0.0 compare equal as floats: give them one key.
    x = k.select(k.cmp(Cmp::EQ, x, k.cF32(0.0)), k.cF32(0.0), x);
    return flipNegative(arith::BitcastOp::create(b, k.loc(), it, x));
  };
  auto validOf = [&](Value x) { return k.cmp(Cmp::GT, x, k.cF32(-INFINITY)); };
  auto ones = [&](Value mask) { return k.select(mask, k.cI32(1), k.cI32(0)); };
  // How many of row t's first n elements of `view` (read a block at a time,
  // `pad` past n) satisfy `hit`: per-lane counts carried by the loop (on the
  // CPU a register loop: the row streams through vector compares), summed
  // once after it.
  auto countRow = [&](Value view, Value n, double pad, llvm::function_ref<Value(Value)> hit) {
    Value zero = k.constant(k.tile({B}, i32), 0.0);
    Value counts = k.forLoop(k.cIndex(0), n, k.cIndex(B), {zero}, [&](Value s0, ValueRange it) {
      Value x = k.reshape(k.load(view, {t, s0}, {1, B}, pad), {B});
      return SmallVector<Value>{k.add(it[0], ones(hit(x)))};
    })[0];
    return k.reduce(kd::ReduceKind::sum, counts, 0);
  };
  // count(valid & key >= thr) over the row (thr within i32: the search's
  // bounds).
  auto countGE = [&](Value thr) {
    Value thr32 = arith::TruncIOp::create(b, k.loc(), i32, thr);
    return countRow(vs, S, -INFINITY, [&](Value x) {
      return k.andI(validOf(x), k.cmp(Cmp::GE, keysOf(x), thr32));
    });
  };
  // count(key >= thr) by float compares: x >= f, f the float whose key is
  // thr (flipNegative of the key). Three vector ops per
  // element where countGE takes ten. Keys below -FLT_MAX's are raised to it
  // (every valid key is >= it); keys above +inf's are NaN patterns, and
  // x >= NaN is false, as count(key >= thr) is 0. Thresholds of zero or
  // subnormal floats take countGE: where denormals are flushed (DAZ), those
  // compare otherwise.
  const int64_t keyMin = -2139095040; // key(-FLT_MAX): 0x80800000 as i32
  const int64_t subnormalLo = -8388609, subnormalHi = 8388608; // key(-FLT_MIN), key(FLT_MIN)
  auto countFast = [&](Value thr) {
    Value m = arith::TruncIOp::create(b, k.loc(), i32, k.max(thr, k.constant(i64, double(keyMin))));
    Value f = arith::BitcastOp::create(b, k.loc(), f32, flipNegative(m));
    Value tiny = k.andI(k.cmp(Cmp::GT, m, k.cI32(subnormalLo)), k.cmp(Cmp::LT, m, k.cI32(subnormalHi)));
    return k.ifElse(tiny, {i32}, [&] { return SmallVector<Value>{countGE(thr)}; }, [&] {
      return SmallVector<Value>{
          countRow(vs, S, -INFINITY, [&](Value x) { return k.cmp(Cmp::GE, x, f); })};
    })[0];
  };
  Value c1 = k.constant(i64, 1);
  // Binary search (on i64 to avoid overflow) for the k-th largest key: the
  // largest thr with count(key >= thr) >= K. State: the bounds lo <= hi and
  // cntLo >= count(key >= lo) (exact once a pass set it; S at first),
  // cntHi = count(key > hi). A step counts at mid and keeps the half that
  // holds the answer. The search is done when lo == hi, or when cntLo <= K:
  // then every key >= lo is taken (kth = lo; the ties rule takes them all).
  auto step = [&](Value count, ValueRange st, Value mid) {
    Value enough = k.cmp(Cmp::GE, count, k.cI32(K));
    return SmallVector<Value>{k.select(enough, mid, st[0]),
                              k.select(enough, st[1], k.sub(mid, c1)),
                              k.select(enough, count, st[2]), k.select(enough, st[3], count)};
  };
  auto midOf = [&](ValueRange st) {
    return arith::ShRSIOp::create(b, k.loc(), k.add(k.add(st[0], st[1]), c1), c1).getResult();
  };
  auto searching = [&](ValueRange st) {
    return k.andI(k.cmp(Cmp::LT, st[0], st[1]), k.cmp(Cmp::GT, st[2], k.cI32(K)));
  };
  SmallVector<Type> stateTypes{i64, i64, i32, i32};
  // Phase 1 narrows to at most one block of candidates (or k): then most
  // blocks of the compaction pass hold none and skip its prefix sum and
  // scatter. The extra narrowing passes cost 3 vector ops per element each.
  const int64_t bandMax = std::min(K, B);
  // Phase 1: steps over the whole row while more than bandMax keys lie in
  // [lo, hi] (cntLo - cntHi bounds their number).
  SmallVector<Value> st{k.constant(i64, double(INT32_MIN)), k.constant(i64, double(INT32_MAX)),
                        arith::TruncIOp::create(b, k.loc(), i32, k.arg("keys")), k.cI32(0)};
  st = k.forLoop(k.cIndex(0), k.cIndex(33), k.cIndex(1), st, [&](Value, ValueRange it) {
    Value wide = k.cmp(Cmp::GT, k.sub(it[2], it[3]), k.cI32(bandMax));
    return k.ifElse(k.andI(searching(it), wide), stateTypes,
                    [&] {
                      Value mid = midOf(it);
                      return step(countFast(mid), it, mid);
                    },
                    [&] { return SmallVector<Value>(it.begin(), it.end()); });
  });
  // Phase 2: the keys in [lo, hi] (at most bandMax) are compacted into the
  // output row, which is scratch until the selection is written, and the
  // search goes on over them alone: a step reads one i32 per remaining key
  // where a step of phase 1 read the row. (A row of 4096 random normal
  // scores, k 2048: 7 steps in each phase; 32768: 14 and 10.)
  Value vo2 = k.view(k.arg("out"), {k.cIndex(K), T}, {k.cIndex(1), k.cIndex(K)});
  // Stream compaction of a block: `values` [B, 1] of its lanes in `take`
  // go to out[t, pos + (taken before them in the block)] (vo2: the output
  // seen as [position, row], for a scatter by position), in lane order. A
  // block taking nothing skips the prefix sum and the scatter (most blocks
  // of a long row). Returns how many it took.
  auto compact = [&](Value take, Value pos, Value values) {
    Value taken = k.reduce(kd::ReduceKind::sum, ones(take), 0);
    k.ifElse(k.cmp(Cmp::GT, taken, k.cI32(0)), {}, [&] {
      Value at = k.sub(k.add(k.scan(kd::ReduceKind::sum, ones(take), 0), pos), k.cI32(1));
      Value dest = k.select(k.andI(take, k.cmp(Cmp::LT, at, k.cI32(K))), at, k.cI32(-1));
      k.scatter(values, vo2, dest, {t});
      return SmallVector<Value>{};
    }, [&] { return SmallVector<Value>{}; });
    return taken;
  };
  st = k.ifElse(searching(st), stateTypes, [&] {
    Value lo32 = arith::TruncIOp::create(b, k.loc(), i32, st[0]);
    Value hi32 = arith::TruncIOp::create(b, k.loc(), i32, st[1]);
    Value n = k.forLoop(k.cIndex(0), S, k.cIndex(B), {k.cI32(0)}, [&](Value s0, ValueRange it) {
      Value x = k.reshape(k.load(vs, {t, s0}, {1, B}, -INFINITY), {B});
      Value key = keysOf(x);
      Value take = k.andI(validOf(x), k.andI(k.cmp(Cmp::GE, key, lo32), k.cmp(Cmp::LE, key, hi32)));
      return SmallVector<Value>{k.add(it[0], compact(take, it[0], k.reshape(key, {B, 1})))};
    })[0];
    // The band: out[t, 0:n]; past n the view pads with INT32_MIN, below
    // every mid.
    Value band = k.view(k.arg("out"), {T, k.toIndex(n)}, {k.cIndex(K), k.cIndex(1)});
    // count(key >= mid) = the keys above the band + the band's keys >= mid.
    Value aboveBand = st[3];
    SmallVector<Value> st2{st[0], st[1], k.add(aboveBand, n), aboveBand};
    return k.forLoop(k.cIndex(0), k.cIndex(33), k.cIndex(1), st2, [&](Value, ValueRange it) {
      return k.ifElse(searching(it), stateTypes, [&] {
        Value mid = midOf(it);
        Value mid32 = arith::TruncIOp::create(b, k.loc(), i32, mid);
        Value inBand = countRow(band, k.toIndex(n), double(INT32_MIN),
                                [&](Value key) { return k.cmp(Cmp::GE, key, mid32); });
        return step(k.add(aboveBand, inBand), it, mid);
      }, [&] { return SmallVector<Value>(it.begin(), it.end()); });
    });
  }, [&] { return SmallVector<Value>(st.begin(), st.end()); });
  Value kth = st[0];
  // count(key > kth) = count(key >= kth + 1) (kth + 1 stays within i32: kth
  // is at most +inf's key), by float compares.
  Value above = countFast(k.add(kth, c1));
  Value ties = k.sub(k.cI32(K), above); // how many elements equal to kth to take
  // Fill the row with -1, then write the selected indices in ascending order.
  int64_t fillBlock = std::min<int64_t>(K, 256);
  k.forLoop(k.cIndex(0), k.cIndex(K), k.cIndex(fillBlock), {}, [&](Value c0, ValueRange) {
    k.store(k.constant(k.tile({1, fillBlock}, i32), -1), vo, {t, c0});
    return SmallVector<Value>{};
  });
  // The selection, compacted a block of the row at a time: each element
  // taken (a valid key above kth, or one of the first `ties` equal to it)
  // lands at the next position, so the indices are in ascending order. Most
  // blocks of a long row take nothing (2048 of 131072: 1.6% of the
  // elements); a block without a tie skips the ties' prefix sum.
  Value kth32 = arith::TruncIOp::create(b, k.loc(), i32, kth);
  k.forLoop(k.cIndex(0), S, k.cIndex(B), {k.cI32(0), k.cI32(0)},
            [&](Value s0, ValueRange it) {
              Value pos = it[0], tiesTaken = it[1];
              Value x = k.reshape(k.load(vs, {t, s0}, {1, B}, -INFINITY), {B});
              Value key = keysOf(x), valid = validOf(x);
              Value gt = k.andI(valid, k.cmp(Cmp::GT, key, kth32));
              Value eq = k.andI(valid, k.cmp(Cmp::EQ, key, kth32));
              Value numEq = k.reduce(kd::ReduceKind::sum, ones(eq), 0);
              // The ties taken: those whose rank among the row's ties
              // (1-based) is at most `ties`.
              Value takeEq = k.ifElse(k.cmp(Cmp::GT, numEq, k.cI32(0)), {eq.getType()}, [&] {
                Value rank = k.add(k.scan(kd::ReduceKind::sum, ones(eq), 0), tiesTaken);
                return SmallVector<Value>{k.andI(eq, k.cmp(Cmp::LE, rank, ties))};
              }, [&] { return SmallVector<Value>{eq}; })[0];
              Value index = k.reshape(k.add(k.arange(B), k.convert(s0, i32)), {B, 1});
              Value taken = compact(k.orI(gt, takeEq), pos, index);
              return SmallVector<Value>{
                  k.add(pos, taken),
                  k.add(tiesTaken, k.reduce(kd::ReduceKind::sum, ones(takeEq), 0))};
            });
  k.finish();
  return llvm::Error::success();
}

static llvm::Error buildSparseAttention(ModuleOp module, const Config &c) {
  MLIRContext *ctx = module.getContext();
  int64_t HB = c.getInt("heads_block"), DQK = c.getInt("d_qk"),
          DV = c.getInt("d_v"), BK = c.getInt("block_k");
  if (DV > DQK)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "dsa_sparse_attention: d_v must be <= d_qk");
  Type f32 = Float32Type::get(ctx), i32 = IntegerType::get(ctx, 32),
       i64 = IntegerType::get(ctx, 64);
  // q and kv in `dtype`; scores, softmax state, out and lse in f32. bf16/f16:
  // the dots take the narrow type (f32 accumulation), the scale goes on the
  // f32 scores, and P is rounded to the input type for P @ V (as in
  // block_sparse_attention and FlashMLA).
  Type t = elementType(ctx, c.getString("dtype"));
  const bool lowPrecision = t != f32;
  auto P = [&](Type ty) { return kd::PtrType::get(ctx, ty); };
  KernelBuilder k(module, "dsa_sparse_attention",
                  {{"q", P(t)}, {"kv", P(t)}, {"indices", P(i32)},
                   {"out", P(f32)}, {"lse", P(f32)}, {"errors", P(i32)},
                   {"sq", i64}, {"hq", i64}, {"skv", i64}, {"topk", i64},
                   {"scale", f32}},
                  2, &c.statics);
  Value Sq = k.arg("sq"), Hq = k.arg("hq"), Skv = k.arg("skv"), topk = k.arg("topk");
  Value tok = k.pid(0), h0 = k.mul(k.pid(1), k.cIndex(HB));
  Value vq = k.denseView(k.arg("q"), {Sq, Hq, k.cIndex(DQK)});
  Value vkv = k.denseView(k.arg("kv"), {Skv, k.cIndex(DQK)});
  Value vi = k.denseView(k.arg("indices"), {Sq, topk});
  Value vo = k.denseView(k.arg("out"), {Sq, Hq, k.cIndex(DV)});
  Value vl = k.denseView(k.arg("lse"), {Sq, Hq});
  Value qt = k.reshape(k.load(vq, {tok, h0, k.cIndex(0)}, {1, HB, DQK}), {HB, DQK});
  if (!lowPrecision)
    qt = k.mul(qt, k.arg("scale"));
  Value negInf = k.cF32(-INFINITY);
  Value zeroS = k.constant(k.tile({HB, BK}, f32), 0.0);
  SmallVector<Value> init = {k.constant(k.tile({HB}, f32), -INFINITY),
                             k.constant(k.tile({HB}, f32), 0.0),
                             k.constant(k.tile({HB, DV}, f32), 0.0),
                             k.constant(k.tile({BK}, i32), 0.0)};
  auto st = k.forLoop(k.cIndex(0), topk, k.cIndex(BK), init, [&](Value c0, ValueRange it) {
    Value m = it[0], l = it[1], acc = it[2];
    Value idx = k.reshape(k.load(vi, {tok, c0}, {1, BK}, -1), {BK});
    Value valid = k.andI(k.cmp(Cmp::GE, idx, k.cI32(0)),
                         k.cmp(Cmp::LT, idx, k.convert(Skv, i32)));
    // -1 (and the padding past topk) is "no key"; any other index outside
    // [0, skv) is skipped too, and counted.
    Value bad = k.andI(k.cmp(Cmp::NE, idx, k.cI32(-1)),
                       k.cmp(Cmp::EQ, valid, k.constant(IntegerType::get(ctx, 1), 0)));
    Value badNew = k.add(it[3], k.select(bad, k.cI32(1), k.cI32(0)));
    // The loaded indices themselves: a row outside [0, skv) reads zeros (the
    // gather's padding; its scores are masked below), and a gather by a
    // loaded block is pipelined on GPUs (its rows fetched during the
    // previous steps).
    Value rows = k.gather(vkv, idx, {k.cIndex(0)}, {BK, DQK}, 0);
    Value s = k.dot(qt, k.trans(rows), zeroS);
    if (lowPrecision)
      s = k.mul(s, k.arg("scale"));
    s = k.select(k.broadcastTo(k.expand(valid, 0), {HB, BK}), s, negInf);
    Value mNew = k.max(m, k.reduce(kd::ReduceKind::max, s, 1));
    Value mSafe = k.select(k.cmp(Cmp::EQ, mNew, negInf), k.cF32(0.0), mNew);
    Value p = k.exp(k.sub(s, k.broadcastTo(k.expand(mSafe, 1), {HB, BK})));
    Value alpha = k.exp(k.sub(m, mSafe));
    Value lNew = k.add(k.mul(l, alpha), k.reduce(kd::ReduceKind::sum, p, 1));
    // The values are the key rows' first d_v columns: a slice of the
    // gathered tile (on a GPU a view of its shared-memory rows), not a
    // second gather.
    Value vrows = DV == DQK ? rows : k.slice(rows, {0, 0}, {BK, DV});
    Value pv = lowPrecision ? k.convert(p, t) : p;
    Value accNew = k.dot(pv, vrows, k.mul(acc, k.broadcastTo(k.expand(alpha, 1), {HB, DV})));
    return SmallVector<Value>{mNew, lNew, accNew, badNew};
  });
  Value l = st[1];
  Value lSafe = k.select(k.cmp(Cmp::EQ, l, k.cF32(0.0)), k.cF32(1.0), l);
  Value o = k.div(st[2], k.broadcastTo(k.expand(lSafe, 1), {HB, DV}));
  k.store(k.reshape(o, {1, HB, DV}), vo, {tok, h0, k.cIndex(0)});
  k.store(k.expand(k.add(st[0], k.log(l)), 0), vl, {tok, h0});
  // Every head block reads the same indices: the first one counts.
  addErrorCounts(k, st[3], k.arg("errors"), k.cmp(Cmp::EQ, k.pid(1), k.cIndex(0)));
  k.finish();
  return llvm::Error::success();
}

void registerDSAOps(std::vector<OpInfo> &ops) {
  ops.push_back({"dsa_indexer",
                 "lightning indexer I[t, s] = sum_j w[t, j] * ReLU(q[t, j] . k[s]) "
                 "(times k_scale[s] for e4m3); -inf where s > q_offset + t when causal",
                 {{"dtype", Param::String, "f32",
                   "element type of q and k (e4m3: fp8 bytes, with k_scale)",
                   {"f32", "bf16", "f16", "e4m3"}},
                  {"index_heads", Param::Int, "64", "indexer heads", {}},
                  {"index_dim", Param::Int, "128", "indexer head dimension", {}},
                  {"causal", Param::Int, "1", "1: mask keys after the query", {}},
                  {"block_t", Param::Int, "16", "queries per program", {}},
                  {"block_s", Param::Int, "64", "keys per program", {}}},
                 buildIndexer});
  ops.push_back({"dsa_topk",
                 "per row, the indices of the k largest finite scores (ascending "
                 "index order, ties to the lower index, -1 padding)",
                 {{"k", Param::Int, "2048", "how many to select", {}},
                  {"block", Param::Int, "256", "scan chunk", {}}},
                 buildTopK});
  ops.push_back({"dsa_sparse_attention",
                 "token-sparse MQA attention over selected kv rows (DeepSeek sparse "
                 "MLA shape); returns out and log-sum-exp; indices outside [-1, skv) are "
                 "skipped and counted in errors[0]",
                 {dtypeParam(),
                  {"d_qk", Param::Int, "576", "query/key head dimension", {}},
                  {"d_v", Param::Int, "512", "value dimension (first d_v columns of kv)", {}},
                  {"heads_block", Param::Int, "16", "query heads per program", {}},
                  {"block_k", Param::Int, "64", "selected keys per step", {}}},
                 buildSparseAttention});
}

} // namespace kiln::ops
