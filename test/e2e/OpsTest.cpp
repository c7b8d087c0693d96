//===- OpsTest.cpp - The operator library against float64 references -----===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"

#include "kiln/Ops/Ops.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

using namespace kiln::test;
using Cfg = std::map<std::string, std::string>;

namespace {
std::shared_ptr<kiln::Kernel> compileOp(const std::string &name, const Cfg &cfg = {}) {
  auto src = kiln::ops::buildOpSource(name, cfg);
  if (!src)
    FAIL(llvm::toString(src.takeError()));
  return requireOk(sharedJIT().compile(*src, "op:" + name));
}
int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
kiln_arg i32p(const int32_t *p) { return kiln::arg(p); }
} // namespace

TEST_CASE("embedding gathers rows and reports out-of-range ids", "[ops]") {
  // block_d 1024: every tile is ragged (the general gather, then the store).
  // block_d 64: most tiles are interior (rows copied directly from the table
  // to the output, the gather + store fusion), the last column block and the
  // last row block are not.
  for (int64_t blockD : {1024, 64}) {
  INFO("block_d " << blockD);
  auto k = compileOp("embedding", {{"block_d", std::to_string(blockD)}});
  const int64_t vocab = 1000, dim = 200, n = 77;
  auto w = randomVector(vocab * dim);
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i)
    ids[i] = int32_t((i * 37) % vocab);
  ids[3] = -3;
  ids[10] = int32_t(vocab);
  ids[76] = 5000;
  std::vector<float> out(n * dim, poison());
  std::vector<int32_t> errors(1, 0);
  REQUIRE_NOLAUNCHERROR(sharedJIT().launch(
      *k, {kiln::arg(w.data()), i32p(ids.data()), kiln::arg(out.data()), i32p(errors.data()),
           kiln::arg(n), kiln::arg(vocab), kiln::arg(dim)},
      {cdiv(n, 8), cdiv(dim, blockD)}));
  std::vector<double> ref(n * dim, 0.0);
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] >= 0 && ids[i] < vocab)
      for (int64_t d = 0; d < dim; ++d)
        ref[i * dim + d] = w[ids[i] * dim + d];
  CHECK_THAT_CLOSE(out, ref, 0, 0);
  CHECK(errors[0] == 3);
  }
}

TEST_CASE("embedding of bf16 rows copies the bits", "[ops]") {
  // block_d 32: interior tiles take the fused direct copy; 1024: the general path.
  for (int64_t blockD : {1024, 32}) {
  INFO("block_d " << blockD);
  auto k = compileOp("embedding", {{"dtype", "bf16"}, {"block_d", std::to_string(blockD)}});
  const int64_t vocab = 300, dim = 130, n = 21;
  auto wf = randomVector(vocab * dim);
  std::vector<uint16_t> w(wf.size());
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = toBF16(wf[i]);
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i)
    ids[i] = int32_t((i * 53 + 7) % vocab);
  ids[4] = -1;
  std::vector<uint16_t> out(n * dim, 0x7fc1); // a NaN payload as poison
  std::vector<int32_t> errors(1, 0);
  REQUIRE_NOLAUNCHERROR(sharedJIT().launch(
      *k, {kiln::argPtr(w.data(), KILN_DTYPE_BF16), i32p(ids.data()),
           kiln::argPtr(out.data(), KILN_DTYPE_BF16), i32p(errors.data()), kiln::arg(n),
           kiln::arg(vocab), kiln::arg(dim)},
      {cdiv(n, 8), cdiv(dim, blockD)}));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < dim; ++d) {
      uint16_t want = ids[i] >= 0 ? w[ids[i] * dim + d] : 0;
      if (out[i * dim + d] != want) {
        FAIL_CHECK("row " << i << " column " << d << ": " << out[i * dim + d] << " != " << want);
        return;
      }
    }
  CHECK(errors[0] == 1);
  }
}

