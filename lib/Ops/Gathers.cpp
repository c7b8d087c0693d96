//===- Gathers.cpp - Embedding, paged KV-cache and MoE index gathers -------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Index gathers are kiln.gather over row views: an index that is out of range
// reads zeros (never memory outside the table) and is counted in an `errors`
// word, which the Python wrappers raise as an IndexError or leave to a
// caller that passed its own (docs/ops.md).
//
//===----------------------------------------------------------------------===//

#include "OpDefs.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/BuiltinTypes.h"

namespace kiln::ops {
using namespace mlir;
namespace kd = mlir::kiln;

Type elementType(MLIRContext *ctx, const std::string &name) {
  if (name == "bf16")
    return BFloat16Type::get(ctx);
  if (name == "f16")
    return Float16Type::get(ctx);
  return Float32Type::get(ctx);
}

void addErrorCounts(KernelBuilder &k, Value counts, Value errorsPtr, Value when) {
  auto shape = cast<RankedTensorType>(counts.getType()).getShape();
  Value flat = counts;
  if (shape.size() != 1) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    flat = k.reshape(counts, {n});
  }
  Value count = k.reduce(kd::ReduceKind::sum, flat, 0);
  // Most programs find nothing: they skip the atomic (thousands of adds of
  // zero to one word would serialize on a GPU).
  Value any = k.cmp(Cmp::NE, count, k.cI32(0));
  k.ifElse(when ? k.andI(when, any) : any, {},
           [&] {
             Value errors = k.view(errorsPtr, {k.cIndex(1)}, {k.cIndex(1)});
             k.atomicAdd(k.splat(count, {1}), errors, {k.cIndex(0)});
             return SmallVector<Value>{};
           },
           [&] { return SmallVector<Value>{}; });
}

void countErrors(KernelBuilder &k, Value bad, Value errorsPtr, Value when) {
  addErrorCounts(k, k.select(bad, k.cI32(1), k.cI32(0)), errorsPtr, when);
}

// embedding: out[r, :] = weight[ids[r], :]
static llvm::Error buildEmbedding(ModuleOp module, const Config &c) {
  MLIRContext *ctx = module.getContext();
  Type t = elementType(ctx, c.getString("dtype"));
  int64_t bn = c.getInt("block_n"), bd = c.getInt("block_d");
  Type i32 = IntegerType::get(ctx, 32), i64 = IntegerType::get(ctx, 64);
  KernelBuilder k(module, "embedding",
                  {{"weight", kd::PtrType::get(ctx, t)},
                   {"ids", kd::PtrType::get(ctx, i32)},
                   {"out", kd::PtrType::get(ctx, t)},
                   {"errors", kd::PtrType::get(ctx, i32)},
                   {"n", i64}, {"vocab", i64}, {"dim", i64}},
                  2, &c.statics);
  Value n = k.arg("n"), vocab = k.arg("vocab"), dim = k.arg("dim");
  Value r0 = k.mul(k.pid(0), k.cIndex(bn));
  Value c0 = k.mul(k.pid(1), k.cIndex(bd));
  Value ids = k.load(k.view(k.arg("ids"), {n}, {k.cIndex(1)}), {r0}, {bn}, 0);
  Value rows = k.add(k.arange(bn), k.convert(r0, i32));
  Value rowValid = k.cmp(Cmp::LT, rows, k.convert(n, i32));
  Value ok = k.andI(k.cmp(Cmp::GE, ids, k.cI32(0)),
                    k.cmp(Cmp::LT, ids, k.convert(vocab, i32)));
  Value idx = k.select(ok, ids, k.cI32(-1));
  Value table = k.denseView(k.arg("weight"), {vocab, dim});
  Value tile = k.gather(table, idx, {c0}, {bn, bd}, 0);
  k.store(tile, k.denseView(k.arg("out"), {n, dim}), {r0, c0}, c.getInt("streaming") != 0);
  Value first = k.cmp(Cmp::EQ, k.pid(1), k.cIndex(0));
  Value bad = k.andI(rowValid, k.cmp(Cmp::EQ, ok, k.constant(IntegerType::get(ctx, 1), 0)));
  countErrors(k, bad, k.arg("errors"), first);
  k.finish();
  return llvm::Error::success();
}

