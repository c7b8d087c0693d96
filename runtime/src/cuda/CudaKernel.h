//===- CudaKernel.h - GPU bundles: load, launch, streams --------*- C++ -*-===//
//
// The NVIDIA side of kiln_kernel and kiln_runtime. A bundle whose target is
// sm_XY[a] carries PTX or a cubin; loading it initializes the driver (see
// CudaDriver.h), checks the device against the bundle and loads a CUmodule.
// Launches go to a stream owned by the kiln_runtime, or to the caller's
// (kiln_launch_on_stream).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_SRC_CUDA_CUDAKERNEL_H
#define KILN_RUNTIME_SRC_CUDA_CUDAKERNEL_H

#include "Bundle.h"
#include "cuda/CudaDriver.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace kiln::rt::cuda {

/// Whether a manifest target names an NVIDIA GPU ("sm_" prefix). Such a
/// target is then either parsed by parseGpuTarget or refused.
bool isGpuTarget(std::string_view target);

/// An NVIDIA architecture: sm_XY (major X, minor Y) or sm_XYa (`a`: the
/// architecture-specific feature set, e.g. wgmma on sm_90a, which runs only
/// on exactly that architecture).
struct GpuArch {
  int major = 0;
  int minor = 0;
  bool archSpecific = false;
};

/// Parses "sm_80", "sm_90a", "sm_100a" (the last digit is the minor
/// version). Returns false for anything else.
bool parseGpuTarget(std::string_view target, GpuArch &out);

/// The loaded code of a GPU bundle.
struct GpuCode {
  const Driver *driver = nullptr;
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  /// blockDim.x = 32 * num_warps; blockDim.y = blockDim.z = 1.
  unsigned blockX = 0;
  /// Dynamic shared memory per block (`launch shared_bytes`).
  unsigned sharedBytes = 0;
  /// The device's grid limits, checked at launch.
  int64_t maxGrid[3] = {0, 0, 0};
};

/// Checks a GPU bundle's manifest, the device and the code, then loads the
/// module and resolves the entry. Nothing is left loaded on failure.
kiln_status loadGpuCode(const Manifest &manifest, const uint8_t *code,
                        size_t size, GpuCode &out);

/// Unloads what loadGpuCode loaded. Safe on a default-constructed value.
void unloadGpuCode(GpuCode &code);

/// The driver's cuTensorMapEncodeTiled for `code`'s kernels (null on a
/// driver older than CUDA 12), as TensorMaps.h's TensorMapEncoder.
TensorMapEncoder tensorMapEncoder(const GpuCode &code);

/// The stream GPU kernels of one kiln_runtime run on, created on first use.
/// A blocking stream (CU_STREAM_DEFAULT): work on the legacy default stream
/// (stream 0, where PyTorch works unless told otherwise) is ordered with it.
///
/// It also owns the scratch buffer of kernels with `launch scratch_bytes`:
/// one device buffer that every such launch on the stream uses. Launches on
/// one stream run in order, so a kernel never sees another kernel's use of
/// it; growing it waits for the stream before freeing the old buffer.
class RuntimeStream {
public:
  RuntimeStream() = default;
  RuntimeStream(const RuntimeStream &) = delete;
  RuntimeStream &operator=(const RuntimeStream &) = delete;
  /// Waits for the stream if it has a scratch buffer (queued kernels may use
  /// it), frees the buffer, destroys the stream.
  ~RuntimeStream();

  /// The stream, created in the driver's context on first call.
  kiln_status get(const Driver &driver, CUstream &out);
  /// Waits for the work queued so far; a no-op if no GPU kernel ran yet.
  kiln_status synchronize();

  /// Guards the scratch buffer. Hold it from reserveScratch until the launch
  /// that uses the buffer is queued, so that no other host thread can free
  /// the buffer in between.
  std::unique_lock<std::mutex> lockScratch() {
    return std::unique_lock<std::mutex>(mutex);
  }
  /// The scratch buffer, grown to at least `bytes` bytes if it is smaller
  /// (a power of two, at least kMinScratchBuffer): waits for the stream,
  /// frees the old buffer and allocates the new one. Needs lockScratch()
  /// held, the stream created (get) and the driver's context current. `name`
  /// is the kernel's, for messages.
  kiln_status reserveScratch(size_t bytes, const std::string &name,
                             CUdeviceptr &out);

  /// The smallest scratch buffer allocated, so that small grids do not grow
  /// it launch after launch.
  static constexpr size_t kMinScratchBuffer = 64 * 1024;

private:
  /// Guards the stream's creation and the scratch buffer.
  std::mutex mutex;
  std::atomic<CUstream> stream{nullptr};
  const Driver *driver = nullptr;
  CUdeviceptr scratchBuffer = 0;
  size_t scratchSize = 0;
};

/// Launches a validated GPU kernel: `params[i]` points at the i-th argument
/// (the kernel ABI's packing, shared with CPU kernels), on `stream` or, when
/// `external`, on the caller's stream `caller` (then scratchBytes must be 0:
/// the scratch buffer is `stream`'s). With `synchronize`, waits for the
/// stream it used and reports the kernel's errors.
///
/// `scratchBytes` > 0 (the whole grid's `launch scratch_bytes`): the kernel
/// takes a hidden trailing parameter, the scratch buffer's address. `params`
/// then has one more entry, pointing at *scratchSlot; the stream's scratch
/// buffer (at least scratchBytes bytes) is stored there under the stream's
/// scratch lock, which is held until the kernel is queued.
kiln_status launchGpuKernel(RuntimeStream &stream, bool external,
                            CUstream caller, const GpuCode &code,
                            const std::string &name, void *const *params,
                            size_t scratchBytes, void **scratchSlot,
                            const int64_t grid[3], bool synchronize);

} // namespace kiln::rt::cuda

#endif // KILN_RUNTIME_SRC_CUDA_CUDAKERNEL_H
