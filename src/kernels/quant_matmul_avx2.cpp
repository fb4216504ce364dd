// AVX2 kernels for quantized weights on int8 activations: the integers of the AVX-512 VNNI
// kernel (quant_matmul_avx512.cpp) without vpdpbusd. vpmaddubsw multiplies unsigned codes with
// signed activation bytes into pairs of int16, which must not saturate: the 4-bit formats'
// bytes are at most 24 (24 * 127 * 2 fits), but Q8_0's code + 128 is not, so Q8_0 multiplies
// |code| with the activation carrying the code's sign (vpsignb), the sum itself, not the
// offset one. Eight lanes of a panel per register, two registers per panel.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/matmul.h"
#include "kernels/quant_activations.h"

namespace ds::detail {

namespace {

inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// The 8 scales of lanes [8h, 8h + 8) as f32.
inline __m256 half_scales(QuantFormat f, const uint8_t* blk, int h) {
  if (f == QuantFormat::MXFP4) {
    // 2^(e - 127) is the float of bits e << 23, except e = 0: 2^-127, the subnormal 0x00400000.
    const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 8 * h)));
    const __m256i zero = _mm256_cmpeq_epi32(e, _mm256_setzero_si256());
    return _mm256_castsi256_ps(_mm256_or_si256(_mm256_slli_epi32(e, 23), _mm256_and_si256(zero, _mm256_set1_epi32(0x00400000))));
  }
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h)));
}

// M rows (1 or 2) x one panel.
template <QuantFormat F, int M>
void tile(const QuantizedActivations& xa, int r0, const PackedWeight& w, float* y, size_t ldy, int p, bool accumulate) {
  constexpr size_t sw = F == QuantFormat::MXFP4 ? 16 : 32;
  constexpr size_t kBlock = sw + (F == QuantFormat::Q8_0 ? 512 : 256);
  // Q8_0 sums code * x directly (see above); the 4-bit formats sum their offset bytes.
  constexpr int offset = F == QuantFormat::Q8_0 ? 0 : F == QuantFormat::Q4_0 ? 8 : 12;
  constexpr float unit = F == QuantFormat::MXFP4 ? 0.5f : 1.f;
  const int blocks = w.k / kQuantBlock;
  const auto* base = static_cast<const uint8_t*>(w.data.get());
  const __m256i ones = _mm256_set1_epi16(1), low4 = _mm256_set1_epi8(0x0f), flip = _mm256_set1_epi8(char(0x80));
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Doubled)));
  __m256 acc[M][2];
  for (int r = 0; r < M; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int b = 0; b < blocks; ++b) {
    const uint8_t* blk = base + (size_t(p) * size_t(blocks) + size_t(b)) * kBlock;
    __m256i dot[M][2];
    for (int r = 0; r < M; ++r) dot[r][0] = dot[r][1] = _mm256_setzero_si256();
    const size_t xo = size_t(b) * kQuantBlock;
    // madd of 4 products per lane into its int32
    auto add = [&](__m256i& d, __m256i u, __m256i a) { d = _mm256_add_epi32(d, _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), ones)); };
    for (int h = 0; h < 2; ++h) {
      if constexpr (F == QuantFormat::Q8_0) {
        for (int g = 0; g < 8; ++g) {
          const __m256i code = _mm256_xor_si256(load32(blk + sw + size_t(g) * 64 + size_t(h) * 32), flip);  // signed codes
          const __m256i mag = _mm256_abs_epi8(code);
          for (int r = 0; r < M; ++r)
            add(dot[r][h], mag, _mm256_sign_epi8(bcast4(xa.q + size_t(r0 + r) * size_t(w.k) + xo + size_t(4 * g)), code));
        }
      } else {
        for (int g = 0; g < 4; ++g) {
          const __m256i raw = load32(blk + sw + size_t(g) * 64 + size_t(h) * 32);
          __m256i lo = _mm256_and_si256(raw, low4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
          if constexpr (F == QuantFormat::MXFP4) {
            lo = _mm256_shuffle_epi8(table, lo);
            hi = _mm256_shuffle_epi8(table, hi);
          }
          for (int r = 0; r < M; ++r) {
            const int8_t* xr = xa.q + size_t(r0 + r) * size_t(w.k) + xo;
            add(dot[r][h], lo, bcast4(xr + size_t(8 * g)));
            add(dot[r][h], hi, bcast4(xr + size_t(8 * g + 4)));
          }
        }
      }
    }
    for (int h = 0; h < 2; ++h) {
      const __m256 s = half_scales(F, blk, h);
      for (int r = 0; r < M; ++r) {
        const size_t xb = size_t(r0 + r) * size_t(blocks) + size_t(b);
        const __m256 f = _mm256_cvtepi32_ps(_mm256_sub_epi32(dot[r][h], _mm256_set1_epi32(offset * xa.sum[xb])));
        acc[r][h] = _mm256_fmadd_ps(f, _mm256_mul_ps(s, _mm256_set1_ps(xa.d[xb] * unit)), acc[r][h]);
      }
    }
  }
  for (int r = 0; r < M; ++r) {
    float out[16];
    _mm256_storeu_ps(out, acc[r][0]);
    _mm256_storeu_ps(out + 8, acc[r][1]);
    float* yr = y + size_t(r0 + r) * ldy + size_t(p) * 16;
    const int lanes = std::min(16, w.n - p * 16);
    for (int l = 0; l < lanes; ++l) yr[l] = accumulate ? yr[l] + out[l] : out[l];
  }
}

template <QuantFormat F>
void walk(const QuantizedActivations& xa, const PackedWeight& w, float* y, size_t ldy, int m, int p0, int p1,
          bool accumulate) {
  for (int p = p0; p < p1; ++p) {
    int r = 0;
    for (; r + 2 <= m; r += 2) tile<F, 2>(xa, r, w, y, ldy, p, accumulate);
    if (r < m) tile<F, 1>(xa, r, w, y, ldy, p, accumulate);
  }
}

}  // namespace

void matmul_quant_panels_avx2(const QuantizedActivations& xa, const PackedWeight& w, float* y, size_t ldy, int m,
                              int p0, int p1, bool accumulate) {
  switch (w.quant) {
    case QuantFormat::Q8_0: return walk<QuantFormat::Q8_0>(xa, w, y, ldy, m, p0, p1, accumulate);
    case QuantFormat::Q4_0: return walk<QuantFormat::Q4_0>(xa, w, y, ldy, m, p0, p1, accumulate);
    case QuantFormat::MXFP4: return walk<QuantFormat::MXFP4>(xa, w, y, ldy, m, p0, p1, accumulate);
    case QuantFormat::None: return;
  }
}

}  // namespace ds::detail
