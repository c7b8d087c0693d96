//===- LaunchTests.cpp - Launching kernels on the thread pool
//--------------===//

#include "BundleWriter.h"
#include "TestUtil.h"

#include <catch2/catch.hpp>

#include <functional>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

using namespace kiln::test;

namespace {

KernelPtr load(const std::string &kernel, const std::string &extra = "") {
  Bytes bundle = bundleFor(kernel, extra);
  kiln_kernel *loaded = nullptr;
  Status status(kiln_bundle_load_memory(bundle.data(), bundle.size(), &loaded));
  INFO(status.message());
  REQUIRE(status.ok());
  return KernelPtr(loaded);
}

RuntimePtr makeRuntime(int threads) {
  kiln_runtime *runtime = nullptr;
  Status status(kiln_runtime_create(threads, &runtime));
  INFO(status.message());
  REQUIRE(status.ok());
  return RuntimePtr(runtime);
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

/// Runs vadd on n elements and checks every output element.
void checkVadd(kiln_runtime *runtime, kiln_kernel *kernel, int32_t n) {
  std::vector<float> x(n), y(n), out(n + 1, NAN);
  for (int32_t i = 0; i < n; ++i) {
    x[i] = 0.5f * i;
    y[i] = 1000.0f - i;
  }
  kiln_arg args[] = {ptrArg(x.data(), KILN_DTYPE_F32),
                     ptrArg(y.data(), KILN_DTYPE_F32),
                     ptrArg(out.data(), KILN_DTYPE_F32), i32Arg(n)};
  int64_t grid[3] = {(n + 3) / 4, 1, 1};
  Status status(kiln_launch(runtime, kernel, args, 4, grid));
  INFO(status.message());
  REQUIRE(status.ok());
  for (int32_t i = 0; i < n; ++i)
    REQUIRE(out[i] == x[i] + y[i]);
  CHECK(std::isnan(out[n])); // The mask held.
}

/// Launches `record` on a grid and checks each program ran once with the
/// right coordinates.
void checkRecord(kiln_runtime *runtime, kiln_kernel *kernel, int64_t gx,
                 int64_t gy, int64_t gz) {
  CAPTURE(gx, gy, gz);
  std::vector<int32_t> out(gx * gy * gz * 4, -1);
  for (size_t i = 3; i < out.size(); i += 4)
    out[i] = 0;
  int32_t dims[3] = {0, 0, 0};
  kiln_arg args[] = {ptrArg(out.data(), KILN_DTYPE_I32),
                     ptrArg(dims, KILN_DTYPE_I32)};
  int64_t grid[3] = {gx, gy, gz};
  Status status(kiln_launch(runtime, kernel, args, 2, grid));
  INFO(status.message());
  REQUIRE(status.ok());
  CHECK(dims[0] == gx);
  CHECK(dims[1] == gy);
  CHECK(dims[2] == gz);
  size_t linear = 0;
  for (int64_t z = 0; z < gz; ++z)
    for (int64_t y = 0; y < gy; ++y)
      for (int64_t x = 0; x < gx; ++x, ++linear) {
        REQUIRE(out[linear * 4 + 0] == x);
        REQUIRE(out[linear * 4 + 1] == y);
        REQUIRE(out[linear * 4 + 2] == z);
        REQUIRE(out[linear * 4 + 3] == 1);
      }
}

} // namespace

TEST_CASE("runtime creation", "[runtime]") {
  CHECK(makeRuntime(1) != nullptr);
  CHECK(kiln_runtime_num_threads(makeRuntime(3).get()) == 3);
  CHECK(kiln_runtime_num_threads(nullptr) == 0);
  kiln_runtime_destroy(nullptr);

  kiln_runtime *runtime = nullptr;
  Status negative(kiln_runtime_create(-1, &runtime));
  CHECK(negative.code() == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(runtime == nullptr);
  CHECK(Status(kiln_runtime_create(1, nullptr)).code() ==
        KILN_ERROR_INVALID_ARGUMENT);

  {
    ScopedEnv env("KILN_NUM_THREADS", "3");
    CHECK(kiln_runtime_num_threads(makeRuntime(0).get()) == 3);
    CHECK(kiln_runtime_num_threads(makeRuntime(2).get()) == 2);
  }
  {
    ScopedEnv env("KILN_NUM_THREADS", "lots");
    Status bad(kiln_runtime_create(0, &runtime));
    CHECK(bad.code() == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(contains(bad.message(), "KILN_NUM_THREADS"));
  }
  {
    ScopedEnv env("KILN_NUM_THREADS", nullptr);
    CHECK(kiln_runtime_num_threads(makeRuntime(0).get()) >= 1);
  }
}

TEST_CASE("vector add gives exact results on any thread count", "[launch]") {
  KernelPtr kernel = load("vadd");
  for (int threads : {1, 2, 4, 7}) {
    CAPTURE(threads);
    RuntimePtr runtime = makeRuntime(threads);
    for (int32_t n : {1, 3, 4, 5, 1003, 100000})
      checkVadd(runtime.get(), kernel.get(), n);
  }
}

TEST_CASE("every program id of 1D, 2D and 3D grids runs once", "[launch]") {
  KernelPtr kernel = load("record");
  for (int threads : {1, 3}) {
    CAPTURE(threads);
    RuntimePtr runtime = makeRuntime(threads);
    checkRecord(runtime.get(), kernel.get(), 1, 1, 1);
    checkRecord(runtime.get(), kernel.get(), 37, 1, 1);
    checkRecord(runtime.get(), kernel.get(), 5, 7, 1);
    checkRecord(runtime.get(), kernel.get(), 3, 4, 5);
    checkRecord(runtime.get(), kernel.get(), 1, 1, 9);
    checkRecord(runtime.get(), kernel.get(), 64, 33, 3);
  }
}

TEST_CASE("launches use several threads", "[launch][threads]") {
  KernelPtr kernel = load("thread_ids");
  RuntimePtr runtime = makeRuntime(4);
  const int64_t programs = 64;
  std::vector<int64_t> tids(programs, 0);
  kiln_arg delay{};
  delay.kind = KILN_ARG_SCALAR;
  delay.dtype = KILN_DTYPE_I32;
  delay.value.i32 = 500;
  kiln_arg args[] = {ptrArg(tids.data(), KILN_DTYPE_I64), delay};
  int64_t grid[3] = {programs, 1, 1};
  REQUIRE(Status(kiln_launch(runtime.get(), kernel.get(), args, 2, grid)).ok());
  std::set<int64_t> distinct(tids.begin(), tids.end());
  CHECK(distinct.count(0) == 0);
  CHECK(distinct.size() > 1);
  CHECK(distinct.size() <= 4);
}

TEST_CASE("scalars of every dtype reach the kernel", "[launch]") {
  KernelPtr kernel = load("scalars");
  RuntimePtr runtime = makeRuntime(2);
  std::vector<double> out(10, NAN);
  std::vector<kiln_arg> args(11);
  args[0] = ptrArg(out.data(), KILN_DTYPE_F64);
  kiln_dtype dtypes[] = {KILN_DTYPE_I8,  KILN_DTYPE_I16, KILN_DTYPE_I32,
                         KILN_DTYPE_I64, KILN_DTYPE_F32, KILN_DTYPE_F64,
                         KILN_DTYPE_U8,  KILN_DTYPE_I1,  KILN_DTYPE_BF16,
                         KILN_DTYPE_F16};
  for (int i = 0; i < 10; ++i) {
    args[i + 1].kind = KILN_ARG_SCALAR;
    args[i + 1].dtype = dtypes[i];
    args[i + 1].value.i64 = -1; // Poison the high bytes.
  }
  args[1].value.i8 = -5;
  args[2].value.i16 = -30000;
  args[3].value.i32 = 2000000000;
  args[4].value.i64 = int64_t(1) << 40;
  args[5].value.f32 = 1.5f;
  args[6].value.f64 = -2.25;
  args[7].value.u8 = 200;
  args[8].value.u8 = 1;
  args[9].value.bits16 = 0x3f80;  // bf16 1.0
  args[10].value.bits16 = 0x3c00; // f16 1.0
  int64_t grid[3] = {1, 1, 1};
  Status status(
      kiln_launch(runtime.get(), kernel.get(), args.data(), 11, grid));
  INFO(status.message());
  REQUIRE(status.ok());
  CHECK(out[0] == -5);
  CHECK(out[1] == -30000);
  CHECK(out[2] == 2000000000);
  CHECK(out[3] == double(int64_t(1) << 40));
  CHECK(out[4] == 1.5);
  CHECK(out[5] == -2.25);
  CHECK(out[6] == 200);
  CHECK(out[7] == 1);
  CHECK(out[8] == 0x3f80);
  CHECK(out[9] == 0x3c00);

  args[8].value.u8 = 2;
  Status badBool(
      kiln_launch(runtime.get(), kernel.get(), args.data(), 11, grid));
  CHECK(badBool.code() == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(badBool.message(), "argument 8 ('h'): i1 value must be 0 or "
                                    "1, got 2"));
}

TEST_CASE("launch arguments are validated against the signature",
          "[launch][validation]") {
  KernelPtr kernel = load("vadd");
  RuntimePtr runtime = makeRuntime(2);
  std::vector<float> x(8), y(8), out(8);
  std::vector<kiln_arg> good = {ptrArg(x.data(), KILN_DTYPE_F32),
                                ptrArg(y.data(), KILN_DTYPE_F32),
                                ptrArg(out.data(), KILN_DTYPE_F32), i32Arg(8)};
  int64_t grid[3] = {2, 1, 1};
  REQUIRE(Status(kiln_launch(runtime.get(), kernel.get(), good.data(), 4, grid))
              .ok());

  auto launchWith = [&](std::vector<kiln_arg> args, const int64_t *g) {
    return std::make_unique<Status>(
        kiln_launch(runtime.get(), kernel.get(), args.data(), args.size(), g));
  };

  SECTION("wrong count") {
    auto status = launchWith({good[0], good[1], good[2]}, grid);
    CHECK(status->code() == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(contains(status->message(),
                   "kernel 'vadd' takes 4 argument(s), 3 given"));
  }
  SECTION("wrong dtype") {
    std::vector<kiln_arg> args = good;
    args[3].dtype = KILN_DTYPE_F32;
    auto status = launchWith(args, grid);
    CHECK(status->code() == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(contains(status->message(),
                   "argument 3 ('n'): expected scalar i32, got scalar f32"));
  }
  SECTION("wrong kind") {
    std::vector<kiln_arg> args = good;
    args[1].kind = KILN_ARG_SCALAR;
    auto status = launchWith(args, grid);
    CHECK(status->code() == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(contains(status->message(),
                   "argument 1 ('y'): expected ptr f32, got scalar f32"));
  }
  SECTION("null pointer") {
    std::vector<kiln_arg> args = good;
    args[2].value.ptr = nullptr;
    auto status = launchWith(args, grid);
    CHECK(status->code() == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(contains(status->message(), "argument 2 ('out'): null pointer"));
  }
  SECTION("bad grids") {
    for (int64_t bad : {int64_t(0), int64_t(-1), int64_t(INT32_MAX) + 1}) {
      CAPTURE(bad);
      int64_t badGrid[3] = {bad, 1, 1};
      auto status = launchWith(good, badGrid);
      CHECK(status->code() == KILN_ERROR_INVALID_ARGUMENT);
      CHECK(contains(status->message(), "grid[0] is " + std::to_string(bad)));
    }
    int64_t zeroY[3] = {2, 0, 1};
    CHECK(launchWith(good, zeroY)->code() == KILN_ERROR_INVALID_ARGUMENT);
    int64_t beyondRank[3] = {2, 2, 1};
    auto rank = launchWith(good, beyondRank);
    CHECK(rank->code() == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(contains(rank->message(), "grid-rank 1"));
    CHECK(launchWith(good, nullptr)->code() == KILN_ERROR_INVALID_ARGUMENT);
  }
  SECTION("null handles") {
    Status noRuntime(kiln_launch(nullptr, kernel.get(), good.data(), 4, grid));
    CHECK(noRuntime.code() == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(contains(noRuntime.message(), "runtime is NULL"));
    Status noKernel(kiln_launch(runtime.get(), nullptr, good.data(), 4, grid));
    CHECK(contains(noKernel.message(), "kernel is NULL"));
    Status noArgs(kiln_launch(runtime.get(), kernel.get(), nullptr, 4, grid));
    CHECK(noArgs.code() == KILN_ERROR_INVALID_ARGUMENT);
  }
}

TEST_CASE("grids with too many program ids are refused", "[launch]") {
  KernelPtr kernel = load("nop");
  RuntimePtr runtime = makeRuntime(2);
  int64_t grid[3] = {INT32_MAX, INT32_MAX, INT32_MAX};
  Status status(kiln_launch(runtime.get(), kernel.get(), nullptr, 0, grid));
  CHECK(status.code() == KILN_ERROR_LAUNCH);
  CHECK(contains(status.message(), "more than 2^62 program ids"));
}

/// Whether this is an AddressSanitizer build that aborts, rather than
/// returning NULL, when an allocation exceeds its limits.
bool sanitizerAbortsOnHugeAllocations() {
#if defined(__SANITIZE_ADDRESS__)
  bool asan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  bool asan = true;
#else
  bool asan = false;
#endif
#else
  bool asan = false;
#endif
  const char *options = std::getenv("ASAN_OPTIONS");
  return asan &&
         !(options && std::strstr(options, "allocator_may_return_null=1"));
}

/// Launches `scratch` (launch scratch_bytes 256) on a grid, through
/// kiln_launch or kiln_launch_packed, and checks that every program got its
/// own 128-byte aligned slot at base + linear id * 256.
void checkScratch(kiln_runtime *runtime, kiln_kernel *kernel, int64_t gx,
                  int64_t gy, int64_t gz, bool packed) {
  CAPTURE(gx, gy, gz, packed);
  const int64_t programs = gx * gy * gz;
  const int32_t slotBytes = 256;
  std::vector<int64_t> out(programs * 3, -1);
  int64_t grid[3] = {gx, gy, gz};
  kiln_status launched;
  if (packed) {
    int64_t *outp = out.data();
    int32_t bytes = slotBytes;
    void *args[] = {&outp, &bytes};
    launched = kiln_launch_packed(runtime, kernel, args, 2, grid);
  } else {
    kiln_arg args[] = {ptrArg(out.data(), KILN_DTYPE_I64), i32Arg(slotBytes)};
    launched = kiln_launch(runtime, kernel, args, 2, grid);
  }
  Status status(launched);
  INFO(status.message());
  REQUIRE(status.ok());
  const int64_t base = out[0];
  CHECK(base != 0);
  CHECK(base % 128 == 0);
  for (int64_t linear = 0; linear < programs; ++linear) {
    CAPTURE(linear);
    REQUIRE(out[linear * 3 + 0] == base + linear * slotBytes);
    REQUIRE(out[linear * 3 + 1] == linear);
    REQUIRE(out[linear * 3 + 2] == 1);
  }
}

TEST_CASE("kernels with scratch_bytes get a slot per program",
          "[launch][scratch]") {
  KernelPtr kernel = load("scratch", "launch scratch_bytes 256\n");
  // The scratch buffer is hidden: the signature is the manifest's.
  CHECK(kiln_kernel_num_args(kernel.get()) == 2);
  CHECK(std::string(kiln_kernel_launch_param(kernel.get(), "scratch_bytes")) ==
        "256");
  for (int threads : {1, 4}) {
    CAPTURE(threads);
    RuntimePtr runtime = makeRuntime(threads);
    for (bool packed : {false, true}) {
      checkScratch(runtime.get(), kernel.get(), 1, 1, 1, packed);
      checkScratch(runtime.get(), kernel.get(), 5, 3, 7, packed);
      checkScratch(runtime.get(), kernel.get(), 1, 13, 2, packed);
      checkScratch(runtime.get(), kernel.get(), 37, 1, 3, packed);
    }
  }

  RuntimePtr runtime = makeRuntime(2);
  std::vector<int64_t> out(3 * 4, -1);
  int64_t grid[3] = {2, 2, 1};
  SECTION("kiln_launch_async runs it too") {
    kiln_arg args[] = {ptrArg(out.data(), KILN_DTYPE_I64), i32Arg(256)};
    Status status(
        kiln_launch_async(runtime.get(), kernel.get(), args, 2, grid));
    INFO(status.message());
    REQUIRE(status.ok());
    CHECK(out[0] % 128 == 0);
    CHECK(out[3 * 3] == out[0] + 3 * 256);
    CHECK(out[3 * 3 + 2] == 1);
  }
  SECTION("the arity is the signature's") {
    kiln_arg args[] = {ptrArg(out.data(), KILN_DTYPE_I64), i32Arg(256),
                       ptrArg(out.data(), KILN_DTYPE_I64)};
    Status status(kiln_launch(runtime.get(), kernel.get(), args, 3, grid));
    CHECK(status.code() == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(contains(status.message(),
                   "kernel 'scratch' takes 2 argument(s), 3 given"));
    int64_t *outp = out.data();
    void *packed[] = {&outp, &outp, &outp};
    Status packedStatus(
        kiln_launch_packed(runtime.get(), kernel.get(), packed, 3, grid));
    CHECK(packedStatus.code() == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(out[0] == -1); // nothing ran
  }
}

TEST_CASE("bad scratch_bytes values are refused at load", "[bundle][scratch]") {
  for (const char *bad :
       {"100", "64", "129", "-128", "+128", "1048704", "2097152", "garbage",
        "0x80", "12.8", "128k", "99999999999999999999999999"}) {
    CAPTURE(bad);
    Bytes bundle =
        bundleFor("scratch", std::string("launch scratch_bytes ") + bad + "\n");
    kiln_kernel *kernel = nullptr;
    Status status(
        kiln_bundle_load_memory(bundle.data(), bundle.size(), &kernel));
    CHECK(kernel == nullptr);
    CHECK(status.code() == KILN_ERROR_BAD_BUNDLE);
    CHECK(contains(status.message(),
                   std::string("bundle 'scratch': launch scratch_bytes is '") +
                       bad + "', must be a decimal multiple of 128 in [0, 1048576]"));
  }
  // A kernel that takes scratch in a version-1 bundle (which a runtime
  // without scratch support would read, and launch without the argument) is
  // refused: such bundles are version 2.
  {
    Bytes bundle = bundleFor("scratch", "launch scratch_bytes 256\n");
    writeU32(bundle, kVersionAt, 1);
    kiln_kernel *kernel = nullptr;
    Status status(
        kiln_bundle_load_memory(bundle.data(), bundle.size(), &kernel));
    CHECK(kernel == nullptr);
    CHECK(status.code() == KILN_ERROR_BAD_BUNDLE);
    CHECK(contains(status.message(), "bundle 'scratch': launch scratch_bytes "
                                     "needs bundle format version 2 (the "
                                     "header says 1)"));
  }
  // The limits themselves are fine; 0 means no scratch buffer.
  CHECK(kiln_kernel_num_args(load("nop", "launch scratch_bytes 0\n").get()) ==
        0);
  CHECK(kiln_kernel_num_args(
            load("nop", "launch scratch_bytes 1048576\n").get()) == 0);
  CHECK(kiln_kernel_num_args(load("nop", "launch scratch_bytes 128\n").get()) ==
        0);

  // From a file, the message names the file too.
  TempDir dir;
  std::string path = dir.path("bad.kiln");
  writeFileBytes(path, bundleFor("scratch", "launch scratch_bytes 100\n"));
  kiln_kernel *kernel = nullptr;
  Status status(kiln_bundle_load_file(path.c_str(), &kernel));
  CHECK(status.code() == KILN_ERROR_BAD_BUNDLE);
  CHECK(contains(status.message(),
                 path + ": bundle 'scratch': launch scratch_bytes is '100'"));
}

TEST_CASE("scratch memory for huge grids is refused, not wrapped",
          "[launch][scratch]") {
  RuntimePtr runtime = makeRuntime(2);
  KernelPtr kernel = load("nop", "launch scratch_bytes 1048576\n");
  // 2^62 - 2^32 + 1 programs: a valid grid, but 2^20 bytes each overflows.
  int64_t overflowing[3] = {INT32_MAX, INT32_MAX, 1};
  Status overflow(
      kiln_launch(runtime.get(), kernel.get(), nullptr, 0, overflowing));
  CHECK(overflow.code() == KILN_ERROR_LAUNCH);
  CHECK(contains(overflow.message(),
                 "kernel 'nop': 4611686014132420609 programs of 1048576 bytes "
                 "of scratch memory exceed the address space"));
  // 2^51 bytes fit in size_t but in no x86-64 address space. (AddressSanitizer
  // aborts on such requests unless ASAN_OPTIONS has
  // allocator_may_return_null=1.)
  if (sanitizerAbortsOnHugeAllocations())
    return;
  int64_t huge[3] = {INT32_MAX, 1, 1};
  Status tooBig(kiln_launch(runtime.get(), kernel.get(), nullptr, 0, huge));
  CHECK(tooBig.code() == KILN_ERROR_OUT_OF_MEMORY);
  CHECK(contains(tooBig.message(),
                 "kernel 'nop': cannot allocate 2251799812636672 bytes of "
                 "scratch memory (1048576 bytes per program)"));
  void *none[1] = {nullptr};
  Status packed(kiln_launch_packed(runtime.get(), kernel.get(), none, 0, huge));
  CHECK(packed.code() == KILN_ERROR_OUT_OF_MEMORY);
}

TEST_CASE("packed launches", "[launch]") {
  KernelPtr kernel = load("vadd");
  RuntimePtr runtime = makeRuntime(3);
  const int32_t n = 999;
  std::vector<float> x(n, 1.0f), y(n, 2.0f), out(n, 0.0f);
  float *xp = x.data(), *yp = y.data(), *outp = out.data();
  int32_t count = n;
  void *packed[] = {&xp, &yp, &outp, &count};
  int64_t grid[3] = {(n + 3) / 4, 1, 1};
  REQUIRE(
      Status(kiln_launch_packed(runtime.get(), kernel.get(), packed, 4, grid))
          .ok());
  for (float value : out)
    REQUIRE(value == 3.0f);

  void *nullSlot[] = {&xp, nullptr, &outp, &count};
  Status missing(
      kiln_launch_packed(runtime.get(), kernel.get(), nullSlot, 4, grid));
  CHECK(missing.code() == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(missing.message(), "argument 1 ('y')"));

  float *nullData = nullptr;
  void *nullPtr[] = {&xp, &yp, &nullData, &count};
  Status nullData2(
      kiln_launch_packed(runtime.get(), kernel.get(), nullPtr, 4, grid));
  CHECK(contains(nullData2.message(), "argument 2 ('out'): null pointer"));

  CHECK(Status(kiln_launch_packed(runtime.get(), kernel.get(), packed, 3, grid))
            .code() == KILN_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("launches from several host threads share one runtime",
          "[launch][threads]") {
  KernelPtr kernel = load("vadd");
  RuntimePtr runtime = makeRuntime(3);
  std::vector<std::thread> hosts;
  std::vector<int> failures(4, 0);
  for (int h = 0; h < 4; ++h) {
    hosts.emplace_back([&, h] {
      const int32_t n = 4000 + h;
      std::vector<float> x(n, float(h)), y(n, 1.0f), out(n);
      for (int iteration = 0; iteration < 50; ++iteration) {
        std::fill(out.begin(), out.end(), -1.0f);
        kiln_arg args[] = {ptrArg(x.data(), KILN_DTYPE_F32),
                           ptrArg(y.data(), KILN_DTYPE_F32),
                           ptrArg(out.data(), KILN_DTYPE_F32), i32Arg(n)};
        int64_t grid[3] = {(n + 3) / 4, 1, 1};
        kiln_status status =
            kiln_launch(runtime.get(), kernel.get(), args, 4, grid);
        if (status) {
          ++failures[h];
          kiln_status_free(status);
        }
        for (float value : out)
          if (value != float(h) + 1.0f) {
            ++failures[h];
            break;
          }
      }
    });
  }
  for (std::thread &host : hosts)
    host.join();
  for (int h = 0; h < 4; ++h)
    CHECK(failures[h] == 0);
}

TEST_CASE("launch overhead", "[.][bench]") {
  KernelPtr kernel = load("nop");
  int64_t one[3] = {1, 1, 1};
  for (int threads : {1, 2}) {
    RuntimePtr runtime = makeRuntime(threads);
    for (int64_t programs : {int64_t(1), int64_t(64)}) {
      int64_t grid[3] = {programs, 1, 1};
      (void)one;
      const int iterations = programs == 1 ? 1000000 : 20000;
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) {
        kiln_status status =
            kiln_launch(runtime.get(), kernel.get(), nullptr, 0, grid);
        if (status) {
          FAIL(kiln_status_message(status));
        }
      }
      double seconds = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - start)
                           .count();
      WARN("threads " << threads << ", " << programs << " program(s): "
                      << seconds / iterations * 1e9 << " ns per launch");
    }
  }
}

TEST_CASE("tensor maps are encoded per launch from the arguments",
          "[launch][tensor_map]") {
  // Map 0: the f32 view [rows, cols] (strides cols, 1) with 16 x 32 tiles;
  // map 1: a swizzled 2-byte view of the same base, sizes (rows / 2, 64);
  // map 2: a core-matrix map of a 2-byte view [rows, 2 cols] with 8 x 32
  // tiles (8 elements, rows, column chunks at 16 bytes).
  KernelPtr kernel =
      load("maps", "tensor_map plain 4 1 2 16 32 a2 a3 a3 1\n"
                   "tensor_map swizzled 2 1 2 8 64 a2,2,sdiv 64 64 1\n"
                   "tensor_map core 2 1 2 8 32 a2 a3,2,* a3,2,* 1\n");
  CHECK(kiln_kernel_num_args(kernel.get()) == 4);
  RuntimePtr runtime = makeRuntime(1);
  alignas(64) static float data[4096];
  std::vector<int64_t> out(64, -1);
  int64_t grid[3] = {2, 1, 1};
  auto run = [&](float *base, int64_t rows, int32_t cols) {
    kiln_arg args[] = {ptrArg(out.data(), KILN_DTYPE_I64),
                       ptrArg(base, KILN_DTYPE_F32), i64Arg(rows), i32Arg(cols)};
    return Status(kiln_launch(runtime.get(), kernel.get(), args, 4, grid));
  };
  {
    Status status = run(data, 100, 36);
    INFO(status.message());
    REQUIRE(status.ok());
    CHECK(out[0] == 7); // all usable
    const int64_t *m0 = &out[1], *m1 = &out[17], *m2 = &out[33];
    CHECK(m0[0] == 0);                                    // aligned
    CHECK(m0[1] == 2);                                    // u32 elements
    CHECK(m0[2] == 2);                                    // rank
    CHECK(m0[3] == (int64_t)(intptr_t)data);
    CHECK(m0[4] == 0);                                    // no swizzle
    CHECK((m0[5] == 36 && m0[6] == 36 * 4 && m0[7] == 32)); // cols, row bytes, box
    CHECK((m0[8] == 100 && m0[9] == 0 && m0[10] == 16));    // rows, -, box
    CHECK(m1[1] == 1);                                    // u16 elements
    CHECK(m1[4] == 3);                                    // 128-byte swizzle
    CHECK((m1[5] == 64 && m1[6] == 128 && m1[7] == 64));  // boxes of 64 columns
    CHECK((m1[8] == 50 && m1[10] == 8));
    CHECK((m2[1] == 1 && m2[2] == 3 && m2[4] == 0));       // u16, rank 3
    CHECK((m2[5] == 8 && m2[6] == 72 * 2 && m2[7] == 8));  // 8 elements; row bytes
    CHECK((m2[8] == 100 && m2[9] == 16 && m2[10] == 8));   // rows; chunks at 16 bytes
    CHECK((m2[11] == 72 / 8 && m2[13] == 32 / 8));         // chunks; box
  }
  {
    // Row stride 35 floats (140 bytes, not a multiple of 16): map 0 is not
    // usable (its bit clear, its bytes zero); map 1 still is.
    // (Map 2: 70 columns, not a multiple of 8: not usable either.)
    Status status = run(data, 100, 35);
    REQUIRE(status.ok());
    CHECK(out[0] == 2);
    for (int i = 2; i < 16; ++i)
      CHECK(out[i] == 0);
    // A misaligned base: neither.
    REQUIRE(run(data + 1, 100, 36).ok());
    CHECK(out[0] == 0);
    // Too few rows for map 1 (rows / 2 == 0): maps 0 and 2.
    REQUIRE(run(data, 1, 36).ok());
    CHECK(out[0] == 5);
  }
  {
    // A map the encoder refuses is not used (its bit clear, its bytes zero:
    // the kernel takes cp.async for it); with KILN_TENSOR_MAP_ERRORS=1 the
    // refusal is the launch's error, naming the map.
    KernelPtr refused = load("maps", "tensor_map plain 4 1 2 16 3 a2 a3 a3 1\n"
                                     "tensor_map plain 4 1 2 16 32 a2 a3 a3 1\n"
                                     "tensor_map plain 4 1 2 16 32 a2 a3 a3 1\n");
    kiln_arg args[] = {ptrArg(out.data(), KILN_DTYPE_I64),
                       ptrArg(data, KILN_DTYPE_F32), i64Arg(10), i32Arg(36)};
    REQUIRE(Status(kiln_launch(runtime.get(), refused.get(), args, 4, grid)).ok());
    CHECK(out[0] == 6);
    CHECK(out[1 + 3] == 0); // map 0's address word
    ScopedEnv strict("KILN_TENSOR_MAP_ERRORS", "1");
    Status status(kiln_launch(runtime.get(), refused.get(), args, 4, grid));
    CHECK(status.code() == KILN_ERROR_LAUNCH);
    CHECK(contains(status.message(),
                   "kernel 'maps': the emulator's kiln_emu_tensormap_encode "
                   "refused tensor map 0 (of argument 'base', rank 2, error 1)"));
  }
  {
    // kiln_launch_packed computes the maps from the packed values, read as
    // the manifest's types.
    void *outp = out.data(), *basep = data;
    int64_t rows = 100;
    int32_t cols = 36;
    void *packed[] = {&outp, &basep, &rows, &cols};
    std::fill(out.begin(), out.end(), -1);
    Status status(kiln_launch_packed(runtime.get(), kernel.get(), packed, 4, grid));
    INFO(status.message());
    REQUIRE(status.ok());
    CHECK(out[0] == 7);
    CHECK((out[1 + 5] == 36 && out[1 + 8] == 100));
    CHECK(out[17 + 8] == 50);
  }
}

TEST_CASE("malformed tensor_map lines are refused", "[bundle][tensor_map]") {
  struct Case {
    std::string line, expected;
  };
  std::vector<Case> cases = {
      {"tensor_map plain 4 1 2 16 32 a2 a3 a3", "expected 2 sizes and strides"},
      {"tensor_map wavy 4 1 2 16 32 a2 a3 a3 1", "kind must be plain"},
      {"tensor_map plain 3 1 2 16 32 a2 a3 a3 1", "element bytes"},
      {"tensor_map plain 4 2 2 16 32 a2 a3 a3 1", "pointer argument"},
      {"tensor_map plain 4 1 6 16 32 a2 a3 a3 1", "rank must be 2 to 5"},
      {"tensor_map plain 4 1 2 0 32 a2 a3 a3 1", "bad tile rows or columns"},
      {"tensor_map swizzled 2 1 2 16 32 a2 a3 a3 1", "bad tile rows or columns"},
      {"tensor_map plain 4 1 2 16 32 a1 a3 a3 1",
       "size 0: 'a1' is not an integer scalar argument"},
      {"tensor_map plain 4 1 2 16 32 a2,* a3 a3 1", "operator '*' lacks operands"},
      {"tensor_map plain 4 1 2 16 32 a2,a3 a3 a3 1", "leaves 2 values"},
      {"tensor_map plain 4 1 2 16 32 a2 a3 a3 1x", "stride 1: bad token '1x'"},
  };
  for (const Case &c : cases) {
    CAPTURE(c.line);
    Bytes bundle = bundleFor("maps", c.line + "\n");
    kiln_kernel *kernel = nullptr;
    Status status(kiln_bundle_load_memory(bundle.data(), bundle.size(), &kernel));
    CHECK(kernel == nullptr);
    CHECK(status.code() == KILN_ERROR_BAD_BUNDLE);
    CHECK(contains(status.message(), "bundle 'maps': tensor_map 0"));
    CHECK(contains(status.message(), c.expected));
  }
  // Tensor maps in a version-2 bundle (which a runtime without them would
  // launch without the parameters): refused.
  Bytes bundle = bundleFor("maps", "tensor_map plain 4 1 2 16 32 a2 a3 a3 1\n");
  writeU32(bundle, kVersionAt, 2);
  kiln_kernel *kernel = nullptr;
  Status status(kiln_bundle_load_memory(bundle.data(), bundle.size(), &kernel));
  CHECK(kernel == nullptr);
  CHECK(contains(status.message(), "tensor_map needs bundle format version 3 "
                                   "(the header says 2)"));
}

TEST_CASE("random tensor_map lines never crash loading or launching",
          "[launch][tensor_map][fuzz]") {
  // Lines assembled from valid and invalid tokens: each bundle loads or is
  // refused with a message; what loads launches (the test encoder records),
  // whatever the argument values make of the expressions.
  std::mt19937 random(77);
  const char *kinds[] = {"plain", "swizzled", "core", "x"};
  // Operands (7), operators (11), then tokens no line may contain.
  const char *tokens[] = {"a2", "a3", "1", "0", "-1", "64", "8",
                          "+", "-", "*", "sdiv", "udiv", "srem", "urem",
                          "smax", "smin", "umax", "umin",
                          "a0", "a9", "", "9223372036854775807x"};
  // Mostly well-formed postfix (operands a2, a3 and numbers; any operator),
  // sometimes a random token string.
  std::function<std::string(int)> wellFormed = [&](int depth) -> std::string {
    if (depth == 0 || random() % 3 == 0)
      return tokens[random() % 7];
    return wellFormed(depth - 1) + "," + wellFormed(depth - 1) + "," +
           tokens[7 + random() % 11];
  };
  auto expr = [&]() {
    if (random() % 10)
      return wellFormed(2);
    std::string e;
    int n = 1 + random() % 5;
    for (int i = 0; i < n; ++i)
      e += (i ? "," : "") + std::string(tokens[random() % 22]);
    return e;
  };
  RuntimePtr runtime = makeRuntime(1);
  alignas(64) static float data[4096];
  std::vector<int64_t> out(64, -1);
  int loaded = 0;
  for (int round = 0; round < 1500; ++round) {
    int rank = random() % 8 == 0 ? 1 + random() % 6 : 2 + random() % 2;
    std::string line = std::string("tensor_map ") + kinds[random() % 8 ? random() % 3 : 3] +
                       " " + std::to_string(1 << (random() % 4)) + " " +
                       std::to_string(random() % 8 ? 1 : random() % 3) + " " +
                       std::to_string(rank) + " " +
                       std::to_string(random() % 100) + " " +
                       std::to_string(64 * (random() % 8 ? 1 + random() % 4 : random() % 5));
    for (int i = 0; i < 2 * rank; ++i)
      line += " " + expr();
    CAPTURE(line);
    // Three copies: the test kernel reads three maps.
    Bytes bundle = bundleFor("maps", line + "\n" + line + "\n" + line + "\n");
    kiln_kernel *kernel = nullptr;
    Status status(kiln_bundle_load_memory(bundle.data(), bundle.size(), &kernel));
    if (!status.ok()) {
      // (An empty token makes an empty field: the manifest parser's error.)
      CHECK(status.code() == KILN_ERROR_BAD_BUNDLE);
      CHECK((contains(status.message(), "tensor_map 0") ||
             contains(status.message(), "manifest line")));
      continue;
    }
    KernelPtr owned(kernel);
    ++loaded;
    kiln_arg args[] = {ptrArg(out.data(), KILN_DTYPE_I64), ptrArg(data, KILN_DTYPE_F32),
                       i64Arg(int64_t(random() % 200) - 20),
                       i32Arg(int32_t(random() % 100) - 5)};
    int64_t grid[3] = {1, 1, 1};
    Status launched(kiln_launch(runtime.get(), owned.get(), args, 4, grid));
    INFO(launched.message());
    CHECK(launched.ok());
    CHECK((out[0] == 0 || out[0] == 7)); // the three maps are the same
  }
  CHECK(loaded > 200);
}
