// Prompt construction from hash ids, --scale, and the synthetic generator's layered prefixes.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "bench/prefix_model.h"
#include "bench/prompt_tokens.h"
#include "bench/synthetic.h"
#include "bench/workload_source.h"
#include "core/error.h"
#include "bench/trace_mooncake.h"

namespace ds::bench {
namespace {

TraceRequest req(int64_t in, std::vector<uint64_t> ids) {
  TraceRequest r;
  r.input_tokens = in;
  r.output_tokens = 4;
  r.hash_ids = std::move(ids);
  return r;
}

std::vector<int32_t> block(const std::vector<int32_t>& p, size_t i, size_t bs) {
  return {p.begin() + static_cast<long>(i * bs),
          p.begin() + static_cast<long>(std::min(p.size(), (i + 1) * bs))};
}

TEST(PromptTokens, EqualHashIdsGiveIdenticalBlocks) {
  const TokenRange range = TokenRange::for_vocab(32000);
  PromptTokens pt(7, 16, range, {100});  // id 100 is shared between trees
  const auto a = pt.build(req(48, {100, 1, 2}), /*play=*/0);
  const auto b = pt.build(req(40, {100, 1, 3}), /*play=*/0);
  ASSERT_EQ(a.size(), 48u);  // exact lengths, last block partial
  ASSERT_EQ(b.size(), 40u);
  EXPECT_EQ(block(a, 0, 16), block(b, 0, 16));
  EXPECT_EQ(block(a, 1, 16), block(b, 1, 16));
  EXPECT_NE(std::vector<int32_t>(a.begin() + 32, a.begin() + 40), std::vector<int32_t>(b.begin() + 32, b.end()));
  // Another play of the tree: the shared block stays, private blocks change (cache busting).
  const auto c = pt.build(req(48, {100, 1, 2}), /*play=*/1);
  EXPECT_EQ(block(a, 0, 16), block(c, 0, 16));
  EXPECT_NE(block(a, 1, 16), block(c, 1, 16));
  // The same play, built again: identical (the resend of a turn's history).
  EXPECT_EQ(a, pt.build(req(48, {100, 1, 2}), 0));
  // Partial last block = prefix of the full block with that id.
  const auto d = pt.build(req(35, {100, 1, 2}), 0);
  EXPECT_EQ(std::vector<int32_t>(d.begin() + 32, d.end()), std::vector<int32_t>(a.begin() + 32, a.begin() + 35));
  for (int32_t t : a) {
    EXPECT_GE(t, range.lo);
    EXPECT_LT(t, range.hi);
  }
  EXPECT_EQ(range.lo, 2000);  // the lowest and highest sixteenth hold bytes and special tokens
  EXPECT_EQ(range.hi, 30000);
}

TEST(PromptTokens, PadsPastTheRecordedIdsAndReportsFullBlocks) {
  PromptTokens pt(1, 8, TokenRange::for_vocab(1000), {});
  std::vector<uint64_t> keys;
  const auto p = pt.build(req(30, {5}), 0, &keys);
  EXPECT_EQ(p.size(), 30u);
  EXPECT_EQ(keys.size(), 3u);  // 8 + 8 + 8 full, 6 partial
  std::vector<uint64_t> keys2;
  pt.build(req(30, {5}), 0, &keys2);
  EXPECT_EQ(keys, keys2);  // padding is deterministic, so resends still share it
}

TEST(PrefixCacheModel, CountsLeadingBlocksSeenBefore) {
  PrefixCacheModel m;
  EXPECT_EQ(m.observe({1, 2, 3}, 10), 0);
  EXPECT_EQ(m.observe({1, 2, 4}, 10), 20);
  EXPECT_EQ(m.observe({2, 3}, 10), 0);  // block 2 was seen, but behind block 1
  EXPECT_EQ(m.observe({1, 2, 4, 5}, 10), 30);
}

double theoretical_hit_rate(const Workload& w) {
  PromptTokens pt(3, w.block_size, TokenRange::for_vocab(32000), shared_hash_ids(w));
  PrefixCacheModel m;
  int64_t hit = 0, total = 0;
  for (size_t s = 0; s < w.sessions.size(); ++s)
    for (const auto& r : w.sessions[s].requests) {
      std::vector<uint64_t> keys;
      pt.build(r, s, &keys);
      hit += m.observe(keys, w.block_size);
      total += r.input_tokens;
    }
  return static_cast<double>(hit) / static_cast<double>(total);
}

TEST(Scale, KeepsTheReuseRatio) {
  SyntheticConfig c;
  c.sessions = 24;
  const Workload w = generate_agentic_code(c);
  Workload small = w;
  scale_workload(small, 0.25);
  EXPECT_EQ(small.block_size, 16);
  EXPECT_EQ(small.sessions[0].requests[0].hash_ids, w.sessions[0].requests[0].hash_ids);
  const double full = theoretical_hit_rate(w), scaled = theoretical_hit_rate(small);
  EXPECT_GT(full, 0.5);
  EXPECT_NEAR(scaled, full, 0.03);

  const std::string path =
      std::string(DS_SOURCE_DIR) + "/../shared/traces/mooncake_conversation_head1000.jsonl";
  if (!std::ifstream(path))
    GTEST_SKIP() << "outside the project checkout layout (a fresh clone in CI has no ../shared beside it): no Mooncake trace slice at "
                 << path << "; the synthetic and in-memory traces above and in MooncakeTrace.* cover the parser";
  const Workload mc = load_mooncake(path);
  Workload mc_small = mc;
  scale_workload(mc_small, 1.0 / 16);
  EXPECT_EQ(mc_small.block_size, 32);
  EXPECT_NEAR(theoretical_hit_rate(mc_small), theoretical_hit_rate(mc), 0.03);
}

TEST(Synthetic, LayeredPrefixesAndGrowingHistory) {
  SyntheticConfig c;
  c.sessions = 12;
  c.repos = 3;
  c.seed = 5;
  const Workload w = generate_agentic_code(c);
  ASSERT_EQ(w.sessions.size(), 12u);
  const size_t system_blocks = static_cast<size_t>(c.system_tokens / c.block_size);
  const size_t repo_blocks = static_cast<size_t>((c.system_tokens + c.repo_tokens) / c.block_size);
  std::map<std::string, std::vector<uint64_t>> repo_prefix;
  for (const Session& s : w.sessions) {
    const auto& first = s.requests.front().hash_ids;
    const auto& other = w.sessions[0].requests.front().hash_ids;
    // Global system prompt + tools: the same blocks in every session.
    EXPECT_TRUE(std::equal(first.begin(), first.begin() + static_cast<long>(system_blocks), other.begin()));
    // Repository context: the same blocks within a repository group.
    const std::string repo = s.id.substr(s.id.find("-repo"));
    std::vector<uint64_t> prefix(first.begin(), first.begin() + static_cast<long>(repo_blocks));
    if (repo_prefix.count(repo)) {
      EXPECT_EQ(repo_prefix[repo], prefix);
    }
    repo_prefix[repo] = prefix;
    // Each turn resends the whole history: its full blocks extend the previous prompt's.
    for (size_t t = 1; t < s.requests.size(); ++t) {
      const auto& prev = s.requests[t - 1];
      const auto& cur = s.requests[t];
      EXPECT_GT(cur.input_tokens, prev.input_tokens + prev.output_tokens);
      const size_t full = static_cast<size_t>(prev.input_tokens / c.block_size);
      EXPECT_TRUE(std::equal(prev.hash_ids.begin(), prev.hash_ids.begin() + static_cast<long>(full),
                             cur.hash_ids.begin()));
      EXPECT_EQ(cur.hash_ids.size(), static_cast<size_t>((cur.input_tokens + c.block_size - 1) / c.block_size));
      EXPECT_GE(cur.delay_s, 0.0);
    }
  }
  EXPECT_EQ(repo_prefix.size(), 3u);
  // Seeded: the same seed gives the same workload.
  const Workload again = generate_agentic_code(c);
  EXPECT_EQ(again.sessions[5].requests.back().hash_ids, w.sessions[5].requests.back().hash_ids);
  // Subagents appear with enough sessions.
  c.sessions = 64;
  c.subagent_probability = 0.5;
  size_t spawns = 0;
  for (const Session& s : generate_agentic_code(c).sessions) spawns += s.spawns.size();
  EXPECT_GT(spawns, 0u);
}

TEST(Synthetic, FixedRequestsAreExactAndShareNoBlock) {
  SyntheticConfig c;
  c.sessions = 20;
  c.block_size = 64;
  c.fixed_input_tokens = 130;
  c.fixed_output_tokens = 7;
  const Workload w = generate_fixed(c);
  ASSERT_EQ(w.sessions.size(), 20u);
  EXPECT_TRUE(shared_hash_ids(w).empty()) << "a fixed request shares a block with another";
  for (const Session& s : w.sessions) {
    ASSERT_EQ(s.requests.size(), 1u);
    EXPECT_TRUE(s.spawns.empty());
    EXPECT_EQ(s.requests[0].input_tokens, 130);
    EXPECT_EQ(s.requests[0].output_tokens, 7);
    EXPECT_EQ(s.requests[0].hash_ids.size(), 3u);  // two full blocks and a partial one
    EXPECT_EQ(s.requests[0].delay_s, 0.0);
  }
  c.fixed_output_tokens = 0;
  EXPECT_THROW(generate_fixed(c), Error);
  WorkloadSpec spec;
  spec.synthetic = "fixed";
  spec.synthetic_cfg.sessions = 3;
  EXPECT_EQ(make_workload(spec).format, "synthetic:fixed");
  spec.synthetic = "nope";
  EXPECT_THROW(make_workload(spec), Error);
}

}  // namespace
}  // namespace ds::bench
