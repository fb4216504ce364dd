#include "core/dtype.h"

#include <cmath>

namespace ds {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
  }
  return "?";
}

bool parse_dtype(std::string_view s, DType* out) {
  if (s == "F32" || s == "f32" || s == "float32") { *out = DType::F32; return true; }
  if (s == "BF16" || s == "bf16" || s == "bfloat16") { *out = DType::BF16; return true; }
  if (s == "F16" || s == "f16" || s == "float16") { *out = DType::F16; return true; }
  if (s == "I8" || s == "i8" || s == "int8") { *out = DType::I8; return true; }
  if (s == "U8" || s == "u8" || s == "uint8") { *out = DType::U8; return true; }
  return false;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: value = man * 2^-24
      float f = std::ldexp(float(man), -24);
      std::memcpy(&u, &f, 4);
      u |= sign;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.f) return sign | 0x7c00;
  if (a < 6.103515625e-05f) {  // subnormal or zero: round(a / 2^-24)
    return sign | uint16_t(std::nearbyint(a * 16777216.f));
  }
  uint32_t v = u & 0x7fffffffu;
  v += 0xfffu + ((v >> 13) & 1u);  // round to nearest even on the 13 dropped bits
  return sign | uint16_t(((v >> 23) - 112) << 10 | ((v >> 13) & 0x3ff));
}

}  // namespace ds
