// Prefix caching on real checkpoints (the generated tiny-hybrid and the bundled, trained
// deltacoder): over a multi-turn conversation whose every turn resends the whole history, the
// engine with the cache gives the same greedy tokens as without it. With decode snapshots off,
// every reused state comes from a prefill snapshot, which the block-aligned chunking makes
// bit-identical to recomputing: the logprobs must then match exactly, not just the argmax.
#include <gtest/gtest.h>

#include <cmath>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cache/block_hash.h"
#include "engine/cache_identity.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "../model/model_util.h"  // preset checkpoints made through the CLI

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
  static EngineConfig config(bool cache, bool decode_snapshots, KvDtype kv = KvDtype::F32) {
    EngineConfig c;
    c.kv_cache_dtype = kv;
    c.max_num_seqs = 2;
    c.max_num_batched_tokens = 160;  // several chunks per turn, ends off block boundaries
    c.max_model_len = 1024;
    c.num_kv_blocks = 64;
    c.threads = 1;
    c.prefix.enabled = cache;
    c.prefix.decode_snapshots = decode_snapshots;
    c.prefix.snapshot_interval = 3;
    return c;
  }
  Conversation(const std::string& dir, bool cache, bool decode_snapshots, KvDtype kv = KvDtype::F32)
      : Conversation(dir, config(cache, decode_snapshots, kv)) {}
  Conversation(const std::string& dir, const EngineConfig& c) : engine_(std::make_unique<Engine>(Model::load(dir, 1), c)) {}
  const Engine& engine() const { return *engine_; }
  int vocab() const { return engine_->vocab_size(); }
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

void compare_conversation(const std::string& dir, bool decode_snapshots, KvDtype kv = KvDtype::F32,
                          ActivationDtype act = ActivationDtype::F32) {
  ASSERT_TRUE(std::filesystem::exists(dir + "/config.json")) << dir;
  EngineConfig con = Conversation::config(true, decode_snapshots, kv), coff = Conversation::config(false, decode_snapshots, kv);
  con.activation_dtype = coff.activation_dtype = act;
  Conversation on(dir, con), off(dir, coff);
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

const std::string kTinyLlama = std::string(DS_SOURCE_DIR) + "/tests/data/models/tiny-llama-f32";

// Without recurrent layers every cached block boundary resumes (the scheduler's stateless
// branches): the same conversation, exact.
TEST(PrefixCacheModel, TinyLlamaBitIdenticalFromCachedBlocks) { compare_conversation(kTinyLlama, false); }
TEST(PrefixCacheModel, TinyLlamaSameTokensWithDecodeSnapshots) { compare_conversation(kTinyLlama, true); }

// A quantized KV cache: a cached block holds the very codes and scales recomputing it would
// write (each row is quantized on its own), so reuse stays exact in bf16 and fp8 too.
TEST(PrefixCacheModel, TinyHybridFp8KvBitIdenticalFromPrefillSnapshots) { compare_conversation(kTiny, false, KvDtype::Fp8E4M3); }
TEST(PrefixCacheModel, TinyLlamaFp8KvBitIdenticalFromCachedBlocks) { compare_conversation(kTinyLlama, false, KvDtype::Fp8E4M3); }
TEST(PrefixCacheModel, TinyLlamaBf16KvBitIdenticalFromCachedBlocks) { compare_conversation(kTinyLlama, false, KvDtype::BF16); }
TEST(PrefixCacheModel, DeltacoderFp8KvBitIdenticalFromPrefillSnapshots) { compare_conversation(kDeltacoder, false, KvDtype::Fp8E4M3); }

// bf16 activations (deltacoder's weights are bf16): each row is rounded on its own, so cached
// blocks and snapshots still hold exactly what recomputing writes.
TEST(PrefixCacheModel, DeltacoderBf16ActivationsBitIdenticalFromPrefillSnapshots) {
  compare_conversation(kDeltacoder, false, KvDtype::F32, ActivationDtype::BF16);
}

// The activation dtype is part of the chain seed (bf16 activations compute other rows from the
// same tokens), and f32's seed is what it was before the option existed.
TEST(PrefixCacheModel, ActivationDtypeIsPartOfTheChainSeed) {
  auto m = Model::load(kDeltacoder, 1);
  const uint64_t f32 = cache_chain_seed(*m, 64);
  m->set_activation_dtype(ActivationDtype::BF16);
  const uint64_t bf16 = cache_chain_seed(*m, 64);
  EXPECT_NE(f32, bf16);
  m->set_activation_dtype(ActivationDtype::F32);
  EXPECT_EQ(cache_chain_seed(*m, 64), f32);
}

// Flips one payload byte of the disk-tier entry for (kind, hash): its checksum then fails.
void damage_entry(const std::string& dir, char kind, uint64_t hash) {
  char name[32];
  std::snprintf(name, sizeof name, "%c-%016llx.dst", kind, static_cast<unsigned long long>(hash));
  std::string path = dir + "/" + name;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir))  // under the model's subfolder
    if (e.path().filename() == name) path = e.path().string();
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " was never written";
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(100);
  const char c = char(f.get());
  f.seekp(100);
  f.put(char(c ^ 0x5a));
}

