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

}  // namespace ds::test
