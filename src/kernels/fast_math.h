// Transcendentals for vectorised loops, written so GCC vectorises them (no libm call, no
// branch): libm's expf and log1pf are scalar calls, and the per-element activations of a decode
// step at concurrency (the SiLU of every FFN and KDA conv channel, KDA's gates) spent more time
// in them than in their arithmetic (tests/kernels/fast_math_test.cpp holds them to libm).
//
// exp: Cody-Waite range reduction and a degree-6 polynomial. Relative error below 3e-7 on
// [-87, 88]; inputs below -87.3 return about 1e-38 instead of 0, which no caller can tell apart.
#pragma once
#include <cstdint>
#include <cstring>

namespace ds {

inline float exp_fast(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  const float t = x * 1.44269504088896341f;
  const float n = (t + 12582912.f) - 12582912.f;  // round to nearest via the float mantissa
  const float f = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  float p = 1.f / 720.f;
  p = p * f + 1.f / 120.f;
  p = p * f + 1.f / 24.f;
  p = p * f + 1.f / 6.f;
  p = p * f + 0.5f;
  p = p * f + 1.f;
  p = p * f + 1.f;
  const int32_t bits = (int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

// x / (1 + e^-x) and 1 / (1 + e^-x). Large |x| saturate correctly: e^-x clamps to ~3e38 or
// ~1e-38, never inf, so neither divides inf by inf.
inline float silu_fast(float x) { return x / (1.f + exp_fast(-x)); }
inline float sigmoid_fast(float x) { return 1.f / (1.f + exp_fast(-x)); }

// log(1 + u) for u in [0, 1]: y = 1 + u rounded, log y = e ln 2 + 2 atanh(s) with y = 2^e m,
// m in [0.707, 1.414], s = (m - 1) / (m + 1), |s| < 0.172 (series to s^9: below 1e-9 relative),
// plus (u - (y - 1)) / y for the rounding of 1 + u, which keeps tiny u exact.
inline float log1p_unit_fast(float u) {
  const float y = 1.f + u;
  const bool upper = y > 1.41421356f;
  const float m = upper ? y * 0.5f : y;
  const float s = (m - 1.f) / (m + 1.f), s2 = s * s;
  float p = 1.f / 9.f;
  p = p * s2 + 1.f / 7.f;
  p = p * s2 + 1.f / 5.f;
  p = p * s2 + 1.f / 3.f;
  p = p * s2 + 1.f;
  return (upper ? 0.693147180559945f : 0.f) + 2.f * s * p + (u - (y - 1.f)) / y;
}

// log(1 + e^x) as max(x, 0) + log1p(e^-|x|): no overflow, and no cut-over point.
inline float softplus_fast(float x) {
  const float ax = x < 0.f ? -x : x;
  return (x > 0.f ? x : 0.f) + log1p_unit_fast(exp_fast(-ax));
}

}  // namespace ds
