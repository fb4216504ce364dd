// Speculative decoding through the engine, on real models: greedy verification gives tokens
// bit-identical to plain greedy decoding for K = 1..8 with both rollback strategies, in batches
// that mix verify rounds with other sequences' prefill chunks and finishing sequences, with the
// prefix cache on across turns, and across preemptions; on tiny-hybrid (drafts that accept
// everything, some, or almost nothing) and on the bundled deltacoder + deltacoder-draft.
#include <gtest/gtest.h>

#include <filesystem>

#include "engine_test_util.h"
#include "model/model.h"
#include "spec_engine_util.h"
#include "spec_test_util.h"

namespace ds::test {
namespace {

using testing::collect;

SpecOptions spec_of(const std::string& draft, int k, const char* rollback = "lanes") {
  SpecOptions s;
  s.draft_model = draft;
  s.num_speculative_tokens = k;
  s.method = SpecMethod::Block;  // greedy requests verify greedily whatever the method
  s.draft_sample = DraftSample::Probabilistic;
  s.state_rollback = rollback;
  return s;
}

// tiny-hybrid with vocabulary 512 (bos = eos = 511), seed 3: the target, and its bf16 twin.
std::string hybrid_target() { return preset_model("tiny-hybrid", 512, 3); }
std::string hybrid_twin() { return preset_model("tiny-hybrid", 512, 3, DType::BF16); }
std::string other_draft() { return preset_model("tiny-llama", 512, 9); }

TEST(SpecEngine, GreedyBitIdenticalForEveryKAndBothRollbacks) {
  const std::string target = hybrid_target();
  const Workload w = mixed_workload(512);
  const Outcome plain = run(target, base_config(), w);
  // The bf16 twin agrees often but not always (partial accepts); the target itself accepts
  // everything (full accepts, the two-token catch-up); a tiny-llama almost never.
  enum Kind { Twin, Self, Other };
  for (Kind kind : {Twin, Self, Other}) {
    const std::string draft = kind == Twin ? hybrid_twin() : kind == Self ? target : other_draft();
    for (int k = 1; k <= 8; ++k) {
      for (const char* rollback : {"lanes", "replay"}) {
        SCOPED_TRACE(std::to_string(int(kind)) + " K " + std::to_string(k) + " " + rollback);
        EngineConfig c = base_config();
        c.spec = spec_of(draft, k, rollback);
        const Outcome o = run(target, c, w);
        ASSERT_EQ(o.tokens, plain.tokens);
        EXPECT_GT(o.drafted, 0);
        if (kind == Self) {
          EXPECT_EQ(o.accepted, o.drafted) << "a self-draft accepts everything";
        }
        if (kind == Twin) {
          EXPECT_GT(o.accepted, 0);
          EXPECT_LT(o.accepted, o.drafted);
        }
      }
    }
  }
}

TEST(SpecEngine, LlamaTargetWithHybridDraftAndTheReverse) {
  const Workload w = mixed_workload(512);
  for (auto [target, draft] : {std::pair{"tiny-llama-f32", "tiny-hybrid-f32"}, std::pair{"tiny-llama-f32", "tiny-llama-f32"}}) {
    const Outcome plain = run(model_path(target), base_config(), w);
    for (int k : {2, 5}) {
      SCOPED_TRACE(std::string(target) + " + " + draft + " K " + std::to_string(k));
      EngineConfig c = base_config();
      c.spec = spec_of(model_path(draft), k, "replay");
      EXPECT_EQ(run(model_path(target), c, w).tokens, plain.tokens);
    }
  }
}

// --spec-window 1 and 2 with four sequences: some decode rows verify, the others decode one
// token (their drafts fall behind and catch up); greedy tokens stay those of plain decoding.
TEST(SpecEngine, SpecWindowKeepsGreedyTokens) {
  const std::string target = hybrid_target();
  const Workload w = mixed_workload(512);
  const Outcome plain = run(target, base_config(), w);
  for (int window : {1, 2}) {
    for (const char* rollback : {"lanes", "replay"}) {
      SCOPED_TRACE("window " + std::to_string(window) + " " + rollback);
      EngineConfig c = base_config();
      c.spec = spec_of(hybrid_twin(), 3, rollback);
      c.spec.window = window;
      const Outcome o = run(target, c, w);
      ASSERT_EQ(o.tokens, plain.tokens);
      EXPECT_GT(o.drafted, 0);
    }
  }
}

TEST(SpecEngine, PreemptionBetweenRoundsLosesNothing) {
  // Four 100-token prompts fit 8 blocks; growing to 250 tokens each they do not: the newest
  // are preempted and recomputed (prompt and generated tokens, target and draft) while the
  // others speculate.
  const std::string target = hybrid_target();
  const Workload w = preempting_workload();
  const Outcome plain = run(target, base_config(), w);
  for (const char* rollback : {"lanes", "replay"}) {
    EngineConfig c = base_config();
    c.num_kv_blocks = 8;
    c.spec = spec_of(hybrid_twin(), 4, rollback);
    const Outcome o = run(target, c, w);
    EXPECT_GT(o.preemptions, 0u);
    EXPECT_EQ(o.tokens, plain.tokens) << rollback;
  }
}

TEST(SpecEngine, PrefixCacheAcrossTurnsSameTokensAndResumes) {
  // A three-turn session: each turn's prompt is the last prompt, its answer and a new message.
  // With the prefix cache on (decode snapshots too), speculation must give the plain cache-on
  // engine's tokens and resume each turn from the cache, where only committed tokens were
  // published (a rejected draft token in a block or snapshot would change later turns).
  const std::string target = hybrid_target();
  for (const std::string& draft : {hybrid_twin(), target}) {
    for (const char* rollback : {"lanes", "replay"}) {
      SCOPED_TRACE(draft + " " + rollback);
      auto session = [&](bool spec) {
        EngineConfig c = base_config();
        c.num_kv_blocks = 64;
        c.prefix.enabled = true;
        c.prefix.decode_snapshots = true;
        if (spec) c.spec = spec_of(draft, 7, rollback);
        Engine engine(Model::load(target, 2), c);
        std::vector<int32_t> prompt;
        for (int t = 0; t < 90; ++t) prompt.push_back(int32_t((t * 13 + 7) % 500));
        std::vector<std::vector<int32_t>> outs;
        std::vector<int> cached;
        for (int turn = 0; turn < 3; ++turn) {
          auto s = engine.submit(testing::greedy_request(prompt, 75));
          const auto got = collect(*s);
          outs.push_back(got.tokens);
          cached.push_back(s->cached_tokens());
          prompt.insert(prompt.end(), got.tokens.begin(), got.tokens.end());
          for (int t = 0; t < 20; ++t) prompt.push_back(int32_t((t * 29 + turn) % 500));
        }
        return std::pair{outs, cached};
      };
      const auto [plain, plain_cached] = session(false);
      const auto [spec, spec_cached] = session(true);
      EXPECT_EQ(spec, plain);
      for (int turn = 1; turn < 3; ++turn) {
        // Decode snapshots at block boundaries let a turn resume past its previous prompt.
        EXPECT_GE(spec_cached[size_t(turn)], plain_cached[size_t(turn)] - 64) << "turn " << turn;
        EXPECT_GT(spec_cached[size_t(turn)], 64) << "turn " << turn;
      }
    }
  }
}

TEST(SpecEngine, BundledDeltacoderPairBitIdentical) {
  const std::string target = std::string(DS_SOURCE_DIR) + "/models/deltacoder";
  const std::string draft = std::string(DS_SOURCE_DIR) + "/models/deltacoder-draft";
  const Workload w = mixed_workload(4096);
  EngineConfig base = base_config();
  base.max_model_len = 1024;
  base.num_kv_blocks = 48;
  const Outcome plain = run(target, base, w);
  for (int k = 1; k <= 8; ++k) {
    for (const char* rollback : {"lanes", "replay"}) {
      if (std::string(rollback) == "replay" && k != 3 && k != 7) continue;
      SCOPED_TRACE("K " + std::to_string(k) + " " + rollback);
      EngineConfig c = base;
      c.spec = spec_of(draft, k, rollback);
      const Outcome o = run(target, c, w);
      EXPECT_EQ(o.tokens, plain.tokens);
      EXPECT_GT(o.accepted, 0);
    }
  }
}

// An fp8 / bf16 KV cache (target and draft alike): a verify row writes and reads its KV row in
// the same codes a decode row would, so greedy speculation stays bit-identical to plain greedy
// decoding with the same cache dtype.
TEST(SpecEngine, GreedyBitIdenticalWithAQuantizedKvCache) {
  const Workload w = mixed_workload(512);
  for (KvDtype kv : {KvDtype::Fp8E4M3, KvDtype::BF16}) {
    for (const std::string& target : {hybrid_target(), model_path("tiny-llama-f32")}) {
      EngineConfig base = base_config();
      base.kv_cache_dtype = kv;
      const Outcome plain = run(target, base, w);
      for (int k : {3, 7}) {
        for (const char* rollback : {"lanes", "replay"}) {
          SCOPED_TRACE(std::string(kv_dtype_name(kv)) + " " + target + " K " + std::to_string(k) + " " + rollback);
          EngineConfig c = base;
          c.spec = spec_of(target == hybrid_target() ? hybrid_twin() : model_path("tiny-hybrid-f32"), k, rollback);
          const Outcome o = run(target, c, w);
          EXPECT_EQ(o.tokens, plain.tokens);
          EXPECT_GT(o.drafted, 0);
        }
      }
    }
  }
}

TEST(SpecEngine, GreedyBitIdenticalWithBf16Activations) {
  // --activation-dtype bf16 rounds each row's activations on their own, so a verify step's K+1
  // rows compute what K+1 decode steps would: speculation stays bit-identical, target and draft
  // both on bf16 weights meeting bf16 activations.
  const Workload w = mixed_workload(512);
  const std::string llama_bf16 = preset_model("tiny-llama", 512, 9, DType::BF16);
  for (const std::string& target : {hybrid_twin(), llama_bf16}) {
    EngineConfig base = base_config();
    base.activation_dtype = ActivationDtype::BF16;
    const Outcome plain = run(target, base, w);
    for (int k : {3, 7}) {
      for (const char* rollback : {"lanes", "replay"}) {
        SCOPED_TRACE(target + " K " + std::to_string(k) + " " + rollback);
        EngineConfig c = base;
        c.spec = spec_of(target == llama_bf16 ? hybrid_twin() : llama_bf16, k, rollback);
        const Outcome o = run(target, c, w);
        EXPECT_EQ(o.tokens, plain.tokens);
        EXPECT_GT(o.drafted, 0);
      }
    }
  }
}

TEST(SpecEngine, SeededSamplingRepeatsWhateverTheBatch) {
  // A seeded request draws from its own stream (draft proposals, acceptance tests, residuals):
  // the same tokens alone and beside others.
  const std::string target = hybrid_target();
  for (SpecMethod m : {SpecMethod::Greedy, SpecMethod::Probabilistic, SpecMethod::Block}) {
    EngineConfig c = base_config();
    c.spec = spec_of(hybrid_twin(), 4);
    c.spec.method = m;
    auto sample = [&](int others) {
      Engine engine(Model::load(target, 2), c);
      Request r = testing::greedy_request(mixed_workload(512).prompts[1], 48);
      r.sampling.temperature = 0.9f;
      r.sampling.top_p = 0.95f;
      r.sampling.seed = 1234;
      auto mine = engine.submit(r);
      std::vector<std::shared_ptr<RequestStream>> rest;
      for (int i = 0; i < others; ++i) {
        Request o = r;
        o.sampling.seed = uint64_t(i);
        rest.push_back(engine.submit(o));
      }
      const auto got = collect(*mine);
      for (auto& s : rest) collect(*s);
      return got.tokens;
    };
    EXPECT_EQ(sample(0), sample(3)) << spec_method_name(m);
  }
}

// ---- suffix drafting and --num-speculative-tokens auto (spec_decode/suffix_proposer.h, spec_decode/draft_length.h)

SpecOptions suffix_of(int k, bool auto_k, const char* rollback = "lanes") {
  SpecOptions s;
  s.source = DraftSource::Suffix;
  s.num_speculative_tokens = k;
  s.auto_k = auto_k;
  s.method = SpecMethod::Block;
  s.state_rollback = rollback;
  // auto's choice rests on timings: with draft rows priced free it always drafts, so these tests
  // (token identity) speculate whatever the machine (ASan's timings made it draft nothing).
  if (auto_k) s.test_row_cost_scale = 0;
  resolve_spec_options(&s);
  return s;
}

// A request whose client gave its seed gets the same text at temperature > 0 whatever drafts
// it: run twice and beside other requests in one engine (the suffix drafter's global trie, auto's
// timings and the batch all change the rounds between runs), and equal to plain sampling's text
// without speculation, for the draft model (probabilistic drafting, block verification configured),
// suffix drafting, and auto K over both.
TEST(SpecEngine, SeededTextIsTheSameForEveryDrafterAloneAgainAndInABatch) {
  const std::string target = hybrid_target();
  const std::vector<int32_t> prompt = mixed_workload(512).prompts[1];
  const int n = 48;
  const SeededRuns plain = seeded_runs(target, base_config(), prompt, n);
  ASSERT_EQ(plain.again, plain.alone);
  ASSERT_EQ(plain.beside, plain.alone);
  // auto over real timings may choose to draft nothing (under ASan it does): those cases check
  // the text only; the same choices with draft rows priced free must draft.
  SpecOptions draft_auto = spec_of(hybrid_twin(), 0);
  draft_auto.auto_k = true;
  resolve_spec_options(&draft_auto);
  SpecOptions draft_auto_always = spec_of(hybrid_twin(), 0);
  draft_auto_always.auto_k = true;
  draft_auto_always.test_row_cost_scale = 0;
  resolve_spec_options(&draft_auto_always);
  SpecOptions suffix_auto = suffix_of(0, true);
  suffix_auto.test_row_cost_scale = -1;  // auto's real, timing-dependent choice
  resolve_spec_options(&suffix_auto);
  struct Case {
    const char* name;
    SpecOptions spec;
    bool must_draft;
  };
  for (const Case& k : {Case{"draft model K 4", spec_of(hybrid_twin(), 4), true},
                        Case{"draft model auto", draft_auto, false},
                        Case{"draft model auto, drafting always", draft_auto_always, true},
                        Case{"suffix K 4", suffix_of(4, false), true}, Case{"suffix K 8 probabilistic", suffix_of(8, false), true},
                        Case{"suffix auto", suffix_auto, false}, Case{"suffix auto, drafting always", suffix_of(0, true), true}}) {
    SCOPED_TRACE(k.name);
    EngineConfig c = base_config();
    c.spec = k.spec;
    if (std::string(k.name) == "suffix K 8 probabilistic") c.spec.method = SpecMethod::Probabilistic;
    const SeededRuns o = seeded_runs(target, c, prompt, n);
    EXPECT_EQ(o.again, o.alone) << "the same seed twice";
    EXPECT_EQ(o.beside, o.alone) << "the same seed beside other requests";
    EXPECT_EQ(o.alone, plain.alone) << "the same seed without speculation";
    if (k.must_draft) {
      EXPECT_GT(o.drafted, 0);
    }
  }
}

TEST(SuffixEngine, GreedyBitIdenticalWithSuffixAndAuto) {
  // The mixed batch (prefill chunks beside verify rounds, sequences ending at different steps):
  // suffix drafting at fixed K and under auto, and auto over a draft model, all give plain
  // greedy's tokens. Tiny random models fall into loops, which the tries find.
  const std::string target = hybrid_target();
  const Workload w = mixed_workload(512);
  const Outcome plain = run(target, base_config(), w);
  struct Case {
    const char* name;
    SpecOptions spec;
  };
  SpecOptions draft_auto = spec_of(hybrid_twin(), 0, "replay");
  draft_auto.auto_k = true;
  draft_auto.test_row_cost_scale = 0;
  resolve_spec_options(&draft_auto);
  for (const Case& k : {Case{"suffix K 3", suffix_of(3, false)}, Case{"suffix K 8 replay", suffix_of(8, false, "replay")},
                        Case{"suffix auto", suffix_of(0, true)}, Case{"draft auto", draft_auto}}) {
    SCOPED_TRACE(k.name);
    EngineConfig c = base_config();
    c.spec = k.spec;
    const Outcome o = run(target, c, w);
    ASSERT_EQ(o.tokens, plain.tokens);
    EXPECT_GT(o.drafted, 0);
    EXPECT_GT(o.accepted, 0);
  }
}

TEST(SuffixEngine, PrefixCacheAcrossTurnsSameTokens) {
  // Each turn resends the history with the last answer: the per-request trie finds the quoted
  // answer, and the prefix cache (decode snapshots on) resumes; tokens stay those of the plain
  // cache-on engine.
  const std::string target = hybrid_target();
  auto session = [&](const SpecOptions* spec) {
    EngineConfig c = base_config();
    c.num_kv_blocks = 64;
    c.prefix.enabled = true;
    c.prefix.decode_snapshots = true;
    if (spec) c.spec = *spec;
    Engine engine(Model::load(target, 2), c);
    std::vector<int32_t> prompt;
    for (int t = 0; t < 90; ++t) prompt.push_back(int32_t((t * 13 + 7) % 500));
    std::vector<std::vector<int32_t>> outs;
    int accepted = 0;
    for (int turn = 0; turn < 3; ++turn) {
      // A second request beside each turn, so verify rounds share steps with another sequence.
      auto s = engine.submit(testing::greedy_request(prompt, 75));
      auto side = engine.submit(testing::greedy_request(std::vector<int32_t>(prompt.begin(), prompt.begin() + 40), 30));
      const auto got = collect(*s);
      collect(*side);
      outs.push_back(got.tokens);
      accepted += s->accepted_prediction_tokens();
      prompt.insert(prompt.end(), got.tokens.begin(), got.tokens.end());
      for (int t = 0; t < 20; ++t) prompt.push_back(int32_t((t * 29 + turn) % 500));
    }
    return std::pair{outs, accepted};
  };
  const auto [plain, none] = session(nullptr);
  for (bool auto_k : {false, true}) {
    const SpecOptions spec = suffix_of(7, auto_k);
    const auto [got, accepted] = session(&spec);
    EXPECT_EQ(got, plain) << (auto_k ? "auto" : "K 7");
    EXPECT_GT(accepted, 0);
  }
}

TEST(SuffixEngine, BundledDeltacoderBitIdentical) {
  const std::string target = std::string(DS_SOURCE_DIR) + "/models/deltacoder";
  const Workload w = mixed_workload(4096);
  EngineConfig base = base_config();
  base.max_model_len = 1024;
  base.num_kv_blocks = 48;
  const Outcome plain = run(target, base, w);
  for (bool auto_k : {false, true}) {
    EngineConfig c = base;
    c.spec = suffix_of(8, auto_k, auto_k ? "lanes" : "replay");
    const Outcome o = run(target, c, w);
    EXPECT_EQ(o.tokens, plain.tokens) << (auto_k ? "auto" : "K 8");
    EXPECT_GT(o.accepted, 0);
  }
}

TEST(SuffixEngine, AutoTakesNoDraftWhenRowsAreExpensiveAndDraftsWhenCheap) {
  // The test hook scales what the start-up calibration measured for rows beyond a step's first.
  const std::string target = hybrid_target();
  const Workload w = mixed_workload(512);
  const Outcome plain = run(target, base_config(), w);
  for (bool suffix : {false, true}) {
    for (double scale : {1e6, 0.0}) {
      SCOPED_TRACE(std::string(suffix ? "suffix" : "draft model") + " scale " + std::to_string(scale));
      EngineConfig c = base_config();
      if (suffix) {
        c.spec = suffix_of(0, true);
      } else {
        c.spec = spec_of(hybrid_twin(), 0);
        c.spec.auto_k = true;
        resolve_spec_options(&c.spec);
      }
      c.spec.test_row_cost_scale = scale;
      const Outcome o = run(target, c, w);
      EXPECT_EQ(o.tokens, plain.tokens);
      if (scale > 1)
        EXPECT_EQ(o.drafted, 0) << "verify rows cost more than any token is worth";
      else
        EXPECT_GT(o.drafted, 0) << "free verify rows are always worth a plausible token";
    }
  }
}

}  // namespace
}  // namespace ds::test
