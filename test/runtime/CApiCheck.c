/*===- CApiCheck.c - The runtime header compiles and works as C99 ---------===*/

#include "kiln/runtime.h"

#include <string.h>

int kiln_test_c_api_smoke(void);

int kiln_test_c_api_smoke(void) {
  kiln_runtime *runtime = NULL;
  kiln_kernel *kernel = NULL;
  kiln_status status;
  kiln_arg arg;
  int64_t grid[3] = {1, 1, 1};

  status = kiln_runtime_create(2, &runtime);
  if (status || kiln_runtime_num_threads(runtime) != 2)
    return 1;

  status = kiln_bundle_load_file("/nonexistent/kernel.kiln", &kernel);
  if (kiln_status_code_of(status) != KILN_ERROR_IO || kernel != NULL ||
      strstr(kiln_status_message(status), "nonexistent") == NULL)
    return 2;
  kiln_status_free(status);

  memset(&arg, 0, sizeof(arg));
  arg.kind = KILN_ARG_SCALAR;
  arg.dtype = KILN_DTYPE_F32;
  arg.value.f32 = 1.0f;
  status = kiln_launch(runtime, NULL, &arg, 1, grid);
  if (kiln_status_code_of(status) != KILN_ERROR_INVALID_ARGUMENT)
    return 3;
  kiln_status_free(status);

  /* The GPU helpers that need no driver. */
  if (kiln_device_free(NULL) != NULL || kiln_synchronize(runtime) != NULL ||
      kiln_kernel_is_gpu(NULL) != 0 ||
      strcmp(kiln_status_code_name(KILN_ERROR_NO_DEVICE),
             "KILN_ERROR_NO_DEVICE") != 0)
    return 4;

  kiln_runtime_destroy(runtime);
  return 0;
}
