// Prefix caching in the engine, against the FakeModel: its state is a rolling hash of every token
// fed to a slot and its output reads tokens back through the block table, so a wrong snapshot,
// a stale or mis-shared block, or a resume at the wrong position changes the tokens. Each test
// also checks how much of the prompt the cache supplied.
#include <gtest/gtest.h>

#include <prometheus/text_serializer.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "engine/engine.h"
#include "engine_test_util.h"

namespace ds {
namespace {

using testing::collect;
using testing::FakeModel;
using testing::greedy_request;
using testing::make_prompt;

struct Fixture : testing::FakeEngine {
  using FakeEngine::FakeEngine;
  // Runs one greedy request to its end; returns its tokens and the cached prompt tokens.
  std::pair<std::vector<int32_t>, int> run(const std::vector<int32_t>& prompt, int max_tokens) {
    auto s = engine->submit(greedy_request(prompt, max_tokens));
    auto c = collect(*s);
    EXPECT_EQ(c.reason, FinishReason::Length) << c.error;
    EXPECT_EQ(c.tokens, model->reference_generate(prompt, max_tokens));
    return {c.tokens, s->cached_tokens()};
  }
  // Blocks held once the engine has published its last step (the stream ends first).
  int blocks_used_once_settled() {
    for (int i = 0; i < 100 && engine->snapshot().kv_blocks_used != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return engine->snapshot().kv_blocks_used;
  }
  double metric(const std::string& name) {
    for (auto& fam : engine->metrics().registry().Collect())
      if (fam.name == name && !fam.metric.empty())
        return fam.type == prometheus::MetricType::Counter ? fam.metric[0].counter.value
                                                           : fam.metric[0].gauge.value;
    return -1;
  }
};

EngineConfig cache_config() {
  EngineConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 256;
  c.max_model_len = 2048;
  c.num_kv_blocks = 128;
  c.prefix.num_state_snapshots = 64;
  c.prefix.snapshot_interval = 4;
  return c;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(PrefixCache, NextTurnResumesAtThePreviousPromptsEnd) {
  Fixture f(cache_config());
  const auto turn1 = make_prompt(300, 1);
  EXPECT_EQ(f.run(turn1, 10).second, 0);
  // Same history plus a new message: resumes at 256, the last boundary of the first prompt.
  const auto turn2 = concat(turn1, make_prompt(90, 2));
  EXPECT_EQ(f.run(turn2, 10).second, 256);
  EXPECT_EQ(f.model->violations.load(), 0) << f.model->first_violation;
  EXPECT_EQ(f.metric("deltaserve:prefix_cache_queries_total"), 300 + 390);
  EXPECT_EQ(f.metric("deltaserve:prefix_cache_hits_total"), 256);
  EXPECT_GE(f.metric("deltaserve:state_snapshot_restores_total"), 1);
}

TEST(PrefixCache, TheSamePromptAgainLeavesOneBlockToCompute) {
  Fixture f(cache_config());
  const auto p = make_prompt(192, 3);  // exactly three blocks
  f.run(p, 5);
  // All three blocks are cached, but a resume must leave a token to compute: back one block.
  EXPECT_EQ(f.run(p, 5).second, 128);
  const auto q = make_prompt(200, 4);
  f.run(q, 5);
  EXPECT_EQ(f.run(q, 5).second, 192);
  EXPECT_EQ(f.model->violations.load(), 0) << f.model->first_violation;
}

TEST(PrefixCache, DecodeSnapshotsLetTheNextTurnReuseGeneratedTokens) {
  Fixture f(cache_config());
  const auto turn1 = make_prompt(100, 5);
  auto [out1, c1] = f.run(turn1, 100);  // prompt + output = 200 tokens, 199 fed
  EXPECT_EQ(c1, 0);
  // The agentic shape: history, the model's own answer, a tool result.
  const auto turn2 = concat(concat(turn1, out1), make_prompt(40, 6));
  EXPECT_EQ(f.run(turn2, 10).second, 192);  // the boundary decode filled at 192
  EXPECT_EQ(f.model->violations.load(), 0) << f.model->first_violation;
}

TEST(PrefixCache, WithoutDecodeSnapshotsTheNextTurnResumesAtThePromptEnd) {
  EngineConfig c = cache_config();
  c.prefix.decode_snapshots = false;
  Fixture f(c);
  const auto turn1 = make_prompt(100, 5);
  auto [out1, c1] = f.run(turn1, 100);
  const auto turn2 = concat(concat(turn1, out1), make_prompt(40, 6));
  EXPECT_EQ(f.run(turn2, 10).second, 64);
}

TEST(PrefixCache, BranchPointGetsASnapshotForTheNextPromptThatSharesIt) {
  EngineConfig c = cache_config();
  c.prefix.snapshot_interval = 0;  // only prompt ends and branch points
  Fixture f(c);
  const auto shared = make_prompt(320, 7);  // five blocks of common prefix (system + tools)
  const auto a = concat(shared, make_prompt(100, 8));
  const auto b = concat(shared, make_prompt(100, 9));
  const auto d = concat(shared, make_prompt(100, 10));
  EXPECT_EQ(f.run(a, 5).second, 0);
  // b finds a's KV for the shared five blocks but no state there (a saved at 384 only): it
  // computes from 0 and saves the state where the cached KV ran out.
  EXPECT_EQ(f.run(b, 5).second, 0);
  EXPECT_EQ(f.run(d, 5).second, 320);
  EXPECT_EQ(f.model->violations.load(), 0) << f.model->first_violation;
}

TEST(PrefixCache, IntervalSnapshotsServePromptsThatDivergeMidway) {
  Fixture f(cache_config());  // a snapshot every 4 blocks (256 tokens)
  const auto long_prompt = make_prompt(700, 11);
  f.run(long_prompt, 5);
  std::vector<int32_t> fork(long_prompt.begin(), long_prompt.begin() + 600);
  fork = concat(fork, make_prompt(50, 12));
  EXPECT_EQ(f.run(fork, 5).second, 512);  // deepest interval snapshot under the fork at 600
}

TEST(PrefixCache, OnAndOffGiveTheSameTokensOverAConversation) {
  EngineConfig off = cache_config();
  off.prefix.enabled = false;
  Fixture with(cache_config()), without(off);
  std::vector<int32_t> history = make_prompt(150, 13);
  int cached_total = 0;
  for (int turn = 0; turn < 6; ++turn) {
    auto [a, ca] = with.run(history, 40 + turn * 7);
    auto [b, cb] = without.run(history, 40 + turn * 7);
    EXPECT_EQ(a, b) << "turn " << turn;
    EXPECT_EQ(cb, 0);
    cached_total += ca;
    history = concat(concat(history, a), make_prompt(30 + turn * 11, 14 + turn));
  }
  EXPECT_GT(cached_total, 0);
  EXPECT_EQ(without.metric("deltaserve:prefix_cache_hits_total"), 0);
  EXPECT_EQ(with.model->violations.load(), 0) << with.model->first_violation;
  EXPECT_EQ(without.model->violations.load(), 0) << without.model->first_violation;
}

TEST(PrefixCache, ConcurrentSessionsUnderASmallPoolStayExactAndReturnEveryBlock) {
  EngineConfig c = cache_config();
  c.num_kv_blocks = 24;  // far less than all sessions' histories: constant eviction
  c.prefix.num_state_snapshots = 6;
  c.max_model_len = 1024;
  Fixture f(c);
  const auto system = make_prompt(130, 20);
  std::vector<std::vector<int32_t>> history(6);
  for (int s = 0; s < 6; ++s) history[size_t(s)] = concat(system, make_prompt(40 + 13 * s, 30 + s));
  for (int turn = 0; turn < 4; ++turn) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int s = 0; s < 6; ++s) streams.push_back(f.engine->submit(greedy_request(history[size_t(s)], 20)));
    for (int s = 0; s < 6; ++s) {
      auto r = collect(*streams[size_t(s)]);
      ASSERT_EQ(r.reason, FinishReason::Length) << r.error;
      EXPECT_EQ(r.tokens, f.model->reference_generate(history[size_t(s)], 20)) << "session " << s << " turn " << turn;
      history[size_t(s)] = concat(concat(history[size_t(s)], r.tokens), make_prompt(25, 100 + turn * 10 + s));
    }
  }
  EXPECT_EQ(f.model->violations.load(), 0) << f.model->first_violation;
  EXPECT_GT(f.metric("deltaserve:prefix_cache_hits_total"), 0);
  EXPECT_GT(f.metric("deltaserve:prefix_cache_block_evictions_total"), 0);
  EXPECT_EQ(f.blocks_used_once_settled(), 0);  // cached blocks are not "used"
}

TEST(PrefixCache, RefusesABadSnapshotInterval) {
  EngineConfig c = cache_config();
  c.prefix.snapshot_interval = -1;
  EXPECT_THROW(Fixture f(c), Error);
}

}  // namespace
}  // namespace ds