// paged_kv_gather: out[b, t, :] = cache[block_table[b, t / bs], t % bs, :]
// for t < seq_lens[b], zeros beyond.
static llvm::Error buildPagedKV(ModuleOp module, const Config &c) {
  MLIRContext *ctx = module.getContext();
  Type t = elementType(ctx, c.getString("dtype"));
  int64_t bs = c.getInt("block_size"), bt = c.getInt("block_t"),
          bw = c.getInt("block_w");
  if (bs <= 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "paged_kv_gather: block_size must be > 0");
  Type i32 = IntegerType::get(ctx, 32), i64 = IntegerType::get(ctx, 64);
  KernelBuilder k(module, "paged_kv_gather",
                  {{"cache", kd::PtrType::get(ctx, t)},
                   {"block_table", kd::PtrType::get(ctx, i32)},
                   {"seq_lens", kd::PtrType::get(ctx, i32)},
                   {"out", kd::PtrType::get(ctx, t)},
                   {"errors", kd::PtrType::get(ctx, i32)},
                   {"batch", i64}, {"max_blocks", i64}, {"num_blocks", i64},
                   {"max_len", i64}, {"width", i64}},
                  3, &c.statics);
  Value batch = k.arg("batch"), maxBlocks = k.arg("max_blocks"),
        numBlocks = k.arg("num_blocks"), maxLen = k.arg("max_len"),
        width = k.arg("width");
  Value b = k.pid(2);
  Value t0 = k.mul(k.pid(0), k.cIndex(bt));
  Value w0 = k.mul(k.pid(1), k.cIndex(bw));
  Value tok = k.add(k.arange(bt), k.convert(t0, i32));
  Value len = k.loadScalar(k.view(k.arg("seq_lens"), {batch}, {k.cIndex(1)}), {b}, 0);
  Value valid = k.andI(k.cmp(Cmp::LT, tok, len),
                       k.cmp(Cmp::LT, tok, k.convert(maxLen, i32)));
  Value slot = k.div(tok, k.cI32(bs));
  Value within = k.rem(tok, k.cI32(bs));
  Value inTable = k.cmp(Cmp::LT, slot, k.convert(maxBlocks, i32));
  Value tableIdx = k.add(k.mul(k.convert(b, i32), k.convert(maxBlocks, i32)), slot);
  Value tableFlat = k.view(k.arg("block_table"), {k.mul(batch, maxBlocks)},
                           {k.cIndex(1)});
  Value blk = k.gather(tableFlat, k.select(k.andI(valid, inTable), tableIdx, k.cI32(-1)),
                       {}, {bt}, -1);
  Value blkOk = k.andI(k.cmp(Cmp::GE, blk, k.cI32(0)),
                       k.cmp(Cmp::LT, blk, k.convert(numBlocks, i32)));
  Value row = k.add(k.mul(blk, k.cI32(bs)), within);
  Value ok = k.andI(k.andI(valid, inTable), blkOk);
  Value cache = k.denseView(k.arg("cache"), {k.mul(numBlocks, k.cIndex(bs)), width});
  Value tile = k.gather(cache, k.select(ok, row, k.cI32(-1)), {w0}, {bt, bw}, 0);
  Value out = k.denseView(k.arg("out"), {batch, maxLen, width});
  k.store(k.reshape(tile, {1, bt, bw}), out, {b, t0, w0}, c.getInt("streaming") != 0);
  Value first = k.cmp(Cmp::EQ, k.pid(1), k.cIndex(0));
  Value i1f = k.constant(IntegerType::get(ctx, 1), 0);
  Value bad = k.andI(valid, k.cmp(Cmp::EQ, k.andI(inTable, blkOk), i1f));
  countErrors(k, bad, k.arg("errors"), first);
  k.finish();
  return llvm::Error::success();
}

