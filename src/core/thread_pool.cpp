#include "core/thread_pool.h"

#include <immintrin.h>
#include <sched.h>

namespace ds {

namespace {
// About 50-100 us of spinning before sleeping: long enough to cover the gap between two layers'
// parallel loops in a decode step, short enough not to starve HTTP threads when idle.
constexpr int kSpinIterations = 20000;
}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads < 1 ? 1 : num_threads) {
  for (int i = 1; i < num_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run(Task task, void* ctx) {
  if (num_threads_ == 1) {
    task(ctx, 0, 1);
    return;
  }
  task_ = task;
  ctx_ = ctx;
  remaining_.store(num_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  task(ctx, 0, num_threads_);
  int spins = 0;
  while (remaining_.load(std::memory_order_acquire) != 0) {
    if (++spins < kSpinIterations) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::worker(int index) {
  // Generation 0 is the state before the first run(); reading the counter here instead could
  // miss a run() that starts before this thread does.
  uint32_t seen = 0;
  for (;;) {
    int spins = 0;
    uint32_t g;
    while ((g = generation_.load(std::memory_order_acquire)) == seen) {
      if (++spins < kSpinIterations) {
        _mm_pause();
      } else {
        generation_.wait(seen, std::memory_order_acquire);
      }
    }
    seen = g;
    if (stop_.load(std::memory_order_relaxed)) return;
    task_(ctx_, index, num_threads_);
    remaining_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

int default_thread_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  unsigned n = std::thread::hardware_concurrency();
  return n ? int(n) : 1;
}

}  // namespace ds