namespace ds {
namespace {

// Random agentic traffic against a pool and snapshot store far too small for it: sessions that
// share a system prompt, fork from each other's histories, resend their own answers, and get
// cancelled part-way. Every completed stream must equal the FakeModel's reference, and when the
// traffic stops no block may be held.
EngineConfig random_traffic_config() {
  EngineConfig c = cache_config();
  c.max_num_seqs = 6;
  c.max_num_batched_tokens = 200;
  c.max_model_len = 1024;
  c.num_kv_blocks = 30;
  c.prefix.num_state_snapshots = 9;
  c.prefix.snapshot_interval = 2;
  return c;
}

void run_random_traffic(const EngineConfig& c) {
  Fixture f(c);
  uint64_t rng = 12345;
  auto next = [&](int n) { rng = FakeModel::mix(rng + 1); return int(rng % uint64_t(n)); };
  const auto system = make_prompt(100, 77);
  std::vector<std::vector<int32_t>> histories = {system};
  int completed = 0, cancelled = 0;
  for (int round = 0; round < 40; ++round) {
    const int n = 1 + next(6);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<int> max_tokens, cancel_after;
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < n; ++i) {
      std::vector<int32_t> h = histories[size_t(next(int(histories.size())))];
      if (next(3) == 0 && h.size() > 64) h.resize(size_t(64 + next(int(h.size()) - 63)));  // fork mid-history
      h = concat(h, make_prompt(1 + next(90), 1000 + round * 10 + i));
      if (h.size() > 900) h = concat(system, make_prompt(50, 5000 + round * 10 + i));
      prompts.push_back(h);
      max_tokens.push_back(1 + next(70));
      cancel_after.push_back(next(4) == 0 ? next(5) : -1);
      streams.push_back(f.engine->submit(greedy_request(h, max_tokens.back())));
    }
    for (int i = 0; i < n; ++i) {
      auto r = collect(*streams[size_t(i)], cancel_after[size_t(i)]);
      const auto ref = f.model->reference_generate(prompts[size_t(i)], max_tokens[size_t(i)]);
      if (r.reason == FinishReason::Cancelled) {
        ++cancelled;
        ASSERT_LE(r.tokens.size(), ref.size());
        EXPECT_TRUE(std::equal(r.tokens.begin(), r.tokens.end(), ref.begin())) << "round " << round << " stream " << i;
      } else {
        ASSERT_EQ(r.reason, FinishReason::Length) << r.error;
        EXPECT_EQ(r.tokens, ref) << "round " << round << " stream " << i;
        ++completed;
        histories.push_back(concat(prompts[size_t(i)], r.tokens));
      }
    }
  }
  EXPECT_GT(completed, 50);
  EXPECT_EQ(f.model->violations.load(), 0) << f.model->first_violation;
  EXPECT_GT(f.metric("deltaserve:prefix_cache_hits_total"), 0);
  EXPECT_GT(f.metric("deltaserve:state_snapshot_evictions_total"), 0);
  EXPECT_EQ(f.blocks_used_once_settled(), 0);
  std::printf("random traffic: %d completed, %d cancelled, %.0f of %.0f prompt tokens cached, %.0f disk loads\n",
              completed, cancelled, f.metric("deltaserve:prefix_cache_hits_total"),
              f.metric("deltaserve:prefix_cache_queries_total"), f.metric("deltaserve:disk_tier_loads_total"));
}

TEST(PrefixCache, RandomForkingSessionsWithCancellationsStayExact) { run_random_traffic(random_traffic_config()); }

TEST(PrefixCacheDiskTier, RandomForkingSessionsWithADiskTierStayExact) {
  EngineConfig c = random_traffic_config();
  c.prefix.disk_tier_dir = (std::filesystem::temp_directory_path() / ("ds_tier_random_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(c.prefix.disk_tier_dir);
  run_random_traffic(c);
  std::filesystem::remove_all(c.prefix.disk_tier_dir);
}

}  // namespace
}  // namespace ds

namespace ds {
namespace {

std::string fresh_dir(const std::string& tag) {
  const auto d = std::filesystem::temp_directory_path() / ("ds_tier_" + tag + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d.string();
}

TEST(PrefixCacheDiskTier, EvictedPrefixesComeBackFromDiskExactly) {
  EngineConfig c = cache_config();
  c.num_kv_blocks = 12;  // two sessions' histories do not fit together
  c.prefix.num_state_snapshots = 3;
  c.max_model_len = 640;
  c.prefix.disk_tier_dir = fresh_dir("evict");
  {
    Fixture f(c);
    const auto a = make_prompt(500, 31), b = make_prompt(500, 32);
    f.run(a, 5);
    f.run(b, 5);  // evicts most of a's blocks and states to the disk
    EXPECT_GT(f.metric("deltaserve:prefix_cache_block_evictions_total"), 0);
    // a's next turn finds its prefix on disk: blocks and the state at 448 are read back.
    EXPECT_EQ(f.run(concat(a, make_prompt(40, 33)), 5).second, 448);
    EXPECT_GT(f.metric("deltaserve:disk_tier_loads_total"), 0);
    EXPECT_EQ(f.model->violations.load(), 0) << f.model->first_violation;
  }
  std::filesystem::remove_all(c.prefix.disk_tier_dir);
}

TEST(PrefixCacheDiskTier, ARestartResumesFromWhatTheLastRunWrote) {
  EngineConfig c = cache_config();
  c.prefix.disk_tier_dir = fresh_dir("restart");
  const auto turn1 = make_prompt(300, 41);
  const auto turn2 = concat(turn1, make_prompt(50, 42));
  {
    Fixture f(c);
    EXPECT_EQ(f.run(turn1, 5).second, 0);
  }  // stop writes the cache to disk
  {
    Fixture f(c);
    EXPECT_EQ(f.run(turn2, 5).second, 256);
    EXPECT_EQ(f.model->violations.load(), 0) << f.model->first_violation;
  }
  // Damage every entry: the next start must treat them as misses and still answer exactly.
  for (auto& e : std::filesystem::recursive_directory_iterator(c.prefix.disk_tier_dir)) {
    if (!e.is_regular_file()) continue;
    std::fstream file(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(60);
    file.put('\x55');
  }
  {
    Fixture f(c);
    EXPECT_EQ(f.run(concat(turn2, make_prompt(10, 43)), 5).second, 0);
    EXPECT_EQ(f.model->violations.load(), 0) << f.model->first_violation;
  }
  std::filesystem::remove_all(c.prefix.disk_tier_dir);
}

}  // namespace
}  // namespace ds
