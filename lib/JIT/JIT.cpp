//===- JIT.cpp - Compile kiln kernels on first use, cached -----------------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "kiln/JIT/JIT.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Parser/Parser.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/xxhash.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace kiln;

llvm::Error kiln::toError(kiln_status status) {
  if (!status)
    return llvm::Error::success();
  std::string msg = std::string(kiln_status_code_name(kiln_status_code_of(
                        status))) +
                    ": " + kiln_status_message(status);
  kiln_status_free(status);
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// One memory-cache slot: the first caller compiles, concurrent callers for
/// the same source wait for it (std::call_once) instead of compiling again.
struct JIT::Entry {
  std::once_flag once;
  std::string source;
  std::shared_ptr<Kernel> kernel;
  std::string error;
};

/// The first bytes of a disk-cache entry, before its key and its bundle.
static constexpr llvm::StringLiteral kCacheEntryMagic = "KILNJIT1";

static std::string defaultCacheDir() {
  if (const char *d = std::getenv("KILN_CACHE_DIR"); d && *d)
    return d;
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return (llvm::Twine(x) + "/kiln").str();
  if (const char *h = std::getenv("HOME"); h && *h)
    return (llvm::Twine(h) + "/.cache/kiln").str();
  return "";
}

/// The disk cache's bound: `requested` bytes, or (-1) $KILN_CACHE_MAX_MB
/// megabytes, else 1 GiB; 0 is unbounded.
static llvm::Expected<int64_t> cacheLimitFor(int64_t requested) {
  if (requested >= 0)
    return requested;
  if (requested != -1) // (it silently became the default)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "cacheLimitBytes must be >= 0, or -1 for "
                                   "$KILN_CACHE_MAX_MB, got %lld",
                                   static_cast<long long>(requested));
  const char *env = std::getenv("KILN_CACHE_MAX_MB");
  if (!env || !*env)
    return int64_t(1) << 30;
  int64_t mb = 0;
  if (llvm::StringRef(env).trim().getAsInteger(10, mb) || mb < 0 ||
      mb > (int64_t(1) << 40))
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "KILN_CACHE_MAX_MB='%s' is not a size in megabytes (a whole number "
        "from 0, unbounded, up to 2^40)",
        env);
  return mb << 20;
}

JIT::JIT(JITOptions opts) : options(std::move(opts)) {}

JIT::~JIT() {
  memory.clear();
  kiln_runtime_destroy(runtime);
}

llvm::Expected<std::unique_ptr<JIT>> JIT::create(JITOptions options) {
  std::unique_ptr<JIT> jit(new JIT(options));
  auto target = resolveCPUTarget(options.target);
  if (!target)
    return target.takeError();
  jit->target = *target;
  jit->cacheDir =
      options.cacheDir.empty() ? defaultCacheDir() : options.cacheDir;
  auto limit = cacheLimitFor(options.cacheLimitBytes);
  if (!limit)
    return limit.takeError();
  jit->cacheLimit = *limit;
  if (auto err = toError(kiln_runtime_create(options.numThreads,
                                             &jit->runtime)))
    return std::move(err);
  return jit;
}

void JIT::clearMemoryCache() {
  std::lock_guard<std::mutex> lock(mutex);
  memory.clear();
}

