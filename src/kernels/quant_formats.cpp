#include "kernels/quant_formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ds {

namespace {

constexpr float kQ4Values[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
constexpr float kE2M1Values[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.f, -0.5f, -1, -1.5f, -2, -3, -4, -6};

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// The f16 scale of a block, saturated at the largest finite f16 (65504): a block too large for
// f16 gets its codes clamped at the format's ends instead of an infinite scale, which decodes
// every weight of the block to NaN or infinity (0 * inf).
uint16_t f16_scale(float v) {
  const uint16_t h = f32_to_f16(v);
  return (h & 0x7c00) == 0x7c00 && std::isfinite(v) ? uint16_t((h & 0x8000) | 0x7bff) : h;
}

float max_abs(const float* x) {
  float a = 0;
  for (int i = 0; i < kQuantBlock; ++i) a = std::max(a, std::fabs(x[i]));
  return a;
}

void put_nibble(uint8_t* codes, int i, uint8_t q) {
  if (i % 2 == 0) codes[i / 2] = uint8_t((codes[i / 2] & 0xf0) | q);
  else codes[i / 2] = uint8_t((codes[i / 2] & 0x0f) | (q << 4));
}
uint8_t get_nibble(const uint8_t* codes, int i) { return i % 2 == 0 ? (codes[i / 2] & 0x0f) : (codes[i / 2] >> 4); }

// Nearest E2M1 code to v (saturating at 6); a tie goes to the even mantissa, as OCP's
// round-to-nearest-even conversion does.
uint8_t e2m1_code(float v) {
  const float a = std::min(std::fabs(v), 6.f);
  uint8_t best = 0;
  float best_d = INFINITY;
  for (uint8_t m = 0; m < 8; ++m) {
    const float d = std::fabs(a - kE2M1Values[m]);
    if (d < best_d || (d == best_d && m % 2 == 0)) {
      best = m;
      best_d = d;
    }
  }
  return uint8_t(best | (std::signbit(v) && best != 0 ? 8 : 0));
}

}  // namespace

std::string_view quant_format_name(QuantFormat f) {
  switch (f) {
    case QuantFormat::Q8_0: return "q8_0";
    case QuantFormat::Q4_0: return "q4_0";
    case QuantFormat::MXFP4: return "mxfp4";
    case QuantFormat::None: break;
  }
  return "none";
}

bool parse_quant_format(std::string_view s, QuantFormat* out) {
  if (s == "q8_0") *out = QuantFormat::Q8_0;
  else if (s == "q4_0") *out = QuantFormat::Q4_0;
  else if (s == "mxfp4") *out = QuantFormat::MXFP4;
  else return false;
  return true;
}

size_t quant_code_bytes(QuantFormat f, int k) { return f == QuantFormat::Q8_0 ? size_t(k) : size_t(k) / 2; }
size_t quant_scale_bytes(QuantFormat f, int k) {
  return size_t(k / kQuantBlock) * (f == QuantFormat::MXFP4 ? 1 : 2);
}
DType quant_code_dtype(QuantFormat f) { return f == QuantFormat::Q8_0 ? DType::I8 : DType::U8; }
DType quant_scale_dtype(QuantFormat f) { return f == QuantFormat::MXFP4 ? DType::U8 : DType::F16; }

QuantFormat quant_format_of(DType codes, DType scales) {
  if (codes == DType::I8 && scales == DType::F16) return QuantFormat::Q8_0;
  if (codes == DType::U8 && scales == DType::F16) return QuantFormat::Q4_0;
  if (codes == DType::U8 && scales == DType::U8) return QuantFormat::MXFP4;
  return QuantFormat::None;
}

float quant_block_scale(QuantFormat f, const uint8_t* scales, int b) {
  if (f == QuantFormat::MXFP4) return std::ldexp(1.f, int(scales[b]) - 127);
  return f16_to_f32(load_u16(scales + 2 * size_t(b)));
}

const float* quant4_values(QuantFormat f) { return f == QuantFormat::MXFP4 ? kE2M1Values : kQ4Values; }

void quantize_row(QuantFormat f, const float* x, int k, uint8_t* codes, uint8_t* scales) {
  for (int b = 0; b < k / kQuantBlock; ++b) {
    const float* xb = x + size_t(b) * kQuantBlock;
    switch (f) {
      case QuantFormat::Q8_0: {
        const uint16_t d16 = f16_scale(max_abs(xb) / 127.f);
        store_u16(scales + 2 * size_t(b), d16);
        const float d = f16_to_f32(d16);  // codes against the scale as stored
        auto* q = reinterpret_cast<int8_t*>(codes) + size_t(b) * kQuantBlock;
        for (int i = 0; i < kQuantBlock; ++i)
          q[i] = d == 0 ? 0 : int8_t(std::clamp(std::nearbyint(xb[i] / d), -127.f, 127.f));
        break;
      }
      case QuantFormat::Q4_0: {
        // The value of largest magnitude maps to code 0 (-8 * d), with d's sign chosen so:
        // the block's widest side gets the extra level.
        float m = 0;
        for (int i = 0; i < kQuantBlock; ++i)
          if (std::fabs(xb[i]) > std::fabs(m)) m = xb[i];
        const uint16_t d16 = f16_scale(m / -8.f);
        store_u16(scales + 2 * size_t(b), d16);
        const float d = f16_to_f32(d16);
        for (int i = 0; i < kQuantBlock; ++i) {
          const float q = d == 0 ? 8.f : std::clamp(std::nearbyint(xb[i] / d) + 8.f, 0.f, 15.f);
          put_nibble(codes + size_t(b) * kQuantBlock / 2, i, uint8_t(q));
        }
        break;
      }
      case QuantFormat::MXFP4: {
        // OCP MX: the shared exponent is floor(log2(amax)) minus E2M1's largest exponent (2),
        // so the block's largest value lands in [4, 8) and rounds to at most 6.
        const float a = max_abs(xb);
        int e = 0;  // 2^e
        if (a > 0) e = std::ilogb(a) - 2;
        e = std::clamp(e, -127, 127);
        scales[b] = uint8_t(e + 127);
        const float inv = std::ldexp(1.f, -e);
        for (int i = 0; i < kQuantBlock; ++i)
          put_nibble(codes + size_t(b) * kQuantBlock / 2, i, a == 0 ? 0 : e2m1_code(xb[i] * inv));
        break;
      }
      case QuantFormat::None:
        break;
    }
  }
}

void dequantize_row(QuantFormat f, const uint8_t* codes, const uint8_t* scales, int k, float* out) {
  for (int b = 0; b < k / kQuantBlock; ++b) {
    const float d = quant_block_scale(f, scales, b);
    for (int i = 0; i < kQuantBlock; ++i) {
      const int j = b * kQuantBlock + i;
      float v;
      if (f == QuantFormat::Q8_0) v = float(reinterpret_cast<const int8_t*>(codes)[j]);
      else v = quant4_values(f)[get_nibble(codes, j)];
      out[j] = d * v;
    }
  }
}

}  // namespace ds
