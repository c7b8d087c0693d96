/*===- kiln/runtime.h - Kiln runtime C API -------------------------*- C -*-===*
 *
 * The Kiln runtime loads kernel bundles written by the Kiln compiler, checks
 * that this machine can run them, validates launch arguments against the
 * bundle's signature and runs the kernel over a 1-3D grid of program ids: on
 * a thread pool for CPU bundles, on an NVIDIA GPU for GPU bundles.
 *
 * Conventions:
 *  - This header is C99 and C++ compatible; the library has no LLVM/MLIR
 *    dependency and links only libc, libdl and pthread. The CUDA driver is
 *    loaded at run time (dlopen) the first time a GPU bundle or a kiln_cuda_*
 *    / kiln_device_* function needs it; without it everything CPU works and
 *    GPU requests fail with KILN_ERROR_NO_DEVICE.
 *  - Every fallible call returns a kiln_status. NULL means success; anything
 *    else is an error object owned by the caller, released with
 *    kiln_status_free(). No call aborts, asserts or throws into the caller.
 *  - Strings returned by query functions are owned by the object they were
 *    queried from and live as long as it does.
 *
 * The bundle file format is specified in docs/bundle-format.md.
 *
 *===----------------------------------------------------------------------===*/

#ifndef KILN_RUNTIME_H
#define KILN_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The newest bundle format version this runtime reads (it reads 1 to this):
 * version 2 bundles may declare `launch scratch_bytes`, version 3 bundles
 * `tensor_map`s. */
#define KILN_BUNDLE_FORMAT_VERSION 3

/* Version of the runtime library, e.g. "0.1.0". */
KILN_API const char *kiln_runtime_version(void);

/*===----------------------------------------------------------------------===*
 * Status
 *===----------------------------------------------------------------------===*/

typedef enum kiln_status_code {
  KILN_OK = 0,
  /* A NULL handle, a wrong argument count/kind/dtype, a bad grid, ... */
  KILN_ERROR_INVALID_ARGUMENT = 1,
  /* The bundle file could not be opened or read. */
  KILN_ERROR_IO = 2,
  /* The bundle is malformed: bad magic, unknown format version, truncated,
     inconsistent header, unparsable manifest. */
  KILN_ERROR_BAD_BUNDLE = 3,
  /* The bundle's checksum does not match its contents (corruption). */
  KILN_ERROR_CHECKSUM = 4,
  /* The bundle targets a machine or code kind this runtime cannot run, or a
     GPU architecture other than the device's, or needs more shared memory
     than the device has. */
  KILN_ERROR_UNSUPPORTED_TARGET = 5,
  /* This CPU (or the OS) lacks a feature the bundle requires. */
  KILN_ERROR_MISSING_FEATURE = 6,
  /* The kernel code could not be loaded (bad ELF, dlopen/dlsym failure, the
     CUDA driver refusing the module or entry). */
  KILN_ERROR_LOAD = 7,
  /* The launch could not run (e.g. the grid is too large). */
  KILN_ERROR_LAUNCH = 8,
  KILN_ERROR_OUT_OF_MEMORY = 9,
  /* No usable GPU: the CUDA driver is missing or unusable, it reports no
     device, or KILN_CUDA_DEVICE names one that does not exist. (New values
     are added at the end to keep the ABI.) */
  KILN_ERROR_NO_DEVICE = 10,
  /* A kiln.assert (Triton's device_assert) failed in a CPU or emulated GPU
     launch: the message names the assert's location and text and the
     program. The failing program stopped at the assert; other programs may
     or may not have run. On an NVIDIA GPU a failed assert aborts the
     kernel, and the CUDA call that reports it (CUDA_ERROR_ASSERT, from then
     on for the context) fails with this code too. */
  KILN_ERROR_ASSERT = 11
} kiln_status_code;

/* Opaque error object; NULL means success. */
typedef struct kiln_status_t *kiln_status;

/* KILN_OK for NULL, otherwise the error's code. */
KILN_API kiln_status_code kiln_status_code_of(kiln_status status);
/* "" for NULL, otherwise a human-readable, single-line message. The string is
   owned by the status object. */
