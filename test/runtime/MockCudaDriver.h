/*===- MockCudaDriver.h - Control API of the mock CUDA driver -----*- C -*-===*
 *
 * kiln-mock-cuda (MockCudaDriver.c) is a shared library that exports the CUDA
 * driver entry points the runtime uses (runtime/src/cuda/DriverSymbols.def),
 * for one fake device, and records what it is asked to do. Tests load it by
 * pointing KILN_CUDA_DRIVER at it, then reach the functions below through
 * dlopen/dlsym of the same path (the runtime's dlopen and theirs share one
 * copy).
 *
 * The device is configured from the environment when cuInit runs:
 *   KILN_MOCK_CUDA_CC       compute capability as major*10+minor (default 80)
 *   KILN_MOCK_CUDA_SHMEM    max opt-in shared memory per block (default
 *                           101376)
 *   KILN_MOCK_CUDA_DEVICES  device count (default 1; 0: cuInit fails with
 *                           CUDA_ERROR_NO_DEVICE)
 * and can be changed later with kiln_mock_set_device.
 *
 *===----------------------------------------------------------------------===*/

#ifndef KILN_TEST_RUNTIME_MOCKCUDADRIVER_H
#define KILN_TEST_RUNTIME_MOCKCUDADRIVER_H

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_MOCK_MAX_PARAMS 32

/* The last successful cuLaunchKernel. */
typedef struct kiln_mock_launch {
  int count; /* successful launches so far */
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;
  void *stream;
  char function[128];
  /* Parameter count and values, each zero-extended to 64 bits, sized by the
     PTX entry's .param declarations; -1 for a cubin (sizes unknown). */
  int num_params;
  unsigned long long params[KILN_MOCK_MAX_PARAMS];
} kiln_mock_launch;

typedef struct kiln_mock_counters {
  int module_loads;
  int module_unloads;
  int set_attribute_calls; /* cuFuncSetAttribute */
  int last_set_attribute;
  int last_set_attribute_value;
  int stream_creates;
  int stream_destroys;
  int stream_syncs;
  int live_allocations;
  int ctx_set_current_calls;
  /* Device memory (cuMemAlloc / cuMemFree), successful calls only. */
  int alloc_calls;
  unsigned long long last_alloc_size;
  unsigned long long last_alloc_pointer;
  int free_calls;
  unsigned long long last_free_pointer;
  /* stream_syncs when the last cuMemFree succeeded. */
  int syncs_at_last_free;
  /* cuMemFree calls made while some stream had launches queued since its
     last cuStreamSynchronize (memory a kernel may still be using). */
  int frees_with_pending_launches;
  int tensor_map_encodes; /* successful cuTensorMapEncodeTiled calls */
} kiln_mock_counters;

typedef const kiln_mock_launch *(*kiln_mock_last_launch_fn)(void);
typedef const kiln_mock_counters *(*kiln_mock_get_counters_fn)(void);
/* Sets the compute capability (major*10+minor) and max opt-in shared bytes. */
typedef void (*kiln_mock_set_device_fn)(int cc, int max_shared_optin);
/* The next call of the named entry point (e.g. "cuLaunchKernel") fails with
   `result` without doing anything. */
typedef void (*kiln_mock_fail_next_fn)(const char *call, int result);
/* Size of the live allocation starting exactly at `pointer`, 0 if none. */
typedef unsigned long long (*kiln_mock_allocation_size_fn)(
    unsigned long long pointer);

#ifdef __cplusplus
}
#endif

#endif /* KILN_TEST_RUNTIME_MOCKCUDADRIVER_H */
