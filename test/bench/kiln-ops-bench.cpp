//===- kiln-ops-bench.cpp - Benchmarks of the operator library -------------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Each operator's time and GFLOP/s or GB/s beside its closest peer, measured
// in the same run (medians of interleaved rounds): memcpy of the same bytes
// for the gathers, oneDNN convolution for the convolutions, attention built
// from oneDNN matmuls for block-sparse attention (and its own dense run:
// block-sparse attention at 10% block density should cost about 10% of it).
//
//   kiln-ops-bench [--json FILE] [--rounds N] [--threads N]
//
//===----------------------------------------------------------------------===//

#include "BenchSupport.h"
#include "kiln/JIT/JIT.h"
#include "kiln/Ops/Ops.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

extern "C" void omp_set_num_threads(int);

namespace {
using namespace kiln::bench;
int rounds = 5;

/// Median seconds of `f` and `g`, interleaved.
std::pair<double, double> timePair(const std::function<void()> &f,
                                   const std::function<void()> &g) {
  f();
  if (g)
    g();
  std::vector<double> a, b;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = Clock::now();
    f();
    a.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    if (g) {
      t0 = Clock::now();
      g();
      b.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  }
  return {median(a), g ? median(b) : 0.0};
}

/// float32 -> bfloat16 bits, round to nearest even.
Array<uint16_t> toBF16(const Array<float> &x) {
  Array<uint16_t> b(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], 4);
    b[i] = uint16_t((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
  }
  return b;
}

Array<float> rnd(size_t n) {
  static std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-1, 1);
  Array<float> v(n);
  for (auto &x : v)
    x = d(rng);
  return v;
}

kiln::JIT *jit;
std::shared_ptr<kiln::Kernel> op(const std::string &name,
                                 const std::map<std::string, std::string> &cfg = {}) {
  auto src = kiln::ops::buildOpSource(name, cfg);
  if (!src) {
    std::fprintf(stderr, "%s\n", llvm::toString(src.takeError()).c_str());
    std::exit(1);
  }
  return llvm::cantFail(jit->compile(*src, "op:" + name));
}
void launch(const kiln::Kernel &k, std::initializer_list<kiln_arg> args,
            std::initializer_list<int64_t> grid) {
  llvm::cantFail(jit->launch(k, args, grid));
}
int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- oneDNN peers ------------------------------------------------------------------

dnnl::engine &engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}
dnnl::stream &stream() {
  static dnnl::stream s(engine());
  return s;
}

struct DnnlConv {
  dnnl::convolution_forward prim;
  dnnl::memory src, wei, bias, dst;
  // NHWC src/dst, HWIO (or depthwise HW1C) user weights reordered once.
  DnnlConv(int64_t N, int64_t H, int64_t W, int64_t C, int64_t OC, int64_t K, int64_t stride,
           int64_t pad, int64_t groups, float *x, float *w, float *b, float *y) {
    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    int64_t OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
    dnnl::memory::desc src_md({N, C, H, W}, dt::f32, tag::nhwc);
    dnnl::memory::desc dst_md({N, OC, OH, OW}, dt::f32, tag::nhwc);
    dnnl::memory::desc bias_md({OC}, dt::f32, tag::a);
    dnnl::memory::dims wdims = groups == 1 ? dnnl::memory::dims{OC, C, K, K}
                                           : dnnl::memory::dims{groups, OC / groups, C / groups, K, K};
    dnnl::memory::desc wei_any(wdims, dt::f32, tag::any);
    dnnl::memory::desc wei_user(wdims, dt::f32, groups == 1 ? tag::hwio : tag::hwigo);
    auto d = dnnl::convolution_forward::desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_md, wei_any,
        bias_md, dst_md, {stride, stride}, {pad, pad}, {pad, pad});
    auto pd = dnnl::convolution_forward::primitive_desc(d, engine());
    prim = dnnl::convolution_forward(pd);
    src = dnnl::memory(src_md, engine(), x);
    dst = dnnl::memory(dst_md, engine(), y);
    bias = dnnl::memory(bias_md, engine(), b);
    dnnl::memory user(wei_user, engine(), w);
    wei = dnnl::memory(pd.weights_desc(), engine());
    dnnl::reorder(user, wei).execute(stream(), user, wei);
    stream().wait();
  }
  void run() {
    prim.execute(stream(), {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_BIAS, bias},
                            {DNNL_ARG_DST, dst}});
    stream().wait();
  }
};

