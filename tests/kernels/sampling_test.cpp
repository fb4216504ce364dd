// Sampling: greedy tie-breaking, seed repeatability, and statistical checks that top-k, top-p and
// min-p keep exactly the support they promise and draw in proportion to the renormalised
// probabilities. Tolerances are 5+ standard deviations so the tests are deterministic in practice
// (and fixed seeds make them deterministic in fact).
#include "kernels/sampling.h"

#include <gtest/gtest.h>

#include "engine/sampling_params.h"  // the per-request random stream the engine feeds the sampler

#include <cmath>
#include <limits>
#include <map>
#include <vector>

namespace ds {
namespace {

// The kernel takes the filters and one uniform draw; the engine draws it from the request's own
// Rng, and only when not greedy. These tests drive it the same way.
using SamplingParams = SamplingFilter;
int32_t draw(Sampler& s, const float* logits, int vocab, const SamplingFilter& f, Rng& rng, float* logprob = nullptr) {
  return s.sample(logits, vocab, f, f.greedy() ? 0.0 : rng.uniform(), logprob);
}

std::vector<float> logits_from_probs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(float(std::log(x)));
  return l;
}

std::vector<double> frequencies(Sampler& s, const std::vector<float>& l, const SamplingParams& sp,
                                int draws, uint64_t seed = 42) {
  Rng rng(seed);
  std::vector<double> f(l.size(), 0.0);
  for (int i = 0; i < draws; ++i) f[size_t(draw(s, l.data(), int(l.size()), sp, rng))] += 1;
  for (auto& x : f) x /= draws;
  return f;
}

// Expected frequency within 5 binomial standard deviations (plus a hair for float rounding).
void expect_close(double got, double want, int draws) {
  double sd = std::sqrt(want * (1 - want) / draws);
  EXPECT_NEAR(got, want, 5 * sd + 1e-9) << "want " << want;
}

TEST(Sampling, GreedyPicksLowestIdOnTies) {
  Sampler s(8);
  Rng rng(1);
  std::vector<float> l = {0.f, 3.f, 1.f, 3.f, 3.f, -1.f};
  SamplingParams g;
  g.temperature = 0.f;
  EXPECT_TRUE(g.greedy());
  EXPECT_EQ(draw(s, l.data(), 6, g, rng), 1);
  SamplingParams k1;
  k1.top_k = 1;
  EXPECT_TRUE(k1.greedy());
  EXPECT_EQ(draw(s, l.data(), 6, k1, rng), 1);
  EXPECT_EQ(Sampler::argmax(l.data(), 6), 1);
}

TEST(Sampling, GreedyLogprobIsModelLogSoftmax) {
  Sampler s(4);
  Rng rng(1);
  auto l = logits_from_probs({0.1, 0.6, 0.3});
  SamplingParams g;
  g.temperature = 0;
  float lp = 0;
  EXPECT_EQ(draw(s, l.data(), 3, g, rng, &lp), 1);
  EXPECT_NEAR(lp, std::log(0.6), 1e-5);
}

TEST(Sampling, SameSeedSameTokensDifferentSeedDifferentTokens) {
  Sampler s(1000);
  std::vector<float> l(1000);
  for (int i = 0; i < 1000; ++i) l[size_t(i)] = float(std::sin(i * 0.37) * 2);
  SamplingParams sp;
  sp.temperature = 1.0f;
  auto run = [&](uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(draw(s, l.data(), 1000, sp, rng));
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
  // Interleaving another request's draws on the same Sampler does not change a request's tokens:
  // the randomness lives in the per-request Rng, the Sampler only holds scratch.
  Rng a(7), b(99);
  std::vector<int32_t> interleaved;
  for (int i = 0; i < 64; ++i) {
    interleaved.push_back(draw(s, l.data(), 1000, sp, a));
    draw(s, l.data(), 1000, sp, b);
  }
  EXPECT_EQ(interleaved, run(7));
}

TEST(Sampling, TemperatureScalesDistribution) {
  Sampler s(4);
  std::vector<double> p = {0.5, 0.3, 0.15, 0.05};
  auto l = logits_from_probs(p);
  SamplingParams sp;
  sp.temperature = 2.0f;
  const int draws = 200000;
  auto f = frequencies(s, l, sp, draws);
  double z = 0;
  for (double x : p) z += std::sqrt(x);
  for (size_t i = 0; i < p.size(); ++i) expect_close(f[i], std::sqrt(p[i]) / z, draws);
}

TEST(Sampling, TopKSupportAndProportions) {
  Sampler s(6);
  std::vector<double> p = {0.05, 0.4, 0.1, 0.25, 0.15, 0.05};
  auto l = logits_from_probs(p);
  SamplingParams sp;
  sp.top_k = 3;  // keeps ids 1, 3, 4 (0.4, 0.25, 0.15) = 0.8
  const int draws = 200000;
  auto f = frequencies(s, l, sp, draws);
  EXPECT_EQ(f[0], 0);
  EXPECT_EQ(f[2], 0);
  EXPECT_EQ(f[5], 0);
  expect_close(f[1], 0.4 / 0.8, draws);
  expect_close(f[3], 0.25 / 0.8, draws);
  expect_close(f[4], 0.15 / 0.8, draws);
}

TEST(Sampling, TopPSupportAndProportions) {
  Sampler s(4);
  std::vector<double> p = {0.15, 0.5, 0.05, 0.3};
  auto l = logits_from_probs(p);
  SamplingParams sp;
  sp.top_p = 0.75f;  // 0.5 < 0.75 <= 0.8: the nucleus is ids 1 and 3
  const int draws = 200000;
  auto f = frequencies(s, l, sp, draws);
  EXPECT_EQ(f[0], 0);
  EXPECT_EQ(f[2], 0);
  expect_close(f[1], 0.5 / 0.8, draws);
  expect_close(f[3], 0.3 / 0.8, draws);
}

TEST(Sampling, TopPAppliesToTopKRenormalisedDistribution) {
  Sampler s(4);
  // top_k=2 leaves {0.4, 0.35} -> renormalised {0.533, 0.467}; top_p=0.5 then keeps only id 0.
  std::vector<double> p = {0.4, 0.35, 0.25};
  auto l = logits_from_probs(p);
  SamplingParams sp;
  sp.top_k = 2;
  sp.top_p = 0.5f;
  auto f = frequencies(s, l, sp, 10000);
  EXPECT_EQ(f[0], 1.0);
}

TEST(Sampling, TopPNucleusLargerThanFirstSortedPrefix) {
  // 1000 equally likely tokens: the nucleus for top_p=0.5 is 500 tokens, beyond the 64-token
  // first guess, and ties put the lowest ids first.
  const int V = 1000;
  Sampler s(V);
  std::vector<float> l(V, 0.f);
  SamplingParams sp;
  sp.top_p = 0.5f;
  Rng rng(3);
  int max_id = 0;
  for (int i = 0; i < 5000; ++i) max_id = std::max(max_id, draw(s, l.data(), V, sp, rng));
  EXPECT_GE(max_id, 490);
  EXPECT_LE(max_id, 500);
}

TEST(Sampling, MinPSupportAndProportions) {
  Sampler s(5);
  std::vector<double> p = {0.5, 0.3, 0.15, 0.04, 0.01};
  auto l = logits_from_probs(p);
  SamplingParams sp;
  sp.min_p = 0.25f;  // threshold 0.125: keeps 0.5, 0.3, 0.15
  const int draws = 200000;
  auto f = frequencies(s, l, sp, draws);
  EXPECT_EQ(f[3], 0);
  EXPECT_EQ(f[4], 0);
  expect_close(f[0], 0.5 / 0.95, draws);
  expect_close(f[1], 0.3 / 0.95, draws);
  expect_close(f[2], 0.15 / 0.95, draws);
}

TEST(Sampling, ChosenLogprobIsOfTheSampledDistribution) {
  Sampler s(4);
  std::vector<double> p = {0.4, 0.35, 0.25};
  auto l = logits_from_probs(p);
  SamplingParams sp;
  sp.top_k = 2;
  Rng rng(5);
  for (int i = 0; i < 50; ++i) {
    float lp = 0;
    int32_t t = draw(s, l.data(), 3, sp, rng, &lp);
    ASSERT_LT(t, 2);
    EXPECT_NEAR(lp, std::log(p[size_t(t)] / 0.75), 1e-5);
  }
}

TEST(Sampling, TopLogprobsSortedModelLogSoftmax) {
  Sampler s(5);
  std::vector<double> p = {0.1, 0.3, 0.1, 0.45, 0.05};
  auto l = logits_from_probs(p);
  std::vector<std::pair<int32_t, float>> out;
  s.top_logprobs(l.data(), 5, 3, &out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].first, 3);
  EXPECT_EQ(out[1].first, 1);
  EXPECT_EQ(out[2].first, 0);  // tie with id 2: lower id first
  EXPECT_NEAR(out[0].second, std::log(0.45), 1e-5);
  EXPECT_NEAR(out[2].second, std::log(0.1), 1e-5);
  EXPECT_NEAR(Sampler::logprob_of(l.data(), 5, 1), std::log(0.3), 1e-5);
  s.top_logprobs(l.data(), 5, 10, &out);
  EXPECT_EQ(out.size(), 5u);
}

TEST(Sampling, NaNAndMaskedLogitsAreNeverChosen) {
  Sampler s(4);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> l = {std::nanf(""), -inf, 0.f, 0.f};
  SamplingParams sp;
  Rng rng(9);
  for (int i = 0; i < 1000; ++i) {
    int32_t t = draw(s, l.data(), 4, sp, rng);
    EXPECT_TRUE(t == 2 || t == 3);
  }
  SamplingParams g;
  g.temperature = 0;
  EXPECT_EQ(draw(s, l.data(), 4, g, rng), 2);
}

// logprob_of's vectorised sum against a plain double log-softmax over a vocabulary-sized row
// with masked (-inf) and NaN entries; top_logprobs reports the same value for the same token.
TEST(Sampler, LogprobOfMatchesDoubleReference) {
  std::vector<float> l(8192 + 5);
  uint64_t x = 88172645463325252ull;
  for (auto& v : l) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = float(double(x % 100000) / 100000.0 * 30.0 - 15.0);
  }
  l[7] = -std::numeric_limits<float>::infinity();
  l[100] = std::numeric_limits<float>::quiet_NaN();
  const int vocab = int(l.size());
  double m = -1e30;
  for (float v : l)
    if (v > m) m = v;
  double s = 0;
  for (float v : l)
    if (v > -std::numeric_limits<float>::infinity()) s += std::exp(double(v) - m);
  Sampler sampler(vocab);
  std::vector<std::pair<int32_t, float>> top;
  sampler.top_logprobs(l.data(), vocab, 3, &top);
  for (int tok : {0, 1, 5000, 8196}) {
    const double want = double(l[size_t(tok)]) - m - std::log(s);
    EXPECT_NEAR(Sampler::logprob_of(l.data(), vocab, tok), want, 1e-5 * std::max(1.0, std::abs(want))) << tok;
  }
  for (const auto& [id, lp] : top) EXPECT_FLOAT_EQ(lp, Sampler::logprob_of(l.data(), vocab, id));
  EXPECT_EQ(Sampler::logprob_of(l.data(), vocab, 7), -std::numeric_limits<float>::infinity());
}

}  // namespace
}  // namespace ds