KILN_API const char *kiln_status_message(kiln_status status);
/* Releases a status; NULL is accepted. */
KILN_API void kiln_status_free(kiln_status status);
/* Creates a status with `code` and a copy of `message` (for code that wraps
   the runtime, e.g. generated launchers); KILN_OK gives NULL. */
KILN_API kiln_status kiln_status_create(kiln_status_code code,
                                        const char *message);
/* Stable name of a code, e.g. "KILN_ERROR_CHECKSUM". */
KILN_API const char *kiln_status_code_name(kiln_status_code code);

/*===----------------------------------------------------------------------===*
 * Types of kernel arguments
 *===----------------------------------------------------------------------===*/

/* Element types, spelled in manifests as the lowercase suffix ("f32"). */
typedef enum kiln_dtype {
  KILN_DTYPE_F16 = 0,
  KILN_DTYPE_BF16 = 1,
  KILN_DTYPE_F32 = 2,
  KILN_DTYPE_F64 = 3,
  KILN_DTYPE_I1 = 4,
  KILN_DTYPE_I8 = 5,
  KILN_DTYPE_I16 = 6,
  KILN_DTYPE_I32 = 7,
  KILN_DTYPE_I64 = 8,
  KILN_DTYPE_U8 = 9
} kiln_dtype;

/* Manifest spelling of a dtype ("f32"); "?" for an out-of-range value. */
KILN_API const char *kiln_dtype_name(kiln_dtype dtype);
/* Size in bytes of one element (i1 is stored as one byte); 0 if invalid. */
KILN_API size_t kiln_dtype_size(kiln_dtype dtype);

typedef enum kiln_arg_kind {
  /* A pointer to memory holding elements of dtype: host memory for CPU
     kernels, a device pointer (CUdeviceptr, e.g. from kiln_device_alloc or
     torch's data_ptr()) for GPU kernels. */
  KILN_ARG_PTR = 0,
  /* A value of dtype passed by value. */
  KILN_ARG_SCALAR = 1
} kiln_arg_kind;

/* One launch argument. The union member to fill depends on kind and dtype:
     ptr           -> ptr
     scalar i8     -> i8       scalar i16  -> i16     scalar i32 -> i32
     scalar i64    -> i64      scalar u8   -> u8      scalar i1  -> u8 (0/1)
     scalar f32    -> f32      scalar f64  -> f64
     scalar f16/bf16 -> bits16 (the raw IEEE half / bfloat16 bits)          */
typedef struct kiln_arg {
  kiln_arg_kind kind;
  kiln_dtype dtype;
  union {
    void *ptr;
    int8_t i8;
    int16_t i16;
    int32_t i32;
    int64_t i64;
    uint8_t u8;
    float f32;
    double f64;
    uint16_t bits16;
  } value;
} kiln_arg;

/*===----------------------------------------------------------------------===*
 * CPU features
 *===----------------------------------------------------------------------===*/

/* Whether this host can run code using the named feature: the CPU has it, the
   OS saves its register state, and KILN_CPU_DISABLE does not mask it. Names:
   sse4.2 avx avx2 fma f16c avx512f avx512bw avx512vl avx512dq avx512cd
   avx512vnni avx512bf16 avx512fp16 amx-tile amx-bf16 amx-int8. Unknown names
   and NULL return 0.

   KILN_CPU_DISABLE (environment, e.g. "avx512f,amx-tile"; commas or spaces)
   masks features, to test fallbacks on a machine that has them. It is read at
   every query and every bundle load. */
KILN_API int kiln_cpu_has_feature(const char *name);

/* Space-separated list of the features this host has (after masking), in the
   order listed above. The string is valid until the next call of this
   function on the same thread. */
KILN_API const char *kiln_cpu_features_string(void);

/*===----------------------------------------------------------------------===*
 * Runtime (the thread pool)
 *===----------------------------------------------------------------------===*/

typedef struct kiln_runtime kiln_runtime;

/* Creates a runtime running launches on num_threads threads, the calling
   thread included (num_threads - 1 worker threads are started). 0 means: the
   KILN_NUM_THREADS environment variable if set, else the number of CPUs this
   process may run on. Negative values are refused. */
