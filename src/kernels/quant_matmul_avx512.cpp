// AVX-512 VNNI kernels for quantized weights on int8 activations (matmul.h gives the panel
// layout, quant_activations.h the activations'). Per 32-value block and panel, vpdpbusd
// multiplies a 64-byte row of codes (16 lanes x 4 consecutive k, unsigned) with 4 activation
// bytes broadcast to every lane, summing into 16 int32 lanes: 8 instructions per block for Q8_0,
// and for the 4-bit formats 4 loads whose nibbles are split (and for MXFP4 looked up, vpshufb)
// into 8. The block's integer sums, less the format's offset times the activation block's sum,
// are scaled by both scales into f32 accumulators. Decode at batch 1 then reads 1.06 (Q8_0) or
// about 0.55 (4-bit) bytes per weight with a few instructions per 64 weights.
// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* operands of masked and
// reduce builtins, GCC PR 105593) wherever they are inlined; the warning is about the header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/matmul.h"
#include "kernels/quant_activations.h"
#include "kernels/tile_store_avx512.h"

namespace ds::detail {

namespace {

// Masked forms with every lane on: GCC 12 warns that the unmasked ones read an undefined
// register (a false positive that -Werror turns into a failure).
constexpr __mmask16 kAll = 0xffff;

// The 16 scales of a panel block as f32.
inline __m512 block_scales(QuantFormat f, const uint8_t* blk) {
  if (f == QuantFormat::MXFP4) {
    // E8M0 e is 2^(e - 127): the bits of that float are e << 23, except e = 0, whose 2^-127 is
    // the subnormal 0x00400000 (as quant_block_scale, the scalar kernel and ggml read it).
    const __m512i e = _mm512_maskz_cvtepu8_epi32(kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    const __m512i bits = _mm512_maskz_slli_epi32(kAll, e, 23);
    return _mm512_castsi512_ps(
        _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()), _mm512_set1_epi32(0x00400000)));
  }
  return _mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
}

inline __m512i load64(const uint8_t* p) { return _mm512_loadu_si512(reinterpret_cast<const void*>(p)); }
inline __m512i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// M rows x NV panels. F: the format (a template argument so the code loop has no branch).
template <QuantFormat F, int M, int NV>
void tile(const QuantizedActivations& xa, int r0, const PackedWeight& w, float* y, size_t ldy, int p, bool accumulate) {
  constexpr size_t sw = F == QuantFormat::MXFP4 ? 16 : 32;  // scale bytes before the codes
  constexpr size_t kBlock = sw + (F == QuantFormat::Q8_0 ? 512 : 256);
  constexpr int offset = F == QuantFormat::Q8_0 ? 128 : F == QuantFormat::Q4_0 ? 8 : 12;
  constexpr float unit = F == QuantFormat::MXFP4 ? 0.5f : 1.f;
  const int blocks = w.k / kQuantBlock;
  const auto* base = static_cast<const uint8_t*>(w.data.get());
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Doubled)));
  __m512 acc[M][NV];
  for (int r = 0; r < M; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  const int8_t* xr[M];
  for (int r = 0; r < M; ++r) xr[r] = xa.q + size_t(r0 + r) * size_t(w.k);
  for (int b = 0; b < blocks; ++b) {
    const uint8_t* blk[NV];
    for (int v = 0; v < NV; ++v) blk[v] = base + (size_t(p + v) * size_t(blocks) + size_t(b)) * kBlock;
    __m512i dot[M][NV];
    for (int r = 0; r < M; ++r)
      for (int v = 0; v < NV; ++v) dot[r][v] = _mm512_setzero_si512();
    const size_t xo = size_t(b) * kQuantBlock;
    if constexpr (F == QuantFormat::Q8_0) {
      for (int g = 0; g < 8; ++g) {
        __m512i wv[NV];
        for (int v = 0; v < NV; ++v) wv[v] = load64(blk[v] + sw + size_t(g) * 64);
        for (int r = 0; r < M; ++r) {
          const __m512i a = bcast4(xr[r] + xo + size_t(4 * g));
          for (int v = 0; v < NV; ++v) dot[r][v] = _mm512_dpbusd_epi32(dot[r][v], wv[v], a);
        }
      }
    } else {
      for (int g = 0; g < 4; ++g) {
        __m512i lo[NV], hi[NV];
        for (int v = 0; v < NV; ++v) {
          const __m512i raw = load64(blk[v] + sw + size_t(g) * 64);
          lo[v] = _mm512_and_si512(raw, low4);
          hi[v] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
          if constexpr (F == QuantFormat::MXFP4) {
            lo[v] = _mm512_shuffle_epi8(table, lo[v]);
            hi[v] = _mm512_shuffle_epi8(table, hi[v]);
          }
        }
        for (int r = 0; r < M; ++r) {
          const __m512i a0 = bcast4(xr[r] + xo + size_t(8 * g)), a1 = bcast4(xr[r] + xo + size_t(8 * g + 4));
          for (int v = 0; v < NV; ++v) {
            dot[r][v] = _mm512_dpbusd_epi32(dot[r][v], lo[v], a0);
            dot[r][v] = _mm512_dpbusd_epi32(dot[r][v], hi[v], a1);
          }
        }
      }
    }
    for (int v = 0; v < NV; ++v) {
      const __m512 s = block_scales(F, blk[v]);
      for (int r = 0; r < M; ++r) {
        const size_t xb = size_t(r0 + r) * size_t(blocks) + size_t(b);
        const __m512i corr = _mm512_set1_epi32(offset * xa.sum[xb]);
        const __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(dot[r][v], corr));
        acc[r][v] = _mm512_fmadd_ps(f, _mm512_mul_ps(s, _mm512_set1_ps(xa.d[xb] * unit)), acc[r][v]);
      }
    }
  }
  store_tile<M, NV>(acc, y + size_t(r0) * ldy, ldy, p, w.n, accumulate);
}