llvm::Expected<std::shared_ptr<Kernel>>
JIT::compile(llvm::StringRef source, llvm::StringRef name,
             const CompileOptions &compileOptions) {
  // (kilnc refuses it too; it was compiled at O3 silently.)
  if (compileOptions.optLevel > 3)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "optLevel must be 0 to 3, got %u",
                                   compileOptions.optLevel);
  // The memory cache is keyed by a fast hash of the exact text, the buffer
  // name (kiln.assert reports its file: the same text compiled as another
  // file reported the first) and the options: a hit must cost about a
  // microsecond, so no parsing here.
  std::string key = llvm::utohexstr(llvm::xxh3_64bits(source));
  key += "|" + name.str() + "|" + compileOptions.kernel + "|" +
         std::to_string(compileOptions.optLevel) + "|" +
         std::to_string(compileOptions.numWarps) + "|" +
         std::to_string(compileOptions.numStages) + "|" +
         (compileOptions.tma ? "tma|" : "notma|") +
         (compileOptions.swizzle ? "swizzle|" : "noswizzle|") +
         (compileOptions.overlap ? "overlap|" : "nooverlap|") +
         (compileOptions.hostMaps ? "hostmaps|" : "devicemaps|") +
         (compileOptions.pipelineGathers ? "" : "nogathers|") +
         (compileOptions.fp8Wgmma ? "" : "nofp8wgmma|") +
         (compileOptions.pingpong ? "" : "nopingpong|") +
         (compileOptions.cubin ? "cubin|" : "ptx|") +
         (compileOptions.target.empty() ? options.target
                                        : compileOptions.target);
  std::shared_ptr<Entry> entry;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto &slot = memory[key];
    if (!slot) {
      slot = std::make_shared<Entry>();
      slot->source = source.str();
    }
    entry = slot;
  }
  if (entry->source != source) // a hash collision: bypass the memory cache
    return compileUncached(source, name, compileOptions);
  bool ran = false;
  std::call_once(entry->once, [&] {
    ran = true;
    auto k = compileUncached(source, name, compileOptions);
    if (k)
      entry->kernel = *k;
    else
      entry->error = llvm::toString(k.takeError());
  });
  if (!ran && entry->kernel)
    ++stats.memoryHits;
  if (entry->kernel)
    return entry->kernel;
  std::string error = entry->error;
  {
    // Forget failures so that a later call (e.g. after fixing the
    // environment) tries again.
    std::lock_guard<std::mutex> lock(mutex);
    auto it = memory.find(key);
    if (it != memory.end() && it->second == entry)
      memory.erase(it);
  }
  return llvm::createStringError(llvm::inconvertibleErrorCode(), error);
}

/// Writes `bytes` to `path` atomically: a temporary file in the same
/// directory, then rename(2). Readers see the old entry or the whole new one.
static bool publishAtomically(const std::string &dir, const std::string &path,
                              llvm::StringRef bytes) {
  if (llvm::sys::fs::create_directories(dir))
    return false;
  static std::atomic<unsigned> counter{0};
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                    std::to_string(std::hash<std::thread::id>()(
                        std::this_thread::get_id()) %
                                   100000) +
                    "." + std::to_string(counter++);
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(tmp, ec, llvm::sys::fs::OF_None);
    if (ec)
      return false;
    os << bytes;
    os.flush();
    if (os.has_error()) {
      os.clear_error();
      llvm::sys::fs::remove(tmp);
      return false;
    }
  }
  if (llvm::sys::fs::rename(tmp, path)) {
    llvm::sys::fs::remove(tmp);
    return false;
  }
  return true;
}

struct JIT::DiskFile {
  std::string path;
  int64_t size;
  int64_t mtime; // nanoseconds since the epoch
  bool temporary; // a writer's, before its rename
};

std::vector<JIT::DiskFile> JIT::scanDiskCache() {
  std::vector<DiskFile> files;
  if (cacheDir.empty())
    return files;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(cacheDir, ec), end;
       it != end && !ec; it.increment(ec)) {
    // Only the JIT's own files: a key's 64 hex digits and `.kiln`, or that
    // and publishAtomically's `.tmp.` suffix. (Any `*.kiln` was counted,
    // trimmed and cleared: a user's kilnc bundle kept there was deleted.)
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    llvm::StringRef key = name.take_front(64), rest = name.drop_front(64);
    if (key.size() != 64 || !llvm::all_of(key, llvm::isHexDigit) ||
        key.lower() != key || !rest.consume_front(".kiln") ||
        !(rest.empty() || rest.starts_with(".tmp.")))
      continue;
    bool temporary = !rest.empty();
    struct stat st;
    if (::lstat(it->path().c_str(), &st) || !S_ISREG(st.st_mode))
      continue; // gone meanwhile
    files.push_back({it->path(), int64_t(st.st_size),
                     int64_t(st.st_mtim.tv_sec) * 1000000000 +
                         st.st_mtim.tv_nsec,
                     temporary});
  }
  return files;
}

