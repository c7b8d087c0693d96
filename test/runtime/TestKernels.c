//===- TestKernels.c - Kernels for the runtime tests
//-----------------------===//
//
// Hand-written stand-ins for compiler output: each function follows the CPU
// kernel ABI of docs/bundle-format.md,
//   void ENTRY(void *const *args, int32_t pid_x, int32_t pid_y, int32_t pid_z,
//              int32_t grid_x, int32_t grid_y, int32_t grid_z);
//
//===----------------------------------------------------------------------===//

#define _GNU_SOURCE
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define KERNEL __attribute__((visibility("default"))) void

#define ARG(type, index) (*(type const *)args[index])

enum { kVaddBlock = 4 };

// arg x ptr f32, arg y ptr f32, arg out ptr f32, arg n scalar i32.
// Each program adds one block of kVaddBlock elements, masking the tail.
KERNEL kiln_entry_vadd(void *const *args, int32_t pid_x, int32_t pid_y,
                       int32_t pid_z, int32_t grid_x, int32_t grid_y,
                       int32_t grid_z) {
  (void)pid_y, (void)pid_z, (void)grid_x, (void)grid_y, (void)grid_z;
  const float *x = ARG(float *, 0);
  const float *y = ARG(float *, 1);
  float *out = ARG(float *, 2);
  int32_t n = ARG(int32_t, 3);
  for (int32_t i = pid_x * kVaddBlock; i < (pid_x + 1) * kVaddBlock && i < n;
       ++i)
    out[i] = x[i] + y[i];
}

// arg out ptr i32: 4 entries per program (x, y, z, times run), linear index
// x fastest. arg dims ptr i32: the grid as seen by program 0.
KERNEL kiln_entry_record(void *const *args, int32_t pid_x, int32_t pid_y,
                         int32_t pid_z, int32_t grid_x, int32_t grid_y,
                         int32_t grid_z) {
  int32_t *out = ARG(int32_t *, 0);
  int32_t *dims = ARG(int32_t *, 1);
  int64_t linear = ((int64_t)pid_z * grid_y + pid_y) * grid_x + pid_x;
  out[linear * 4 + 0] = pid_x;
  out[linear * 4 + 1] = pid_y;
  out[linear * 4 + 2] = pid_z;
  __atomic_fetch_add(&out[linear * 4 + 3], 1, __ATOMIC_RELAXED);
  if (linear == 0) {
    dims[0] = grid_x;
    dims[1] = grid_y;
    dims[2] = grid_z;
  }
}

// arg tids ptr i64: the OS thread id that ran each program.
// arg delay_us scalar i32: busy time per program, so that every thread of
// the pool gets to take part.
KERNEL kiln_entry_thread_ids(void *const *args, int32_t pid_x, int32_t pid_y,
                             int32_t pid_z, int32_t grid_x, int32_t grid_y,
                             int32_t grid_z) {
  (void)pid_y, (void)pid_z, (void)grid_x, (void)grid_y, (void)grid_z;
  int64_t *tids = ARG(int64_t *, 0);
  int32_t delay = ARG(int32_t, 1);
  tids[pid_x] = (int64_t)syscall(SYS_gettid);
  struct timespec pause = {0, (long)delay * 1000};
  nanosleep(&pause, 0);
}

// arg out ptr f64, then one scalar of every dtype: a i8, b i16, c i32,
// d i64, e f32, f f64, g u8, h i1, k bf16, l f16. Writes each as a double
// (16-bit floats as their raw bits) to check the scalar packing.
KERNEL kiln_entry_scalars(void *const *args, int32_t pid_x, int32_t pid_y,
                          int32_t pid_z, int32_t grid_x, int32_t grid_y,
                          int32_t grid_z) {
  (void)pid_x, (void)pid_y, (void)pid_z, (void)grid_x, (void)grid_y,
      (void)grid_z;
  double *out = ARG(double *, 0);
  out[0] = ARG(int8_t, 1);
  out[1] = ARG(int16_t, 2);
  out[2] = ARG(int32_t, 3);
  out[3] = (double)ARG(int64_t, 4);
  out[4] = ARG(float, 5);
  out[5] = ARG(double, 6);
  out[6] = ARG(uint8_t, 7);
  out[7] = ARG(uint8_t, 8);
  out[8] = ARG(uint16_t, 9);
  out[9] = ARG(uint16_t, 10);
}

