//===- CudaDriver.cpp - Load the CUDA driver and manage device memory -----===//
//
// The driver is found with dlopen("libcuda.so.1"), the name the NVIDIA
// driver installs (the unversioned libcuda.so exists only with the toolkit's
// development files), or with $KILN_CUDA_DRIVER, which tests point at a mock.
// Initialization runs once per process under a mutex; its outcome is
// published through an atomic pointer, so later calls cost one load.
//
// The library is never dlclose()d and the primary context never released:
// kernels, streams and device memory may outlive any owner the runtime could
// tie them to, and the driver tears everything down at process exit.
//
//===----------------------------------------------------------------------===//

#include "cuda/CudaDriver.h"
#include "Status.h"

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <mutex>
#include <new>
#include <optional>
#include <string>

namespace kiln::rt::cuda {

namespace {

/// The outcome of the one initialization attempt. Allocated once and never
/// freed, so that no destructor runs while other threads may still use it at
/// process exit.
struct InitState {
  std::mutex mutex;
  bool attempted = false;
  std::atomic<const Driver *> driver{nullptr};
  kiln_status_code errorCode = KILN_OK;
  std::string errorMessage;
  /// A driver whose initialization failed; kept, never used (see below).
  const Driver *failedDriver = nullptr;
};

InitState &initState() {
  static InitState *state = new InitState;
  return *state;
}

/// Resolves every symbol of DriverSymbols.def; names the first one missing.
kiln_status resolveSymbols(Driver &driver) {
#define KILN_CUDA_SYMBOL(member, symbol, params)                               \
  {                                                                            \
    dlerror();                                                                 \
    void *address = dlsym(driver.library, symbol);                             \
    if (!address)                                                              \
      return makeStatus(KILN_ERROR_NO_DEVICE,                                  \
                        "CUDA driver '%s' lacks the entry point %s (the "      \
                        "driver is too old or not a CUDA driver)",             \
                        driver.path.c_str(), symbol);                          \
    driver.member = reinterpret_cast<decltype(driver.member)>(address);        \
  }
#include "cuda/DriverSymbols.def"
#undef KILN_CUDA_SYMBOL
  // Optional (CUDA 12+): kernels with tensor maps need it (TensorMaps.h).
  dlerror();
  driver.cuTensorMapEncodeTiled =
      reinterpret_cast<decltype(driver.cuTensorMapEncodeTiled)>(
          dlsym(driver.library, "cuTensorMapEncodeTiled"));
  dlerror();
  return nullptr;
}

/// Reads KILN_CUDA_DEVICE: a device ordinal, default 0.
kiln_status selectOrdinal(int deviceCount, int &ordinal) {
  ordinal = 0;
  const char *env = std::getenv("KILN_CUDA_DEVICE");
  if (env && *env) {
    char *end = nullptr;
    errno = 0;
    long value = std::strtol(env, &end, 10);
    if (errno != 0 || *end != '\0' || value < 0 || value > INT_MAX)
      return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                        "KILN_CUDA_DEVICE is '%s', must be a device ordinal "
                        "(0, 1, ...)",
                        env);
    ordinal = static_cast<int>(value);
  }
  if (ordinal >= deviceCount)
    return makeStatus(KILN_ERROR_NO_DEVICE,
                      "CUDA device %d requested (KILN_CUDA_DEVICE), but the "
                      "driver reports %d device(s)",
                      ordinal, deviceCount);
  return nullptr;
}

/// The whole initialization; on success `driver` is ready to use.
kiln_status initialize(Driver &driver) {
  const char *override = std::getenv("KILN_CUDA_DRIVER");
  driver.path = override && *override ? override : "libcuda.so.1";
  driver.library = dlopen(driver.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!driver.library) {
    const char *reason = dlerror();
    return makeStatus(KILN_ERROR_NO_DEVICE,
                      "CUDA driver not found (%s): %s; GPU bundles need an "
                      "NVIDIA driver",
                      driver.path.c_str(), reason ? reason : "dlopen failed");
  }
  if (kiln_status status = resolveSymbols(driver))
    return status;

  if (CUresult result = driver.cuInit(0)) {
    if (result == CUDA_ERROR_NO_DEVICE)
      return makeStatus(KILN_ERROR_NO_DEVICE,
                        "no CUDA device found: the CUDA driver (%s) is "
                        "installed but cuInit reports %s",
                        driver.path.c_str(),
                        describeError(driver, result).c_str());
    return callFailed(driver, result, "cuInit", KILN_ERROR_NO_DEVICE,
                      "CUDA driver " + driver.path + ": ");
  }
  int count = 0;
  if (CUresult result = driver.cuDeviceGetCount(&count))
    return callFailed(driver, result, "cuDeviceGetCount", KILN_ERROR_NO_DEVICE);
  if (count <= 0)
    return makeStatus(KILN_ERROR_NO_DEVICE,
                      "no CUDA device found: the CUDA driver (%s) is "
                      "installed but reports no device",
                      driver.path.c_str());
  if (kiln_status status = selectOrdinal(count, driver.ordinal))
    return status;
  if (CUresult result = driver.cuDeviceGet(&driver.device, driver.ordinal))
    return callFailed(driver, result, "cuDeviceGet", KILN_ERROR_NO_DEVICE);
  if (CUresult result =
          driver.cuDevicePrimaryCtxRetain(&driver.context, driver.device))
    return callFailed(driver, result, "cuDevicePrimaryCtxRetain",
                      KILN_ERROR_NO_DEVICE);
  return nullptr;
}

/// Returns the device pointer a void* holds (the C API passes them as void*).
CUdeviceptr toDevicePointer(const void *pointer) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(pointer));
}

} // namespace

