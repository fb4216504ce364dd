// Element types of weights and caches, and the scalar conversions between them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace ds {

// I8 and U8 hold the codes of quantized weights (kernels/quant_formats.h) and their E8M0 scales;
// as plain numbers they read as their integer values.
enum class DType : uint8_t { F32, BF16, F16, I8, U8 };

constexpr size_t dtype_size(DType t) { return t == DType::F32 ? 4 : (t == DType::I8 || t == DType::U8) ? 1 : 2; }
std::string_view dtype_name(DType t);          // "F32", "BF16", "F16", "I8", "U8" (safetensors spelling)
bool parse_dtype(std::string_view s, DType* out);  // accepts safetensors names and bf16/f32/f16

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Round to nearest even; NaN stays NaN (quiet).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Reads element i of a buffer of type t as f32.
inline float load_as_f32(const void* data, DType t, size_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(data)[i];
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::I8: return float(static_cast<const int8_t*>(data)[i]);
    case DType::U8: return float(static_cast<const uint8_t*>(data)[i]);
  }
  return 0.f;
}

}  // namespace ds
