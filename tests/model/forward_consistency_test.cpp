// The forward pass agrees with itself however a sequence is cut into steps and whatever it is
// batched with: chunked prefill = one prefill, prefill + decode = one prefill, batch = alone.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model_util.h"

namespace ds::test {
namespace {

std::vector<int32_t> random_tokens(int n, int vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(rng() % unsigned(vocab - 3));
  return t;
}

void expect_close(const float* a, const float* b, int n, float tol, const std::string& what) {
  float worst = 0.f;
  for (int i = 0; i < n; ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  EXPECT_LT(worst, tol) << what;
}

class ForwardConsistency : public ::testing::TestWithParam<const char*> {};

TEST_P(ForwardConsistency, PrefillThenDecodeEqualsOneLongPrefill) {
  Runner r(preset_dir(GetParam(), 1, "f32"));
  const auto toks = random_tokens(150, r.vocab, 11);  // crosses KDA chunks and KV blocks
  const auto whole = r.run(0, toks, 0);
  // Same sequence in slot 1: a 70-token prefill chunk, a 40-token chunk, then decode steps.
  std::vector<float> pieces;
  auto append = [&](int b, int e) {
    std::vector<int32_t> part(toks.begin() + b, toks.begin() + e);
    auto l = r.run(1, part, b);
    pieces.insert(pieces.end(), l.begin(), l.end());
  };
  append(0, 70);
  append(70, 110);
  for (int p = 110; p < 150; ++p) append(p, p + 1);
  ASSERT_EQ(pieces.size(), whole.size());
  for (int t = 0; t < 150; ++t) {
    expect_close(&pieces[size_t(t) * r.vocab], &whole[size_t(t) * r.vocab], r.vocab, 2e-3f,
                 std::string(GetParam()) + " position " + std::to_string(t));
    EXPECT_EQ(argmax(&pieces[size_t(t) * r.vocab], r.vocab), argmax(&whole[size_t(t) * r.vocab], r.vocab)) << t;
  }
}

TEST_P(ForwardConsistency, BatchOfFourGivesEachItsOwnLogits) {
  Runner r(preset_dir(GetParam(), 2, "bf16"));
  // Four sequences in different phases: a fresh prefill, a continued prefill, two decodes.
  std::vector<std::vector<int32_t>> seqs;
  for (int s = 0; s < 4; ++s) seqs.push_back(random_tokens(90 + 17 * s, r.vocab, 100 + unsigned(s)));
  const int split[4] = {0, 40, 89 + 17 * 2, 89 + 17 * 3};  // tokens already processed before the batch
  // Alone: each in its own slot, the history then the batched chunk.
  std::vector<std::vector<float>> alone(4);
  for (int s = 0; s < 4; ++s) {
    if (split[s] > 0) r.run(s, {seqs[s].begin(), seqs[s].begin() + split[s]}, 0, false);
    alone[size_t(s)] = r.run(s, {seqs[s].begin() + split[s], seqs[s].end()}, split[s], false);
  }
  // Together: the same histories, then one step with all four chunks.
  Runner b(preset_dir(GetParam(), 2, "bf16"));
  for (int s = 0; s < 4; ++s)
    if (split[s] > 0) b.run(s, {seqs[s].begin(), seqs[s].begin() + split[s]}, 0, false);
  std::vector<int32_t> flat;
  std::vector<SeqChunk> chunks;
  for (int s = 0; s < 4; ++s) {
    SeqChunk sc;
    sc.slot = s;
    sc.block_table = b.tables[size_t(s)].data();
    sc.start_pos = split[s];
    sc.num_tokens = int(seqs[s].size()) - split[s];
    sc.token_offset = int(flat.size());
    sc.num_logits = 1;
    flat.insert(flat.end(), seqs[s].begin() + split[s], seqs[s].end());
    chunks.push_back(sc);
  }
  std::vector<float> logits(size_t(4) * size_t(b.vocab));
  b.model->forward({flat, chunks}, logits.data());
  for (int s = 0; s < 4; ++s) {
    // Rows never mix inside a step, so the batch gives bit-identical logits.
    for (int i = 0; i < b.vocab; ++i)
      ASSERT_EQ(logits[size_t(s) * size_t(b.vocab) + size_t(i)], alone[size_t(s)][size_t(i)]) << "seq " << s << " logit " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, ForwardConsistency, ::testing::Values("tiny-hybrid", "tiny-llama"));

}  // namespace
}  // namespace ds::test
