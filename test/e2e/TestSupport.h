//===- TestSupport.h - Helpers for Kiln's end-to-end tests ------*- C++ -*-===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TEST_E2E_TESTSUPPORT_H
#define KILN_TEST_E2E_TESTSUPPORT_H

#include "kiln/JIT/JIT.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace kiln::test {

/// Fresh random inputs every run; the seed is printed so a failure can be
/// replayed with KILN_TEST_SEED.
inline uint32_t testSeed() {
  static uint32_t seed = [] {
    if (const char *s = std::getenv("KILN_TEST_SEED"))
      return uint32_t(std::strtoul(s, nullptr, 10));
    return uint32_t(std::random_device{}());
  }();
  return seed;
}

inline std::mt19937 &rng() {
  static std::mt19937 r(testSeed());
  return r;
}

inline std::vector<float> randomVector(int64_t n, double lo = -1.0,
                                       double hi = 1.0) {
  std::uniform_real_distribution<float> dist{float(lo), float(hi)};
  std::vector<float> v(n);
  for (auto &x : v)
    x = dist(rng());
  return v;
}

inline float poison() { return std::numeric_limits<float>::quiet_NaN(); }
inline int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline uint16_t toBF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return uint16_t((bits + rounding) >> 16);
}
inline double fromBF16(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

template <typename T> kiln_dtype dtypeOf();
template <> inline kiln_dtype dtypeOf<float>() { return KILN_DTYPE_F32; }
template <> inline kiln_dtype dtypeOf<uint16_t>() { return KILN_DTYPE_BF16; }

/// The JIT shared by the tests of one process, with its own cache directory.
inline kiln::JIT &sharedJIT() {
  static std::unique_ptr<kiln::JIT> jit = [] {
    kiln::JITOptions o;
    char tmpl[] = "/tmp/kiln-e2e-cache-XXXXXX";
    o.cacheDir = mkdtemp(tmpl);
    auto j = kiln::JIT::create(o);
    if (!j) {
      FAIL(llvm::toString(j.takeError()));
    }
    return std::move(*j);
  }();
  return *jit;
}

inline std::string readFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::shared_ptr<kiln::Kernel> compileExample(kiln::JIT &jit,
                                                    const std::string &file) {
  std::string path = std::string(KILN_EXAMPLES_DIR) + "/" + file;
  std::string src = readFile(path);
  REQUIRE(!src.empty());
  auto k = jit.compile(src, path);
  if (!k)
    FAIL(llvm::toString(k.takeError()));
  return *k;
}

/// REQUIRE that an llvm::Expected holds a value (failing with its message).
template <typename T> T &requireOk(llvm::Expected<T> &e) {
  if (!e)
    FAIL(llvm::toString(e.takeError()));
  return *e;
}
template <typename T> T requireOk(llvm::Expected<T> &&e) {
  if (!e)
    FAIL(llvm::toString(e.takeError()));
  return std::move(*e);
}
/// REQUIRE that an llvm::Expected holds an error; returns its message.
template <typename T> std::string requireErr(llvm::Expected<T> &e) {
  if (e)
    FAIL("expected an error, got a value");
  return llvm::toString(e.takeError());
}
inline std::string requireErr(llvm::Error e) {
  if (!e)
    FAIL("expected an error, got success");
  return llvm::toString(std::move(e));
}

#define REQUIRE_NOLAUNCHERROR(expr)                                            \
  do {                                                                         \
    llvm::Error kilnErr = (expr);                                              \
    if (kilnErr)                                                               \
      FAIL(llvm::toString(std::move(kilnErr)));                                \
  } while (0)

/// Every element within atol + rtol * |ref|; NaN (e.g. an unwritten, poisoned
/// element) always fails; infinities must match exactly.
template <typename T>
void checkClose(const std::vector<T> &got, const std::vector<double> &ref,
                double rtol, double atol, const char *what) {
  INFO("comparing " << what << " (seed " << testSeed() << ")");
  REQUIRE(got.size() >= ref.size());
  size_t bad = 0, firstBad = 0;
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double g = double(got[i]), r = ref[i];
    bool ok;
    if (std::isnan(g) || std::isnan(r))
      ok = false;
    else if (std::isinf(r) || std::isinf(g))
      ok = g == r;
    else {
      double err = std::fabs(g - r);
      worst = std::max(worst, err / (atol + rtol * std::fabs(r)));
      ok = err <= atol + rtol * std::fabs(r);
    }
    if (!ok && bad++ == 0)
      firstBad = i;
  }
  INFO(bad << " of " << ref.size() << " elements off; first at " << firstBad
           << ": got " << (bad ? double(got[firstBad]) : 0.0) << ", want "
           << (bad ? ref[firstBad] : 0.0) << "; worst error/tolerance "
           << worst);
  CHECK(bad == 0);
}

#define CHECK_THAT_CLOSE(got, ref, rtol, atol)                                 \
  ::kiln::test::checkClose(got, ref, rtol, atol, #got)

} // namespace kiln::test

#endif // KILN_TEST_E2E_TESTSUPPORT_H
