//===- BundleWriter.cpp - Test-side kiln bundle writer
//---------------------===//

#include "BundleWriter.h"

#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <unistd.h>

namespace kiln::test {

namespace {

uint64_t fnv1a64(const uint8_t *data, size_t size) {
  uint64_t hash = 14695981039346656037ull;
  for (size_t i = 0; i < size; ++i)
    hash = (hash ^ data[i]) * 1099511628211ull;
  return hash;
}

} // namespace

uint64_t readU64(const Bytes &bytes, size_t offset) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i)
    value = value << 8 | bytes.at(offset + i);
  return value;
}

void writeU32(Bytes &bytes, size_t offset, uint32_t value) {
  for (int i = 0; i < 4; ++i)
    bytes.at(offset + i) = uint8_t(value >> (8 * i));
}

void writeU64(Bytes &bytes, size_t offset, uint64_t value) {
  for (int i = 0; i < 8; ++i)
    bytes.at(offset + i) = uint8_t(value >> (8 * i));
}

Bytes makeBundle(const std::string &manifest, const Bytes &code) {
  uint64_t manifestOffset = kHeaderSize;
  uint64_t codeOffset = (manifestOffset + manifest.size() + 7) / 8 * 8;
  uint64_t fileSize = codeOffset + code.size();
  Bytes bundle(fileSize, 0);
  const char magic[] = "KILNBNDL";
  std::copy(magic, magic + 8, bundle.begin());
  // Version 3 when the kernel takes tensor maps, 2 when it takes the hidden
  // scratch argument.
  writeU32(bundle, kVersionAt,
           manifest.find("\ntensor_map ") != std::string::npos            ? 3
           : manifest.find("\nlaunch scratch_bytes ") != std::string::npos ? 2
                                                                           : 1);
  writeU32(bundle, kReservedAt, 0);
  writeU64(bundle, kManifestOffsetAt, manifestOffset);
  writeU64(bundle, kManifestSizeAt, manifest.size());
  writeU64(bundle, kCodeOffsetAt, codeOffset);
  writeU64(bundle, kCodeSizeAt, code.size());
  writeU64(bundle, kFileSizeAt, fileSize);
  std::copy(manifest.begin(), manifest.end(), bundle.begin() + manifestOffset);
  std::copy(code.begin(), code.end(), bundle.begin() + codeOffset);
  fixChecksum(bundle);
  return bundle;
}

void fixChecksum(Bytes &bundle) {
  writeU64(bundle, kChecksumAt,
           fnv1a64(bundle.data() + kHeaderSize, bundle.size() - kHeaderSize));
}

Bytes readFileBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error("cannot open " + path);
  return Bytes(std::istreambuf_iterator<char>(in),
               std::istreambuf_iterator<char>());
}

void writeFileBytes(const std::string &path, const Bytes &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char *>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out)
    throw std::runtime_error("cannot write " + path);
}

const Bytes &testKernelCode() {
  static const Bytes code = readFileBytes(KILN_TEST_KERNELS_SO);
  return code;
}

std::string manifestFor(const std::string &kernel, const std::string &extra) {
  static const std::map<std::string, std::string> signatures = {
      {"vadd", "grid-rank 1\n"
               "arg x ptr f32\narg y ptr f32\narg out ptr f32\n"
               "arg n scalar i32\n"},
      {"record", "grid-rank 3\narg out ptr i32\narg dims ptr i32\n"},
      {"thread_ids", "grid-rank 1\narg tids ptr i64\n"
                     "arg delay_us scalar i32\n"},
      {"scalars", "grid-rank 1\narg out ptr f64\narg a scalar i8\n"
                  "arg b scalar i16\narg c scalar i32\narg d scalar i64\n"
                  "arg e scalar f32\narg f scalar f64\narg g scalar u8\n"
                  "arg h scalar i1\narg k scalar bf16\narg l scalar f16\n"},
      {"scratch", "grid-rank 3\narg out ptr i64\narg slot_bytes scalar i32\n"},
      {"nop", "grid-rank 3\n"},
      {"maps", "grid-rank 1\narg out ptr i64\narg base ptr f32\n"
               "arg rows scalar i64\narg cols scalar i32\n"},
  };
  return "kiln-bundle 1\n"
         "name " +
         kernel +
         "\n"
         "entry kiln_entry_" +
         kernel +
         "\n"
         "target x86-64\n"
         "features\n"
         "code elf-shared-object\n"
         "compiler kiln-tests 0.1.0\n" +
         signatures.at(kernel) + extra;
}

Bytes bundleFor(const std::string &kernel, const std::string &extra) {
  return makeBundle(manifestFor(kernel, extra), testKernelCode());
}

TempDir::TempDir() {
  const char *base = std::getenv("TMPDIR");
  std::string pattern =
      std::string(base && *base ? base : "/tmp") + "/kiln-rt-test-XXXXXX";
  if (!mkdtemp(pattern.data()))
    throw std::runtime_error("mkdtemp failed");
  dir = pattern;
}

TempDir::~TempDir() {
  if (DIR *handle = opendir(dir.c_str())) {
    while (dirent *entry = readdir(handle)) {
      std::string name = entry->d_name;
      if (name != "." && name != "..")
        std::remove(path(name).c_str());
    }
    closedir(handle);
  }
  rmdir(dir.c_str());
}

} // namespace kiln::test
