// Engines over 3, 4 and 8 ranks that are threads of this process (thread_ranks.h) against an
// engine over the whole model: greedy multi-turn sessions that resume from the prefix cache (a
// state and a block saved and restored through every rank's part), and speculative decoding
// (verify chunks, partial accepts, lanes and replay rollback) that must draft, accept and
// reject, so the comparison covers every path of a round.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "model/model.h"
#include "rank_models.h"
#include "thread_ranks.h"

namespace ds::test {
namespace {

struct Layout {
  std::string shape;
  int tp = 1, dcp = 1;
};

std::string layout_name(const ::testing::TestParamInfo<Layout>& i) {
  return i.param.shape + "_tp" + std::to_string(i.param.tp) + "_dcp" + std::to_string(i.param.dcp);
}

class ThreadRankEngines : public ::testing::TestWithParam<Layout> {
 protected:
  std::string dir() const { return RankModels::get().dir(GetParam().shape, "f32"); }
  std::unique_ptr<Model> ranked() const { return std::make_unique<ThreadRankedModel>(dir(), GetParam().tp, GetParam().dcp); }
};

EngineConfig engine_config(bool prefix) {
  EngineConfig c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 256;
  c.max_model_len = 240;
  c.num_kv_blocks = 96;
  c.block_size = 24;  // dcp 3, 4 and 8 divide it
  c.threads = 1;
  c.prefix.enabled = prefix;
  if (prefix) c.prefix.num_state_snapshots = 32;
  return c;
}

// 8 sessions of two turns, all running at once: turn 2 is turn 1's prompt, its answer and more.
// Every turn's tokens, and the prompt tokens the cache supplied.
std::vector<std::vector<int32_t>> sessions(std::unique_ptr<Model> m, int* cached) {
  Engine engine(std::move(m), engine_config(true));
  const int V = engine.vocab_size();
  std::vector<std::vector<int32_t>> prompts, out;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int s = 0; s < 8; ++s) {
    prompts.push_back(testing::make_prompt(20 + 11 * s, 100 + s, V));
    streams.push_back(engine.submit(testing::greedy_request(prompts.back(), 8)));
  }
  for (auto& s : streams) out.push_back(testing::collect(*s).tokens);
  streams.clear();
  for (int s = 0; s < 8; ++s) {
    std::vector<int32_t> p = prompts[size_t(s)];
    p.insert(p.end(), out[size_t(s)].begin(), out[size_t(s)].end());
    const auto more = testing::make_prompt(7, 300 + s, V);
    p.insert(p.end(), more.begin(), more.end());
    streams.push_back(engine.submit(testing::greedy_request(p, 8)));
  }
  *cached = 0;
  for (auto& s : streams) {
    out.push_back(testing::collect(*s).tokens);
    *cached += s->cached_tokens();
  }
  return out;
}

TEST_P(ThreadRankEngines, GreedyTokensMatchOneProcessOverMultiTurnSessions) {
  int cached_whole = 0, cached_split = 0;
  const auto whole = sessions(Model::load(dir(), 1), &cached_whole);
  const auto split = sessions(ranked(), &cached_split);
  EXPECT_EQ(whole, split);
  EXPECT_GT(cached_split, 0) << "turn 2 should resume from the prefix cache";
  EXPECT_EQ(cached_split, cached_whole);
}

TEST_P(ThreadRankEngines, SpeculativeDecodingMatchesOneProcessAndDraftsAcceptsAndRejects) {
  // Suffix drafting over a prompt that repeats the phrase 20..25 five times: both models'
  // greedy text follows its suffixes in part (measured, accepted / rejected at every layout,
  // lanes and replay alike: 3/1 hybrid, 10/1 llama). One request, so what it drafts depends on
  // its own tokens alone, never on when another arrives.
  std::vector<int32_t> phrase;
  for (int r = 0; r < 5; ++r)
    for (int i = 0; i < 6; ++i) phrase.push_back(int32_t(20 + i));
  auto run = [&](std::unique_ptr<Model> m, EngineConfig cfg, int* drafted, int* accepted, int* rejected) {
    Engine engine(std::move(m), cfg);
    auto s = engine.submit(testing::greedy_request(phrase, 40));
    const auto tokens = testing::collect(*s).tokens;
    *accepted = s->accepted_prediction_tokens();
    *rejected = s->rejected_prediction_tokens();
    *drafted = *accepted + *rejected;
    return tokens;
  };
  int d = 0, acc = 0, rej = 0;
  const auto plain = run(Model::load(dir(), 1), engine_config(false), &d, &acc, &rej);
  EXPECT_EQ(d, 0);
  for (const char* rollback : {"lanes", "replay"}) {
    SCOPED_TRACE(rollback);
    EngineConfig c = engine_config(false);
    c.spec.source = DraftSource::Suffix;
    c.spec.num_speculative_tokens = 3;
    c.spec.state_rollback = rollback;
    c.spec.method = SpecMethod::Greedy;
    EXPECT_EQ(plain, run(ranked(), c, &d, &acc, &rej));
    std::printf("[thread ranks] %s tp %d dcp %d, %s: drafted %d, accepted %d, rejected %d\n", GetParam().shape.c_str(),
                GetParam().tp, GetParam().dcp, rollback, d, acc, rej);
    EXPECT_GT(d, 0) << "nothing drafted: no verify chunk ran across the ranks";
    EXPECT_GT(acc, 0) << "nothing accepted: no commit of a speculative token ran across the ranks";
    EXPECT_GT(rej, 0) << "nothing rejected: no partial accept (rollback) ran across the ranks";
  }
}

// 3, 4 and 8 ranks: tp and dcp together, dcp alone, and the GQA model at 8 ranks.
INSTANTIATE_TEST_SUITE_P(Layouts, ThreadRankEngines,
                         ::testing::Values(Layout{"hybrid", 3, 3}, Layout{"hybrid", 4, 2}, Layout{"hybrid", 1, 3},
                                           Layout{"hybrid", 8, 8}, Layout{"llama", 8, 4}, Layout{"llama", 3, 1}),
                         layout_name);

}  // namespace
}  // namespace ds::test