TEST_CASE("paged KV-cache gather", "[ops]") {
  const int64_t bs = 16, width = 100, numBlocks = 20, maxBlocks = 6, batch = 3;
  // block_w 32: interior tiles take the fused direct copy (through the
  // reshape to [1, block_t, block_w]); 1024: the general path.
  for (int64_t blockW : {1024, 32}) {
  INFO("block_w " << blockW);
  auto k = compileOp("paged_kv_gather",
                     {{"block_size", "16"}, {"block_w", std::to_string(blockW)}});
  auto cache = randomVector(numBlocks * bs * width);
  std::vector<int32_t> table(batch * maxBlocks), lens = {0, 37, 90};
  for (int64_t i = 0; i < batch * maxBlocks; ++i)
    table[i] = int32_t((i * 7 + 3) % numBlocks);
  table[2 * maxBlocks + 4] = 99; // an invalid page inside sequence 2 (tokens 64..79)
  const int64_t maxLen = 93; // the last block of 8 tokens is ragged
  std::vector<float> out(batch * maxLen * width, poison());
  std::vector<int32_t> errors(1, 0);
  REQUIRE_NOLAUNCHERROR(sharedJIT().launch(
      *k, {kiln::arg(cache.data()), i32p(table.data()), i32p(lens.data()), kiln::arg(out.data()),
           i32p(errors.data()), kiln::arg(batch), kiln::arg(maxBlocks), kiln::arg(numBlocks),
           kiln::arg(maxLen), kiln::arg(width)},
      {cdiv(maxLen, 8), cdiv(width, blockW), batch}));
  std::vector<double> ref(out.size(), 0.0);
  int64_t bad = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < lens[b]; ++t) {
      int32_t blk = table[b * maxBlocks + t / bs];
      if (blk < 0 || blk >= numBlocks) {
        ++bad;
        continue;
      }
      for (int64_t w = 0; w < width; ++w)
        ref[(b * maxLen + t) * width + w] = cache[(blk * bs + t % bs) * width + w];
    }
  CHECK_THAT_CLOSE(out, ref, 0, 0);
  CHECK(errors[0] == bad);
  }
}

