/* A C program that runs a Kiln kernel with no LLVM, no MLIR and no Python at
 * run time: only the Kiln runtime and a header that kilnc generated.
 *
 *   kilnc examples/vector_add.mlir -o vector_add.kiln
 *   kilnc examples/vector_add.mlir --emit c-header -o vector_add_kernel.h
 *   cc vector_add_main.c -lkiln_runtime -o vector_add && ./vector_add vector_add.kiln
 *
 * The build does exactly this (examples/CMakeLists.txt) and runs it as a test.
 */
#include "vector_add_kernel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int fail(kiln_status st) {
  fprintf(stderr, "error: %s: %s\n",
          kiln_status_code_name(kiln_status_code_of(st)),
          kiln_status_message(st));
  kiln_status_free(st);
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s vector_add.kiln\n", argv[0]);
    return 2;
  }
  kiln_runtime *rt = NULL;
  kiln_kernel *kernel = NULL;
  kiln_status st = kiln_runtime_create(0, &rt);
  if (st)
    return fail(st);
  st = kiln_load_vector_add(argv[1], &kernel);
  if (st)
    return fail(st);

  const int64_t n = 100003; /* not a multiple of the kernel's 1024 tile */
  float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float)),
        *out = malloc(n * sizeof(float));
  for (int64_t i = 0; i < n; ++i) {
    x[i] = (float)i * 0.5f;
    y[i] = 1.0f - (float)i;
    out[i] = NAN;
  }
  st = kiln_launch_vector_add(rt, kernel, x, y, out, n, (n + 1023) / 1024, 1, 1);
  if (st)
    return fail(st);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if (!(fabs((double)out[i] - ((double)x[i] + (double)y[i])) <= 1e-3))
      ++bad;
  printf("vector_add over %lld elements on %d threads: %s\n", (long long)n,
         kiln_runtime_num_threads(rt), bad ? "MISMATCH" : "matches the reference");
  free(x);
  free(y);
  free(out);
  kiln_kernel_destroy(kernel);
  kiln_runtime_destroy(rt);
  return bad ? 1 : 0;
}