std::pair<int64_t, int64_t> JIT::diskCacheUsage() {
  int64_t count = 0, bytes = 0;
  for (const DiskFile &f : scanDiskCache())
    if (!f.temporary) {
      ++count;
      bytes += f.size;
    }
  return {count, bytes};
}

int64_t JIT::clearDiskCache() {
  int64_t removed = 0;
  for (const DiskFile &f : scanDiskCache())
    if (!llvm::sys::fs::remove(f.path, /*IgnoreNonExisting=*/false))
      ++removed;
  return removed;
}

void JIT::trimDiskCache() {
  int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  std::vector<DiskFile> entries;
  int64_t total = 0;
  for (DiskFile &f : scanDiskCache()) {
    // A temporary file an hour old is a writer's that crashed between
    // writing and renaming; a live one finishes within seconds.
    if (f.temporary) {
      if (now - f.mtime > int64_t(3600) * 1000000000)
        llvm::sys::fs::remove(f.path);
      continue;
    }
    total += f.size;
    entries.push_back(std::move(f));
  }
  if (!cacheLimit || total <= cacheLimit)
    return;
  // Least recently used first; other processes may be trimming too, and a
  // file they removed first is simply not counted here.
  std::sort(entries.begin(), entries.end(),
            [](const DiskFile &a, const DiskFile &b) {
              return a.mtime < b.mtime;
            });
  int64_t target = cacheLimit / 10 * 9;
  for (const DiskFile &f : entries) {
    if (total <= target)
      break;
    if (!llvm::sys::fs::remove(f.path, /*IgnoreNonExisting=*/false))
      ++stats.evictions;
    total -= f.size;
  }
}