KILN_API kiln_status kiln_runtime_create(int num_threads, kiln_runtime **out);
/* Stops the workers. Must not be called while a launch is in progress.
   If GPU kernels with scratch memory ran on it, waits for its stream and
   frees the scratch buffer. NULL is accepted. */
KILN_API void kiln_runtime_destroy(kiln_runtime *runtime);
/* Threads a launch uses, the calling thread included; 0 for NULL. */
KILN_API int kiln_runtime_num_threads(const kiln_runtime *runtime);

/*===----------------------------------------------------------------------===*
 * Kernels (loaded bundles)
 *===----------------------------------------------------------------------===*/

typedef struct kiln_kernel kiln_kernel;

/* Loads a bundle: verifies the header and checksum, parses the manifest,
   refuses targets and CPU features this host lacks (requesting AMX state
   permission from the OS when the bundle needs amx-*), then loads the code
   and resolves the entry symbol. A `launch scratch_bytes` value that is not
   a multiple of 128 in [0, 1048576] is refused with KILN_ERROR_BAD_BUNDLE
   (any target).

   GPU bundles (target sm_XY or sm_XYa, code ptx or cubin) initialize the
   CUDA driver on first use and are refused with KILN_ERROR_NO_DEVICE when
   there is no driver or device, with KILN_ERROR_UNSUPPORTED_TARGET when the
   device has another architecture or too little shared memory, and with
   KILN_ERROR_LOAD naming the CUDA call and error when the driver refuses
   the code. */
KILN_API kiln_status kiln_bundle_load_file(const char *path, kiln_kernel **out);
/* Same, from a bundle in memory; the bytes are not referenced afterwards. */
KILN_API kiln_status kiln_bundle_load_memory(const void *data, size_t size,
                                             kiln_kernel **out);
/* Unloads the kernel. Must not be called while it is being launched.
   NULL is accepted. */
KILN_API void kiln_kernel_destroy(kiln_kernel *kernel);

/* Manifest fields. Each returns "" (or 0) for a NULL kernel. */
KILN_API const char *kiln_kernel_name(const kiln_kernel *kernel);
KILN_API const char *kiln_kernel_entry(const kiln_kernel *kernel);
KILN_API const char *kiln_kernel_target(const kiln_kernel *kernel);
/* The `compiler` line's value, "" if the manifest has none. */
KILN_API const char *kiln_kernel_compiler(const kiln_kernel *kernel);
KILN_API int kiln_kernel_grid_rank(const kiln_kernel *kernel);
/* 1 for a GPU kernel (its pointer arguments are device pointers), 0 for a
   CPU kernel or NULL. */
KILN_API int kiln_kernel_is_gpu(const kiln_kernel *kernel);
/* The bundle's `launch scratch_bytes` (scratch memory per program; such a
   GPU kernel launches only on the runtime's stream, see
   kiln_launch_on_stream), 0 for none or NULL. */
KILN_API uint32_t kiln_kernel_scratch_bytes(const kiln_kernel *kernel);

/* The required CPU features; kiln_kernel_feature returns NULL out of range. */
KILN_API size_t kiln_kernel_num_features(const kiln_kernel *kernel);
KILN_API const char *kiln_kernel_feature(const kiln_kernel *kernel,
                                         size_t index);

/* The signature. */
typedef struct kiln_arg_info {
  const char *name; /* owned by the kernel */
  kiln_arg_kind kind;
  kiln_dtype dtype;
} kiln_arg_info;

KILN_API size_t kiln_kernel_num_args(const kiln_kernel *kernel);
/* KILN_ERROR_INVALID_ARGUMENT if kernel or out is NULL or index is out of
   range. */
KILN_API kiln_status kiln_kernel_arg_info(const kiln_kernel *kernel,
                                          size_t index, kiln_arg_info *out);

/* Whether the kernel may write through argument `index` (the manifest's
   `writes` line): 1 if it may, 0 if it does not (always 0 for scalars), -1
   when the bundle does not say (written before the line existed) or kernel
   is NULL or index out of range. A caller holding read-only memory (a
   read-only numpy array, a mapping opened read-only) passes it only where
   this is 0. */
KILN_API int kiln_kernel_arg_written(const kiln_kernel *kernel, size_t index);

