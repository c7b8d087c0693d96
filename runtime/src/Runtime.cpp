//===- Runtime.cpp - Create and destroy kiln runtimes
//----------------------===//
//
// The thread count defaults to the CPUs this process may run on (its
// affinity mask), not the machine's CPU count: under taskset, cgroups-pinned
// containers or a job scheduler, more threads than that only time-slice.
//
//===----------------------------------------------------------------------===//

#include "Runtime.h"
#include "Status.h"

#include <cerrno>
#include <cstdlib>
#include <memory>
#include <new>
#include <system_error>

#if defined(__linux__)
#include <sched.h>
#endif

using namespace kiln::rt;

namespace {

/// More threads than this is a mistake, not a configuration.
constexpr int kMaxThreads = 4096;

int availableCpus() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int count = CPU_COUNT(&set);
    if (count > 0)
      return count;
  }
#endif
  unsigned count = std::thread::hardware_concurrency();
  return count > 0 ? static_cast<int>(count) : 1;
}

kiln_status resolveThreadCount(int requested, int &out) {
  if (requested < 0)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                      "kiln_runtime_create: num_threads is %d, must be >= 0 "
                      "(0 picks a default)",
                      requested);
  if (requested > 0) {
    out = requested;
  } else if (const char *env = std::getenv("KILN_NUM_THREADS"); env && *env) {
    char *end = nullptr;
    errno = 0;
    long value = std::strtol(env, &end, 10);
    if (errno != 0 || *end != '\0' || value < 1 || value > kMaxThreads)
      return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                        "KILN_NUM_THREADS is '%s', must be an integer in "
                        "[1, %d]",
                        env, kMaxThreads);
    out = static_cast<int>(value);
  } else {
    out = availableCpus();
  }
  if (out > kMaxThreads)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                      "kiln_runtime_create: %d threads requested, at most %d "
                      "supported",
                      out, kMaxThreads);
  return nullptr;
}

} // namespace

extern "C" {

const char *kiln_runtime_version(void) { return "0.1.0"; }

kiln_status kiln_runtime_create(int num_threads, kiln_runtime **out) {
  if (!out)
    return makeStatus(KILN_ERROR_INVALID_ARGUMENT,
                      "kiln_runtime_create: out is NULL");
  *out = nullptr;
  int numThreads = 0;
  if (kiln_status status = resolveThreadCount(num_threads, numThreads))
    return status;
  try {
    auto runtime = std::make_unique<kiln_runtime>();
    runtime->numThreads = numThreads;
    runtime->pool.start(numThreads - 1);
    *out = runtime.release();
    return nullptr;
  } catch (const std::bad_alloc &) {
    return outOfMemoryStatus();
  } catch (const std::system_error &error) {
    return makeStatus(KILN_ERROR_OUT_OF_MEMORY,
                      "kiln_runtime_create: cannot start %d worker threads: "
                      "%s",
                      numThreads - 1, error.what());
  } catch (...) {
    return makeStatus(KILN_ERROR_OUT_OF_MEMORY,
                      "kiln_runtime_create: cannot start worker threads");
  }
}

void kiln_runtime_destroy(kiln_runtime *runtime) {
  // ~ThreadPool joins the workers; it cannot throw.
  delete runtime;
}

int kiln_runtime_num_threads(const kiln_runtime *runtime) {
  return runtime ? runtime->numThreads : 0;
}

} // extern "C"
