// exp for vectorised loops: Cody-Waite range reduction and a degree-6 polynomial, written so
// GCC vectorises it (no libm call). Relative error below 2e-7 on [-87, 88]; inputs below -87.3
// return about 1e-38 instead of 0, which no caller can tell apart.
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

}  // namespace ds
