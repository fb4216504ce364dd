// Tensor parallel across MPI ranks against one process: run by ctest under
// `mpirun -np 2` (tests/CMakeLists.txt). Rank 0 runs these tests; rank 1 holds its shards and
// follows rank 0's steps (main below). Each test builds the same model twice on rank 0: whole
// (Model::load) and across both ranks (RankedModel), and compares what they give.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <unistd.h>

#include "convert/quantize.h"
#include "distributed/ranked_model.h"
#include "distributed/ranks.h"
#include "engine_test_util.h"
#include "engine/engine.h"
#include "model/model.h"

namespace ds::test {
namespace {

std::shared_ptr<distributed::MpiCollectives> g_comm;
std::string g_quantized;  // q8_0 copies of the tiny models, made once by main

std::string quantized_dir() {
  if (g_quantized.empty()) {
    g_quantized = (std::filesystem::temp_directory_path() / ("ds_ranks_q8_" + std::to_string(::getpid()))).string();
    for (const char* m : {"tiny-llama-f32", "tiny-hybrid-f32"})
      quantize_checkpoint(std::string(DS_SOURCE_DIR) + "/tests/data/models/" + m, g_quantized + "/" + m + "-q8", QuantizeOptions{});
  }
  return g_quantized;
}

// A model (under tests/data/models, or models/ for the bundled one) and a layout of 2 ranks.
struct Layout {
  std::string model;
  int tp = 1, dcp = 1;
  // ~4x the largest |logit difference| against one process measured for this layout (the order
  // of the ranks' sums is the only difference).
  double max_gap = 0;
  std::string dir() const {
    if (model.ends_with("-q8")) return quantized_dir() + "/" + model;
    return std::string(DS_SOURCE_DIR) + (model == "deltacoder" ? "/models/" : "/tests/data/models/") + model;
  }
};

std::string layout_name(const ::testing::TestParamInfo<Layout>& i) {
  std::string n = i.param.model + "_tp" + std::to_string(i.param.tp) + "_dcp" + std::to_string(i.param.dcp);
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
}

std::unique_ptr<Model> ranked(const Layout& l) {
  return std::make_unique<distributed::RankedModel>(g_comm, distributed::OpenRequest{l.dir(), l.tp, l.dcp, 1, "auto"}, 120);
}

class Ranks : public ::testing::TestWithParam<Layout> {};

RuntimeLimits limits() {
  RuntimeLimits l;
  l.max_seqs = 4;
  l.max_batch_tokens = 256;
  l.max_logit_rows = 256;
  l.num_kv_blocks = 16;
  l.block_size = 16;
  l.threads = 1;
  l.spec_positions = 4;
  return l;
}

// A mixed step (two prefills of 70 and 5 tokens, all rows' logits), then a decode row for each
// and a speculative chunk of 3: the largest |difference| of logits over all of it.
double max_logit_gap(Model& a, Model& b) {
  a.allocate(limits());
  b.allocate(limits());
  const int V = a.config().vocab_size;
  std::vector<int32_t> table0, table1;
  for (int i = 0; i < 8; ++i) {
    table0.push_back(i);
    table1.push_back(8 + i);
  }
  double gap = 0;
  auto step = [&](const std::vector<int32_t>& tokens, const std::vector<SeqChunk>& seqs) {
    int rows = 0;
    for (const SeqChunk& s : seqs) rows += s.num_logits;
    std::vector<float> la(size_t(rows) * size_t(V)), lb(la.size());
    ForwardBatch fb{tokens, seqs};
    a.forward(fb, la.data());
    b.forward(fb, lb.data());
    for (size_t i = 0; i < la.size(); ++i) gap = std::max(gap, double(std::fabs(la[i] - lb[i])));
  };
  std::vector<int32_t> tokens;
  for (int i = 0; i < 75; ++i) tokens.push_back(int32_t((i * 37 + 11) % (V - 8)));
  step(tokens, {SeqChunk{0, table0.data(), 0, 70, 0, 70}, SeqChunk{1, table1.data(), 0, 5, 70, 5}});
  step({3, 4}, {SeqChunk{0, table0.data(), 70, 1, 0, 1}, SeqChunk{1, table1.data(), 5, 1, 1, 1}});
  SeqChunk spec{0, table0.data(), 71, 3, 0, 3};
  spec.spec_lane = 0;
  step({5, 6, 7}, {spec});
  a.commit_speculative(0, 2);
  b.commit_speculative(0, 2);
  step({8}, {SeqChunk{0, table0.data(), 73, 1, 0, 1}});
  return gap;
}

TEST_P(Ranks, LogitsMatchOneProcess) {
  auto whole = Model::load(GetParam().dir(), 1);
  auto split = ranked(GetParam());
  const double gap = max_logit_gap(*whole, *split);
  std::printf("[ranks] %s tp %d dcp %d: largest |logit difference| against one process %.3g\n", GetParam().model.c_str(),
              GetParam().tp, GetParam().dcp, gap);
  EXPECT_LT(gap, GetParam().max_gap);
}

TEST_P(Ranks, StateAndBlockRoundTripThroughAllRanks) {
  // A slot's state and a block saved through the ranked model and loaded into another slot and
  // block decode exactly as the originals.
  auto m = ranked(GetParam());
  m->allocate(limits());
  const int V = m->config().vocab_size;
  std::vector<int32_t> t0 = {0, 1}, t1 = {2, 3};
  std::vector<int32_t> prompt;
  for (int i = 0; i < 16; ++i) prompt.push_back(int32_t(i * 7 % V));
  std::vector<float> logits(size_t(V) * 2);
  m->forward(ForwardBatch{prompt, std::vector<SeqChunk>{SeqChunk{0, t0.data(), 0, 16, 0, 1}}}, logits.data());
  std::vector<std::byte> state(m->state_bytes_per_slot()), block(m->kv_bytes_per_block(16));
  m->save_state(0, state.data());
  m->save_block(0, block.data());
  m->load_state(1, state.data());
  m->load_block(2, block.data());
  std::vector<int32_t> next = {9, 9};
  m->forward(ForwardBatch{next, std::vector<SeqChunk>{SeqChunk{0, t0.data(), 16, 1, 0, 1}, SeqChunk{1, t1.data(), 16, 1, 1, 1}}},
             logits.data());
  for (int v = 0; v < V; ++v) ASSERT_EQ(logits[size_t(v)], logits[size_t(V + v)]) << "logit " << v;
}

EngineConfig engine_config(bool prefix) {
  EngineConfig c;
  c.max_num_seqs = 16;
  c.max_num_batched_tokens = 256;
  c.max_model_len = 320;
  c.num_kv_blocks = 120;
  c.block_size = 16;
  c.threads = 1;
  c.prefix.enabled = prefix;
  if (prefix) c.prefix.num_state_snapshots = 64;
  return c;
}

// 16 sessions of two turns each, all running at once: turn 2 is turn 1's prompt, its answer and
// more. Returns every turn's tokens, and the prompt tokens the cache supplied.
std::vector<std::vector<int32_t>> sessions(std::unique_ptr<Model> m, EngineConfig c, int* cached = nullptr) {
  Engine engine(std::move(m), c);
  const int V = engine.vocab_size();
  std::vector<std::vector<int32_t>> prompts, out;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int s = 0; s < 16; ++s) {
    prompts.push_back(testing::make_prompt(20 + 9 * s, 100 + s, V));
    streams.push_back(engine.submit(testing::greedy_request(prompts.back(), 10)));
  }
  for (int s = 0; s < 16; ++s) out.push_back(testing::collect(*streams[size_t(s)]).tokens);
  streams.clear();
  for (int s = 0; s < 16; ++s) {
    std::vector<int32_t> p = prompts[size_t(s)];
    p.insert(p.end(), out[size_t(s)].begin(), out[size_t(s)].end());
    const auto more = testing::make_prompt(7, 300 + s, V);
    p.insert(p.end(), more.begin(), more.end());
    streams.push_back(engine.submit(testing::greedy_request(p, 10)));
  }
  int hits = 0;
  for (int s = 0; s < 16; ++s) {
    out.push_back(testing::collect(*streams[size_t(s)]).tokens);
    hits += streams[size_t(s)]->cached_tokens();
  }
  if (cached) *cached = hits;
  return out;
}

TEST_P(Ranks, GreedyTokensMatchOneProcessOver16MultiTurnSessions) {
  int cached = 0;
  const auto whole = sessions(Model::load(GetParam().dir(), 1), engine_config(true));
  const auto split = sessions(ranked(GetParam()), engine_config(true), &cached);
  EXPECT_EQ(whole, split);
  EXPECT_GT(cached, 0) << "turn 2 should resume from the prefix cache";
}

TEST_P(Ranks, SpeculativeDecodingMatchesOneProcess) {
  // Suffix drafting over repetitive prompts: verify chunks, partial accepts and rollback (lanes
  // and replay) across ranks, against plain greedy decoding in one process.
  for (const char* rollback : {"lanes", "replay"}) {
    EngineConfig c = engine_config(false);
    c.max_num_seqs = 4;
    c.spec.source = DraftSource::Suffix;
    c.spec.num_speculative_tokens = 3;
    c.spec.state_rollback = rollback;
    c.spec.method = SpecMethod::Greedy;
    int accepted = 0, rejected = 0;
    auto run = [&](std::unique_ptr<Model> m, const EngineConfig& cfg) {
      // The phrase 94..105 five times: each of these models' greedy text follows the phrase's
      // suffixes in part, so rounds are accepted and rejected (measured, accepted / rejected,
      // lanes and replay alike: 4/5 tiny-llama, 1/4 tiny-hybrid, 3/4 its bf16, 20/5 deltacoder,
      // 3/6 the q8).
      // One request: its drafts depend on its own tokens alone, never on when others arrive.
      Engine engine(std::move(m), cfg);
      std::vector<int32_t> p;
      for (int r = 0; r < 5; ++r)
        for (int i = 0; i < 12; ++i) p.push_back(int32_t(94 + i));
      auto s = engine.submit(testing::greedy_request(p, 40));
      auto tokens = testing::collect(*s).tokens;
      accepted = s->accepted_prediction_tokens();
      rejected = s->rejected_prediction_tokens();
      return tokens;
    };
    const auto plain = run(Model::load(GetParam().dir(), 1), engine_config(false));
    EXPECT_EQ(plain, run(ranked(GetParam()), c)) << rollback;
    std::printf("[ranks] %s tp %d dcp %d, %s: drafted %d, accepted %d, rejected %d\n", GetParam().model.c_str(), GetParam().tp,
                GetParam().dcp, rollback, accepted + rejected, accepted, rejected);
    // Equal tokens prove nothing unless the rounds ran across the ranks: verify chunks (drafted),
    // a commit of speculative tokens (accepted) and a partial accept's rollback (rejected).
    EXPECT_GT(accepted + rejected, 0) << rollback << ": nothing drafted";
    EXPECT_GT(accepted, 0) << rollback << ": nothing accepted";
    EXPECT_GT(rejected, 0) << rollback << ": nothing rejected";
  }
}

// tp 2, dcp 2 (tp 1: the whole model on each rank, the KV split by tokens), and both. The
// bundled deltacoder's 3 heads do not split over 2 ranks (RanksErrors below): dcp 2 only.
INSTANTIATE_TEST_SUITE_P(Models, Ranks,
                         ::testing::Values(Layout{"tiny-hybrid-f32", 2, 1, 2.9e-6},   // measured 7.15e-07
                                           Layout{"tiny-hybrid-f32", 1, 2, 2.4e-6},   // 5.96e-07
                                           Layout{"tiny-hybrid-f32", 2, 2, 2.9e-6},   // 7.15e-07
                                           Layout{"tiny-llama-f32", 2, 1, 2.9e-6},    // 7.15e-07
                                           Layout{"tiny-llama-f32", 1, 2, 1.9e-6},    // 4.77e-07
                                           Layout{"tiny-llama-f32", 2, 2, 2.9e-6},    // 7.15e-07
                                           Layout{"tiny-hybrid-bf16", 2, 2, 3.3e-6},  // 8.34e-07
                                           Layout{"deltacoder", 1, 2, 2.3e-5},        // 5.72e-06
                                           // q8_0: row-parallel inputs split at 32-value block
                                           // bounds. Measured 3.95e-07 each: these inputs meet no
                                           // int8 activation rounding flip (tests/model/
                                           // thread_ranks_test.cpp, Gap), so the f32 bound holds.
                                           Layout{"tiny-llama-f32-q8", 2, 1, 1.6e-6}, Layout{"tiny-llama-f32-q8", 2, 2, 1.6e-6}),
                         layout_name);

TEST(RanksDiskTier, ARestartedTwoRankEngineHitsTheTier) {
  const std::string tier = (std::filesystem::temp_directory_path() / ("ds_rank_tier_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(tier);
  EngineConfig c = engine_config(true);
  c.prefix.disk_tier_dir = tier;
  const Layout dir{"tiny-hybrid-f32", 2, 2};
  const auto p = testing::make_prompt(100, 5, 512);
  std::vector<int32_t> first, again;
  {
    Engine e(ranked(dir), c);
    first = testing::collect(*e.submit(testing::greedy_request(p, 8))).tokens;
  }  // stop writes the cache to the tier
  Engine e(ranked(dir), c);
  auto s = e.submit(testing::greedy_request(p, 8));
  again = testing::collect(*s).tokens;
  EXPECT_EQ(first, again);
  EXPECT_GT(s->cached_tokens(), 0) << "the restarted engine should resume from the tier";
  std::filesystem::remove_all(tier);
}

TEST(RanksErrors, ATensorParallelSizeThatDoesNotDivideTheHeadsIsOneLine) {
  // The bundled deltacoder has 3 KDA and MLA heads: 2 ranks cannot split them.
  try {
    ranked(Layout{"deltacoder", 2, 1});
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--tp 2 does not divide the model's KDA heads"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  // A quantized row-parallel input split below a 32-value block: tiny-hybrid's shared expert is
  // 32 wide, 16 per rank.
  try {
    ranked(Layout{"tiny-hybrid-f32-q8", 2, 1});
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("to be a multiple of 32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(distributed::check_rank_layout(distributed::RankOptions{2, 3}, 2, true), Error);
  EXPECT_NO_THROW(distributed::check_rank_layout(distributed::RankOptions{1, 2}, 2, true));
  EXPECT_THROW(distributed::check_rank_layout(distributed::RankOptions{4, 1}, 2, true), Error);
  EXPECT_THROW(distributed::check_rank_layout(distributed::RankOptions{2, 1}, 1, false), Error);
}

}  // namespace
}  // namespace ds::test

int main(int argc, char** argv) {
  ds::distributed::Ranks ranks;
  if (!ranks.distributed() || ranks.size() != 2) {
    std::fprintf(stderr, "test_distributed runs under mpirun -np 2 (ctest starts it so)\n");
    return 2;
  }
  if (ranks.rank() != 0) return ranks.serve_as_worker();
  ::testing::InitGoogleTest(&argc, argv);
  ds::test::g_comm = ranks.collectives();
  const int rc = RUN_ALL_TESTS();
  ds::test::g_comm.reset();
  if (!ds::test::g_quantized.empty()) std::filesystem::remove_all(ds::test::g_quantized);
  return rc;
}
