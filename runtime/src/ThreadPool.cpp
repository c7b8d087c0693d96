//===- ThreadPool.cpp - Run a kernel grid on worker threads
//----------------===//
//
// Work distribution is dynamic (an atomic counter handing out chunks of
// program ids) because kernel programs are not uniform: masked edge tiles,
// sparse blocks and early exits make static partitioning leave threads idle.
//
// The job lives on the launching thread's stack. It stays valid because the
// launcher closes the open slots and waits until no worker is active before
// returning; a worker can only reach the job by claiming a slot.
//
//===----------------------------------------------------------------------===//

#include "ThreadPool.h"

namespace kiln::rt {

void runProgramRange(const GridJob &job, int64_t begin, int64_t end) {
  // Decompose once, then step: divisions per program id would dominate for
  // tiny kernels.
  int64_t plane = int64_t(job.gridX) * job.gridY;
  int32_t z = static_cast<int32_t>(begin / plane);
  int64_t rest = begin - int64_t(z) * plane;
  int32_t y = static_cast<int32_t>(rest / job.gridX);
  int32_t x = static_cast<int32_t>(rest - int64_t(y) * job.gridX);
  for (int64_t id = begin; id < end; ++id) {
    if (job.asserts) {
      if (job.asserts->failed.load(std::memory_order_relaxed) ||
          !runGuarded(job.entry, job.args, x, y, z, job.gridX, job.gridY,
                      job.gridZ, *job.asserts))
        return;
    } else {
      job.entry(job.args, x, y, z, job.gridX, job.gridY, job.gridZ);
    }
    if (++x == job.gridX) {
      x = 0;
      if (++y == job.gridY) {
        y = 0;
        ++z;
      }
    }
  }
}

namespace {

void runChunks(GridJob &job) {
  while (true) {
    if (job.asserts && job.asserts->failed.load(std::memory_order_relaxed))
      return;
    int64_t begin = job.next.fetch_add(job.chunk, std::memory_order_relaxed);
    if (begin >= job.total)
      return;
    int64_t end = job.total - begin < job.chunk ? job.total : begin + job.chunk;
    runProgramRange(job, begin, end);
  }
}

} // namespace

ThreadPool::~ThreadPool() { stop(); }

void ThreadPool::start(int numWorkers) {
  workers.reserve(static_cast<size_t>(numWorkers));
  try {
    for (int i = 0; i < numWorkers; ++i)
      workers.emplace_back([this] { workerLoop(); });
  } catch (...) {
    stop();
    throw;
  }
}

void ThreadPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  wakeWorkers.notify_all();
  for (std::thread &worker : workers)
    worker.join();
  workers.clear();
}

void ThreadPool::workerLoop() {
  std::unique_lock<std::mutex> lock(mutex);
  while (true) {
    wakeWorkers.wait(lock, [this] { return stopping || openSlots > 0; });
    if (stopping)
      return;
    --openSlots;
    ++activeWorkers;
    GridJob *current = job;
    lock.unlock();
    runChunks(*current);
    lock.lock();
    if (--activeWorkers == 0)
      workersDone.notify_one();
  }
}

void ThreadPool::run(GridJob &newJob) {
  std::lock_guard<std::mutex> launchLock(launchMutex);
  int64_t numChunks = (newJob.total + newJob.chunk - 1) / newJob.chunk;
  int helpers = numChunks - 1 < numWorkers() ? static_cast<int>(numChunks - 1)
                                             : numWorkers();
  if (helpers > 0) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      job = &newJob;
      openSlots = helpers;
    }
    if (helpers == numWorkers())
      wakeWorkers.notify_all();
    else
      for (int i = 0; i < helpers; ++i)
        wakeWorkers.notify_one();
  }

  runChunks(newJob);

  if (helpers > 0) {
    std::unique_lock<std::mutex> lock(mutex);
    // Workers that have not woken yet would find no work left; cancel them.
    openSlots = 0;
    workersDone.wait(lock, [this] { return activeWorkers == 0; });
    job = nullptr;
  }
}

} // namespace kiln::rt
