//===- JITTest.cpp - The JIT, its caches, and bad input --------------------===//
//
// Part of the Kiln project, under the Apache License v2.0 with LLVM Exceptions.
// SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <spawn.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char **environ;

using namespace kiln::test;

namespace {
std::string freshDir() {
  char tmpl[] = "/tmp/kiln-jit-test-XXXXXX";
  return mkdtemp(tmpl);
}

std::unique_ptr<kiln::JIT> makeJIT(const std::string &dir,
                                   const std::string &target = "host",
                                   int64_t cacheLimit = -1) {
  kiln::JITOptions o;
  o.cacheDir = dir;
  o.target = target;
  o.cacheLimitBytes = cacheLimit;
  auto j = kiln::JIT::create(o);
  if (!j)
    FAIL(llvm::toString(j.takeError()));
  return std::move(*j);
}

std::vector<std::string> listDir(const std::string &dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec))
    out.push_back(llvm::sys::path::filename(it->path()).str());
  return out;
}

std::string vectorAdd() {
  return readFile(std::string(KILN_EXAMPLES_DIR) + "/vector_add.mlir");
}

void runVectorAdd(kiln::JIT &jit, const kiln::Kernel &k, int64_t n = 3000) {
  std::vector<float> x = randomVector(n), y = randomVector(n),
                     out(n, poison());
  REQUIRE_NOLAUNCHERROR(jit.launch(k, {kiln::arg(x.data()), kiln::arg(y.data()),
                                       kiln::arg(out.data()), kiln::arg(n)},
                                   {ceilDiv(n, 1024)}));
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i)
    ref[i] = double(x[i]) + y[i];
  CHECK_THAT_CLOSE(out, ref, 1e-6, 1e-6);
}
} // namespace

TEST_CASE("the memory cache returns the same kernel", "[jit][cache]") {
  auto jit = makeJIT(freshDir());
  auto a = requireOk(jit->compile(vectorAdd(), "vector_add.mlir"));
  auto b = requireOk(jit->compile(vectorAdd(), "vector_add.mlir"));
  CHECK(a.get() == b.get());
  CHECK(jit->getStats().compiles == 1);
  CHECK(jit->getStats().memoryHits == 1);
  // The same text under another name is another entry: a kiln.assert
  // reports its own file (the first name's was reported).
  auto c = requireOk(jit->compile(vectorAdd(), "other.mlir"));
  CHECK(c.get() != a.get());
  CHECK(jit->getStats().memoryHits == 1);
}

TEST_CASE("a second JIT finds the kernel in the disk cache", "[jit][cache]") {
  std::string dir = freshDir();
  {
    auto jit = makeJIT(dir);
    requireOk(jit->compile(vectorAdd()));
    CHECK(jit->getStats().compiles == 1);
  }
  auto files = listDir(dir);
  REQUIRE(files.size() == 1);
  CHECK(llvm::StringRef(files[0]).ends_with(".kiln"));
  // Formatting and comments do not change the canonical IR, so the same
  // entry serves a reformatted source.
  std::string reformatted = "// a comment\n" + vectorAdd() + "\n\n";
  auto jit = makeJIT(dir);
  auto k = requireOk(jit->compile(reformatted));
  CHECK(jit->getStats().compiles == 0);
  CHECK(jit->getStats().diskHits == 1);
  runVectorAdd(*jit, *k);
}

