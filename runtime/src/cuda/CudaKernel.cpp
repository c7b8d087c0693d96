//===- CudaKernel.cpp - Load and launch GPU bundles -----------------------===//
//
// Loading checks the manifest first (no driver needed), then the device (is
// there one, is it the right architecture, has it enough shared memory), and
// only then hands the code to the driver, so that the common refusals come
// with a message in kiln's terms rather than a bare CUDA error. Whatever the
// driver still refuses comes back as "<call> failed: CUDA_ERROR_... (...)",
// with the JIT's error log for PTX.
//
//===----------------------------------------------------------------------===//

#include "cuda/CudaKernel.h"
#include "Status.h"

#include <cinttypes>
#include <climits>
#include <cstdint>
#include <cstring>
#include <elf.h>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::rt::cuda {

namespace {

// The C API passes device pointers as void*; the kernel ABI passes them to
// cuLaunchKernel as 64-bit CUdeviceptr values through the same packing.
static_assert(sizeof(void *) == sizeof(CUdeviceptr),
              "device pointers are passed as void*");

/// e_machine of a cubin (EM_CUDA; not in every elf.h).
constexpr uint16_t kElfMachineCuda = 190;

/// Size of the buffer the PTX JIT writes its error log to.
constexpr size_t kJitLogSize = 8192;

/// Default `launch num_warps` (Triton's default too).
constexpr int kDefaultNumWarps = 4;
/// blockDim.x may not exceed 1024 on any NVIDIA GPU.
constexpr int kMaxNumWarps = 32;

std::string archName(int major, int minor, bool archSpecific = false) {
  return "sm_" + std::to_string(major) + std::to_string(minor) +
         (archSpecific ? "a" : "");
}

/// Parses a non-negative decimal integer as kilnc writes it: digits only,
/// no sign, spaces or leading zeros (so that 12 digits, the most it reads
/// before an overflow could happen, are more than any value in range has).
bool parseCount(const std::string &text, int64_t max, int64_t &out) {
  if (text.empty() || text.size() > 12 || (text.size() > 1 && text[0] == '0'))
    return false;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9')
      return false;
    value = value * 10 + (c - '0');
  }
  if (value > max)
    return false;
  out = value;
  return true;
}

const std::string *findLaunchParam(const Manifest &manifest, const char *key) {
  for (const auto &param : manifest.launchParams)
    if (param.first == key)
      return &param.second;
  return nullptr;
}

/// The `launch` keys the GPU runtime interprets.
kiln_status parseLaunchParams(const Manifest &manifest, GpuCode &out) {
  int64_t numWarps = kDefaultNumWarps;
  if (const std::string *value = findLaunchParam(manifest, "num_warps"))
    if (!parseCount(*value, kMaxNumWarps, numWarps) || numWarps < 1)
      return makeStatus(KILN_ERROR_BAD_BUNDLE,
                        "bundle '%s': launch num_warps is '%s', must be a "
                        "decimal integer in [1, %d] (no leading zeros)",
                        manifest.name.c_str(), value->c_str(), kMaxNumWarps);
  int64_t sharedBytes = 0;
  if (const std::string *value = findLaunchParam(manifest, "shared_bytes"))
    if (!parseCount(*value, INT_MAX, sharedBytes))
      return makeStatus(KILN_ERROR_BAD_BUNDLE,
                        "bundle '%s': launch shared_bytes is '%s', must be a "
                        "decimal integer in [0, %d] (no leading zeros)",
                        manifest.name.c_str(), value->c_str(), INT_MAX);
  out.blockX = static_cast<unsigned>(32 * numWarps);
  out.sharedBytes = static_cast<unsigned>(sharedBytes);
  return nullptr;
}

/// Checks the code section's format and returns the image the driver gets:
/// PTX must be NUL-terminated text, a cubin is copied to aligned memory.
/// A kernel parameter: its bytes, and whether it is a pointer (PTX `.ptr`).
struct ParamShape {
  uint64_t bytes = 0;
  bool pointer = false;
};

