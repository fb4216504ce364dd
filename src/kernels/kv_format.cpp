#include "kernels/kv_format.h"

#include <array>
#include <cmath>
#include <cstring>

#include "core/dtype.h"

namespace ds {

namespace {

std::array<float, 256> make_fp8_table() {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) {
    const int e = (c >> 3) & 15, m = c & 7;
    const float mag = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.f + float(m) / 8.f, e - 7);
    t[size_t(c)] = (c & 0x80) ? -mag : mag;
  }
  return t;
}
const std::array<float, 256> kFp8Values = make_fp8_table();

}  // namespace

float fp8_e4m3_decode(uint8_t code) { return kFp8Values[code]; }

uint8_t fp8_e4m3_encode(float x) {
  if (std::isnan(x)) return 0;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float a = std::fabs(x);
  if (a >= kFp8E4M3Max) return sign | 0x7e;
  if (a < 0.015625f) {  // below 2^-6: subnormal steps of 2^-9 (8 of them reach 2^-6, code 0x08)
    return sign | uint8_t(std::nearbyint(a * 512.f));
  }
  // Normal: keep 3 mantissa bits of the f32, rounding the 20 dropped ones to nearest even; a
  // carry out of the mantissa moves to the next exponent, which is the right code too.
  uint32_t u;
  std::memcpy(&u, &a, 4);
  u += 0x7ffffu + ((u >> 20) & 1u);
  const uint32_t code = (u >> 20) - ((127u - 7u) << 3);
  return sign | uint8_t(code > 0x7eu ? 0x7eu : code);
}

void kv_store_row(KvDtype t, const float* src, int n, std::byte* dst, float* scale) {
  switch (t) {
    case KvDtype::F32:
      std::memcpy(dst, src, size_t(n) * sizeof(float));
      return;
    case KvDtype::BF16: {
      auto* o = reinterpret_cast<uint16_t*>(dst);
      for (int i = 0; i < n; ++i) o[i] = f32_to_bf16(src[i]);
      return;
    }
    case KvDtype::Fp8E4M3: {
      float amax = 0.f;
      for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(src[i]));
      const float s = amax / kFp8E4M3Max;
      const float inv = amax > 0.f ? kFp8E4M3Max / amax : 0.f;
      auto* o = reinterpret_cast<uint8_t*>(dst);
      for (int i = 0; i < n; ++i) o[i] = fp8_e4m3_encode(src[i] * inv);
      *scale = s;
      return;
    }
  }
}

void kv_load_row(KvDtype t, const std::byte* src, float scale, int n, float* out) {
  switch (t) {
    case KvDtype::F32:
      std::memcpy(out, src, size_t(n) * sizeof(float));
      return;
    case KvDtype::BF16: {
      const auto* in = reinterpret_cast<const uint16_t*>(src);
      for (int i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
      return;
    }
    case KvDtype::Fp8E4M3: {
      const auto* in = reinterpret_cast<const uint8_t*>(src);
      for (int i = 0; i < n; ++i) out[i] = kFp8Values[in[i]] * scale;
      return;
    }
  }
}

}  // namespace ds