kiln_status getDriver(const Driver *&out) {
  InitState &state = initState();
  out = state.driver.load(std::memory_order_acquire);
  if (out)
    return nullptr;

  std::lock_guard<std::mutex> lock(state.mutex);
  if (!state.attempted) {
    state.attempted = true;
    auto *driver = new Driver;
    kiln_status status = initialize(*driver);
    if (!status) {
      state.driver.store(driver, std::memory_order_release);
    } else {
      // Keep the library loaded: a partially initialized driver may have
      // started threads. Only the message is used from now on.
      state.failedDriver = driver;
      state.errorCode = kiln_status_code_of(status);
      state.errorMessage = kiln_status_message(status);
      kiln_status_free(status);
    }
  }
  out = state.driver.load(std::memory_order_acquire);
  if (out)
    return nullptr;
  return makeStatus(state.errorCode, "%s", state.errorMessage.c_str());
}

std::string describeError(const Driver &driver, CUresult result) {
  const char *name = nullptr;
  const char *text = nullptr;
  if (driver.cuGetErrorName(result, &name) != CUDA_SUCCESS || !name)
    return "CUDA error " + std::to_string(result);
  std::string description = name;
  if (driver.cuGetErrorString(result, &text) == CUDA_SUCCESS && text &&
      *text)
    description += std::string(" (") + text + ")";
  return description;
}

kiln_status callFailed(const Driver &driver, CUresult result, const char *call,
                       kiln_status_code code, const std::string &context) {
  if (result == CUDA_ERROR_OUT_OF_MEMORY)
    code = KILN_ERROR_OUT_OF_MEMORY;
  // A device-side assert (kiln.assert's __assertfail): the kernel stopped,
  // and the CUDA context reports it from then on.
  if (result == CUDA_ERROR_ASSERT)
    code = KILN_ERROR_ASSERT;
  return makeStatus(code, "%s%s failed: %s", context.c_str(), call,
                    describeError(driver, result).c_str());
}

kiln_status getDeviceAttribute(const Driver &driver, CUdevice_attribute attr,
                               const char *what, int &out) {
  out = 0;
  if (CUresult result = driver.cuDeviceGetAttribute(&out, attr, driver.device))
    return callFailed(driver, result,
                      (std::string("cuDeviceGetAttribute(") + what + ")")
                          .c_str(),
                      KILN_ERROR_NO_DEVICE);
  return nullptr;
}

kiln_status ScopedContext::enter(const char *what) {
  if (CUresult result = driver.cuCtxGetCurrent(&previous))
    return callFailed(driver, result, "cuCtxGetCurrent", KILN_ERROR_LAUNCH,
                      std::string(what) + ": ");
  if (previous == driver.context)
    return nullptr;
  if (CUresult result = driver.cuCtxSetCurrent(driver.context))
    return callFailed(driver, result, "cuCtxSetCurrent", KILN_ERROR_LAUNCH,
                      std::string(what) + ": ");
  restore = true;
  return nullptr;
}

ScopedContext::~ScopedContext() {
  if (restore)
    driver.cuCtxSetCurrent(previous);
}

} // namespace kiln::rt::cuda

using namespace kiln::rt;
using namespace kiln::rt::cuda;

namespace {

/// getDriver() plus entering its context, for the C API helpers below.
/// Exceptions (std::bad_alloc from message building) are the callers' job.
struct DriverCall {
  const Driver *driver = nullptr;
  std::optional<ScopedContext> context;

  kiln_status begin(const char *function) {
    if (kiln_status status = getDriver(driver))
      return status;
    context.emplace(*driver);
    return context->enter(function);
  }
};

} // namespace

extern "C" {

kiln_status kiln_cuda_init(void) {
  try {
    const Driver *driver;
    return getDriver(driver);
  } catch (const std::bad_alloc &) {
    return outOfMemoryStatus();
  } catch (...) {
    return makeStatus(KILN_ERROR_NO_DEVICE,
                      "kiln_cuda_init: unexpected error");
  }
}

int kiln_cuda_available(char *message, size_t size) {
  kiln_status status = kiln_cuda_init();
  if (message && size > 0) {
    std::strncpy(message, kiln_status_message(status), size - 1);
    message[size - 1] = '\0';
  }
  bool available = status == nullptr;
  kiln_status_free(status);
  return available ? 1 : 0;
}

kiln_status kiln_cuda_device_name(char *name, size_t size) {
  if (!name || size == 0)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                      "kiln_cuda_device_name: name is NULL or size is 0");
  name[0] = '\0';
  try {
    const Driver *driver;
    if (kiln_status status = getDriver(driver))
      return status;
    int length = size > INT_MAX ? INT_MAX : static_cast<int>(size);
    if (CUresult result = driver->cuDeviceGetName(name, length, driver->device))
      return callFailed(*driver, result, "cuDeviceGetName",
                        KILN_ERROR_NO_DEVICE);
    name[size - 1] = '\0';
    return nullptr;
  } catch (const std::bad_alloc &) {
    return outOfMemoryStatus();
  } catch (...) {
    return makeStatus(KILN_ERROR_NO_DEVICE,
                      "kiln_cuda_device_name: unexpected error");
  }
}

