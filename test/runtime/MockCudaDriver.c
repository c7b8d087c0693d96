/*===- MockCudaDriver.c - A fake libcuda for the runtime's tests ----------===*
 *
 * Implements the CUDA driver entry points of runtime/src/cuda/
 * DriverSymbols.def, under their exported (versioned) names, for one fake
 * device, so that the runtime's GPU path can be tested on machines without a
 * GPU. It behaves like the real driver where the runtime depends on it:
 *
 *  - every call but cuInit, cuDriverGetVersion and cuGetError* fails with
 *    CUDA_ERROR_NOT_INITIALIZED before cuInit;
 *  - module, launch, stream and memory calls need the primary context to be
 *    current on the calling thread (CUDA_ERROR_INVALID_CONTEXT otherwise);
 *  - cuModuleLoadDataEx takes PTX text (comments, then ".version") or an ELF
 *    image; PTX whose ".target sm_XY" is newer than the device fails with
 *    CUDA_ERROR_INVALID_PTX and a JIT log, a cubin whose e_flags low byte
 *    (a mock convention) names another architecture with
 *    CUDA_ERROR_NO_BINARY_FOR_GPU;
 *  - cuModuleGetFunction finds ".entry NAME" and reads its .param sizes, so
 *    cuLaunchKernel can record the parameter values the way the real driver
 *    copies them;
 *  - bad arguments give CUDA_ERROR_INVALID_VALUE / _INVALID_HANDLE.
 *
 * Device memory is host memory (256-byte aligned, like the driver's),
 * tracked so that frees and copies of unknown ranges fail; launches queued
 * on each stream since its last synchronization are counted, so that tests
 * can see memory freed under a kernel that may still run. The CUDA types are
 * declared here, independently of the runtime's, with cuda.h's numeric
 * values.
 *
 *===----------------------------------------------------------------------===*/

#include "MockCudaDriver.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct MockContext *CUcontext;
typedef struct MockModule *CUmodule;
typedef struct MockFunction *CUfunction;
typedef struct MockStream *CUstream;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_ASSERT = 710,
};

enum {
  ATTR_MAX_GRID_DIM_X = 5,
  ATTR_MAX_GRID_DIM_Y = 6,
  ATTR_MAX_GRID_DIM_Z = 7,
  ATTR_CC_MAJOR = 75,
  ATTR_CC_MINOR = 76,
  ATTR_MAX_SHARED_OPTIN = 97,
};

enum {
  FUNC_MAX_THREADS_PER_BLOCK = 0,
  FUNC_SHARED_SIZE_BYTES = 1,
  FUNC_NUM_REGS = 4,
  FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};

enum { JIT_ERROR_LOG_BUFFER = 5, JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6 };

struct MockContext {
  int unused;
};

struct MockFunction {
  struct MockFunction *next;
  struct MockModule *module;
  char name[128];
  int num_params; /* -1: unknown (cubin) */
  int param_sizes[KILN_MOCK_MAX_PARAMS];
  int max_dynamic_shared;
};

struct MockModule {
  struct MockModule *next;
  int is_elf;
  char *image; /* PTX text, or the ELF bytes */
  size_t size;
  struct MockFunction *functions;
};

struct MockStream {
  /* Launches queued since the last cuStreamSynchronize. */
  int pending;
};

struct Allocation {
  char *base;
  size_t size;
};

/*===----------------------------------------------------------------------===*
 * State
 *===----------------------------------------------------------------------===*/

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static int device_count = 1;
static int device_cc = 80;
static int device_shared_optin = 101376;
static struct MockContext primary_context;
static __thread CUcontext current_context;
static struct MockModule *modules;
static struct Allocation allocations[1024];
static kiln_mock_launch last_launch;
static kiln_mock_counters counters;
static char fail_call[64];
static CUresult fail_result;

static int env_int(const char *name, int fallback) {
  const char *value = getenv(name);
  return value && *value ? atoi(value) : fallback;
}

/* Fails the call if kiln_mock_fail_next named it. Called with the lock. */
static int injected_failure(const char *call, CUresult *result) {
  if (fail_call[0] && strcmp(fail_call, call) == 0) {
    fail_call[0] = '\0';
    *result = fail_result;
    return 1;
  }
  return 0;
}

