//===- Launch.cpp - Validate arguments and launch kernels
//------------------===//
//
// Validation compares each argument with the signature from the manifest,
// because a kernel called with the wrong types corrupts memory silently.
// The launch path allocates nothing (unless a kernel has more than
// kInlineArgs arguments, or scratch memory) and only formats text when it
// reports an error. GPU kernels share the validation and packing and then go
// to cuda::launchGpuKernel (cuda/CudaKernel.cpp).
//
// A kernel with `launch scratch_bytes N` takes one more, hidden, argument
// after its signature's: the base of N bytes per program, program (x, y, z)
// at ((z * gy + y) * gx + x) * N. CPU launches allocate it per launch (they
// are synchronous); GPU launches use the runtime stream's buffer.
//
// A kernel with `tensor_map` lines takes, after those, an i32 of flags and
// one 128-byte tensor map per line, encoded here for each launch
// (TensorMaps.h): by value on the GPU (cuLaunchKernel copies the bytes), by
// pointer for emulated kernels.
//
//===----------------------------------------------------------------------===//

#include "Kernel.h"
#include "Runtime.h"
#include "Status.h"

#include <algorithm>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <vector>

using namespace kiln::rt;

namespace {

/// Arguments packed on the stack; more than this needs a heap buffer.
constexpr size_t kInlineArgs = 64;

/// Caps the program count so that chunk arithmetic (next + chunk per thread)
/// can never overflow int64_t.
constexpr int64_t kMaxPrograms = int64_t(1) << 62;

/// Chunks per thread: enough to even out uneven programs, few enough that
/// the shared counter is not contended.
constexpr int64_t kChunksPerThread = 8;

/// Where a GPU launch goes: the runtime's stream, or (`external`) the
/// caller's `caller` stream; `synchronize`: wait for it after queueing.
struct StreamChoice {
  bool synchronize;
  bool external;
  cuda::CUstream caller;
};

kiln_status checkHandles(const kiln_runtime *runtime, const kiln_kernel *kernel,
                         const char *function) {
  if (!runtime)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT, "%s: runtime is NULL",
                      function);
  if (!kernel)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT, "%s: kernel is NULL",
                      function);
  return nullptr;
}

kiln_status checkArity(const kiln_kernel *kernel, size_t numArgs,
                       const void *args) {
  size_t expected = kernel->manifest.args.size();
  if (numArgs != expected)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                      "kernel '%s' takes %zu argument(s), %zu given",
                      kernel->manifest.name.c_str(), expected, numArgs);
  if (numArgs > 0 && !args)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                      "kernel '%s': argument array is NULL",
                      kernel->manifest.name.c_str());
  return nullptr;
}

/// Checks the grid and fills in the job's grid fields.
kiln_status checkGrid(const kiln_kernel *kernel, const int64_t grid[3],
                      GridJob &job) {
  const Manifest &manifest = kernel->manifest;
  if (!grid)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT, "kernel '%s': grid is NULL",
                      manifest.name.c_str());
  for (int i = 0; i < 3; ++i) {
    if (grid[i] < 1 || grid[i] > INT32_MAX)
      return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                        "kernel '%s': grid[%d] is %" PRId64
                        ", each grid entry must be in [1, %d]",
                        manifest.name.c_str(), i, grid[i], INT32_MAX);
    if (i >= manifest.gridRank && grid[i] != 1)
      return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                        "kernel '%s': grid[%d] is %" PRId64
                        ", but the kernel has grid-rank %d (entries beyond "
                        "the rank must be 1)",
                        manifest.name.c_str(), i, grid[i], manifest.gridRank);
  }
  int64_t total;
  if (__builtin_mul_overflow(grid[0], grid[1], &total) ||
      __builtin_mul_overflow(total, grid[2], &total) || total > kMaxPrograms)
    return makeStatus(KILN_ERROR_LAUNCH,
                      "kernel '%s': grid %" PRId64 " x %" PRId64 " x %" PRId64
                      " has more than 2^62 program ids",
                      manifest.name.c_str(), grid[0], grid[1], grid[2]);
  job.gridX = static_cast<int32_t>(grid[0]);
  job.gridY = static_cast<int32_t>(grid[1]);
  job.gridZ = static_cast<int32_t>(grid[2]);
  job.total = total;
  return nullptr;
}