llvm::Expected<std::shared_ptr<Kernel>>
JIT::compileUncached(llvm::StringRef source, llvm::StringRef name,
                     const CompileOptions &compileOptions) {
  CompileOptions opts = compileOptions;
  if (opts.target.empty() || opts.target == "host")
    opts.target = options.target;
  auto tgt = resolveCPUTarget(opts.target);
  if (!tgt)
    return tgt.takeError();

  mlir::DialectRegistry registry;
  registerDialects(registry);
  mlir::MLIRContext context(registry, mlir::MLIRContext::Threading::DISABLED);
  std::string diagText;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    diagText += formatDiagnostic(d);
    return mlir::success();
  });
  if (llvm::Error e = checkSourceNesting(source, name))
    return std::move(e);
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(source, name), llvm::SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, &context);
  if (!module)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   diagText.empty() ? "cannot parse kernel"
                                                    : diagText);
  auto info = describeKernel(*module, opts.kernel);
  if (!info)
    return info.takeError();

  // The disk key: canonical IR (generic form, no locations, so formatting,
  // comments and SSA names do not matter) + options + target + version.
  std::string canonical;
  {
    llvm::raw_string_ostream os(canonical);
    module->print(os, mlir::OpPrintingFlags().printGenericOpForm());
  }
  llvm::SHA256 sha;
  auto feed = [&](llvm::StringRef s) {
    sha.update(s);
    sha.update(llvm::StringRef("\0", 1));
  };
  feed(compilerFingerprint());
  feed(tgt->name);
  feed(tgt->cpu);
  feed(tgt->llvmFeatures);
  feed(std::to_string(tgt->vectorBits));
  feed(info->name);
  feed(std::to_string(opts.optLevel));
  if (isGPUTarget(tgt->name) || !tgt->emulatedGPU.empty()) {
    feed(std::to_string(opts.numWarps));
    feed(std::to_string(opts.numStages));
    feed(opts.cubin ? "cubin" : "ptx");
    if (!opts.tma)
      feed("no-tma");
    if (!opts.swizzle)
      feed("no-swizzle");
    if (!opts.overlap)
      feed("no-overlap");
    if (!opts.hostMaps)
      feed("device-maps");
    if (!opts.pipelineGathers)
      feed("no-pipelined-gathers");
    if (!opts.fp8Wgmma)
      feed("no-fp8-wgmma");
    if (!opts.pingpong)
      feed("no-pingpong");
  }
  feed(canonical);
  // A kiln.assert's report names its location, which the code carries: the
  // key includes those locations (a kernel edited only above its assert
  // reports the new line).
  module->walk([&](mlir::Operation *op) {
    if (op->getName().getStringRef() != "kiln.assert")
      return;
    std::string loc;
    llvm::raw_string_ostream os(loc);
    op->getLoc().print(os);
    feed(loc);
  });
  std::array<uint8_t, 32> digest = sha.final();
  std::string hex = llvm::toHex(digest, /*LowerCase=*/true);

  bool useDisk = options.diskCache && !cacheDir.empty();
  std::string path = cacheDir + "/" + hex + ".kiln";
  // An entry is its key (the digest) and then the bundle: a valid bundle
  // under another entry's name (copied or moved there) is refused as a
  // corrupt one is, not run for this kernel. (The bundle's own checksum
  // covers its bytes only.)
  const std::string entryHead =
      kCacheEntryMagic.str() + std::string(digest.begin(), digest.end());
  if (useDisk && llvm::sys::fs::exists(path)) {
    if (auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false)) {
      llvm::StringRef entry = (*buf)->getBuffer();
      kiln_kernel *handle = nullptr;
      bool keyed = entry.starts_with(entryHead);
      kiln_status st =
          keyed ? kiln_bundle_load_memory(entry.data() + entryHead.size(),
                                          entry.size() - entryHead.size(), &handle)
                : nullptr;
      if (keyed && !st) {
        ++stats.diskHits;
        // Recently used: the last to be evicted.
        ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
        return std::make_shared<Kernel>(handle, *info,
                                        entry.drop_front(entryHead.size()).str());
      }
      // Corrupt, truncated, another kernel's or for another machine: never
      // run it; recompile and replace it below.
      if (st)
        kiln_status_free(st);
      ++stats.corruptEntries;
      llvm::sys::fs::remove(path);
    }
  }

  auto compiled = compileModule(*module, opts, EmitKind::Bundle);
  if (!compiled)
    return compiled.takeError();
  ++stats.compiles;
  kiln_kernel *handle = nullptr;
  if (auto err = toError(kiln_bundle_load_memory(
          compiled->bytes.data(), compiled->bytes.size(), &handle)))
    return std::move(err);
  if (useDisk && !publishAtomically(cacheDir, path, entryHead + compiled->bytes)) {
    ++stats.diskWriteFailures;
  } else if (useDisk && cacheLimit) {
    // The directory is scanned on this JIT's first write and then after each
    // 1/32 of the bound written, so the bound holds within a few percent
    // per writing process.
    int64_t written = int64_t(compiled->bytes.size());
    int64_t before = bytesSinceTrim.load();
    if (before < 0 || before + written >= cacheLimit / 32) {
      bytesSinceTrim = 0;
      trimDiskCache();
    } else {
      bytesSinceTrim += written;
    }
  }
  return std::make_shared<Kernel>(handle, *info, std::move(compiled->bytes));
}

llvm::Error JIT::launch(const Kernel &kernel, const kiln_arg *args,
                        size_t count, const int64_t grid[3]) {
  return toError(kiln_launch(runtime, kernel.get(), args, count, grid));
}

llvm::Error JIT::launchOnStream(const Kernel &kernel, const kiln_arg *args,
                                size_t count, const int64_t grid[3],
                                void *stream) {
  return toError(kiln_launch_on_stream(runtime, kernel.get(), args, count,
                                       grid, stream, 0));
}

llvm::Error JIT::launch(const Kernel &kernel,
                        std::initializer_list<kiln_arg> args,
                        std::initializer_list<int64_t> grid) {
  // (Missing dimensions are 1; an empty grid is an error, not one program.)
  if (grid.size() < 1 || grid.size() > 3)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "a grid has 1 to 3 dimensions, got " +
                                       llvm::Twine(grid.size()));
  int64_t g[3] = {1, 1, 1};
  size_t i = 0;
  for (int64_t v : grid)
    g[i++] = v;
  return launch(kernel, args.begin(), args.size(), g);
}