/// The parameters the runtime passes a launch of `manifest`'s kernel
/// (Launch.cpp, PackedArgs): the arguments (a device pointer is 8 bytes),
/// the scratch pointer, then the tensor maps' flags and the maps.
std::vector<ParamShape> expectedParams(const Manifest &manifest) {
  std::vector<ParamShape> params;
  for (const ArgSpec &arg : manifest.args)
    params.push_back(arg.kind == KILN_ARG_PTR ? ParamShape{8, true}
                                              : ParamShape{kiln_dtype_size(arg.dtype), false});
  if (manifest.scratchBytes > 0)
    params.push_back({8, true});
  if (!manifest.tensorMaps.empty()) {
    params.push_back({4, false});
    params.insert(params.end(), manifest.tensorMaps.size(), ParamShape{128, false});
  }
  return params;
}

/// `ptx` with its comments (`// ...`, `/* ... */`) and string literals
/// blanked out, line breaks kept: what the assembler reads as code. (An
/// `.entry` written in a comment passed for the entry's declaration.)
std::string ptxWithoutComments(std::string_view ptx) {
  std::string code(ptx);
  for (size_t i = 0; i < code.size(); ++i) {
    size_t end = i;
    if (code.compare(i, 2, "//") == 0) {
      end = code.find('\n', i);
      if (end == std::string::npos)
        end = code.size();
    } else if (code.compare(i, 2, "/*") == 0) {
      end = code.find("*/", i + 2);
      end = end == std::string::npos ? code.size() : end + 2;
    } else if (code[i] == '"') {
      end = i + 1;
      while (end < code.size() && code[end] != '"' && code[end] != '\n')
        end += code[end] == '\\' ? 2 : 1;
      end = std::min(end + 1, code.size());
    } else {
      continue;
    }
    for (size_t j = i; j < end; ++j)
      if (code[j] != '\n')
        code[j] = ' ';
    i = end - 1;
  }
  return code;
}

/// The parameters PTX entry `entry` declares (`.param [.align N] .TYPE
/// [.ptr ...] NAME[[COUNT]]`, comma-separated), or a reason it has none
/// readable.
const char *ptxEntryParams(std::string_view ptx, const std::string &entry,
                           std::vector<ParamShape> &out) {
  size_t at = 0;
  for (;;) {
    at = ptx.find(".entry", at);
    if (at == std::string_view::npos)
      return "it declares no .entry of the manifest's name";
    size_t name = ptx.find_first_not_of(" \t\r\n", at + 6);
    at += 6;
    if (name == std::string_view::npos)
      return "it ends inside an .entry";
    if (ptx.compare(name, entry.size(), entry) != 0)
      continue;
    size_t open = ptx.find_first_not_of(" \t\r\n", name + entry.size());
    if (open == std::string_view::npos || ptx[open] != '(')
      continue; // a longer name that starts with the entry's
    size_t close = ptx.find(')', open);
    if (close == std::string_view::npos)
      return "its .entry's parameter list is not closed";
    std::string_view list = ptx.substr(open + 1, close - open - 1);
    out.clear();
    while (!list.empty()) {
      size_t comma = list.find(',');
      std::string_view param = list.substr(0, comma);
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
      if (param.find_first_not_of(" \t\r\n") == std::string_view::npos) {
        if (out.empty() && list.empty())
          break; // ()
        return "its .entry has an empty parameter";
      }
      uint64_t width = 0, count = 1;
      bool pointer = false;
      size_t pos = 0;
      while (pos < param.size()) {
        size_t start = param.find_first_not_of(" \t\r\n", pos);
        if (start == std::string_view::npos)
          break;
        size_t end = param.find_first_of(" \t\r\n", start);
        std::string_view token = param.substr(start, end == std::string_view::npos
                                                         ? std::string_view::npos
                                                         : end - start);
        pos = end == std::string_view::npos ? param.size() : end;
        if (token == ".ptr")
          pointer = true;
        if (token.size() >= 3 && token[0] == '.' &&
            (token[1] == 'u' || token[1] == 's' || token[1] == 'b' ||
             token[1] == 'f')) {
          std::string_view bits = token.substr(2);
          if (bits == "8" || bits == "16" || bits == "32" || bits == "64")
            width = std::stoull(std::string(bits)) / 8;
        }
        size_t bracket = token.find('[');
        if (bracket != std::string_view::npos && token[0] != '.') {
          size_t last = token.find(']', bracket);
          std::string_view digits = token.substr(bracket + 1, last == std::string_view::npos
                                                                  ? std::string_view::npos
                                                                  : last - bracket - 1);
          if (last == std::string_view::npos || digits.empty() || digits.size() > 9 ||
              digits.find_first_not_of("0123456789") != std::string_view::npos)
            return "its .entry has a parameter of an unreadable element count";
          count = std::stoull(std::string(digits));
        }
      }
      if (width == 0)
        return "its .entry has a parameter of an unknown type";
      out.push_back({width * count, pointer});
    }
    return nullptr;
  }
}

