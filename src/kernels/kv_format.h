// Rows of the attention KV cache in each KvDtype (core/kv_dtype.h): written once when a token's
// keys and values are computed, read by every later attention step.
//
// fp8 is OCP E4M3 (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; largest finite 448,
// subnormals down to 2^-9, no infinities) with one f32 scale per row, where a row is one KV
// head's key (or value) of one token, or MLA's latent row: scale = max|x| / 448 and code =
// e4m3(x / scale), rounded to nearest even. A per-row scale depends on nothing but the row, so a
// cached block's bytes are a function of its tokens alone (the prefix cache and batch invariance
// need that), and a row's outlier costs precision in that row only.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/kv_dtype.h"

namespace ds {

// The E4M3 code nearest x (ties to even), saturating at +-448; NaN encodes as 0.
uint8_t fp8_e4m3_encode(float x);
// The value of a code (every code is finite: 0x7f / 0xff, E4M3's NaN, read as +-480).
float fp8_e4m3_decode(uint8_t code);

// Largest finite E4M3 value.
inline constexpr float kFp8E4M3Max = 448.f;

// Stores n values as one row: n * kv_elem_bytes(t) bytes of codes at dst and, for fp8, the row's
// scale at *scale (max|x| / 448; 0 for a row of zeros). scale may be null for f32 / bf16.
void kv_store_row(KvDtype t, const float* src, int n, std::byte* dst, float* scale);
// out[i] = value i of the row (codes at src, the row's scale for fp8).
void kv_load_row(KvDtype t, const std::byte* src, float scale, int n, float* out);

}  // namespace ds
