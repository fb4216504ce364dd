// The threads that run request handlers which may block (generation waits on the engine for a
// whole response; tokenizing a large body takes a while), so that the I/O threads never do.
// Threads start on demand, up to a maximum, and stay; tasks beyond the maximum queue. The queue
// is bounded by the transport itself: a connection has at most one request in a handler.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ds::http {

class WorkerPool {
 public:
  // batch_policy: the threads run as SCHED_BATCH (see HttpServer for why that is an option).
  WorkerPool(int max_threads, bool batch_policy);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void submit(std::function<void()> task);
  // Runs what is queued, then joins every thread. submit() after shutdown() drops the task.
  void shutdown();

  int threads() const;
  int busy() const;

 private:
  void run();

  const int max_threads_;
  const bool batch_policy_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  int idle_ = 0, busy_ = 0;
  bool stopping_ = false;
};

}  // namespace ds::http
