//===- BundleWriter.h - Test-side kiln bundle writer ------------*- C++ -*-===//
//
// An independent implementation of the writer side of docs/bundle-format.md,
// so the tests check the runtime against the document rather than against
// its own reader.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TEST_RUNTIME_BUNDLEWRITER_H
#define KILN_TEST_RUNTIME_BUNDLEWRITER_H

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::test {

using Bytes = std::vector<uint8_t>;

/// Header field offsets, as documented.
enum HeaderOffset : size_t {
  kMagicAt = 0,
  kVersionAt = 8,
  kReservedAt = 12,
  kManifestOffsetAt = 16,
  kManifestSizeAt = 24,
  kCodeOffsetAt = 32,
  kCodeSizeAt = 40,
  kChecksumAt = 48,
  kFileSizeAt = 56,
  kHeaderSize = 64,
};

/// Builds a bundle from manifest text and code bytes.
Bytes makeBundle(const std::string &manifest, const Bytes &code);

/// Recomputes the checksum after a test edited the body on purpose.
void fixChecksum(Bytes &bundle);

uint64_t readU64(const Bytes &bytes, size_t offset);
void writeU32(Bytes &bytes, size_t offset, uint32_t value);
void writeU64(Bytes &bytes, size_t offset, uint64_t value);

Bytes readFileBytes(const std::string &path);
void writeFileBytes(const std::string &path, const Bytes &bytes);

/// The test kernels shared object (TestKernels.c).
const Bytes &testKernelCode();

/// A manifest for one of the test kernels, with `extra` lines appended.
std::string manifestFor(const std::string &kernel,
                        const std::string &extra = "");

/// A bundle of one of the test kernels.
Bytes bundleFor(const std::string &kernel, const std::string &extra = "");

/// A fresh directory, removed with its files at destruction.
class TempDir {
public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  std::string path(const std::string &name) const { return dir + "/" + name; }

private:
  std::string dir;
};

} // namespace kiln::test

#endif // KILN_TEST_RUNTIME_BUNDLEWRITER_H
