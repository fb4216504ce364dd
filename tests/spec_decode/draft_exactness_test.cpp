// Draft-side exactness. Verification is exact, so a draft that proposes the wrong tokens only
// lowers acceptance, which the other speculative tests see as "accepted > 0": a wrong draft is
// invisible there. Two ways to make it visible:
//
// - The target as its own draft, with synthetic acceptance (spec_decode/synthetic_acceptance.h) at an
//   AL strictly inside (1, K + 1). Synthetic acceptance emits the drawn number of draft tokens
//   whatever the target says, then the target's own token after them. The draft IS the target,
//   so at temperature 0 each proposal must be the target's greedy token, and the emitted text
//   must be plain greedy decoding's. Partial accepts happen round after round, so the draft's
//   recurrent (KDA) state and KV must roll back to the accepted position every time: a state
//   left one token ahead or behind proposes a token greedy decoding would not, and synthetic
//   acceptance puts that token into the text. Covered with both target rollbacks (lanes,
//   replay), across prefix-cache turns (the draft resumes from a cached state), preemption
//   (the draft recomputes) and the disk tier (the draft's part of blocks and states goes to
//   disk and comes back). Each of these also runs with real acceptance (AL 0), where every
//   proposal is compared with the target's greedy token one by one: a self-draft must accept
//   every token it drafts.
// - The parallel drafter (spec_decode/parallel_drafter.h) on the bundled deltacoder: its context is
//   per sequence, so at temperature 0 a request's rounds propose the same tokens whatever else
//   runs beside it: the accepted and drafted counts are identical alone and in a batch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "engine_test_util.h"
#include "model/model.h"
#include "spec_engine_util.h"
#include "spec_test_util.h"