TEST_CASE("MoE permute and weighted unpermute", "[ops]") {
  const int64_t T = 50, K = 2, E = 4, H = 70;
  auto x = randomVector(T * H);
  std::vector<int32_t> topk(T * K);
  std::vector<float> weights = randomVector(T * K, 0, 1);
  for (int64_t i = 0; i < T * K; ++i)
    topk[i] = int32_t((i * 5 + i / 3) % E);
  // moe_route (host): rows grouped by expert, stable by (token, k).
  std::vector<int32_t> srcRows, slotRows(T * K, -1);
  for (int32_t e = 0; e < E; ++e)
    for (int64_t i = 0; i < T * K; ++i)
      if (topk[i] == e) {
        slotRows[i] = int32_t(srcRows.size());
        srcRows.push_back(int32_t(i / K));
      }
  slotRows[7] = -1; // a dropped slot (capacity overflow) contributes nothing
  const int64_t rows = int64_t(srcRows.size());
  auto perm = compileOp("moe_permute");
  std::vector<float> y(rows * H, poison());
  std::vector<int32_t> errors(1, 0);
  REQUIRE_NOLAUNCHERROR(sharedJIT().launch(
      *perm, {kiln::arg(x.data()), i32p(srcRows.data()), kiln::arg(y.data()), i32p(errors.data()),
              kiln::arg(rows), kiln::arg(T), kiln::arg(H)},
      {cdiv(rows, 8), cdiv(H, 1024)}));
  std::vector<double> refY(rows * H);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < H; ++h)
      refY[r * H + h] = x[srcRows[r] * H + h];
  CHECK_THAT_CLOSE(y, refY, 0, 0);
  CHECK(errors[0] == 0);
  {
    // block_h 16: interior tiles take the direct row copy (H = 70 leaves a
    // ragged last column block and rows leave a ragged last row block).
    auto perm16 = compileOp("moe_permute", {{"block_h", "16"}});
    std::vector<float> y16(rows * H, poison());
    REQUIRE_NOLAUNCHERROR(sharedJIT().launch(
        *perm16, {kiln::arg(x.data()), i32p(srcRows.data()), kiln::arg(y16.data()),
                  i32p(errors.data()), kiln::arg(rows), kiln::arg(T), kiln::arg(H)},
        {cdiv(rows, 8), cdiv(H, 16)}));
    CHECK_THAT_CLOSE(y16, refY, 0, 0);
    CHECK(errors[0] == 0);
  }
  {
    // Source rows outside [-1, T) read zeros and are counted; -1 is an
    // empty row, not an error.
    std::vector<int32_t> badSrc = srcRows;
    badSrc[3] = -5;
    badSrc[rows - 2] = int32_t(T + 3);
    badSrc[9] = -1;
    std::vector<float> yb(rows * H, poison());
    errors[0] = 0;
    REQUIRE_NOLAUNCHERROR(sharedJIT().launch(
        *perm, {kiln::arg(x.data()), i32p(badSrc.data()), kiln::arg(yb.data()),
                i32p(errors.data()), kiln::arg(rows), kiln::arg(T), kiln::arg(H)},
        {cdiv(rows, 8), cdiv(H, 1024)}));
    std::vector<double> refB = refY;
    for (int64_t r : {int64_t(3), rows - 2, int64_t(9)})
      for (int64_t h = 0; h < H; ++h)
        refB[r * H + h] = 0;
    CHECK_THAT_CLOSE(yb, refB, 0, 0);
    CHECK(errors[0] == 2);
  }
  // Two slots outside [-1, rows): skipped, and counted once although
  // H = 70 spans two column programs per token block at block_h 64.
  slotRows[11] = int32_t(rows + 4);
  slotRows[T * K - 1] = -3;
  auto unperm = compileOp("moe_unpermute", {{"block_h", "64"}});
  std::vector<float> out(T * H, poison());
  errors[0] = 0;
  REQUIRE_NOLAUNCHERROR(sharedJIT().launch(
      *unperm, {kiln::arg(y.data()), i32p(slotRows.data()), kiln::arg(weights.data()),
                kiln::arg(out.data()), i32p(errors.data()), kiln::arg(T), kiln::arg(K),
                kiln::arg(rows), kiln::arg(H)},
      {cdiv(T, 16), cdiv(H, 64)}));
  std::vector<double> ref(T * H, 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < K; ++j)
      if (slotRows[t * K + j] >= 0 && slotRows[t * K + j] < rows)
        for (int64_t h = 0; h < H; ++h)
          ref[t * H + h] += double(weights[t * K + j]) * y[slotRows[t * K + j] * H + h];
  CHECK_THAT_CLOSE(out, ref, 1e-5, 1e-6);
  CHECK(errors[0] == 2);
}

