// Speculation with requests that ask for more than greedy tokens, under every drafter (a draft
// model, its own target as draft, suffix drafting, the parallel drafter, and auto draft length
// over each): whatever the drafter, the request's output is what a plain engine gives it.
// - Constrained (a JSON object grammar, a JSON schema, a regex), penalized (frequency, presence,
//   repetition) and logit_bias requests draft nothing (verify rows skip the logit processor, so
//   such a request must decode one processed token per step) and equal plain decoding bit for
//   bit, while a plain greedy request in the same batch still speculates.
// - Logprobs with top logprobs equal plain decoding's bit for bit (a verify row's logits are
//   a decode row's), and a stop token met inside an accepted draft run ends the request there,
//   with plain decoding's tokens, logprobs and finish reason.
// Stop strings and SSE (the server's part of these requests) are in
// tests/server/spec_server_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine_test_util.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar/token_constraint.h"
#include "model/model.h"
#include "spec_engine_util.h"
#include "spec_test_util.h"

namespace ds::test {
namespace {

using testing::collect;

// ---- the drafters

struct Drafter {
  std::string name;
  SpecOptions spec;
  bool accepts_everything = false;  // the target drafting for itself
};

SpecOptions model_draft(const std::string& draft, int k) {
  SpecOptions s;
  s.draft_model = draft;
  s.num_speculative_tokens = k;
  s.method = SpecMethod::Block;  // greedy requests verify greedily whatever the method
  s.draft_sample = DraftSample::Probabilistic;
  return s;
}

SpecOptions suffix_draft(int k) {
  SpecOptions s;
  s.source = DraftSource::Suffix;
  s.num_speculative_tokens = k;
  s.method = SpecMethod::Block;
  return s;
}

// Auto over a drafter, with draft rows priced free: it always drafts, whatever this machine's
// timings (ASan's made the real choice draft nothing), so the batch's plain request speculates.
SpecOptions with_auto(SpecOptions s) {
  s.auto_k = true;
  s.test_row_cost_scale = 0;
  resolve_spec_options(&s);
  return s;
}

// A target and the drafters that run on it, with the engine settings they share. The model
// folders preset_model writes are removed when the process exits (support/remove_at_exit.h).
struct Target {
  std::string target;
  int vocab = 0;
  EngineConfig cfg;
  std::vector<Drafter> drafters;
};

EngineConfig features_config() {
  EngineConfig c = base_config();
  c.max_num_seqs = 8;  // every request of a batch below at once
  c.num_kv_blocks = 48;
  // Every prompt of a batch prefills whole in the first step, in plain and speculative engines
  // alike. A prompt split into chunks at other places (verify rows take a step's budget) gives
  // its KDA state and so its logits other rounding: the same greedy tokens, not the same floats.
  c.max_num_batched_tokens = 256;
  return c;
}

Target hybrid_target() {
  // tiny-hybrid with vocabulary 512 (bos = eos = 511), seed 3; its bf16 twin agrees often, not
  // always (partial accepts); the target drafting for itself accepts every draft token.
  Target hybrid;
  hybrid.target = preset_model("tiny-hybrid", 512, 3);
  hybrid.vocab = 512;
  hybrid.cfg = features_config();
  const std::string twin = preset_model("tiny-hybrid", 512, 3, DType::BF16);
  SpecOptions self = model_draft(hybrid.target, 4);
  self.state_rollback = "replay";
  hybrid.drafters = {{"draft model K 4", model_draft(twin, 4)},
                     {"self draft K 4 replay", self, true},
                     {"draft model auto", with_auto(model_draft(twin, 0))},
                     {"suffix K 4", suffix_draft(4)},
                     {"suffix auto", with_auto(suffix_draft(0))}};
  return hybrid;
}

Target deltacoder_target() {
  // The parallel drafter runs on the bundled deltacoder's hidden states.
  Target coder;
  coder.target = std::string(DS_SOURCE_DIR) + "/models/deltacoder";
  coder.vocab = 4096;
  coder.cfg = features_config();
  coder.cfg.max_model_len = 1024;
  const std::string dspark = std::string(DS_SOURCE_DIR) + "/models/deltacoder-dspark";
  SpecOptions parallel_auto = model_draft(dspark, 7);
  parallel_auto.auto_k = true;
  parallel_auto.test_row_cost_scale = 0;
  coder.drafters = {{"parallel drafter K 4", model_draft(dspark, 4)}, {"parallel drafter auto", parallel_auto}};
  return coder;
}

// ---- requests, and what came back

// A prompt whose greedy continuation on these models does not repeat itself early, so a stop
// token taken from it first appears where it was taken.
std::vector<int32_t> prompt_of(int vocab) {
  std::vector<int32_t> p;
  for (int t = 0; t < 24; ++t) p.push_back(int32_t((t * 53 + 11) % (vocab - 8)));
  return p;
}

struct Result {
  std::vector<TokenOutput> outputs;
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::None;
  int drafted = 0, accepted = 0;
};

// The requests of `make` (built afresh for each engine: a constraint is one request's state),
// submitted at once to one engine; after `warm_up`, when given, has run alone in it to its end.
template <class Make>
std::vector<Result> run_batch(const std::string& target, const EngineConfig& cfg, Make make,
                              const Request* warm_up = nullptr) {
  Engine engine(Model::load(target, cfg.threads), cfg);
  if (warm_up) collect(*engine.submit(*warm_up));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (Request& r : make()) streams.push_back(engine.submit(std::move(r)));
  std::vector<Result> out;
  for (auto& s : streams) {
    const auto c = collect(*s);
    EXPECT_NE(c.reason, FinishReason::Error) << "finished with an error: " << c.error;
    Result r;
    r.outputs = c.outputs;
    r.tokens = c.tokens;
    r.reason = c.reason;
    r.accepted = s->accepted_prediction_tokens();
    r.drafted = r.accepted + s->rejected_prediction_tokens();
    out.push_back(std::move(r));
  }
  return out;
}

// Bit for bit: the same tokens, the same float logprobs, the same alternatives in the same order.
void expect_same_outputs(const Result& got, const Result& want, const std::string& what) {
  EXPECT_STREQ(finish_reason_name(got.reason), finish_reason_name(want.reason)) << what;
  ASSERT_EQ(got.tokens, want.tokens) << what;
  for (size_t i = 0; i < want.outputs.size(); ++i) {
    const TokenOutput& g = got.outputs[i];
    const TokenOutput& w = want.outputs[i];
    EXPECT_EQ(g.logprob, w.logprob) << what << ", token " << i;
    EXPECT_EQ(g.top, w.top) << what << ", token " << i;
  }
}

// ---- item: processed requests never speculate

// The synthetic text of each id for the constraints: printable ASCII as itself, a few JSON
// fragments after it, and no text for the rest (a constraint never allows those). The models are
// random, so any spelling does; what matters is that the mask changes the greedy choice.
std::shared_ptr<const grammar::TokenVocabulary> synthetic_vocab(int vocab) {
  std::vector<std::string> v(static_cast<size_t>(vocab));
  for (int t = 0x20; t < 0x7f; ++t) v[size_t(t)] = std::string(1, char(t));
  const char* frags[] = {"{\"", "\":", "\",", "\"}", "true", "false", "null", "12", ", ", "ab", "\"a\"", "[1", "]}", "}"};
  int at = 0x7f;
  for (const char* f : frags) v[size_t(at++)] = f;
  return std::make_shared<const grammar::TokenVocabulary>(std::move(v));
}

struct Constraints {
  std::shared_ptr<grammar::CompiledGrammar> object, schema, regex;
};

Constraints constraints_for(int vocab) {
  const auto words = synthetic_vocab(vocab);
  Constraints c;
  c.object = std::make_shared<grammar::CompiledGrammar>(grammar::json_object_grammar(), words);
  const auto schema = nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"id":{"type":"integer"},"code":{"type":"string","pattern":"^[a-f]{2,6}-[0-9]{1,3}$"},)"
      R"("ok":{"type":"boolean"}},"required":["id","code","ok"]})");
  c.schema = std::make_shared<grammar::CompiledGrammar>(grammar::json_schema_grammar(schema), words);
  grammar::Grammar g;
  g.set_root(grammar::add_regex(g, "[A-Z][a-z]{2,9}( [a-z]{1,8}){1,6}\\.", grammar::ByteSet::range(0x20, 0x7e) & ~grammar::ByteSet::any_of("\"\\")));
  c.regex = std::make_shared<grammar::CompiledGrammar>(std::move(g), words);
  return c;
}