// moe_permute: out[r, :] = x[src_rows[r], :] (zeros where src_rows[r] = -1)
static llvm::Error buildMoePermute(ModuleOp module, const Config &c) {
  MLIRContext *ctx = module.getContext();
  Type t = elementType(ctx, c.getString("dtype"));
  int64_t br = c.getInt("block_r"), bh = c.getInt("block_h");
  Type i32 = IntegerType::get(ctx, 32), i64 = IntegerType::get(ctx, 64);
  KernelBuilder k(module, "moe_permute",
                  {{"x", kd::PtrType::get(ctx, t)},
                   {"src_rows", kd::PtrType::get(ctx, i32)},
                   {"out", kd::PtrType::get(ctx, t)},
                   {"errors", kd::PtrType::get(ctx, i32)},
                   {"rows", i64}, {"tokens", i64}, {"hidden", i64}},
                  2, &c.statics);
  Value rows = k.arg("rows"), tokens = k.arg("tokens"), hidden = k.arg("hidden");
  Value r0 = k.mul(k.pid(0), k.cIndex(br));
  Value h0 = k.mul(k.pid(1), k.cIndex(bh));
  Value src = k.load(k.view(k.arg("src_rows"), {rows}, {k.cIndex(1)}), {r0}, {br}, -1);
  Value tile = k.gather(k.denseView(k.arg("x"), {tokens, hidden}), src, {h0},
                        {br, bh}, 0);
  k.store(tile, k.denseView(k.arg("out"), {rows, hidden}), {r0, h0},
          c.getInt("streaming") != 0);
  Value first = k.cmp(Cmp::EQ, k.pid(1), k.cIndex(0));
  // -1 is the empty row; anything else outside [0, tokens) is an error.
  Value rowIds = k.add(k.arange(br), k.convert(r0, i32));
  Value outside = k.orI(k.cmp(Cmp::LT, src, k.cI32(-1)),
                        k.cmp(Cmp::GE, src, k.convert(tokens, i32)));
  countErrors(k, k.andI(k.cmp(Cmp::LT, rowIds, k.convert(rows, i32)), outside),
              k.arg("errors"), first);
  k.finish();
  return llvm::Error::success();
}

// moe_unpermute: out[t, :] = sum_k weights[t, k] * y[slot_rows[t, k], :]
static llvm::Error buildMoeUnpermute(ModuleOp module, const Config &c) {
  MLIRContext *ctx = module.getContext();
  Type t = elementType(ctx, c.getString("dtype"));
  int64_t btk = c.getInt("block_t"), bh = c.getInt("block_h");
  Type i32 = IntegerType::get(ctx, 32), i64 = IntegerType::get(ctx, 64),
       f32 = Float32Type::get(ctx);
  KernelBuilder k(module, "moe_unpermute",
                  {{"y", kd::PtrType::get(ctx, t)},
                   {"slot_rows", kd::PtrType::get(ctx, i32)},
                   {"weights", kd::PtrType::get(ctx, f32)},
                   {"out", kd::PtrType::get(ctx, t)},
                   {"errors", kd::PtrType::get(ctx, i32)},
                   {"tokens", i64}, {"topk", i64}, {"rows", i64}, {"hidden", i64}},
                  2, &c.statics);
  Value tokens = k.arg("tokens"), topk = k.arg("topk"), rows = k.arg("rows"),
        hidden = k.arg("hidden");
  Value t0 = k.mul(k.pid(0), k.cIndex(btk));
  Value h0 = k.mul(k.pid(1), k.cIndex(bh));
  Value slots = k.denseView(k.arg("slot_rows"), {tokens, topk});
  Value weights = k.denseView(k.arg("weights"), {tokens, topk});
  Value y = k.denseView(k.arg("y"), {rows, hidden});
  Value zero = k.constant(k.tile({btk, bh}, f32), 0.0);
  Value noBad = k.constant(k.tile({btk}, i32), 0.0);
  // Slots past the last token load -1 (skipped); a slot outside [-1, rows)
  // reads zeros and is counted.
  Value rows32 = k.convert(rows, i32);
  auto slotsAt = [&](Value j) {
    return k.reshape(k.load(slots, {t0, j}, {btk, 1}, -1), {btk});
  };
  // Two loops: the sum's alone carries tiles of one shape, so on the CPU
  // it runs in registers (lowerRegisterLoop), each gathered row read once
  // into its accumulators. With the count carried beside it, every step
  // gathered a tile into memory and added it to the sum there: 2048
  // tokens x top-4 x 2880 took 1.7x the time (AVX2).
  Value bad = k.forLoop(k.cIndex(0), topk, k.cIndex(1), {noBad}, [&](Value j, ValueRange it) {
    Value idx = slotsAt(j);
    Value outside = k.orI(k.cmp(Cmp::LT, idx, k.cI32(-1)), k.cmp(Cmp::GE, idx, rows32));
    return SmallVector<Value>{k.add(it[0], k.select(outside, k.cI32(1), k.cI32(0)))};
  })[0];
  Value sum = k.forLoop(k.cIndex(0), topk, k.cIndex(1), {zero}, [&](Value j, ValueRange it) {
    Value idx = slotsAt(j);
    Value r = k.convert(k.gather(y, idx, {h0}, {btk, bh}, 0), f32);
    // A skipped slot's weight is not read into the sum (a NaN or inf there
    // would make 0 * w a NaN).
    Value used = k.andI(k.cmp(Cmp::GE, idx, k.cI32(0)), k.cmp(Cmp::LT, idx, rows32));
    Value w = k.select(k.expand(used, 1), k.load(weights, {t0, j}, {btk, 1}, 0), k.cF32(0.0));
    return SmallVector<Value>{k.add(it[0], k.mul(r, w))};
  })[0];
  k.store(k.convert(sum, t), k.denseView(k.arg("out"), {tokens, hidden}), {t0, h0});
  addErrorCounts(k, bad, k.arg("errors"), k.cmp(Cmp::EQ, k.pid(1), k.cIndex(0)));
  k.finish();
  return llvm::Error::success();
}

