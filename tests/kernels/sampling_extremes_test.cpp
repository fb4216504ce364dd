// The sampler over every parameter value the API accepts and the logits a broken upstream could
// produce: the token is always in range, its logprob is a number (finite, or -inf for a masked
// token), and temperatures too small to divide by give exactly the greedy token. Seeds and
// settings are swept on a fixed grid plus a seeded random search, so a failure reproduces.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "engine/sampling_params.h"
#include "kernels/sampling.h"

namespace ds {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<std::vector<float>> logit_rows(int vocab) {
  std::vector<std::vector<float>> rows;
  std::mt19937 g(7);
  std::normal_distribution<float> n(0.f, 3.f);
  std::vector<float> r(static_cast<size_t>(vocab));
  for (auto& x : r) x = n(g);
  rows.push_back(r);                                    // ordinary
  rows.push_back(std::vector<float>(size_t(vocab), 0.5f));  // all tied
  auto huge = r;
  for (size_t i = 0; i < huge.size(); ++i) huge[i] = (i % 2 ? 3e38f : -3e38f);  // differences overflow
  rows.push_back(huge);
  auto masked = r;
  for (size_t i = 0; i < masked.size(); i += 2) masked[i] = -kInf;
  rows.push_back(masked);
  auto nan = r;
  nan[3] = std::nanf("");
  rows.push_back(nan);
  auto pinf = r;
  pinf[5] = kInf;
  rows.push_back(pinf);
  auto tie_top = r;
  tie_top[1] = tie_top[2] = 40.f;  // two tied maxima
  rows.push_back(tie_top);
  return rows;
}

TEST(SamplingExtremes, EveryAcceptedSettingGivesADefinedToken) {
  const int V = 64;
  Sampler s(V);
  const float temps[] = {1e-45f, 1e-40f, 1e-38f, 1e-30f, 1e-7f, 1e-6f, 1e-3f, 0.5f, 1.f, 2.f, 100.f};
  const int top_ks[] = {0, 1, 2, 63, 64, 1000};
  const float top_ps[] = {1e-6f, 0.01f, 0.5f, 0.999999f, 1.f};
  const float min_ps[] = {0.f, 1e-30f, 0.5f, 1.f};
  const uint64_t seeds[] = {0, 1, ~0ull};
  int draws = 0;
  for (const auto& row : logit_rows(V))
    for (float t : temps)
      for (int k : top_ks)
        for (float tp : top_ps)
          for (float mp : min_ps)
            for (uint64_t seed : seeds) {
              Rng rng(seed);
              SamplingFilter f{t, k, tp, mp};
              float lp = 0;
              const int32_t tok = s.sample(row.data(), V, f, rng.uniform(), &lp);
              ++draws;
              ASSERT_TRUE(tok >= 0 && tok < V) << "T=" << t << " k=" << k << " p=" << tp << " min_p=" << mp;
              ASSERT_FALSE(std::isnan(lp)) << "T=" << t << " k=" << k << " p=" << tp << " min_p=" << mp;
              ASSERT_TRUE(std::isfinite(row[size_t(tok)]) || row[size_t(tok)] == kInf) << "drew a masked or NaN token";
            }
  EXPECT_GT(draws, 10000);
}

TEST(SamplingExtremes, TemperaturesTooSmallToDivideByAreGreedy) {
  const int V = 64;
  Sampler s(V);
  for (const auto& row : logit_rows(V)) {
    const int32_t greedy = Sampler::argmax(row.data(), V);
    for (float t : {1e-45f, 1e-40f, 1e-38f, 1e-20f, 1e-7f}) {
      for (uint64_t seed = 0; seed < 20; ++seed) {
        Rng rng(seed);
        EXPECT_EQ(s.sample(row.data(), V, SamplingFilter{t, 0, 1.f, 0.f}, rng.uniform()), greedy) << "T=" << t;
      }
    }
  }
}

TEST(SamplingExtremes, RandomSettingsAndLogitsStayDefined) {
  std::mt19937_64 g(12345);
  Sampler s(300);
  std::uniform_real_distribution<float> u01(0.f, 1.f);
  for (int it = 0; it < 3000; ++it) {
    const int V = 1 + int(g() % 300);
    std::vector<float> row(static_cast<size_t>(V));
    const float scale = std::pow(10.f, float(int(g() % 77)) - 38.f);  // 1e-38 .. 1e38
    for (auto& x : row) x = (u01(g) * 2.f - 1.f) * scale;
    if (g() % 4 == 0) row[g() % size_t(V)] = -kInf;
    const float t = g() % 3 == 0 ? std::pow(10.f, -float(g() % 46)) : u01(g) * 2.f;
    SamplingFilter f{t, int(g() % 5 == 0 ? g() % size_t(V + 2) : 0), g() % 2 ? std::max(u01(g), 1e-6f) : 1.f,
                     g() % 3 == 0 ? u01(g) : 0.f};
    Rng rng(g());
    float lp = 0;
    const int32_t tok = s.sample(row.data(), V, f, rng.uniform(), &lp);
    ASSERT_TRUE(tok >= 0 && tok < V) << "iteration " << it;
    ASSERT_FALSE(std::isnan(lp)) << "iteration " << it << " T=" << t << " scale=" << scale;
  }
}

}  // namespace
}  // namespace ds
