//===- CudaDriver.h - The CUDA driver, loaded at run time -------*- C++ -*-===//
//
// The runtime has no link-time CUDA dependency. The first GPU bundle load (or
// kiln_cuda_init / device-memory call) dlopen()s the driver, resolves the
// entry points of DriverSymbols.def, calls cuInit, picks the device and
// retains its primary context. This happens once per process; the outcome,
// success or the error, is cached (see getDriver()).
//
// The CUDA types below are declared here rather than taken from cuda.h, so
// that the runtime builds without the CUDA toolkit. Their numeric values are
// those of cuda.h (CUDA 13.0), which are stable across driver versions.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_SRC_CUDA_CUDADRIVER_H
#define KILN_RUNTIME_SRC_CUDA_CUDADRIVER_H

#include "kiln/runtime.h"

#include <cstddef>
#include <string>

namespace kiln::rt::cuda {

//===----------------------------------------------------------------------===//
// The subset of cuda.h the runtime needs
//===----------------------------------------------------------------------===//

// Enumerations are declared as int: a C enum has the size of int on every
// ABI the driver exists for, and plain ints keep values cuda.h adds later
// representable.
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUdevice_attribute = int;
using CUfunction_attribute = int;
using CUjit_option = int;
using CUcontext = struct CUctx_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUstream = struct CUstream_st *;

// CUresult values the runtime tests for.
inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
inline constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
inline constexpr CUresult CUDA_ERROR_ASSERT = 710;
inline constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;

// CUdevice_attribute.
inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5;
inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y = 6;
inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z = 7;
inline constexpr CUdevice_attribute
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
inline constexpr CUdevice_attribute
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
inline constexpr CUdevice_attribute
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;

// CUfunction_attribute.
inline constexpr CUfunction_attribute CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK =
    0;
inline constexpr CUfunction_attribute CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1;
inline constexpr CUfunction_attribute
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;

// CUjit_option.
inline constexpr CUjit_option CU_JIT_ERROR_LOG_BUFFER = 5;
inline constexpr CUjit_option CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;

// cuStreamCreate flags.
inline constexpr unsigned CU_STREAM_DEFAULT = 0;

/// Dynamic shared memory a kernel may use without opting in with
/// cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES).
inline constexpr int kDefaultSharedBytes = 48 * 1024;

//===----------------------------------------------------------------------===//
// The loaded driver
//===----------------------------------------------------------------------===//

/// The resolved driver entry points and the device the runtime uses.
struct Driver {
#define KILN_CUDA_SYMBOL(member, symbol, params) CUresult(*member) params = nullptr;
#include "cuda/DriverSymbols.def"
#undef KILN_CUDA_SYMBOL

  /// cuTensorMapEncodeTiled (CUDA 12+), optional: null on an older driver,
  /// where a kernel with tensor maps fails to launch with a message.
  CUresult (*cuTensorMapEncodeTiled)(void *map, int dataType, unsigned rank,
                                     void *globalAddress,
                                     const unsigned long long *globalDim,
                                     const unsigned long long *globalStrides,
                                     const unsigned *boxDim,
                                     const unsigned *elementStrides,
                                     int interleave, int swizzle,
                                     int l2Promotion, int oobFill) = nullptr;
  /// What dlopen was given ("libcuda.so.1" or $KILN_CUDA_DRIVER).
  std::string path;
  void *library = nullptr;
  /// The ordinal ($KILN_CUDA_DEVICE, default 0), handle and primary context
  /// of the device all GPU work goes to.
  int ordinal = 0;
  CUdevice device = 0;
  CUcontext context = nullptr;
};

/// Initializes the driver on first use (thread-safe) and returns it. The
/// result is cached for the life of the process: after a failure every call
/// returns a fresh status with the same code and message, and changing
/// KILN_CUDA_DRIVER or KILN_CUDA_DEVICE later has no effect.
kiln_status getDriver(const Driver *&out);

/// "NAME (description)" for a CUresult, e.g.
/// "CUDA_ERROR_NO_BINARY_FOR_GPU (no kernel image is available ...)".
std::string describeError(const Driver &driver, CUresult result);

/// A status "<call> failed: NAME (description)", prefixed with `context`
/// ("bundle 'k': ") when it is non-empty. CUDA_ERROR_OUT_OF_MEMORY always
/// becomes KILN_ERROR_OUT_OF_MEMORY, CUDA_ERROR_ASSERT (a device-side assert)
/// KILN_ERROR_ASSERT; other errors get `code`.
kiln_status callFailed(const Driver &driver, CUresult result, const char *call,
                       kiln_status_code code, const std::string &context = {});

/// Makes the runtime's context current on this thread until the guard goes
/// out of scope, then restores the previous one, so that a host using another
/// context (or none) is not disturbed. Costs one cuCtxGetCurrent when the
/// context is already current.
class ScopedContext {
public:
  explicit ScopedContext(const Driver &driver) : driver(driver) {}
  ~ScopedContext();
  ScopedContext(const ScopedContext &) = delete;
  ScopedContext &operator=(const ScopedContext &) = delete;

  /// Makes the context current; `what` names the operation for messages.
  kiln_status enter(const char *what);

private:
  const Driver &driver;
  CUcontext previous = nullptr;
  bool restore = false;
};

/// Reads a device attribute; a failure becomes a status naming `what`.
kiln_status getDeviceAttribute(const Driver &driver, CUdevice_attribute attr,
                               const char *what, int &out);

} // namespace kiln::rt::cuda

#endif // KILN_RUNTIME_SRC_CUDA_CUDADRIVER_H