kiln_status argError(const kiln_kernel *kernel, size_t index,
                     const char *format, const std::string &detail) {
  const ArgSpec &spec = kernel->manifest.args[index];
  return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                    "kernel '%s': argument %zu ('%s'): %s%s",
                    kernel->manifest.name.c_str(), index, spec.name.c_str(),
                    format, detail.c_str());
}

kiln_status checkArg(const kiln_kernel *kernel, size_t index,
                     const kiln_arg &arg) {
  const ArgSpec &spec = kernel->manifest.args[index];
  if (arg.kind != spec.kind || arg.dtype != spec.dtype)
    return argError(kernel, index, "expected ",
                    std::string(argKindName(spec.kind)) + " " +
                        kiln_dtype_name(spec.dtype) + ", got " +
                        argKindName(arg.kind) + " " +
                        kiln_dtype_name(arg.dtype));
  if (spec.kind == KILN_ARG_PTR && !arg.value.ptr)
    return argError(kernel, index, "null pointer", "");
  if (spec.kind == KILN_ARG_SCALAR && spec.dtype == KILN_DTYPE_I1 &&
      arg.value.u8 > 1)
    return argError(kernel, index, "i1 value must be 0 or 1, got ",
                    std::to_string(arg.value.u8));
  return nullptr;
}

/// The pointer array a kernel gets: the arguments, then the scratch
/// buffer's slot when the kernel has one. Inline up to kInlineArgs entries.
class PackedArgs {
public:
  /// Room for numArgs entries, plus the scratch slot (pointing at
  /// scratchBase) if withScratch, plus the flags and `numMaps` tensor maps:
  /// the maps' bytes (`byValue`, the GPU) or pointers to them.
  void **prepare(size_t numArgs, bool withScratch, size_t numMaps = 0,
                 bool byValue = true) {
    size_t count = numArgs + (withScratch ? 1 : 0) + (numMaps ? 1 + numMaps : 0);
    void **entries = inlineEntries;
    if (count > kInlineArgs) {
      heapEntries.resize(count);
      entries = heapEntries.data();
    }
    size_t next = numArgs;
    if (withScratch)
      entries[next++] = &scratchBase;
    if (numMaps) {
      entries[next++] = &mapFlags;
      for (size_t i = 0; i < numMaps; ++i) {
        mapPointers[i] = maps[i].bytes;
        entries[next++] = byValue ? static_cast<void *>(maps[i].bytes)
                                  : static_cast<void *>(&mapPointers[i]);
      }
    }
    return entries;
  }

  /// The scratch buffer's base, passed to the kernel like a pointer
  /// argument.
  void *scratchBase = nullptr;
  /// The launch's tensor maps (encodeTensorMaps fills them).
  uint32_t mapFlags = 0;
  TensorMapBytes maps[32];
  void *mapPointers[32];

private:
  void *inlineEntries[kInlineArgs];
  std::vector<void *> heapEntries;
};

/// Bytes of scratch memory the whole grid needs (0 if the kernel takes
/// none).
kiln_status scratchSize(const kiln_kernel *kernel, const GridJob &job,
                        size_t &out) {
  out = 0;
  uint32_t perProgram = kernel->manifest.scratchBytes;
  if (perProgram == 0)
    return nullptr;
  if (__builtin_mul_overflow(static_cast<uint64_t>(job.total),
                             static_cast<uint64_t>(perProgram), &out) ||
      out > static_cast<uint64_t>(PTRDIFF_MAX))
    return makeStatus(KILN_ERROR_LAUNCH,
                      "kernel '%s': %" PRId64
                      " programs of %u bytes of scratch memory exceed the "
                      "address space",
                      kernel->manifest.name.c_str(), job.total, perProgram);
  return nullptr;
}

