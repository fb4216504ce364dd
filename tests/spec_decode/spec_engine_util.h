// What the speculative engine tests share: a mixed workload of four requests, the engine
// settings they start from, and a run that collects every request's tokens and acceptance.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine_test_util.h"
#include "model/model.h"

namespace ds::test {

// Four requests at once: prompts long enough that prefill chunks (64 tokens a step) run beside
// the others' verify rounds, and lengths that end at different steps.
struct Workload {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> max_tokens;
};

inline Workload mixed_workload(int vocab) {
  Workload w;
  const int lens[] = {5, 70, 130, 200};
  const int news[] = {40, 17, 64, 33};
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p;
    for (int t = 0; t < lens[i]; ++t) p.push_back(int32_t((t * 37 + i * 101 + 5) % (vocab - 8)));
    w.prompts.push_back(p);
    w.max_tokens.push_back(news[i]);
  }
  return w;
}

// Four 100-token prompts growing to 250 tokens each: they fit 8 blocks at first, not at the end,
// so the newest are preempted and recomputed (target and draft) while the others speculate.
inline Workload preempting_workload() {
  Workload w;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p;
    for (int t = 0; t < 100; ++t) p.push_back(int32_t((t * 41 + i * 7 + 1) % 500));
    w.prompts.push_back(p);
    w.max_tokens.push_back(150);
  }
  return w;
}

inline EngineConfig base_config() {
  EngineConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 64;
  c.max_model_len = 512;
  c.num_kv_blocks = 40;
  c.threads = 2;
  c.prefix.enabled = false;
  return c;
}

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  int accepted = 0, drafted = 0;
  uint64_t preemptions = 0;
};

inline Outcome run(const std::string& target, EngineConfig cfg, const Workload& w) {
  Engine engine(Model::load(target, cfg.threads), cfg);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < w.prompts.size(); ++i) streams.push_back(engine.submit(testing::greedy_request(w.prompts[i], w.max_tokens[i])));
  Outcome o;
  for (auto& s : streams) {
    const auto c = testing::collect(*s);
    EXPECT_EQ(c.reason, FinishReason::Length) << c.error;
    o.tokens.push_back(c.tokens);
    o.accepted += s->accepted_prediction_tokens();
    o.drafted += s->accepted_prediction_tokens() + s->rejected_prediction_tokens();
  }
  o.preemptions = engine.snapshot().preemptions;
  return o;
}

// A sampled request whose client gave its seed (SamplingParams::reproducible), run three times
// in one engine: alone, alone again (a suffix drafter's global trie now holds the first run's
// output), and submitted first beside `others` sampled requests of other seeds; and what the
// rounds drafted and accepted over all three.
struct SeededRuns {
  std::vector<int32_t> alone, again, beside;
  int drafted = 0, accepted = 0;
};

inline Request seeded_request(const std::vector<int32_t>& prompt, int max_tokens, uint64_t seed) {
  Request r = testing::greedy_request(prompt, max_tokens);
  r.sampling.temperature = 0.9f;
  r.sampling.top_p = 0.95f;
  r.sampling.seed = seed;
  r.sampling.reproducible = true;
  return r;
}

inline SeededRuns seeded_runs(const std::string& target, const EngineConfig& cfg, const std::vector<int32_t>& prompt,
                              int max_tokens, int others = 3) {
  Engine engine(Model::load(target, cfg.threads), cfg);
  SeededRuns out;
  const auto one = [&](int beside) {
    auto mine = engine.submit(seeded_request(prompt, max_tokens, 1234));
    std::vector<std::shared_ptr<RequestStream>> rest;
    for (int i = 0; i < beside; ++i) {
      std::vector<int32_t> p = prompt;
      p.push_back(int32_t(i + 1));
      rest.push_back(engine.submit(seeded_request(p, max_tokens, uint64_t(i + 1))));
    }
    const auto got = testing::collect(*mine);
    EXPECT_EQ(got.reason, FinishReason::Length) << got.error;
    for (auto& s : rest) testing::collect(*s);
    out.accepted += mine->accepted_prediction_tokens();
    out.drafted += mine->accepted_prediction_tokens() + mine->rejected_prediction_tokens();
    return got.tokens;
  };
  out.alone = one(0);
  out.again = one(0);
  out.beside = one(others);
  return out;
}

}  // namespace ds::test
