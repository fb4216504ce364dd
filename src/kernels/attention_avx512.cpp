// AVX-512 inner loops of decode attention (attention_partition), for each KV cache type: the
// scores q.k for every head (tiles of 4 heads x 4 keys) and the weighted sum of values (blocks of 32 rows held in L1, up
// to 6 heads per value load). Sums stay in registers; written with intrinsics because GCC
// spills array accumulators.
// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* operands of masked
// builtins, GCC PR 105593) wherever they are inlined; the warning is about the header, not us.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/attention_isa.h"
#include "kernels/vec_math_avx512.h"

namespace ds::detail {

namespace {

// Horizontal sum within the register (GCC 12's reduce and 512->256 casts trip
// -Wmaybe-uninitialized in its own headers): every lane ends up holding the total.
inline float hsum(__m512 v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e));  // swap 256-bit halves
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1));  // swap 128-bit lanes
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4e));        // swap pairs
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0xb1));        // swap neighbours
  return _mm512_cvtss_f32(v);
}

// Sixteen values of a row from value d on (lanes past the mask read as 0), as f32: bf16 widens
// by a shift; fp8 E4M3 is moved into an f16's bit positions (sign to bit 15, exponent and
// mantissa to bits 7..13), which vcvtph2ps widens exactly, subnormals included, to the value
// times 2^-8 (kFp8Unit folds the 2^8 back in with the row's scale).
template <KvDtype T>
[[gnu::always_inline]] inline __m512 load16(const std::byte* row, int d, __mmask16 m) {
  if constexpr (T == KvDtype::F32) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + d);
  } else if constexpr (T == KvDtype::BF16) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + d);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    const __m256i w = _mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(m, row + d));
    const __m256i mag = _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x7f)), 7);
    const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)), 8);
    return _mm512_cvtph_ps(_mm256_or_si256(mag, sign));
  }
}
constexpr float kFp8Unit = 256.f;

// The factor a row's products are multiplied by: its scale for fp8 (times kFp8Unit), else 1.
template <KvDtype T>
[[gnu::always_inline]] inline float row_factor(const std::byte* scale_base, size_t offset) {
  if constexpr (T == KvDtype::Fp8E4M3) {
    float s;
    std::memcpy(&s, scale_base + offset, sizeof s);
    return s * kFp8Unit;
  } else {
    (void)scale_base;
    (void)offset;
    return 1.f;
  }
}

// H heads (consecutive, dk apart) against K key rows: H*K independent FMA chains; each key
// vector is loaded once for H heads and each query vector once for K keys.
template <KvDtype T, int H, int K>
[[gnu::always_inline]] inline void scores_tile(const float* q, int dk, const std::byte* const* kr, const float* kf, float scale, float* out) {
  __m512 acc[H][K];
  for (int h = 0; h < H; ++h)
    for (int k = 0; k < K; ++k) acc[h][k] = _mm512_setzero_ps();
  for (int d = 0; d < dk; d += 16) {
    const __mmask16 m = tail_mask(dk - d);
    __m512 kv[K];
    for (int k = 0; k < K; ++k) kv[k] = load16<T>(kr[k], d, m);
    for (int h = 0; h < H; ++h) {
      const __m512 qv = _mm512_maskz_loadu_ps(m, q + size_t(h) * size_t(dk) + size_t(d));
      for (int k = 0; k < K; ++k) acc[h][k] = _mm512_fmadd_ps(qv, kv[k], acc[h][k]);
    }
  }
  for (int h = 0; h < H; ++h)
    for (int k = 0; k < K; ++k) {
      const float s = hsum(acc[h][k]) * scale;
      out[size_t(h) * kAttnPartition + size_t(k)] = T == KvDtype::Fp8E4M3 ? s * kf[k] : s;
    }
}

// All nq heads against K key rows, 4 heads at a time.
template <KvDtype T, int K>
[[gnu::always_inline]] inline void scores_keys(const float* q, int nq, int dk, const std::byte* const* kr, const float* kf, float scale, float* out) {
  int h = 0;
  for (; h + 4 <= nq; h += 4)
    scores_tile<T, 4, K>(q + size_t(h) * size_t(dk), dk, kr, kf, scale, out + size_t(h) * kAttnPartition);
  const float* qh = q + size_t(h) * size_t(dk);
  float* oh = out + size_t(h) * kAttnPartition;
  switch (nq - h) {
    case 3: scores_tile<T, 3, K>(qh, dk, kr, kf, scale, oh); break;
    case 2: scores_tile<T, 2, K>(qh, dk, kr, kf, scale, oh); break;
    case 1: scores_tile<T, 1, K>(qh, dk, kr, kf, scale, oh); break;
    default: break;
  }
}