namespace {
struct AttnCase {
  std::string mask;
  int64_t window = 0, prefix = 0;
  double softcap = 0;
  bool emptyHead = false;
  std::string dtype = "f32"; // q, k, v element type (bf16: rounded inputs)
  int64_t blockQ = 64, blockKV = 64; // the kernel's block and block_kv
};

void runBlockSparse(const AttnCase &tc) {
  const int64_t B = 2, Hq = 4, group = 2, Hkv = Hq / group, S = 150, D = 64;
  Cfg cfg = {{"mask", tc.mask}, {"window", std::to_string(tc.window)},
             {"prefix", std::to_string(tc.prefix)}, {"gqa_group", std::to_string(group)},
             {"softcap", std::to_string(tc.softcap)}, {"dtype", tc.dtype},
             {"block", std::to_string(tc.blockQ)}, {"block_kv", std::to_string(tc.blockKV)}};
  auto k = compileOp("block_sparse_attention", cfg);
  auto q = randomVector(B * Hq * S * D), kk = randomVector(B * Hkv * S * D),
       v = randomVector(B * Hkv * S * D);
  // bf16: the kernel gets the rounded values; the float64 reference uses the
  // same rounded values, so only the kernel's own arithmetic is measured.
  const bool bf16 = tc.dtype == "bf16";
  std::vector<uint16_t> qb16, kb16, vb16;
  auto round = [](std::vector<float> &x, std::vector<uint16_t> &b) {
    b.resize(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = float(fromBF16(b[i] = toBF16(x[i])));
  };
  if (bf16) {
    round(q, qb16);
    round(kk, kb16);
    round(v, vb16);
  }
  kiln_arg qArg = bf16 ? kiln::argPtr(qb16.data(), KILN_DTYPE_BF16) : kiln::arg(q.data());
  kiln_arg kArg = bf16 ? kiln::argPtr(kb16.data(), KILN_DTYPE_BF16) : kiln::arg(kk.data());
  kiln_arg vArg = bf16 ? kiln::argPtr(vb16.data(), KILN_DTYPE_BF16) : kiln::arg(v.data());
  std::vector<int32_t> doc(B * S);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      doc[b * S + s] = int32_t(s < 40 ? 0 : s < 95 ? 1 : 2) + int32_t(b);
  auto visible = [&](int64_t bh, int64_t qi, int64_t ki) {
    int64_t b = bh / Hq, h = bh % Hq;
    if (tc.emptyHead && b == 1 && h == 2)
      return false;
    if (tc.mask == "causal")
      return ki <= qi;
    if (tc.mask == "sliding_window")
      return ki <= qi && qi - ki < tc.window;
    if (tc.mask == "prefix_lm")
      return ki < tc.prefix || ki <= qi;
    if (tc.mask == "document")
      return doc[b * S + qi] == doc[b * S + ki];
    return true;
  };
  auto made = kiln::ops::makeBlockMask(B * Hq, S, S, tc.blockQ, tc.blockKV, visible);
  REQUIRE(bool(made));
  kiln::ops::BlockMask bm = std::move(*made);
  std::vector<float> out(B * Hq * S * D, poison()), lse(B * Hq * S, poison());
  float scale = 1.0f / std::sqrt(float(D));
  REQUIRE_NOLAUNCHERROR(sharedJIT().launch(
      *k, {qArg, kArg, vArg, kiln::arg(out.data()),
           kiln::arg(lse.data()), i32p(bm.kvNum.data()), i32p(bm.kvIdx.data()),
           i32p(bm.fullNum.data()), i32p(bm.fullIdx.data()), i32p(doc.data()), kiln::arg(B),
           kiln::arg(Hq), kiln::arg(S), kiln::arg(S), kiln::arg(bm.numQBlocks),
           kiln::arg(bm.maxBlocks), kiln::arg(scale)},
      {bm.numQBlocks, B * Hq}));
  std::vector<double> refO(out.size(), 0.0), refL(lse.size(), -INFINITY);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      int64_t hk = h / group;
      for (int64_t i = 0; i < S; ++i) {
        std::vector<double> s;
        std::vector<int64_t> keys;
        for (int64_t j = 0; j < S; ++j) {
          if (!visible(b * Hq + h, i, j))
            continue;
          double d = 0;
          for (int64_t c = 0; c < D; ++c)
            d += double(q[((b * Hq + h) * S + i) * D + c]) * scale *
                 kk[((b * Hkv + hk) * S + j) * D + c];
          if (tc.softcap > 0)
            d = tc.softcap * std::tanh(d / tc.softcap);
          s.push_back(d);
          keys.push_back(j);
        }
        if (keys.empty())
          continue;
        double mx = *std::max_element(s.begin(), s.end()), sum = 0;
        for (double &x : s)
          sum += (x = std::exp(x - mx));
        for (size_t j = 0; j < keys.size(); ++j)
          for (int64_t c = 0; c < D; ++c)
            refO[((b * Hq + h) * S + i) * D + c] +=
                s[j] / sum * v[((b * Hkv + hk) * S + keys[j]) * D + c];
        refL[(b * Hq + h) * S + i] = mx + std::log(sum);
      }
    }
  if (bf16) {
    // P is rounded to bf16 (8 significant bits) before the second dot.
    CHECK_THAT_CLOSE(out, refO, 1e-2, 4e-3);
    CHECK_THAT_CLOSE(lse, refL, 1e-4, 1e-4);
  } else {
    CHECK_THAT_CLOSE(out, refO, 2e-4, 2e-5);
    CHECK_THAT_CLOSE(lse, refL, 2e-5, 2e-5);
  }
}
} // namespace

