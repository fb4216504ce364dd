#include "http/worker_pool.h"

#include <pthread.h>
#include <sched.h>
#include <spdlog/spdlog.h>

namespace ds::http {

WorkerPool::WorkerPool(int max_threads, bool batch_policy)
    : max_threads_(max_threads < 1 ? 1 : max_threads), batch_policy_(batch_policy) {}

WorkerPool::~WorkerPool() { shutdown(); }

void WorkerPool::submit(std::function<void()> task) {
  std::unique_lock<std::mutex> lk(mu_);
  if (stopping_) return;
  tasks_.push_back(std::move(task));
  // A new thread only when no idle one will take the task (idle_ counts threads waiting).
  if (idle_ < int(tasks_.size()) && int(threads_.size()) < max_threads_) {
    threads_.emplace_back([this] { run(); });
  } else {
    cv_.notify_one();
  }
}

void WorkerPool::run() {
  if (batch_policy_) {
    sched_param p{};
    pthread_setschedparam(pthread_self(), SCHED_BATCH, &p);
  }
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(lk, [&] { return stopping_ || !tasks_.empty(); });
    --idle_;
    if (tasks_.empty()) return;  // stopping, nothing left
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    ++busy_;
    lk.unlock();
    try {
      task();
    } catch (const std::exception& e) {
      // Handlers catch their own errors; this is the last line, so nothing ends the process.
      spdlog::error("http worker: uncaught exception: {}", e.what());
    } catch (...) {
      spdlog::error("http worker: uncaught exception");
    }
    task = nullptr;  // release what the task holds before counting it done
    lk.lock();
    --busy_;
  }
}

void WorkerPool::shutdown() {
  std::vector<std::thread> ts;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    ts.swap(threads_);
  }
  cv_.notify_all();
  for (auto& t : ts) t.join();
}

int WorkerPool::threads() const {
  std::lock_guard<std::mutex> lk(mu_);
  return int(threads_.size());
}

int WorkerPool::busy() const {
  std::lock_guard<std::mutex> lk(mu_);
  return busy_;
}

}  // namespace ds::http