/* The common prologue: lock, injected failure, cuInit done, context. */
#define ENTER(call, needs_context)                                             \
  CUresult result_ = CUDA_SUCCESS;                                             \
  pthread_mutex_lock(&mutex);                                                  \
  if (injected_failure(call, &result_))                                        \
    RETURN(result_);                                                           \
  if (!initialized)                                                            \
    RETURN(CUDA_ERROR_NOT_INITIALIZED);                                        \
  if ((needs_context) && current_context != &primary_context)                  \
  RETURN(CUDA_ERROR_INVALID_CONTEXT)

#define RETURN(value)                                                          \
  do {                                                                         \
    result_ = (value);                                                         \
    pthread_mutex_unlock(&mutex);                                              \
    return result_;                                                            \
  } while (0)

static struct MockModule *find_module(CUmodule module) {
  for (struct MockModule *m = modules; m; m = m->next)
    if (m == module)
      return m;
  return NULL;
}

static struct MockFunction *find_function(CUfunction function) {
  for (struct MockModule *m = modules; m; m = m->next)
    for (struct MockFunction *f = m->functions; f; f = f->next)
      if (f == function)
        return f;
  return NULL;
}

/* The allocation containing [pointer, pointer + size), or NULL. */
static struct Allocation *find_allocation(CUdeviceptr pointer, size_t size,
                                          int exact_base) {
  char *p = (char *)(uintptr_t)pointer;
  for (size_t i = 0; i < sizeof(allocations) / sizeof(allocations[0]); ++i) {
    struct Allocation *a = &allocations[i];
    if (!a->base)
      continue;
    if (exact_base ? p == a->base
                   : (p >= a->base && size <= a->size &&
                      (size_t)(p - a->base) <= a->size - size))
      return a;
  }
  return NULL;
}

/*===----------------------------------------------------------------------===*
 * Control API for the tests
 *===----------------------------------------------------------------------===*/

EXPORT const kiln_mock_launch *kiln_mock_last_launch(void) {
  return &last_launch;
}

EXPORT const kiln_mock_counters *kiln_mock_get_counters(void) {
  return &counters;
}

EXPORT void kiln_mock_set_device(int cc, int max_shared_optin) {
  pthread_mutex_lock(&mutex);
  device_cc = cc;
  device_shared_optin = max_shared_optin;
  pthread_mutex_unlock(&mutex);
}

EXPORT unsigned long long
kiln_mock_allocation_size(unsigned long long pointer) {
  pthread_mutex_lock(&mutex);
  struct Allocation *a = pointer ? find_allocation(pointer, 0, 1) : NULL;
  unsigned long long size = a ? (unsigned long long)a->size : 0;
  pthread_mutex_unlock(&mutex);
  return size;
}

EXPORT void kiln_mock_fail_next(const char *call, int result) {
  pthread_mutex_lock(&mutex);
  snprintf(fail_call, sizeof(fail_call), "%s", call ? call : "");
  fail_result = result;
  pthread_mutex_unlock(&mutex);
}

/*===----------------------------------------------------------------------===*
 * Initialization, devices, contexts
 *===----------------------------------------------------------------------===*/

