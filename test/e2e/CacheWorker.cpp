//===- CacheWorker.cpp - One process of the concurrent-cache test ----------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
//   kiln-cache-worker CACHE_DIR KERNEL.mlir
//
// Compiles vector_add through the JIT with the given disk cache, runs it on
// 5000 elements, checks the result, and prints "compiles=N diskhits=M".
// Exit status 0 only if the kernel ran correctly.
//
//===----------------------------------------------------------------------===//

#include "kiln/JIT/JIT.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: kiln-cache-worker CACHE_DIR KERNEL.mlir\n");
    return 2;
  }
  std::ifstream in(argv[2]);
  std::stringstream ss;
  ss << in.rdbuf();
  kiln::JITOptions o;
  o.cacheDir = argv[1];
  auto jit = kiln::JIT::create(o);
  if (!jit) {
    std::fprintf(stderr, "%s\n", llvm::toString(jit.takeError()).c_str());
    return 1;
  }
  auto k = (*jit)->compile(ss.str(), argv[2]);
  if (!k) {
    std::fprintf(stderr, "%s\n", llvm::toString(k.takeError()).c_str());
    return 1;
  }
  int64_t n = 5000;
  std::vector<float> x(n), y(n), out(n, NAN);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = float(i);
    y[i] = float(2 * i);
  }
  if (auto err = (*jit)->launch(**k, {kiln::arg(x.data()), kiln::arg(y.data()),
                                      kiln::arg(out.data()), kiln::arg(n)},
                                {(n + 1023) / 1024})) {
    std::fprintf(stderr, "%s\n", llvm::toString(std::move(err)).c_str());
    return 1;
  }
  for (int64_t i = 0; i < n; ++i)
    if (out[i] != float(3 * i)) {
      std::fprintf(stderr, "wrong result at %lld\n", (long long)i);
      return 1;
    }
  std::printf("compiles=%llu diskhits=%llu\n",
              (unsigned long long)(*jit)->getStats().compiles.load(),
              (unsigned long long)(*jit)->getStats().diskHits.load());
  return 0;
}
