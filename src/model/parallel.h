// Dynamic work sharing over independent items (sequence x head pairs, tokens): uneven items
// (a 2048-token prefill beside decode rows) balance across threads by taking the next one.
#pragma once
#include <atomic>

#include "core/thread_pool.h"

namespace ds {

template <class F>
void parallel_items(ThreadPool* pool, int count, F&& fn) {
  if (count <= 0) return;
  if (!pool || pool->size() == 1 || count == 1) {
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

}  // namespace ds