namespace ds::test {
namespace {

using testing::collect;

// tiny-hybrid (KDA and attention layers), vocabulary 512, seed 3: the target and its own draft.
std::string hybrid() { return preset_model("tiny-hybrid", 512, 3); }

// K 4 at AL 2.5: alpha about 0.6, so rounds accept 0, 1, 2, 3 or all 4 draft tokens.
constexpr int kK = 4;
constexpr double kAL = 2.5;

SpecOptions self_draft(const char* rollback, int k = kK, double al = kAL) {
  SpecOptions s;
  s.draft_model = hybrid();
  s.num_speculative_tokens = k;
  s.method = SpecMethod::Greedy;
  s.draft_sample = DraftSample::Greedy;
  s.state_rollback = rollback;
  s.acceptance_length = al;
  resolve_spec_options(&s);
  return s;
}

// What the counts must be. Synthetic AL inside (1, K + 1): partial accepts, which is what this
// file is about (some rounds accept something, some not all). Real acceptance (AL 0): every
// proposal is checked against the target's greedy token, and a self-draft's all match.
void expect_counts(double al, int accepted, int drafted) {
  EXPECT_GT(drafted, 0);
  if (al > 0) {
    EXPECT_GT(accepted, 0);
    EXPECT_LT(accepted, drafted) << "synthetic AL inside (1, K + 1) must reject some draft tokens";
  } else {
    EXPECT_EQ(accepted, drafted) << "a self-draft proposed a token that is not the target's greedy choice";
  }
}
void expect_partial_accepts(const Outcome& o) { expect_counts(kAL, o.accepted, o.drafted); }

// Both ways of checking the proposals: through the text under synthetic acceptance (partial
// accepts, rollbacks every few rounds), and one by one under real acceptance.
constexpr double kBothAL[] = {kAL, 0};

TEST(DraftExactness, SelfDraftWithPartialAcceptsEqualsPlainGreedy) {
  // The mixed batch: verify rounds beside other sequences' prefill chunks, sequences finishing
  // at different steps; K 2 and 4 at ALs strictly inside (1, K + 1).
  const std::string target = hybrid();
  const Workload w = mixed_workload(512);
  const Outcome plain = run(target, base_config(), w);
  for (auto [k, al] : {std::pair{2, 1.7}, std::pair{kK, kAL}}) {
    for (const char* rollback : {"lanes", "replay"}) {
      SCOPED_TRACE("K " + std::to_string(k) + " AL " + std::to_string(al) + " " + rollback);
      EngineConfig c = base_config();
      c.spec = self_draft(rollback, k, al);
      const Outcome o = run(target, c, w);
      EXPECT_EQ(o.tokens, plain.tokens) << "a self-draft proposed a token greedy decoding does not pick";
      expect_partial_accepts(o);
    }
  }
}

TEST(DraftExactness, SelfDraftWithRealAcceptanceAcceptsEveryToken) {
  // The same self-draft verified for real: every proposal is the target's greedy token, so every
  // drafted token is accepted (a round cut at max_tokens still counts its draft tokens accepted:
  // they were the target's choice).
  const std::string target = hybrid();
  const Workload w = mixed_workload(512);
  const Outcome plain = run(target, base_config(), w);
  for (const char* rollback : {"lanes", "replay"}) {
    SCOPED_TRACE(rollback);
    EngineConfig c = base_config();
    c.spec = self_draft(rollback, kK, 0);
    const Outcome o = run(target, c, w);
    EXPECT_EQ(o.tokens, plain.tokens);
    expect_counts(0, o.accepted, o.drafted);
  }
}

TEST(DraftExactness, SelfDraftAcrossPreemptions) {
  // Four 100-token prompts growing to 250 tokens each do not fit 8 blocks: the newest are
  // preempted and recomputed, target and draft, between partially accepted rounds.
  const std::string target = hybrid();
  const Workload w = preempting_workload();
  const Outcome plain = run(target, base_config(), w);
  for (double al : kBothAL) {
    for (const char* rollback : {"lanes", "replay"}) {
      SCOPED_TRACE(std::string(rollback) + " AL " + std::to_string(al));
      EngineConfig c = base_config();
      c.num_kv_blocks = 8;
      c.spec = self_draft(rollback, kK, al);
      const Outcome o = run(target, c, w);
      EXPECT_GT(o.preemptions, 0u);
      EXPECT_EQ(o.tokens, plain.tokens);
      expect_counts(al, o.accepted, o.drafted);
    }
  }
}

// ---- conversations: each turn's prompt is the last prompt, its answer and a new message

struct Session {
  std::vector<std::vector<int32_t>> outs;
  std::vector<int> cached;
  int drafted = 0, accepted = 0;
};

EngineConfig cache_config(const SpecOptions* spec, const std::string& tier = "") {
  EngineConfig c = base_config();
  c.num_kv_blocks = 64;
  c.prefix.enabled = true;
  c.prefix.decode_snapshots = true;  // states saved where decode (and verify rounds) fill a block
  c.prefix.snapshot_interval = 1;
  c.prefix.disk_tier_dir = tier;
  if (spec) c.spec = *spec;
  return c;
}

std::vector<int32_t> first_prompt() {
  std::vector<int32_t> p;
  for (int t = 0; t < 90; ++t) p.push_back(int32_t((t * 13 + 7) % 500));
  return p;
}

// One turn on `engine`; its answer and a new message are appended to `prompt`.
void turn(Engine& engine, std::vector<int32_t>& prompt, int n, Session& s) {
  auto st = engine.submit(testing::greedy_request(prompt, 75));
  const auto got = collect(*st);
  EXPECT_EQ(got.reason, FinishReason::Length) << got.error;
  s.outs.push_back(got.tokens);
  s.cached.push_back(st->cached_tokens());
  s.drafted += st->accepted_prediction_tokens() + st->rejected_prediction_tokens();
  s.accepted += st->accepted_prediction_tokens();
  prompt.insert(prompt.end(), got.tokens.begin(), got.tokens.end());
  for (int t = 0; t < 20; ++t) prompt.push_back(int32_t((t * 29 + n) % 500));
}

TEST(DraftExactness, SelfDraftResumesFromThePrefixCacheAcrossTurns) {
  // Turns 2 and 3 resume from cached blocks and state snapshots that carry the draft's part: a
  // draft resumed at the wrong point, or a snapshot taken with rejected tokens in the draft's
  // state, proposes off-greedy tokens that synthetic acceptance emits.
  const std::string target = hybrid();
  auto session = [&](const SpecOptions* spec) {
    Engine engine(Model::load(target, 2), cache_config(spec));
    Session s;
    std::vector<int32_t> prompt = first_prompt();
    for (int n = 0; n < 3; ++n) turn(engine, prompt, n, s);
    return s;
  };
  const Session plain = session(nullptr);
  for (double al : kBothAL) {
    for (const char* rollback : {"lanes", "replay"}) {
      SCOPED_TRACE(std::string(rollback) + " AL " + std::to_string(al));
      const SpecOptions spec = self_draft(rollback, kK, al);
      const Session s = session(&spec);
      EXPECT_EQ(s.outs, plain.outs);
      for (int n = 1; n < 3; ++n) EXPECT_GT(s.cached[size_t(n)], 64) << "turn " << n << " resumed from the cache";
      expect_counts(al, s.accepted, s.drafted);
    }
  }
}

TEST(DraftExactness, SelfDraftResumesFromTheDiskTier) {
  // Each turn runs on a fresh engine over the same disk-tier folder: stopping an engine writes
  // its cache (the draft's blocks and states with the target's) to disk, and the next engine,
  // whose memory starts empty, can resume only from there.
  const std::string target = hybrid();
  auto session = [&](const SpecOptions* spec, const std::string& tier) {
    Session s;
    std::vector<int32_t> prompt = first_prompt();
    for (int n = 0; n < 3; ++n) {
      Engine engine(Model::load(target, 2), cache_config(spec, tier));
      turn(engine, prompt, n, s);
    }
    return s;
  };
  const Session plain = session(nullptr, "");
  for (double al : kBothAL) {
    for (const char* rollback : {"lanes", "replay"}) {
      SCOPED_TRACE(std::string(rollback) + " AL " + std::to_string(al));
      const std::string tier =
          (std::filesystem::temp_directory_path() / ("ds_draft_tier_" + std::to_string(::getpid()) + "_" + rollback)).string();
      std::filesystem::remove_all(tier);
      const SpecOptions spec = self_draft(rollback, kK, al);
      const Session s = session(&spec, tier);
      std::filesystem::remove_all(tier);
      EXPECT_EQ(s.outs, plain.outs);
      for (int n = 1; n < 3; ++n) EXPECT_GT(s.cached[size_t(n)], 64) << "turn " << n << " resumed from the disk";
      expect_counts(al, s.accepted, s.drafted);
    }
  }
}

}  // namespace
}  // namespace ds::test