EXPORT CUresult cuInit(unsigned int flags) {
  CUresult result_ = CUDA_SUCCESS;
  pthread_mutex_lock(&mutex);
  if (injected_failure("cuInit", &result_))
    RETURN(result_);
  if (flags != 0)
    RETURN(CUDA_ERROR_INVALID_VALUE);
  device_count = env_int("KILN_MOCK_CUDA_DEVICES", 1);
  device_cc = env_int("KILN_MOCK_CUDA_CC", 80);
  device_shared_optin = env_int("KILN_MOCK_CUDA_SHMEM", 101376);
  if (device_count <= 0)
    RETURN(CUDA_ERROR_NO_DEVICE);
  initialized = 1;
  RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuDriverGetVersion(int *version) {
  if (!version)
    return CUDA_ERROR_INVALID_VALUE;
  *version = 12040;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count) {
  ENTER("cuDeviceGetCount", 0);
  if (!count)
    RETURN(CUDA_ERROR_INVALID_VALUE);
  *count = device_count;
  RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  ENTER("cuDeviceGet", 0);
  if (!device)
    RETURN(CUDA_ERROR_INVALID_VALUE);
  if (ordinal < 0 || ordinal >= device_count)
    RETURN(CUDA_ERROR_INVALID_DEVICE);
  *device = ordinal;
  RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuDeviceGetName(char *name, int length, CUdevice device) {
  ENTER("cuDeviceGetName", 0);
  if (!name || length <= 0)
    RETURN(CUDA_ERROR_INVALID_VALUE);
  if (device < 0 || device >= device_count)
    RETURN(CUDA_ERROR_INVALID_DEVICE);
  snprintf(name, (size_t)length, "Kiln Mock GPU (sm_%d)", device_cc);
  RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuDeviceGetAttribute(int *value, int attribute,
                                     CUdevice device) {
  ENTER("cuDeviceGetAttribute", 0);
  if (!value)
    RETURN(CUDA_ERROR_INVALID_VALUE);
  if (device < 0 || device >= device_count)
    RETURN(CUDA_ERROR_INVALID_DEVICE);
  switch (attribute) {
  case ATTR_MAX_GRID_DIM_X:
    *value = 2147483647;
    break;
  case ATTR_MAX_GRID_DIM_Y:
  case ATTR_MAX_GRID_DIM_Z:
    *value = 65535;
    break;
  case ATTR_CC_MAJOR:
    *value = device_cc / 10;
    break;
  case ATTR_CC_MINOR:
    *value = device_cc % 10;
    break;
  case ATTR_MAX_SHARED_OPTIN:
    *value = device_shared_optin;
    break;
  default:
    RETURN(CUDA_ERROR_INVALID_VALUE);
  }
  RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *context,
                                         CUdevice device) {
  ENTER("cuDevicePrimaryCtxRetain", 0);
  if (!context)
    RETURN(CUDA_ERROR_INVALID_VALUE);
  if (device < 0 || device >= device_count)
    RETURN(CUDA_ERROR_INVALID_DEVICE);
  *context = &primary_context;
  RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *context) {
  ENTER("cuCtxGetCurrent", 0);
  if (!context)
    RETURN(CUDA_ERROR_INVALID_VALUE);
  *context = current_context;
  RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuCtxSetCurrent(CUcontext context) {
  ENTER("cuCtxSetCurrent", 0);
  if (context && context != &primary_context)
    RETURN(CUDA_ERROR_INVALID_CONTEXT);
  current_context = context;
  ++counters.ctx_set_current_calls;
  RETURN(CUDA_SUCCESS);
}

/*===----------------------------------------------------------------------===*
 * Modules and functions
 *===----------------------------------------------------------------------===*/

/* Copies `log` into the JIT error log buffer given in the options. */
static void write_jit_log(unsigned count, const int *options, void **values,
                          const char *log) {
  char *buffer = NULL;
  size_t size = 0;
  for (unsigned i = 0; options && values && i < count; ++i) {
    if (options[i] == JIT_ERROR_LOG_BUFFER)
      buffer = (char *)values[i];
    else if (options[i] == JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
      size = (size_t)(uintptr_t)values[i];
  }
  if (buffer && size > 0)
    snprintf(buffer, size, "%s", log);
}

/* Skips whitespace and // comments at the start of PTX text. */
static const char *skip_ptx_preamble(const char *text) {
  for (;;) {
    while (*text == ' ' || *text == '\t' || *text == '\n' || *text == '\r')
      ++text;
    if (text[0] == '/' && text[1] == '/') {
      while (*text && *text != '\n')
        ++text;
      continue;
    }
    return text;
  }
}

EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image,
                                   unsigned int num_options, int *options,
                                   void **option_values) {
  ENTER("cuModuleLoadDataEx", 1);
  if (!module || !image)
    RETURN(CUDA_ERROR_INVALID_VALUE);
  const unsigned char *bytes = (const unsigned char *)image;
  struct MockModule *m = calloc(1, sizeof(*m));
  if (!m)
    RETURN(CUDA_ERROR_OUT_OF_MEMORY);

  if (memcmp(bytes, "\177ELF", 4) == 0) {
    /* A cubin: the real driver finds the size in the ELF header, so do we
       (section headers end the file; at least the 64-byte header). */
    uint64_t shoff;
    uint16_t shentsize, shnum;
    uint32_t flags;
    uint16_t machine;
    memcpy(&machine, bytes + 18, 2);
    memcpy(&flags, bytes + 48, 4);
    memcpy(&shoff, bytes + 40, 8);
    memcpy(&shentsize, bytes + 58, 2);
    memcpy(&shnum, bytes + 60, 2);
    if (bytes[4] != 2 || machine != 190 || shoff > (1u << 30)) {
      free(m);
      RETURN(CUDA_ERROR_INVALID_IMAGE);
    }
    /* A mock convention (real cubins encode the architecture differently
       in e_flags): a non-zero low byte of e_flags is the architecture as
       major*10+minor, and must be the device's. */
    if ((flags & 0xff) != 0 && (int)(flags & 0xff) != device_cc) {
      free(m);
      RETURN(CUDA_ERROR_NO_BINARY_FOR_GPU);
    }
    m->is_elf = 1;
    m->size = shoff + (size_t)shentsize * shnum;
    if (m->size < 64)
      m->size = 64;
  } else {
    const char *text = skip_ptx_preamble((const char *)image);
    if (strncmp(text, ".version", 8) != 0) {
      write_jit_log(num_options, options, option_values,
                    "mock ptxas: input is neither PTX (.version) nor ELF");
      free(m);
      RETURN(CUDA_ERROR_INVALID_IMAGE);
    }
    const char *target = strstr(text, ".target sm_");
    if (target && atoi(target + 11) > device_cc) {
      char log[256];
      snprintf(log, sizeof(log),
               "ptxas application ptx input, line 2; fatal   : SM version "
               "specified by .target is higher than default SM version "
               "assumed\nptxas fatal   : Ptx assembly aborted due to errors\n");
      write_jit_log(num_options, options, option_values, log);
      free(m);
      RETURN(CUDA_ERROR_INVALID_PTX);
    }
    m->size = strlen((const char *)image) + 1;
  }
  m->image = malloc(m->size);
  if (!m->image) {
    free(m);
    RETURN(CUDA_ERROR_OUT_OF_MEMORY);
  }
  memcpy(m->image, image, m->size);
  m->next = modules;
  modules = m;
  ++counters.module_loads;
  *module = m;
  RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuModuleUnload(CUmodule module) {
  ENTER("cuModuleUnload", 1);
  struct MockModule **link = &modules;
  while (*link && *link != module)
    link = &(*link)->next;
  if (!*link)
    RETURN(CUDA_ERROR_INVALID_HANDLE);
  *link = module->next;
  for (struct MockFunction *f = module->functions, *next; f; f = next) {
    next = f->next;
    free(f);
  }
  free(module->image);
  free(module);
  ++counters.module_unloads;
  RETURN(CUDA_SUCCESS);
}

/* Size in bytes of a PTX parameter type (".u64" -> 8), 0 if unknown. */
static int ptx_type_size(const char *type) {
  if (type[0] != '.' || !strchr("usbf", type[1]))
    return 0;
  int bits = atoi(type + 2);
  return bits == 8 || bits == 16 || bits == 32 || bits == 64 ? bits / 8 : 0;
}

/* Finds ".entry NAME" in PTX text and reads its parameter sizes. */
static int parse_ptx_entry(const char *text, const char *name,
                           struct MockFunction *f) {
  size_t length = strlen(name);
  for (const char *at = strstr(text, ".entry "); at;
       at = strstr(at + 1, ".entry ")) {
    const char *p = at + 7;
    while (*p == ' ')
      ++p;
    if (strncmp(p, name, length) != 0 ||
        !(p[length] == '(' || p[length] == ' ' || p[length] == '\n'))
      continue;
    p += length;
    while (*p == ' ' || *p == '\n')
      ++p;
    f->num_params = 0;
    if (*p != '(')
      return 1;
    const char *end = strchr(p, ')');
    for (const char *param = strstr(p, ".param "); param && param < end;
         param = strstr(param + 1, ".param ")) {
      if (f->num_params == KILN_MOCK_MAX_PARAMS)
        return 0;
      int size = ptx_type_size(param + 7);
      if (!size && strncmp(param + 7, ".align ", 7) == 0) {
        /* a by-value array: ".param .align 64 .b8 NAME[128]" */
        const char *open = strchr(param, '[');
        const char *comma = strpbrk(param + 7, ",)");
        if (open && (!comma || open < comma))
          size = atoi(open + 1);
      }
      if (!size)
        return 0;
      f->param_sizes[f->num_params++] = size;
    }
    return 1;
  }
  return 0;
}

/* Whether `name` occurs as a string in an ELF image (e.g. its .strtab). */
static int elf_has_name(const struct MockModule *m, const char *name) {
  size_t length = strlen(name) + 1; /* with the NUL */
  for (size_t i = 0; i + length <= m->size; ++i)
    if (memcmp(m->image + i, name, length) == 0)
      return 1;
  return 0;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *function, CUmodule module,
                                    const char *name) {
  ENTER("cuModuleGetFunction", 1);
  if (!function || !name || strlen(name) >= sizeof(((CUfunction)0)->name))
    RETURN(CUDA_ERROR_INVALID_VALUE);
  struct MockModule *m = find_module(module);
  if (!m)
    RETURN(CUDA_ERROR_INVALID_HANDLE);
  struct MockFunction *f = calloc(1, sizeof(*f));
  if (!f)
    RETURN(CUDA_ERROR_OUT_OF_MEMORY);
  int found;
  if (m->is_elf) {
    found = elf_has_name(m, name);
    f->num_params = -1;
  } else {
    found = parse_ptx_entry(m->image, name, f);
  }
  if (!found) {
    free(f);
    RETURN(CUDA_ERROR_NOT_FOUND);
  }
  snprintf(f->name, sizeof(f->name), "%s", name);
  f->module = m;
  f->max_dynamic_shared = 48 * 1024;
  f->next = m->functions;
  m->functions = f;
  *function = f;
  RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuFuncGetAttribute(int *value, int attribute,
                                   CUfunction function) {
  ENTER("cuFuncGetAttribute", 0);
  struct MockFunction *f = find_function(function);
  if (!value)
    RETURN(CUDA_ERROR_INVALID_VALUE);
  if (!f)
    RETURN(CUDA_ERROR_INVALID_HANDLE);
  switch (attribute) {
  case FUNC_MAX_THREADS_PER_BLOCK:
    *value = env_int("KILN_MOCK_CUDA_MAX_THREADS", 1024);
    break;
  case FUNC_SHARED_SIZE_BYTES:
    *value = 0;
    break;
  case FUNC_NUM_REGS:
    *value = 32;
    break;
  case FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES:
    *value = f->max_dynamic_shared;
    break;
  default:
    RETURN(CUDA_ERROR_INVALID_VALUE);
  }
  RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuFuncSetAttribute(CUfunction function, int attribute,
                                   int value) {
  ENTER("cuFuncSetAttribute", 0);
  struct MockFunction *f = find_function(function);
  if (!f)
    RETURN(CUDA_ERROR_INVALID_HANDLE);
  if (attribute != FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES || value < 0 ||
      value > device_shared_optin)
    RETURN(CUDA_ERROR_INVALID_VALUE);
  f->max_dynamic_shared = value;
  ++counters.set_attribute_calls;
  counters.last_set_attribute = attribute;
  counters.last_set_attribute_value = value;
  RETURN(CUDA_SUCCESS);
}

/*===----------------------------------------------------------------------===*
 * Launches and streams
 *===----------------------------------------------------------------------===*/

static struct MockStream *streams[64];
/* Launches on the legacy default stream since its last synchronization. */
static int default_stream_pending;

static int known_stream(CUstream stream) {
  if (!stream)
    return 1; /* the legacy default stream */
  for (size_t i = 0; i < sizeof(streams) / sizeof(streams[0]); ++i)
    if (streams[i] == stream)
      return 1;
  return 0;
}

EXPORT CUresult cuLaunchKernel(CUfunction function, unsigned grid_x,
                               unsigned grid_y, unsigned grid_z,
                               unsigned block_x, unsigned block_y,
                               unsigned block_z, unsigned shared_bytes,
                               CUstream stream, void **params, void **extra) {
  ENTER("cuLaunchKernel", 1);
  struct MockFunction *f = find_function(function);
  if (!f || !known_stream(stream))
    RETURN(CUDA_ERROR_INVALID_HANDLE);
  if (grid_x == 0 || grid_y == 0 || grid_z == 0 || grid_x > 2147483647u ||
      grid_y > 65535 || grid_z > 65535)
    RETURN(CUDA_ERROR_INVALID_VALUE);
  if (block_x == 0 || block_y == 0 || block_z == 0 ||
      (unsigned long long)block_x * block_y * block_z > 1024)
    RETURN(CUDA_ERROR_INVALID_VALUE);
  if (shared_bytes > (unsigned)f->max_dynamic_shared)
    RETURN(CUDA_ERROR_INVALID_VALUE);
  if (extra || (f->num_params > 0 && !params))
    RETURN(CUDA_ERROR_INVALID_VALUE);

  kiln_mock_launch record;
  memset(&record, 0, sizeof(record));
  record.count = last_launch.count + 1;
  record.grid[0] = grid_x;
  record.grid[1] = grid_y;
  record.grid[2] = grid_z;
  record.block[0] = block_x;
  record.block[1] = block_y;
  record.block[2] = block_z;
  record.shared_bytes = shared_bytes;
  record.stream = stream;
  snprintf(record.function, sizeof(record.function), "%s", f->name);
  record.num_params = f->num_params;
  for (int i = 0; i < f->num_params; ++i) {
    if (!params[i])
      RETURN(CUDA_ERROR_INVALID_VALUE);
    /* Parameters wider than 8 bytes (tensor maps): their first 8 bytes. */
    size_t size = (size_t)f->param_sizes[i];
    memcpy(&record.params[i], params[i], size < 8 ? size : 8);
  }
  last_launch = record;
  if (stream)
    ++stream->pending;
  else
    ++default_stream_pending;
  RETURN(CUDA_SUCCESS);
}

/* Encodes nothing a GPU could use: the map's first word is the global
 * address, the second the rank, then the dimensions (what a launch records
 * of a by-value map parameter is its first word). Refuses what the driver
 * documents as invalid for the runtime's use: a misaligned map or address,
 * a rank outside 1..5, a box dimension outside 1..256. */
EXPORT CUresult cuTensorMapEncodeTiled(
    void *map, int data_type, unsigned rank, void *address,
    const unsigned long long *dims, const unsigned long long *strides,
    const unsigned *box, const unsigned *element_strides, int interleave,
    int swizzle, int l2, int fill) {
  ENTER("cuTensorMapEncodeTiled", 1);
  (void)data_type, (void)strides, (void)element_strides, (void)interleave;
  (void)swizzle, (void)l2, (void)fill;
  if (!map || (uintptr_t)map % 64 || (uintptr_t)address % 16 || rank < 1 ||
      rank > 5)
    RETURN(CUDA_ERROR_INVALID_VALUE);
  for (unsigned i = 0; i < rank; ++i)
    if (box[i] < 1 || box[i] > 256)
      RETURN(CUDA_ERROR_INVALID_VALUE);
  unsigned long long *w = (unsigned long long *)map;
  memset(map, 0, 128);
  w[0] = (unsigned long long)(uintptr_t)address;
  w[1] = rank;
  for (unsigned i = 0; i < rank; ++i)
    w[2 + i] = dims[i];
  ++counters.tensor_map_encodes;
  RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuStreamCreate(CUstream *stream, unsigned int flags) {
  ENTER("cuStreamCreate", 1);
  if (!stream || flags > 1)
    RETURN(CUDA_ERROR_INVALID_VALUE);
  for (size_t i = 0; i < sizeof(streams) / sizeof(streams[0]); ++i) {
    if (!streams[i]) {
      streams[i] = calloc(1, sizeof(struct MockStream));
      if (!streams[i])
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
      *stream = streams[i];
      ++counters.stream_creates;
      RETURN(CUDA_SUCCESS);
    }
  }
  RETURN(CUDA_ERROR_OUT_OF_MEMORY);
}

EXPORT CUresult cuStreamDestroy_v2(CUstream stream) {
  ENTER("cuStreamDestroy", 1);
  for (size_t i = 0; stream && i < sizeof(streams) / sizeof(streams[0]); ++i) {
    if (streams[i] == stream) {
      free(streams[i]);
      streams[i] = NULL;
      ++counters.stream_destroys;
      RETURN(CUDA_SUCCESS);
    }
  }
  RETURN(CUDA_ERROR_INVALID_HANDLE);
}

EXPORT CUresult cuStreamSynchronize(CUstream stream) {
  ENTER("cuStreamSynchronize", 1);
  if (!known_stream(stream))
    RETURN(CUDA_ERROR_INVALID_HANDLE);
  /* The legacy default stream synchronizes with the blocking streams, and
     they with it; the mock has only blocking streams. */
  if (stream) {
    stream->pending = 0;
    default_stream_pending = 0;
  } else {
    for (size_t i = 0; i < sizeof(streams) / sizeof(streams[0]); ++i)
      if (streams[i])
        streams[i]->pending = 0;
    default_stream_pending = 0;
  }
  ++counters.stream_syncs;
  RETURN(CUDA_SUCCESS);
}

/*===----------------------------------------------------------------------===*
 * Memory
 *===----------------------------------------------------------------------===*/

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *pointer, size_t size) {
  ENTER("cuMemAlloc", 1);
  if (!pointer || size == 0)
    RETURN(CUDA_ERROR_INVALID_VALUE);
  for (size_t i = 0; i < sizeof(allocations) / sizeof(allocations[0]); ++i) {
    if (!allocations[i].base) {
      /* The real driver aligns allocations to at least 256 bytes, and the
         runtime relies on it (scratch buffers). */
      void *base = NULL;
      if (posix_memalign(&base, 256, size) != 0)
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
      allocations[i].base = base;
      allocations[i].size = size;
      ++counters.live_allocations;
      ++counters.alloc_calls;
      counters.last_alloc_size = size;
      counters.last_alloc_pointer = (CUdeviceptr)(uintptr_t)base;
      *pointer = (CUdeviceptr)(uintptr_t)base;
      RETURN(CUDA_SUCCESS);
    }
  }
  RETURN(CUDA_ERROR_OUT_OF_MEMORY);
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr pointer) {
  ENTER("cuMemFree", 1);
  struct Allocation *a = find_allocation(pointer, 0, 1);
  if (!a)
    RETURN(CUDA_ERROR_INVALID_VALUE);
  free(a->base);
  a->base = NULL;
  a->size = 0;
  --counters.live_allocations;
  ++counters.free_calls;
  counters.last_free_pointer = pointer;
  counters.syncs_at_last_free = counters.stream_syncs;
  int pending = default_stream_pending;
  for (size_t i = 0; i < sizeof(streams) / sizeof(streams[0]); ++i)
    if (streams[i])
      pending += streams[i]->pending;
  if (pending)
    ++counters.frees_with_pending_launches;
  RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr destination, const void *source,
                                size_t size) {
  ENTER("cuMemcpyHtoD", 1);
  if (!source || !find_allocation(destination, size, 0))
    RETURN(CUDA_ERROR_INVALID_VALUE);
  memcpy((void *)(uintptr_t)destination, source, size);
  RETURN(CUDA_SUCCESS);
}

EXPORT CUresult cuMemcpyDtoH_v2(void *destination, CUdeviceptr source,
                                size_t size) {
  ENTER("cuMemcpyDtoH", 1);
  if (!destination || !find_allocation(source, size, 0))
    RETURN(CUDA_ERROR_INVALID_VALUE);
  memcpy(destination, (const void *)(uintptr_t)source, size);
  RETURN(CUDA_SUCCESS);
}

/*===----------------------------------------------------------------------===*
 * Errors
 *===----------------------------------------------------------------------===*/

static const struct {
  CUresult code;
  const char *name;
  const char *text;
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED",
     "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE",
     "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE",
     "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE",
     "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT",
     "invalid device context"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device"},
    {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX",
     "a PTX JIT compilation failed"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE",
     "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
     "too many resources requested for launch"},
    {CUDA_ERROR_ASSERT, "CUDA_ERROR_ASSERT", "device-side assert triggered"},
};

EXPORT CUresult cuGetErrorName(CUresult error, const char **name) {
  if (!name)
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); ++i) {
    if (errors[i].code == error) {
      *name = errors[i].name;
      return CUDA_SUCCESS;
    }
  }
  *name = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorString(CUresult error, const char **text) {
  if (!text)
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); ++i) {
    if (errors[i].code == error) {
      *text = errors[i].text;
      return CUDA_SUCCESS;
    }
  }
  *text = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}