/// Refuses PTX whose entry does not take the parameters the runtime passes:
/// the driver reads as many parameters, of the sizes, that the entry
/// declares, from the runtime's packed array (a bundle whose manifest and
/// code disagree would read past it). A `.ptr` parameter (LLVM marks every
/// pointer so) must be a pointer argument: a manifest that lists the
/// arguments in another order is refused too.
kiln_status checkPtxParams(const Manifest &manifest, std::string_view ptx) {
  std::vector<ParamShape> declared;
  if (const char *why = ptxEntryParams(ptxWithoutComments(ptx), manifest.entry, declared))
    return makeStatus(KILN_ERROR_BAD_BUNDLE, "bundle '%s': PTX code for entry '%s': %s",
                      manifest.name.c_str(), manifest.entry.c_str(), why);
  std::vector<ParamShape> expected = expectedParams(manifest);
  auto list = [](const std::vector<ParamShape> &v) {
    std::string text;
    for (const ParamShape &p : v)
      text += (text.empty() ? "" : ", ") + (p.pointer ? std::string("ptr") : std::to_string(p.bytes));
    return text;
  };
  bool match = declared.size() == expected.size();
  for (size_t i = 0; match && i < declared.size(); ++i)
    match = declared[i].bytes == expected[i].bytes &&
            (!declared[i].pointer || expected[i].pointer);
  if (!match)
    return makeStatus(KILN_ERROR_BAD_BUNDLE,
                      "bundle '%s': the manifest's arguments do not match the PTX "
                      "entry '%s': the runtime passes %zu parameters [%s] (bytes, or "
                      "ptr for a device pointer), the entry declares %zu [%s]",
                      manifest.name.c_str(), manifest.entry.c_str(), expected.size(),
                      list(expected).c_str(), declared.size(), list(declared).c_str());
  return nullptr;
}

/// True if [offset, offset + count * entry) lies inside `size` bytes.
bool fits(uint64_t offset, uint64_t count, uint64_t entry, uint64_t size) {
  uint64_t bytes = 0, end = 0;
  return !__builtin_mul_overflow(count, entry, &bytes) &&
         !__builtin_add_overflow(offset, bytes, &end) && end <= size;
}

