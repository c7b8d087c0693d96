//===- ThreadPool.h - Run a kernel grid on worker threads -------*- C++ -*-===//
//
// A fixed pool of workers that run one grid at a time. The launching thread
// takes part in the work, so a pool of N threads starts N - 1 workers.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_SRC_THREADPOOL_H
#define KILN_RUNTIME_SRC_THREADPOOL_H

#include "CodeLoader.h"
#include "DeviceAssert.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::rt {

/// One launch: the kernel, its packed arguments and the grid. Program ids are
/// numbered linearly, x fastest, and handed out in chunks from `next`.
struct GridJob {
  KernelFn entry = nullptr;
  void *const *args = nullptr;
  int32_t gridX = 1, gridY = 1, gridZ = 1;
  int64_t total = 0;
  int64_t chunk = 1;
  std::atomic<int64_t> next{0};
  /// Kernels with kiln.assert (DeviceAssert.h): each program runs guarded,
  /// and none starts after a failure.
  AssertState *asserts = nullptr;
};

/// Runs program ids [begin, end) of `job` on the calling thread.
void runProgramRange(const GridJob &job, int64_t begin, int64_t end);

class ThreadPool {
public:
  ThreadPool() = default;
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;
  ~ThreadPool();

  /// Starts `numWorkers` threads. Throws std::system_error (thread creation)
  /// or std::bad_alloc; on failure no thread is left running.
  void start(int numWorkers);

  int numWorkers() const { return static_cast<int>(workers.size()); }

  /// Runs every program id of `job` on the workers and the calling thread;
  /// returns when all have finished. Concurrent calls are serialized.
  void run(GridJob &job);

private:
  void workerLoop();
  void stop();

  std::vector<std::thread> workers;
  /// Held for a whole launch: one grid runs at a time.
  std::mutex launchMutex;

  /// Guards the fields below.
  std::mutex mutex;
  std::condition_variable wakeWorkers;
  std::condition_variable workersDone;
  GridJob *job = nullptr;
  /// How many more workers may join the current job. Only as many workers
  /// as there are chunks beyond the caller's first are woken, so a small
  /// grid does not pay for waking the whole pool.
  int openSlots = 0;
  /// Workers currently running chunks of `job`.
  int activeWorkers = 0;
  bool stopping = false;
};

} // namespace kiln::rt

#endif // KILN_RUNTIME_SRC_THREADPOOL_H