TEST_CASE("block-sparse attention with built-in masks and GQA", "[ops]") {
  SECTION("no mask") { runBlockSparse({"none"}); }
  SECTION("causal") { runBlockSparse({"causal"}); }
  SECTION("sliding window") { runBlockSparse({"sliding_window", 40}); }
  SECTION("prefix LM") { runBlockSparse({"prefix_lm", 0, 30}); }
  SECTION("document") { runBlockSparse({"document"}); }
  SECTION("soft-capped scores") { runBlockSparse({"causal", 0, 0, 20.0}); }
  SECTION("a head that sees nothing: out 0, lse -inf") {
    runBlockSparse({"none", 0, 0, 0, true});
  }
  SECTION("bf16 q, k, v (f32 accumulation, out and lse)") {
    runBlockSparse({"causal", 0, 0, 0, false, "bf16"});
  }
  SECTION("bf16 with an empty head and soft-capping") {
    runBlockSparse({"document", 0, 0, 30.0, true, "bf16"});
  }
  SECTION("query blocks of 32, key blocks of 16 (sliding window)") {
    runBlockSparse({"sliding_window", 40, 0, 0, false, "f32", 32, 16});
  }
  SECTION("query blocks of 16, key blocks of 64 (document, bf16)") {
    runBlockSparse({"document", 0, 0, 0, false, "bf16", 16, 64});
  }
}

TEST_CASE("DSA lightning indexer", "[ops][dsa]") {
  const int64_t T = 40, S = 70, H = 8, Di = 32, off = 30;
  auto k = compileOp("dsa_indexer", {{"index_heads", "8"}, {"index_dim", "32"}});
  auto q = randomVector(T * H * Di), w = randomVector(T * H), kk = randomVector(S * Di);
  std::vector<float> out(T * S, poison());
  REQUIRE_NOLAUNCHERROR(sharedJIT().launch(
      *k, {kiln::arg(q.data()), kiln::arg(w.data()), kiln::arg(kk.data()), kiln::arg(out.data()),
           kiln::arg(T), kiln::arg(S), kiln::arg(off)},
      {cdiv(T, 16), cdiv(S, 64)}));
  std::vector<double> ref(T * S);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < S; ++s) {
      if (s > off + t) {
        ref[t * S + s] = -INFINITY;
        continue;
      }
      double acc = 0;
      for (int64_t j = 0; j < H; ++j) {
        double d = 0;
        for (int64_t c = 0; c < Di; ++c)
          d += double(q[(t * H + j) * Di + c]) * kk[s * Di + c];
        acc += double(w[t * H + j]) * std::max(d, 0.0);
      }
      ref[t * S + s] = acc;
    }
  CHECK_THAT_CLOSE(out, ref, 1e-5, 1e-5);
}

TEST_CASE("DSA top-k: ties, -inf, and k beyond the valid keys", "[ops][dsa]") {
  const int64_t T = 6, S = 300;
  for (int64_t K : {1, 16, 100}) {
    INFO("k = " << K);
    auto k = compileOp("dsa_topk", {{"k", std::to_string(K)}, {"block", "64"}});
    std::vector<float> scores = randomVector(T * S, -5, 5);
    for (int64_t s = 0; s < S; ++s) {
      scores[0 * S + s] = float(s % 7);           // many ties
      scores[1 * S + s] = s < 20 ? float(s) : -INFINITY; // only 20 valid
      scores[2 * S + s] = -INFINITY;              // none valid
      scores[3 * S + s] = s % 2 ? -0.0f : 0.0f;   // signed zeros tie
    }
    std::vector<int32_t> out(T * K, 12345);
    REQUIRE_NOLAUNCHERROR(sharedJIT().launch(
        *k, {kiln::arg(scores.data()), i32p(out.data()), kiln::arg(T), kiln::arg(S)}, {T}));
    for (int64_t t = 0; t < T; ++t) {
      std::vector<int64_t> order(S);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        float x = scores[t * S + a], y = scores[t * S + b];
        return x > y || (x == y && a < b); // stable: ties by index
      });
      std::vector<int32_t> want;
      for (int64_t i = 0; i < K && i < S; ++i)
        if (std::isfinite(scores[t * S + order[i]]))
          want.push_back(int32_t(order[i]));
      std::sort(want.begin(), want.end());
      want.resize(K, -1);
      std::vector<int32_t> got(out.begin() + t * K, out.begin() + (t + 1) * K);
      INFO("row " << t);
      CHECK(got == want);
    }
  }
}