/// Why the ELF file's program and section header tables, or the bytes of a
/// segment or section, reach past `size`; nullptr if they all fit.
const char *checkElfExtents(const uint8_t *code, size_t size,
                            const Elf64_Ehdr &ehdr) {
  if (ehdr.e_phnum) {
    if (ehdr.e_phentsize != sizeof(Elf64_Phdr))
      return "program header entries are not Elf64_Phdr-sized";
    if (!fits(ehdr.e_phoff, ehdr.e_phnum, sizeof(Elf64_Phdr), size))
      return "the program header table reaches past the end of the code";
    for (unsigned i = 0; i < ehdr.e_phnum; ++i) {
      Elf64_Phdr ph;
      std::memcpy(&ph, code + ehdr.e_phoff + i * sizeof(ph), sizeof(ph));
      if (!fits(ph.p_offset, 1, ph.p_filesz, size))
        return "a segment reaches past the end of the code";
    }
  }
  if (ehdr.e_shnum) {
    if (ehdr.e_shentsize != sizeof(Elf64_Shdr))
      return "section header entries are not Elf64_Shdr-sized";
    if (!fits(ehdr.e_shoff, ehdr.e_shnum, sizeof(Elf64_Shdr), size))
      return "the section header table reaches past the end of the code";
    if (ehdr.e_shstrndx != SHN_UNDEF && ehdr.e_shstrndx >= ehdr.e_shnum)
      return "the section name table's index is out of range";
    for (unsigned i = 0; i < ehdr.e_shnum; ++i) {
      Elf64_Shdr sh;
      std::memcpy(&sh, code + ehdr.e_shoff + i * sizeof(sh), sizeof(sh));
      if (sh.sh_type != SHT_NOBITS && sh.sh_type != SHT_NULL &&
          !fits(sh.sh_offset, 1, sh.sh_size, size))
        return "a section reaches past the end of the code";
    }
  }
  return nullptr;
}

kiln_status prepareImage(const Manifest &manifest, const uint8_t *code,
                         size_t size, std::vector<uint8_t> &image) {
  if (manifest.codeKind == "ptx") {
    // Writers may NUL-terminate the text; other NULs would cut it short.
    size_t length = size;
    while (length > 0 && code[length - 1] == 0)
      --length;
    if (const void *nul = std::memchr(code, 0, length))
      return makeStatus(KILN_ERROR_LOAD,
                        "bundle '%s': PTX code contains a NUL byte at offset "
                        "%zu",
                        manifest.name.c_str(),
                        static_cast<size_t>(static_cast<const uint8_t *>(nul) -
                                            code));
    if (length == 0)
      return makeStatus(KILN_ERROR_LOAD, "bundle '%s': PTX code is empty",
                        manifest.name.c_str());
    if (kiln_status status = checkPtxParams(
            manifest, std::string_view(reinterpret_cast<const char *>(code), length)))
      return status;
    image.assign(code, code + length);
    image.push_back(0);
    return nullptr;
  }
  // cubin: an ELF64 file for EM_CUDA.
  Elf64_Ehdr ehdr;
  if (size < sizeof(ehdr))
    return makeStatus(KILN_ERROR_LOAD,
                      "bundle '%s': cubin code is %zu bytes, too small for an "
                      "ELF header",
                      manifest.name.c_str(), size);
  std::memcpy(&ehdr, code, sizeof(ehdr));
  if (std::memcmp(ehdr.e_ident, ELFMAG, SELFMAG) != 0 ||
      ehdr.e_ident[EI_CLASS] != ELFCLASS64)
    return makeStatus(KILN_ERROR_LOAD,
                      "bundle '%s': cubin code is not a 64-bit ELF file",
                      manifest.name.c_str());
  if (ehdr.e_machine != kElfMachineCuda)
    return makeStatus(KILN_ERROR_LOAD,
                      "bundle '%s': cubin code is ELF for machine %u, not "
                      "CUDA (%u)",
                      manifest.name.c_str(), unsigned(ehdr.e_machine),
                      unsigned(kElfMachineCuda));
  // cuModuleLoadDataEx takes no size: the driver reads as far as the ELF
  // headers say, so every table and section they name must lie inside the
  // code (a truncated cubin, or one whose offsets were corrupted, would
  // otherwise be read past its end).
  if (const char *why = checkElfExtents(code, size, ehdr))
    return makeStatus(KILN_ERROR_LOAD, "bundle '%s': cubin code is corrupt: %s",
                      manifest.name.c_str(), why);
  image.assign(code, code + size);
  return nullptr;
}

