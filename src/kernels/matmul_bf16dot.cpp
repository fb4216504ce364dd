// BF16 weights meeting bf16 activations (matmul.h): the rounding of the activations and the
// plain panel kernel, which fixes the arithmetic the ISA kernels reproduce.
#include <algorithm>
#include <cstring>

#include "core/dtype.h"
#include "kernels/matmul.h"

namespace ds {

void set_activation_dtype(PackedWeight& w, ActivationDtype a) {
  for (PackedWeight& p : w.parts) set_activation_dtype(p, a);
  if (w.dtype == DType::BF16 && w.quant == QuantFormat::None) w.activations = a;
}

namespace detail {

namespace {
// vcvtne2ps2bf16's rounding: a subnormal becomes a zero of its sign (the instruction treats
// denormal inputs as zero), a NaN is quieted, everything else rounds to nearest even.
uint16_t round_bf16_daz(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0) return uint16_t((u >> 16) & 0x8000u);
  return f32_to_bf16(f);
}
}  // namespace

float round_to_bf16_exact(float x) { return bf16_to_f32(round_bf16_daz(x)); }

void round_rows_bf16_scalar(const float* x, size_t ldx, int m, int k, uint32_t* out, size_t ldo) {
  const int pairs = (k + 1) / 2;
  for (int r = 0; r < m; ++r) {
    const float* xr = x + size_t(r) * ldx;
    uint32_t* o = out + size_t(r) * ldo;
    for (int c = 0; c < pairs; ++c) {
      const uint32_t lo = round_bf16_daz(xr[2 * c]);
      const uint32_t hi = 2 * c + 1 < k ? round_bf16_daz(xr[2 * c + 1]) : 0u;
      o[c] = lo | (hi << 16);
    }
  }
}

void matmul_bf16dot_panels_scalar(const uint32_t* xb, size_t ldxb, const PackedWeight& w, float* y, size_t ldy,
                                  int m, int p0, int p1, bool accumulate) {
  const int pairs = w.k_pad / 2;
  for (int p = p0; p < p1; ++p) {
    const uint16_t* wp = static_cast<const uint16_t*>(w.data.get()) + size_t(p) * size_t(pairs) * 32;
    const int lanes = std::min(16, w.n - p * 16);
    for (int r = 0; r < m; ++r) {
      const uint32_t* xr = xb + size_t(r) * ldxb;
      float acc[16] = {};
      for (int c = 0; c < pairs; ++c) {
        const float x0 = bf16_to_f32(uint16_t(xr[c] & 0xffffu)), x1 = bf16_to_f32(uint16_t(xr[c] >> 16));
        for (int l = 0; l < 16; ++l) {
          const float w0 = bf16_to_f32(wp[(size_t(c) * 16 + size_t(l)) * 2]);
          const float w1 = bf16_to_f32(wp[(size_t(c) * 16 + size_t(l)) * 2 + 1]);
          // Both products are exact in f32; each addition rounds, odd k first.
          acc[l] = acc[l] + x1 * w1;
          acc[l] = acc[l] + x0 * w0;
        }
      }
      float* yr = y + size_t(r) * ldy + size_t(p) * 16;
      for (int l = 0; l < lanes; ++l) yr[l] = accumulate ? yr[l] + acc[l] : acc[l];
    }
  }
}

}  // namespace detail
}  // namespace ds