TEST_CASE("a corrupted or truncated cache entry is recompiled, never run",
          "[jit][cache]") {
  std::string dir = freshDir();
  { requireOk(makeJIT(dir)->compile(vectorAdd())); }
  auto files = listDir(dir);
  REQUIRE(files.size() == 1);
  std::string path = dir + "/" + files[0];
  std::string bytes = readFile(path);
  REQUIRE(bytes.size() > 200);

  SECTION("a flipped byte in the code") {
    bytes[bytes.size() - 100] ^= 0x5a;
  }
  SECTION("a truncated file") { bytes.resize(bytes.size() / 2); }
  SECTION("garbage") { bytes = "not a bundle at all"; }
  SECTION("another kernel's valid entry, copied over this one's") {
    // (The bundle's checksum covers its own bytes: the entry's key is what
    // tells it apart.)
    std::string src = vectorAdd();
    src.replace(src.find("@vector_add("), strlen("@vector_add"), "@other_add");
    std::string other = freshDir();
    { requireOk(makeJIT(other)->compile(src)); }
    auto copied = listDir(other);
    REQUIRE(copied.size() == 1);
    REQUIRE(copied[0] != files[0]);
    bytes = readFile(other + "/" + copied[0]);
  }
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  auto jit = makeJIT(dir);
  auto k = requireOk(jit->compile(vectorAdd()));
  CHECK(jit->getStats().corruptEntries == 1);
  CHECK(jit->getStats().compiles == 1);
  CHECK(jit->getStats().diskHits == 0);
  runVectorAdd(*jit, *k);
  // The entry was replaced by a good one.
  auto again = makeJIT(dir);
  requireOk(again->compile(vectorAdd()));
  CHECK(again->getStats().diskHits == 1);
}

TEST_CASE("an unwritable cache directory leaves the JIT working from memory",
          "[jit][cache]") {
  // A directory under a regular file cannot be created, even by root.
  std::string base = freshDir();
  std::string file = base + "/plain-file";
  { std::ofstream(file) << "x"; }
  auto jit = makeJIT(file + "/cache");
  auto k = requireOk(jit->compile(vectorAdd()));
  CHECK(jit->getStats().diskWriteFailures == 1);
  runVectorAdd(*jit, *k);
  auto k2 = requireOk(jit->compile(vectorAdd()));
  CHECK(jit->getStats().memoryHits == 1);
}

TEST_CASE("threads compiling the same kernel at once compile it once",
          "[jit][cache]") {
  auto jit = makeJIT(freshDir());
  std::string src = vectorAdd();
  std::vector<std::thread> threads;
  std::vector<std::shared_ptr<kiln::Kernel>> got(8);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      auto k = jit->compile(src);
      if (k)
        got[t] = *k;
      else
        llvm::consumeError(k.takeError());
    });
  for (auto &t : threads)
    t.join();
  for (auto &k : got) {
    REQUIRE(k != nullptr);
    CHECK(k->get() == got[0]->get());
  }
  CHECK(jit->getStats().compiles == 1);
}

namespace {
/// vector_add under another name: another cache entry of about the same size.
std::string renamedVectorAdd(const std::string &name) {
  std::string src = vectorAdd();
  size_t at = src.find("@vector_add(");
  REQUIRE(at != std::string::npos);
  return src.replace(at, strlen("@vector_add"), "@" + name);
}

int64_t fileSize(const std::string &path) {
  uint64_t size = 0;
  REQUIRE_FALSE(llvm::sys::fs::file_size(path, size));
  return int64_t(size);
}

void setAge(const std::string &path, std::chrono::seconds age) {
  int fd = -1;
  REQUIRE_FALSE(llvm::sys::fs::openFileForWrite(
      path, fd, llvm::sys::fs::CD_OpenExisting, llvm::sys::fs::OF_Append));
  auto when = std::chrono::system_clock::now() - age;
  CHECK_FALSE(llvm::sys::fs::setLastAccessAndModificationTime(
      fd, llvm::sys::toTimePoint(std::chrono::system_clock::to_time_t(when))));
  ::close(fd);
}

std::unique_ptr<kiln::JIT> makeBoundedJIT(const std::string &dir, int64_t limit) {
  return makeJIT(dir, "host", limit);
}
} // namespace

