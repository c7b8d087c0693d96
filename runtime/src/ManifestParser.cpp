//===- ManifestParser.cpp - Parse the text manifest of a bundle
//------------===//
//
// The manifest is deliberately strict about what the runtime relies on (the
// signature, the entry symbol, the target) and lenient about the rest: keys
// it does not know are skipped, so a newer compiler can add information
// without breaking older runtimes.
//
//===----------------------------------------------------------------------===//

#include "Bundle.h"
#include "Status.h"

#include <cstdlib>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace kiln::rt {

namespace {

struct DTypeName {
  const char *name;
  kiln_dtype dtype;
};

constexpr DTypeName kDTypeNames[] = {
    {"f16", KILN_DTYPE_F16}, {"bf16", KILN_DTYPE_BF16}, {"f32", KILN_DTYPE_F32},
    {"f64", KILN_DTYPE_F64}, {"i1", KILN_DTYPE_I1},     {"i8", KILN_DTYPE_I8},
    {"i16", KILN_DTYPE_I16}, {"i32", KILN_DTYPE_I32},   {"i64", KILN_DTYPE_I64},
    {"u8", KILN_DTYPE_U8},
};

bool isIdentifier(std::string_view text) {
  if (text.empty())
    return false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0))
      return false;
  }
  return true;
}

/// Whether `text` is well-formed UTF-8 (no overlong forms, surrogates or
/// code points past U+10FFFF). Messages quote manifest text, and their
/// readers (Python among them) expect UTF-8.
bool isUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    size_t length = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3
                                 : (c >> 3) == 30 ? 4 : 0;
    if (length == 0 || i + length > text.size())
      return false;
    uint32_t code = length == 1 ? c : c & (0x7f >> length);
    for (size_t k = 1; k < length; ++k) {
      unsigned char next = static_cast<unsigned char>(text[i + k]);
      if ((next >> 6) != 2)
        return false;
      code = (code << 6) | (next & 0x3f);
    }
    static const uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < smallest[length] || code > 0x10ffff ||
        (code >= 0xd800 && code <= 0xdfff))
      return false;
    i += length;
  }
  return true;
}

/// Splits one line at single spaces. Returns false on an empty field (two
/// spaces in a row, or a leading/trailing space), which the format forbids.
bool splitFields(std::string_view line, std::vector<std::string_view> &fields) {
  fields.clear();
  size_t start = 0;
  while (true) {
    size_t space = line.find(' ', start);
    std::string_view field = line.substr(start, space - start);
    if (field.empty())
      return false;
    fields.push_back(field);
    if (space == std::string_view::npos)
      return true;
    start = space + 1;
  }
}

std::string joinFrom(const std::vector<std::string_view> &fields,
                     size_t first) {
  std::string result;
  for (size_t i = first; i < fields.size(); ++i) {
    if (i != first)
      result += ' ';
    result.append(fields[i]);
  }
  return result;
}

class Parser {
public:
  explicit Parser(Manifest &manifest) : manifest(manifest) {}

  kiln_status parse(std::string_view text);

private:
  kiln_status error(const char *format, const std::string &detail) {
    return makeStatus(KILN_ERROR_BAD_BUNDLE, "manifest line %zu: %s",
                      lineNumber, (std::string(format) + detail).c_str());
  }
  kiln_status parseLine(const std::vector<std::string_view> &fields);
  kiln_status setOnce(std::string &slot, bool &seen, std::string_view key,
                      std::string value);

  Manifest &manifest;
  // Names seen so far (a bundle may name tens of thousands of arguments: a
  // scan of the list per line took seconds for 50,000).
  std::unordered_set<std::string> argNames, launchNames;
  size_t lineNumber = 0;
  bool seenName = false, seenEntry = false, seenTarget = false,
       seenCode = false, seenCompiler = false, seenGridRank = false,
       seenFeatures = false;
};

kiln_status Parser::setOnce(std::string &slot, bool &seen, std::string_view key,
                            std::string value) {
  if (seen)
    return error("duplicate key ", "'" + std::string(key) + "'");
  seen = true;
  slot = std::move(value);
  return nullptr;
}

