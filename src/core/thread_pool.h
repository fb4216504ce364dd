// A fork-join pool built for per-layer parallel loops in decode, where a step is a few hundred
// microseconds and the cost of waking threads decides the speed. Workers spin briefly on a
// generation counter, then sleep on it (futex via std::atomic::wait); the caller works as thread 0,
// so a one-thread pool has no synchronisation at all.
#pragma once
#include <atomic>
#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

namespace ds {

class ThreadPool {
 public:
  // fn(thread_index, num_threads): each thread runs it once per parallel call.
  using Task = void (*)(void* ctx, int thread, int nthreads);

  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return num_threads_; }

  // Runs task(ctx, t, n) on every thread t in [0, n) and returns when all are done.
  void run(Task task, void* ctx);

  // Convenience: fn(thread, nthreads) for any callable, without allocation.
  template <class F>
  void run(F&& fn) {
    run([](void* c, int t, int n) { (*static_cast<std::remove_reference_t<F>*>(c))(t, n); },
        static_cast<void*>(&fn));
  }

  // Splits [0, n) into contiguous ranges, one per thread, aligned to `align` items.
  template <class F>
  void parallel_for(size_t n, size_t align, F&& fn) {
    if (num_threads_ == 1 || n <= align) {
      fn(size_t(0), n);
      return;
    }
    run([&](int t, int nt) {
      size_t chunks = (n + align - 1) / align;
      size_t b = chunks * size_t(t) / size_t(nt) * align;
      size_t e = chunks * size_t(t + 1) / size_t(nt) * align;
      if (e > n) e = n;
      if (b < e) fn(b, e);
    });
  }

 private:
  void worker(int index);

  int num_threads_;
  std::vector<std::thread> threads_;
  Task task_ = nullptr;
  void* ctx_ = nullptr;
  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int> remaining_{0};
  std::atomic<bool> stop_{false};
};

// Threads to use by default: the cores this process may run on.
int default_thread_count();

}  // namespace ds