TEST_CASE("the disk cache stays under its bound, least recently used out",
          "[jit][cache]") {
  // Learn an entry's size in an unbounded directory.
  std::string probe = freshDir();
  { requireOk(makeBoundedJIT(probe, 0)->compile(renamedVectorAdd("a"))); }
  auto probeFiles = listDir(probe);
  REQUIRE(probeFiles.size() == 1);
  int64_t entry = fileSize(probe + "/" + probeFiles[0]);

  // Room for two entries and a half: the third write evicts one.
  std::string dir = freshDir();
  int64_t limit = entry * 5 / 2;
  auto names = [&] {
    std::set<std::string> s;
    for (auto &f : listDir(dir))
      s.insert(f);
    return s;
  };
  {
    auto jit = makeBoundedJIT(dir, limit);
    requireOk(jit->compile(renamedVectorAdd("a")));
  }
  std::string a = *names().begin();
  {
    auto jit = makeBoundedJIT(dir, limit);
    requireOk(jit->compile(renamedVectorAdd("b")));
  }
  std::set<std::string> ab = names();
  REQUIRE(ab.size() == 2);
  ab.erase(a);
  std::string b = *ab.begin();
  // a was written first, then b; a disk hit on a makes b the least recent.
  setAge(dir + "/" + a, std::chrono::seconds(200));
  setAge(dir + "/" + b, std::chrono::seconds(100));
  {
    auto jit = makeBoundedJIT(dir, limit);
    requireOk(jit->compile(renamedVectorAdd("a")));
    CHECK(jit->getStats().diskHits == 1);
    CHECK(jit->getStats().evictions == 0);
    auto k = requireOk(jit->compile(renamedVectorAdd("c")));
    CHECK(jit->getStats().compiles == 1);
    CHECK(jit->getStats().evictions == 1);
    // The evicted kernel's users are unaffected; the new one runs.
    runVectorAdd(*jit, *k);
  }
  std::set<std::string> left = names();
  CHECK(left.size() == 2);
  CHECK(left.count(a) == 1);
  CHECK(left.count(b) == 0);
  int64_t total = 0;
  for (auto &f : left)
    total += fileSize(dir + "/" + f);
  CHECK(total <= limit);
  // b compiles again when asked for.
  auto jit = makeBoundedJIT(dir, limit);
  requireOk(jit->compile(renamedVectorAdd("b")));
  CHECK(jit->getStats().compiles == 1);
}

TEST_CASE("trimming removes temporary files that crashed writers left",
          "[jit][cache]") {
  std::string dir = freshDir();
  std::string key(64, 'a');
  std::string stale = dir + "/" + key + ".kiln.tmp.99999.1.0";
  std::string live = dir + "/" + key + ".kiln.tmp.99999.1.1";
  std::string other = dir + "/notes.txt";
  // A user's bundle kept in the directory, and files named almost like
  // entries: not the cache's (any *.kiln was trimmed and cleared).
  std::string mine = dir + "/mine.kiln";
  std::string upper = dir + "/" + std::string(64, 'A') + ".kiln";
  std::string longer = dir + "/" + key + "0.kiln";
  for (auto &p : {stale, live, other, mine, upper, longer})
    std::ofstream(p) << "partial";
  for (auto &p : {stale, other, mine, upper, longer})
    setAge(p, std::chrono::hours(2));
  auto jit = makeBoundedJIT(dir, 1 << 20);
  jit->trimDiskCache();
  CHECK_FALSE(llvm::sys::fs::exists(stale));
  CHECK(llvm::sys::fs::exists(live));
  // Files that are not the cache's are left alone, whatever their age.
  for (auto &p : {other, mine, upper, longer})
    CHECK(llvm::sys::fs::exists(p));
  CHECK(jit->getStats().evictions == 0);
  CHECK(jit->diskCacheUsage().first == 0);
  jit->clearDiskCache();
  for (auto &p : {other, mine, upper, longer})
    CHECK(llvm::sys::fs::exists(p));
}