kiln_status Parser::parseLine(const std::vector<std::string_view> &fields) {
  std::string_view key = fields[0];
  size_t numValues = fields.size() - 1;
  auto expectValues = [&](size_t count) -> kiln_status {
    if (numValues == count)
      return nullptr;
    return error("", "'" + std::string(key) + "' takes " +
                         std::to_string(count) + " value(s), got " +
                         std::to_string(numValues));
  };

  if (key == "kiln-bundle")
    return error("", "'kiln-bundle' may only appear on the first line");

  if (key == "name" || key == "entry" || key == "target" || key == "code") {
    if (kiln_status status = expectValues(1))
      return status;
    std::string value(fields[1]);
    if (key == "name")
      return setOnce(manifest.name, seenName, key, std::move(value));
    if (key == "entry") {
      if (!isIdentifier(value))
        return error("entry symbol is not a C identifier: ", "'" + value + "'");
      return setOnce(manifest.entry, seenEntry, key, std::move(value));
    }
    if (key == "target")
      return setOnce(manifest.target, seenTarget, key, std::move(value));
    return setOnce(manifest.codeKind, seenCode, key, std::move(value));
  }

  if (key == "compiler") {
    if (numValues == 0)
      return error("", "'compiler' needs a value");
    return setOnce(manifest.compiler, seenCompiler, key, joinFrom(fields, 1));
  }

  if (key == "grid-rank") {
    if (kiln_status status = expectValues(1))
      return status;
    if (seenGridRank)
      return error("duplicate key ", "'grid-rank'");
    seenGridRank = true;
    if (fields[1] != "1" && fields[1] != "2" && fields[1] != "3")
      return error("grid-rank must be 1, 2 or 3, got ",
                   "'" + std::string(fields[1]) + "'");
    manifest.gridRank = fields[1][0] - '0';
    return nullptr;
  }

  if (key == "features") {
    if (seenFeatures)
      return error("duplicate key ", "'features'");
    seenFeatures = true;
    for (size_t i = 1; i < fields.size(); ++i)
      manifest.features.emplace_back(fields[i]);
    return nullptr;
  }

  if (key == "arg") {
    if (kiln_status status = expectValues(3))
      return status;
    ArgSpec arg;
    arg.name = std::string(fields[1]);
    if (!isIdentifier(arg.name))
      return error("argument name is not an identifier: ",
                   "'" + arg.name + "'");
    if (!argNames.insert(arg.name).second)
      return error("duplicate argument ", "'" + arg.name + "'");
    if (!parseArgKind(fields[2], arg.kind))
      return error("argument kind must be 'ptr' or 'scalar', got ",
                   "'" + std::string(fields[2]) + "'");
    if (!parseDType(fields[3], arg.dtype))
      return error("unknown dtype ", "'" + std::string(fields[3]) +
                                         "' (expected f16, bf16, f32, f64, "
                                         "i1, i8, i16, i32, i64 or u8)");
    manifest.args.push_back(std::move(arg));
    return nullptr;
  }

  if (key == "writes") {
    // Checked against the signature once every `arg` line is read.
    if (manifest.seenWrites)
      return error("duplicate key ", "'writes'");
    manifest.seenWrites = true;
    for (size_t i = 1; i < fields.size(); ++i)
      manifest.writes.emplace_back(fields[i]);
    return nullptr;
  }

  if (key == "tensor_map") {
    // Parsed and checked against the arguments by checkTensorMaps.
    if (numValues == 0)
      return error("", "'tensor_map' needs values");
    manifest.tensorMapLines.push_back(joinFrom(fields, 1));
    return nullptr;
  }

  if (key == "launch") {
    if (kiln_status status = expectValues(2))
      return status;
    if (!launchNames.insert(std::string(fields[1])).second)
      return error("duplicate launch parameter ",
                   "'" + std::string(fields[1]) + "'");
    manifest.launchParams.emplace_back(std::string(fields[1]),
                                       std::string(fields[2]));
    return nullptr;
  }

  // Unknown key: written by a newer compiler; ignored on purpose.
  return nullptr;
}

