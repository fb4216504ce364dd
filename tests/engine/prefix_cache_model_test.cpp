// Prefix caching on real checkpoints (the generated tiny-hybrid and the bundled, trained
// deltacoder): over a multi-turn conversation whose every turn resends the whole history, the
// engine with the cache gives the same greedy tokens as without it. With decode snapshots off,
// every reused state comes from a prefill snapshot, which the block-aligned chunking makes
// bit-identical to recomputing: the logprobs must then match exactly, not just the argmax.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "engine/engine.h"
#include "engine_test_util.h"

namespace ds {
namespace {

using testing::collect;
using testing::make_prompt;

struct Turn {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  int cached = 0;
};

class Conversation {
 public:
  Conversation(const std::string& dir, bool cache, bool decode_snapshots) {
    EngineConfig c;
    c.max_num_seqs = 2;
    c.max_num_batched_tokens = 160;  // several chunks per turn, ends off block boundaries
    c.max_model_len = 1024;
    c.num_kv_blocks = 64;
    c.threads = 1;
    c.enable_prefix_caching = cache;
    c.decode_snapshots = decode_snapshots;
    c.state_snapshot_interval = 3;
    engine_ = std::make_unique<Engine>(Model::load(dir, 1), c);
  }
  int vocab() const { return engine_->model_config().vocab_size; }
  Turn run(const std::vector<int32_t>& prompt, int max_tokens) {
    Request r;
    r.prompt = prompt;
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    r.logprobs = 0;
    auto s = engine_->submit(std::move(r));
    auto c = collect(*s);
    EXPECT_EQ(c.reason, FinishReason::Length) << c.error;
    Turn t;
    t.tokens = c.tokens;
    for (auto& o : c.outputs) t.logprobs.push_back(o.logprob);
    t.cached = s->cached_tokens();
    return t;
  }

 private:
  std::unique_ptr<Engine> engine_;
};

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

void compare_conversation(const std::string& dir, bool decode_snapshots) {
  ASSERT_TRUE(std::filesystem::exists(dir + "/config.json")) << dir;
  Conversation on(dir, true, decode_snapshots), off(dir, false, decode_snapshots);
  const int V = on.vocab();
  std::vector<int32_t> history = make_prompt(230, 1, V);
  int cached = 0;
  for (int turn = 0; turn < 5; ++turn) {
    Turn a = on.run(history, 20 + 9 * turn);
    Turn b = off.run(history, 20 + 9 * turn);
    ASSERT_EQ(a.tokens, b.tokens) << "turn " << turn << " (history " << history.size() << " tokens)";
    EXPECT_EQ(b.cached, 0);
    for (size_t i = 0; i < a.logprobs.size(); ++i) {
      if (decode_snapshots)  // a state carried through decode differs from prefill in rounding
        EXPECT_NEAR(a.logprobs[i], b.logprobs[i], 1e-3) << "turn " << turn << " token " << i;
      else
        EXPECT_EQ(a.logprobs[i], b.logprobs[i]) << "turn " << turn << " token " << i;
    }
    cached += a.cached;
    history = concat(concat(history, a.tokens), make_prompt(37 + 20 * turn, 10 + turn, V));
  }
  EXPECT_GT(cached, 4 * 64);  // most of every later turn came from the cache
}

const std::string kTiny = std::string(DS_SOURCE_DIR) + "/tests/data/models/tiny-hybrid-f32";
const std::string kDeltacoder = std::string(DS_SOURCE_DIR) + "/models/deltacoder";

TEST(PrefixCacheModel, TinyHybridBitIdenticalFromPrefillSnapshots) { compare_conversation(kTiny, false); }
TEST(PrefixCacheModel, TinyHybridSameTokensWithDecodeSnapshots) { compare_conversation(kTiny, true); }
TEST(PrefixCacheModel, DeltacoderBitIdenticalFromPrefillSnapshots) { compare_conversation(kDeltacoder, false); }
TEST(PrefixCacheModel, DeltacoderSameTokensWithDecodeSnapshots) { compare_conversation(kDeltacoder, true); }

}  // namespace
}  // namespace ds