// `launch scratch_bytes N`: arg out ptr i64, arg slot_bytes scalar i32 (N),
// then the hidden scratch buffer the runtime appends. Each program fills its
// slot, bytes [linear * N, +N), with its linear id, reads it back and
// records 3 entries: the slot's address, the slot's first word, and 1 if
// every word of the slot still held the id.
KERNEL kiln_entry_scratch(void *const *args, int32_t pid_x, int32_t pid_y,
                          int32_t pid_z, int32_t grid_x, int32_t grid_y,
                          int32_t grid_z) {
  (void)grid_z;
  int64_t *out = ARG(int64_t *, 0);
  int32_t slot_bytes = ARG(int32_t, 1);
  char *scratch = ARG(char *, 2);
  int64_t linear = ((int64_t)pid_z * grid_y + pid_y) * grid_x + pid_x;
  volatile int64_t *slot = (volatile int64_t *)(scratch + linear * slot_bytes);
  int64_t words = slot_bytes / (int64_t)sizeof(int64_t);
  for (int64_t i = 0; i < words; ++i)
    slot[i] = linear;
  int64_t intact = 1;
  for (int64_t i = 0; i < words; ++i)
    intact &= slot[i] == linear;
  out[linear * 3 + 0] = (int64_t)(intptr_t)slot;
  out[linear * 3 + 1] = slot[0];
  out[linear * 3 + 2] = intact;
}

// No arguments; counts its calls. For launch overhead measurements.
static int64_t nopCalls;
KERNEL kiln_entry_nop(void *const *args, int32_t pid_x, int32_t pid_y,
                      int32_t pid_z, int32_t grid_x, int32_t grid_y,
                      int32_t grid_z) {
  (void)args, (void)pid_x, (void)pid_y, (void)pid_z, (void)grid_x, (void)grid_y,
      (void)grid_z;
  __atomic_fetch_add(&nopCalls, 1, __ATOMIC_RELAXED);
}

// The emulator's tensor-map encoder, as emu-sm_XY bundles export it
// (kiln_emu_tensormap_encode, cuTensorMapEncodeTiled's parameters): this
// one records its arguments in the map's 128 bytes as int64 words: data
// type, rank, address, swizzle, then per dimension (dim, stride, box). Box 0
// of 3 is refused (error 1), to test the runtime's report.
__attribute__((visibility("default"))) int kiln_emu_tensormap_encode(
    void *map, int data_type, uint32_t rank, void *address,
    const uint64_t *dims, const uint64_t *strides, const uint32_t *box,
    const uint32_t *element_strides, int interleave, int swizzle, int l2,
    int fill) {
  (void)element_strides, (void)interleave, (void)l2, (void)fill;
  if (box[0] == 3)
    return 1;
  int64_t *w = (int64_t *)map;
  w[0] = data_type, w[1] = rank, w[2] = (int64_t)(intptr_t)address;
  w[3] = swizzle;
  for (uint32_t i = 0; i < rank && i < 4; ++i) {
    w[4 + 3 * i] = (int64_t)dims[i];
    w[5 + 3 * i] = i + 1 < rank ? (int64_t)strides[i] : 0;
    w[6 + 3 * i] = box[i];
  }
  return 0;
}

// Tensor maps (`tensor_map` lines): arg out ptr i64, arg base ptr f32, arg
// rows scalar i64, arg cols scalar i32, then the hidden flags (i32) and maps
// (a pointer to each one's 128 bytes). Program 0 copies the flags and the
// first three maps' 16 words to out.
KERNEL kiln_entry_maps(void *const *args, int32_t pid_x, int32_t pid_y,
                       int32_t pid_z, int32_t grid_x, int32_t grid_y,
                       int32_t grid_z) {
  (void)pid_y, (void)pid_z, (void)grid_x, (void)grid_y, (void)grid_z;
  if (pid_x != 0)
    return;
  int64_t *out = ARG(int64_t *, 0);
  out[0] = ARG(int32_t, 4);
  for (int m = 0; m < 3; ++m) {
    const int64_t *w = ARG(const int64_t *, 5 + m);
    out[1 + 16 * m] = (int64_t)((intptr_t)w % 64); // 64-byte aligned
    for (int i = 1; i < 16; ++i)
      out[1 + 16 * m + i] = w[i - 1];
  }
}
