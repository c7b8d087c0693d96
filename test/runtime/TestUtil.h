//===- TestUtil.h - Helpers shared by the runtime tests ---------*- C++ -*-===//

#ifndef KILN_TEST_RUNTIME_TESTUTIL_H
#define KILN_TEST_RUNTIME_TESTUTIL_H

#include "kiln/runtime.h"

#include <cstdlib>
#include <memory>
#include <string>

namespace kiln::test {

/// Owns a status; converts to its code and message for CHECKs.
struct Status {
  kiln_status status;
  explicit Status(kiln_status status) : status(status) {}
  ~Status() { kiln_status_free(status); }
  Status(const Status &) = delete;
  Status &operator=(const Status &) = delete;
  bool ok() const { return status == nullptr; }
  kiln_status_code code() const { return kiln_status_code_of(status); }
  std::string message() const { return kiln_status_message(status); }
};

struct KernelDeleter {
  void operator()(kiln_kernel *kernel) const { kiln_kernel_destroy(kernel); }
};
using KernelPtr = std::unique_ptr<kiln_kernel, KernelDeleter>;

struct RuntimeDeleter {
  void operator()(kiln_runtime *runtime) const {
    kiln_runtime_destroy(runtime);
  }
};
using RuntimePtr = std::unique_ptr<kiln_runtime, RuntimeDeleter>;

/// Sets an environment variable for the lifetime of the object.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name(name) {
    if (const char *old = std::getenv(name)) {
      hadOld = true;
      oldValue = old;
    }
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (hadOld)
      setenv(name, oldValue.c_str(), 1);
    else
      unsetenv(name);
  }

private:
  const char *name;
  bool hadOld = false;
  std::string oldValue;
};

inline kiln_arg ptrArg(void *ptr, kiln_dtype dtype) {
  kiln_arg arg{};
  arg.kind = KILN_ARG_PTR;
  arg.dtype = dtype;
  arg.value.ptr = ptr;
  return arg;
}

inline kiln_arg i32Arg(int32_t value) {
  kiln_arg arg{};
  arg.kind = KILN_ARG_SCALAR;
  arg.dtype = KILN_DTYPE_I32;
  arg.value.i32 = value;
  return arg;
}

inline kiln_arg i64Arg(int64_t value) {
  kiln_arg arg{};
  arg.kind = KILN_ARG_SCALAR;
  arg.dtype = KILN_DTYPE_I64;
  arg.value.i64 = value;
  return arg;
}

} // namespace kiln::test

#endif // KILN_TEST_RUNTIME_TESTUTIL_H
