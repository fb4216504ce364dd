// AVX-512 inner loops of decode attention (attention_partition): the scores q.k for every head
// (tiles of 4 heads x 4 keys) and the weighted sum of values (blocks of 32 rows held in L1, up
// to 6 heads per value load). Sums stay in registers; written with intrinsics because GCC
// spills array accumulators.
// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* operands of masked
// builtins, GCC PR 105593) wherever they are inlined; the warning is about the header, not us.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
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

// H heads (consecutive, dk apart) against K key rows: H*K independent FMA chains; each key
// vector is loaded once for H heads and each query vector once for K keys.
template <int H, int K>
inline void scores_tile(const float* q, int dk, const float* const* kr, float scale, float* out) {
  __m512 acc[H][K];
  for (int h = 0; h < H; ++h)
    for (int k = 0; k < K; ++k) acc[h][k] = _mm512_setzero_ps();
  for (int d = 0; d < dk; d += 16) {
    const __mmask16 m = tail_mask(dk - d);
    __m512 kv[K];
    for (int k = 0; k < K; ++k) kv[k] = _mm512_maskz_loadu_ps(m, kr[k] + d);
    for (int h = 0; h < H; ++h) {
      const __m512 qv = _mm512_maskz_loadu_ps(m, q + size_t(h) * size_t(dk) + size_t(d));
      for (int k = 0; k < K; ++k) acc[h][k] = _mm512_fmadd_ps(qv, kv[k], acc[h][k]);
    }
  }
  for (int h = 0; h < H; ++h)
    for (int k = 0; k < K; ++k) out[size_t(h) * kAttnPartition + size_t(k)] = hsum(acc[h][k]) * scale;
}

// All nq heads against K key rows, 4 heads at a time.
template <int K>
inline void scores_keys(const float* q, int nq, int dk, const float* const* kr, float scale, float* out) {
  int h = 0;
  for (; h + 4 <= nq; h += 4) scores_tile<4, K>(q + size_t(h) * size_t(dk), dk, kr, scale, out + size_t(h) * kAttnPartition);
  const float* qh = q + size_t(h) * size_t(dk);
  float* oh = out + size_t(h) * kAttnPartition;
  switch (nq - h) {
    case 3: scores_tile<3, K>(qh, dk, kr, scale, oh); break;
    case 2: scores_tile<2, K>(qh, dk, kr, scale, oh); break;
    case 1: scores_tile<1, K>(qh, dk, kr, scale, oh); break;
    default: break;
  }
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
  const float* rows[4];
  int t = 0;
  for_rows(kv.k, kv, t0, n, [&](int tt, const float* kr, const float* ahead) {
    if (ahead) prefetch_row(ahead, dk);
    else if (tt + kPrefetchRows < n) prefetch_row(kv.key(t0 + tt + kPrefetchRows), dk);
    rows[tt - t] = kr;
    if (tt - t == 3) {  // four keys gathered: one tile pass for all heads
      scores_keys<4>(q, nq, dk, rows, scale, scores + size_t(t));
      t = tt + 1;
    }
  });
  // The last n % 4 keys wait in rows[0, n - t).
  for (int i = 0; t + i < n; ++i) scores_keys<1>(q, nq, dk, rows + i, scale, scores + size_t(t + i));
}

namespace {
constexpr int kRowBlock = 32;  // value rows per block: 32 KiB at dv = 256, inside L1

// H heads (probs and outputs dv apart) over one block of nr value rows: for each 64 output
// columns, 4H accumulators in registers, loaded from and stored back to the output (L1).
template <int H>
inline void pv_rows(const float* probs, const float* const* rows, int nr, int dv, float* o) {
  for (int d0 = 0; d0 < dv; d0 += 64) {
    __mmask16 m[4];
    for (int j = 0; j < 4; ++j) m[j] = tail_mask(dv - d0 - 16 * j);
    __m512 a[H][4];
    for (int h = 0; h < H; ++h)
      for (int j = 0; j < 4; ++j) a[h][j] = _mm512_maskz_loadu_ps(m[j], o + size_t(h) * size_t(dv) + size_t(d0 + 16 * j));
    for (int i = 0; i < nr; ++i) {
      __m512 v[4];
      for (int j = 0; j < 4; ++j) v[j] = _mm512_maskz_loadu_ps(m[j], rows[i] + d0 + 16 * j);
      for (int h = 0; h < H; ++h) {
        const __m512 p = _mm512_set1_ps(probs[size_t(h) * kAttnPartition + size_t(i)]);
        for (int j = 0; j < 4; ++j) a[h][j] = _mm512_fmadd_ps(p, v[j], a[h][j]);
      }
    }
    for (int h = 0; h < H; ++h)
      for (int j = 0; j < 4; ++j) _mm512_mask_storeu_ps(o + size_t(h) * size_t(dv) + size_t(d0 + 16 * j), m[j], a[h][j]);
  }
}
}  // namespace

void attention_pv_avx512(const float* probs, int nq, int dv, const PagedKv& kv, int t0, int n, float* o_part) {
  // Blocks of kRowBlock value rows, each used by every head and column while it sits in L1; up
  // to 6 heads share each value vector load. (One pass over all rows per head and column chunk
  // re-read the partition from L2 24 times for MLA's 12 heads: L2-bandwidth bound.)
  for (size_t i = 0; i < size_t(nq) * size_t(dv); ++i) o_part[i] = 0.f;
  const float* rows[kRowBlock];
  for (int r0 = 0; r0 < n; r0 += kRowBlock) {
    const int nr = std::min(kRowBlock, n - r0);
    for (int i = 0; i < nr; ++i) rows[i] = kv.value(t0 + r0 + i);
    for (int i = 0; i < nr && r0 + kRowBlock + i < n; ++i) prefetch_row(kv.value(t0 + r0 + kRowBlock + i), dv);
    const float* p = probs + size_t(r0);
    for (int h = 0; h < nq;) {
      const float* ph = p + size_t(h) * kAttnPartition;
      float* oh = o_part + size_t(h) * size_t(dv);
      switch (std::min(6, nq - h)) {
        case 6: pv_rows<6>(ph, rows, nr, dv, oh); h += 6; break;
        case 5: pv_rows<5>(ph, rows, nr, dv, oh); h += 5; break;
        case 4: pv_rows<4>(ph, rows, nr, dv, oh); h += 4; break;
        case 3: pv_rows<3>(ph, rows, nr, dv, oh); h += 3; break;
        case 2: pv_rows<2>(ph, rows, nr, dv, oh); h += 2; break;
        default: pv_rows<1>(ph, rows, nr, dv, oh); h += 1; break;
      }
    }
  }
}

}  // namespace ds::detail

#pragma GCC diagnostic pop
