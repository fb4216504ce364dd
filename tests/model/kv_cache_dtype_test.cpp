// The KV cache in bf16 and fp8 on real models: how far the logits move from the f32 cache,
// prefill and decode reading the same stored rows, and the pool's sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "model_util.h"

namespace ds {
namespace {

using test::relative_rms;
using test::Runner;

const std::string kTinyHybrid = std::string(DS_SOURCE_DIR) + "/tests/data/models/tiny-hybrid-f32";
const std::string kTinyLlama = std::string(DS_SOURCE_DIR) + "/tests/data/models/tiny-llama-f32";
const std::string kDeltacoder = std::string(DS_SOURCE_DIR) + "/models/deltacoder";

std::vector<int32_t> tokens(int n, int vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(rng() % unsigned(vocab));
  return t;
}

// A 150-token prefill in chunks, then 40 decode rows: every row's logits.
std::vector<float> run_sequence(const std::string& dir, KvDtype kv, bool token_by_token) {
  Runner r(dir, 1, 512, 2, 8, kv);
  const auto toks = tokens(190, r.vocab, 3);
  std::vector<float> all;
  if (token_by_token) {
    for (int i = 0; i < 190; ++i) {
      auto l = r.run(0, {toks[size_t(i)]}, i);
      all.insert(all.end(), l.begin(), l.end());
    }
    return all;
  }
  for (int start = 0; start < 150; start += 50) {
    auto l = r.run(0, std::vector<int32_t>(toks.begin() + start, toks.begin() + start + 50), start);
    all.insert(all.end(), l.begin(), l.end());
  }
  for (int i = 150; i < 190; ++i) {
    auto l = r.run(0, {toks[size_t(i)]}, i);
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

class KvCacheDtype : public ::testing::TestWithParam<std::string> {};

TEST_P(KvCacheDtype, LogitsStayNearTheF32CacheAndPrefillEqualsDecode) {
  const std::string& dir = GetParam();
  const auto f32 = run_sequence(dir, KvDtype::F32, false);
  for (KvDtype kv : {KvDtype::BF16, KvDtype::Fp8E4M3}) {
    const auto chunked = run_sequence(dir, kv, false);
    const double err = relative_rms(chunked, f32);
    std::printf("%s, %s KV: logits rms error / rms %.2e\n", dir.c_str(), std::string(kv_dtype_name(kv)).c_str(), err);
    // bf16 rounds each value by <= 2^-9, fp8 by <= 2^-4 of itself (or of its row's max / 2^10).
    EXPECT_LT(err, kv == KvDtype::BF16 ? 1e-3 : 1e-2) << kv_dtype_name(kv);
    EXPECT_GT(err, 0.0) << kv_dtype_name(kv) << ": the cache was not quantized";
    // Prefill tiles and decode rows read the same stored rows: one token at a time gives the
    // chunked run's logits up to summation order.
    const auto stepwise = run_sequence(dir, kv, true);
    EXPECT_LT(relative_rms(stepwise, chunked), 1e-4) << kv_dtype_name(kv);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, KvCacheDtype, ::testing::Values(kTinyHybrid, kTinyLlama, kDeltacoder),
                         [](const auto& info) {
                           const std::string& d = info.param;
                           return d == kTinyHybrid ? std::string("TinyHybrid") : d == kTinyLlama ? std::string("TinyLlama") : std::string("Deltacoder");
                         });

TEST(KvCacheDtypePool, BlockBytesAndSaveLoadFollowTheDtype) {
  for (const std::string& dir : {kTinyHybrid, kTinyLlama}) {
    auto m = Model::load(dir, 1);
    const size_t f32 = m->kv_bytes_per_block(64);
    m->set_kv_dtype(KvDtype::BF16);
    EXPECT_EQ(m->kv_bytes_per_block(64) * 2, f32);
    m->set_kv_dtype(KvDtype::Fp8E4M3);
    const size_t fp8 = m->kv_bytes_per_block(64);
    EXPECT_LT(fp8, f32 / 3) << "codes at a quarter of f32 plus one f32 scale per head row";
    EXPECT_GT(fp8, f32 / 4);
    EXPECT_EQ(m->kv_dtype(), KvDtype::Fp8E4M3);
    // A block saved from one pool and loaded into another reads back the same logits.
    Runner a(dir, 2, 256, 1, 4, KvDtype::Fp8E4M3);
    const auto toks = tokens(64, a.vocab, 9);
    a.run(0, toks, 0);
    std::vector<std::byte> block(a.model->kv_bytes_per_block(64));
    a.model->save_block(a.tables[0][0], block.data());
    std::vector<std::byte> state(a.model->state_bytes_per_slot());
    a.model->save_state(0, state.data());
    a.model->load_block(a.tables[1][0], block.data());
    a.model->load_state(1, state.data());
    EXPECT_EQ(a.run(0, {5}, 64), a.run(1, {5}, 64)) << dir;
  }
}

TEST(KvCacheDtypePool, TheDtypeIsFixedOnceAllocated) {
  Runner r(kTinyLlama, 1, 64, 1, 2, KvDtype::BF16);
  EXPECT_THROW(r.model->set_kv_dtype(KvDtype::F32), Error);
  EXPECT_EQ(r.model->kv_dtype(), KvDtype::BF16);
}

}  // namespace
}  // namespace ds
