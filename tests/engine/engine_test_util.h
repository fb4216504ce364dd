// Helpers for driving an Engine with a FakeModel from tests.
#pragma once
#include <chrono>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "fake_model.h"

namespace ds::testing {

// An Engine over a FakeModel, with the model kept at hand for its reference outputs and checks.
struct FakeEngine {
  FakeModel* model;
  std::unique_ptr<Engine> engine;
  explicit FakeEngine(EngineConfig cfg, int vocab = 512, std::vector<int32_t> eos = {}) {
    auto m = std::make_unique<FakeModel>(vocab, std::move(eos));
    model = m.get();
    engine = std::make_unique<Engine>(std::move(m), cfg);
  }
};

struct Collected {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::None;
  std::string error;
  std::vector<TokenOutput> outputs;
};

// Reads a stream to its end (or until `cancel_after` tokens, then cancels and drains).
inline Collected collect(RequestStream& s, int cancel_after = -1) {
  Collected c;
  StreamBatch b;
  bool cancelled = false;
  for (;;) {
    s.wait(std::chrono::milliseconds(100), &b);
    for (auto& t : b.tokens) {
      c.tokens.push_back(t.token);
      c.outputs.push_back(t);
    }
    b.tokens.clear();
    if (!cancelled && cancel_after >= 0 && int(c.tokens.size()) >= cancel_after) {
      s.cancel();
      cancelled = true;
    }
    if (b.finished) {
      c.reason = b.reason;
      c.error = b.error;
      return c;
    }
  }
}

inline Request greedy_request(std::vector<int32_t> prompt, int max_tokens) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  return r;
}

inline std::vector<int32_t> make_prompt(int len, int seed, int vocab = 512) {
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back(int32_t(FakeModel::mix(uint64_t(seed) * 7919 + uint64_t(i)) % uint64_t(vocab)));
  return p;
}

}  // namespace ds::testing