/// The architecture rule (docs/bundle-format.md, "GPU targets").
kiln_status checkArchitecture(const Driver &driver, const Manifest &manifest,
                              const GpuArch &arch) {
  int major = 0, minor = 0;
  if (kiln_status status = getDeviceAttribute(
          driver, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
          "compute capability major", major))
    return status;
  if (kiln_status status = getDeviceAttribute(
          driver, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
          "compute capability minor", minor))
    return status;
  bool exact = major == arch.major && minor == arch.minor;
  bool newer = major * 10 + minor >= arch.major * 10 + arch.minor;
  const char *rule = nullptr;
  if (manifest.codeKind == "cubin" && !exact)
    rule = "a cubin runs only on exactly the architecture it was compiled for";
  else if (arch.archSpecific && !exact)
    rule = "code for an sm_XYa architecture runs only on exactly that "
           "architecture";
  else if (!newer)
    rule = "PTX runs on its architecture and newer ones";
  if (!rule)
    return nullptr;
  return makeStatus(KILN_ERROR_UNSUPPORTED_TARGET,
                    "bundle '%s' was compiled for %s, the device is %s (%s)",
                    manifest.name.c_str(), manifest.target.c_str(),
                    archName(major, minor).c_str(), rule);
}

/// Reads the device's limits that launches of this kernel depend on.
kiln_status readDeviceLimits(const Driver &driver, const Manifest &manifest,
                             GpuCode &out, int &maxSharedBytes) {
  if (kiln_status status = getDeviceAttribute(
          driver, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
          "max shared memory per block (opt-in)", maxSharedBytes))
    return status;
  if (out.sharedBytes > static_cast<unsigned>(maxSharedBytes))
    return makeStatus(KILN_ERROR_UNSUPPORTED_TARGET,
                      "bundle '%s' needs %u bytes of shared memory, the "
                      "device allows %d",
                      manifest.name.c_str(), out.sharedBytes, maxSharedBytes);
  const CUdevice_attribute gridAttributes[3] = {
      CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
      CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z};
  for (int i = 0; i < 3; ++i) {
    int limit = 0;
    if (kiln_status status = getDeviceAttribute(driver, gridAttributes[i],
                                                "max grid dimension", limit))
      return status;
    out.maxGrid[i] = limit;
  }
  return nullptr;
}

/// The JIT error log as one line ("; " between lines), or "".
std::string oneLine(const char *log) {
  std::string text;
  for (const char *c = log; *c; ++c) {
    if (*c == '\n') {
      if (!text.empty() && c[1])
        text += "; ";
    } else if (static_cast<unsigned char>(*c) >= 0x20) {
      text += *c;
    }
  }
  return text;
}