constexpr int kNew = 32;

// Request 0 is plain greedy; every other one has its logits processed. `first` is plain greedy's
// first output token, which the bias request bans (so the bias must change its output).
std::vector<Request> processed_batch(const std::vector<int32_t>& prompt, const Constraints& c, int32_t first) {
  std::vector<Request> rs;
  rs.push_back(testing::greedy_request(prompt, kNew));
  for (const auto& cg : {c.object, c.schema, c.regex}) {
    Request r = testing::greedy_request(prompt, kNew);
    r.ignore_eos = false;  // the end token is allowed once the constraint is complete
    r.constraint = std::make_shared<grammar::TokenConstraint>(cg);
    rs.push_back(std::move(r));
  }
  Request freq = testing::greedy_request(prompt, kNew);
  // Greedy output here rarely repeats a token, so a penalty on repeats alone would change
  // nothing: a presence reward larger than the frequency cost makes repeats win instead.
  freq.sampling.frequency_penalty = 1.f;
  freq.sampling.presence_penalty = -2.f;
  rs.push_back(freq);
  Request rep = testing::greedy_request(prompt, kNew);
  rep.sampling.repetition_penalty = 1.8f;
  rs.push_back(rep);
  Request bias = testing::greedy_request(prompt, kNew);
  bias.sampling.logit_bias = {{first, -100.f}, {int32_t(7), 4.f}};
  rs.push_back(bias);
  // Sampled at temperature 0.8 from its own seed, constrained and penalized: it draws one
  // number per token from its own stream, so a drafter that drew from it would change its text.
  Request sampled = testing::greedy_request(prompt, kNew);
  sampled.ignore_eos = false;
  sampled.sampling.temperature = 0.8f;
  sampled.sampling.seed = 77;
  sampled.sampling.frequency_penalty = 0.3f;
  sampled.constraint = std::make_shared<grammar::TokenConstraint>(c.object);
  rs.push_back(sampled);
  return rs;
}

