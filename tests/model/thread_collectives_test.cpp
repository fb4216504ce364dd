// ThreadCollectives: the collectives of model/shard.h between threads, at 1 to 8 ranks, each
// rank contributing values that name it, so a lost, doubled or misplaced rank shows; and the
// ways ranks go out of step (another collective, another size, a rank that never comes, a rank
// whose work threw) end every rank with an error instead of a hang.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "model/thread_collectives.h"

namespace ds::test {
namespace {

// Runs f(rank, handle) on one thread per rank; returns each rank's error ("" when none).
std::vector<std::string> on_ranks(std::vector<std::shared_ptr<ThreadCollectives>> g,
                                  const std::function<void(int, ThreadCollectives&)>& f) {
  std::vector<std::string> errors(g.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < g.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        f(int(r), *g[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

// Rank r's value i: a power of two per rank plus a per-index part, so every sum over a set of
// ranks is exact in f32 and tells which ranks it holds.
float value(int rank, size_t i) { return float(1 << rank) + float(i % 7) * 256.f; }

TEST(ThreadCollectives, AllreduceSumsEveryRankOnEveryRank) {
  for (int N : {1, 2, 3, 4, 8}) {
    SCOPED_TRACE("ranks " + std::to_string(N));
    auto g = ThreadCollectives::group(N);
    std::vector<std::vector<float>> out(static_cast<size_t>(N));
    const auto errors = on_ranks(g, [&](int r, ThreadCollectives& c) {
      EXPECT_EQ(c.rank(), r);
      EXPECT_EQ(c.size(), N);
      // Several sizes in a row (0 included), each round reusing the same buffer.
      for (size_t n : {size_t(0), size_t(1), size_t(37), size_t(1000)}) {
        std::vector<float> d(n);
        for (size_t i = 0; i < n; ++i) d[i] = value(r, i);
        c.allreduce_sum(d.data(), n);
        out[size_t(r)] = d;
      }
    });
    for (const auto& e : errors) EXPECT_EQ(e, "");
    for (int r = 0; r < N; ++r) {
      ASSERT_EQ(out[size_t(r)].size(), 1000u);
      for (size_t i = 0; i < 1000; ++i)
        ASSERT_EQ(out[size_t(r)][i], float((1 << N) - 1) + float(N) * float(i % 7) * 256.f) << "rank " << r << " index " << i;
    }
  }
}

TEST(ThreadCollectives, GatherAndAllgatherPlaceEveryRankInRankOrder) {
  for (int N : {1, 3, 4, 8}) {
    SCOPED_TRACE("ranks " + std::to_string(N));
    const size_t n = 13;
    std::vector<std::vector<float>> gathered(static_cast<size_t>(N)), all(static_cast<size_t>(N));
    const auto errors = on_ranks(ThreadCollectives::group(N), [&](int r, ThreadCollectives& c) {
      std::vector<float> send(n);
      for (size_t i = 0; i < n; ++i) send[i] = value(r, i);
      // Gather: only rank 0's receive buffer exists (others pass none, as the model does).
      std::vector<float> recv(r == 0 ? size_t(N) * n : 0);
      c.gather(send.data(), n, r == 0 ? recv.data() : nullptr);
      gathered[size_t(r)] = recv;
      all[size_t(r)].resize(size_t(N) * n);
      c.allgather(send.data(), n, all[size_t(r)].data());
    });
    for (const auto& e : errors) EXPECT_EQ(e, "");
    for (int dst = 0; dst < N; ++dst)
      for (int src = 0; src < N; ++src)
        for (size_t i = 0; i < n; ++i) {
          const size_t at = size_t(src) * n + i;
          if (dst == 0) {
            ASSERT_EQ(gathered[0][at], value(src, i)) << "gather: rank " << src << " index " << i;
          }
          ASSERT_EQ(all[size_t(dst)][at], value(src, i)) << "allgather on rank " << dst << ": rank " << src << " index " << i;
        }
  }
}

TEST(ThreadCollectives, ThousandsOfRoundsInARowStayInStep) {
  // Back-to-back rounds of every kind with the buffers rewritten between them: a rank that ran
  // ahead into the next round while another still read this one would show as a wrong sum (and
  // as a race under the sanitizers).
  const int N = 4;
  std::atomic<int> wrong{0};
  const auto errors = on_ranks(ThreadCollectives::group(N), [&](int r, ThreadCollectives& c) {
    std::vector<float> d(64), all(size_t(N) * 64);
    for (int round = 0; round < 2000; ++round) {
      for (size_t i = 0; i < d.size(); ++i) d[i] = float(round + r);
      if (round % 2 == 0) {
        c.allreduce_sum(d.data(), d.size());
        for (float v : d) wrong += v != float(N * round + N * (N - 1) / 2);
      } else {
        c.allgather(d.data(), d.size(), all.data());
        for (int s = 0; s < N; ++s) wrong += all[size_t(s) * 64 + 5] != float(round + s);
      }
    }
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(wrong.load(), 0);
}

TEST(ThreadCollectives, RanksThatCallDifferentCollectivesAllFailNamingBoth) {
  // Rank 2 of 3 gathers where the others all-reduce; then rank 1 asks another size.
  for (int variant : {0, 1}) {
    const auto errors = on_ranks(ThreadCollectives::group(3), [&](int r, ThreadCollectives& c) {
      std::vector<float> d(8, 1.f), all(24);
      if (variant == 0 && r == 2) c.gather(d.data(), 8, nullptr);
      else if (variant == 1 && r == 1) c.allreduce_sum(d.data(), 7);
      else c.allreduce_sum(d.data(), 8);
    });
    for (int r = 0; r < 3; ++r) {
      EXPECT_NE(errors[size_t(r)].find(variant == 0 ? "gather" : "of 7 floats"), std::string::npos) << r << ": " << errors[size_t(r)];
      EXPECT_NE(errors[size_t(r)].find("allreduce_sum of 8 floats"), std::string::npos) << r << ": " << errors[size_t(r)];
    }
  }
}

TEST(ThreadCollectives, ARankThatNeverComesEndsTheWaitAtTheDeadline) {
  // Rank 1 of 2 skips the collective: rank 0 gives up at the group's deadline (short here; the
  // default is minutes), and later calls on the group fail at once.
  auto g = ThreadCollectives::group(2, std::chrono::milliseconds(200));
  std::vector<float> d(4, 1.f);
  try {
    g[0]->allreduce_sum(d.data(), d.size());
    FAIL() << "expected the wait to end";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1 of 2 arrived"), std::string::npos) << e.what();
  }
  EXPECT_THROW(g[1]->allreduce_sum(d.data(), d.size()), Error);
}

TEST(ThreadCollectives, AbortReleasesEveryWaitingRank) {
  // Ranks 0-2 of 4 wait in an allreduce that rank 3 never joins: its owner aborts the group
  // (a rank's work threw), and each waiting rank returns with the reason. The deadline (a
  // minute, not the default 5) only bounds how long a broken abort takes to fail here.
  auto g = ThreadCollectives::group(4, std::chrono::minutes(1));
  std::vector<std::string> errors(3);
  std::vector<std::thread> waiting;
  for (int r = 0; r < 3; ++r)
    waiting.emplace_back([&, r] {
      std::vector<float> d(4, 1.f);
      try {
        g[size_t(r)]->allreduce_sum(d.data(), d.size());
      } catch (const Error& e) {
        errors[size_t(r)] = e.what();
      }
    });
  g[3]->abort("rank 3 failed: its forward threw");
  for (auto& t : waiting) t.join();
  for (const auto& e : errors) EXPECT_NE(e.find("rank 3 failed"), std::string::npos) << e;
}

}  // namespace
}  // namespace ds::test