/// Loads the module and resolves and configures the entry. On failure the
/// module is unloaded again.
kiln_status loadModule(const Driver &driver, const Manifest &manifest,
                       const std::vector<uint8_t> &image, int maxSharedBytes,
                       GpuCode &out) {
  const std::string where = "bundle '" + manifest.name + "': ";
  std::vector<char> log(kJitLogSize, '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *values[] = {log.data(), reinterpret_cast<void *>(
                                    static_cast<uintptr_t>(log.size() - 1))};
  CUmodule module = nullptr;
  if (CUresult result =
          driver.cuModuleLoadDataEx(&module, image.data(), 2, options, values)) {
    log.back() = '\0';
    std::string jitLog = oneLine(log.data());
    kiln_status status =
        callFailed(driver, result, "cuModuleLoadDataEx", KILN_ERROR_LOAD, where);
    if (jitLog.empty())
      return status;
    kiln_status withLog =
        makeStatus(kiln_status_code_of(status), "%s; JIT log: %s",
                   kiln_status_message(status), jitLog.c_str());
    kiln_status_free(status);
    return withLog;
  }

  // From here on, failures unload the module.
  auto fail = [&](kiln_status status) {
    driver.cuModuleUnload(module);
    return status;
  };
  CUfunction function = nullptr;
  if (CUresult result = driver.cuModuleGetFunction(&function, module,
                                                   manifest.entry.c_str()))
    return fail(callFailed(driver, result,
                           ("cuModuleGetFunction(\"" + manifest.entry + "\")")
                               .c_str(),
                           KILN_ERROR_LOAD, where));

  int maxThreads = 0;
  if (CUresult result = driver.cuFuncGetAttribute(
          &maxThreads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, function))
    return fail(callFailed(driver, result,
                           "cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)",
                           KILN_ERROR_LOAD, where));
  if (out.blockX > static_cast<unsigned>(maxThreads))
    return fail(makeStatus(KILN_ERROR_LOAD,
                           "bundle '%s' runs %u threads per block (num_warps "
                           "%u), the compiled entry allows at most %d (too "
                           "many registers, or .maxntid)",
                           manifest.name.c_str(), out.blockX, out.blockX / 32,
                           maxThreads));
  int staticShared = 0;
  if (CUresult result = driver.cuFuncGetAttribute(
          &staticShared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function))
    return fail(callFailed(driver, result,
                           "cuFuncGetAttribute(SHARED_SIZE_BYTES)",
                           KILN_ERROR_LOAD, where));
  if (int64_t(staticShared) + out.sharedBytes > maxSharedBytes)
    return fail(makeStatus(KILN_ERROR_UNSUPPORTED_TARGET,
                           "bundle '%s' needs %" PRId64
                           " bytes of shared memory (%d static + %u dynamic), "
                           "the device allows %d",
                           manifest.name.c_str(),
                           int64_t(staticShared) + out.sharedBytes,
                           staticShared, out.sharedBytes, maxSharedBytes));
  // Above 48 KiB of dynamic shared memory a kernel has to opt in.
  if (out.sharedBytes > static_cast<unsigned>(kDefaultSharedBytes))
    if (CUresult result = driver.cuFuncSetAttribute(
            function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            static_cast<int>(out.sharedBytes)))
      return fail(callFailed(driver, result,
                             "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
                             KILN_ERROR_LOAD, where));
  out.module = module;
  out.function = function;
  return nullptr;
}

} // namespace

bool isGpuTarget(std::string_view target) {
  return target.substr(0, 3) == "sm_";
}

bool parseGpuTarget(std::string_view target, GpuArch &out) {
  if (!isGpuTarget(target))
    return false;
  std::string_view digits = target.substr(3);
  bool archSpecific = !digits.empty() && digits.back() == 'a';
  if (archSpecific)
    digits.remove_suffix(1);
  // Two or three digits: sm_80 ... sm_121; no leading zero.
  if (digits.size() < 2 || digits.size() > 3 || digits[0] == '0')
    return false;
  int value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9')
      return false;
    value = value * 10 + (c - '0');
  }
  out.major = value / 10;
  out.minor = value % 10;
  out.archSpecific = archSpecific;
  return true;
}

