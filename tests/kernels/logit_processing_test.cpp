// Penalties, logit bias and the token mask against a reference written from the published
// formulas in double, counting occurrences from the raw token lists itself.
#include "kernels/logit_processing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

namespace ds {
namespace {

std::vector<double> reference(std::vector<float> logits, const std::vector<int32_t>& prompt,
                              const std::vector<int32_t>& output, const PenaltyParams& p,
                              const std::map<int32_t, float>& bias) {
  std::vector<double> l(logits.begin(), logits.end());
  std::set<int32_t> seen(prompt.begin(), prompt.end());
  seen.insert(output.begin(), output.end());
  std::map<int32_t, int> count;
  for (int32_t t : output) ++count[t];
  for (size_t t = 0; t < l.size(); ++t) {
    if (seen.count(int32_t(t))) l[t] = l[t] > 0 ? l[t] / p.repetition : l[t] * p.repetition;  // vLLM
    const int c = count.count(int32_t(t)) ? count[int32_t(t)] : 0;
    l[t] -= double(c) * p.frequency + (c > 0 ? 1.0 : 0.0) * p.presence;  // OpenAI
    if (bias.count(int32_t(t))) l[t] += bias.at(int32_t(t));
  }
  return l;
}

TEST(LogitProcessing, MatchesTheFormulasOverRandomHistories) {
  std::mt19937 rng(11);
  const int vocab = 300;
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> logits(vocab);
    for (float& x : logits) x = std::uniform_real_distribution<float>(-8, 8)(rng);
    std::vector<int32_t> prompt(rng() % 40), output(rng() % 40);
    for (auto& t : prompt) t = int32_t(rng() % 60);
    for (auto& t : output) t = int32_t(rng() % 80);
    const PenaltyParams p{0.5f + float(rng() % 20) / 10.f, float(int(rng() % 41) - 20) / 10.f, float(int(rng() % 41) - 20) / 10.f};
    std::map<int32_t, float> bias;
    for (int i = 0; i < 5; ++i) bias[int32_t(rng() % vocab)] = float(int(rng() % 201) - 100);
    // The engine's form: counts in first-seen order, the distinct seen tokens.
    std::vector<std::pair<int32_t, int32_t>> counts;
    for (int32_t t : output) {
      auto it = std::find_if(counts.begin(), counts.end(), [&](auto& c) { return c.first == t; });
      if (it == counts.end()) counts.emplace_back(t, 1);
      else ++it->second;
    }
    std::vector<int32_t> seen(prompt);
    seen.insert(seen.end(), output.begin(), output.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    std::vector<std::pair<int32_t, float>> bias_list(bias.begin(), bias.end());

    std::vector<float> got = logits;
    apply_penalties(got.data(), vocab, p, counts, seen);
    apply_logit_bias(got.data(), vocab, bias_list);
    const auto want = reference(logits, prompt, output, p, bias);
    for (int t = 0; t < vocab; ++t) ASSERT_NEAR(got[size_t(t)], want[size_t(t)], 1e-4) << "trial " << trial << " token " << t;
  }
}

TEST(LogitProcessing, OffValuesChangeNothingAndBadIdsAreIgnored) {
  std::vector<float> l = {1.f, -2.f, 3.f, 0.f};
  const auto before = l;
  apply_penalties(l.data(), 4, PenaltyParams{}, std::vector<std::pair<int32_t, int32_t>>{{1, 3}}, std::vector<int32_t>{0, 1});
  EXPECT_EQ(l, before);
  apply_penalties(l.data(), 4, PenaltyParams{2.f, 1.f, 1.f}, std::vector<std::pair<int32_t, int32_t>>{{9, 3}, {-1, 2}},
                  std::vector<int32_t>{7, -3});
  apply_logit_bias(l.data(), 4, std::vector<std::pair<int32_t, float>>{{4, 5.f}, {-1, 5.f}});
  EXPECT_EQ(l, before);
}

TEST(LogitProcessing, MaskLeavesAllowedTokensAndSinksTheRest) {
  const int vocab = 130;  // a partial last word
  std::vector<uint64_t> mask(3, 0);
  for (int t : {0, 63, 64, 127, 129}) mask[size_t(t) / 64] |= uint64_t(1) << (t % 64);
  std::vector<float> l(vocab, 1.5f);
  apply_token_mask(l.data(), vocab, mask.data());
  for (int t = 0; t < vocab; ++t) {
    const bool keep = t == 0 || t == 63 || t == 64 || t == 127 || t == 129;
    if (keep) EXPECT_EQ(l[size_t(t)], 1.5f) << t;
    else EXPECT_TRUE(std::isinf(l[size_t(t)]) && l[size_t(t)] < 0) << t;
  }
}

}  // namespace
}  // namespace ds
