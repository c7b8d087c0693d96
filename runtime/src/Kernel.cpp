//===- Kernel.cpp - Load kiln bundles and query their manifests
//------------===//
//
// Loading checks cheap things first and loads code last: a bundle this host
// cannot run (other target, missing CPU feature, no GPU, other GPU
// architecture) is refused before any of its code is mapped or its
// constructors run. GPU bundles (target sm_*) are handled by
// cuda/CudaKernel.cpp.
//
//===----------------------------------------------------------------------===//

#include "Kernel.h"
#include "CpuFeatures.h"
#include "Status.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <new>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace kiln::rt;

namespace {

/// The target this build of the runtime can run.
#if defined(__x86_64__)
constexpr const char *kHostTarget = "x86-64";
#else
constexpr const char *kHostTarget = nullptr;
#endif

kiln_status checkCpuTarget(const Manifest &manifest) {
  if (!kHostTarget || manifest.target != kHostTarget)
    return makeStatus(KILN_ERROR_UNSUPPORTED_TARGET,
                      "bundle '%s' targets %s, this runtime supports %s CPU "
                      "kernels and NVIDIA GPU kernels (sm_XY, sm_XYa)",
                      manifest.name.c_str(), manifest.target.c_str(),
                      kHostTarget ? kHostTarget : "no");
  if (manifest.codeKind != "elf-shared-object")
    return makeStatus(KILN_ERROR_UNSUPPORTED_TARGET,
                      "bundle '%s' has code of kind '%s', this runtime loads "
                      "only 'elf-shared-object' for CPU targets",
                      manifest.name.c_str(), manifest.codeKind.c_str());
  return nullptr;
}

/// The text of the line of `text` that holds offset `at`, at most 120 bytes
/// of it.
std::string lineAt(std::string_view text, size_t at) {
  size_t begin = text.rfind('\n', at == 0 ? 0 : at - 1);
  begin = begin == std::string_view::npos || at == 0 ? 0 : begin + 1;
  size_t end = text.find('\n', begin);
  std::string_view line = text.substr(
      begin, end == std::string_view::npos ? text.size() - begin : end - begin);
  if (line.size() > 120) {
    // Cut at a character's start: a UTF-8 sequence cut in two made the
    // message invalid UTF-8 (Python showed it empty).
    size_t cut = 120;
    while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80)
      --cut;
    return std::string(line.substr(0, cut)) + "...";
  }
  return std::string(line);
}

/// Code that embeds the manifest it was compiled for (a CPU library's
/// kiln_manifest symbol, PTX's `// kiln_manifest` lines) runs only under
/// that manifest, byte for byte: one edited after compiling (an argument's
/// kind or dtype, a feature, the scratch size) would make the runtime pass
/// the code what it does not expect.
kiln_status checkEmbeddedManifest(const char *embedded,
                                  std::string_view manifest,
                                  const std::string &name) {
  // Stops at the first difference or at the embedded text's NUL, so it
  // never reads past it.
  size_t i = 0;
  while (i < manifest.size() && embedded[i] != '\0' &&
         embedded[i] == manifest[i])
    ++i;
  if (i == manifest.size() && embedded[i] == '\0')
    return nullptr;
  size_t line = 1 + std::count(manifest.begin(), manifest.begin() + i, '\n');
  std::string_view compiled(embedded, i + std::strlen(embedded + i));
  return makeStatus(
      KILN_ERROR_BAD_BUNDLE,
      "bundle '%s': its manifest was changed after compiling; line %zu is "
      "'%s', the code was compiled for '%s' (recompile the kernel)",
      name.c_str(), line, lineAt(manifest, i).c_str(),
      lineAt(compiled, i).c_str());
}

/// The manifest PTX code was compiled for: its `// kiln_manifest ` comment
/// lines, in order, each with its newline (docs/bundle-format.md, "Code (GPU
/// targets)"); false when it has none.
bool ptxEmbeddedManifest(std::string_view ptx, std::string &out) {
  constexpr std::string_view kPrefix = "// kiln_manifest ";
  bool found = false;
  for (size_t at = 0; at < ptx.size();) {
    size_t end = ptx.find('\n', at);
    if (end == std::string_view::npos)
      end = ptx.size();
    std::string_view line = ptx.substr(at, end - at);
    if (line.substr(0, kPrefix.size()) == kPrefix) {
      out.append(line.substr(kPrefix.size()));
      out += '\n';
      found = true;
    }
    at = end + 1;
  }
  return found;
}

