// The parallel drafter (spec_decode/parallel_drafter.h, spec_decode/dspark_model.h) on the bundled
// deltacoder + deltacoder-dspark: its round against the training code's forward
// (tests/data/golden/deltacoder-dspark.json from tools/train/dspark.py golden), greedy
// speculation bit-identical to plain greedy decoding (K 1..7, both rollbacks, mixed batches,
// the prefix cache on, preemption), and one clear start-up line per misfit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine_test_util.h"
#include "spec_engine_util.h"
#include "model/model.h"
#include "spec_decode/dspark_model.h"
#include "spec_decode/parallel_drafter.h"
#include "../support/remove_at_exit.h"

namespace ds::test {
namespace {

using testing::collect;

std::string target_dir() { return std::string(DS_SOURCE_DIR) + "/models/deltacoder"; }
std::string drafter_dir() { return std::string(DS_SOURCE_DIR) + "/models/deltacoder-dspark"; }

std::unique_ptr<Model> tapped_target(const std::vector<int>& taps, int tail, int max_tokens) {
  std::unique_ptr<Model> m = Model::load(target_dir(), 2);
  m->set_hidden_taps(taps, tail);
  RuntimeLimits lim;
  lim.max_seqs = 2;
  lim.max_batch_tokens = max_tokens;
  lim.max_logit_rows = max_tokens;
  lim.num_kv_blocks = 16;
  lim.block_size = 64;
  m->allocate(lim);
  return m;
}

TEST(ParallelDrafter, RoundMatchesTheTrainingCode) {
  std::ifstream f(std::string(DS_SOURCE_DIR) + "/tests/data/golden/deltacoder-dspark.json");
  ASSERT_TRUE(f) << "missing tests/data/golden/deltacoder-dspark.json (tools/train/dspark.py golden)";
  const nlohmann::json g = nlohmann::json::parse(f);
  const auto ids = g["prompt_ids"].get<std::vector<int32_t>>();
  const DSparkConfig cfg = load_dspark_config(drafter_dir());
  const int n = int(ids.size()) - 1;  // x_n = the last prompt token; the target computes [0, n)
  std::unique_ptr<Model> target = tapped_target(cfg.target_layer_ids, cfg.context_window, 256);
  const int V = target->config().vocab_size, H = cfg.hidden_size, Kb = cfg.block_size, W = cfg.context_window;
  std::vector<int32_t> table(16);
  for (int i = 0; i < 16; ++i) table[size_t(i)] = i;
  SeqChunk sc;
  sc.block_table = table.data();
  sc.num_tokens = n;
  sc.num_logits = 1;
  std::vector<float> tl(static_cast<size_t>(V));
  target->forward({std::span<const int32_t>(ids.data(), size_t(n)), std::span<const SeqChunk>(&sc, 1)}, tl.data());
  const auto want_t = g["target_logits_last"].get<std::vector<float>>();
  float worst_t = 0;
  for (int v = 0; v < V; ++v) worst_t = std::max(worst_t, std::fabs(tl[size_t(v)] - want_t[size_t(v)]));
  EXPECT_LT(worst_t, 2e-3f) << "the target's own logits (the taps come from the same forward)";

  DSparkModel m(drafter_dir(), *target, Kb);
  const int lo = std::max(0, n - W);
  std::vector<int32_t> pos;
  for (int p = lo; p < n; ++p) pos.push_back(p);
  const size_t width = cfg.target_layer_ids.size() * size_t(H);
  std::vector<float> ctx(pos.size() * m.context_floats());
  m.context(target->hidden_taps() + size_t(lo) * width, pos.data(), int(pos.size()), ctx.data());
  std::vector<const float*> ptrs;
  for (size_t i = 0; i < pos.size(); ++i) ptrs.push_back(ctx.data() + i * m.context_floats());
  DSparkModel::Round rd{std::span<const float* const>(ptrs), ids[size_t(n)], n};
  std::vector<float> z(size_t(Kb) * size_t(H));
  m.block(std::span<const DSparkModel::Round>(&rd, 1), z.data());

  const auto want_tokens = g["drafted_greedy"].get<std::vector<int32_t>>();
  const auto want_conf = g["confidence"].get<std::vector<float>>();
  std::vector<float> logits(static_cast<size_t>(V)), mk(size_t(cfg.markov_rank));
  // The copy term's window: each context position's token and the one after it.
  std::vector<DSparkModel::CopyEntry> window;
  for (int p = lo; p < n; ++p) window.push_back({ids[size_t(p)], ids[size_t(p + 1)]});
  int32_t prev = ids[size_t(n)];
  float worst = 0;
  int copied = 0;
  for (int j = 0; j < Kb; ++j) {
    m.base_logits(z.data() + size_t(j) * size_t(H), 1, logits.data());
    m.markov_embed(prev, mk.data());
    m.add_markov(mk.data(), 1, logits.data());
    m.add_copy(window, prev, j, logits.data());
    const bool in_window = DSparkModel::copy_matches(window, prev) > 0;
    copied += in_window;
    const auto want = g["slot_logits"][size_t(j)].get<std::vector<float>>();
    for (int v = 0; v < V; ++v) worst = std::max(worst, std::fabs(logits[size_t(v)] - want[size_t(v)]));
    EXPECT_NEAR(m.confidence(z.data() + size_t(j) * size_t(H), mk.data(), j, in_window), want_conf[size_t(j)], 1e-3f)
        << "slot " << j;
    const int32_t got = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_EQ(got, want_tokens[size_t(j)]) << "slot " << j;
    prev = want_tokens[size_t(j)];  // the reference's token, so one near-tie cannot derail the rest
  }
  EXPECT_LT(worst, 2e-3f) << "slot logits (base + Markov + copy) against the training code's forward";
  if (cfg.context_copy) {
    EXPECT_GT(copied, 0) << "the golden prompt repeats a phrase: some slot's previous token is in the window";
  }

  // The drafter proper (its ring fed as the engine feeds it) drafts the same tokens.
  ParallelDrafter d(drafter_dir(), *target, DraftSample::Greedy, Kb, 0.0);
  d.allocate(2, 256);
  d.begin_observe();
  d.add_observed(1, 42, 0, target->hidden_taps(), ids.data(), n);
  d.end_observe();
  std::vector<int32_t> drafted(static_cast<size_t>(Kb));
  ProposeJob job;
  job.slot = 1;
  job.owner = 42;
  job.token = ids[size_t(n)];
  job.pos = n;
  job.k = Kb;
  job.filter.temperature = 0;
  job.tokens = drafted.data();
  d.propose(std::span<ProposeJob>(&job, 1));
  EXPECT_EQ(job.proposed, Kb);
  EXPECT_EQ(drafted, want_tokens);
  // With a confidence cut the slots go through the LM head one by one, for the rounds still
  // open: the tokens drafted are the uncut round's first ones, and the cut ends some rounds.
  for (double cut : {0.05, 0.3, 0.6, 0.95}) {
    ParallelDrafter dc(drafter_dir(), *target, DraftSample::Greedy, Kb, cut);
    dc.allocate(2, 256);
    dc.begin_observe();
    dc.add_observed(1, 42, 0, target->hidden_taps(), ids.data(), n);
    dc.end_observe();
    std::vector<int32_t> got(static_cast<size_t>(Kb), -1);
    ProposeJob jc = job;
    jc.tokens = got.data();
    dc.propose(std::span<ProposeJob>(&jc, 1));
    ASSERT_GE(jc.proposed, 1) << "cut " << cut;
    EXPECT_TRUE(std::equal(got.begin(), got.begin() + jc.proposed, want_tokens.begin())) << "cut " << cut;
    if (cut == 0.95) {
      EXPECT_LT(jc.proposed, Kb) << "a survival of 0.95 across 8 slots";
    }
  }
  // Another owner in the slot sees none of the first one's context.
  job.owner = 43;
  std::vector<int32_t> fresh(static_cast<size_t>(Kb));
  job.tokens = fresh.data();
  d.propose(std::span<ProposeJob>(&job, 1));
  EXPECT_NE(fresh, want_tokens) << "a new sequence in the slot drafted from the old one's context";
}

// ---- through the engine

// The bundled pair in the shared engine settings, with room for its longer sequences.
EngineConfig bundled_config() {
  EngineConfig c = base_config();
  c.max_model_len = 1024;
  c.num_kv_blocks = 48;
  return c;
}

SpecOptions spec_of(int k, const char* rollback, DraftSample sample = DraftSample::Probabilistic) {
  SpecOptions s;
  s.draft_model = drafter_dir();
  s.num_speculative_tokens = k;
  s.method = SpecMethod::Block;
  s.draft_sample = sample;
  s.state_rollback = rollback;
  return s;
}

Outcome run(EngineConfig cfg, const Workload& w) { return test::run(target_dir(), std::move(cfg), w); }

TEST(ParallelDrafter, GreedyBitIdenticalForEveryKAndBothRollbacks) {
  const Workload w = mixed_workload(4096);
  const Outcome plain = run(bundled_config(), w);
  for (int k = 1; k <= 7; ++k) {
    for (const char* rollback : {"lanes", "replay"}) {
      if (std::string(rollback) == "replay" && k != 3 && k != 7) continue;
      SCOPED_TRACE("K " + std::to_string(k) + " " + rollback);
      EngineConfig c = bundled_config();
      c.spec = spec_of(k, rollback);
      const Outcome o = run(c, w);
      EXPECT_EQ(o.tokens, plain.tokens);
      EXPECT_GT(o.drafted, 0);
      EXPECT_GT(o.accepted, 0);
    }
  }
}

// --num-speculative-tokens auto with a parallel drafter: the round is drafted whole before the
// cost model picks each sequence's length (its cost is spent by then, so it prices draft
// positions at 0), and whatever it picks the tokens are plain greedy decoding's.
TEST(ParallelDrafter, AutoLengthKeepsGreedyTokens) {
  const Workload w = mixed_workload(4096);
  const Outcome plain = run(bundled_config(), w);
  EngineConfig c = bundled_config();
  c.spec = spec_of(7, "lanes");
  c.spec.auto_k = true;
  c.spec.test_row_cost_scale = 0;  // verify rows priced free: the choice never depends on this machine's timing
  const Outcome o = run(c, w);
  EXPECT_EQ(o.tokens, plain.tokens);
  EXPECT_GT(o.drafted, 0);
}

// A request whose client gave its seed: at temperature > 0 the same text alone, again, beside
// other requests, and without speculation, at K 7, with a confidence cut, and under auto (with its
// real, timing-dependent choice, and drafting always).
TEST(ParallelDrafter, SeededTextIsTheSameAloneAgainInABatchAndWithoutSpeculation) {
  const std::vector<int32_t> prompt = mixed_workload(4096).prompts[1];
  const SeededRuns plain = seeded_runs(target_dir(), bundled_config(), prompt, 48);
  struct Case {
    const char* name;
    double threshold;
    bool auto_k;
    double row_cost_scale;
  };
  for (const Case& k : {Case{"K 7", 0.0, false, -1}, Case{"K 7, cut 0.4", 0.4, false, -1},
                        Case{"auto", 0.0, true, -1}, Case{"auto, drafting always", 0.0, true, 0}}) {
    SCOPED_TRACE(k.name);
    EngineConfig c = bundled_config();
    c.spec = spec_of(7, "lanes");
    c.spec.confidence_threshold = k.threshold;
    c.spec.auto_k = k.auto_k;
    c.spec.test_row_cost_scale = k.row_cost_scale;
    const SeededRuns o = seeded_runs(target_dir(), c, prompt, 48);
    EXPECT_EQ(o.again, o.alone) << "the same seed twice";
    EXPECT_EQ(o.beside, o.alone) << "the same seed beside other requests";
    EXPECT_EQ(o.alone, plain.alone) << "the same seed without speculation";
    if (k.row_cost_scale == 0 || !k.auto_k) {
      EXPECT_GT(o.drafted, 0);
    }
  }
}

TEST(ParallelDrafter, ConfidenceCutKeepsGreedyTokensAndDraftsLess) {
  const Workload w = mixed_workload(4096);
  const Outcome plain = run(bundled_config(), w);
  EngineConfig whole = bundled_config();
  whole.spec = spec_of(7, "lanes");
  const Outcome full = run(whole, w);
  EngineConfig cut = whole;
  cut.spec.confidence_threshold = 0.5;
  const Outcome o = run(cut, w);
  EXPECT_EQ(o.tokens, plain.tokens);
  EXPECT_GT(o.drafted, 0);
  EXPECT_LT(o.drafted, full.drafted) << "a threshold of 0.5 should end some rounds early";
}

TEST(ParallelDrafter, PrefixCacheAcrossTurnsAndPreemptionKeepGreedyTokens) {
  auto session = [&](bool spec, int blocks) {
    EngineConfig c = bundled_config();
    c.num_kv_blocks = blocks;
    c.max_model_len = 512;
    c.prefix.enabled = true;
    c.prefix.decode_snapshots = true;
    if (spec) c.spec = spec_of(7, "replay");
    Engine engine(Model::load(target_dir(), 2), c);
    std::vector<std::vector<int32_t>> outs;
    std::vector<std::vector<int32_t>> prompts(3);
    for (int s = 0; s < 3; ++s)
      for (int t = 0; t < 90; ++t) prompts[size_t(s)].push_back(int32_t((t * 13 + 7 + s * 5) % 4000));
    for (int turn = 0; turn < 3; ++turn) {
      std::vector<std::shared_ptr<RequestStream>> streams;
      for (auto& p : prompts) streams.push_back(engine.submit(testing::greedy_request(p, 75)));
      for (size_t s = 0; s < streams.size(); ++s) {
        const auto got = collect(*streams[s]);
        outs.push_back(got.tokens);
        prompts[s].insert(prompts[s].end(), got.tokens.begin(), got.tokens.end());
        for (int t = 0; t < 20; ++t) prompts[s].push_back(int32_t((t * 29 + turn) % 4000));
      }
    }
    return std::pair{outs, engine.snapshot().preemptions};
  };
  const auto [plain, plain_pre] = session(false, 64);
  const auto [spec, spec_pre] = session(true, 64);
  EXPECT_EQ(spec, plain);
  // A pool too small for three growing sessions: preemption and recompute mid-session.
  const auto [tight, tight_pre] = session(true, 9);
  EXPECT_GT(tight_pre, 0u);
  EXPECT_EQ(tight, plain);
}

// ---- bad input: one line each, at start-up

std::string variant(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  const std::string dir = (std::filesystem::temp_directory_path() / ("ds-dspark-" + std::to_string(::getpid()) + "-" + name)).string();
  std::filesystem::create_directories(ds::test::remove_at_exit(dir));
  for (const auto& e : std::filesystem::directory_iterator(drafter_dir()))
    std::filesystem::copy_file(e.path(), dir + "/" + e.path().filename().string(), std::filesystem::copy_options::overwrite_existing);
  std::ifstream in(dir + "/config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  edit(j);
  std::ofstream(dir + "/config.json") << j.dump(2);
  return dir;
}

std::string start_error(const std::string& drafter, int k) {
  EngineConfig c = bundled_config();
  c.spec = spec_of(k, "lanes");
  c.spec.draft_model = drafter;
  try {
    Engine engine(Model::load(target_dir(), 2), c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ParallelDrafter, MisfitsFailAtStartUpWithOneClearLine) {
  const std::string layers = start_error(variant("layers", [](nlohmann::json& j) { j["target_layer_ids"] = {0, 2, 9}; }), 4);
  EXPECT_NE(layers.find("reads target layer 9"), std::string::npos) << layers;
  EXPECT_NE(layers.find("has 4 layers"), std::string::npos) << layers;
  const std::string hidden = start_error(variant("hidden", [](nlohmann::json& j) { j["hidden_size"] = 256; }), 4);
  EXPECT_NE(hidden.find("hidden size 256, the target 192"), std::string::npos) << hidden;
  const std::string vocab = start_error(variant("vocab", [](nlohmann::json& j) { j["vocab_size"] = 5000; }), 4);
  EXPECT_NE(vocab.find("vocabulary of 5000 tokens, the target 4096"), std::string::npos) << vocab;
  const std::string k = start_error(drafter_dir(), 9);
  EXPECT_NE(k.find("--num-speculative-tokens 9 exceeds the drafter's block of 8"), std::string::npos) << k;
  const std::string copy = start_error(variant("copy", [](nlohmann::json& j) { j["context_copy"] = "yes"; }), 4);
  EXPECT_NE(copy.find("'context_copy' must be true or false"), std::string::npos) << copy;
  for (const std::string* e : {&layers, &hidden, &vocab, &k, &copy}) EXPECT_EQ(e->find('\n'), std::string::npos) << *e;
  // The threshold belongs to a parallel drafter, and lies in [0, 1).
  EngineConfig c = bundled_config();
  c.spec = spec_of(4, "lanes");
  c.spec.confidence_threshold = 1.5;
  try {
    Engine engine(Model::load(target_dir(), 2), c);
    ADD_FAILURE() << "threshold 1.5 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside [0, 1)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ds::test