TEST_CASE("DSA token-sparse attention", "[ops][dsa]") {
  const int64_t Sq = 5, Hq = 16, Dqk = 96, Dv = 64, Skv = 120, topk = 50;
  // heads_block 8: two programs per query read the same indices.
  auto k = compileOp("dsa_sparse_attention",
                     {{"d_qk", "96"}, {"d_v", "64"}, {"block_k", "32"}, {"heads_block", "8"}});
  auto q = randomVector(Sq * Hq * Dqk), kv = randomVector(Skv * Dqk);
  std::vector<int32_t> idx(Sq * topk);
  for (int64_t t = 0; t < Sq; ++t)
    for (int64_t j = 0; j < topk; ++j)
      idx[t * topk + j] = (t == 4 || (j % 5 == 4)) ? -1 : int32_t((t * 31 + j * 7) % Skv);
  // Indices outside [-1, Skv): skipped and counted.
  idx[1 * topk + 3] = int32_t(Skv + 5);
  idx[2 * topk + 40] = -7;
  idx[3 * topk + 49] = int32_t(Skv);
  std::vector<float> out(Sq * Hq * Dv, poison()), lse(Sq * Hq, poison());
  std::vector<int32_t> errors(1, 0);
  float scale = 0.1f;
  REQUIRE_NOLAUNCHERROR(sharedJIT().launch(
      *k, {kiln::arg(q.data()), kiln::arg(kv.data()), i32p(idx.data()), kiln::arg(out.data()),
           kiln::arg(lse.data()), i32p(errors.data()), kiln::arg(Sq), kiln::arg(Hq),
           kiln::arg(Skv), kiln::arg(topk), kiln::arg(scale)},
      {Sq, cdiv(Hq, 8)}));
  CHECK(errors[0] == 3);
  std::vector<double> refO(out.size(), 0.0), refL(lse.size(), -INFINITY);
  for (int64_t t = 0; t < Sq; ++t)
    for (int64_t h = 0; h < Hq; ++h) {
      std::vector<double> s;
      std::vector<int32_t> keys;
      for (int64_t j = 0; j < topk; ++j) {
        int32_t r = idx[t * topk + j];
        if (r < 0 || r >= Skv)
          continue;
        double d = 0;
        for (int64_t c = 0; c < Dqk; ++c)
          d += double(q[(t * Hq + h) * Dqk + c]) * scale * kv[r * Dqk + c];
        s.push_back(d);
        keys.push_back(r);
      }
      if (keys.empty())
        continue; // a row with no selected key: out 0, lse -inf
      double mx = *std::max_element(s.begin(), s.end()), sum = 0;
      for (double &x : s)
        sum += (x = std::exp(x - mx));
      for (size_t j = 0; j < keys.size(); ++j)
        for (int64_t c = 0; c < Dv; ++c)
          refO[(t * Hq + h) * Dv + c] += s[j] / sum * kv[keys[j] * Dqk + c];
      refL[t * Hq + h] = mx + std::log(sum);
    }
  CHECK_THAT_CLOSE(out, refO, 1e-4, 1e-5);
  CHECK_THAT_CLOSE(lse, refL, 1e-5, 1e-5);
}