kiln_status loadBundle(const uint8_t *data, size_t size, kiln_kernel **out) {
  ParsedBundle bundle;
  if (kiln_status status = readBundle(data, size, bundle))
    return status;
  // CPU and GPU kernels alike take the scratch buffer (Launch.cpp).
  if (kiln_status status = checkScratchBytes(bundle.manifest))
    return status;
  if (bundle.manifest.scratchBytes && bundle.formatVersion < 2)
    return makeStatus(KILN_ERROR_BAD_BUNDLE,
                      "bundle '%s': launch scratch_bytes needs bundle format "
                      "version 2 (the header says %u)",
                      bundle.manifest.name.c_str(), bundle.formatVersion);
  if (kiln_status status = checkTensorMaps(bundle.manifest))
    return status;
  if (!bundle.manifest.tensorMaps.empty() && bundle.formatVersion < 3)
    return makeStatus(KILN_ERROR_BAD_BUNDLE,
                      "bundle '%s': tensor_map needs bundle format version 3 "
                      "(the header says %u)",
                      bundle.manifest.name.c_str(), bundle.formatVersion);
  auto kernel = std::make_unique<kiln_kernel>();

  if (cuda::isGpuTarget(bundle.manifest.target)) {
    std::string embedded;
    if (bundle.manifest.codeKind == "ptx" &&
        ptxEmbeddedManifest(std::string_view(reinterpret_cast<const char *>(bundle.code),
                                             bundle.codeSize),
                            embedded))
      if (kiln_status status = checkEmbeddedManifest(
              embedded.c_str(), bundle.manifestText, bundle.manifest.name))
        return status;
    // Everything GPU (driver, device, architecture) is checked in there.
    if (kiln_status status = cuda::loadGpuCode(bundle.manifest, bundle.code,
                                               bundle.codeSize, kernel->gpu))
      return status;
  } else {
    if (kiln_status status = checkCpuTarget(bundle.manifest))
      return status;
    if (kiln_status status =
            checkCpuFeatures(bundle.manifest.features, bundle.manifest.name))
      return status;
    if (kiln_status status = loadElfCode(bundle.code, bundle.codeSize,
                                         bundle.manifest.entry, kernel->code))
      return status;
    if (kernel->code.embeddedManifest)
      if (kiln_status status =
              checkEmbeddedManifest(kernel->code.embeddedManifest,
                                    bundle.manifestText, bundle.manifest.name))
        return status;
    if (!bundle.manifest.tensorMaps.empty() && !kernel->code.tensorMapEncoder)
      return makeStatus(KILN_ERROR_BAD_BUNDLE,
                        "bundle '%s' declares tensor maps, and its code does "
                        "not export the emulator's encoder "
                        "(kiln_emu_tensormap_encode)",
                        bundle.manifest.name.c_str());
  }
  kernel->manifest = std::move(bundle.manifest);
  *out = kernel.release();
  return nullptr;
}

kiln_status readFile(const char *path, std::vector<uint8_t> &contents) {
  int fd;
  do
    fd = ::open(path, O_RDONLY | O_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0)
    return makeStatus(KILN_ERROR_IO, "cannot open bundle '%s': %s", path,
                      std::strerror(errno));
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    int error = errno;
    ::close(fd);
    return makeStatus(KILN_ERROR_IO, "cannot stat bundle '%s': %s", path,
                      std::strerror(error));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return makeStatus(KILN_ERROR_IO, "cannot read bundle '%s': %s", path,
                      S_ISDIR(info.st_mode) ? "is a directory"
                                            : "not a regular file");
  }
  try {
    contents.resize(static_cast<size_t>(info.st_size));
  } catch (...) {
    ::close(fd);
    throw;
  }
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t got = ::read(fd, contents.data() + done, contents.size() - done);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0) {
      int error = errno;
      ::close(fd);
      return makeStatus(KILN_ERROR_IO, "cannot read bundle '%s': %s", path,
                        std::strerror(error));
    }
    if (got == 0) // The file shrank while we read it.
      break;
    done += static_cast<size_t>(got);
  }
  ::close(fd);
  contents.resize(done);
  return nullptr;
}

} // namespace

