//===- ExamplesTest.cpp - Run the example kernels against float64 ----------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Every example kernel is compiled by the JIT and run on fresh random inputs
// with sizes that are not multiples of its tile sizes; outputs are poisoned
// with NaN before each launch (an element the kernel fails to write fails the
// comparison) and compared with a float64 reference.
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

using namespace kiln::test;

TEST_CASE("vector_add matches the reference on ragged sizes", "[e2e]") {
  auto &jit = sharedJIT();
  auto k = compileExample(jit, "vector_add.mlir");
  for (int64_t n : {1, 7, 1000, 1023, 1024, 1025, 4097, 100003}) {
    std::vector<float> x = randomVector(n), y = randomVector(n);
    std::vector<float> out(n + 16, poison());
    REQUIRE_NOLAUNCHERROR(jit.launch(*k, {kiln::arg(x.data()), kiln::arg(y.data()),
                                          kiln::arg(out.data()), kiln::arg(n)},
                                     {ceilDiv(n, 1024)}));
    std::vector<double> ref(n);
    for (int64_t i = 0; i < n; ++i)
      ref[i] = double(x[i]) + double(y[i]);
    CHECK_THAT_CLOSE(out, ref, 1e-6, 1e-6);
    // Nothing past n was written.
    for (int64_t i = n; i < n + 16; ++i)
      CHECK(std::isnan(out[i]));
  }
}

TEST_CASE("softmax matches the reference on ragged sizes", "[e2e]") {
  auto &jit = sharedJIT();
  auto k = compileExample(jit, "softmax.mlir");
  for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {3, 255}, {7, 257},
                      {5, 1000}, {2, 4099}}) {
    std::vector<float> x = randomVector(m * n, -8.0, 8.0);
    std::vector<float> out(m * n, poison());
    REQUIRE_NOLAUNCHERROR(jit.launch(
        *k, {kiln::arg(x.data()), kiln::arg(out.data()), kiln::arg(m), kiln::arg(n)},
        {m}));
    std::vector<double> ref(m * n);
    for (int64_t r = 0; r < m; ++r) {
      double mx = -INFINITY, sum = 0;
      for (int64_t c = 0; c < n; ++c)
        mx = std::max(mx, double(x[r * n + c]));
      for (int64_t c = 0; c < n; ++c)
        sum += std::exp(double(x[r * n + c]) - mx);
      for (int64_t c = 0; c < n; ++c)
        ref[r * n + c] = std::exp(double(x[r * n + c]) - mx) / sum;
    }
    CHECK_THAT_CLOSE(out, ref, 2e-5, 1e-7);
  }
}

TEST_CASE("layernorm matches the reference on ragged sizes", "[e2e]") {
  auto &jit = sharedJIT();
  auto k = compileExample(jit, "layernorm.mlir");
  for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {3, 255}, {4, 257},
                      {5, 1000}, {2, 4099}}) {
    std::vector<float> x = randomVector(m * n, -3.0, 5.0);
    std::vector<float> w = randomVector(n), b = randomVector(n);
    std::vector<float> y(m * n, poison());
    float eps = 1e-5f;
    REQUIRE_NOLAUNCHERROR(jit.launch(
        *k, {kiln::arg(x.data()), kiln::arg(w.data()), kiln::arg(b.data()),
             kiln::arg(y.data()), kiln::arg(m), kiln::arg(n), kiln::arg(eps)},
        {m}));
    std::vector<double> ref(m * n);
    for (int64_t r = 0; r < m; ++r) {
      double mean = 0, var = 0;
      for (int64_t c = 0; c < n; ++c)
        mean += x[r * n + c];
      mean /= n;
      for (int64_t c = 0; c < n; ++c)
        var += (x[r * n + c] - mean) * (x[r * n + c] - mean);
      var /= n;
      for (int64_t c = 0; c < n; ++c)
        ref[r * n + c] =
            (x[r * n + c] - mean) / std::sqrt(var + eps) * w[c] + b[c];
    }
    CHECK_THAT_CLOSE(y, ref, 2e-4, 2e-4);
  }
}

template <typename In>
static void checkMatmul(kiln::JIT &jit, const kiln::Kernel &k, int64_t m,
                        int64_t n, int64_t kk, const std::vector<In> &a,
                        const std::vector<In> &b,
                        const std::vector<double> &ad,
                        const std::vector<double> &bd) {
  std::vector<float> c(m * n, poison());
  REQUIRE_NOLAUNCHERROR(jit.launch(
      k, {kiln::argPtr(a.data(), dtypeOf<In>()), kiln::argPtr(b.data(), dtypeOf<In>()),
          kiln::arg(c.data()), kiln::arg(m), kiln::arg(n), kiln::arg(kk)},
      {ceilDiv(n, 64), ceilDiv(m, 64)}));
  std::vector<double> ref(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < kk; ++p)
      for (int64_t j = 0; j < n; ++j)
        ref[i * n + j] += ad[i * kk + p] * bd[p * n + j];
  CHECK_THAT_CLOSE(c, ref, 1e-4, 1e-4 * std::sqrt(double(kk)));
}