inline void prefetch_row(const std::byte* row, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 64) _mm_prefetch(reinterpret_cast<const char*>(row + i), _MM_HINT_T0);
}

// Rows this far ahead are requested explicitly: a GQA head's rows sit a whole token row apart
// (2 KiB for 4 heads of 64 at f32), two per page, which the hardware prefetcher does not follow.
constexpr int kPrefetchRows = 16;

template <KvDtype T>
void scores_impl(const float* q, int nq, int dk, float scale, const PagedKv& kv, const size_t* off, int n, float* scores) {
  const size_t row_bytes = size_t(dk) * kv_elem_bytes(T);
  // The value rows are fetched in the same pass (the value pass finds them in L2): two streams
  // interleaved at the token stride, which the hardware prefetcher on its own kept at a third of
  // the read bandwidth once the cache is larger than the L3 (BM_DecodeAttentionServed).
  const size_t vrow_bytes = row_bytes;
  const std::byte* rows[4];
  float kf[4];
  int t = 0;
  for (; t + 4 <= n; t += 4) {  // four keys gathered: one tile pass for all heads
    for (int i = 0; i < 4; ++i) {
      rows[i] = kv.k + off[t + i];
      kf[i] = row_factor<T>(kv.k_scale, off[t + i]);
      if (t + i + kPrefetchRows < n) {
        prefetch_row(kv.k + off[t + i + kPrefetchRows], row_bytes);
        if (kv.v != kv.k) prefetch_row(kv.v + off[t + i + kPrefetchRows], vrow_bytes);
      }
    }
    scores_keys<T, 4>(q, nq, dk, rows, kf, scale, scores + size_t(t));
  }
  for (; t < n; ++t) {  // the last n % 4 keys
    rows[0] = kv.k + off[t];
    kf[0] = row_factor<T>(kv.k_scale, off[t]);
    scores_keys<T, 1>(q, nq, dk, rows, kf, scale, scores + size_t(t));
  }
}

constexpr int kRowBlock = 32;  // value rows per block: 32 KiB at dv = 256 in f32, inside L1

// H heads (probs and outputs dv apart) over one block of nr value rows: for each 64 output
// columns, 4H accumulators in registers, loaded from and stored back to the output (L1). vf:
// each row's factor (fp8), folded into its probabilities.
template <KvDtype T, int H>
[[gnu::always_inline]] inline void pv_rows(const float* probs, const std::byte* const* rows, const float* vf, int nr, int dv, float* o) {
  for (int d0 = 0; d0 < dv; d0 += 64) {
    __mmask16 m[4];
    for (int j = 0; j < 4; ++j) m[j] = tail_mask(dv - d0 - 16 * j);
    __m512 a[H][4];
    for (int h = 0; h < H; ++h)
      for (int j = 0; j < 4; ++j) a[h][j] = _mm512_maskz_loadu_ps(m[j], o + size_t(h) * size_t(dv) + size_t(d0 + 16 * j));
    for (int i = 0; i < nr; ++i) {
      __m512 v[4];
      for (int j = 0; j < 4; ++j) v[j] = load16<T>(rows[i], d0 + 16 * j, m[j]);
      for (int h = 0; h < H; ++h) {
        float pf = probs[size_t(h) * kAttnPartition + size_t(i)];
        if constexpr (T == KvDtype::Fp8E4M3) pf *= vf[i];
        const __m512 p = _mm512_set1_ps(pf);
        for (int j = 0; j < 4; ++j) a[h][j] = _mm512_fmadd_ps(p, v[j], a[h][j]);
      }
    }
    for (int h = 0; h < H; ++h)
      for (int j = 0; j < 4; ++j) _mm512_mask_storeu_ps(o + size_t(h) * size_t(dv) + size_t(d0 + 16 * j), m[j], a[h][j]);
  }
}