TEST_CASE("KILN_CACHE_MAX_MB sets the bound; a malformed one is an error",
          "[jit][cache][errors]") {
  const char *saved = std::getenv("KILN_CACHE_MAX_MB");
  std::string restore = saved ? saved : "";
  kiln::JITOptions o;
  o.cacheDir = freshDir();
  SECTION("unset: 1 GiB") {
    ::unsetenv("KILN_CACHE_MAX_MB");
    auto j = requireOk(kiln::JIT::create(o));
    CHECK(j->getCacheLimit() == (int64_t(1) << 30));
  }
  SECTION("a number of megabytes") {
    ::setenv("KILN_CACHE_MAX_MB", "64", 1);
    auto j = requireOk(kiln::JIT::create(o));
    CHECK(j->getCacheLimit() == (int64_t(64) << 20));
  }
  SECTION("0: unbounded") {
    ::setenv("KILN_CACHE_MAX_MB", "0", 1);
    auto j = requireOk(kiln::JIT::create(o));
    CHECK(j->getCacheLimit() == 0);
  }
  SECTION("the option overrides the variable") {
    ::setenv("KILN_CACHE_MAX_MB", "64", 1);
    o.cacheLimitBytes = 12345;
    auto j = requireOk(kiln::JIT::create(o));
    CHECK(j->getCacheLimit() == 12345);
  }
  for (const char *bad : {"lots", "-5", "1.5", "99999999999999"}) {
    DYNAMIC_SECTION("malformed: " << bad) {
      ::setenv("KILN_CACHE_MAX_MB", bad, 1);
      auto j = kiln::JIT::create(o);
      std::string msg = requireErr(j);
      CHECK(msg.find("KILN_CACHE_MAX_MB") != std::string::npos);
    }
  }
  if (saved)
    ::setenv("KILN_CACHE_MAX_MB", restore.c_str(), 1);
  else
    ::unsetenv("KILN_CACHE_MAX_MB");
}

TEST_CASE("two processes compiling the same kernel at once both succeed",
          "[jit][cache]") {
  std::string dir = freshDir();
  std::string kernel = std::string(KILN_EXAMPLES_DIR) + "/vector_add.mlir";
  std::vector<pid_t> pids;
  for (int i = 0; i < 2; ++i) {
    pid_t pid;
    std::string worker = KILN_CACHE_WORKER;
    char *argv[] = {worker.data(), dir.data(), kernel.data(), nullptr};
    REQUIRE(posix_spawn(&pid, worker.c_str(), nullptr, nullptr, argv,
                        environ) == 0);
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  // One published entry, no temporary files left behind.
  auto files = listDir(dir);
  REQUIRE(files.size() == 1);
  CHECK(llvm::StringRef(files[0]).ends_with(".kiln"));
  auto jit = makeJIT(dir);
  auto k = requireOk(jit->compile(readFile(kernel)));
  CHECK(jit->getStats().diskHits == 1);
}

TEST_CASE("a kernel that fails to compile reports the pass and the location",
          "[jit][errors]") {
  auto jit = makeJIT(freshDir());
  const char *src = R"mlir(kiln.func @k(%p: !kiln.ptr<f32>, %n: index) {
  %c1 = arith.constant 1 : index
  %v = kiln.make_view %p, [%n], [%c1] : !kiln.ptr<f32> -> !kiln.view<1xf32>
  %c0 = arith.constant 0 : index
  %t = kiln.load %v[%c0] : !kiln.view<1xf32> -> tensor<4xf32>
  %s = tensor.empty() : tensor<4xf32>
  %u = arith.addf %t, %s : tensor<4xf32>
  kiln.store %u, %v[%c0] : tensor<4xf32> -> !kiln.view<1xf32>
  kiln.return
}
)mlir";
  auto k = jit->compile(src, "bad.mlir");
  std::string msg = requireErr(k);
  INFO(msg);
  CHECK(msg.find("in pass 'convert-kiln-to-cpu'") != std::string::npos);
  CHECK(msg.find("bad.mlir:6:8") != std::string::npos);
  CHECK(msg.find("'tensor.empty' on tiles is not supported") != std::string::npos);
}

TEST_CASE("malformed source gives a located error", "[jit][errors]") {
  auto jit = makeJIT(freshDir());
  auto k = jit->compile("kiln.func @k( {\n", "broken.mlir");
  std::string msg = requireErr(k);
  INFO(msg);
  CHECK(msg.find("broken.mlir:1:") != std::string::npos);
}

