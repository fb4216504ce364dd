// rmsnorm and l2norm_scale (kernels/elementwise.h) against double-precision references, over
// widths that end mid-way through the sum of squares' lanes, and the property the model relies
// on: a row's result depends on that row alone, whatever its neighbours hold.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/elementwise.h"

namespace ds {
namespace {

std::vector<float> random_row(int n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

TEST(Norms, RmsnormMatchesDoublePrecision) {
  for (int dim : {1, 7, 15, 16, 17, 64, 100, 768, 2047, 2048}) {
    for (float scale : {1e-3f, 1.f, 300.f}) {
      const auto x = random_row(dim, uint32_t(dim), scale), w = random_row(dim, uint32_t(dim + 1), 1.f);
      std::vector<float> out(x.size());
      rmsnorm(x.data(), w.data(), 1e-5f, out.data(), dim);
      double ss = 0;
      for (float v : x) ss += double(v) * v;
      const double r = 1.0 / std::sqrt(ss / dim + 1e-5);
      for (int i = 0; i < dim; ++i) {
        const double want = double(x[size_t(i)]) * r * w[size_t(i)];
        EXPECT_NEAR(out[size_t(i)], want, 2e-6 * std::max(1.0, std::fabs(want))) << "dim " << dim << " scale " << scale << " i " << i;
      }
    }
  }
}

TEST(Norms, L2normScaleMatchesDoublePrecision) {
  for (int dim : {1, 16, 33, 64, 128}) {
    auto x = random_row(dim, uint32_t(7 * dim), 2.f);
    const auto x0 = x;
    l2norm_scale(x.data(), dim, 1e-6f, 0.125f);
    double ss = 0;
    for (float v : x0) ss += double(v) * v;
    const double r = 0.125 / std::sqrt(ss + 1e-6);
    for (int i = 0; i < dim; ++i) EXPECT_NEAR(x[size_t(i)], x0[size_t(i)] * r, 1e-7) << "dim " << dim << " i " << i;
  }
}

// The same row gives the same bits wherever it sits and whatever sits beside it.
TEST(Norms, RowResultDependsOnTheRowAlone) {
  const int dim = 768;
  const auto row = random_row(dim, 5, 1.f), w = random_row(dim, 6, 1.f);
  std::vector<float> alone(dim);
  rmsnorm(row.data(), w.data(), 1e-5f, alone.data(), dim);
  for (int shift : {1, 3, 16}) {
    auto buf = random_row(dim + shift, uint32_t(40 + shift), 10.f);
    std::copy(row.begin(), row.end(), buf.begin() + shift);  // misaligned by `shift` floats
    std::vector<float> out(dim);
    rmsnorm(buf.data() + shift, w.data(), 1e-5f, out.data(), dim);
    for (int i = 0; i < dim; ++i) ASSERT_EQ(out[size_t(i)], alone[size_t(i)]) << "shift " << shift << " i " << i;
  }
}

}  // namespace
}  // namespace ds
