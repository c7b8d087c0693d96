//===- JIT.h - Compile kiln kernels on first use, cached --------*- C++ -*-===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The embeddable JIT: compile a kiln module (text or in-memory) for a target
// and get a loaded kernel. A memory cache sits in front of a disk cache
// (KILN_CACHE_DIR, default ~/.cache/kiln) of bundles keyed by a SHA-256 of
// the canonical IR, the compile options, the target with its features and
// the compiler version. Disk entries are published atomically (write to a
// temporary file, rename) and verified by the bundle checksum on load: a
// corrupt entry is recompiled, never run. When the directory cannot be
// written the JIT keeps working from memory. The directory is bounded
// (KILN_CACHE_MAX_MB, default 1024): past the bound the least recently used
// entries are removed.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_JIT_JIT_H
#define KILN_JIT_JIT_H

#include "kiln/Target/CPU/Compiler.h"
#include "kiln/runtime.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kiln {

/// Typed launch arguments.
inline kiln_arg argPtr(const void *p, kiln_dtype dtype) {
  kiln_arg a{};
  a.kind = KILN_ARG_PTR;
  a.dtype = dtype;
  a.value.ptr = const_cast<void *>(p);
  return a;
}
inline kiln_arg arg(const float *p) { return argPtr(p, KILN_DTYPE_F32); }
inline kiln_arg arg(const double *p) { return argPtr(p, KILN_DTYPE_F64); }
inline kiln_arg arg(const int32_t *p) { return argPtr(p, KILN_DTYPE_I32); }
inline kiln_arg arg(const int64_t *p) { return argPtr(p, KILN_DTYPE_I64); }
inline kiln_arg arg(const int8_t *p) { return argPtr(p, KILN_DTYPE_I8); }
inline kiln_arg arg(int64_t v) {
  kiln_arg a{};
  a.kind = KILN_ARG_SCALAR;
  a.dtype = KILN_DTYPE_I64;
  a.value.i64 = v;
  return a;
}
inline kiln_arg arg(int32_t v) {
  kiln_arg a{};
  a.kind = KILN_ARG_SCALAR;
  a.dtype = KILN_DTYPE_I32;
  a.value.i32 = v;
  return a;
}
inline kiln_arg arg(float v) {
  kiln_arg a{};
  a.kind = KILN_ARG_SCALAR;
  a.dtype = KILN_DTYPE_F32;
  a.value.f32 = v;
  return a;
}
inline kiln_arg arg(double v) {
  kiln_arg a{};
  a.kind = KILN_ARG_SCALAR;
  a.dtype = KILN_DTYPE_F64;
  a.value.f64 = v;
  return a;
}

/// A loaded kernel. Shared by the cache and its users; unloaded with the
/// last reference.
class Kernel {
public:
  Kernel(kiln_kernel *handle, KernelInfo info, std::string bundle)
      : handle(handle), info(std::move(info)), bundle(std::move(bundle)) {}
  ~Kernel() { kiln_kernel_destroy(handle); }
  Kernel(const Kernel &) = delete;
  Kernel &operator=(const Kernel &) = delete;

  kiln_kernel *get() const { return handle; }
  const KernelInfo &getInfo() const { return info; }
  /// The bundle bytes this kernel was loaded from.
  const std::string &getBundle() const { return bundle; }

private:
  kiln_kernel *handle;
  KernelInfo info;
  std::string bundle;
};

struct JITOptions {
  /// Code generation target (see resolveCPUTarget); `host` by default.
  std::string target = "host";
  /// Disk cache directory; empty: $KILN_CACHE_DIR, else ~/.cache/kiln.
  std::string cacheDir;
  /// Use the disk cache at all.
  bool diskCache = true;
  /// Bound on the bytes of the disk cache's entries: past it, the least
  /// recently used entries (by modification time, which a disk hit renews)
  /// are removed until they fill 90% of it. 0: unbounded; -1:
  /// $KILN_CACHE_MAX_MB megabytes, else 1 GiB.
  int64_t cacheLimitBytes = -1;
  /// Threads of the runtime's pool (0: $KILN_NUM_THREADS or all CPUs).
  int numThreads = 0;
};

class JIT {
public:
  static llvm::Expected<std::unique_ptr<JIT>> create(JITOptions options = {});
  ~JIT();

  /// Compiles (or finds in a cache) the kernel in `source`; `name` labels
  /// diagnostics (file:line:col). Safe to call from several threads.
  llvm::Expected<std::shared_ptr<Kernel>>
  compile(llvm::StringRef source, llvm::StringRef name = "<kernel>",
          const CompileOptions &options = {});

  /// Launches `kernel` over `grid` on this JIT's runtime.
  llvm::Error launch(const Kernel &kernel, const kiln_arg *args, size_t count,
                     const int64_t grid[3]);
  llvm::Error launch(const Kernel &kernel,
                     std::initializer_list<kiln_arg> args,
                     std::initializer_list<int64_t> grid);
  /// Queues a GPU `kernel` on the caller's CUDA stream (a CUstream /
  /// cudaStream_t of the device's primary context, e.g. the inference
  /// engine's; nullptr is the legacy default stream) and returns without
  /// waiting: kiln_launch_on_stream, capturable into a CUDA graph once the
  /// kernel is compiled and loaded (it must outlive the graph, as must the
  /// arguments' memory). A CPU kernel runs to completion.
  llvm::Error launchOnStream(const Kernel &kernel, const kiln_arg *args,
                             size_t count, const int64_t grid[3],
                             void *stream);

  kiln_runtime *getRuntime() const { return runtime; }
  const std::string &getCacheDir() const { return cacheDir; }
  /// The disk cache's bound in bytes (0: unbounded).
  int64_t getCacheLimit() const { return cacheLimit; }
  const CPUTarget &getTarget() const { return target; }

  struct Stats {
    std::atomic<uint64_t> memoryHits{0}, diskHits{0}, compiles{0},
        corruptEntries{0}, diskWriteFailures{0}, evictions{0};
  };
  const Stats &getStats() const { return stats; }
  /// Forgets the in-memory cache (the disk cache is untouched).
  void clearMemoryCache();
  /// Brings the disk cache under its bound now (also done after writes):
  /// removes the least recently used entries, and temporary files that
  /// crashed writers left behind more than an hour ago.
  void trimDiskCache();
  /// The disk cache's entries now: how many, and their bytes.
  std::pair<int64_t, int64_t> diskCacheUsage();
  /// Removes every entry of the disk cache and every temporary file of one
  /// (nothing else in the directory); returns how many files went.
  int64_t clearDiskCache();

private:
  explicit JIT(JITOptions options);
  struct Entry;
  struct DiskFile;
  /// The directory's entries and temporary files (the only files of the
  /// cache's naming: NAME.kiln, NAME.kiln.tmp.*).
  std::vector<DiskFile> scanDiskCache();
  llvm::Expected<std::shared_ptr<Kernel>>
  compileUncached(llvm::StringRef source, llvm::StringRef name,
                  const CompileOptions &options);

  JITOptions options;
  CPUTarget target;
  std::string cacheDir;
  int64_t cacheLimit = 0;
  /// Bytes this JIT published since it last trimmed the directory.
  std::atomic<int64_t> bytesSinceTrim{-1};
  kiln_runtime *runtime = nullptr;
  std::mutex mutex;
  std::unordered_map<std::string, std::shared_ptr<Entry>> memory;
  Stats stats;
};

/// Converts a runtime status into an llvm::Error (and frees it).
llvm::Error toError(kiln_status status);

} // namespace kiln

#endif // KILN_JIT_JIT_H