/// Scratch memory of a CPU launch, 128-byte aligned, freed at scope exit.
class CpuScratch {
public:
  CpuScratch() = default;
  CpuScratch(const CpuScratch &) = delete;
  CpuScratch &operator=(const CpuScratch &) = delete;
  ~CpuScratch() { std::free(base); }

  kiln_status allocate(const kiln_kernel *kernel, size_t bytes) {
    // bytes is a multiple of the alignment, as aligned_alloc wants.
    base = std::aligned_alloc(kScratchAlignment, bytes);
    if (!base)
      return makeStatus(KILN_ERROR_OUT_OF_MEMORY,
                        "kernel '%s': cannot allocate %zu bytes of scratch "
                        "memory (%u bytes per program)",
                        kernel->manifest.name.c_str(), bytes,
                        kernel->manifest.scratchBytes);
    return nullptr;
  }
  void *get() const { return base; }

private:
  void *base = nullptr;
};

/// Runs a validated job: inline when the pool cannot help.
kiln_status runJob(kiln_runtime *runtime, GridJob &job) {
  if (runtime->numThreads == 1 || job.total == 1) {
    runProgramRange(job, 0, job.total);
    return nullptr;
  }
  int64_t chunk = job.total / (runtime->numThreads * kChunksPerThread);
  job.chunk = chunk > 0 ? chunk : 1;
  try {
    runtime->pool.run(job);
  } catch (...) {
    // Only a failure to lock a mutex can land here, before any program ran.
    return makeStatus(KILN_ERROR_LAUNCH,
                      "kernel launch failed: cannot synchronize with the "
                      "thread pool");
  }
  return nullptr;
}

/// Runs validated, packed arguments (`packed` is `args`'s array, with the
/// scratch slot when the kernel has one) on the GPU or the pool.
kiln_status dispatch(kiln_runtime *runtime, kiln_kernel *kernel,
                     PackedArgs &args, void *const *packed, size_t scratchBytes,
                     const int64_t grid[3], const StreamChoice &stream,
                     GridJob &job) {
  if (kernel->isGpu())
    return cuda::launchGpuKernel(runtime->gpuStream, stream.external,
                                 stream.caller, kernel->gpu,
                                 kernel->manifest.name, packed, scratchBytes,
                                 &args.scratchBase, grid, stream.synchronize);
  // CPU kernels always run synchronously, so the scratch memory can be freed
  // when the job returns.
  CpuScratch scratch;
  if (scratchBytes > 0) {
    if (kiln_status status = scratch.allocate(kernel, scratchBytes))
      return status;
    args.scratchBase = scratch.get();
  }
  job.entry = kernel->code.entry;
  job.args = packed;
  if (!kernel->code.hasAsserts)
    return runJob(runtime, job);
  AssertState asserts;
  job.asserts = &asserts;
  if (kiln_status status = runJob(runtime, job))
    return status;
  if (asserts.failed.load())
    return makeStatus(KILN_ERROR_ASSERT,
                      "kernel '%s': device assertion failed %s",
                      kernel->manifest.name.c_str(), asserts.report.c_str());
  return nullptr;
}