kiln_status Parser::parse(std::string_view text) {
  std::vector<std::string_view> fields;
  size_t position = 0;
  bool sawHeaderLine = false;
  while (position < text.size()) {
    ++lineNumber;
    size_t newline = text.find('\n', position);
    size_t end = newline == std::string_view::npos ? text.size() : newline;
    std::string_view line = text.substr(position, end - position);
    position = newline == std::string_view::npos ? text.size() : newline + 1;

    // Control characters (NUL, CR, tabs) have no meaning in the format; they
    // are most likely corruption or a writer bug, so refuse them loudly.
    for (char c : line)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
        return error("", "control character 0x" +
                             std::string(1, "0123456789abcdef"[(c >> 4) & 15]) +
                             std::string(1, "0123456789abcdef"[c & 15]) +
                             " in manifest");

    if (!isUtf8(line))
      return error("", "the manifest is not UTF-8 text");

    if (!sawHeaderLine) {
      if (line != "kiln-bundle 1") {
        if (line.rfind("kiln-bundle ", 0) == 0)
          return error("unsupported manifest version: ", std::string(line));
        return error("", "the first line must be 'kiln-bundle 1'");
      }
      sawHeaderLine = true;
      continue;
    }
    if (line.empty())
      continue;
    if (!splitFields(line, fields))
      return error("", "empty field (fields are separated by single spaces)");
    if (kiln_status status = parseLine(fields))
      return status;
  }

  if (!sawHeaderLine)
    return makeStatus(KILN_ERROR_BAD_BUNDLE, "manifest is empty");
  const char *missing = !seenName     ? "name"
                        : !seenEntry  ? "entry"
                        : !seenTarget ? "target"
                        : !seenCode   ? "code"
                                      : nullptr;
  if (missing)
    return makeStatus(KILN_ERROR_BAD_BUNDLE,
                      "manifest lacks the required key '%s'", missing);
  if (manifest.seenWrites) {
    std::unordered_map<std::string_view, ArgSpec *> byName;
    for (ArgSpec &arg : manifest.args) {
      arg.written = 0;
      byName.emplace(arg.name, &arg);
    }
    for (const std::string &name : manifest.writes) {
      auto it = byName.find(name);
      ArgSpec *found = it == byName.end() ? nullptr : it->second;
      const char *wrong = !found ? "is not an argument"
                          : found->kind != KILN_ARG_PTR ? "is not a pointer"
                          : found->written ? "is named twice"
                                           : nullptr;
      if (wrong)
        return makeStatus(KILN_ERROR_BAD_BUNDLE,
                          "bundle '%s': 'writes' names '%s', which %s",
                          manifest.name.c_str(), name.c_str(), wrong);
      found->written = 1;
    }
  }
  return nullptr;
}

} // namespace

bool parseDType(std::string_view text, kiln_dtype &out) {
  for (const DTypeName &entry : kDTypeNames) {
    if (text == entry.name) {
      out = entry.dtype;
      return true;
    }
  }
  return false;
}

bool parseArgKind(std::string_view text, kiln_arg_kind &out) {
  if (text == "ptr") {
    out = KILN_ARG_PTR;
    return true;
  }
  if (text == "scalar") {
    out = KILN_ARG_SCALAR;
    return true;
  }
  return false;
}

const char *argKindName(kiln_arg_kind kind) {
  switch (kind) {
  case KILN_ARG_PTR:
    return "ptr";
  case KILN_ARG_SCALAR:
    return "scalar";
  }
  return "?";
}

kiln_status parseManifest(std::string_view text, Manifest &out) {
  out = Manifest();
  return Parser(out).parse(text);
}

kiln_status checkScratchBytes(Manifest &manifest) {
  manifest.scratchBytes = 0;
  const std::string *value = nullptr;
  for (const auto &param : manifest.launchParams)
    if (param.first == "scratch_bytes")
      value = &param.second;
  if (!value)
    return nullptr;
  // Plain decimal digits only: no sign, no spaces, no hex, no leading
  // zeros; stop before the value could overflow.
  uint64_t bytes = 0;
  bool valid = !value->empty() && !(value->size() > 1 && (*value)[0] == '0');
  for (char c : *value) {
    if (c < '0' || c > '9' || bytes > kMaxScratchBytes) {
      valid = false;
      break;
    }
    bytes = bytes * 10 + static_cast<uint64_t>(c - '0');
  }
  if (!valid || bytes > kMaxScratchBytes || bytes % kScratchAlignment != 0)
    return makeStatus(KILN_ERROR_BAD_BUNDLE,
                      "bundle '%s': launch scratch_bytes is '%s', must be a "
                      "decimal multiple of %u in [0, %u] (no leading zeros)",
                      manifest.name.c_str(), value->c_str(), kScratchAlignment,
                      kMaxScratchBytes);
  manifest.scratchBytes = static_cast<uint32_t>(bytes);
  return nullptr;
}

} // namespace kiln::rt

extern "C" {

const char *kiln_dtype_name(kiln_dtype dtype) {
  for (const auto &entry : kiln::rt::kDTypeNames)
    if (entry.dtype == dtype)
      return entry.name;
  return "?";
}

size_t kiln_dtype_size(kiln_dtype dtype) {
  switch (dtype) {
  case KILN_DTYPE_I1:
  case KILN_DTYPE_I8:
  case KILN_DTYPE_U8:
    return 1;
  case KILN_DTYPE_F16:
  case KILN_DTYPE_BF16:
  case KILN_DTYPE_I16:
    return 2;
  case KILN_DTYPE_F32:
  case KILN_DTYPE_I32:
    return 4;
  case KILN_DTYPE_F64:
  case KILN_DTYPE_I64:
    return 8;
  }
  return 0;
}

} // extern "C"