namespace {
struct ConvCase {
  int64_t N, T, H, W, C, OC, KT, KH, KW, ST, SH, SW, PT, PH, PW, DH, DW, G;
};

void runConv(const ConvCase &p, bool bf16 = false) {
  Cfg cfg = {{"kt", std::to_string(p.KT)}, {"kh", std::to_string(p.KH)},
             {"kw", std::to_string(p.KW)}, {"st", std::to_string(p.ST)},
             {"sh", std::to_string(p.SH)}, {"sw", std::to_string(p.SW)},
             {"pt", std::to_string(p.PT)}, {"ph", std::to_string(p.PH)},
             {"pw", std::to_string(p.PW)}, {"dh", std::to_string(p.DH)},
             {"dw", std::to_string(p.DW)}, {"groups", std::to_string(p.G)},
             {"block_c", "8"}, {"dtype", bf16 ? "bf16" : "f32"}};
  auto k = compileOp("conv", cfg);
  int64_t OT = (p.T + 2 * p.PT - p.KT) / p.ST + 1;
  int64_t OH = (p.H + 2 * p.PH - p.DH * (p.KH - 1) - 1) / p.SH + 1;
  int64_t OW = (p.W + 2 * p.PW - p.DW * (p.KW - 1) - 1) / p.SW + 1;
  int64_t Cg = p.C / p.G, OCg = p.OC / p.G;
  auto in = randomVector(p.N * p.T * p.H * p.W * p.C);
  auto w = randomVector(p.KT * p.KH * p.KW * Cg * p.OC);
  auto bias = randomVector(p.OC);
  // bf16: input and weight are rounded; the reference uses the rounded values.
  std::vector<uint16_t> in16(in.size()), w16(w.size());
  if (bf16) {
    for (size_t i = 0; i < in.size(); ++i)
      in[i] = float(fromBF16(in16[i] = toBF16(in[i])));
    for (size_t i = 0; i < w.size(); ++i)
      w[i] = float(fromBF16(w16[i] = toBF16(w[i])));
  }
  kiln_arg inArg = bf16 ? kiln::argPtr(in16.data(), KILN_DTYPE_BF16) : kiln::arg(in.data());
  kiln_arg wArg = bf16 ? kiln::argPtr(w16.data(), KILN_DTYPE_BF16) : kiln::arg(w.data());
  std::vector<float> out(p.N * OT * OH * OW * p.OC, poison());
  int64_t M = p.N * OT * OH * OW;
  REQUIRE_NOLAUNCHERROR(sharedJIT().launch(
      *k, {inArg, wArg, kiln::arg(bias.data()), kiln::arg(out.data()),
           kiln::arg(p.N), kiln::arg(p.T), kiln::arg(p.H), kiln::arg(p.W), kiln::arg(p.C),
           kiln::arg(p.OC), kiln::arg(OT), kiln::arg(OH), kiln::arg(OW)},
      {cdiv(M, 64), p.G * cdiv(OCg, 64)}));
  std::vector<double> ref(out.size());
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t ot = 0; ot < OT; ++ot)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow)
          for (int64_t oc = 0; oc < p.OC; ++oc) {
            int64_t g = oc / OCg;
            double acc = bias[oc];
            for (int64_t kt = 0; kt < p.KT; ++kt)
              for (int64_t kh = 0; kh < p.KH; ++kh)
                for (int64_t kw = 0; kw < p.KW; ++kw) {
                  int64_t it = ot * p.ST - p.PT + kt, ih = oh * p.SH - p.PH + kh * p.DH,
                          iw = ow * p.SW - p.PW + kw * p.DW;
                  if (it < 0 || it >= p.T || ih < 0 || ih >= p.H || iw < 0 || iw >= p.W)
                    continue;
                  for (int64_t c = 0; c < Cg; ++c)
                    acc += double(in[(((n * p.T + it) * p.H + ih) * p.W + iw) * p.C + g * Cg + c]) *
                           w[(((kt * p.KH + kh) * p.KW + kw) * Cg + c) * p.OC + oc];
                }
            ref[(((n * OT + ot) * OH + oh) * OW + ow) * p.OC + oc] = acc;
          }
  CHECK_THAT_CLOSE(out, ref, 1e-4, 1e-4);
}
} // namespace

TEST_CASE("conv by implicit GEMM", "[ops][conv]") {
  SECTION("conv2d 3x3, stride 2, padding 1, groups 2, ragged sizes") {
    runConv({2, 1, 13, 11, 6, 10, 1, 3, 3, 1, 2, 2, 0, 1, 1, 1, 1, 2});
  }
  SECTION("dilated 3x3") { runConv({1, 1, 9, 10, 5, 7, 1, 3, 3, 1, 1, 1, 0, 2, 2, 2, 2, 1}); }
  SECTION("ViT-style patch embedding (kernel = stride = 4)") {
    runConv({2, 1, 16, 12, 3, 20, 1, 4, 4, 1, 4, 4, 0, 0, 0, 1, 1, 1});
  }
  SECTION("14-pixel patches on a 28x42 image") {
    runConv({1, 1, 28, 42, 3, 9, 1, 14, 14, 1, 14, 14, 0, 0, 0, 1, 1, 1});
  }
  SECTION("Qwen2-VL-style Conv3d patches (temporal 2)") {
    runConv({1, 4, 8, 8, 3, 12, 2, 4, 4, 2, 4, 4, 0, 0, 0, 1, 1, 1});
  }
  SECTION("a single-pixel-wide image") {
    runConv({1, 1, 7, 1, 4, 5, 1, 3, 3, 1, 1, 1, 0, 1, 1, 1, 1, 1});
  }
  SECTION("bf16 input and weight (f32 accumulation and output)") {
    runConv({2, 1, 13, 11, 6, 10, 1, 3, 3, 1, 2, 2, 0, 1, 1, 1, 1, 2}, true);
  }
}