// Accumulators, block sums and code vectors must fit the 32 registers.
template <int M>
constexpr int kPanelsPerTile = M <= 2 ? 4 : M <= 4 ? 2 : 1;

template <QuantFormat F, int M>
void rows_panels(const QuantizedActivations& xa, int r0, const PackedWeight& w, float* y, size_t ldy, int p0, int p1,
                 bool accumulate) {
  constexpr int NV = kPanelsPerTile<M>;
  int p = p0;
  for (; p + NV <= p1; p += NV) tile<F, M, NV>(xa, r0, w, y, ldy, p, accumulate);
  for (; p < p1; ++p) tile<F, M, 1>(xa, r0, w, y, ldy, p, accumulate);
}

template <QuantFormat F>
void walk(const QuantizedActivations& xa, const PackedWeight& w, float* y, size_t ldy, int m, int p0, int p1,
          bool accumulate) {
  using Fn = void (*)(const QuantizedActivations&, int, const PackedWeight&, float*, size_t, int, int, bool);
  static constexpr Fn rows[9] = {nullptr,          rows_panels<F, 1>, rows_panels<F, 2>, rows_panels<F, 3>, rows_panels<F, 4>,
                                 rows_panels<F, 5>, rows_panels<F, 6>, rows_panels<F, 7>, rows_panels<F, 8>};
  // Panel groups outermost within a block of rows whose activations stay in L2 (a byte each
  // now), so a group's codes stay in L1/L2 across the 8-row tiles.
  const int row_block = std::max(8, int((256 * 1024) / size_t(w.k)) / 8 * 8);
  for (int rb = 0; rb < m; rb += row_block) {
    const int re = std::min(m, rb + row_block);
    for (int pg = p0; pg < p1; pg += 8) {
      const int pe = std::min(p1, pg + 8);
      for (int r = rb; r < re; r += 8) rows[std::min(8, re - r)](xa, r, w, y, ldy, pg, pe, accumulate);
    }
  }
}

}  // namespace

void matmul_quant_panels_avx512(const QuantizedActivations& xa, const PackedWeight& w, float* y, size_t ldy, int m,
                                int p0, int p1, bool accumulate) {
  switch (w.quant) {
    case QuantFormat::Q8_0: return walk<QuantFormat::Q8_0>(xa, w, y, ldy, m, p0, p1, accumulate);
    case QuantFormat::Q4_0: return walk<QuantFormat::Q4_0>(xa, w, y, ldy, m, p0, p1, accumulate);
    case QuantFormat::MXFP4: return walk<QuantFormat::MXFP4>(xa, w, y, ldy, m, p0, p1, accumulate);
    case QuantFormat::None: return;
  }
}

// The definition's arithmetic (quantize_activation_row), 16 lanes at a time: the same max, the
// same division, the same products and round-to-nearest-even conversions.
void quantize_activation_row_avx512(const float* x, int k, int8_t* q, float* d, int32_t* sum) {
  const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (int b = 0; b < k / kQuantBlock; ++b) {
    const float* xb = x + size_t(b) * kQuantBlock;
    const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
    const __m512 m = _mm512_max_ps(_mm512_and_ps(v0, sign), _mm512_and_ps(v1, sign));
    const float amax = _mm512_reduce_max_ps(m);
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    const __m512 iv = _mm512_set1_ps(inv);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, iv)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, iv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + size_t(b) * kQuantBlock), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + size_t(b) * kQuantBlock + 16), _mm512_cvtepi32_epi8(q1));
    d[b] = amax / 127.f;
    sum[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
  }
}

}  // namespace ds::detail

#pragma GCC diagnostic pop
