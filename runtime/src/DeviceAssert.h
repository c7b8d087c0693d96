//===- DeviceAssert.h - kiln.assert failures of CPU launches ----*- C++ -*-===//
//
// A CPU (or emulated GPU) kernel compiled with kiln.assert exports
// `kiln_assert_hook` (an i64 holding a function pointer; docs/bundle-format.md,
// "Kernel ABI"). The loader stores assertHook's address there. A failing
// assert calls it from the program's thread; it records the first failure
// of the launch and jumps back to where runGuarded started that program, so
// the program stops at the assert (the accesses an assert guards never run)
// and the grid stops handing out programs.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_SRC_DEVICEASSERT_H
#define KILN_RUNTIME_SRC_DEVICEASSERT_H

#include "CodeLoader.h"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

namespace kiln::rt {

/// The failures of one launch: set once, by the first failing program.
struct AssertState {
  std::atomic<bool> failed{false};
  std::mutex mutex;
  std::string report; // "at SITE: MESSAGE (program (x, y, z)[, thread t])"
};

/// What kernels call through kiln_assert_hook (C ABI): `thread` is the
/// emulated GPU thread, or -1.
extern "C" void kilnAssertHook(const char *message, const char *site,
                               int32_t pidX, int32_t pidY, int32_t pidZ,
                               int32_t thread);

/// Runs one program; false when a kiln.assert failed in it (recorded in
/// `state`).
bool runGuarded(KernelFn entry, void *const *args, int32_t x, int32_t y,
                int32_t z, int32_t gridX, int32_t gridY, int32_t gridZ,
                AssertState &state);

} // namespace kiln::rt

#endif // KILN_RUNTIME_SRC_DEVICEASSERT_H
