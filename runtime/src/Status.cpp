//===- Status.cpp - Error objects of the runtime's C API
//-------------------===//
//
// A status is one malloc'd block: the header followed by the message text, so
// that freeing it cannot fail half-way and building one allocates once.
//
//===----------------------------------------------------------------------===//

#include "Status.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

struct kiln_status_t {
  kiln_status_code code;
  const char *message;
};

namespace {
// Returned when the status itself cannot be allocated; never freed.
kiln_status_t oomStatus = {KILN_ERROR_OUT_OF_MEMORY, "out of memory"};
} // namespace

namespace kiln::rt {

kiln_status makeStatus(kiln_status_code code, const char *format, ...) {
  va_list args;
  va_start(args, format);
  va_list argsCopy;
  va_copy(argsCopy, args);
  int length = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  if (length < 0)
    length = 0;

  size_t bytes = sizeof(kiln_status_t) + static_cast<size_t>(length) + 1;
  auto *status = static_cast<kiln_status_t *>(std::malloc(bytes));
  if (!status) {
    va_end(argsCopy);
    return &oomStatus;
  }
  char *text = reinterpret_cast<char *>(status + 1);
  std::vsnprintf(text, static_cast<size_t>(length) + 1, format, argsCopy);
  va_end(argsCopy);
  status->code = code;
  status->message = text;
  return status;
}

kiln_status outOfMemoryStatus() { return &oomStatus; }

} // namespace kiln::rt

extern "C" {

kiln_status_code kiln_status_code_of(kiln_status status) {
  return status ? status->code : KILN_OK;
}

const char *kiln_status_message(kiln_status status) {
  return status ? status->message : "";
}

kiln_status kiln_status_create(kiln_status_code code, const char *message) {
  if (code == KILN_OK)
    return nullptr;
  return kiln::rt::makeStatus(code, "%s", message ? message : "");
}

void kiln_status_free(kiln_status status) {
  if (status && status != &oomStatus)
    std::free(status);
}

const char *kiln_status_code_name(kiln_status_code code) {
  switch (code) {
  case KILN_OK:
    return "KILN_OK";
  case KILN_ERROR_INVALID_ARGUMENT:
    return "KILN_ERROR_INVALID_ARGUMENT";
  case KILN_ERROR_IO:
    return "KILN_ERROR_IO";
  case KILN_ERROR_BAD_BUNDLE:
    return "KILN_ERROR_BAD_BUNDLE";
  case KILN_ERROR_CHECKSUM:
    return "KILN_ERROR_CHECKSUM";
  case KILN_ERROR_UNSUPPORTED_TARGET:
    return "KILN_ERROR_UNSUPPORTED_TARGET";
  case KILN_ERROR_MISSING_FEATURE:
    return "KILN_ERROR_MISSING_FEATURE";
  case KILN_ERROR_LOAD:
    return "KILN_ERROR_LOAD";
  case KILN_ERROR_LAUNCH:
    return "KILN_ERROR_LAUNCH";
  case KILN_ERROR_OUT_OF_MEMORY:
    return "KILN_ERROR_OUT_OF_MEMORY";
  case KILN_ERROR_NO_DEVICE:
    return "KILN_ERROR_NO_DEVICE";
  case KILN_ERROR_ASSERT:
    return "KILN_ERROR_ASSERT";
  }
  return "KILN_ERROR_UNKNOWN";
}

} // extern "C"