// A tiny pool pushes a conversation's blocks and states to the disk tier; after a restart one
// block file in the middle of the prefix and the deepest state are corrupt. Each is a miss that
// the lookup steps back from: the next turn resumes at the deepest boundary still readable in
// full (shorter than the whole prefix, above 0) and answers exactly as with the cache off.
TEST(PrefixCacheModelDiskTier, CorruptBlockAndDeepestStateResumeShorterAndExact) {
  const std::string dir = kTiny;
  const std::string tier = (std::filesystem::temp_directory_path() / ("ds_tier_model_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(tier);
  EngineConfig c = Conversation::config(true, /*decode_snapshots=*/false);
  c.max_model_len = 704;      // 11 blocks
  c.num_kv_blocks = 14;       // one 600-token session at a time
  c.prefix.num_state_snapshots = 2;  // fewer than a session's three snapshots
  c.prefix.disk_tier_dir = tier;
  const int V = Conversation(dir, false, false).vocab();
  const auto p1 = make_prompt(600, 71, V), other = make_prompt(600, 72, V);
  std::vector<int32_t> turn2;
  {
    Conversation on(dir, c);
    const Turn t1 = on.run(p1, 10);
    on.run(other, 10);  // evicts p1's blocks and states to the disk
    turn2 = concat(concat(p1, t1.tokens), make_prompt(40, 73, V));
  }  // stop writes what is still cached
  // p1's 9 full blocks; states were saved at 192, 384 and 576 (interval 3, prompt end).
  std::vector<uint64_t> h;
  {
    auto m = Model::load(dir, 1);
    std::string key_path;  // the chain's key, kept in the tier's folder for the next start
    for (auto& e : std::filesystem::recursive_directory_iterator(tier))
      if (e.path().filename() == "chain.key") key_path = e.path().string();
    ASSERT_FALSE(key_path.empty());
    extend_block_hashes(ChainKey::load_or_create(key_path), cache_chain_seed(*m, c.block_size), p1, c.block_size, &h);
  }
  ASSERT_EQ(h.size(), 9u);
  damage_entry(tier, 's', h[8]);  // the deepest state: 576
  damage_entry(tier, 'b', h[4]);  // KV for positions 256..319: the state at 384 needs it
  Conversation on(dir, c), off(dir, false, false);
  const Turn a = on.run(turn2, 12), b = off.run(turn2, 12);
  ASSERT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
  for (size_t i = 0; i < a.logprobs.size(); ++i) EXPECT_EQ(a.logprobs[i], b.logprobs[i]) << "token " << i;
  EXPECT_EQ(a.cached, 192);  // 576 and 384 unreadable: the next boundary with a state and all its blocks
  std::filesystem::remove_all(tier);
}

// Two checkpoints of the same shape (tiny-hybrid, seeds 1 and 2): a server restarted on the other
// weights with the same disk-tier folder must not resume from the first one's blocks and states
// (they would answer wrongly); it finds them counted as foreign and computes from scratch.
TEST(PrefixCacheModelDiskTier, OtherWeightsOfTheSameShapeNeverReuseEntries) {
  const std::string a = ds::test::preset_dir("tiny-hybrid", 1, "f32"), b = ds::test::preset_dir("tiny-hybrid", 2, "f32");
  const std::string tier = (std::filesystem::temp_directory_path() / ("ds_tier_weights_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(tier);
  EngineConfig c = Conversation::config(true, /*decode_snapshots=*/false);
  c.prefix.disk_tier_dir = tier;
  const int V = Conversation(a, false, false).vocab();
  const auto prompt = make_prompt(300, 81, V);
  { Conversation(a, c).run(prompt, 8); }  // stop writes a's cache to the disk
  const auto next = concat(prompt, make_prompt(30, 82, V));
  {
    Conversation again(a, c);
    EXPECT_GT(again.run(next, 8).cached, 0) << "the same weights resume from the disk";
  }
  Conversation on(b, c), off(b, false, false);
  const Turn x = on.run(next, 8), y = off.run(next, 8);
  EXPECT_EQ(x.cached, 0);
  EXPECT_EQ(x.tokens, y.tokens);
  EXPECT_EQ(x.logprobs, y.logprobs);
  std::filesystem::remove_all(tier);
}

// The KV dtype is part of every entry's key: a server restarted with another --kv-cache-dtype on
// the same disk-tier folder finds nothing to resume (an fp8 server never reads a bf16 block),
// and the first dtype still finds its own entries after the other has run.
TEST(PrefixCacheModelDiskTier, AnotherKvDtypeNeverReadsTheEntries) {
  const std::string tier = (std::filesystem::temp_directory_path() / ("ds_tier_kvdtype_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(tier);
  EngineConfig bf16 = Conversation::config(true, /*decode_snapshots=*/false, KvDtype::BF16);
  bf16.prefix.disk_tier_dir = tier;
  EngineConfig fp8 = bf16, f32 = bf16;
  fp8.kv_cache_dtype = KvDtype::Fp8E4M3;
  f32.kv_cache_dtype = KvDtype::F32;
  const int V = Conversation(kTiny, false, false).vocab();
  const auto prompt = make_prompt(300, 91, V);
  { Conversation(kTiny, bf16).run(prompt, 8); }  // stop writes the bf16 cache to the disk
  const auto next = concat(prompt, make_prompt(30, 92, V));
  for (const EngineConfig& other : {fp8, f32}) {
    Conversation on(kTiny, other);
    Conversation off(kTiny, false, false, other.kv_cache_dtype);
    const Turn x = on.run(next, 8), y = off.run(next, 8);
    EXPECT_EQ(x.cached, 0) << kv_dtype_name(other.kv_cache_dtype) << " resumed from bf16 entries";
    EXPECT_EQ(x.tokens, y.tokens);
    EXPECT_EQ(x.logprobs, y.logprobs);
  }
  Conversation again(kTiny, bf16);
  EXPECT_GT(again.run(next, 8).cached, 0) << "bf16 resumes from its own entries";
  std::filesystem::remove_all(tier);
}

}  // namespace
}  // namespace ds