kiln_status kiln_cuda_compute_capability(int *major, int *minor) {
  if (!major || !minor)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                      "kiln_cuda_compute_capability: major or minor is NULL");
  *major = *minor = 0;
  try {
    const Driver *driver;
    if (kiln_status status = getDriver(driver))
      return status;
    if (kiln_status status = getDeviceAttribute(
            *driver, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            "compute capability major", *major))
      return status;
    return getDeviceAttribute(*driver,
                              CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                              "compute capability minor", *minor);
  } catch (const std::bad_alloc &) {
    return outOfMemoryStatus();
  } catch (...) {
    return makeStatus(KILN_ERROR_NO_DEVICE,
                      "kiln_cuda_compute_capability: unexpected error");
  }
}

kiln_status kiln_device_alloc(size_t size, void **out) {
  if (!out)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                      "kiln_device_alloc: out is NULL");
  *out = nullptr;
  if (size == 0)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                      "kiln_device_alloc: size is 0");
  try {
    DriverCall call;
    if (kiln_status status = call.begin("kiln_device_alloc"))
      return status;
    CUdeviceptr pointer = 0;
    if (CUresult result = call.driver->cuMemAlloc(&pointer, size))
      return callFailed(*call.driver, result, "cuMemAlloc", KILN_ERROR_LAUNCH,
                        "kiln_device_alloc(" + std::to_string(size) +
                            " bytes): ");
    *out = reinterpret_cast<void *>(static_cast<uintptr_t>(pointer));
    return nullptr;
  } catch (const std::bad_alloc &) {
    return outOfMemoryStatus();
  } catch (...) {
    return makeStatus(KILN_ERROR_LAUNCH, "kiln_device_alloc: unexpected error");
  }
}

kiln_status kiln_device_free(void *pointer) {
  if (!pointer)
    return nullptr;
  try {
    DriverCall call;
    if (kiln_status status = call.begin("kiln_device_free"))
      return status;
    if (CUresult result = call.driver->cuMemFree(toDevicePointer(pointer)))
      return callFailed(*call.driver, result, "cuMemFree", KILN_ERROR_LAUNCH,
                        "kiln_device_free: ");
    return nullptr;
  } catch (const std::bad_alloc &) {
    return outOfMemoryStatus();
  } catch (...) {
    return makeStatus(KILN_ERROR_LAUNCH, "kiln_device_free: unexpected error");
  }
}

kiln_status kiln_device_copy_to_device(void *device_dst, const void *host_src,
                                       size_t size) {
  if (size == 0)
    return nullptr;
  if (!device_dst || !host_src)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                      "kiln_device_copy_to_device: %s is NULL",
                      device_dst ? "host_src" : "device_dst");
  try {
    DriverCall call;
    if (kiln_status status = call.begin("kiln_device_copy_to_device"))
      return status;
    if (CUresult result = call.driver->cuMemcpyHtoD(
            toDevicePointer(device_dst), host_src, size))
      return callFailed(*call.driver, result, "cuMemcpyHtoD",
                        KILN_ERROR_LAUNCH, "kiln_device_copy_to_device: ");
    return nullptr;
  } catch (const std::bad_alloc &) {
    return outOfMemoryStatus();
  } catch (...) {
    return makeStatus(KILN_ERROR_LAUNCH,
                      "kiln_device_copy_to_device: unexpected error");
  }
}

kiln_status kiln_device_copy_from_device(void *host_dst,
                                         const void *device_src, size_t size) {
  if (size == 0)
    return nullptr;
  if (!host_dst || !device_src)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                      "kiln_device_copy_from_device: %s is NULL",
                      host_dst ? "device_src" : "host_dst");
  try {
    DriverCall call;
    if (kiln_status status = call.begin("kiln_device_copy_from_device"))
      return status;
    if (CUresult result = call.driver->cuMemcpyDtoH(
            host_dst, toDevicePointer(device_src), size))
      return callFailed(*call.driver, result, "cuMemcpyDtoH",
                        KILN_ERROR_LAUNCH, "kiln_device_copy_from_device: ");
    return nullptr;
  } catch (const std::bad_alloc &) {
    return outOfMemoryStatus();
  } catch (...) {
    return makeStatus(KILN_ERROR_LAUNCH,
                      "kiln_device_copy_from_device: unexpected error");
  }
}

} // extern "C"
