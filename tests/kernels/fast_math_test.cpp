// The vectorisable transcendentals of kernels/fast_math.h against libm over their ranges.
#include "kernels/fast_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace ds {
namespace {

// Relative error against a double-precision reference, with an absolute floor near zero.
double rel_error(double got, double want, double floor) { return std::fabs(got - want) / std::max(std::fabs(want), floor); }

TEST(FastMath, ExpStaysWithin3e7OfLibm) {
  for (float x = -87.f; x <= 88.f; x += 0.0137f)
    ASSERT_LT(rel_error(exp_fast(x), std::exp(double(x)), 0), 3e-7) << x;
}

TEST(FastMath, Log1pOfTheUnitIntervalIsWithinAFewUlp) {
  for (double u = 0; u <= 1.0; u += 1.0 / 4099) {
    const float f = float(u);
    ASSERT_LT(rel_error(log1p_unit_fast(f), std::log1p(double(f)), 1e-30), 4e-7) << f;
  }
  // Tiny arguments stay exact (1 + u rounds to 1; the correction term carries u).
  for (float u : {1e-30f, 1e-12f, 3e-8f, 6e-8f, 1e-7f, 1e-5f})
    EXPECT_LT(rel_error(log1p_unit_fast(u), std::log1p(double(u)), 1e-38), 4e-7) << u;
  EXPECT_EQ(log1p_unit_fast(0.f), 0.f);
}

TEST(FastMath, SoftplusMatchesLibmEverywhereAndSaturates) {
  for (float x = -80.f; x <= 80.f; x += 0.0093f) {
    const double want = x > 30 ? double(x) : std::log1p(std::exp(double(x)));
    ASSERT_LT(rel_error(softplus_fast(x), want, 1e-30), 5e-7) << x;
  }
  EXPECT_EQ(softplus_fast(1e30f), 1e30f);
  EXPECT_GE(softplus_fast(-1e30f), 0.f);
  EXPECT_LT(softplus_fast(-1e30f), 1e-30f);
}

TEST(FastMath, SigmoidAndSiluMatchLibmAndSaturateWithoutNaN) {
  for (float x = -90.f; x <= 90.f; x += 0.0071f) {
    const double s = 1.0 / (1.0 + std::exp(-double(x)));
    ASSERT_LT(std::fabs(sigmoid_fast(x) - s), 3e-7 * s + 1e-37) << x;
    ASSERT_LT(rel_error(silu_fast(x), double(x) * s, 1e-30), 5e-7) << x;
  }
  for (float x : {1e30f, -1e30f, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()}) {
    EXPECT_FALSE(std::isnan(sigmoid_fast(x))) << x;
    EXPECT_FALSE(std::isnan(silu_fast(x))) << x;
  }
  EXPECT_EQ(sigmoid_fast(1e30f), 1.f);
  EXPECT_EQ(silu_fast(1e30f), 1e30f);
}

}  // namespace
}  // namespace ds