/* `launch KEY VALUE` lines (e.g. num_warps 4), kept for drivers that need
   them. kiln_kernel_launch_param returns the value for key, NULL if absent.
   kiln_kernel_launch_param_key enumerates keys in manifest order (NULL out of
   range). */
KILN_API const char *kiln_kernel_launch_param(const kiln_kernel *kernel,
                                              const char *key);
KILN_API size_t kiln_kernel_num_launch_params(const kiln_kernel *kernel);
KILN_API const char *kiln_kernel_launch_param_key(const kiln_kernel *kernel,
                                                  size_t index);

/*===----------------------------------------------------------------------===*
 * Launch
 *===----------------------------------------------------------------------===*/

/* Runs the kernel for every program id in grid[0] x grid[1] x grid[2]
   (x fastest) and returns when all have finished.

   Validates: runtime and kernel are non-NULL; num_args equals the signature's
   arity; each argument's kind and dtype equal the signature's; pointer
   arguments are non-NULL; i1 scalars are 0 or 1; each grid entry is in
   [1, INT32_MAX] and entries beyond the kernel's grid rank are 1.

   Launches from several threads on one runtime are safe: launches that need
   the pool are serialized (one runs at a time, each on all threads). A
   launch of a single program, or on a one-thread runtime, runs inline on the
   calling thread and does not wait for the pool. A kernel must not launch on
   the runtime that is running it.

   GPU kernels: the same validation (a pointer argument is a device pointer;
   any non-NULL value is accepted), and each grid entry must be within the
   device's grid limits. The kernel runs with gridDim = grid and blockDim =
   (32 * num_warps, 1, 1) on a stream the runtime owns (created on the first
   GPU launch, ordered with the legacy default stream), and kiln_launch
   waits for it (cuStreamSynchronize), so errors the kernel raises are
   reported here and its results are visible when it returns.

   Scratch memory: a kernel whose bundle has `launch scratch_bytes N` (N > 0)
   gets one hidden pointer argument after those of its signature (which
   num_args, the arity check and kiln_kernel_num_args do not count): a
   128-byte aligned buffer of N bytes per program id, program (x, y, z) at
   offset ((z * grid[1] + y) * grid[0] + x) * N, with unspecified contents.
   This function and kiln_launch_packed / kiln_launch_async append it. CPU
   kernels get host memory allocated for the launch (KILN_ERROR_OUT_OF_MEMORY
   if that fails); GPU kernels get device memory that the runtime keeps and
   reuses, grown when a launch needs more (after waiting for the kernels
   already queued on the runtime's stream). A grid whose scratch memory
   would not fit the address space is refused with KILN_ERROR_LAUNCH. See
   docs/bundle-format.md, "Scratch memory".

   Tensor maps: a kernel whose bundle has `tensor_map` lines gets, after
   those (and after the scratch), an i32 of flags and one TMA tensor map per
   line, which every launch function computes from the arguments and
   encodes (cuTensorMapEncodeTiled on a GPU); docs/bundle-format.md,
   "Tensor maps". */
KILN_API kiln_status kiln_launch(kiln_runtime *runtime, kiln_kernel *kernel,
                                 const kiln_arg *args, size_t num_args,
                                 const int64_t grid[3]);

/* The fast path: arg_ptrs is already in the kernel ABI's packing, i.e.
   arg_ptrs[i] points at the i-th argument's value (for a pointer argument, at
   a void* holding the data pointer). Only arity, non-NULL-ness and the grid
   are checked; kinds and dtypes are the caller's responsibility. The
   scratch buffer of a kernel with `launch scratch_bytes` and the tensor maps
   of one with `tensor_map` lines (computed from the values arg_ptrs point
   at, read as the signature's types) are appended by the runtime, as for
   kiln_launch: arg_ptrs holds the signature's arguments only. */
KILN_API kiln_status kiln_launch_packed(kiln_runtime *runtime,
                                        kiln_kernel *kernel,
                                        void *const *arg_ptrs, size_t num_args,
                                        const int64_t grid[3]);

/* kiln_launch without waiting for a GPU kernel to finish: it is queued on the
   runtime's stream and the call returns; kiln_synchronize waits for it and
   reports errors raised while it ran. The arguments are copied, the memory
   they point to must stay valid until then. CPU kernels run to completion as
   with kiln_launch. */
