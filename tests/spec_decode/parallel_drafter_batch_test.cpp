// The parallel drafter (spec_decode/parallel_drafter.h) keeps each sequence's context in the ring of
// its state slot and drafts every speculating sequence in one batched round. At temperature 0
// a round's proposals are a function of that sequence's committed rows only, so a request
// drafts and accepts exactly as much alone as in a batch (where it gets another slot, another
// place in the round, and neighbours that start and finish around it). Verification is exact,
// so the tokens cannot show a drafter that reads another slot's context or mixes rows between
// rounds: the accepted and drafted counts do.
#include <gtest/gtest.h>

#include "engine_test_util.h"
#include "model/model.h"
#include "spec_engine_util.h"

namespace ds::test {
namespace {

using testing::collect;

std::string target_dir() { return std::string(DS_SOURCE_DIR) + "/models/deltacoder"; }
std::string drafter_dir() { return std::string(DS_SOURCE_DIR) + "/models/deltacoder-dspark"; }

EngineConfig config(const char* rollback) {
  EngineConfig c = base_config();
  c.max_model_len = 1024;
  c.num_kv_blocks = 48;
  // Every prompt here prefills in one chunk whatever runs beside it, so the target computes the
  // same rows (and the drafter observes the same taps) alone and batched.
  c.max_num_batched_tokens = 256;
  c.spec.draft_model = drafter_dir();
  c.spec.num_speculative_tokens = 7;
  c.spec.method = SpecMethod::Greedy;
  c.spec.draft_sample = DraftSample::Greedy;
  c.spec.state_rollback = rollback;
  return c;
}

std::vector<int32_t> prompt(int len, int seed) {
  std::vector<int32_t> p;
  for (int t = 0; t < len; ++t) p.push_back(int32_t((t * 37 + seed * 101 + 5) % 4000));
  return p;
}

struct Counts {
  std::vector<int32_t> tokens;
  int accepted = 0, rejected = 0, rounds = 0;
};

// The request under test, submitted after `others` neighbours of other lengths (so it gets
// another slot and sits last in the round), which end before, with and after it.
Counts mine(const char* rollback, int others) {
  Engine engine(Model::load(target_dir(), 2), config(rollback));
  const int lens[] = {30, 120, 60}, news[] = {25, 140, 70};
  std::vector<std::shared_ptr<RequestStream>> rest;
  for (int i = 0; i < others; ++i) rest.push_back(engine.submit(testing::greedy_request(prompt(lens[i], i + 1), news[i])));
  auto s = engine.submit(testing::greedy_request(prompt(80, 0), 90));
  const auto got = collect(*s);
  EXPECT_EQ(got.reason, FinishReason::Length) << got.error;
  for (auto& r : rest) EXPECT_EQ(collect(*r).reason, FinishReason::Length);
  return {got.tokens, s->accepted_prediction_tokens(), s->rejected_prediction_tokens(), s->speculative_rounds()};
}

TEST(ParallelDrafterBatch, AcceptedCountsIdenticalAloneAndBatched) {
  for (const char* rollback : {"lanes", "replay"}) {
    SCOPED_TRACE(rollback);
    const Counts alone = mine(rollback, 0);
    const Counts batched = mine(rollback, 3);
    ASSERT_EQ(batched.tokens, alone.tokens);
    EXPECT_GT(alone.accepted, 0);
    EXPECT_GT(alone.rejected, 0) << "some rounds must reject, or a wrong proposal could not change the counts";
    EXPECT_EQ(batched.accepted, alone.accepted) << "the same context proposes the same tokens";
    EXPECT_EQ(batched.rejected, alone.rejected);
    EXPECT_EQ(batched.rounds, alone.rounds);
  }
}

}  // namespace
}  // namespace ds::test
