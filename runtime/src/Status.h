//===- Status.h - Error objects of the runtime's C API ----------*- C++ -*-===//
//
// Every fallible entry point of the runtime returns a kiln_status. Internal
// code builds them with makeStatus(), which never fails: when even the error
// object cannot be allocated, a static out-of-memory status is returned.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_SRC_STATUS_H
#define KILN_RUNTIME_SRC_STATUS_H

#include "kiln/runtime.h"

namespace kiln::rt {

/// Builds an error status with a printf-style message.
kiln_status makeStatus(kiln_status_code code, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

/// The status to return when an allocation failed (std::bad_alloc).
kiln_status outOfMemoryStatus();

} // namespace kiln::rt

#endif // KILN_RUNTIME_SRC_STATUS_H
