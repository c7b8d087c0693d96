//===- kiln-demo.cpp - Compile and run every example kernel ----------------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// `make demo`: each example kernel is compiled by the JIT (through the disk
// cache), run on a realistic size, checked against a float64 reference, and
// timed (median of several runs) with its GFLOP/s or GB/s.
//
//===----------------------------------------------------------------------===//

#include "kiln/JIT/JIT.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <vector>

namespace {
using Clock = std::chrono::steady_clock;

std::string readFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<float> randomVector(size_t n, float lo = -1, float hi = 1) {
  static std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto &x : v)
    x = d(rng);
  return v;
}

uint16_t toBF16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return uint16_t((b + 0x7fff + ((b >> 16) & 1)) >> 16);
}
float fromBF16(uint16_t h) {
  uint32_t b = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

/// Median seconds of `runs` calls of `f`.
double timeIt(const std::function<void()> &f, int runs = 5) {
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    auto a = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// Max |got - ref| / (atol + rtol |ref|); NaN counts as a failure.
bool close(const std::vector<float> &got, const std::vector<double> &ref,
           double rtol, double atol) {
  for (size_t i = 0; i < ref.size(); ++i) {
    double g = got[i], r = ref[i];
    if (std::isinf(r) && g == r)
      continue;
    if (!(std::fabs(g - r) <= atol + rtol * std::fabs(r)))
      return false;
  }
  return true;
}

int failures = 0;

void report(const char *name, const char *shape, bool ok, double compileMs,
            double seconds, double amount, const char *unit) {
  std::printf("  %-24s %-22s %-8s compile %7.1f ms  run %9.3f ms  %8.1f %s\n",
              name, shape, ok ? "ok" : "MISMATCH", compileMs, seconds * 1e3,
              amount / seconds / 1e9, unit);
  if (!ok)
    ++failures;
}

template <typename F> double msOf(F &&f) {
  auto a = Clock::now();
  f();
  return std::chrono::duration<double, std::milli>(Clock::now() - a).count();
}

void check(llvm::Error e) {
  if (e) {
    std::fprintf(stderr, "launch failed: %s\n", llvm::toString(std::move(e)).c_str());
    std::exit(1);
  }
}
} // namespace

int main(int argc, char **argv) {
  std::string dir = argc > 1 ? argv[1] : KILN_EXAMPLES_DIR;
  auto jitOr = kiln::JIT::create();
  if (!jitOr) {
    std::fprintf(stderr, "%s\n", llvm::toString(jitOr.takeError()).c_str());
    return 1;
  }
  kiln::JIT &jit = **jitOr;
  std::printf("Kiln demo: example kernels compiled for %s, run on %d threads "
              "(cache: %s)\n",
              jit.getTarget().name.c_str(),
              kiln_runtime_num_threads(jit.getRuntime()),
              jit.getCacheDir().c_str());
  auto compile = [&](const char *file, double &ms) {
    std::shared_ptr<kiln::Kernel> k;
    ms = msOf([&] {
      auto r = jit.compile(readFile(dir + "/" + file), dir + "/" + file);
      if (!r) {
        std::fprintf(stderr, "%s\n", llvm::toString(r.takeError()).c_str());
        std::exit(1);
      }
      k = *r;
    });
    return k;
  };

  { // vector_add
    double cms;
    auto k = compile("vector_add.mlir", cms);
    int64_t n = (1 << 24) + 3;
    auto x = randomVector(n), y = randomVector(n);
    std::vector<float> out(n, NAN);
    auto run = [&] {
      check(jit.launch(*k, {kiln::arg(x.data()), kiln::arg(y.data()),
                            kiln::arg(out.data()), kiln::arg(n)},
                       {(n + 1023) / 1024}));
    };
    run();
    std::vector<double> ref(n);
    for (int64_t i = 0; i < n; ++i)
      ref[i] = double(x[i]) + y[i];
    bool ok = close(out, ref, 1e-6, 1e-6);
    report("vector_add", "n=16M+3", ok, cms, timeIt(run), 12.0 * n, "GB/s");
  }
  { // softmax
    double cms;
    auto k = compile("softmax.mlir", cms);
    int64_t m = 4096, n = 4099;
    auto x = randomVector(m * n, -5, 5);
    std::vector<float> out(m * n, NAN);
    auto run = [&] {
      check(jit.launch(*k, {kiln::arg(x.data()), kiln::arg(out.data()),
                            kiln::arg(m), kiln::arg(n)},
                       {m}));
    };
    run();
    std::vector<double> ref(m * n);
    for (int64_t r = 0; r < m; ++r) {
      double mx = -INFINITY, s = 0;
      for (int64_t c = 0; c < n; ++c)
        mx = std::max(mx, double(x[r * n + c]));
      for (int64_t c = 0; c < n; ++c)
        s += std::exp(x[r * n + c] - mx);
      for (int64_t c = 0; c < n; ++c)
        ref[r * n + c] = std::exp(x[r * n + c] - mx) / s;
    }
    bool ok = close(out, ref, 2e-5, 1e-8);
    report("softmax", "4096x4099", ok, cms, timeIt(run), 8.0 * m * n, "GB/s");
  }
  { // layernorm
    double cms;
    auto k = compile("layernorm.mlir", cms);
    int64_t m = 4096, n = 4099;
    auto x = randomVector(m * n, -2, 3), w = randomVector(n), b = randomVector(n);
    std::vector<float> y(m * n, NAN);
    float eps = 1e-5f;
    auto run = [&] {
      check(jit.launch(*k, {kiln::arg(x.data()), kiln::arg(w.data()),
                            kiln::arg(b.data()), kiln::arg(y.data()),
                            kiln::arg(m), kiln::arg(n), kiln::arg(eps)},
                       {m}));
    };
    run();
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
        ref[r * n + c] = (x[r * n + c] - mean) / std::sqrt(var + eps) * w[c] + b[c];
    }
    bool ok = close(y, ref, 2e-4, 2e-4);
    report("layernorm", "4096x4099", ok, cms, timeIt(run), 8.0 * m * n, "GB/s");
  }
  for (bool bf16 : {false, true}) { // matmul
    double cms;
    auto k = compile(bf16 ? "matmul_bf16.mlir" : "matmul.mlir", cms);
    int64_t m = 1000, n = 1030, kk = 1020;
    auto af = randomVector(m * kk), bf = randomVector(kk * n);
    std::vector<uint16_t> ah(m * kk), bh(kk * n);
    std::vector<double> ad(m * kk), bd(kk * n);
    for (size_t i = 0; i < af.size(); ++i) {
      ah[i] = toBF16(af[i]);
      ad[i] = bf16 ? fromBF16(ah[i]) : af[i];
    }
    for (size_t i = 0; i < bf.size(); ++i) {
      bh[i] = toBF16(bf[i]);
      bd[i] = bf16 ? fromBF16(bh[i]) : bf[i];
    }
    std::vector<float> c(m * n, NAN);
    kiln_dtype dt = bf16 ? KILN_DTYPE_BF16 : KILN_DTYPE_F32;
    const void *pa = bf16 ? (const void *)ah.data() : af.data();
    const void *pb = bf16 ? (const void *)bh.data() : bf.data();
    auto run = [&] {
      check(jit.launch(*k, {kiln::argPtr(pa, dt), kiln::argPtr(pb, dt),
                            kiln::arg(c.data()), kiln::arg(m), kiln::arg(n),
                            kiln::arg(kk)},
                       {(n + 63) / 64, (m + 63) / 64}));
    };
    run();
    std::vector<double> ref(m * n, 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < kk; ++p)
        for (int64_t j = 0; j < n; ++j)
          ref[i * n + j] += ad[i * kk + p] * bd[p * n + j];
    bool ok = close(c, ref, 1e-4, 1e-3);
    report(bf16 ? "matmul (bf16 -> f32)" : "matmul (f32)", "1000x1030x1020", ok,
           cms, timeIt(run), 2.0 * m * n * kk, "GFLOP/s");
  }
  { // block-sparse attention, causal block mask
    double cms;
    auto k = compile("block_sparse_attention.mlir", cms);
    const int64_t bh = 4, s = 1000, d = 64, blk = 64;
    int64_t nqb = (s + blk - 1) / blk, maxb = nqb;
    auto q = randomVector(bh * s * d), kt = randomVector(bh * s * d),
         v = randomVector(bh * s * d);
    std::vector<int32_t> num(bh * nqb), idx(bh * nqb * maxb, 0);
    int64_t pairs = 0;
    for (int64_t h = 0; h < bh; ++h)
      for (int64_t qb = 0; qb < nqb; ++qb) {
        num[h * nqb + qb] = int32_t(qb + 1);
        for (int64_t j = 0; j <= qb; ++j)
          idx[(h * nqb + qb) * maxb + j] = int32_t(j);
        pairs += qb + 1;
      }
    float scale = 0.125f;
    std::vector<float> out(bh * s * d, NAN), lse(bh * s, NAN);
    auto run = [&] {
      check(jit.launch(*k, {kiln::arg(q.data()), kiln::arg(kt.data()),
                            kiln::arg(v.data()), kiln::arg(out.data()),
                            kiln::arg(lse.data()), kiln::arg(num.data()),
                            kiln::arg(idx.data()), kiln::arg(bh), kiln::arg(s),
                            kiln::arg(nqb), kiln::arg(maxb), kiln::arg(scale)},
                       {nqb, bh}));
    };
    run();
    std::vector<double> ref(bh * s * d, 0.0);
    for (int64_t h = 0; h < bh; ++h)
      for (int64_t i = 0; i < s; ++i) {
        int64_t last = std::min(s, (i / blk + 1) * blk);
        std::vector<double> sc(last);
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < last; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += double(q[(h * s + i) * d + c]) * scale * kt[(h * s + j) * d + c];
          sc[j] = dot;
          mx = std::max(mx, dot);
        }
        for (auto &x : sc)
          sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j < last; ++j)
          for (int64_t c = 0; c < d; ++c)
            ref[(h * s + i) * d + c] += sc[j] / sum * v[(h * s + j) * d + c];
      }
    bool ok = close(out, ref, 1e-4, 1e-5);
    report("block_sparse_attention", "bh=4 s=1000 causal", ok, cms, timeIt(run),
           4.0 * pairs * blk * blk * d, "GFLOP/s");
  }
  std::printf("%s\n", failures ? "Some examples did not match their reference."
                               : "All examples matched their float64 reference.");
  return failures ? 1 : 0;
}