template <KvDtype T>
void pv_impl(const float* probs, int nq, int dv, const PagedKv& kv, const size_t* off, int n, float* o_part) {
  // Blocks of kRowBlock value rows, each used by every head and column while it sits in L1; up
  // to 6 heads share each value vector load. (One pass over all rows per head and column chunk
  // re-read the partition from L2 24 times for MLA's 12 heads: L2-bandwidth bound.)
  for (size_t i = 0; i < size_t(nq) * size_t(dv); ++i) o_part[i] = 0.f;
  const size_t row_bytes = size_t(dv) * kv_elem_bytes(T);
  const std::byte* rows[kRowBlock];
  float vf[kRowBlock];
  for (int r0 = 0; r0 < n; r0 += kRowBlock) {
    const int nr = std::min(kRowBlock, n - r0);
    for (int i = 0; i < nr; ++i) {
      rows[i] = kv.v + off[r0 + i];
      vf[i] = row_factor<T>(kv.v_scale, off[r0 + i]);
    }
    for (int i = 0; i < nr && r0 + kRowBlock + i < n; ++i) prefetch_row(kv.v + off[r0 + kRowBlock + i], row_bytes);
    const float* p = probs + size_t(r0);
    for (int h = 0; h < nq;) {
      const float* ph = p + size_t(h) * kAttnPartition;
      float* oh = o_part + size_t(h) * size_t(dv);
      switch (std::min(6, nq - h)) {
        case 6: pv_rows<T, 6>(ph, rows, vf, nr, dv, oh); h += 6; break;
        case 5: pv_rows<T, 5>(ph, rows, vf, nr, dv, oh); h += 5; break;
        case 4: pv_rows<T, 4>(ph, rows, vf, nr, dv, oh); h += 4; break;
        case 3: pv_rows<T, 3>(ph, rows, vf, nr, dv, oh); h += 3; break;
        case 2: pv_rows<T, 2>(ph, rows, vf, nr, dv, oh); h += 2; break;
        default: pv_rows<T, 1>(ph, rows, vf, nr, dv, oh); h += 1; break;
      }
    }
  }
}

inline float hmax(__m512 v) {
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e));
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1));
  v = _mm512_max_ps(v, _mm512_permute_ps(v, 0x4e));
  v = _mm512_max_ps(v, _mm512_permute_ps(v, 0xb1));
  return _mm512_cvtss_f32(v);
}

}  // namespace

void attention_softmax_avx512(float* scores, int nq, int n, float* lse) {
  for (int h = 0; h < nq; ++h) {
    float* sh = scores + size_t(h) * kAttnPartition;
    __m512 vm = _mm512_set1_ps(-INFINITY);
    for (int t = 0; t < n; t += 16) vm = _mm512_max_ps(vm, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail_mask(n - t), sh + t));
    const float m = hmax(vm);
    const __m512 mv = _mm512_set1_ps(m);
    __m512 vs = _mm512_setzero_ps();
    for (int t = 0; t < n; t += 16) {
      const __mmask16 k = tail_mask(n - t);
      const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, sh + t), mv)));
      _mm512_mask_storeu_ps(sh + t, k, e);
      vs = _mm512_add_ps(vs, e);
    }
    const float sum = hsum(vs);
    lse[h] = m + std::log(sum);
    const __m512 inv = _mm512_set1_ps(1.f / sum);
    for (int t = 0; t < n; t += 16) {
      const __mmask16 k = tail_mask(n - t);
      _mm512_mask_storeu_ps(sh + t, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, sh + t), inv));
    }
  }
}

void attention_row_offsets(const PagedKv& kv, int t0, int n, size_t* off) {
  const int bs = kv.block_size;
  for (int t = 0; t < n;) {
    const int pos = t0 + t;
    const int in_block = pos % bs;
    const int cnt = std::min(bs - in_block, n - t);
    size_t at = size_t(kv.block_table[pos / bs]) * kv.block_stride + size_t(in_block) * kv.token_stride;
    for (int i = 0; i < cnt; ++i, at += kv.token_stride) off[t + i] = at;
    t += cnt;
  }
}

void attention_scores_avx512(const float* q, int nq, int dk, float scale, const PagedKv& kv, const size_t* off, int n,
                             float* scores) {
  switch (kv.dtype) {
    case KvDtype::F32: return scores_impl<KvDtype::F32>(q, nq, dk, scale, kv, off, n, scores);
    case KvDtype::BF16: return scores_impl<KvDtype::BF16>(q, nq, dk, scale, kv, off, n, scores);
    case KvDtype::Fp8E4M3: return scores_impl<KvDtype::Fp8E4M3>(q, nq, dk, scale, kv, off, n, scores);
  }
}

void attention_pv_avx512(const float* probs, int nq, int dv, const PagedKv& kv, const size_t* off, int n, float* o_part) {
  switch (kv.dtype) {
    case KvDtype::F32: return pv_impl<KvDtype::F32>(probs, nq, dv, kv, off, n, o_part);
    case KvDtype::BF16: return pv_impl<KvDtype::BF16>(probs, nq, dv, kv, off, n, o_part);
    case KvDtype::Fp8E4M3: return pv_impl<KvDtype::Fp8E4M3>(probs, nq, dv, kv, off, n, o_part);
  }
}

}  // namespace ds::detail

#pragma GCC diagnostic pop
