//===- DeviceAssert.cpp - kiln.assert failures of CPU launches ------------===//
//
// The jump: sigsetjmp / siglongjmp without the signal mask, between frames
// of runGuarded (this file), the kernel's code (generated, no C++ objects)
// and, for emulated GPU kernels, the emulator's C code: no destructor is
// skipped. The hook's own objects are gone before it jumps.
//
//===----------------------------------------------------------------------===//

#include "DeviceAssert.h"

#include <csetjmp>
#include <cstdio>
#include <cstdlib>

namespace kiln::rt {

namespace {

struct Guard {
  sigjmp_buf env;
  AssertState *state;
};

thread_local Guard *current = nullptr;

} // namespace

extern "C" void kilnAssertHook(const char *message, const char *site,
                               int32_t pidX, int32_t pidY, int32_t pidZ,
                               int32_t thread) {
  Guard *guard = current;
  if (!guard) {
    // Only runGuarded runs kernels that have the hook; anything else is a
    // broken caller, and returning would run the accesses the assert guards.
    std::fprintf(stderr,
                 "kiln: device assertion failed at %s: %s (program (%d, %d, "
                 "%d)) outside a kiln launch\n",
                 site ? site : "?", message ? message : "", pidX, pidY, pidZ);
    std::abort();
  }
  {
    AssertState &state = *guard->state;
    std::lock_guard<std::mutex> lock(state.mutex);
    if (!state.failed.load(std::memory_order_relaxed)) {
      char where[96];
      if (thread >= 0)
        std::snprintf(where, sizeof where, "program (%d, %d, %d), thread %d",
                      pidX, pidY, pidZ, thread);
      else
        std::snprintf(where, sizeof where, "program (%d, %d, %d)", pidX, pidY,
                      pidZ);
      try {
        state.report = std::string("at ") + (site ? site : "?") + ": " +
                       (message && *message ? message : "(no message)") +
                       " (" + where + ")";
      } catch (...) {
        // Out of memory: the failure is still reported, without its text.
      }
      state.failed.store(true, std::memory_order_relaxed);
    }
  }
  siglongjmp(guard->env, 1);
}

bool runGuarded(KernelFn entry, void *const *args, int32_t x, int32_t y,
                int32_t z, int32_t gridX, int32_t gridY, int32_t gridZ,
                AssertState &state) {
  Guard guard;
  guard.state = &state;
  Guard *outer = current;
  current = &guard;
  if (sigsetjmp(guard.env, 0) != 0) {
    current = outer;
    return false;
  }
  entry(args, x, y, z, gridX, gridY, gridZ);
  current = outer;
  return true;
}

} // namespace kiln::rt
