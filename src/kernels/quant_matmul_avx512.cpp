// AVX-512 kernels for quantized weights (matmul.h gives the panel layout). Per 32-value block,
// the codes are widened to f32 (int8 by sign extension; 4-bit codes through a 16-entry table in
// a register, vpermps), multiplied with f32 activations into block sums, and each block sum is
// scaled into the tile's accumulators. Decode at batch 1 is bound by the bytes read, and these
// read 1.06 (Q8_0) or about 0.55 (4-bit) bytes per weight against bf16's 2.
#include <immintrin.h>

#include <algorithm>

#include "kernels/matmul.h"
#include "kernels/tile_store_avx512.h"

namespace ds::detail {

namespace {

// Masked forms with every lane on: GCC 12 warns that the unmasked ones read an undefined
// register (a false positive that -Werror turns into a failure).
constexpr __mmask16 kAll = 0xffff;

// The 16 scales of a panel block as f32.
inline __m512 block_scales(QuantFormat f, const uint8_t* blk) {
  if (f == QuantFormat::MXFP4) {
    // E8M0 e is 2^(e - 127): the bits of that float are e << 23 (e = 0 reads as 0).
    const __m512i e = _mm512_maskz_cvtepu8_epi32(kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, e, 23));
  }
  return _mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
}

template <int M, int NV>
void tile_q8(const float* x, size_t ldx, const PackedWeight& w, float* y, size_t ldy, int p, bool accumulate) {
  constexpr size_t kBlock = 32 + 16 * 32;
  const int blocks = w.k / kQuantBlock;
  const auto* base = static_cast<const uint8_t*>(w.data.get());
  __m512 acc[M][NV];
  for (int r = 0; r < M; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int b = 0; b < blocks; ++b) {
    const uint8_t* blk[NV];
    for (int v = 0; v < NV; ++v) blk[v] = base + (size_t(p + v) * size_t(blocks) + size_t(b)) * kBlock;
    __m512 bacc[M][NV];
    for (int r = 0; r < M; ++r)
      for (int v = 0; v < NV; ++v) bacc[r][v] = _mm512_setzero_ps();
    const float* xb = x + size_t(b) * kQuantBlock;
    for (int i = 0; i < kQuantBlock; ++i) {
      __m512 wv[NV];
      for (int v = 0; v < NV; ++v)
        wv[v] = _mm512_maskz_cvtepi32_ps(
            kAll, _mm512_maskz_cvtepi8_epi32(kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[v] + 32 + size_t(i) * 16))));
      for (int r = 0; r < M; ++r) {
        const __m512 a = _mm512_set1_ps(xb[size_t(r) * ldx + size_t(i)]);
        for (int v = 0; v < NV; ++v) bacc[r][v] = _mm512_fmadd_ps(a, wv[v], bacc[r][v]);
      }
    }
    for (int v = 0; v < NV; ++v) {
      const __m512 s = block_scales(QuantFormat::Q8_0, blk[v]);
      for (int r = 0; r < M; ++r) acc[r][v] = _mm512_fmadd_ps(bacc[r][v], s, acc[r][v]);
    }
  }
  store_tile<M, NV>(acc, y, ldy, p, w.n, accumulate);
}

template <int M, int NV>
void tile_q4(const float* x, size_t ldx, const PackedWeight& w, float* y, size_t ldy, int p, bool accumulate) {
  const size_t sw = w.quant == QuantFormat::MXFP4 ? 16 : 32;  // scale bytes before the codes
  const size_t kBlock = sw + 16 * 16;
  const int blocks = w.k / kQuantBlock;
  const auto* base = static_cast<const uint8_t*>(w.data.get());
  const __m512 table = _mm512_loadu_ps(quant4_values(w.quant));
  const __m512i low4 = _mm512_set1_epi32(0x0f);
  __m512 acc[M][NV];
  for (int r = 0; r < M; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int b = 0; b < blocks; ++b) {
    const uint8_t* blk[NV];
    for (int v = 0; v < NV; ++v) blk[v] = base + (size_t(p + v) * size_t(blocks) + size_t(b)) * kBlock;
    __m512 bacc[M][NV];
    for (int r = 0; r < M; ++r)
      for (int v = 0; v < NV; ++v) bacc[r][v] = _mm512_setzero_ps();
    const float* xb = x + size_t(b) * kQuantBlock;
    for (int j = 0; j < kQuantBlock / 2; ++j) {
      __m512 lo[NV], hi[NV];
      for (int v = 0; v < NV; ++v) {
        const __m512i raw =
            _mm512_maskz_cvtepu8_epi32(kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[v] + sw + size_t(j) * 16)));
        lo[v] = _mm512_maskz_permutexvar_ps(kAll, _mm512_maskz_and_epi32(kAll, raw, low4), table);
        hi[v] = _mm512_maskz_permutexvar_ps(kAll, _mm512_maskz_srli_epi32(kAll, raw, 4), table);
      }
      for (int r = 0; r < M; ++r) {
        const __m512 a0 = _mm512_set1_ps(xb[size_t(r) * ldx + size_t(2 * j)]);
        const __m512 a1 = _mm512_set1_ps(xb[size_t(r) * ldx + size_t(2 * j + 1)]);
        for (int v = 0; v < NV; ++v) {
          bacc[r][v] = _mm512_fmadd_ps(a0, lo[v], bacc[r][v]);
          bacc[r][v] = _mm512_fmadd_ps(a1, hi[v], bacc[r][v]);
        }
      }
    }
    for (int v = 0; v < NV; ++v) {
      const __m512 s = block_scales(w.quant, blk[v]);
      for (int r = 0; r < M; ++r) acc[r][v] = _mm512_fmadd_ps(bacc[r][v], s, acc[r][v]);
    }
  }
  store_tile<M, NV>(acc, y, ldy, p, w.n, accumulate);
}

// Accumulators, block sums and widened codes must fit the 32 registers.
template <int M>
constexpr int kPanelsPerTile = M <= 2 ? 4 : M <= 4 ? 2 : 1;

template <int M>
void rows_panels(const float* x, size_t ldx, const PackedWeight& w, float* y, size_t ldy, int p0, int p1,
                 bool accumulate) {
  constexpr int NV = kPanelsPerTile<M>;
  const bool q8 = w.quant == QuantFormat::Q8_0;
  int p = p0;
  for (; p + NV <= p1; p += NV) {
    if (q8) tile_q8<M, NV>(x, ldx, w, y, ldy, p, accumulate);
    else tile_q4<M, NV>(x, ldx, w, y, ldy, p, accumulate);
  }
  for (; p < p1; ++p) {
    if (q8) tile_q8<M, 1>(x, ldx, w, y, ldy, p, accumulate);
    else tile_q4<M, 1>(x, ldx, w, y, ldy, p, accumulate);
  }
}

constexpr RowsFn kRows[9] = {nullptr,        rows_panels<1>, rows_panels<2>, rows_panels<3>, rows_panels<4>,
                             rows_panels<5>, rows_panels<6>, rows_panels<7>, rows_panels<8>};

}  // namespace

void matmul_quant_panels_avx512(const float* x, size_t ldx, const PackedWeight& w, float* y, size_t ldy, int m, int p0,
                                int p1, bool accumulate) {
  walk_row_tiles(kRows, x, ldx, w, y, ldy, m, p0, p1, accumulate);
}

}  // namespace ds::detail
