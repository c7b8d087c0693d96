//===- kiln-bench.cpp - Kiln's CPU benchmark -------------------------------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Prints, in one run: f32 matmul at 1024^2 and 2048^2 against oneDNN and
// against the machine's measured FMA peak, single-threaded and on all cores;
// compile time cold, from the disk cache and from the memory cache; the host
// overhead of one launch. Kiln and the peers are interleaved over several
// rounds and medians reported, because these machines are shared and noisy.
//
//   kiln-bench [--json FILE] [--rounds N] [--quick]
//
//===----------------------------------------------------------------------===//

#include "BenchSupport.h"
#include "kiln/JIT/JIT.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <immintrin.h>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern "C" void omp_set_num_threads(int);

namespace {

using namespace kiln::bench;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string readFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The FMA peak of one core: 12 independent chains of 512-bit FMAs (2 FMA
// ports x 4-cycle latency x 1.5 to be safe), no memory traffic.
__attribute__((target("avx512f"))) double fmaPeakOneThread(double seconds) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i)
    acc[i] = _mm512_set1_ps(float(i));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  long iters = 0;
  auto start = Clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    for (int r = 0; r < 100000; ++r)
      for (int i = 0; i < 12; ++i)
        acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    iters += 100000;
    elapsed = ::seconds(start, Clock::now());
  }
  volatile float sink = 0;
  for (int i = 0; i < 12; ++i)
    sink = sink + _mm512_reduce_add_ps(acc[i]);
  return double(iters) * 12 * 16 * 2 / elapsed / 1e9;
}

// The same with 256-bit FMAs, for AVX2 machines (no AVX-512).
__attribute__((target("avx2,fma"))) double fmaPeakOneThreadAVX2(double seconds) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i)
    acc[i] = _mm256_set1_ps(float(i));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  long iters = 0;
  auto start = Clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    for (int r = 0; r < 100000; ++r)
      for (int i = 0; i < 12; ++i)
        acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    iters += 100000;
    elapsed = ::seconds(start, Clock::now());
  }
  volatile float sink = 0;
  alignas(32) float lanes[8];
  for (int i = 0; i < 12; ++i) {
    _mm256_store_ps(lanes, acc[i]);
    for (float l : lanes)
      sink = sink + l;
  }
  return double(iters) * 12 * 8 * 2 / elapsed / 1e9;
}

double fmaPeak(int threads) {
  bool avx512 = kiln_cpu_has_feature("avx512f");
  std::vector<double> per(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      per[t] = avx512 ? fmaPeakOneThread(0.3) : fmaPeakOneThreadAVX2(0.3);
    });
  for (auto &th : pool)
    th.join();
  double sum = 0;
  for (double p : per)
    sum += p;
  return sum;
}

struct OneDNNMatmul {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::matmul prim;
  dnnl::memory a, b, c;
  OneDNNMatmul(int64_t n, float *pa, float *pb, float *pc) {
    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    dnnl::memory::desc ad({n, n}, dt::f32, tag::ab), bd({n, n}, dt::f32, tag::ab),
        cd({n, n}, dt::f32, tag::ab);
    auto pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), engine);
    prim = dnnl::matmul(pd);
    a = dnnl::memory(ad, engine, pa);
    b = dnnl::memory(bd, engine, pb);
    c = dnnl::memory(cd, engine, pc);
  }
  void run() {
    prim.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    stream.wait();
  }
};

template <typename F> double timeOnce(F &&f) {
  auto t0 = Clock::now();
  f();
  return seconds(t0, Clock::now());
}

} // namespace