TEST_CASE("launchOnStream runs a CPU kernel to completion", "[jit]") {
  auto jit = makeJIT(freshDir());
  auto k = requireOk(jit->compile(vectorAdd()));
  const int64_t n = 1500;
  std::vector<float> x = randomVector(n), y = randomVector(n), out(n, poison());
  const kiln_arg args[] = {kiln::arg(x.data()), kiln::arg(y.data()),
                           kiln::arg(out.data()), kiln::arg(n)};
  const int64_t grid[3] = {ceilDiv(n, 1024), 1, 1};
  // A CPU kernel ignores the stream (any value).
  int notAStream = 0;
  REQUIRE_NOLAUNCHERROR(jit->launchOnStream(*k, args, 4, grid, &notAStream));
  std::vector<double> ref(n);
  for (int64_t i = 0; i < n; ++i)
    ref[i] = double(x[i]) + y[i];
  CHECK_THAT_CLOSE(out, ref, 1e-6, 1e-6);
}

TEST_CASE("out-of-range JIT options are refused, not replaced", "[jit][errors]") {
  kiln::JITOptions o;
  o.cacheDir = freshDir();
  o.cacheLimitBytes = -5; // (it became the 1 GiB default)
  auto bad = kiln::JIT::create(o);
  CHECK(requireErr(bad).find("cacheLimitBytes must be >= 0") != std::string::npos);
  kiln::JITOptions unnamed;
  unnamed.cacheDir = freshDir();
  unnamed.target = ""; // (it was taken as the host)
  auto noTarget = kiln::JIT::create(unnamed);
  CHECK(requireErr(noTarget).find("the target is empty") != std::string::npos);
  auto jit = makeJIT(freshDir());
  kiln::CompileOptions co;
  co.optLevel = 9; // (compiled at O3)
  auto k = jit->compile(vectorAdd(), "v.mlir", co);
  CHECK(requireErr(k).find("optLevel must be 0 to 3, got 9") != std::string::npos);
  // An empty per-kernel target is the JIT's own.
  co.optLevel = 2;
  co.target = "";
  auto own = requireOk(jit->compile(vectorAdd(), "v.mlir", co));
  CHECK(std::string(kiln_kernel_target(own->get())) == "x86-64");
}

TEST_CASE("a wrong launch returns an error and runs nothing", "[jit][errors]") {
  auto jit = makeJIT(freshDir());
  auto k = requireOk(jit->compile(vectorAdd()));
  std::vector<float> x(10), y(10), out(10, poison());
  SECTION("too few arguments") {
    llvm::Error e = jit->launch(*k, {kiln::arg(x.data()), kiln::arg(y.data())}, {1});
    CHECK(requireErr(std::move(e)).find("argument") != std::string::npos);
  }
  SECTION("a dtype mismatch") {
    std::vector<double> xd(10);
    llvm::Error e = jit->launch(*k, {kiln::arg(xd.data()), kiln::arg(y.data()),
                                      kiln::arg(out.data()), kiln::arg(int64_t(10))},
                                {1});
    CHECK(requireErr(std::move(e)).find("f32") != std::string::npos);
  }
  SECTION("a scalar of the wrong type") {
    llvm::Error e = jit->launch(*k, {kiln::arg(x.data()), kiln::arg(y.data()),
                                      kiln::arg(out.data()), kiln::arg(int32_t(10))},
                                {1});
    requireErr(std::move(e));
  }
  SECTION("launchOnStream validates the same way") {
    const kiln_arg args[] = {kiln::arg(x.data()), kiln::arg(y.data())};
    const int64_t grid[3] = {1, 1, 1};
    llvm::Error e = jit->launchOnStream(*k, args, 2, grid, nullptr);
    CHECK(requireErr(std::move(e)).find("argument") != std::string::npos);
  }
  SECTION("an empty grid (it ran one program)") {
    llvm::Error e = jit->launch(*k, {kiln::arg(x.data()), kiln::arg(y.data()),
                                      kiln::arg(out.data()), kiln::arg(int64_t(10))},
                                {});
    CHECK(requireErr(std::move(e)).find("1 to 3 dimensions") != std::string::npos);
  }
  SECTION("a grid of zero programs") {
    llvm::Error e = jit->launch(*k, {kiln::arg(x.data()), kiln::arg(y.data()),
                                      kiln::arg(out.data()), kiln::arg(int64_t(10))},
                                {0});
    requireErr(std::move(e));
  }
  for (float v : out)
    CHECK(std::isnan(v));
}

