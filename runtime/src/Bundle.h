//===- Bundle.h - In-memory form of a parsed kiln bundle --------*- C++ -*-===//
//
// The bundle format is specified in docs/bundle-format.md. This header holds
// what the reader extracts from a bundle before any code is loaded: the parsed
// manifest and the location of the code section.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_SRC_BUNDLE_H
#define KILN_RUNTIME_SRC_BUNDLE_H

#include "TensorMaps.h"

#include "kiln/runtime.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::rt {

/// Fixed layout of the 64-byte bundle header (all fields little-endian).
namespace header {
inline constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'B', 'N', 'D', 'L'};
/// Versions read: 1, 2 (which may declare `launch scratch_bytes`: a
/// kernel taking a hidden scratch argument, which a version-1 runtime would
/// not pass; it refuses version 2 instead) and 3 (which may declare
/// `tensor_map`s: hidden tensor-map parameters).
inline constexpr uint32_t kMinFormatVersion = 1;
inline constexpr uint32_t kFormatVersion = 3;
static_assert(kFormatVersion == KILN_BUNDLE_FORMAT_VERSION,
              "the public header names the same version");
inline constexpr size_t kSize = 64;
inline constexpr size_t kMagicOffset = 0;
inline constexpr size_t kVersionOffset = 8;
inline constexpr size_t kReservedOffset = 12;
inline constexpr size_t kManifestOffsetOffset = 16;
inline constexpr size_t kManifestSizeOffset = 24;
inline constexpr size_t kCodeOffsetOffset = 32;
inline constexpr size_t kCodeSizeOffset = 40;
inline constexpr size_t kChecksumOffset = 48;
inline constexpr size_t kFileSizeOffset = 56;
inline constexpr uint64_t kCodeAlignment = 8;
} // namespace header

/// FNV-1a, 64-bit: the bundle checksum.
uint64_t fnv1a64(const uint8_t *data, size_t size);

struct ArgSpec {
  std::string name;
  kiln_arg_kind kind;
  kiln_dtype dtype;
  /// From the `writes` line: 1 if the kernel may write through this pointer,
  /// 0 if not (and for scalars), -1 when the manifest has no `writes` line.
  int written = -1;
};

struct Manifest {
  std::string name;
  std::string entry;
  std::string target;
  std::string codeKind;
  std::string compiler;
  int gridRank = 3;
  std::vector<std::string> features;
  std::vector<ArgSpec> args;
  /// The `writes` line's argument names (seenWrites: the line was present).
  bool seenWrites = false;
  std::vector<std::string> writes;
  std::vector<std::pair<std::string, std::string>> launchParams;
  /// `launch scratch_bytes`: global memory the runtime provides per program
  /// (0: none). Set by checkScratchBytes, not by parseManifest.
  uint32_t scratchBytes = 0;
  /// `tensor_map` lines (their values), and the maps checkTensorMaps parsed
  /// from them: hidden parameters after the scratch (TensorMaps.h).
  std::vector<std::string> tensorMapLines;
  std::vector<TensorMapSpec> tensorMaps;
};

/// Scratch memory per program (`launch scratch_bytes`): a multiple of
/// kScratchAlignment, at most kMaxScratchBytes.
inline constexpr uint32_t kScratchAlignment = 128;
inline constexpr uint32_t kMaxScratchBytes = 1u << 20;

/// A bundle whose header, checksum and manifest are valid. `code` points into
/// the buffer given to readBundle and is only valid as long as it is.
struct ParsedBundle {
  uint32_t formatVersion = 0;
  Manifest manifest;
  /// The manifest's text, pointing into the buffer like `code`.
  std::string_view manifestText;
  const uint8_t *code = nullptr;
  size_t codeSize = 0;
};

/// Validates the header and checksum of `data` and parses its manifest.
kiln_status readBundle(const uint8_t *data, size_t size, ParsedBundle &out);

/// Parses manifest text (see docs/bundle-format.md, "Manifest").
kiln_status parseManifest(std::string_view text, Manifest &out);

/// Validates `launch scratch_bytes` (any target) and stores it in
/// manifest.scratchBytes; KILN_ERROR_BAD_BUNDLE naming the bundle and the
/// value if it is not a decimal multiple of 128 in [0, 1 MiB].
kiln_status checkScratchBytes(Manifest &manifest);

/// Manifest spelling <-> enum. Return false for unknown spellings.
bool parseDType(std::string_view text, kiln_dtype &out);
bool parseArgKind(std::string_view text, kiln_arg_kind &out);
const char *argKindName(kiln_arg_kind kind);

} // namespace kiln::rt

#endif // KILN_RUNTIME_SRC_BUNDLE_H