kiln_status loadGpuCode(const Manifest &manifest, const uint8_t *code,
                        size_t size, GpuCode &out) {
  // 1. The manifest and the code's format: no driver needed.
  GpuArch arch;
  if (!parseGpuTarget(manifest.target, arch))
    return makeStatus(KILN_ERROR_UNSUPPORTED_TARGET,
                      "bundle '%s' targets %s, which is not an NVIDIA GPU "
                      "target of the form sm_XY or sm_XYa",
                      manifest.name.c_str(), manifest.target.c_str());
  if (manifest.codeKind != "ptx" && manifest.codeKind != "cubin")
    return makeStatus(KILN_ERROR_UNSUPPORTED_TARGET,
                      "bundle '%s' targets %s but has code of kind '%s'; GPU "
                      "bundles carry 'ptx' or 'cubin'",
                      manifest.name.c_str(), manifest.target.c_str(),
                      manifest.codeKind.c_str());
  if (!manifest.features.empty())
    return makeStatus(KILN_ERROR_BAD_BUNDLE,
                      "bundle '%s' targets %s but lists CPU features ('%s' "
                      "...); GPU bundles take none",
                      manifest.name.c_str(), manifest.target.c_str(),
                      manifest.features[0].c_str());
  GpuCode loaded;
  if (kiln_status status = parseLaunchParams(manifest, loaded))
    return status;
  std::vector<uint8_t> image;
  if (kiln_status status = prepareImage(manifest, code, size, image))
    return status;

  // 2. The driver and the device.
  const Driver *driver = nullptr;
  if (kiln_status status = getDriver(driver))
    return status;
  if (kiln_status status = checkArchitecture(*driver, manifest, arch))
    return status;
  int maxSharedBytes = 0;
  if (kiln_status status =
          readDeviceLimits(*driver, manifest, loaded, maxSharedBytes))
    return status;

  // 3. The code.
  ScopedContext context(*driver);
  if (kiln_status status = context.enter(("bundle '" + manifest.name + "'")
                                             .c_str()))
    return status;
  if (kiln_status status =
          loadModule(*driver, manifest, image, maxSharedBytes, loaded))
    return status;
  loaded.driver = driver;
  out = loaded;
  return nullptr;
}

void unloadGpuCode(GpuCode &code) {
  if (!code.module)
    return;
  ScopedContext context(*code.driver);
  kiln_status status = context.enter("kiln_kernel_destroy");
  // Without the context the module cannot be unloaded; leaking it is the
  // only option that does not abort.
  if (!status)
    code.driver->cuModuleUnload(code.module);
  kiln_status_free(status);
  code.module = nullptr;
  code.function = nullptr;
}

RuntimeStream::~RuntimeStream() {
  CUstream current = stream.load(std::memory_order_acquire);
  if (!current)
    return;
  ScopedContext context(*driver);
  kiln_status status = context.enter("kiln_runtime_destroy");
  if (!status) {
    if (scratchBuffer) {
      // Kernels launched asynchronously may still be using it. Errors have
      // no one to go to; the driver reports them again to the next caller.
      driver->cuStreamSynchronize(current);
      driver->cuMemFree(scratchBuffer);
    }
    driver->cuStreamDestroy(current);
  }
  kiln_status_free(status);
}

kiln_status RuntimeStream::get(const Driver &driver, CUstream &out) {
  out = stream.load(std::memory_order_acquire);
  if (out)
    return nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  out = stream.load(std::memory_order_relaxed);
  if (out)
    return nullptr;
  ScopedContext context(driver);
  if (kiln_status status = context.enter("creating the runtime's stream"))
    return status;
  CUstream created = nullptr;
  if (CUresult result = driver.cuStreamCreate(&created, CU_STREAM_DEFAULT))
    return callFailed(driver, result, "cuStreamCreate", KILN_ERROR_LAUNCH);
  this->driver = &driver;
  stream.store(created, std::memory_order_release);
  out = created;
  return nullptr;
}

kiln_status RuntimeStream::reserveScratch(size_t bytes, const std::string &name,
                                          CUdeviceptr &out) {
  if (bytes <= scratchSize) {
    out = scratchBuffer;
    return nullptr;
  }
  // A power of two, so that a sequence of growing grids reallocates only
  // logarithmically often.
  size_t size = kMinScratchBuffer;
  while (size < bytes && size <= SIZE_MAX / 2)
    size *= 2;
  if (size < bytes)
    size = bytes;
  const std::string where = "kernel '" + name + "': scratch buffer of " +
                            std::to_string(size) + " bytes: ";
  if (scratchBuffer) {
    // Kernels queued earlier may still be using the old buffer.
    CUstream current = stream.load(std::memory_order_relaxed);
    if (CUresult result = driver->cuStreamSynchronize(current))
      return callFailed(*driver, result, "cuStreamSynchronize",
                        KILN_ERROR_LAUNCH, where);
    // On failure the buffer is kept (and freed again at destruction).
    if (CUresult result = driver->cuMemFree(scratchBuffer))
      return callFailed(*driver, result, "cuMemFree", KILN_ERROR_LAUNCH, where);
    scratchBuffer = 0;
    scratchSize = 0;
  }
  CUdeviceptr allocated = 0;
  if (CUresult result = driver->cuMemAlloc(&allocated, size))
    return callFailed(*driver, result, "cuMemAlloc", KILN_ERROR_LAUNCH, where);
  scratchBuffer = allocated;
  scratchSize = size;
  out = allocated;
  return nullptr;
}

