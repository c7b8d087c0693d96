//===- BundleReader.cpp - Validate kiln bundle headers
//---------------------===//
//
// The checksum covers only the bytes after the header, so the header is
// protected differently: v1 pins its layout completely (manifest right after
// the header, code at the next 8-byte boundary, running to the end of the
// file). Every header field is therefore either checked against the file or
// derivable from the others, and a corrupted header cannot point the loader
// at the wrong bytes.
//
//===----------------------------------------------------------------------===//

#include "Bundle.h"
#include "Status.h"

#include <cinttypes>
#include <cstring>

namespace kiln::rt {

uint64_t fnv1a64(const uint8_t *data, size_t size) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) {
    hash ^= data[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

namespace {

// Explicit little-endian decoding, independent of the host's byte order.
uint32_t readU32(const uint8_t *p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 |
         uint32_t(p[3]) << 24;
}

uint64_t readU64(const uint8_t *p) {
  return uint64_t(readU32(p)) | uint64_t(readU32(p + 4)) << 32;
}

uint64_t alignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

} // namespace

kiln_status readBundle(const uint8_t *data, size_t size, ParsedBundle &out) {
  using namespace header;
  if (!data && size != 0)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT, "bundle data is NULL");
  if (size < sizeof(kMagic) || std::memcmp(data, kMagic, sizeof(kMagic)) != 0)
    return makeStatus(KILN_ERROR_BAD_BUNDLE,
                      "not a kiln bundle (missing \"KILNBNDL\" magic)");
  if (size < kSize)
    return makeStatus(KILN_ERROR_BAD_BUNDLE,
                      "bundle truncated: %zu bytes, smaller than the %zu-byte "
                      "header",
                      size, kSize);

  uint32_t version = readU32(data + kVersionOffset);
  if (version < kMinFormatVersion || version > kFormatVersion)
    return makeStatus(KILN_ERROR_BAD_BUNDLE,
                      "unsupported bundle format version %" PRIu32
                      " (this runtime reads versions %" PRIu32 " to %" PRIu32
                      ")",
                      version, kMinFormatVersion, kFormatVersion);
  out.formatVersion = version;

  uint64_t fileSize = readU64(data + kFileSizeOffset);
  if (fileSize > size)
    return makeStatus(KILN_ERROR_BAD_BUNDLE,
                      "bundle truncated: header records %" PRIu64
                      " bytes, only %zu present",
                      fileSize, size);
  if (fileSize < size)
    return makeStatus(KILN_ERROR_BAD_BUNDLE,
                      "bundle has %zu bytes but its header records %" PRIu64
                      " (trailing data)",
                      size, fileSize);

  uint32_t reserved = readU32(data + kReservedOffset);
  if (reserved != 0)
    return makeStatus(KILN_ERROR_BAD_BUNDLE,
                      "bundle header: reserved field is %" PRIu32 ", must be 0",
                      reserved);

  // The checksum comes before the layout checks: if the body is corrupt,
  // "checksum mismatch" is the message that explains it.
  uint64_t expected = readU64(data + kChecksumOffset);
  uint64_t actual = fnv1a64(data + kSize, size - kSize);
  if (actual != expected)
    return makeStatus(KILN_ERROR_CHECKSUM,
                      "bundle checksum mismatch: header records 0x%016" PRIx64
                      ", contents hash to 0x%016" PRIx64
                      " (the file is corrupt)",
                      expected, actual);

  uint64_t manifestOffset = readU64(data + kManifestOffsetOffset);
  uint64_t manifestSize = readU64(data + kManifestSizeOffset);
  uint64_t codeOffset = readU64(data + kCodeOffsetOffset);
  uint64_t codeSize = readU64(data + kCodeSizeOffset);
  if (manifestOffset != kSize)
    return makeStatus(KILN_ERROR_BAD_BUNDLE,
                      "bundle header: manifest offset is %" PRIu64
                      ", must be %zu",
                      manifestOffset, kSize);
  // Compare against the remaining size first so the sums below cannot wrap.
  if (manifestSize == 0 || manifestSize > size - kSize)
    return makeStatus(KILN_ERROR_BAD_BUNDLE,
                      "bundle header: manifest size %" PRIu64
                      " does not fit in the file",
                      manifestSize);
  uint64_t expectedCodeOffset =
      alignUp(manifestOffset + manifestSize, kCodeAlignment);
  if (codeOffset != expectedCodeOffset)
    return makeStatus(KILN_ERROR_BAD_BUNDLE,
                      "bundle header: code offset is %" PRIu64
                      ", expected %" PRIu64 " (manifest end rounded up to 8)",
                      codeOffset, expectedCodeOffset);
  if (codeOffset >= size || codeSize != size - codeOffset)
    return makeStatus(KILN_ERROR_BAD_BUNDLE,
                      "bundle header: code section [%" PRIu64 ", +%" PRIu64
                      ") must be non-empty and end at the end of the file "
                      "(%zu bytes)",
                      codeOffset, codeSize, size);
  for (uint64_t i = manifestOffset + manifestSize; i < codeOffset; ++i)
    if (data[i] != 0)
      return makeStatus(
          KILN_ERROR_BAD_BUNDLE,
          "bundle: padding byte at offset %" PRIu64 " is not zero", i);

  std::string_view manifestText(
      reinterpret_cast<const char *>(data) + manifestOffset, manifestSize);
  if (kiln_status status = parseManifest(manifestText, out.manifest))
    return status;
  out.manifestText = manifestText;
  out.code = data + codeOffset;
  out.codeSize = codeSize;
  return nullptr;
}

} // namespace kiln::rt