TEST_CASE("matmul (f32) matches the reference on ragged sizes", "[e2e]") {
  auto &jit = sharedJIT();
  auto k = compileExample(jit, "matmul.mlir");
  for (auto [m, n, kk] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                          {63, 65, 31}, {100, 37, 129}, {128, 128, 64},
                          {257, 129, 97}}) {
    std::vector<float> a = randomVector(m * kk), b = randomVector(kk * n);
    std::vector<double> ad(a.begin(), a.end()), bd(b.begin(), b.end());
    checkMatmul(jit, *k, m, n, kk, a, b, ad, bd);
  }
}

TEST_CASE("matmul (bf16 inputs, f32 accumulation) matches the reference",
          "[e2e]") {
  auto &jit = sharedJIT();
  auto k = compileExample(jit, "matmul_bf16.mlir");
  for (auto [m, n, kk] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                          {63, 65, 31}, {100, 37, 129}, {130, 66, 70}}) {
    std::vector<uint16_t> a(m * kk), b(kk * n);
    std::vector<double> ad(m * kk), bd(kk * n);
    std::vector<float> af = randomVector(m * kk), bf = randomVector(kk * n);
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = toBF16(af[i]);
      ad[i] = fromBF16(a[i]);
    }
    for (size_t i = 0; i < b.size(); ++i) {
      b[i] = toBF16(bf[i]);
      bd[i] = fromBF16(b[i]);
    }
    checkMatmul(jit, *k, m, n, kk, a, b, ad, bd);
  }
}

TEST_CASE("block-sparse attention matches the reference", "[e2e]") {
  auto &jit = sharedJIT();
  auto k = compileExample(jit, "block_sparse_attention.mlir");
  std::mt19937 rng(testSeed());
  for (int64_t s : {1, 100, 200}) {
    const int64_t bh = 3, d = 64, block = 64;
    int64_t nqb = ceilDiv(s, block), nkb = nqb;
    int64_t maxb = nkb;
    std::vector<float> q = randomVector(bh * s * d), kmat = randomVector(bh * s * d),
                       v = randomVector(bh * s * d);
    std::vector<int32_t> num(bh * nqb), idx(bh * nqb * maxb, -7);
    // A random subset of key blocks per query block; the first query block
    // of head 1 sees none (a fully masked row: out 0, lse -inf, never NaN).
    for (int64_t h = 0; h < bh; ++h)
      for (int64_t qb = 0; qb < nqb; ++qb) {
        int32_t count = 0;
        for (int64_t kb = 0; kb < nkb; ++kb)
          if (rng() % 3 != 0)
            idx[(h * nqb + qb) * maxb + count++] = int32_t(kb);
        if (h == 1 && qb == 0)
          count = 0;
        num[h * nqb + qb] = count;
      }
    float scale = 1.0f / std::sqrt(float(d));
    std::vector<float> out(bh * s * d, poison()), lse(bh * s, poison());
    REQUIRE_NOLAUNCHERROR(jit.launch(
        *k, {kiln::arg(q.data()), kiln::arg(kmat.data()), kiln::arg(v.data()),
             kiln::arg(out.data()), kiln::arg(lse.data()), kiln::arg(num.data()),
             kiln::arg(idx.data()), kiln::arg(bh), kiln::arg(s), kiln::arg(nqb),
             kiln::arg(maxb), kiln::arg(scale)},
        {nqb, bh}));
    std::vector<double> refOut(bh * s * d, 0.0), refLse(bh * s);
    for (int64_t h = 0; h < bh; ++h)
      for (int64_t i = 0; i < s; ++i) {
        int64_t qb = i / block;
        std::vector<int64_t> keys;
        for (int32_t j = 0; j < num[h * nqb + qb]; ++j)
          for (int64_t t = 0; t < block; ++t) {
            int64_t key = int64_t(idx[(h * nqb + qb) * maxb + j]) * block + t;
            if (key < s)
              keys.push_back(key);
          }
        if (keys.empty()) {
          refLse[h * s + i] = -INFINITY;
          continue;
        }
        std::vector<double> sc;
        double mx = -INFINITY;
        for (int64_t key : keys) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += double(q[(h * s + i) * d + c]) * scale *
                   double(kmat[(h * s + key) * d + c]);
          sc.push_back(dot);
          mx = std::max(mx, dot);
        }
        double sum = 0;
        for (double &x : sc)
          sum += (x = std::exp(x - mx));
        for (size_t j = 0; j < keys.size(); ++j)
          for (int64_t c = 0; c < d; ++c)
            refOut[(h * s + i) * d + c] +=
                sc[j] / sum * double(v[(h * s + keys[j]) * d + c]);
        refLse[h * s + i] = mx + std::log(sum);
      }
    CHECK_THAT_CLOSE(out, refOut, 1e-4, 1e-5);
    CHECK_THAT_CLOSE(lse, refLse, 1e-5, 1e-5);
  }
}
