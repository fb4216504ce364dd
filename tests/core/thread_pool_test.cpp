// The fork-join pool every parallel layer loop runs on: each thread runs a task exactly once per
// call, parallel_for covers [0, n) once with aligned, disjoint ranges, and back-to-back calls
// (the decode pattern: hundreds per step) never lose or repeat work.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "core/work_sharing.h"

namespace ds {
namespace {

TEST(ThreadPool, EveryThreadRunsEachTaskOnce) {
  for (int n : {1, 2, 3}) {
    ThreadPool pool(n);
    std::vector<std::atomic<int>> ran(static_cast<size_t>(n));
    for (int call = 0; call < 500; ++call)
      pool.run([&](int t, int nt) {
        ASSERT_EQ(nt, n);
        ran[size_t(t)].fetch_add(1);
      });
    for (int t = 0; t < n; ++t) EXPECT_EQ(ran[size_t(t)].load(), 500) << n << " threads, thread " << t;
  }
}

TEST(ThreadPool, ParallelForCoversTheRangeOnceInAlignedRanges) {
  ThreadPool pool(3);
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(64), size_t(1000), size_t(4099)}) {
    std::vector<std::atomic<int>> hit(n);
    pool.parallel_for(n, 16, [&](size_t b, size_t e) {
      EXPECT_EQ(b % 16, 0u) << "range start " << b << " not aligned";
      EXPECT_LE(e, n);
      for (size_t i = b; i < e; ++i) hit[i].fetch_add(1);
    });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hit[i].load(), 1) << "n=" << n << " item " << i;
  }
}

TEST(ThreadPool, ItemsAheadRunOnceAndNameTheItemTheirThreadTakesNext) {
  // parallel_items_ahead: fn(i, after, thread) with `after` the item this same thread runs next
  // (-1 after its last), so what fn fetches for it is used by the core that fetched it.
  for (int threads : {1, 2, 3})
    for (int count : {1, 2, 5, 64, 1000}) {
      ThreadPool pool(threads);
      std::vector<std::vector<std::pair<int, int>>> calls(static_cast<size_t>(threads));
      std::mutex mu;
      parallel_items_ahead(&pool, count, [&](int i, int after, int t) {
        std::lock_guard<std::mutex> lock(mu);
        calls[size_t(t)].push_back({i, after});
      }, /*work_per_item=*/double(kParallelMinWork));
      std::vector<int> hit(static_cast<size_t>(count), 0);
      for (const auto& c : calls)
        for (size_t j = 0; j < c.size(); ++j) {
          ++hit[size_t(c[j].first)];
          EXPECT_EQ(c[j].second, j + 1 < c.size() ? c[j + 1].first : -1)
              << threads << " threads, " << count << " items: call " << j << " named the wrong next item";
        }
      for (int i = 0; i < count; ++i) ASSERT_EQ(hit[size_t(i)], 1) << "item " << i << " of " << count;
    }
}

}  // namespace
}  // namespace ds