/// Dense attention from oneDNN matmuls: S = QK^T (scaled), row softmax in C++,
/// O = PV; per head.
struct DnnlAttention {
  dnnl::matmul qk, pv;
  int64_t H, S, D;
  float *q, *k, *v, *o;
  Array<float> s;
  DnnlAttention(int64_t H, int64_t S, int64_t D, float *q, float *k, float *v, float *o)
      : H(H), S(S), D(D), q(q), k(k), v(v), o(o), s(S * S) {
    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    dnnl::memory::desc qd({S, D}, dt::f32, tag::ab), kt({D, S}, dt::f32, tag::ba),
        sd({S, S}, dt::f32, tag::ab), vd({S, D}, dt::f32, tag::ab), od({S, D}, dt::f32, tag::ab);
    qk = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(qd, kt, sd), engine()));
    pv = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(sd, vd, od), engine()));
  }
  void run() {
    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    float scale = 1.0f / std::sqrt(float(D));
    for (int64_t h = 0; h < H; ++h) {
      dnnl::memory Q({{S, D}, dt::f32, tag::ab}, engine(), q + h * S * D);
      dnnl::memory K({{D, S}, dt::f32, tag::ba}, engine(), k + h * S * D);
      dnnl::memory Sm({{S, S}, dt::f32, tag::ab}, engine(), s.data());
      dnnl::memory V({{S, D}, dt::f32, tag::ab}, engine(), v + h * S * D);
      dnnl::memory O({{S, D}, dt::f32, tag::ab}, engine(), o + h * S * D);
      qk.execute(stream(), {{DNNL_ARG_SRC, Q}, {DNNL_ARG_WEIGHTS, K}, {DNNL_ARG_DST, Sm}});
      stream().wait();
      for (int64_t i = 0; i < S; ++i) {
        float *row = s.data() + i * S, mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < S; ++j)
          mx = std::max(mx, row[j] * scale);
        for (int64_t j = 0; j < S; ++j)
          sum += (row[j] = std::exp(row[j] * scale - mx));
        for (int64_t j = 0; j < S; ++j)
          row[j] /= sum;
      }
      pv.execute(stream(), {{DNNL_ARG_SRC, Sm}, {DNNL_ARG_WEIGHTS, V}, {DNNL_ARG_DST, O}});
      stream().wait();
    }
  }
};

} // namespace