void processed_requests_draft_nothing(const Target& setup) {
  const char* names[] = {"plain greedy", "json object", "json schema", "regex", "frequency + presence",
                         "repetition", "logit_bias", "sampled, constrained and penalized"};
  const std::vector<int32_t> prompt = prompt_of(setup.vocab);
  const Constraints c = constraints_for(setup.vocab);
  const auto greedy = run_batch(setup.target, setup.cfg, [&] {
    return std::vector<Request>{testing::greedy_request(prompt, kNew)};
  });
  ASSERT_FALSE(greedy[0].tokens.empty());
  const auto make = [&] { return processed_batch(prompt, c, greedy[0].tokens[0]); };
  const auto plain = run_batch(setup.target, setup.cfg, make);
  ASSERT_EQ(plain[0].tokens, greedy[0].tokens) << "plain greedy beside processed requests";
  for (size_t i = 1; i < plain.size(); ++i) {
    // Otherwise a drafter that skipped the processing would pass unseen.
    EXPECT_NE(plain[i].tokens, plain[0].tokens) << names[i] << ": the processing changed nothing";
  }
  for (const Drafter& d : setup.drafters) {
    SCOPED_TRACE(d.name);
    EngineConfig cfg = setup.cfg;
    cfg.spec = d.spec;
    const auto got = run_batch(setup.target, cfg, make);
    ASSERT_EQ(got.size(), plain.size());
    EXPECT_GT(got[0].drafted, 0) << "the plain greedy request must still speculate";
    for (size_t i = 0; i < got.size(); ++i) {
      expect_same_outputs(got[i], plain[i], names[i]);
      if (i > 0) {
        EXPECT_EQ(got[i].drafted, 0) << names[i] << " was given draft tokens";
      }
    }
  }
}

