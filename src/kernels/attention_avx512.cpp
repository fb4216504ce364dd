// AVX-512 inner loops of decode attention (attention_partition): the scores q.k for every head
// and the weighted sum of values. Both read each key or value row once per block of heads and
// keep their sums in registers; written with intrinsics because GCC spills array accumulators.
// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* operands of masked
// builtins, GCC PR 105593) wherever they are inlined; the warning is about the header, not us.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "kernels/attention.h"
#include "kernels/attention_isa.h"

namespace ds::detail {

namespace {

inline __mmask16 tail_mask(int left) {
  return left <= 0 ? __mmask16(0) : left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1u);
}

// Horizontal sum within the register (GCC 12's reduce and 512->256 casts trip
// -Wmaybe-uninitialized in its own headers): every lane ends up holding the total.
inline float hsum(__m512 v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e));  // swap 256-bit halves
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1));  // swap 128-bit lanes
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4e));        // swap pairs
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0xb1));        // swap neighbours
  return _mm512_cvtss_f32(v);
}

// H heads (consecutive, dk apart) against one key row: H independent FMA chains, each key
// vector loaded once.
template <int H>
inline void scores_block(const float* q, int dk, const float* kr, float scale, float* out) {
  __m512 acc[H];
  for (int h = 0; h < H; ++h) acc[h] = _mm512_setzero_ps();
  for (int d = 0; d < dk; d += 16) {
    const __mmask16 m = tail_mask(dk - d);
    const __m512 k = _mm512_maskz_loadu_ps(m, kr + d);
    for (int h = 0; h < H; ++h)
      acc[h] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + size_t(h) * size_t(dk) + size_t(d)), k, acc[h]);
  }
  for (int h = 0; h < H; ++h) out[size_t(h) * kAttnPartition] = hsum(acc[h]) * scale;
}

inline void prefetch_row(const float* row, int n) {
  for (int i = 0; i < n; i += 16) _mm_prefetch(reinterpret_cast<const char*>(row + i), _MM_HINT_T0);
}

// Rows this far ahead are requested explicitly: a GQA head's rows sit a whole token row apart
// (2 KiB for 4 heads of 64), two per page, which the hardware prefetcher does not follow.
constexpr int kPrefetchRows = 16;

}  // namespace

// Calls f(t, row) for t in [0, n) with row the key (or value) of position t0 + t, walking the
// block table once per block: kv.key() per row costs an integer division by the block size,
// which at 48 rows' worth per key dominated the MLA loop.
template <typename F>
inline void for_rows(const float* base, const PagedKv& kv, int t0, int n, F&& f) {
  const int bs = kv.block_size;
  for (int t = 0; t < n;) {
    const int pos = t0 + t;
    const int off = pos % bs;
    const int cnt = std::min(bs - off, n - t);
    const float* row = base + size_t(kv.block_table[pos / bs]) * kv.block_stride + size_t(off) * kv.token_stride;
    for (int i = 0; i < cnt; ++i, row += kv.token_stride) f(t + i, row, i + kPrefetchRows < cnt ? row + kPrefetchRows * kv.token_stride : nullptr);
    t += cnt;
  }
}

void attention_scores_avx512(const float* q, int nq, int dk, float scale, const PagedKv& kv, int t0, int n,
                             float* scores) {
  for_rows(kv.k, kv, t0, n, [&](int t, const float* kr, const float* ahead) {
    if (ahead) prefetch_row(ahead, dk);
    else if (t + kPrefetchRows < n) prefetch_row(kv.key(t0 + t + kPrefetchRows), dk);
    float* st = scores + size_t(t);
    int h = 0;
    for (; h + 4 <= nq; h += 4) scores_block<4>(q + size_t(h) * size_t(dk), dk, kr, scale, st + size_t(h) * kAttnPartition);
    switch (nq - h) {
      case 3: scores_block<3>(q + size_t(h) * size_t(dk), dk, kr, scale, st + size_t(h) * kAttnPartition); break;
      case 2: scores_block<2>(q + size_t(h) * size_t(dk), dk, kr, scale, st + size_t(h) * kAttnPartition); break;
      case 1: scores_block<1>(q + size_t(h) * size_t(dk), dk, kr, scale, st + size_t(h) * kAttnPartition); break;
      default: break;
    }
  });
}

namespace {
// H heads x 64 output columns [d0, d0 + 64) over all rows: 4H accumulators in registers,
// independent FMA chains, each value vector loaded once for H heads.
template <int H>
inline void pv_block(const float* probs, int dv, int d0, const PagedKv& kv, int t0, int n, bool prefetch,
                     float* o) {
  __mmask16 m[4];
  for (int j = 0; j < 4; ++j) m[j] = tail_mask(dv - d0 - 16 * j);
  __m512 a[H][4];
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < 4; ++j) a[h][j] = _mm512_setzero_ps();
  for_rows(kv.v, kv, t0, n, [&](int t, const float* vr, const float* ahead) {
    if (prefetch) {
      if (ahead) prefetch_row(ahead, dv);
      else if (t + kPrefetchRows < n) prefetch_row(kv.value(t0 + t + kPrefetchRows), dv);
    }
    __m512 v[4];
    for (int j = 0; j < 4; ++j) v[j] = _mm512_maskz_loadu_ps(m[j], vr + d0 + 16 * j);
    for (int h = 0; h < H; ++h) {
      const __m512 p = _mm512_set1_ps(probs[size_t(h) * kAttnPartition + size_t(t)]);
      for (int j = 0; j < 4; ++j) a[h][j] = _mm512_fmadd_ps(p, v[j], a[h][j]);
    }
  });
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < 4; ++j) _mm512_mask_storeu_ps(o + size_t(h) * size_t(dv) + size_t(d0 + 16 * j), m[j], a[h][j]);
}
}  // namespace

void attention_pv_avx512(const float* probs, int nq, int dv, const PagedKv& kv, int t0, int n, float* o_part) {
  // Output columns 64 at a time, two heads per pass over the partition's rows (L1/L2-resident
  // after the first pass): no read-modify-write of the output per row.
  for (int d0 = 0; d0 < dv; d0 += 64) {
    int h = 0;
    for (; h + 2 <= nq; h += 2)
      pv_block<2>(probs + size_t(h) * kAttnPartition, dv, d0, kv, t0, n, h == 0 && d0 == 0, o_part + size_t(h) * size_t(dv));
    if (h < nq) pv_block<1>(probs + size_t(h) * kAttnPartition, dv, d0, kv, t0, n, h == 0 && d0 == 0, o_part + size_t(h) * size_t(dv));
  }
}

}  // namespace ds::detail

#pragma GCC diagnostic pop