/// The kernel's tensor maps for `args` into `packed` (nothing without
/// `tensor_map` lines). The driver's encoder runs with the runtime's context
/// current (its documented errors include CUDA_ERROR_INVALID_CONTEXT).
kiln_status encodeMaps(kiln_kernel *kernel, const kiln_arg *args,
                       PackedArgs &packed, const char *function) {
  const Manifest &m = kernel->manifest;
  if (m.tensorMaps.empty())
    return nullptr;
  std::optional<cuda::ScopedContext> context;
  if (kernel->isGpu()) {
    context.emplace(*kernel->gpu.driver);
    if (kiln_status status = context->enter(function))
      return status;
  }
  TensorMapEncoder encode =
      kernel->isGpu()
          ? cuda::tensorMapEncoder(kernel->gpu)
          : reinterpret_cast<TensorMapEncoder>(kernel->code.tensorMapEncoder);
  return encodeTensorMaps(m, args, encode,
                          kernel->isGpu()
                              ? "cuTensorMapEncodeTiled"
                              : "the emulator's kiln_emu_tensormap_encode",
                          packed.maps, packed.mapFlags);
}

/// Bytes of a packed scalar of `dtype` (kiln_launch_packed's values).
size_t scalarBytes(kiln_dtype dtype) {
  switch (dtype) {
  case KILN_DTYPE_I1:
  case KILN_DTYPE_I8:
  case KILN_DTYPE_U8:
    return 1;
  case KILN_DTYPE_I16:
  case KILN_DTYPE_F16:
  case KILN_DTYPE_BF16:
    return 2;
  case KILN_DTYPE_I32:
  case KILN_DTYPE_F32:
    return 4;
  default:
    return 8;
  }
}

/// kiln_launch, kiln_launch_async and kiln_launch_on_stream: validate, pack,
/// run.
kiln_status launchArgs(kiln_runtime *runtime, kiln_kernel *kernel,
                       const kiln_arg *args, size_t num_args,
                       const int64_t grid[3], const StreamChoice &stream,
                       const char *function) {
  try {
    if (kiln_status status = checkHandles(runtime, kernel, function))
      return status;
    if (kiln_status status = checkArity(kernel, num_args, args))
      return status;
    GridJob job;
    if (kiln_status status = checkGrid(kernel, grid, job))
      return status;
    for (size_t i = 0; i < num_args; ++i)
      if (kiln_status status = checkArg(kernel, i, args[i]))
        return status;
    size_t scratchBytes = 0;
    if (kiln_status status = scratchSize(kernel, job, scratchBytes))
      return status;
    if (stream.external && kernel->isGpu() && kernel->manifest.scratchBytes > 0)
      return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                        "%s: kernel '%s' uses scratch memory (launch "
                        "scratch_bytes %u), which belongs to the runtime's "
                        "stream: launch it without a stream",
                        function, kernel->manifest.name.c_str(),
                        kernel->manifest.scratchBytes);

    // Every union member starts at the union's address, so &value points at
    // the argument's value in the kernel ABI's sense: at the void* for a
    // pointer argument, at the scalar otherwise. GPU kernels take the same
    // packing (cuLaunchKernel's kernelParams); a device pointer is 64 bits
    // like a void*.
    PackedArgs packedArgs;
    const Manifest &m = kernel->manifest;
    void **packed = packedArgs.prepare(num_args, scratchBytes > 0,
                                       m.tensorMaps.size(), kernel->isGpu());
    for (size_t i = 0; i < num_args; ++i)
      packed[i] = const_cast<void *>(static_cast<const void *>(&args[i].value));
    if (kiln_status status = encodeMaps(kernel, args, packedArgs, function))
      return status;
    return dispatch(runtime, kernel, packedArgs, packed, scratchBytes, grid,
                    stream, job);
  } catch (const std::bad_alloc &) {
    return outOfMemoryStatus();
  } catch (...) {
    return makeStatus(KILN_ERROR_LAUNCH, "%s: unexpected error", function);
  }
}

} // namespace