void registerGatherOps(std::vector<OpInfo> &ops) {
  ops.push_back({"embedding",
                 "out[r, :] = weight[ids[r], :]; out-of-range ids read zeros and "
                 "are counted in errors[0]",
                 {dtypeParam(),
                  {"block_n", Param::Int, "8", "ids per program", {}},
                  {"block_d", Param::Int, "1024", "columns per program (whole rows stream best)", {}},
                  {"streaming", Param::Int, "0",
                   "1: streaming stores (non-temporal on x86: for outputs far larger than the caches)", {}}},
                 buildEmbedding});
  ops.push_back({"paged_kv_gather",
                 "contiguous K or V from a paged cache: out[b, t, :] = "
                 "cache[block_table[b, t / block_size], t % block_size, :] for t < "
                 "seq_lens[b], zeros beyond (a page past the table or outside the cache "
                 "reads zeros and its tokens are counted in errors[0])",
                 {dtypeParam(),
                  {"block_size", Param::Int, "16", "tokens per cache page", {}},
                  {"block_t", Param::Int, "8", "tokens per program", {}},
                  {"block_w", Param::Int, "1024", "row elements per program", {}},
                  {"streaming", Param::Int, "0",
                   "1: streaming stores (non-temporal on x86: for outputs far larger than the caches)", {}}},
                 buildPagedKV});
  ops.push_back({"moe_permute",
                 "tokens grouped by expert: out[r, :] = x[src_rows[r], :] "
                 "(src_rows from moe_route; -1 rows are zero; other rows outside "
                 "[0, tokens) read zeros and are counted in errors[0])",
                 {dtypeParam(),
                  {"block_r", Param::Int, "8", "rows per program", {}},
                  {"block_h", Param::Int, "1024", "hidden elements per program", {}},
                  {"streaming", Param::Int, "0",
                   "1: streaming stores (non-temporal on x86: for outputs far larger than the caches)", {}}},
                 buildMoePermute});
  ops.push_back({"moe_unpermute",
                 "weighted sum back: out[t, :] = sum_k weights[t, k] * "
                 "y[slot_rows[t, k], :] (-1 slots are skipped; other slots outside "
                 "[0, rows) read zeros and are counted in errors[0])",
                 {dtypeParam(),
                  {"block_t", Param::Int, "16", "tokens per program", {}},
                  {"block_h", Param::Int, "128", "hidden elements per program", {}}},
                 buildMoeUnpermute});
}

} // namespace kiln::ops