TEST_CASE("depthwise conv2d", "[ops][conv]") {
  struct Case {
    int64_t ks, stride, dil;
  };
  for (Case tc : {Case{3, 1, 1}, Case{7, 1, 1}, Case{3, 2, 1}, Case{3, 1, 2}}) {
    INFO("kernel " << tc.ks << " stride " << tc.stride << " dilation " << tc.dil);
    const int64_t N = 2, H = 15, W = 9, C = 70, ks = tc.ks, pad = tc.dil * (ks / 2);
    const int64_t OH = (H + 2 * pad - tc.dil * (ks - 1) - 1) / tc.stride + 1;
    const int64_t OW = (W + 2 * pad - tc.dil * (ks - 1) - 1) / tc.stride + 1;
    auto s = std::to_string(tc.stride), d = std::to_string(tc.dil);
    auto k = compileOp("depthwise_conv2d",
                       {{"kh", std::to_string(ks)}, {"kw", std::to_string(ks)},
                        {"ph", std::to_string(pad)}, {"pw", std::to_string(pad)},
                        {"sh", s}, {"sw", s}, {"dh", d}, {"dw", d}, {"block_w", "4"}});
    auto in = randomVector(N * H * W * C), w = randomVector(ks * ks * C), bias = randomVector(C);
    std::vector<float> out(N * OH * OW * C, poison());
    REQUIRE_NOLAUNCHERROR(sharedJIT().launch(
        *k, {kiln::arg(in.data()), kiln::arg(w.data()), kiln::arg(bias.data()), kiln::arg(out.data()),
             kiln::arg(N), kiln::arg(H), kiln::arg(W), kiln::arg(C), kiln::arg(OH), kiln::arg(OW)},
        {N * OH * cdiv(C, 64), cdiv(OW, 4), 1}));
    std::vector<double> ref(out.size());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t y = 0; y < OH; ++y)
        for (int64_t x = 0; x < OW; ++x)
          for (int64_t c = 0; c < C; ++c) {
            double acc = bias[c];
            for (int64_t ky = 0; ky < ks; ++ky)
              for (int64_t kx = 0; kx < ks; ++kx) {
                int64_t iy = y * tc.stride - pad + ky * tc.dil, ix = x * tc.stride - pad + kx * tc.dil;
                if (iy >= 0 && iy < H && ix >= 0 && ix < W)
                  acc += double(in[((n * H + iy) * W + ix) * C + c]) * w[(ky * ks + kx) * C + c];
              }
            ref[((n * OH + y) * OW + x) * C + c] = acc;
          }
    CHECK_THAT_CLOSE(out, ref, 1e-5, 1e-5);
  }
}

TEST_CASE("operator configuration errors are reported", "[ops]") {
  auto e1 = kiln::ops::buildOpSource("conv", {{"nope", "1"}});
  CHECK(requireErr(e1).find("has no parameter 'nope'") != std::string::npos);
  auto e2 = kiln::ops::buildOpSource("conv", {{"kh", "abc"}});
  CHECK(requireErr(e2).find("must be an integer") != std::string::npos);
  auto e3 = kiln::ops::buildOpSource("no_such_op", {});
  CHECK(requireErr(e3).find("no operator named") != std::string::npos);
  auto e4 = kiln::ops::buildOpSource("dsa_sparse_attention", {{"d_v", "600"}});
  CHECK(requireErr(e4).find("d_v must be <= d_qk") != std::string::npos);
}