int main(int argc, char **argv) {
  kiln::bench::quietOpenMP(argv);
  std::string jsonPath;
  int rounds = 5;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc)
      jsonPath = argv[++i];
    else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--quick"))
      quick = true;
    else {
      std::fprintf(stderr, "usage: kiln-bench [--json FILE] [--rounds N] [--quick]\n");
      return 2;
    }
  }
  int allCores = int(std::thread::hardware_concurrency());
  std::string examples = KILN_EXAMPLES_DIR;
  // KILN_BENCH_MATMUL=path benchmarks another matmul kernel with the same
  // signature (for trying tile sizes).
  const char *alt = std::getenv("KILN_BENCH_MATMUL");
  std::string matmulSrc = readFile(alt ? alt : examples + "/matmul.mlir");
  const int64_t tileM = std::getenv("KILN_BENCH_BM") ? std::atoi(std::getenv("KILN_BENCH_BM")) : 64;
  const int64_t tileN = std::getenv("KILN_BENCH_BN") ? std::atoi(std::getenv("KILN_BENCH_BN")) : 64;

  std::printf("Kiln CPU benchmark (%d hardware threads, %d rounds, medians)\n",
              allCores, rounds);
  // The FMA peak at the widest vectors this CPU has (AVX-512, else AVX2).
  bool fma = kiln_cpu_has_feature("avx512f") ||
             (kiln_cpu_has_feature("avx2") && kiln_cpu_has_feature("fma"));
  double peak1 = fma ? fmaPeak(1) : 0, peakAll = fma ? fmaPeak(allCores) : 0;
  std::printf("\nMachine ceilings (%s FMAs)\n",
              kiln_cpu_has_feature("avx512f") ? "512-bit" : "256-bit");
  if (fma) {
    record("fma_peak_f32_1thread", peak1, "GFLOP/s");
    record("fma_peak_f32_allthreads", peakAll, "GFLOP/s");
  } else {
    std::printf("  (neither AVX-512 nor AVX2 with FMA: FMA peak not measured)\n");
  }

  // Compile times.
  std::printf("\nCompile time (matmul.mlir)\n");
  char tmpl[] = "/tmp/kiln-bench-cache-XXXXXX";
  std::string cacheDir = mkdtemp(tmpl);
  double cold, disk, mem;
  {
    kiln::JITOptions o;
    o.cacheDir = cacheDir;
    o.numThreads = 1;
    auto jit = kiln::JIT::create(o);
    if (!jit) {
      std::fprintf(stderr, "%s\n", llvm::toString(jit.takeError()).c_str());
      return 1;
    }
    cold = timeOnce([&] { (void)llvm::cantFail((*jit)->compile(matmulSrc, "matmul.mlir")); });
    std::vector<double> m;
    for (int i = 0; i < 1000; ++i)
      m.push_back(timeOnce([&] { (void)llvm::cantFail((*jit)->compile(matmulSrc, "matmul.mlir")); }));
    mem = median(m);
  }
  {
    std::vector<double> d;
    for (int i = 0; i < 5; ++i) {
      kiln::JITOptions o;
      o.cacheDir = cacheDir;
      o.numThreads = 1;
      auto jit = llvm::cantFail(kiln::JIT::create(o));
      d.push_back(timeOnce([&] { (void)llvm::cantFail(jit->compile(matmulSrc, "matmul.mlir")); }));
    }
    disk = median(d);
  }
  record("compile_cold_matmul", cold * 1e3, "ms");
  record("compile_disk_cache_hit_matmul", disk * 1e3, "ms");
  record("compile_memory_cache_hit_matmul", mem * 1e6, "us");

  // Launch overhead: a memory-cache hit plus a one-program launch of a kernel
  // that does almost nothing.
  {
    const char *tiny = "kiln.func @tiny(%x: !kiln.ptr<f32>, %n: index) {\n"
                       "  %c0 = arith.constant 0 : index\n"
                       "  %c1 = arith.constant 1 : index\n"
                       "  %v = kiln.make_view %x, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>\n"
                       "  %t = kiln.load %v[%c0] : !kiln.view<1xf32> -> tensor<16xf32>\n"
                       "  kiln.store %t, %v[%c0] : tensor<16xf32> -> !kiln.view<1xf32>\n"
                       "  kiln.return\n}\n";
    kiln::JITOptions o;
    o.cacheDir = cacheDir;
    o.numThreads = 1;
    auto jit = llvm::cantFail(kiln::JIT::create(o));
    float buf[16] = {};
    auto k = llvm::cantFail(jit->compile(tiny));
    std::vector<double> launchOnly, hitAndLaunch;
    for (int r = 0; r < 5; ++r) {
      launchOnly.push_back(timeOnce([&] {
                             for (int i = 0; i < 10000; ++i)
                               llvm::cantFail(jit->launch(*k, {kiln::arg(buf), kiln::arg(int64_t(16))}, {1}));
                           }) /
                           10000);
      hitAndLaunch.push_back(timeOnce([&] {
                               for (int i = 0; i < 10000; ++i) {
                                 auto kk = llvm::cantFail(jit->compile(tiny));
                                 llvm::cantFail(jit->launch(*kk, {kiln::arg(buf), kiln::arg(int64_t(16))}, {1}));
                               }
                             }) /
                             10000);
    }
    record("launch_overhead_1_program", median(launchOnly) * 1e6, "us");
    record("memory_cache_hit_plus_launch", median(hitAndLaunch) * 1e6, "us");
  }

  // Matmul against oneDNN and the FMA peak.
  std::printf("\nf32 matmul C = A x B (square)\n");
  std::vector<int64_t> sizes = quick ? std::vector<int64_t>{1024}
                                     : std::vector<int64_t>{1024, 2048};
  for (int threads : {1, allCores}) {
    kiln::JITOptions o;
    o.cacheDir = cacheDir;
    o.numThreads = threads;
    auto jit = llvm::cantFail(kiln::JIT::create(o));
    auto k = llvm::cantFail(jit->compile(matmulSrc, "matmul.mlir"));
    omp_set_num_threads(threads);
    for (int64_t n : sizes) {
      Array<float> a(n * n), b(n * n), c1(n * n), c2(n * n);
      std::mt19937 rng(1);
      std::uniform_real_distribution<float> dist(-1, 1);
      for (auto &x : a)
        x = dist(rng);
      for (auto &x : b)
        x = dist(rng);
      OneDNNMatmul ref(n, a.data(), b.data(), c2.data());
      auto kilnRun = [&] {
        llvm::cantFail(jit->launch(*k, {kiln::arg(a.data()), kiln::arg(b.data()),
                                        kiln::arg(c1.data()), kiln::arg(n), kiln::arg(n),
                                        kiln::arg(n)},
                                   {(n + tileN - 1) / tileN, (n + tileM - 1) / tileM}));
      };
      kilnRun();
      ref.run();
      double maxErr = 0;
      for (int64_t i = 0; i < n * n; ++i)
        maxErr = std::max(maxErr, double(std::fabs(c1[i] - c2[i])));
      std::vector<double> tk, td;
      for (int r = 0; r < rounds; ++r) {
        tk.push_back(timeOnce(kilnRun));
        td.push_back(timeOnce([&] { ref.run(); }));
      }
      double flops = 2.0 * n * n * n;
      double gk = flops / median(tk) / 1e9, gd = flops / median(td) / 1e9;
      std::string tag = "matmul_f32_" + std::to_string(n) + "_" +
                        (threads == 1 ? std::string("1thread")
                                      : std::to_string(threads) + "threads");
      record(tag + "_onednn", gd, "GFLOP/s");
      record(tag + "_kiln", gk, "GFLOP/s", "oneDNN", gk / gd);
      double peak = threads == 1 ? peak1 : peakAll;
      if (peak > 0)
        record(tag + "_kiln_vs_peak", gk, "GFLOP/s", "FMA peak", gk / peak);
      if (maxErr > 1e-2) {
        std::fprintf(stderr, "matmul %lld: Kiln and oneDNN disagree (max |diff| %g)\n",
                     (long long)n, maxErr);
        return 1;
      }
    }
  }

  if (!jsonPath.empty())
    writeJson(jsonPath);
  return 0;
}
