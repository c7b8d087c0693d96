//===- BundleTests.cpp - Loading and refusing kiln bundles
//-----------------===//
//
// Every malformed input must come back as a status with a message; none may
// crash the process.
//
//===----------------------------------------------------------------------===//

#include "BundleWriter.h"
#include "TestUtil.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <elf.h>
#include <random>

using namespace kiln::test;

namespace {

/// Loads from memory, returning the status and (on success) the kernel.
Status loadMemory(const Bytes &bytes, KernelPtr *kernelOut = nullptr) {
  kiln_kernel *kernel = nullptr;
  kiln_status status =
      kiln_bundle_load_memory(bytes.data(), bytes.size(), &kernel);
  if (status)
    CHECK(kernel == nullptr);
  if (kernelOut)
    kernelOut->reset(kernel);
  else
    kiln_kernel_destroy(kernel);
  return Status(status);
}

Status loadFile(const std::string &path, KernelPtr *kernelOut = nullptr) {
  kiln_kernel *kernel = nullptr;
  kiln_status status = kiln_bundle_load_file(path.c_str(), &kernel);
  if (status)
    CHECK(kernel == nullptr);
  if (kernelOut)
    kernelOut->reset(kernel);
  else
    kiln_kernel_destroy(kernel);
  return Status(status);
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

/// Replaces the first occurrence of `from` in the manifest of a fresh bundle.
Bytes bundleWithManifest(const std::string &manifest) {
  return makeBundle(manifest, testKernelCode());
}

std::string replaced(std::string text, const std::string &from,
                     const std::string &to) {
  size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

size_t codeOffsetOf(const Bytes &bundle) {
  return static_cast<size_t>(readU64(bundle, kCodeOffsetAt));
}

} // namespace

TEST_CASE("a valid bundle loads from a file and from memory", "[bundle]") {
  TempDir dir;
  std::string path = dir.path("vadd.kiln");
  writeFileBytes(path,
                 bundleFor("vadd", "launch num_warps 4\nlaunch stages 3\n"));

  KernelPtr kernel;
  Status status = loadFile(path, &kernel);
  REQUIRE(status.ok());
  CHECK(std::string(kiln_kernel_name(kernel.get())) == "vadd");
  CHECK(std::string(kiln_kernel_entry(kernel.get())) == "kiln_entry_vadd");
  CHECK(std::string(kiln_kernel_target(kernel.get())) == "x86-64");
  CHECK(std::string(kiln_kernel_compiler(kernel.get())) == "kiln-tests 0.1.0");
  CHECK(kiln_kernel_grid_rank(kernel.get()) == 1);
  CHECK(kiln_kernel_num_features(kernel.get()) == 0);
  CHECK(kiln_kernel_feature(kernel.get(), 0) == nullptr);

  REQUIRE(kiln_kernel_num_args(kernel.get()) == 4);
  kiln_arg_info info;
  REQUIRE(Status(kiln_kernel_arg_info(kernel.get(), 3, &info)).ok());
  CHECK(std::string(info.name) == "n");
  CHECK(info.kind == KILN_ARG_SCALAR);
  CHECK(info.dtype == KILN_DTYPE_I32);
  REQUIRE(Status(kiln_kernel_arg_info(kernel.get(), 0, &info)).ok());
  CHECK(info.kind == KILN_ARG_PTR);
  CHECK(info.dtype == KILN_DTYPE_F32);
  Status outOfRange(kiln_kernel_arg_info(kernel.get(), 4, &info));
  CHECK(outOfRange.code() == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(contains(outOfRange.message(), "out of range"));

  CHECK(kiln_kernel_num_launch_params(kernel.get()) == 2);
  CHECK(std::string(kiln_kernel_launch_param(kernel.get(), "num_warps")) ==
        "4");
  CHECK(std::string(kiln_kernel_launch_param_key(kernel.get(), 1)) == "stages");
  CHECK(kiln_kernel_launch_param(kernel.get(), "absent") == nullptr);
  CHECK(kiln_kernel_launch_param_key(kernel.get(), 2) == nullptr);

  KernelPtr fromMemory;
  REQUIRE(loadMemory(bundleFor("vadd"), &fromMemory).ok());
  CHECK(std::string(kiln_kernel_name(fromMemory.get())) == "vadd");
}

TEST_CASE("queries tolerate NULL", "[bundle]") {
  CHECK(std::string(kiln_kernel_name(nullptr)).empty());
  CHECK(kiln_kernel_num_args(nullptr) == 0);
  CHECK(kiln_kernel_launch_param(nullptr, "x") == nullptr);
  Status status(kiln_kernel_arg_info(nullptr, 0, nullptr));
  CHECK(status.code() == KILN_ERROR_INVALID_ARGUMENT);
  kiln_kernel_destroy(nullptr);

  kiln_kernel *kernel = nullptr;
  CHECK(Status(kiln_bundle_load_file(nullptr, &kernel)).code() ==
        KILN_ERROR_INVALID_ARGUMENT);
  CHECK(Status(kiln_bundle_load_file("x", nullptr)).code() ==
        KILN_ERROR_INVALID_ARGUMENT);
  CHECK(Status(kiln_bundle_load_memory(nullptr, 10, &kernel)).code() ==
        KILN_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("file errors are reported as IO errors", "[bundle]") {
  TempDir dir;
  Status missing = loadFile(dir.path("does-not-exist.kiln"));
  CHECK(missing.code() == KILN_ERROR_IO);
  CHECK(contains(missing.message(), "does-not-exist.kiln"));
  CHECK(contains(missing.message(), "No such file"));

  Status directory = loadFile(dir.path(""));
  CHECK(directory.code() == KILN_ERROR_IO);
  CHECK(contains(directory.message(), "directory"));
}

TEST_CASE("truncated bundles are refused", "[bundle]") {
  TempDir dir;
  Bytes bundle = bundleFor("vadd");
  for (size_t keep : {size_t(0), size_t(4), size_t(63), size_t(64), size_t(100),
                      bundle.size() / 2, bundle.size() - 1}) {
    CAPTURE(keep);
    Bytes truncated(bundle.begin(), bundle.begin() + keep);
    std::string path = dir.path("truncated.kiln");
    writeFileBytes(path, truncated);
    Status status = loadFile(path);
    CHECK(status.code() == KILN_ERROR_BAD_BUNDLE);
    if (keep >= 8)
      CHECK(contains(status.message(), "truncated"));
    CHECK(contains(status.message(), "truncated.kiln"));
  }

  Bytes longer = bundle;
  longer.push_back(0);
  Status trailing = loadMemory(longer);
  CHECK(trailing.code() == KILN_ERROR_BAD_BUNDLE);
  CHECK(contains(trailing.message(), "trailing"));
}

TEST_CASE("a flipped byte fails the checksum", "[bundle]") {
  Bytes bundle = bundleFor("vadd");
  for (size_t at : {size_t(kHeaderSize), size_t(kHeaderSize + 20),
                    codeOffsetOf(bundle) + 100, bundle.size() - 1}) {
    CAPTURE(at);
    Bytes corrupt = bundle;
    corrupt[at] ^= 0x10;
    Status status = loadMemory(corrupt);
    CHECK(status.code() == KILN_ERROR_CHECKSUM);
    CHECK(contains(status.message(), "checksum mismatch"));
  }
}

TEST_CASE("bad magic, version and header fields are refused", "[bundle]") {
  Bytes bundle = bundleFor("vadd");

  Bytes badMagic = bundle;
  badMagic[3] = 'X';
  Status magic = loadMemory(badMagic);
  CHECK(magic.code() == KILN_ERROR_BAD_BUNDLE);
  CHECK(contains(magic.message(), "magic"));

  Bytes version4 = bundle;
  writeU32(version4, kVersionAt, 4);
  Status version = loadMemory(version4);
  CHECK(version.code() == KILN_ERROR_BAD_BUNDLE);
  CHECK(contains(version.message(), "format version 4"));
  Bytes version0 = bundle;
  writeU32(version0, kVersionAt, 0);
  CHECK(loadMemory(version0).code() == KILN_ERROR_BAD_BUNDLE);
  // Versions 2 and 3 read like 1 for a kernel without scratch or tensor maps.
  for (uint32_t v : {2u, 3u}) {
    Bytes newer = bundle;
    writeU32(newer, kVersionAt, v);
    CHECK(loadMemory(newer).ok());
  }

  Bytes reserved = bundle;
  writeU32(reserved, kReservedAt, 7);
  CHECK(loadMemory(reserved).code() == KILN_ERROR_BAD_BUNDLE);

  // The header is not covered by the checksum; the pinned layout catches
  // edits to it.
  for (size_t field : {size_t(kManifestOffsetAt), size_t(kManifestSizeAt),
                       size_t(kCodeOffsetAt), size_t(kCodeSizeAt)}) {
    CAPTURE(field);
    for (int64_t delta : {-8, -1, 1, 8}) {
      Bytes edited = bundle;
      writeU64(edited, field, readU64(bundle, field) + uint64_t(delta));
      Status status = loadMemory(edited);
      INFO(status.message());
      CHECK(status.code() == KILN_ERROR_BAD_BUNDLE);
      // A manifest size still consistent with the layout moves bytes
      // between manifest and padding: caught as non-zero padding or as a
      // NUL in the manifest.
      CHECK((contains(status.message(), "bundle header") ||
             contains(status.message(), "padding byte") ||
             contains(status.message(), "control character 0x00")));
    }
    Bytes huge = bundle;
    writeU64(huge, field, ~uint64_t(0));
    CHECK(loadMemory(huge).code() == KILN_ERROR_BAD_BUNDLE);
  }
}

TEST_CASE("other targets are refused", "[bundle]") {
  for (const char *target : {"aarch64", "riscv64", "smx_80"}) {
    CAPTURE(target);
    Status status = loadMemory(
        bundleWithManifest(replaced(manifestFor("vadd"), "target x86-64",
                                    std::string("target ") + target)));
    CHECK(status.code() == KILN_ERROR_UNSUPPORTED_TARGET);
    CHECK(contains(status.message(), std::string("targets ") + target));
    CHECK(contains(status.message(), "supports x86-64 CPU kernels and "
                                     "NVIDIA GPU kernels"));
  }
  // A GPU target with CPU code is refused before the CUDA driver is looked
  // for (CudaTests.cpp covers GPU bundles).
  for (const char *target : {"sm_90a", "sm_80"}) {
    CAPTURE(target);
    Status status = loadMemory(
        bundleWithManifest(replaced(manifestFor("vadd"), "target x86-64",
                                    std::string("target ") + target)));
    CHECK(status.code() == KILN_ERROR_UNSUPPORTED_TARGET);
    CHECK(contains(status.message(), "GPU bundles carry 'ptx' or 'cubin'"));
  }
  Status kind = loadMemory(bundleWithManifest(
      replaced(manifestFor("vadd"), "code elf-shared-object", "code cubin")));
  CHECK(kind.code() == KILN_ERROR_UNSUPPORTED_TARGET);
  CHECK(contains(kind.message(), "'cubin'"));
}

TEST_CASE("required CPU features are checked", "[bundle][cpu]") {
  Status unknown = loadMemory(bundleWithManifest(replaced(
      manifestFor("vadd"), "features\n", "features sse4.2 avx10.9\n")));
  CHECK(unknown.code() == KILN_ERROR_MISSING_FEATURE);
  CHECK(contains(unknown.message(), "avx10.9"));
  CHECK_FALSE(contains(unknown.message(), "sse4.2 ("));

  if (kiln_cpu_has_feature("sse4.2")) {
    KernelPtr kernel;
    REQUIRE(
        loadMemory(bundleWithManifest(replaced(
                       manifestFor("vadd"), "features\n", "features sse4.2\n")),
                   &kernel)
            .ok());
    CHECK(std::string(kiln_kernel_feature(kernel.get(), 0)) == "sse4.2");

    ScopedEnv disable("KILN_CPU_DISABLE", "avx2,sse4.2");
    Status masked = loadMemory(bundleWithManifest(
        replaced(manifestFor("vadd"), "features\n", "features sse4.2\n")));
    CHECK(masked.code() == KILN_ERROR_MISSING_FEATURE);
    CHECK(contains(masked.message(), "sse4.2 (disabled by KILN_CPU_DISABLE)"));
  }

  if (kiln_cpu_has_feature("amx-tile") && kiln_cpu_has_feature("amx-bf16")) {
    // Obtains the AMX permission from the OS; must succeed on Linux >= 5.16.
    KernelPtr kernel;
    Status amx = loadMemory(
        bundleWithManifest(replaced(manifestFor("vadd"), "features\n",
                                    "features amx-tile amx-bf16\n")),
        &kernel);
    CHECK(amx.ok());
    INFO(amx.message());
  }
}

TEST_CASE("malformed manifests are refused with the offending line",
          "[bundle][manifest]") {
  std::string good = manifestFor("vadd");
  struct Case {
    std::string manifest;
    std::string expected;
  };
  std::vector<Case> cases = {
      {replaced(good, "kiln-bundle 1", "kiln-bundle 2"),
       "unsupported manifest version"},
      {"name vadd\n" + good, "first line must be 'kiln-bundle 1'"},
      {replaced(good, "name vadd\n", ""), "required key 'name'"},
      {replaced(good, "entry kiln_entry_vadd\n", ""), "required key 'entry'"},
      {replaced(good, "target x86-64\n", ""), "required key 'target'"},
      {replaced(good, "code elf-shared-object\n", ""), "required key 'code'"},
      {good + "name again\n", "duplicate key 'name'"},
      {replaced(good, "arg n scalar i32", "arg n scalar f8"),
       "unknown dtype 'f8'"},
      {replaced(good, "arg n scalar i32", "arg n value i32"),
       "argument kind must be 'ptr' or 'scalar'"},
      {replaced(good, "arg n scalar i32", "arg x scalar i32"),
       "duplicate argument 'x'"},
      {replaced(good, "arg n scalar i32", "arg n scalar"),
       "'arg' takes 3 value(s), got 2"},
      {replaced(good, "arg n scalar i32", "arg 9n scalar i32"),
       "not an identifier"},
      {replaced(good, "grid-rank 1", "grid-rank 4"), "grid-rank must be 1"},
      {replaced(good, "arg n scalar i32", "arg n  scalar i32"), "empty field"},
      {replaced(good, "arg n scalar i32", "arg n scalar i32\r"),
       "control character 0x0d"},
      {replaced(good, "entry kiln_entry_vadd", "entry kiln-entry"),
       "not a C identifier"},
      {good + "launch a 1\nlaunch a 2\n", "duplicate launch parameter 'a'"},
      // Messages quote manifest text, and their readers expect UTF-8.
      {replaced(good, "name vadd", "name vadd\xff"), "not UTF-8"},
      {replaced(good, "name vadd", "name vadd\xc0\x80"), "not UTF-8"},
      {replaced(good, "name vadd", "name vadd\xed\xa0\x80"), "not UTF-8"},
      {replaced(good, "name vadd", "name vadd\xe2\x82"), "not UTF-8"},
      {good + "writes out\nwrites out\n", "duplicate key 'writes'"},
  };
  for (const Case &test : cases) {
    CAPTURE(test.manifest);
    Status status = loadMemory(bundleWithManifest(test.manifest));
    CHECK(status.code() == KILN_ERROR_BAD_BUNDLE);
    CHECK(contains(status.message(), test.expected));
    if (test.expected.find("required") == std::string::npos)
      CHECK(contains(status.message(), "manifest line "));
  }
}

TEST_CASE("manifests of many arguments are checked by name, not by scans",
          "[bundle][manifest]") {
  // 50,000 pointer arguments, each named in 'writes', then one duplicate:
  // refused at its line (the name checks were quadratic: seconds for this).
  std::string many;
  for (int i = 0; i < 50000; ++i)
    many += "arg p" + std::to_string(i) + " ptr f32\n";
  std::string writes = "writes";
  for (int i = 0; i < 50000; ++i)
    writes += " p" + std::to_string(i);
  std::string good = manifestFor("vadd");
  Status status = loadMemory(bundleWithManifest(
      good + many + writes + "\narg p123 ptr f32\n"));
  CHECK(status.code() == KILN_ERROR_BAD_BUNDLE);
  CHECK(contains(status.message(), "duplicate argument 'p123'"));
  size_t lines = std::count(good.begin(), good.end(), '\n') + 50000 + 2;
  CHECK(contains(status.message(), "manifest line " + std::to_string(lines)));
  Status twice = loadMemory(bundleWithManifest(good + many + writes + " p7\n"));
  CHECK(twice.code() == KILN_ERROR_BAD_BUNDLE);
  CHECK(contains(twice.message(), "'p7', which is named twice"));
}

TEST_CASE("'writes' says which pointers a kernel writes through",
          "[bundle][manifest]") {
  KernelPtr kernel;
  REQUIRE(loadMemory(bundleFor("vadd", "writes out\n"), &kernel).ok());
  CHECK(kiln_kernel_arg_written(kernel.get(), 0) == 0);
  CHECK(kiln_kernel_arg_written(kernel.get(), 1) == 0);
  CHECK(kiln_kernel_arg_written(kernel.get(), 2) == 1);
  CHECK(kiln_kernel_arg_written(kernel.get(), 3) == 0); // the scalar n
  CHECK(kiln_kernel_arg_written(kernel.get(), 4) == -1);
  CHECK(kiln_kernel_arg_written(nullptr, 0) == -1);

  // An empty line: nothing is written. No line: the bundle does not say.
  KernelPtr none, unknown;
  REQUIRE(loadMemory(bundleFor("vadd", "writes\n"), &none).ok());
  CHECK(kiln_kernel_arg_written(none.get(), 2) == 0);
  REQUIRE(loadMemory(bundleFor("vadd"), &unknown).ok());
  CHECK(kiln_kernel_arg_written(unknown.get(), 2) == -1);
  CHECK(kiln_kernel_arg_written(unknown.get(), 3) == -1);

  // Names it cannot mean are refused.
  for (auto [line, expected] :
       {std::pair<const char *, const char *>{"writes z\n", "'z', which is not an argument"},
        {"writes n\n", "'n', which is not a pointer"},
        {"writes out out\n", "'out', which is named twice"}}) {
    CAPTURE(line);
    Status status = loadMemory(bundleFor("vadd", line));
    CHECK(status.code() == KILN_ERROR_BAD_BUNDLE);
    CHECK(contains(status.message(), expected));
    CHECK(contains(status.message(), "bundle 'vadd'"));
  }
}

TEST_CASE("unknown manifest keys and blank lines are accepted",
          "[bundle][manifest]") {
  KernelPtr kernel;
  std::string manifest = replaced(manifestFor("vadd"), "name vadd\n",
                                  "name vadd\n\nfuture-key a b c\n");
  REQUIRE(loadMemory(bundleWithManifest(manifest), &kernel).ok());
  CHECK(kiln_kernel_num_args(kernel.get()) == 4);

  // Without a trailing newline, and without the optional keys.
  KernelPtr minimal;
  REQUIRE(loadMemory(bundleWithManifest("kiln-bundle 1\nname nop\n"
                                        "entry kiln_entry_nop\n"
                                        "target x86-64\n"
                                        "code elf-shared-object"),
                     &minimal)
              .ok());
  CHECK(kiln_kernel_grid_rank(minimal.get()) == 3);
  CHECK(std::string(kiln_kernel_compiler(minimal.get())).empty());
}

TEST_CASE("bad code sections are refused before dlopen", "[bundle][loader]") {
  std::string manifest = manifestFor("vadd");

  Status notElf = loadMemory(makeBundle(manifest, Bytes(4096, uint8_t(0x90))));
  CHECK(notElf.code() == KILN_ERROR_LOAD);
  CHECK(contains(notElf.message(), "not an ELF file"));

  Status tiny = loadMemory(makeBundle(manifest, Bytes{0x7f, 'E', 'L', 'F'}));
  CHECK(tiny.code() == KILN_ERROR_LOAD);
  CHECK(contains(tiny.message(), "too small"));

  Bytes aarch64 = testKernelCode();
  uint16_t machine = EM_AARCH64;
  std::memcpy(aarch64.data() + offsetof(Elf64_Ehdr, e_machine), &machine, 2);
  Status wrongMachine = loadMemory(makeBundle(manifest, aarch64));
  CHECK(wrongMachine.code() == KILN_ERROR_LOAD);
  CHECK(contains(wrongMachine.message(), "not x86-64"));

  // A segment running past the end would be mapped and fault when touched.
  Bytes cut = testKernelCode();
  cut.resize(cut.size() / 4);
  Status shortSegment = loadMemory(makeBundle(manifest, cut));
  CHECK(shortSegment.code() == KILN_ERROR_LOAD);
  CHECK(contains(shortSegment.message(), "outside"));

  Status noSymbol = loadMemory(makeBundle(
      replaced(manifest, "entry kiln_entry_vadd", "entry kiln_entry_absent"),
      testKernelCode()));
  CHECK(noSymbol.code() == KILN_ERROR_LOAD);
  CHECK(contains(noSymbol.message(), "'kiln_entry_absent'"));
}

TEST_CASE("the temporary-file loader works without memfd", "[bundle][loader]") {
  ScopedEnv noMemfd("KILN_LOADER_NO_MEMFD", "1");
  KernelPtr kernel;
  REQUIRE(loadMemory(bundleFor("vadd"), &kernel).ok());
  CHECK(std::string(kiln_kernel_name(kernel.get())) == "vadd");
}

TEST_CASE("the same code can be loaded many times", "[bundle][loader]") {
  // Each load is a distinct library, even when memfd numbers are reused.
  std::vector<KernelPtr> kernels;
  for (int i = 0; i < 4; ++i) {
    kernels.emplace_back();
    REQUIRE(loadMemory(bundleFor("vadd"), &kernels.back()).ok());
  }
  kernels.erase(kernels.begin() + 1);
  for (int i = 0; i < 20; ++i) {
    KernelPtr kernel;
    REQUIRE(loadMemory(bundleFor("record"), &kernel).ok());
    CHECK(std::string(kiln_kernel_name(kernel.get())) == "record");
  }
}

TEST_CASE("random corruption never crashes the loader", "[bundle][fuzz]") {
  Bytes bundle = bundleFor("vadd", "launch num_warps 4\n");
  std::mt19937 random(1234);

  // Every header byte flipped, checksum left alone.
  for (size_t at = 0; at < kHeaderSize; ++at) {
    Bytes corrupt = bundle;
    corrupt[at] ^= uint8_t(1 + random() % 255);
    if (at >= kChecksumAt && at < kChecksumAt + 8) {
      CHECK(loadMemory(corrupt).code() == KILN_ERROR_CHECKSUM);
      continue;
    }
    CHECK_FALSE(loadMemory(corrupt).ok());
  }

  // Manifest mutations with a recomputed checksum reach the parser.
  size_t manifestSize = static_cast<size_t>(readU64(bundle, kManifestSizeAt));
  for (int round = 0; round < 2000; ++round) {
    Bytes corrupt = bundle;
    int edits = 1 + random() % 3;
    for (int e = 0; e < edits; ++e) {
      size_t at = kHeaderSize + random() % manifestSize;
      corrupt[at] = uint8_t(random() % 4 == 0 ? random() % 256
                                              : " \nabcdix0123"[random() % 12]);
    }
    fixChecksum(corrupt);
    KernelPtr kernel;
    Status status = loadMemory(corrupt, &kernel);
    if (!status.ok())
      CHECK_FALSE(status.message().empty());
  }

  // Mutations of the ELF identification, type and machine, with a
  // recomputed checksum. (Code beyond that is trusted: a checksummed bundle
  // with garbage program headers is a compiler bug the loader cannot
  // always survive.)
  size_t codeAt = codeOffsetOf(bundle);
  for (int round = 0; round < 200; ++round) {
    Bytes corrupt = bundle;
    size_t at = codeAt + random() % 20;
    corrupt[at] = uint8_t(random());
    fixChecksum(corrupt);
    KernelPtr kernel;
    (void)loadMemory(corrupt, &kernel);
  }
}
