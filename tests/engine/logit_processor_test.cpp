// Penalties, logit bias and output constraints through the engine: greedy outputs equal a
// reference that processes the FakeModel's logits by the formulas itself, constrained outputs
// are sentences of their grammar, and sampled outputs do not depend on the batch around them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "../grammar/grammar_test_util.h"
#include "engine_test_util.h"
#include "grammar/json_schema.h"
#include "grammar/token_constraint.h"

namespace ds {
namespace {

using testing::collect;
using testing::make_prompt;

EngineConfig config() {
  EngineConfig c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 128;
  c.max_model_len = 512;
  c.num_kv_blocks = 64;
  return c;
}

// Greedy under the penalties and bias, recomputed from the raw logits.
std::vector<int32_t> reference_penalized(const testing::FakeModel& m, std::vector<int32_t> toks, int n,
                                         const SamplingParams& p) {
  const size_t prompt_len = toks.size();
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const auto raw = m.reference_logits(toks);
    std::set<int32_t> seen(toks.begin(), toks.end());
    std::map<int32_t, int> count;
    for (size_t j = prompt_len; j < toks.size(); ++j) ++count[toks[j]];
    int32_t best = 0;
    double best_l = -1e300;
    for (int32_t t = 0; t < int32_t(raw.size()); ++t) {
      double l = raw[size_t(t)];
      if (seen.count(t)) l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
      const int c = count.count(t) ? count[t] : 0;
      l -= c * p.frequency_penalty + (c ? p.presence_penalty : 0.f);
      for (const auto& [bt, b] : p.logit_bias)
        if (bt == t) l += b;
      // The engine works in float; compare in float so that near-ties break the same way.
      const float lf = float(l);
      if (lf > best_l) best_l = lf, best = t;
    }
    out.push_back(best);
    toks.push_back(best);
  }
  return out;
}

TEST(LogitProcessor, PenaltiesAndBiasMatchTheReferenceGreedily) {
  testing::FakeEngine f(config(), 256);
  std::vector<SamplingParams> cases(4);
  cases[0].frequency_penalty = 1.5f;
  cases[1].presence_penalty = 2.f;
  cases[2].repetition_penalty = 1.8f;
  cases[3].frequency_penalty = 0.4f;
  cases[3].presence_penalty = -0.5f;
  cases[3].repetition_penalty = 0.7f;
  cases[3].logit_bias = {{5, 100.f}, {7, -100.f}, {9, 3.f}};
  for (size_t i = 0; i < cases.size(); ++i) {
    Request r;
    r.prompt = make_prompt(40, int(i));
    for (auto& t : r.prompt) t %= 256;
    r.max_tokens = 60;
    r.ignore_eos = true;
    r.sampling = cases[i];
    r.sampling.temperature = 0;
    const auto got = collect(*f.engine->submit(r)).tokens;
    EXPECT_EQ(got, reference_penalized(*f.model, r.prompt, 60, r.sampling)) << "case " << i;
    EXPECT_NE(got, f.model->reference_generate(r.prompt, 60)) << "case " << i << " changed nothing";
  }
}

// A vocabulary for the fake model's 256 ids: printable bytes, a few JSON fragments, and ids
// without text (which a constraint never allows).
std::shared_ptr<grammar::TokenVocabulary> fake_vocab() {
  std::vector<std::string> v(256);
  for (int t = 0; t < 256; ++t) {
    if (t >= 0x20 && t < 0x7f) v[size_t(t)] = std::string(1, char(t));
  }
  const char* frags[] = {"{\"", "\":", "\",", "\"}", "true", "false", "null", "12", ", ", "ab", "\"a\"", "[1", "]}", "}"};
  int at = 0x7f;
  for (const char* fr : frags) v[size_t(at++)] = fr;
  return std::make_shared<grammar::TokenVocabulary>(std::move(v));
}

TEST(LogitProcessor, ConstrainedOutputsAreSentencesAndEndOnlyWhenComplete) {
  const int32_t eos = 250;
  testing::FakeEngine f(config(), 256, {eos});
  auto vocab = fake_vocab();
  auto schema = nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"array","items":{"type":"boolean"},"maxItems":3}},"required":["a","b"]})");
  auto cg = std::make_shared<grammar::CompiledGrammar>(grammar::json_schema_grammar(schema), vocab);
  int complete = 0;
  for (int seed = 0; seed < 12; ++seed) {
    Request r;
    r.prompt = make_prompt(20, seed);
    for (auto& t : r.prompt) t %= 256;
    r.max_tokens = 120;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = uint64_t(seed);
    r.constraint = std::make_shared<grammar::TokenConstraint>(cg);
    const auto c = collect(*f.engine->submit(r));
    std::string text;
    bool ended = false;
    for (int32_t t : c.tokens) {
      ASSERT_FALSE(ended) << "a token after the end";
      if (t == eos) {
        ended = true;
        continue;
      }
      ASSERT_FALSE(vocab->bytes(t).empty()) << "a token without text: " << t;
      text += vocab->bytes(t);
    }
    EXPECT_TRUE(grammar::testing::viable_prefix(cg->grammar(), text)) << text;
    if (ended) {
      EXPECT_EQ(c.reason, FinishReason::Stop);
      EXPECT_TRUE(grammar::testing::matches(cg->grammar(), text)) << text;
      EXPECT_TRUE(nlohmann::json::accept(text)) << text;
      ++complete;
    } else {
      EXPECT_EQ(c.reason, FinishReason::Length) << text;
    }
  }
  EXPECT_GT(complete, 6);
}

TEST(LogitProcessor, SampledProcessedOutputsIgnoreTheBatchAround) {
  testing::FakeEngine alone(config(), 256, {250}), busy(config(), 256, {250});
  auto cg = std::make_shared<grammar::CompiledGrammar>(grammar::json_object_grammar(), fake_vocab());
  auto request = [&](int seed, bool constrained) {
    Request r;
    r.prompt = make_prompt(30, seed);
    for (auto& t : r.prompt) t %= 256;
    r.max_tokens = 50;
    r.sampling.temperature = 0.8f;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = uint64_t(seed) * 7 + 1;
    r.sampling.frequency_penalty = 0.6f;
    r.sampling.repetition_penalty = 1.2f;
    r.sampling.logit_bias = {{3, 2.f}};
    if (constrained) r.constraint = std::make_shared<grammar::TokenConstraint>(cg);
    return r;
  };
  for (bool constrained : {false, true}) {
    const auto ref = collect(*alone.engine->submit(request(5, constrained))).tokens;
    std::vector<std::shared_ptr<RequestStream>> others;
    for (int i = 0; i < 6; ++i) others.push_back(busy.engine->submit(request(100 + i, i % 2 == 0)));
    const auto mine = busy.engine->submit(request(5, constrained));
    EXPECT_EQ(collect(*mine).tokens, ref) << "constrained " << constrained;
    for (auto& o : others) collect(*o);
  }
}

}  // namespace
}  // namespace ds