kiln_status RuntimeStream::synchronize() {
  CUstream current = stream.load(std::memory_order_acquire);
  if (!current)
    return nullptr;
  ScopedContext context(*driver);
  if (kiln_status status = context.enter("kiln_synchronize"))
    return status;
  if (CUresult result = driver->cuStreamSynchronize(current))
    return callFailed(*driver, result, "cuStreamSynchronize",
                      KILN_ERROR_LAUNCH, "kiln_synchronize: ");
  return nullptr;
}

TensorMapEncoder tensorMapEncoder(const GpuCode &code) {
  // The driver's types are these at the ABI level (CUtensorMap* is a
  // pointer, the enums ints, cuuint64_t/cuuint32_t 64/32-bit unsigned).
  return code.driver ? reinterpret_cast<TensorMapEncoder>(
                           code.driver->cuTensorMapEncodeTiled)
                     : nullptr;
}

kiln_status launchGpuKernel(RuntimeStream &stream, bool external,
                            CUstream caller, const GpuCode &code,
                            const std::string &name, void *const *params,
                            size_t scratchBytes, void **scratchSlot,
                            const int64_t grid[3], bool synchronize) {
  for (int i = 0; i < 3; ++i)
    if (grid[i] > code.maxGrid[i])
      return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                        "kernel '%s': grid[%d] is %" PRId64
                        ", the device allows at most %" PRId64,
                        name.c_str(), i, grid[i], code.maxGrid[i]);
  const Driver &driver = *code.driver;
  CUstream cuStream = caller;
  if (external && scratchBytes > 0)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                      "kernel '%s': scratch memory needs the runtime's stream",
                      name.c_str());
  if (!external)
    if (kiln_status status = stream.get(driver, cuStream))
      return status;
  ScopedContext context(driver);
  if (kiln_status status = context.enter("kiln_launch"))
    return status;
  // cuLaunchKernel reads each parameter's size from the entry's signature
  // and copies the values before it returns.
  auto launch = [&]() -> kiln_status {
    if (CUresult result = driver.cuLaunchKernel(
            code.function, static_cast<unsigned>(grid[0]),
            static_cast<unsigned>(grid[1]), static_cast<unsigned>(grid[2]),
            code.blockX, 1, 1, code.sharedBytes, cuStream,
            const_cast<void **>(params), nullptr))
      return callFailed(driver, result, "cuLaunchKernel", KILN_ERROR_LAUNCH,
                        "kernel '" + name + "': ");
    return nullptr;
  };
  if (scratchBytes == 0) {
    if (kiln_status status = launch())
      return status;
  } else {
    // Until the kernel is queued, no other launch may free the buffer.
    std::unique_lock<std::mutex> lock = stream.lockScratch();
    CUdeviceptr buffer = 0;
    if (kiln_status status = stream.reserveScratch(scratchBytes, name, buffer))
      return status;
    *scratchSlot = reinterpret_cast<void *>(static_cast<uintptr_t>(buffer));
    if (kiln_status status = launch())
      return status;
  }
  if (!synchronize)
    return nullptr;
  if (CUresult result = driver.cuStreamSynchronize(cuStream))
    return callFailed(driver, result, "cuStreamSynchronize", KILN_ERROR_LAUNCH,
                      "kernel '" + name + "': ");
  return nullptr;
}

} // namespace kiln::rt::cuda