KILN_API kiln_status kiln_launch_async(kiln_runtime *runtime,
                                       kiln_kernel *kernel,
                                       const kiln_arg *args, size_t num_args,
                                       const int64_t grid[3]);
/* kiln_launch_async on a stream of the caller's: a GPU kernel is queued on
   `stream`, a CUstream (cudaStream_t) of the runtime's device in its primary
   context, such as PyTorch's current stream (torch.cuda.current_stream()
   .cuda_stream); NULL is the legacy default stream. With `synchronize`
   nonzero the call then waits for that stream (cuStreamSynchronize) and
   reports the kernel's errors; otherwise it returns once the kernel is
   queued, and the caller orders and waits through its stream:
   kiln_synchronize does not wait for it. Nothing else is queued or waited
   for (the tensor maps are encoded on the host and travel as parameters),
   so with `synchronize` 0 such a launch can be captured into a CUDA graph
   (waiting on a capturing stream is an error), once the kernel has been
   loaded; the kernel must outlive the graph (destroying it unloads its
   module), and the argument memory too. A GPU kernel with scratch memory
   (kiln_kernel_scratch_bytes > 0) is refused with
   KILN_ERROR_INVALID_ARGUMENT before anything is queued or encoded: its
   buffer belongs to the runtime's stream. CPU kernels ignore the stream and
   run to completion as with kiln_launch. */
KILN_API kiln_status kiln_launch_on_stream(kiln_runtime *runtime,
                                           kiln_kernel *kernel,
                                           const kiln_arg *args,
                                           size_t num_args,
                                           const int64_t grid[3],
                                           void *stream, int synchronize);
/* Waits for the GPU kernels launched on this runtime's own stream; returns
   at once if there were none. */
KILN_API kiln_status kiln_synchronize(kiln_runtime *runtime);

/*===----------------------------------------------------------------------===*
 * CUDA devices and memory
 *
 * Helpers for hosts and tests that have no CUDA dependency of their own. The
 * first call of any of them (or the first GPU bundle load) loads the driver:
 * dlopen("libcuda.so.1"), or $KILN_CUDA_DRIVER when set; calls cuInit; picks
 * device $KILN_CUDA_DEVICE (default 0) and retains its primary context (the
 * one the CUDA runtime, PyTorch and Triton use, so device pointers are
 * interchangeable with theirs). This happens once per process, thread-safe;
 * its outcome, success or failure, is cached, so later changes of those
 * variables have no effect.
 *
 * Every function makes the runtime's context current for its duration and
 * restores the caller's afterwards.
 *===----------------------------------------------------------------------===*/

/* Initializes the driver (once) and returns why GPU kernels cannot run:
   NULL if they can, else e.g. KILN_ERROR_NO_DEVICE "CUDA driver not found
   (libcuda.so.1): ...". */
KILN_API kiln_status kiln_cuda_init(void);
/* 1 if GPU kernels can run, else 0 with the reason copied (truncated,
   NUL-terminated) into message when message is non-NULL and size > 0. */
KILN_API int kiln_cuda_available(char *message, size_t size);
/* The device's name (e.g. "NVIDIA H200"), truncated to size - 1 bytes. */
KILN_API kiln_status kiln_cuda_device_name(char *name, size_t size);
/* The device's compute capability, e.g. 9 and 0 for sm_90. */
KILN_API kiln_status kiln_cuda_compute_capability(int *major, int *minor);

/* Device memory (cuMemAlloc). Device pointers are passed as void*; they are
   not dereferenceable on the host. size 0 is refused. */
KILN_API kiln_status kiln_device_alloc(size_t size, void **out);
/* NULL is accepted (and does not load the driver). */
KILN_API kiln_status kiln_device_free(void *device_ptr);
/* Synchronous copies; size 0 does nothing. */
KILN_API kiln_status kiln_device_copy_to_device(void *device_dst,
                                                const void *host_src,
                                                size_t size);
KILN_API kiln_status kiln_device_copy_from_device(void *host_dst,
                                                  const void *device_src,
                                                  size_t size);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KILN_RUNTIME_H */