TEST_CASE("each CPU target variant compiles and computes correctly",
          "[jit][targets]") {
  for (const char *target : {"x86-64-avx512", "x86-64-avx2", "x86-64-sse"}) {
    INFO("target " << target);
    std::string feature = std::string(target) == "x86-64-avx512" ? "avx512f"
                          : std::string(target) == "x86-64-avx2" ? "avx2"
                                                                 : "sse4.2";
    if (!kiln_cpu_has_feature(feature.c_str()))
      continue; // this machine cannot run that variant; nothing to check
    auto jit = makeJIT(freshDir(), target);
    auto k = requireOk(jit->compile(vectorAdd()));
    runVectorAdd(*jit, *k, 5001);
    requireOk(jit->compile(
        readFile(std::string(KILN_EXAMPLES_DIR) + "/softmax.mlir")));
  }
}

TEST_CASE("a bundle needing features the machine lacks is refused",
          "[jit][targets]") {
  // Compile for the best variant this machine runs, then mask that variant's
  // defining feature: the runtime must refuse the bundle, naming it.
  std::string target = "x86-64-sse", feature = "sse4.2";
  if (kiln_cpu_has_feature("avx512f")) {
    target = "x86-64-avx512";
    feature = "avx512f";
  } else if (kiln_cpu_has_feature("avx2")) {
    target = "x86-64-avx2";
    feature = "avx2";
  }
  auto jit = makeJIT(freshDir(), target);
  auto k = requireOk(jit->compile(vectorAdd()));
  std::string bundle = k->getBundle();
  setenv("KILN_CPU_DISABLE", feature.c_str(), 1);
  kiln_kernel *handle = nullptr;
  kiln_status st = kiln_bundle_load_memory(bundle.data(), bundle.size(), &handle);
  unsetenv("KILN_CPU_DISABLE");
  REQUIRE(st);
  CHECK(kiln_status_code_of(st) == KILN_ERROR_MISSING_FEATURE);
  CHECK(std::string(kiln_status_message(st)).find(feature) != std::string::npos);
  kiln_status_free(st);
}

TEST_CASE("a gather stored over its own source reads before it writes",
          "[jit][gather]") {
  // One program gathers 8 rows of x in reverse and stores them over rows
  // 0..7 of the same x. The gathered tile is a value: every row is read
  // before any is written, so the direct row-copy fusion must not apply
  // when the source and the destination overlap.
  auto jit = makeJIT(freshDir());
  const char *src = R"mlir(kiln.func @reverse_rows(%x: !kiln.ptr<f32>, %ids: !kiln.ptr<i32>, %n: index, %w: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %vi = kiln.make_view %ids, [%n], [%c1] : !kiln.ptr<i32> -> !kiln.view<1xi32>
  %idx = kiln.load %vi[%c0] : !kiln.view<1xi32> -> tensor<8xi32>
  %v = kiln.make_view %x, [%n, %w], [%w, %c1] : !kiln.ptr<f32> -> !kiln.view<2xf32>
  %g = kiln.gather %v[%idx, %c0] : !kiln.view<2xf32>, tensor<8xi32> -> tensor<8x64xf32>
  kiln.store %g, %v[%c0, %c0] : tensor<8x64xf32> -> !kiln.view<2xf32>
  kiln.return
}
)mlir";
  auto k = requireOk(jit->compile(src, "reverse_rows.mlir"));
  const int64_t n = 8, w = 64;
  std::vector<float> x = randomVector(n * w);
  const std::vector<float> before = x;
  std::vector<int32_t> ids = {7, 6, 5, 4, 3, 2, 1, 0};
  REQUIRE_NOLAUNCHERROR(jit->launch(
      *k, {kiln::arg(x.data()), kiln::arg(ids.data()), kiln::arg(n), kiln::arg(w)}, {1}));
  std::vector<double> ref(n * w);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < w; ++c)
      ref[r * w + c] = before[(n - 1 - r) * w + c];
  CHECK_THAT_CLOSE(x, ref, 0, 0);
}
