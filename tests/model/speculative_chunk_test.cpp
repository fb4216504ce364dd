// Speculative chunks (SeqChunk::spec_lane) and Model::commit_speculative: what speculative
// decoding's correctness rests on.
//   - Every row of a verify chunk equals, bit for bit, the logits decode gives for that token.
//   - After a partial accept, the committed state (save_state bytes, every KDA layer's
//     recurrent and conv state) equals the decode state after the accepted tokens, with both
//     rollback strategies, so lanes and replay leave bitwise-identical states.
//   - The committed state is untouched by the verify step itself, and keep 0 leaves it.
//   - Draft-style chains (one token per chunk, lanes 0, 1, 2, ...) equal decode too.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/error.h"
#include "model_util.h"

namespace ds::test {
namespace {

struct SpecRunner {
  std::unique_ptr<Model> model;
  std::vector<int32_t> table;
  int vocab = 0;

  SpecRunner(const std::string& dir, StateRollback mode, int positions) {
    model = Model::load(dir, 2);
    RuntimeLimits lim;
    lim.max_seqs = 2;
    lim.max_batch_tokens = 256;
    lim.max_logit_rows = 64;
    lim.num_kv_blocks = 8;
    lim.block_size = 64;
    lim.spec_positions = positions;
    lim.rollback = mode;
    model->allocate(lim);
    vocab = model->config().vocab_size;
    for (int b = 0; b < 8; ++b) table.push_back(7 - b);
  }
  std::vector<float> run(const std::vector<int32_t>& toks, int start, int spec_lane, int num_logits) {
    SeqChunk sc;
    sc.slot = 0;
    sc.block_table = table.data();
    sc.start_pos = start;
    sc.num_tokens = int(toks.size());
    sc.num_logits = num_logits;
    sc.spec_lane = spec_lane;
    std::vector<float> logits(size_t(std::max(num_logits, 1)) * size_t(vocab));
    std::vector<SeqChunk> seqs{sc};
    model->forward({std::span<const int32_t>(toks), std::span<const SeqChunk>(seqs)}, logits.data());
    return logits;
  }
  std::vector<std::byte> state() const {
    std::vector<std::byte> s(model->state_bytes_per_slot());
    model->save_state(0, s.data());
    return s;
  }
};

const char* kModels[] = {"tiny-hybrid-f32", "tiny-llama-f32"};

std::string model_dir(const char* name) { return std::string(DS_SOURCE_DIR) + "/tests/data/models/" + name; }

std::vector<int32_t> prompt_of(int n, int vocab, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(int32_t((i * 31 + salt * 7 + 3) % vocab));
  return p;
}

// Decode `toks` one at a time after `prompt`: each step's logits and the state after it.
struct DecodeTrace {
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<std::byte>> states;
};
DecodeTrace decode_trace(const char* name, const std::vector<int32_t>& prompt, const std::vector<int32_t>& toks) {
  SpecRunner r(model_dir(name), StateRollback::Lanes, 0);
  r.run(prompt, 0, -1, 0);
  DecodeTrace t;
  t.states.push_back(r.state());
  for (size_t i = 0; i < toks.size(); ++i) {
    t.logits.push_back(r.run({toks[i]}, int(prompt.size() + i), -1, 1));
    t.states.push_back(r.state());
  }
  return t;
}

TEST(SpeculativeChunk, VerifyRowsEqualDecodeAndCommitEqualsDecodeState) {
  for (const char* name : kModels) {
    for (int prompt_len : {5, 60, 63, 130}) {  // verify chunks inside a block and across boundaries
      for (int k : {1, 3, 7, 15}) {
        SCOPED_TRACE(std::string(name) + " prompt " + std::to_string(prompt_len) + " k " + std::to_string(k));
        const int vocab = Model::load(model_dir(name), 1)->config().vocab_size;
        const auto prompt = prompt_of(prompt_len, vocab, k);
        const auto toks = prompt_of(k + 1, vocab, 100 + k);
        const DecodeTrace ref = decode_trace(name, prompt, toks);
        for (StateRollback mode : {StateRollback::Lanes, StateRollback::Replay}) {
          for (int keep : {0, 1, (k + 1) / 2, k + 1}) {
            SCOPED_TRACE(std::string(mode == StateRollback::Lanes ? "lanes" : "replay") + " keep " + std::to_string(keep));
            SpecRunner r(model_dir(name), mode, k + 1);
            r.run(prompt, 0, -1, 0);
            const auto before = r.state();
            const auto rows = r.run(toks, prompt_len, 0, k + 1);
            EXPECT_EQ(r.state(), before) << "the verify step changed the committed state";
            for (int i = 0; i <= k; ++i)
              ASSERT_EQ(std::memcmp(rows.data() + size_t(i) * size_t(vocab), ref.logits[size_t(i)].data(),
                                    size_t(vocab) * sizeof(float)), 0)
                  << "verify row " << i << " differs from decode";
            r.model->commit_speculative(0, keep);
            ASSERT_EQ(r.state(), ref.states[size_t(keep)]) << "committed state after keep " << keep;
            // And the sequence decodes on from there exactly as decode does.
            if (keep <= k) {
              const auto next = r.run({toks[size_t(keep)]}, prompt_len + keep, -1, 1);
              EXPECT_EQ(next, ref.logits[size_t(keep)]);
            }
          }
        }
      }
    }
  }
}

TEST(SpeculativeChunk, LanesAndReplayLeaveIdenticalStatesAfterRandomAcceptPatterns) {
  // Many rounds on one sequence, each with a random accept count: the two strategies must stay
  // bitwise identical round after round (a difference would compound).
  const char* name = "tiny-hybrid-f32";
  const int k = 7;
  SpecRunner lanes(model_dir(name), StateRollback::Lanes, k + 1);
  SpecRunner replay(model_dir(name), StateRollback::Replay, k + 1);
  const int vocab = lanes.vocab;
  const auto prompt = prompt_of(40, vocab, 1);
  lanes.run(prompt, 0, -1, 0);
  replay.run(prompt, 0, -1, 0);
  std::mt19937 rng(5);
  int pos = int(prompt.size());
  for (int round = 0; round < 40 && pos + k + 1 < 8 * 64; ++round) {
    std::vector<int32_t> toks;
    for (int i = 0; i <= k; ++i) toks.push_back(int32_t(rng() % uint32_t(vocab)));
    const auto a = lanes.run(toks, pos, 0, k + 1);
    const auto b = replay.run(toks, pos, 0, k + 1);
    ASSERT_EQ(a, b) << "round " << round;
    const int keep = 1 + int(rng() % uint32_t(k + 1));
    lanes.model->commit_speculative(0, keep);
    replay.model->commit_speculative(0, keep);
    ASSERT_EQ(lanes.state(), replay.state()) << "round " << round << " keep " << keep;
    pos += keep;
  }
  EXPECT_GT(pos, 100);
  // Lanes hold k+1 whole states per sequence; replay k+1 input rows, far fewer bytes.
  EXPECT_EQ(lanes.model->rollback_bytes_per_slot(), lanes.model->state_bytes_per_slot() * size_t(k + 1));
  EXPECT_LT(replay.model->rollback_bytes_per_slot(), lanes.model->rollback_bytes_per_slot());
}

TEST(SpeculativeChunk, DraftChainOfOneTokenChunksEqualsDecode) {
  // The drafter feeds one speculative token per forward, lane after lane.
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    SpecRunner r(model_dir(name), StateRollback::Lanes, 6);
    const auto prompt = prompt_of(70, r.vocab, 2);
    const auto toks = prompt_of(6, r.vocab, 9);
    const DecodeTrace ref = decode_trace(name, prompt, toks);
    r.run(prompt, 0, -1, 0);
    for (int i = 0; i < 6; ++i) {
      const auto row = r.run({toks[size_t(i)]}, 70 + i, i, 1);
      ASSERT_EQ(row, ref.logits[size_t(i)]) << "lane " << i;
    }
    r.model->commit_speculative(0, 4);
    EXPECT_EQ(r.state(), ref.states[4]);
  }
}

TEST(SpeculativeChunk, BadChunksAreRefused) {
  SpecRunner r(model_dir("tiny-hybrid-f32"), StateRollback::Replay, 4);
  const auto prompt = prompt_of(10, r.vocab, 3);
  r.run(prompt, 0, -1, 0);
  EXPECT_THROW(r.run(prompt_of(5, r.vocab, 4), 10, 0, 5), Error);  // more tokens than positions
  EXPECT_THROW(r.run({1}, 10, 1, 1), Error);                        // replay: lane 0 only
  EXPECT_THROW(r.run({1}, 0, 0, 1), Error);                         // cannot start a sequence
  EXPECT_THROW(r.model->commit_speculative(0, 5), Error);
}

}  // namespace
}  // namespace ds::test