extern "C" {

kiln_status kiln_bundle_load_memory(const void *data, size_t size,
                                    kiln_kernel **out) {
  if (!out)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                      "kiln_bundle_load_memory: out is NULL");
  *out = nullptr;
  if (!data)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                      "kiln_bundle_load_memory: data is NULL");
  try {
    return loadBundle(static_cast<const uint8_t *>(data), size, out);
  } catch (const std::bad_alloc &) {
    return outOfMemoryStatus();
  } catch (...) {
    return makeStatus(KILN_ERROR_LOAD, "unexpected error loading bundle");
  }
}

kiln_status kiln_bundle_load_file(const char *path, kiln_kernel **out) {
  if (!out)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                      "kiln_bundle_load_file: out is NULL");
  *out = nullptr;
  if (!path)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                      "kiln_bundle_load_file: path is NULL");
  try {
    std::vector<uint8_t> contents;
    if (kiln_status status = readFile(path, contents))
      return status;
    kiln_status status = loadBundle(contents.data(), contents.size(), out);
    if (!status)
      return nullptr;
    // Name the file: "bundle truncated" alone does not say which one.
    kiln_status withPath = makeStatus(kiln_status_code_of(status), "%s: %s",
                                      path, kiln_status_message(status));
    kiln_status_free(status);
    return withPath;
  } catch (const std::bad_alloc &) {
    return outOfMemoryStatus();
  } catch (...) {
    return makeStatus(KILN_ERROR_LOAD, "unexpected error loading bundle '%s'",
                      path);
  }
}

void kiln_kernel_destroy(kiln_kernel *kernel) { delete kernel; }

const char *kiln_kernel_name(const kiln_kernel *kernel) {
  return kernel ? kernel->manifest.name.c_str() : "";
}

const char *kiln_kernel_entry(const kiln_kernel *kernel) {
  return kernel ? kernel->manifest.entry.c_str() : "";
}

const char *kiln_kernel_target(const kiln_kernel *kernel) {
  return kernel ? kernel->manifest.target.c_str() : "";
}

const char *kiln_kernel_compiler(const kiln_kernel *kernel) {
  return kernel ? kernel->manifest.compiler.c_str() : "";
}

int kiln_kernel_is_gpu(const kiln_kernel *kernel) {
  return kernel && kernel->isGpu() ? 1 : 0;
}

uint32_t kiln_kernel_scratch_bytes(const kiln_kernel *kernel) {
  return kernel ? kernel->manifest.scratchBytes : 0;
}

int kiln_kernel_grid_rank(const kiln_kernel *kernel) {
  return kernel ? kernel->manifest.gridRank : 0;
}

size_t kiln_kernel_num_features(const kiln_kernel *kernel) {
  return kernel ? kernel->manifest.features.size() : 0;
}

const char *kiln_kernel_feature(const kiln_kernel *kernel, size_t index) {
  if (!kernel || index >= kernel->manifest.features.size())
    return nullptr;
  return kernel->manifest.features[index].c_str();
}

size_t kiln_kernel_num_args(const kiln_kernel *kernel) {
  return kernel ? kernel->manifest.args.size() : 0;
}

kiln_status kiln_kernel_arg_info(const kiln_kernel *kernel, size_t index,
                                 kiln_arg_info *out) {
  if (!kernel || !out)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                      "kiln_kernel_arg_info: kernel or out is NULL");
  const auto &args = kernel->manifest.args;
  if (index >= args.size())
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                      "kiln_kernel_arg_info: index %zu out of range (kernel "
                      "'%s' has %zu arguments)",
                      index, kernel->manifest.name.c_str(), args.size());
  out->name = args[index].name.c_str();
  out->kind = args[index].kind;
  out->dtype = args[index].dtype;
  return nullptr;
}

int kiln_kernel_arg_written(const kiln_kernel *kernel, size_t index) {
  if (!kernel || index >= kernel->manifest.args.size())
    return -1;
  return kernel->manifest.args[index].written;
}

const char *kiln_kernel_launch_param(const kiln_kernel *kernel,
                                     const char *key) {
  if (!kernel || !key)
    return nullptr;
  for (const auto &param : kernel->manifest.launchParams)
    if (param.first == key)
      return param.second.c_str();
  return nullptr;
}

size_t kiln_kernel_num_launch_params(const kiln_kernel *kernel) {
  return kernel ? kernel->manifest.launchParams.size() : 0;
}

const char *kiln_kernel_launch_param_key(const kiln_kernel *kernel,
                                         size_t index) {
  if (!kernel || index >= kernel->manifest.launchParams.size())
    return nullptr;
  return kernel->manifest.launchParams[index].first.c_str();
}

} // extern "C"
