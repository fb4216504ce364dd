// Dynamic work sharing over independent items (sequence x head pairs, tokens): uneven items
// (a 2048-token prefill beside decode rows) balance across threads by taking the next one.
#pragma once
#include <atomic>
#include <utility>

#include "core/thread_pool.h"

namespace ds {

// Items whose total work (count x work_per_item, in rough multiply-adds) is below this run on
// the calling thread: a fork-join costs microseconds, more on a busy machine.
constexpr double kParallelMinWork = 1 << 18;

template <class F>
void parallel_items(ThreadPool* pool, int count, F&& fn, double work_per_item = kParallelMinWork) {
  if (count <= 0) return;
  if (!pool || pool->size() == 1 || count == 1 || double(count) * work_per_item < kParallelMinWork) {
    for (int i = 0; i < count; ++i) fn(i, 0);
    return;
  }
  std::atomic<int> next{0};
  pool->run([&](int thread, int) {
    for (int i = next.fetch_add(1, std::memory_order_relaxed); i < count;
         i = next.fetch_add(1, std::memory_order_relaxed))
      fn(i, thread);
  });
}

// As parallel_items, with fn(i, next, thread) also told the item this thread takes after i
// (-1: none), so it can fetch that item's data while computing this one. Each thread claims one
// item ahead; the balance is as dynamic as parallel_items'.
template <class F>
void parallel_items_ahead(ThreadPool* pool, int count, F&& fn, double work_per_item = kParallelMinWork) {
  if (count <= 0) return;
  if (!pool || pool->size() == 1 || count == 1 || double(count) * work_per_item < kParallelMinWork) {
    for (int i = 0; i < count; ++i) fn(i, i + 1 < count ? i + 1 : -1, 0);
    return;
  }
  std::atomic<int> next{0};
  pool->run([&](int thread, int) {
    int i = next.fetch_add(1, std::memory_order_relaxed);
    while (i < count) {
      const int after = next.fetch_add(1, std::memory_order_relaxed);
      fn(i, after < count ? after : -1, thread);
      i = after;
    }
  });
}

// Per-token loops: `width` multiply-adds per token.
template <class F>
void parallel_rows(ThreadPool* pool, int rows, int width, F&& fn) {
  parallel_items(pool, rows, std::forward<F>(fn), double(width));
}

}  // namespace ds