extern "C" {

kiln_status kiln_launch(kiln_runtime *runtime, kiln_kernel *kernel,
                        const kiln_arg *args, size_t num_args,
                        const int64_t grid[3]) {
  return launchArgs(runtime, kernel, args, num_args, grid,
                    StreamChoice{true, false, nullptr}, "kiln_launch");
}

kiln_status kiln_launch_async(kiln_runtime *runtime, kiln_kernel *kernel,
                              const kiln_arg *args, size_t num_args,
                              const int64_t grid[3]) {
  return launchArgs(runtime, kernel, args, num_args, grid,
                    StreamChoice{false, false, nullptr}, "kiln_launch_async");
}

kiln_status kiln_launch_on_stream(kiln_runtime *runtime, kiln_kernel *kernel,
                                  const kiln_arg *args, size_t num_args,
                                  const int64_t grid[3], void *stream,
                                  int synchronize) {
  return launchArgs(runtime, kernel, args, num_args, grid,
                    StreamChoice{synchronize != 0, true,
                                 static_cast<cuda::CUstream>(stream)},
                    "kiln_launch_on_stream");
}

kiln_status kiln_synchronize(kiln_runtime *runtime) {
  if (!runtime)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                      "kiln_synchronize: runtime is NULL");
  try {
    return runtime->gpuStream.synchronize();
  } catch (const std::bad_alloc &) {
    return outOfMemoryStatus();
  } catch (...) {
    return makeStatus(KILN_ERROR_LAUNCH, "kiln_synchronize: unexpected error");
  }
}

kiln_status kiln_launch_packed(kiln_runtime *runtime, kiln_kernel *kernel,
                               void *const *arg_ptrs, size_t num_args,
                               const int64_t grid[3]) {
  try {
    if (kiln_status status =
            checkHandles(runtime, kernel, "kiln_launch_packed"))
      return status;
    if (kiln_status status = checkArity(kernel, num_args, arg_ptrs))
      return status;
    GridJob job;
    if (kiln_status status = checkGrid(kernel, grid, job))
      return status;
    for (size_t i = 0; i < num_args; ++i) {
      if (!arg_ptrs[i])
        return argError(kernel, i, "argument pointer is NULL", "");
      if (kernel->manifest.args[i].kind == KILN_ARG_PTR &&
          !*static_cast<void *const *>(arg_ptrs[i]))
        return argError(kernel, i, "null pointer", "");
    }
    size_t scratchBytes = 0;
    if (kiln_status status = scratchSize(kernel, job, scratchBytes))
      return status;
    // The caller's array is used as it is unless the scratch slot or the
    // tensor maps have to be appended. The maps are computed from the
    // values, read as the manifest's types.
    PackedArgs packedArgs;
    void *const *packed = arg_ptrs;
    const Manifest &m = kernel->manifest;
    if (scratchBytes > 0 || !m.tensorMaps.empty()) {
      void **extended = packedArgs.prepare(num_args, scratchBytes > 0,
                                           m.tensorMaps.size(), kernel->isGpu());
      std::copy(arg_ptrs, arg_ptrs + num_args, extended);
      packed = extended;
    }
    if (!m.tensorMaps.empty()) {
      std::vector<kiln_arg> values(num_args);
      for (size_t i = 0; i < num_args; ++i) {
        values[i].kind = m.args[i].kind;
        values[i].dtype = m.args[i].dtype;
        if (m.args[i].kind == KILN_ARG_PTR)
          values[i].value.ptr = *static_cast<void *const *>(arg_ptrs[i]);
        else
          std::memcpy(&values[i].value, arg_ptrs[i], scalarBytes(m.args[i].dtype));
      }
      if (kiln_status status =
              encodeMaps(kernel, values.data(), packedArgs, "kiln_launch_packed"))
        return status;
    }
    return dispatch(runtime, kernel, packedArgs, packed, scratchBytes, grid,
                    StreamChoice{true, false, nullptr}, job);
  } catch (const std::bad_alloc &) {
    return outOfMemoryStatus();
  } catch (...) {
    return makeStatus(KILN_ERROR_LAUNCH,
                      "kiln_launch_packed: unexpected error");
  }
}

} // extern "C"
