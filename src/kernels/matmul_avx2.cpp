// AVX2 fallback for machines without AVX-512: same panel layout, two 8-wide halves per panel.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/matmul.h"

namespace ds::detail {

namespace {

// One bf16 pair row of a panel (16 lanes x k = 2c, 2c + 1) widened exactly to f32: the even k
// (low halves) shifted up, the odd k (high halves) masked.
inline void widen_pair(const uint16_t* row, __m256 (&lo)[2], __m256 (&hi)[2]) {
  const __m256i hi_mask = _mm256_set1_epi32(int(0xffff0000u));
  for (int h = 0; h < 2; ++h) {
    const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(row + size_t(h) * 16));
    lo[h] = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
    hi[h] = _mm256_castsi256_ps(_mm256_and_si256(raw, hi_mask));
  }
}

// Writes (or adds) M rows of one 16-wide panel, held as two 8-wide halves, masked at n.
template <int M>
void store_panel(__m256 (&acc)[M][2], float* y, size_t ldy, int p, int n, bool accumulate) {
  const int lanes = std::min(16, n - p * 16);
  for (int r = 0; r < M; ++r) {
    alignas(32) float tmp[16];
    _mm256_store_ps(tmp, acc[r][0]);
    _mm256_store_ps(tmp + 8, acc[r][1]);
    float* dst = y + size_t(r) * ldy + size_t(p) * 16;
    for (int l = 0; l < lanes; ++l) dst[l] = accumulate ? dst[l] + tmp[l] : tmp[l];
  }
}

template <int M>
void panel_rows(const float* x, size_t ldx, const PackedWeight& w, float* y, size_t ldy, int p,
                bool accumulate) {
  __m256 acc[M][2];
  for (int r = 0; r < M; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  if (w.dtype == DType::F32) {
    const float* base = static_cast<const float*>(w.data.get()) + size_t(p) * size_t(w.k) * 16;
    for (int c = 0; c < w.k; ++c) {
      const __m256 b0 = _mm256_load_ps(base + size_t(c) * 16);
      const __m256 b1 = _mm256_load_ps(base + size_t(c) * 16 + 8);
      for (int r = 0; r < M; ++r) {
        const __m256 a = _mm256_set1_ps(x[size_t(r) * ldx + size_t(c)]);
        acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
      }
    }
  } else {
    const int pairs = w.k_pad / 2;
    const uint16_t* base = static_cast<const uint16_t*>(w.data.get()) + size_t(p) * size_t(pairs) * 32;
    for (int c = 0; c < pairs; ++c) {
      __m256 lo[2], hi[2];
      widen_pair(base + size_t(c) * 32, lo, hi);
      const bool has_hi = 2 * c + 1 < w.k;
      for (int r = 0; r < M; ++r) {
        const float* xr = x + size_t(r) * ldx + size_t(2 * c);
        const __m256 a0 = _mm256_set1_ps(xr[0]);
        const __m256 a1 = _mm256_set1_ps(has_hi ? xr[1] : 0.f);
        for (int h = 0; h < 2; ++h) {
          acc[r][h] = _mm256_fmadd_ps(a0, lo[h], acc[r][h]);
          acc[r][h] = _mm256_fmadd_ps(a1, hi[h], acc[r][h]);
        }
      }
    }
  }
  store_panel<M>(acc, y, ldy, p, w.n, accumulate);
}

// bf16 activations: the AVX-512 kernel's vdpbf16ps order (odd k, then even) with FMAs, whose
// products of two bf16 numbers are exact, so only the sums round, as there.
template <int M>
void panel_rows_bf16dot(const uint32_t* xb, size_t ldxb, const PackedWeight& w, float* y, size_t ldy, int p,
                        bool accumulate) {
  __m256 acc[M][2];
  for (int r = 0; r < M; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const int pairs = w.k_pad / 2;
  const uint16_t* base = static_cast<const uint16_t*>(w.data.get()) + size_t(p) * size_t(pairs) * 32;
  const __m256i hi_mask = _mm256_set1_epi32(int(0xffff0000u));
  for (int c = 0; c < pairs; ++c) {
    __m256 lo[2], hi[2];
    widen_pair(base + size_t(c) * 32, lo, hi);
    for (int r = 0; r < M; ++r) {
      const __m256i pair = _mm256_set1_epi32(int(xb[size_t(r) * ldxb + size_t(c)]));
      const __m256 a0 = _mm256_castsi256_ps(_mm256_slli_epi32(pair, 16));
      const __m256 a1 = _mm256_castsi256_ps(_mm256_and_si256(pair, hi_mask));
      for (int h = 0; h < 2; ++h) {
        acc[r][h] = _mm256_fmadd_ps(a1, hi[h], acc[r][h]);
        acc[r][h] = _mm256_fmadd_ps(a0, lo[h], acc[r][h]);
      }
    }
  }
  store_panel<M>(acc, y, ldy, p, w.n, accumulate);
}

using PanelDotFn = void (*)(const uint32_t*, size_t, const PackedWeight&, float*, size_t, int, bool);
constexpr PanelDotFn kPanelDot[5] = {nullptr, panel_rows_bf16dot<1>, panel_rows_bf16dot<2>, panel_rows_bf16dot<3>,
                                     panel_rows_bf16dot<4>};

using PanelFn = void (*)(const float*, size_t, const PackedWeight&, float*, size_t, int, bool);
constexpr PanelFn kPanel[5] = {nullptr, panel_rows<1>, panel_rows<2>, panel_rows<3>, panel_rows<4>};

}  // namespace

void matmul_panels_avx2(const float* x, size_t ldx, const PackedWeight& w, float* y, size_t ldy,
                        int m, int p0, int p1, bool accumulate) {
  for (int p = p0; p < p1; ++p)
    for (int r = 0; r < m; r += 4) {
      const int rows = std::min(4, m - r);
      kPanel[rows](x + size_t(r) * ldx, ldx, w, y + size_t(r) * ldy, ldy, p, accumulate);
    }
}

void matmul_bf16dot_panels_avx2(const uint32_t* xb, size_t ldxb, const PackedWeight& w, float* y, size_t ldy,
                                int m, int p0, int p1, bool accumulate) {
  for (int p = p0; p < p1; ++p)
    for (int r = 0; r < m; r += 4) {
      const int rows = std::min(4, m - r);
      kPanelDot[rows](xb + size_t(r) * ldxb, ldxb, w, y + size_t(r) * ldy, ldy, p, accumulate);
    }
}

}  // namespace ds::detail