int main(int argc, char **argv) {
  kiln::bench::quietOpenMP(argv);
  std::string jsonPath, only;
  int threads = 1;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc)
      jsonPath = argv[++i];
    else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else {
      std::fprintf(stderr, "usage: kiln-ops-bench [--json FILE] [--rounds N] [--threads N]\n"
                         "                      [--only gathers|attention|dsa|conv]\n");
      return 2;
    }
  }
  const char *sections[] = {"gathers", "attention", "dsa", "conv"};
  if (!only.empty() && llvm::find(sections, only) == std::end(sections)) {
    std::fprintf(stderr, "kiln-ops-bench: --only takes gathers, attention, dsa or conv\n");
    return 2;
  }
  auto want = [&](const char *section) { return only.empty() || only == section; };
  kiln::JITOptions o;
  o.numThreads = threads;
  auto j = llvm::cantFail(kiln::JIT::create(o));
  jit = j.get();
  omp_set_num_threads(threads);
  std::printf("Kiln operator benchmark (%d thread(s), %d rounds, medians; target %s)\n", threads,
              rounds, jit->getTarget().name.c_str());

  if (want("gathers")) {
    std::printf("\nIndex gathers (peer: memcpy of the same bytes)\n");
    {
      const int64_t vocab = 32000, dim = 1024, n = 8192;
      auto w = rnd(vocab * dim);
      Array<int32_t> ids(n), errors(1);
      for (int64_t i = 0; i < n; ++i)
        ids[i] = int32_t((i * 7919) % vocab);
      Array<float> out(n * dim), copy(n * dim);
      // Streaming stores, as kiln.ops picks for outputs of 8 MiB or more
      // (ops._STREAM_BYTES); and the same kernel with plain stores.
      for (const char *streaming : {"1", "0"}) {
        auto k = op("embedding", {{"streaming", streaming}});
        auto [tk, tm] = timePair(
            [&] {
              launch(*k, {kiln::arg(w.data()), kiln::arg(ids.data()), kiln::arg(out.data()),
                          kiln::arg(errors.data()), kiln::arg(n), kiln::arg(vocab),
                          kiln::arg(dim)},
                     {cdiv(n, 8), cdiv(dim, 1024)});
            },
            [&] { std::memcpy(copy.data(), w.data() + 1000 * dim, n * dim * 4); });
        double bytes = 2.0 * n * dim * 4;
        record(*streaming == '1' ? "embedding_8192x1024_kiln"
                                 : "embedding_8192x1024_kiln_plain_stores",
               bytes / tk / 1e9, "GB/s", "memcpy", tm / tk);
      }
    }
    {
      const int64_t bs = 16, width = 1024, batch = 8, maxLen = 2048, maxBlocks = maxLen / bs,
                    numBlocks = batch * maxBlocks;
      auto cache = rnd(numBlocks * bs * width);
      Array<int32_t> table(batch * maxBlocks), lens(batch, int32_t(maxLen)), errors(1);
      for (int64_t i = 0; i < batch * maxBlocks; ++i)
        table[i] = int32_t((i * 37) % numBlocks);
      Array<float> out(batch * maxLen * width), copy(out.size());
      auto k = op("paged_kv_gather", {{"streaming", "1"}}); // (as kiln.ops, 64 MiB)
      auto [tk, tm] = timePair(
          [&] {
            launch(*k, {kiln::arg(cache.data()), kiln::arg(table.data()), kiln::arg(lens.data()),
                        kiln::arg(out.data()), kiln::arg(errors.data()), kiln::arg(batch),
                        kiln::arg(maxBlocks), kiln::arg(numBlocks), kiln::arg(maxLen), kiln::arg(width)},
                   {cdiv(maxLen, 8), cdiv(width, 1024), batch});
          },
          [&] { std::memcpy(copy.data(), cache.data(), out.size() * 4); });
      double bytes = 2.0 * out.size() * 4;
      record("paged_kv_gather_8x2048x1024_kiln", bytes / tk / 1e9, "GB/s", "memcpy", tm / tk);
    }
    {
      const int64_t T = 4096, K = 2, H = 1024, rows = T * K;
      auto x = rnd(T * H);
      Array<int32_t> src(rows), errors(1);
      for (int64_t r = 0; r < rows; ++r)
        src[r] = int32_t((r * 5) % T);
      Array<float> y(rows * H), copy(rows * H);
      auto k = op("moe_permute", {{"streaming", "1"}}); // (as kiln.ops, 32 MiB)
      auto [tk, tm] = timePair(
          [&] {
            launch(*k, {kiln::arg(x.data()), kiln::arg(src.data()), kiln::arg(y.data()),
                        kiln::arg(errors.data()), kiln::arg(rows), kiln::arg(T), kiln::arg(H)},
                   {cdiv(rows, 8), cdiv(H, 1024)});
          },
          [&] {
            std::memcpy(copy.data(), x.data(), T * H * 4);
            std::memcpy(copy.data() + T * H, x.data(), T * H * 4);
          });
      record("moe_permute_4096x2x1024_kiln", 2.0 * rows * H * 4 / tk / 1e9, "GB/s", "memcpy",
             tm / tk);
    }
    {
      // gpt-oss's hidden size, top-4. The blocks are kiln.ops' on the host
      // (a copy of _unpermute_blocks: the row in the fewest blocks of at
      // most 4096 columns, 4 tokens past 2048 columns). The peer, memcpy,
      // moves as many bytes (half read, half written).
      const int64_t T = 2048, K = 4, H = 2880, rows = T * K, BT = 4, BH = 2880;
      auto y = rnd(rows * H), weights = rnd(T * K);
      Array<int32_t> slots(T * K), errors(1);
      for (int64_t i = 0; i < T * K; ++i)
        slots[i] = int32_t((i * 7919) % rows); // a permutation (7919 is prime)
      Array<float> out(T * H), copy((rows + T) * H / 2);
      auto k = op("moe_unpermute", {{"block_t", std::to_string(BT)},
                                    {"block_h", std::to_string(BH)}});
      const double bytes = double(rows + T) * H * 4;
      auto [tk, tm] = timePair(
          [&] {
            launch(*k, {kiln::arg(y.data()), kiln::arg(slots.data()), kiln::arg(weights.data()),
                        kiln::arg(out.data()), kiln::arg(errors.data()), kiln::arg(T),
                        kiln::arg(K), kiln::arg(rows), kiln::arg(H)},
                   {cdiv(T, BT), cdiv(H, BH)});
          },
          [&] { std::memcpy(copy.data(), y.data(), copy.size() * 4); });
      record("moe_unpermute_2048x4x2880_kiln", bytes / tk / 1e9, "GB/s", "memcpy", tm / tk);
    }
  }

  if (want("attention")) {
    std::printf("\nBlock-sparse attention (B=1, H=8, S=2048, D=64, causal-free)\n");
    {
      const int64_t H = 8, S = 2048, D = 64, BLK = 64;
      auto q = rnd(H * S * D), kk = rnd(H * S * D), v = rnd(H * S * D);
      Array<float> out(H * S * D), lse(H * S), out2(H * S * D);
      Array<int32_t> doc(S);
      auto k = op("block_sparse_attention");
      auto run = [&](const kiln::ops::BlockMask &m) {
        launch(*k, {kiln::arg(q.data()), kiln::arg(kk.data()), kiln::arg(v.data()),
                    kiln::arg(out.data()), kiln::arg(lse.data()), kiln::arg(m.kvNum.data()),
                    kiln::arg(m.kvIdx.data()), kiln::arg(m.fullNum.data()), kiln::arg(m.fullIdx.data()),
                    kiln::arg(doc.data()), kiln::arg(int64_t(1)), kiln::arg(H), kiln::arg(S),
                    kiln::arg(S), kiln::arg(m.numQBlocks), kiln::arg(m.maxBlocks),
                    kiln::arg(1.0f / 8.0f)},
               {m.numQBlocks, H});
      };
      auto dense = llvm::cantFail(kiln::ops::makeBlockMask(H, S, S, BLK, [](int64_t, int64_t, int64_t) { return true; }));
      std::mt19937 rng(3);
      std::vector<std::vector<bool>> pick(H * (S / BLK), std::vector<bool>(S / BLK));
      for (auto &row : pick)
        for (size_t i = 0; i < row.size(); ++i)
          row[i] = (rng() % 10) == 0;
      auto sparse = llvm::cantFail(kiln::ops::makeBlockMask(H, S, S, BLK, [&](int64_t bh, int64_t qi, int64_t ki) {
        return bool(pick[bh * (S / BLK) + qi / BLK][ki / BLK]);
      }));
      int64_t visited = 0;
      for (size_t i = 0; i < sparse.kvNum.size(); ++i)
        visited += sparse.kvNum[i] + sparse.fullNum[i];
      double density = double(visited) / double(H * (S / BLK) * (S / BLK));
      DnnlAttention peer(H, S, D, q.data(), kk.data(), v.data(), out2.data());
      auto [td, tp] = timePair([&] { run(dense); }, [&] { peer.run(); });
      auto [ts, unused] = timePair([&] { run(sparse); }, nullptr);
      (void)unused;
      double flops = 4.0 * H * S * S * D;
      record("attention_dense_kiln", flops / td / 1e9, "GFLOP/s", "oneDNN-matmul attention", tp / td);
      record("attention_block_sparse_density", density * 100, "%");
      record("attention_block_sparse_time_vs_dense", ts / td * 100, "%", "density", (ts / td) / density);

      // bf16 q, k, v (f32 accumulation), dense, against the f32 kernel.
      auto qb = toBF16(q), kb = toBF16(kk), vb = toBF16(v);
      auto k16 = op("block_sparse_attention", {{"dtype", "bf16"}});
      auto run16 = [&] {
        launch(*k16, {kiln::argPtr(qb.data(), KILN_DTYPE_BF16), kiln::argPtr(kb.data(), KILN_DTYPE_BF16),
                      kiln::argPtr(vb.data(), KILN_DTYPE_BF16), kiln::arg(out.data()),
                      kiln::arg(lse.data()), kiln::arg(dense.kvNum.data()),
                      kiln::arg(dense.kvIdx.data()), kiln::arg(dense.fullNum.data()),
                      kiln::arg(dense.fullIdx.data()), kiln::arg(doc.data()), kiln::arg(int64_t(1)),
                      kiln::arg(H), kiln::arg(S), kiln::arg(S), kiln::arg(dense.numQBlocks),
                      kiln::arg(dense.maxBlocks), kiln::arg(1.0f / 8.0f)},
               {dense.numQBlocks, H});
      };
      auto [tb, tf] = timePair(run16, [&] { run(dense); });
      record("attention_dense_kiln_bf16", flops / tb / 1e9, "GFLOP/s", "the f32 Kiln kernel", tf / tb);
    }
    {
      // Decoding: one query per head, GQA (32 query heads over 8 KV heads),
      // 4096 keys, head dim 128, as kiln.ops runs it on the host: query
      // blocks of 1, keys in blocks of 64, the group's heads in one program
      // (pack_gqa). Peers: a memcpy of the same K and V bytes (the memory
      // bound) and the kernel without pack_gqa.
      const int64_t Hq = 32, Hkv = 8, S = 4096, D = 128, G = Hq / Hkv;
      auto q = rnd(Hq * D), kk = rnd(Hkv * S * D), v = rnd(Hkv * S * D);
      Array<float> out(Hq * D), lse(Hq), copy(2 * Hkv * S * D);
      Array<int32_t> doc(S, 0);
      auto m = llvm::cantFail(kiln::ops::makeBlockMask(Hq, 1, S, 1, 64, [](int64_t, int64_t, int64_t) { return true; }));
      auto config = [&](bool pack) {
        std::map<std::string, std::string> c = {{"block", "1"}, {"block_kv", "64"},
                                                {"head_dim", std::to_string(D)},
                                                {"gqa_group", std::to_string(G)}};
        if (pack)
          c["pack_gqa"] = "1";
        return c;
      };
      auto packed = op("block_sparse_attention", config(true));
      auto plain = op("block_sparse_attention", config(false));
      // (q, k and v passed as given: f32 or bf16.)
      auto runOn = [&](kiln::Kernel &kern, int64_t programs, kiln_arg qa,
                       kiln_arg ka, kiln_arg va) {
        launch(kern, {qa, ka, va,
                      kiln::arg(out.data()), kiln::arg(lse.data()), kiln::arg(m.kvNum.data()),
                      kiln::arg(m.kvIdx.data()), kiln::arg(m.fullNum.data()),
                      kiln::arg(m.fullIdx.data()), kiln::arg(doc.data()), kiln::arg(int64_t(1)),
                      kiln::arg(Hq), kiln::arg(int64_t(1)), kiln::arg(S), kiln::arg(m.numQBlocks),
                      kiln::arg(m.maxBlocks), kiln::arg(1.0f / std::sqrt(float(D)))},
               {m.numQBlocks, programs});
      };
      auto run = [&](kiln::Kernel &kern, int64_t programs) {
        runOn(kern, programs, kiln::arg(q.data()), kiln::arg(kk.data()), kiln::arg(v.data()));
      };
      const double bytes = 2.0 * Hkv * S * D * 4;
      auto [tk, tm] = timePair([&] { run(*packed, Hkv); }, [&] {
        std::memcpy(copy.data(), kk.data(), kk.size() * 4);
        std::memcpy(copy.data() + kk.size(), v.data(), v.size() * 4);
      });
      record("attention_decode_gqa32x8_4096_d128", bytes / tk / 1e9, "GB/s", "memcpy", tm / tk);
      auto [tk2, tp] = timePair([&] { run(*packed, Hkv); }, [&] { run(*plain, Hq); });
      record("attention_decode_pack_gqa_vs_per_head", bytes / tk2 / 1e9, "GB/s",
             "the kernel per query head", tp / tk2);
      // The same step on a bf16 KV cache (q bf16 too): half the bytes,
      // against the f32 kernel's time.
      auto qb = toBF16(q), kb = toBF16(kk), vb = toBF16(v);
      auto c16 = config(true);
      c16["dtype"] = "bf16";
      auto packed16 = op("block_sparse_attention", c16);
      auto run16 = [&] {
        runOn(*packed16, Hkv, kiln::argPtr(qb.data(), KILN_DTYPE_BF16),
              kiln::argPtr(kb.data(), KILN_DTYPE_BF16), kiln::argPtr(vb.data(), KILN_DTYPE_BF16));
      };
      auto [tb, tf] = timePair(run16, [&] { run(*packed, Hkv); });
      record("attention_decode_gqa32x8_4096_d128_bf16", bytes / 2 / tb / 1e9, "GB/s",
             "the f32 kernel", tf / tb);
    }
  }

  if (want("dsa")) {
    std::printf("\nDeepSeek sparse attention\n");
    {
      const int64_t T = 128, S = 4096, H = 64, Di = 128;
      auto q = rnd(T * H * Di), w = rnd(T * H), kk = rnd(S * Di);
      Array<float> scores(T * S);
      auto k = op("dsa_indexer");
      auto [t, u] = timePair([&] {
        launch(*k, {kiln::arg(q.data()), kiln::arg(w.data()), kiln::arg(kk.data()),
                    kiln::arg(scores.data()), kiln::arg(T), kiln::arg(S), kiln::arg(S - T)},
               {cdiv(T, 16), cdiv(S, 64)});
      }, nullptr);
      (void)u;
      record("dsa_indexer_128x4096_h64_d128", 2.0 * T * S * H * Di / t / 1e9, "GFLOP/s");
      auto topk = op("dsa_topk", {{"k", "2048"}});
      const int64_t K = 2048;
      Array<int32_t> idx(T * K), ref(T * K);
      // The peer: per row, std::nth_element over the counted indices (score
      // descending, index ascending) and a sort of the K taken, rows split
      // over the same number of threads.
      auto peerTopK = [&] {
        auto rows = [&](int64_t r0, int64_t r1) {
          Array<int32_t> cand;
          for (int64_t r = r0; r < r1; ++r) {
            const float *x = &scores[r * S];
            cand.clear();
            for (int64_t s = 0; s < S; ++s)
              if (x[s] > -INFINITY)
                cand.push_back(int32_t(s));
            if (int64_t(cand.size()) > K) {
              std::nth_element(cand.begin(), cand.begin() + K, cand.end(), [&](int32_t a, int32_t b) {
                return x[a] > x[b] || (x[a] == x[b] && a < b);
              });
              cand.resize(K);
            }
            std::sort(cand.begin(), cand.end());
            int32_t *o = &ref[r * K];
            std::copy(cand.begin(), cand.end(), o);
            std::fill(o + cand.size(), o + K, -1);
          }
        };
        std::vector<std::thread> pool;
        for (int i = 0; i < threads; ++i)
          pool.emplace_back(rows, T * i / threads, T * (i + 1) / threads);
        for (auto &th : pool)
          th.join();
      };
      auto [t2, u2] = timePair([&] {
        launch(*topk, {kiln::arg(scores.data()), kiln::arg(idx.data()), kiln::arg(T), kiln::arg(S)}, {T});
      }, peerTopK);
      if (idx != ref)
        std::printf("  (dsa_topk differs from std::nth_element's selection)\n");
      record("dsa_topk_2048_of_4096_per_row", t2 / T * 1e6, "us/row", "std::nth_element", u2 / t2);
      const int64_t Hq = 16, Dqk = 576, Dv = 512;
      auto qq = rnd(T * Hq * Dqk), kv = rnd(S * Dqk);
      Array<float> out(T * Hq * Dv), lse(T * Hq);
      auto sa = op("dsa_sparse_attention");
      Array<int32_t> dsaErrors(1, 0);
      auto [t3, u3] = timePair([&] {
        launch(*sa, {kiln::arg(qq.data()), kiln::arg(kv.data()), kiln::arg(idx.data()),
                     kiln::arg(out.data()), kiln::arg(lse.data()), kiln::arg(dsaErrors.data()),
                     kiln::arg(T), kiln::arg(Hq), kiln::arg(S), kiln::arg(int64_t(2048)),
                     kiln::arg(0.05f)},
               {T, 1});
      }, nullptr);
      (void)u3;
      double dsaFlops = 2.0 * T * Hq * 2048 * (Dqk + Dv);
      record("dsa_sparse_attention_topk2048_h16_576_512", dsaFlops / t3 / 1e9, "GFLOP/s");
      // bf16 q and kv (f32 accumulation, AMX where the CPU has it), against
      // the f32 kernel in the same run.
      auto qq16 = toBF16(qq), kv16 = toBF16(kv);
      auto sa16 = op("dsa_sparse_attention", {{"dtype", "bf16"}});
      auto [t4, t5] = timePair(
          [&] {
            launch(*sa16, {kiln::argPtr(qq16.data(), KILN_DTYPE_BF16),
                           kiln::argPtr(kv16.data(), KILN_DTYPE_BF16), kiln::arg(idx.data()),
                           kiln::arg(out.data()), kiln::arg(lse.data()),
                           kiln::arg(dsaErrors.data()), kiln::arg(T),
                           kiln::arg(Hq), kiln::arg(S), kiln::arg(int64_t(2048)),
                           kiln::arg(0.05f)},
                   {T, 1});
          },
          [&] {
            launch(*sa, {kiln::arg(qq.data()), kiln::arg(kv.data()), kiln::arg(idx.data()),
                         kiln::arg(out.data()), kiln::arg(lse.data()),
                         kiln::arg(dsaErrors.data()), kiln::arg(T), kiln::arg(Hq), kiln::arg(S),
                         kiln::arg(int64_t(2048)), kiln::arg(0.05f)},
                   {T, 1});
          });
      record("dsa_sparse_attention_bf16", dsaFlops / t4 / 1e9, "GFLOP/s", "the f32 Kiln kernel",
             t5 / t4);
    }
  }

  if (want("conv")) {
    // kiln.ops' default channels per step on the host (_conv_block_c): all
    // of a group's channels up to 64, else even blocks of at most 64.
    auto convBlockC = [](int64_t cg) {
      int64_t blocks = std::max<int64_t>(1, cdiv(cg, 64));
      return std::to_string(std::max<int64_t>(1, cdiv(cg, blocks)));
    };
    // ... and its output pixels per program (_conv_block_m): the least
    // padding among 64 and the multiples of 6 from 48 to 96, 64 on a tie.
    auto convBlockM = [](int64_t m) {
      int64_t best = 64;
      for (int64_t bm = 48; bm <= 96; bm += 6)
        if (cdiv(m, bm) * bm < cdiv(m, best) * best)
          best = bm;
      return best;
    };
    // ... and depthwise convolution's channels per program
    // (_depthwise_block_c): even blocks of at most 64, in whole vectors of
    // 8, or, with 256-bit vectors, blocks of 48 for a multiple of 48 over
    // 64; with 3 kernel rows or fewer and blocks of 48 or more, a step takes
    // a kernel column's taps of every row (row_taps).
    const bool wide = jit->getTarget().name.find("avx512") != std::string::npos;
    auto depthwiseBlockC = [wide](int64_t c) {
      if (c > 64 && c % 48 == 0 && !wide)
        return int64_t(48);
      int64_t blocks = std::max<int64_t>(1, cdiv(c, 64));
      return std::max<int64_t>(8, cdiv(cdiv(c, blocks), 8) * 8);
    };
    // ... and its pixels per program (_depthwise_block_w): an output row in
    // even segments of at most 64.
    auto depthwiseBlockW = [](int64_t ow) { return cdiv(ow, std::max<int64_t>(1, cdiv(ow, 64))); };
    // ... and conv's kernel rows per step (_conv_row_block): the most that
    // divide the kernel's height with at most 192 channels in the step.
    auto convRowBlock = [](int64_t kh, int64_t blockC) {
      int64_t best = 1;
      for (int64_t r = 2; r <= kh; ++r)
        if (kh % r == 0 && r * blockC <= 192)
          best = r;
      return std::to_string(best);
    };
    std::printf("\nVision convolutions (peer: oneDNN convolution, NHWC f32)\n");
    struct ConvCase {
      const char *name;
      int64_t N, H, W, C, OC, K, stride, pad, groups;
    };
    for (const ConvCase &c : {ConvCase{"conv2d_3x3_56x56x64", 1, 56, 56, 64, 64, 3, 1, 1, 1},
                              ConvCase{"conv2d_7x7s2_224x224x3_stem", 1, 224, 224, 3, 64, 7, 2, 3, 1},
                              ConvCase{"patch_embed_vit_b16_224", 1, 224, 224, 3, 768, 16, 16, 0, 1},
                              ConvCase{"depthwise_3x3_56x56x256", 1, 56, 56, 256, 256, 3, 1, 1, 256},
                              ConvCase{"depthwise_3x3_56x56x144_mobilenetv2", 1, 56, 56, 144, 144, 3, 1, 1, 144},
                              ConvCase{"depthwise_3x3_14x14x576_mobilenetv2", 1, 14, 14, 576, 576, 3, 1, 1, 576},
                              ConvCase{"depthwise_7x7_28x28x512", 1, 28, 28, 512, 512, 7, 1, 3, 512}}) {
      int64_t OH = (c.H + 2 * c.pad - c.K) / c.stride + 1, OW = (c.W + 2 * c.pad - c.K) / c.stride + 1;
      auto x = rnd(c.N * c.H * c.W * c.C), bias = rnd(c.OC);
      Array<float> y(c.N * OH * OW * c.OC), y2(y.size()), xpad;
      bool dw = c.groups == c.C;
      auto w = rnd(c.K * c.K * (c.C / c.groups) * c.OC);
      std::function<void()> kilnRun;
      std::shared_ptr<kiln::Kernel> k;
      std::string ks = std::to_string(c.K), ss = std::to_string(c.stride), ps = std::to_string(c.pad);
      if (dw) {
        int64_t bc = depthwiseBlockC(c.C), bw = depthwiseBlockW(OW);
        k = op("depthwise_conv2d", {{"kh", ks}, {"kw", ks}, {"sh", ss}, {"sw", ss}, {"ph", ps}, {"pw", ps},
                                    {"block_c", std::to_string(bc)}, {"block_w", std::to_string(bw)},
                                    {"row_taps", c.K <= 3 && bc >= 48 ? "1" : "0"}});
        kilnRun = [&, bc, bw] {
          launch(*k, {kiln::arg(x.data()), kiln::arg(w.data()), kiln::arg(bias.data()), kiln::arg(y.data()),
                      kiln::arg(c.N), kiln::arg(c.H), kiln::arg(c.W), kiln::arg(c.C), kiln::arg(OH), kiln::arg(OW)},
                 {c.N * OH * cdiv(c.C, bc), cdiv(OW, bw), 1});
        };
      } else if (c.K == c.stride && c.pad == 0 && c.W % c.K == 0) {
        // A patch embedding: each patch row (K pixels x C channels) is
        // contiguous, so it runs as a KHx1 convolution over "wide pixels" of
        // K*C channels (the same bytes, viewed differently).
        int64_t wideW = c.W / c.K, wideC = c.K * c.C, bm = convBlockM(c.N * OH * OW);
        std::string bc = convBlockC(wideC);
        k = op("conv", {{"kh", ks}, {"kw", "1"}, {"sh", ss}, {"sw", "1"}, {"block_c", bc},
                        {"block_m", std::to_string(bm)},
                        {"row_block", convRowBlock(c.K, std::stoll(bc))}});
        kilnRun = [&, wideW, wideC, bm] {
          launch(*k, {kiln::arg(x.data()), kiln::arg(w.data()), kiln::arg(bias.data()), kiln::arg(y.data()),
                      kiln::arg(c.N), kiln::arg(int64_t(1)), kiln::arg(c.H), kiln::arg(wideW), kiln::arg(wideC),
                      kiln::arg(c.OC), kiln::arg(int64_t(1)), kiln::arg(OH), kiln::arg(OW)},
                 {cdiv(c.N * OH * OW, bm), cdiv(c.OC, 64)});
        };
      } else {
        int64_t bm = convBlockM(c.N * OH * OW);
        // As kiln.ops (_conv_host, _WIDE_TAPS): with 12-48 channels in a
        // kernel row, its taps are one step, on an input padded along the
        // width and the height (the copy is timed with the kernel), and a
        // step takes several kernel rows (row_block).
        const bool wide = c.groups == 1 && c.K * c.C >= 12 && c.K * c.C <= 48;
        const int64_t Wp = wide ? c.W + 2 * c.pad : c.W, Hp = wide ? c.H + 2 * c.pad : c.H;
        std::string bc = convBlockC(c.C / c.groups * (wide ? c.K : 1));
        std::map<std::string, std::string> cfg = {
            {"kh", ks}, {"kw", ks}, {"sh", ss}, {"sw", ss}, {"ph", wide ? "0" : ps},
            {"pw", wide ? "0" : ps}, {"block_c", bc}, {"block_m", std::to_string(bm)}};
        if (wide) {
          cfg["wide_taps"] = "1";
          cfg["row_block"] = convRowBlock(c.K, std::stoll(bc));
        }
        k = op("conv", cfg);
        kilnRun = [&, bm, wide, Wp, Hp] {
          const float *in = x.data();
          if (wide) {
            xpad.assign(c.N * Hp * Wp * c.C, 0.0f);
            for (int64_t n = 0; n < c.N; ++n)
              for (int64_t r = 0; r < c.H; ++r)
                std::copy_n(&x[(n * c.H + r) * c.W * c.C], c.W * c.C,
                            &xpad[((n * Hp + r + c.pad) * Wp + c.pad) * c.C]);
            in = xpad.data();
          }
          launch(*k, {kiln::arg(in), kiln::arg(w.data()), kiln::arg(bias.data()), kiln::arg(y.data()),
                      kiln::arg(c.N), kiln::arg(int64_t(1)), kiln::arg(Hp), kiln::arg(Wp), kiln::arg(c.C),
                      kiln::arg(c.OC), kiln::arg(int64_t(1)), kiln::arg(OH), kiln::arg(OW)},
                 {cdiv(c.N * OH * OW, bm), cdiv(c.OC, 64)});
        };
      }
      DnnlConv peer(c.N, c.H, c.W, c.C, c.OC, c.K, c.stride, c.pad, c.groups, x.data(), w.data(),
                    bias.data(), y2.data());
      auto [tk, tp] = timePair(kilnRun, [&] { peer.run(); });
      double maxDiff = 0;
      for (size_t i = 0; i < y.size(); ++i)
        maxDiff = std::max(maxDiff, double(std::fabs(y[i] - y2[i])));
      double flops = 2.0 * c.N * OH * OW * c.OC * c.K * c.K * (c.C / c.groups);
      record(std::string(c.name) + "_kiln", flops / tk / 1e9, "GFLOP/s", "oneDNN", tp / tk);
      if (maxDiff > 1e-2) {
        std::fprintf(stderr, "%s: Kiln and oneDNN disagree (max |diff| %g)\n", c.name, maxDiff);
        return 1;
      }
    }
  }

  if (!jsonPath.empty())
    writeJson(jsonPath);
  return 0;
}
