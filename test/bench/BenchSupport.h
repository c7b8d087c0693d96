//===- BenchSupport.h - Figures, medians and JSON for the benchmarks ------===//
//
// Shared by kiln-bench and kiln-ops-bench: each figure is printed as it is
// measured (value, unit, and the ratio against its peer from the same run)
// and can be written to a JSON file for docs/performance.md.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TEST_BENCH_BENCHSUPPORT_H
#define KILN_TEST_BENCH_BENCHSUPPORT_H

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <new>
#include <string>
#include <unistd.h>
#include <vector>

namespace kiln::bench {

/// oneDNN's OpenMP threads spin for a while after each of its calls (libgomp's
/// default wait policy), on the cores the next Kiln launch wants: Kiln's
/// 2-thread matmul measured 78-89 GFLOP/s right after oneDNN's, 143-152 with
/// the threads sleeping. libgomp reads the policy when it loads, so the
/// benchmark runs itself again with OMP_WAIT_POLICY=passive unless the
/// variable is set (to compare, set it to active).
inline void quietOpenMP(char **argv) {
  if (std::getenv("OMP_WAIT_POLICY"))
    return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);
  std::perror("re-running with OMP_WAIT_POLICY=passive"); // and go on as we are
}

/// The benchmarks' arrays start on a 64-byte boundary, as PyTorch's CPU
/// allocator places tensors. A std::vector's heap block starts 16 bytes past
/// one, so half the 32-byte vectors of each channels-last row cross a cache
/// line: depthwise convolution (56x56x256, 3x3) took 1.3-1.4x the time of
/// the aligned arrays. Kiln and its peer always read the same arrays.
template <class T> struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U> CacheLineAllocator(const CacheLineAllocator<U> &) {}
  T *allocate(size_t n) {
    size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    if (void *p = std::aligned_alloc(64, bytes ? bytes : 64))
      return static_cast<T *>(p);
    throw std::bad_alloc();
  }
  void deallocate(T *p, size_t) { std::free(p); }
  template <class U> bool operator==(const CacheLineAllocator<U> &) const { return true; }
  template <class U> bool operator!=(const CacheLineAllocator<U> &) const { return false; }
};
template <class T> using Array = std::vector<T, CacheLineAllocator<T>>;

using Clock = std::chrono::steady_clock;

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Figure {
  std::string name, unit, peer;
  double value, ratio;
};

inline std::vector<Figure> &figures() {
  static std::vector<Figure> all;
  return all;
}

/// Prints and keeps one figure; `ratio` is value-per-peer (higher is better
/// for Kiln) when a peer is named.
inline void record(const std::string &name, double value, const std::string &unit,
                   const std::string &peer = "", double ratio = 0) {
  figures().push_back({name, unit, peer, value, ratio});
  if (peer.empty())
    std::printf("  %-46s %11.2f %s\n", name.c_str(), value, unit.c_str());
  else
    std::printf("  %-46s %11.2f %-8s %7.3fx %s\n", name.c_str(), value, unit.c_str(), ratio,
                peer.c_str());
}

/// Writes every recorded figure as a JSON array to `path`.
inline void writeJson(const std::string &path) {
  std::ofstream out(path);
  out << "[\n";
  const auto &all = figures();
  for (size_t i = 0; i < all.size(); ++i) {
    const auto &f = all[i];
    out << "  {\"name\": \"" << f.name << "\", \"value\": " << f.value << ", \"unit\": \""
        << f.unit << "\", \"peer\": \"" << f.peer << "\", \"ratio\": " << f.ratio << "}"
        << (i + 1 < all.size() ? "," : "") << "\n";
  }
  out << "]\n";
  std::printf("\nwrote %s\n", path.c_str());
}

} // namespace kiln::bench

#endif // KILN_TEST_BENCH_BENCHSUPPORT_H