// ---- item: logprobs and stop tokens inside an accepted run

void logprobs_and_stops_match(const Target& setup) {
  const std::vector<int32_t> prompt = prompt_of(setup.vocab);
  // Plain greedy's continuation; stop tokens are taken from it where each appears first.
  const auto ref = run_batch(setup.target, setup.cfg, [&] {
    return std::vector<Request>{testing::greedy_request(prompt, kNew)};
  })[0].tokens;
  // Four consecutive positions: with K 4 and every draft accepted, a round emits 5 tokens and
  // at most one of them is its bonus token, so at least three stops land inside an accepted run.
  std::vector<int32_t> stops;
  for (int p = 4; p < kNew && stops.size() < 4; ++p) {
    const int32_t t = ref[size_t(p)];
    if (std::find(ref.begin(), ref.begin() + p, t) != ref.begin() + p) {
      stops.clear();  // seen before: the run of consecutive first appearances starts again
      continue;
    }
    stops.push_back(t);
  }
  ASSERT_EQ(stops.size(), 4u) << "plain greedy repeats itself too early for stop tokens";
  const auto make = [&] {
    std::vector<Request> rs;
    Request lp = testing::greedy_request(prompt, kNew);
    lp.logprobs = 5;
    rs.push_back(lp);
    for (int32_t stop : stops) {
      Request r = testing::greedy_request(prompt, kNew);
      r.ignore_eos = false;
      r.stop_token_ids = {stop};
      r.logprobs = 2;
      rs.push_back(r);
    }
    return rs;
  };
  // The random models' outputs never repeat their prompt, so suffix drafting only finds a
  // continuation in its global trie: a first run of the same request puts one there (the
  // plain engine runs it too, and it changes nothing there).
  const Request warm_up = testing::greedy_request(prompt, kNew);
  const auto plain = run_batch(setup.target, setup.cfg, make, &warm_up);
  ASSERT_EQ(plain[0].tokens, ref);
  for (size_t i = 1; i < plain.size(); ++i) {
    ASSERT_EQ(plain[i].reason, FinishReason::Stop) << "stop " << i;
    ASSERT_EQ(plain[i].tokens.back(), stops[i - 1]) << "stop " << i;
    ASSERT_LT(plain[i].tokens.size(), size_t(kNew)) << "stop " << i;
    ASSERT_FALSE(plain[i].outputs.back().top.empty()) << "stop " << i << " has no top logprobs";
  }
  ASSERT_EQ(plain[0].outputs.back().top.size(), 5u);
  for (const Drafter& d : setup.drafters) {
    SCOPED_TRACE(d.name);
    EngineConfig cfg = setup.cfg;
    cfg.spec = d.spec;
    const auto got = run_batch(setup.target, cfg, make, &warm_up);
    ASSERT_EQ(got.size(), plain.size());
    int drafted = 0, accepted = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      expect_same_outputs(got[i], plain[i], i == 0 ? "logprobs 5" : "stop token " + std::to_string(i));
      drafted += got[i].drafted;
      accepted += got[i].accepted;
    }
    EXPECT_GT(drafted, 0);
    EXPECT_GT(accepted, 0) << "no draft run was accepted: no stop token could land inside one";
    if (d.accepts_everything) {
      EXPECT_EQ(accepted, drafted) << "a self-draft accepts everything";
    }
  }
}

TEST(SpecRequestFeatures, ProcessedRequestsDraftNothingAndEqualPlainDecoding) {
  processed_requests_draft_nothing(hybrid_target());
}

TEST(SpecRequestFeatures, ProcessedRequestsDraftNothingUnderTheParallelDrafter) {
  processed_requests_draft_nothing(deltacoder_target());
}

TEST(SpecRequestFeatures, LogprobsAndStopTokensMidRoundEqualPlainDecoding) { logprobs_and_stops_match(hybrid_target()); }

TEST(SpecRequestFeatures, LogprobsAndStopTokensMidRoundUnderTheParallelDrafter) {
  logprobs_and_stops_match(deltacoder_target());
}

}  // namespace
}  // namespace ds::test
