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

/// Parses a non-negative decimal integer without sign, spaces or overflow.
bool parseCount(const std::string &text, int64_t max, int64_t &out) {
  if (text.empty() || text.size() > 12)
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
                        "bundle '%s': launch num_warps is '%s', must be an "
                        "integer in [1, %d]",
                        manifest.name.c_str(), value->c_str(), kMaxNumWarps);
  int64_t sharedBytes = 0;
  if (const std::string *value = findLaunchParam(manifest, "shared_bytes"))
    if (!parseCount(*value, INT_MAX, sharedBytes))
      return makeStatus(KILN_ERROR_BAD_BUNDLE,
                        "bundle '%s': launch shared_bytes is '%s', must be an "
                        "integer in [0, %d]",
                        manifest.name.c_str(), value->c_str(), INT_MAX);
  out.blockX = static_cast<unsigned>(32 * numWarps);
  out.sharedBytes = static_cast<unsigned>(sharedBytes);
  return nullptr;
}

/// Checks the code section's format and returns the image the driver gets:
/// PTX must be NUL-terminated text, a cubin is copied to aligned memory.
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
