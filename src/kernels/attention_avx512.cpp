// AVX-512 inner loops of decode attention (attention_partition), for each KV cache type: the
// scores q.k for every head (tiles of 4 heads x 4 keys, the four keys' sums folded together)
// and the weighted sum of values (blocks of 32 rows held in L1, up to 6 heads per value load).
// bf16 rows are read 32 values at a time as even and odd values. Sums stay in registers;
// written with intrinsics because GCC spills array accumulators.
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
#include <type_traits>

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

// The sums of four accumulators' lanes, as lanes 0..3: pairs of vectors interleaved and added
// (16 lanes -> 4 partial sums of each vector per 128-bit lane), then the four 128-bit lanes
// folded. 13 instructions for four scores, where a full fold per score took 8 each. A vector's
// sum runs through the same adds whatever the other three hold, so a key scores the same in a
// full tile of four as alone in the remainder (with zeros beside it).
[[gnu::always_inline]] inline __m128 sum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const __m512d abd = _mm512_castps_pd(ab), cdd = _mm512_castps_pd(cd);
  __m512 u = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(abd, cdd)), _mm512_castpd_ps(_mm512_unpackhi_pd(abd, cdd)));
  u = _mm512_add_ps(u, _mm512_shuffle_f32x4(u, u, 0x4e));  // swap 256-bit halves
  u = _mm512_add_ps(u, _mm512_shuffle_f32x4(u, u, 0xb1));  // swap 128-bit lanes
  return _mm512_castps512_ps128(u);
}

// bf16 keys are read 32 values at a time and widened without a lane shuffle: a 32-bit lane j
// holds values 2j (low half) and 2j+1 (high half), so a shift gives the even values as f32 and a
// mask the odd ones. The query is laid out to match once per partition (pair_query): per 32
// values, its 16 even values, then its 16 odd ones, zero past dk.
constexpr int kPairChunk = 32;
// Values d .. d + 31 of a bf16 row (the first `left` of them; the rest read as 0) as its even
// and odd values in f32.
[[gnu::always_inline]] inline void load_pairs(const std::byte* row, int d, int left, __m512& even, __m512& odd) {
  const __m512i raw = _mm512_maskz_loadu_epi16(tail_mask32(left), reinterpret_cast<const uint16_t*>(row) + d);
  even = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
  odd = _mm512_castsi512_ps(_mm512_and_si512(raw, _mm512_set1_epi32(int(0xffff0000u))));
}
inline int pair_query_stride(int dk) { return (dk + kPairChunk - 1) / kPairChunk * kPairChunk; }
constexpr int kPairQueryFloats = 8192;  // the pair_query buffer (on the stack), in floats
inline void pair_query(const float* q, int nq, int dk, float* out) {
  const int stride = pair_query_stride(dk);
  for (int h = 0; h < nq; ++h)
    for (int c = 0; c < stride; c += kPairChunk)
      for (int j = 0; j < kPairChunk / 2; ++j) {
        const int e = c + 2 * j, o = e + 1;
        out[size_t(h) * size_t(stride) + size_t(c + j)] = e < dk ? q[size_t(h) * size_t(dk) + size_t(e)] : 0.f;
        out[size_t(h) * size_t(stride) + size_t(c + 16 + j)] = o < dk ? q[size_t(h) * size_t(dk) + size_t(o)] : 0.f;
      }
}

// With bf16 products (PagedKv::bf16_products) the query is rounded to bf16 once per partition,
// in the row's own order (a 32-bit slot holds values 2j and 2j+1, which vdpbf16ps multiplies with
// the key's values 2j and 2j+1 and adds to lane j), zero past dk; qs counts 32-bit slots.
inline int dot_query_stride(int dk) { return (dk + kPairChunk - 1) / kPairChunk * (kPairChunk / 2); }
inline void dot_query(const float* q, int nq, int dk, float* out) {
  const int stride = dot_query_stride(dk);
  for (int h = 0; h < nq; ++h)
    for (int d = 0; d < dk; d += kPairChunk) {
      const float* qh = q + size_t(h) * size_t(dk) + size_t(d);
      const __m512 lo = _mm512_maskz_loadu_ps(tail_mask(dk - d), qh);
      const __m512 hi = _mm512_maskz_loadu_ps(tail_mask(dk - d - 16), qh + 16);
      _mm512_storeu_si512(out + size_t(h) * size_t(stride) + size_t(d / 2), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
}

// How a partition's keys meet the query: f32 values (kPlain), bf16 keys widened as even and odd
// values (kPairs, a pair_query layout), or bf16 products (kDot, a dot_query layout).
enum ScoreMode { kPlain, kPairs, kDot };

// H heads (qs apart) against K (4 or 1) key rows: H*K independent FMA chains; each key vector
// is loaded once for H heads and each query vector once for K keys.
template <KvDtype T, int Mode, int H, int K>
[[gnu::always_inline]] inline void scores_tile(const float* q, size_t qs, int dk, const std::byte* const* kr, const float* kf,
                                               float scale, float* out) {
  static_assert(K == 4 || K == 1);
  __m512 acc[H][K];
  for (int h = 0; h < H; ++h)
    for (int k = 0; k < K; ++k) acc[h][k] = _mm512_setzero_ps();
  if constexpr (Mode == kDot) {
    static_assert(T == KvDtype::BF16);
    for (int d = 0; d < dk; d += kPairChunk) {
      const __mmask32 m = tail_mask32(dk - d);
      __m512i kb[K];
      for (int k = 0; k < K; ++k) kb[k] = _mm512_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(kr[k]) + d);
      for (int h = 0; h < H; ++h) {
        const __m512i qb = _mm512_loadu_si512(q + size_t(h) * qs + size_t(d / 2));
        for (int k = 0; k < K; ++k) acc[h][k] = _mm512_dpbf16_ps(acc[h][k], (__m512bh)qb, (__m512bh)kb[k]);
      }
    }
  } else if constexpr (Mode == kPairs) {
    static_assert(T == KvDtype::BF16);
    for (int d = 0; d < dk; d += kPairChunk) {
      __m512 ke[K], ko[K];
      for (int k = 0; k < K; ++k) load_pairs(kr[k], d, dk - d, ke[k], ko[k]);
      for (int h = 0; h < H; ++h) {
        const __m512 qe = _mm512_loadu_ps(q + size_t(h) * qs + size_t(d));
        const __m512 qo = _mm512_loadu_ps(q + size_t(h) * qs + size_t(d) + 16);
        for (int k = 0; k < K; ++k) acc[h][k] = _mm512_fmadd_ps(qo, ko[k], _mm512_fmadd_ps(qe, ke[k], acc[h][k]));
      }
    }
  } else {
    for (int d = 0; d < dk; d += 16) {
      const __mmask16 m = tail_mask(dk - d);
      __m512 kv[K];
      for (int k = 0; k < K; ++k) kv[k] = load16<T>(kr[k], d, m);
      for (int h = 0; h < H; ++h) {
        const __m512 qv = _mm512_maskz_loadu_ps(m, q + size_t(h) * qs + size_t(d));
        for (int k = 0; k < K; ++k) acc[h][k] = _mm512_fmadd_ps(qv, kv[k], acc[h][k]);
      }
    }
  }
  const __m512 zero = _mm512_setzero_ps();
  for (int h = 0; h < H; ++h) {
    __m128 s;
    if constexpr (K == 4)
      s = sum4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
    else
      s = sum4(acc[h][0], zero, zero, zero);
    s = _mm_mul_ps(s, _mm_set1_ps(scale));
    if constexpr (T == KvDtype::Fp8E4M3) s = _mm_mul_ps(s, K == 4 ? _mm_loadu_ps(kf) : _mm_set_ss(kf[0]));
    if constexpr (K == 4)
      _mm_storeu_ps(out + size_t(h) * kAttnPartition, s);
    else
      _mm_store_ss(out + size_t(h) * kAttnPartition, s);
  }
}

// All nq heads against K key rows, 4 heads at a time.
template <KvDtype T, int Mode, int K>
[[gnu::always_inline]] inline void scores_keys(const float* q, size_t qs, int nq, int dk, const std::byte* const* kr, const float* kf,
                                               float scale, float* out) {
  int h = 0;
  for (; h + 4 <= nq; h += 4)
    scores_tile<T, Mode, 4, K>(q + size_t(h) * qs, qs, dk, kr, kf, scale, out + size_t(h) * kAttnPartition);
  const float* qh = q + size_t(h) * qs;
  float* oh = out + size_t(h) * kAttnPartition;
  switch (nq - h) {
    case 3: scores_tile<T, Mode, 3, K>(qh, qs, dk, kr, kf, scale, oh); break;
    case 2: scores_tile<T, Mode, 2, K>(qh, qs, dk, kr, kf, scale, oh); break;
    case 1: scores_tile<T, Mode, 1, K>(qh, qs, dk, kr, kf, scale, oh); break;
    default: break;
  }
}

inline void prefetch_row(const std::byte* row, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 64) _mm_prefetch(reinterpret_cast<const char*>(row + i), _MM_HINT_T0);
}
// Rows requested from memory well ahead of their use go to L2, not L1: a request into L1 holds
// one of the core's few L1 miss buffers (a couple of dozen on Zen 4) for a whole memory latency,
// which caps one core at about 10 GB/s of such reads; L2 tracks several times as many. With
// every prefetch of the scores pass into L1, decode attention read its cache at 15-20 GB/s once
// the cache outgrew the L3 (BM_DecodeAttentionServed/64: 2.5 ms; into L2: 2.1-2.3 ms, and the
// served concurrency-16 step of bench-100m-dense spent 5.7-6.4 ms in attention instead of 8-9).
inline void prefetch_row_l2(const std::byte* row, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 64) _mm_prefetch(reinterpret_cast<const char*>(row + i), _MM_HINT_T1);
}

// Rows this far ahead are requested explicitly: a GQA head's rows sit a whole token row apart
// (2 KiB for 4 heads of 64 at f32), two per page, which the hardware prefetcher does not follow.
constexpr int kPrefetchRows = 16;

// The rows of a KvAhead, a share per key scored, requested into L2 like the partition's own
// rows (prefetch_row_l2 says why; into the L3 only ran twice as slow, BM_DecodeAttentionServed
// at 256 sequences).
class AheadFetch {
 public:
  AheadFetch(const KvAhead& a, int dk, int n) : a_(a), n_(std::max(n, 1)) {
    a_.n = a_.kv ? std::clamp(a_.n, 0, kAttnPartition) : 0;  // off_ holds one partition
    if (a_.n == 0) return;
    attention_row_offsets(*a_.kv, a_.t0, a_.n, off_);
    key_bytes_ = size_t(dk) * kv_elem_bytes(a_.kv->dtype);
  }
  // Called as rows [0, t) of the n this pass computes are done: fetches the matching share.
  void upto(int t) {
    const int until = int(int64_t(a_.n) * std::min(t, n_) / n_);
    for (; done_ < until; ++done_) {
      prefetch_row_l2(a_.kv->k + off_[done_], key_bytes_);
      if (a_.kv->v != a_.kv->k) prefetch_row_l2(a_.kv->v + off_[done_], key_bytes_);  // GQA: dv == dk
    }
  }

 private:
  KvAhead a_;
  int n_;
  int done_ = 0;
  size_t key_bytes_ = 0;
  size_t off_[kAttnPartition];
};

template <KvDtype T, int Mode>
void scores_pass(const float* q, size_t qs, int nq, int dk, float scale, const PagedKv& kv, const size_t* off, int n, float* scores,
                 const KvAhead& ahead) {
  const size_t row_bytes = size_t(dk) * kv_elem_bytes(T);
  AheadFetch fetch(ahead, dk, n);
  // The value rows are fetched in the same pass (the value pass finds them in L2): two streams
  // interleaved at the token stride, which the hardware prefetcher on its own kept at a third of
  // the read bandwidth once the cache is larger than the L3 (BM_DecodeAttentionServed).
  auto prefetch_key_value = [&](int t) {
    prefetch_row_l2(kv.k + off[t], row_bytes);
    if (kv.v != kv.k) prefetch_row_l2(kv.v + off[t], row_bytes);
  };
  const std::byte* rows[4];
  float kf[4];
  // The first rows are requested together up front; the loop below requests each row
  // kPrefetchRows ahead, so without this a partition's first rows are demand misses one by one.
  for (int t = 0; t < std::min(n, kPrefetchRows); ++t) prefetch_key_value(t);
  int t = 0;
  for (; t + 4 <= n; t += 4) {  // four keys gathered: one tile pass for all heads
    for (int i = 0; i < 4; ++i) {
      rows[i] = kv.k + off[t + i];
      kf[i] = row_factor<T>(kv.k_scale, off[t + i]);
      if (t + i + kPrefetchRows < n) prefetch_key_value(t + i + kPrefetchRows);
    }
    scores_keys<T, Mode, 4>(q, qs, nq, dk, rows, kf, scale, scores + size_t(t));
    fetch.upto(t + 4);
  }
  for (; t < n; ++t) {  // the last n % 4 keys
    rows[0] = kv.k + off[t];
    kf[0] = row_factor<T>(kv.k_scale, off[t]);
    scores_keys<T, Mode, 1>(q, qs, nq, dk, rows, kf, scale, scores + size_t(t));
  }
  fetch.upto(n);
}

// Heads in chunks whose re-laid queries (`stride` floats each, written by `layout`) fit the
// buffer. Whether a head's scores take a given path depends on dk alone, never on nq: the same
// query must score the same whether its heads come split into groups (decode) or many rows'
// heads together (verify rows).
template <KvDtype T, int Mode, class Layout>
void scores_chunked(Layout layout, int stride, const float* q, int nq, int dk, float scale, const PagedKv& kv,
                    const size_t* off, int n, float* scores, const KvAhead& ahead) {
  alignas(64) float buf[kPairQueryFloats];
  const int chunk = kPairQueryFloats / stride;
  for (int h0 = 0; h0 < nq; h0 += chunk) {
    const int hn = std::min(chunk, nq - h0);
    layout(q + size_t(h0) * size_t(dk), hn, dk, buf);
    scores_pass<T, Mode>(buf, size_t(stride), hn, dk, scale, kv, off, n, scores + size_t(h0) * kAttnPartition,
                         h0 == 0 ? ahead : KvAhead{});
  }
}

template <KvDtype T>
void scores_impl(const float* q, int nq, int dk, float scale, const PagedKv& kv, const size_t* off, int n, float* scores,
                 const KvAhead& ahead) {
  if constexpr (T == KvDtype::BF16) {
    if (kv.bf16_products && dot_query_stride(dk) <= kPairQueryFloats)
      return scores_chunked<T, kDot>(dot_query, dot_query_stride(dk), q, nq, dk, scale, kv, off, n, scores, ahead);
    if (pair_query_stride(dk) <= kPairQueryFloats)
      return scores_chunked<T, kPairs>(pair_query, pair_query_stride(dk), q, nq, dk, scale, kv, off, n, scores, ahead);
  }
  scores_pass<T, kPlain>(q, size_t(dk), nq, dk, scale, kv, off, n, scores, ahead);
}

constexpr int kRowBlock = 32;  // value rows per block: 32 KiB at dv = 256 in f32, inside L1

// H heads (probs and outputs dv apart) over one block of nr value rows: for each 64 output
// columns, 4H accumulators in registers, loaded from and stored back to the output (L1). vf:
// each row's factor (fp8), folded into its probabilities. Pairs: bf16 rows read 32 values at a
// time as even and odd values (as the scores do), the output held in that layout (per 32
// columns, 16 even then 16 odd; unpair_output restores it); each column's sum is the same chain
// of FMAs either way.
template <KvDtype T, bool Pairs, int H>
[[gnu::always_inline]] inline void pv_rows(const float* probs, const std::byte* const* rows, const float* vf, int nr, int dv, float* o) {
  for (int d0 = 0; d0 < dv; d0 += 64) {
    __mmask16 m[4];
    for (int j = 0; j < 4; ++j) m[j] = tail_mask(dv - d0 - 16 * j);
    __m512 a[H][4];
    for (int h = 0; h < H; ++h)
      for (int j = 0; j < 4; ++j) a[h][j] = _mm512_maskz_loadu_ps(m[j], o + size_t(h) * size_t(dv) + size_t(d0 + 16 * j));
    for (int i = 0; i < nr; ++i) {
      __m512 v[4];
      if constexpr (Pairs) {
        for (int c = 0; c < 2; ++c)
          load_pairs(rows[i], d0 + kPairChunk * c, dv - d0 - kPairChunk * c, v[2 * c], v[2 * c + 1]);
      } else {
        for (int j = 0; j < 4; ++j) v[j] = load16<T>(rows[i], d0 + 16 * j, m[j]);
      }
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

// Heads [0, nq) in tiles of up to 6, the value loops' unit (a tile's heads share each value
// vector load): tile(h, std::integral_constant<int, H>) for each tile of H heads from head h.
template <class Tile>
[[gnu::always_inline]] inline void for_head_tiles(int nq, Tile&& tile) {
  for (int h = 0; h < nq;) {
    switch (std::min(6, nq - h)) {
      case 6: tile(h, std::integral_constant<int, 6>{}); h += 6; break;
      case 5: tile(h, std::integral_constant<int, 5>{}); h += 5; break;
      case 4: tile(h, std::integral_constant<int, 4>{}); h += 4; break;
      case 3: tile(h, std::integral_constant<int, 3>{}); h += 3; break;
      case 2: tile(h, std::integral_constant<int, 2>{}); h += 2; break;
      default: tile(h, std::integral_constant<int, 1>{}); h += 1; break;
    }
  }
}

// An output held 32 columns at a time as two vectors (a, b) back to column order: columns
// 0..15 are lanes `first` and 16..31 lanes `second` of the pair (index 16 + i is b's lane i).
inline void permute_output(float* o, int nq, int dv, __m512i first, __m512i second) {
  for (size_t c = 0; c < size_t(nq) * size_t(dv); c += kPairChunk) {
    const __m512 a = _mm512_loadu_ps(o + c), b = _mm512_loadu_ps(o + c + 16);
    _mm512_storeu_ps(o + c, _mm512_permutex2var_ps(a, first, b));
    _mm512_storeu_ps(o + c + 16, _mm512_permutex2var_ps(a, second, b));
  }
}

// The pairs layout of pv_rows (16 even columns, then 16 odd) back to column order.
inline void unpair_output(float* o, int nq, int dv) {
  permute_output(o, nq, dv, _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23),
                 _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31));
}

// bf16 products: vdpbf16ps pairs two value rows (i, i+1): interleaving their 16-bit values
// (unpacklo/hi_epi16, within each 128-bit lane) gives per 32 columns two vectors whose 32-bit
// lane 4L + j holds the rows' values at column 8L + j (lo) or 8L + 4 + j (hi), to meet the pair
// of probabilities (p_i, p_i+1) broadcast. The output is held in that order (per 32 columns, the
// lo sums then the hi sums; undot_output restores it). pp: head h's block of probability pairs
// at pp + h * kRowBlock / 2. An odd last row pairs with zeros.
template <int H, int C>
[[gnu::always_inline]] inline void pv_cols_dot(const uint32_t* pp, const std::byte* const* rows, int nr, int d0, int dv, float* o) {
  // C (1 or 2) chunks of 32 columns from d0 as a compile-time count: with a run-time count GCC
  // kept the 4H accumulators on the stack, and the value pass took 42% of decode attention's time
  // (BM_DecodeAttentionServed/64/640/2/1/1: 1.6-2.2 ms, in registers 1.2-1.5).
  __m512 a[H][2 * C];
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < 2 * C; ++j) a[h][j] = _mm512_loadu_ps(o + size_t(h) * size_t(dv) + size_t(d0 + 16 * j));
  for (int i = 0; i < nr; i += 2) {
    __m512i v[2 * C];
    for (int c = 0; c < C; ++c) {
      const __m512i r0 = _mm512_loadu_si512(reinterpret_cast<const uint16_t*>(rows[i]) + d0 + kPairChunk * c);
      const __m512i r1 = i + 1 < nr ? _mm512_loadu_si512(reinterpret_cast<const uint16_t*>(rows[i + 1]) + d0 + kPairChunk * c)
                                    : _mm512_setzero_si512();
      v[2 * c] = _mm512_unpacklo_epi16(r0, r1);
      v[2 * c + 1] = _mm512_unpackhi_epi16(r0, r1);
    }
    for (int h = 0; h < H; ++h) {
      const __m512i p = _mm512_set1_epi32(int(pp[size_t(h) * (kRowBlock / 2) + size_t(i / 2)]));
      for (int j = 0; j < 2 * C; ++j) a[h][j] = _mm512_dpbf16_ps(a[h][j], (__m512bh)v[j], (__m512bh)p);
    }
  }
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < 2 * C; ++j) _mm512_storeu_ps(o + size_t(h) * size_t(dv) + size_t(d0 + 16 * j), a[h][j]);
}

template <int H>
[[gnu::always_inline]] inline void pv_rows_dot(const uint32_t* pp, const std::byte* const* rows, int nr, int dv, float* o) {
  for (int d0 = 0; d0 < dv; d0 += 64) {
    if (dv - d0 >= 64)
      pv_cols_dot<H, 2>(pp, rows, nr, d0, dv, o);
    else
      pv_cols_dot<H, 1>(pp, rows, nr, d0, dv, o);
  }
}

// pv_rows_dot's order (the lo sums, then the hi sums) back to column order.
inline void undot_output(float* o, int nq, int dv) {
  permute_output(o, nq, dv, _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23),
                 _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31));
}

// The value pass with bf16 products: per block of kRowBlock rows, every head's probabilities
// rounded to bf16 (round to nearest even, zero past the last row), then pv_rows_dot.
inline void pv_pass_dot(const float* probs, int nq, int dv, const PagedKv& kv, const size_t* off, int n, float* o_part) {
  for (size_t i = 0; i < size_t(nq) * size_t(dv); ++i) o_part[i] = 0.f;
  const size_t row_bytes = size_t(dv) * 2;
  const std::byte* rows[kRowBlock];
  constexpr int kHeadChunk = 64;  // heads whose pairs one block holds
  alignas(64) uint32_t pp[kHeadChunk * (kRowBlock / 2)];
  for (int r0 = 0; r0 < n; r0 += kRowBlock) {
    const int nr = std::min(kRowBlock, n - r0);
    for (int i = 0; i < nr; ++i) rows[i] = kv.v + off[r0 + i];
    for (int i = 0; i < nr && r0 + kRowBlock + i < n; ++i) prefetch_row(kv.v + off[r0 + kRowBlock + i], row_bytes);
    for (int h0 = 0; h0 < nq; h0 += kHeadChunk) {
      const int hn = std::min(kHeadChunk, nq - h0);
      for (int h = 0; h < hn; ++h) {
        const float* ph = probs + size_t(h0 + h) * kAttnPartition + size_t(r0);
        const __m512 lo = _mm512_maskz_loadu_ps(tail_mask(nr), ph), hi = _mm512_maskz_loadu_ps(tail_mask(nr - 16), ph + 16);
        _mm512_store_si512(pp + size_t(h) * (kRowBlock / 2), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
      }
      for_head_tiles(hn, [&](int h, auto tile) {
        pv_rows_dot<decltype(tile)::value>(pp + size_t(h) * (kRowBlock / 2), rows, nr, dv, o_part + size_t(h0 + h) * size_t(dv));
      });
    }
  }
  undot_output(o_part, nq, dv);
}

template <KvDtype T, bool Pairs>
void pv_pass(const float* probs, int nq, int dv, const PagedKv& kv, const size_t* off, int n, float* o_part) {
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
    for_head_tiles(nq, [&](int h, auto tile) {
      pv_rows<T, Pairs, decltype(tile)::value>(p + size_t(h) * kAttnPartition, rows, vf, nr, dv, o_part + size_t(h) * size_t(dv));
    });
  }
  if constexpr (Pairs) unpair_output(o_part, nq, dv);
}

template <KvDtype T>
void pv_impl(const float* probs, int nq, int dv, const PagedKv& kv, const size_t* off, int n, float* o_part) {
  if constexpr (T == KvDtype::BF16) {
    if (kv.bf16_products && dv % kPairChunk == 0) return pv_pass_dot(probs, nq, dv, kv, off, n, o_part);
    if (dv % kPairChunk == 0) return pv_pass<T, true>(probs, nq, dv, kv, off, n, o_part);
  }
  pv_pass<T, false>(probs, nq, dv, kv, off, n, o_part);
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
                             float* scores, const KvAhead& ahead) {
  switch (kv.dtype) {
    case KvDtype::F32: return scores_impl<KvDtype::F32>(q, nq, dk, scale, kv, off, n, scores, ahead);
    case KvDtype::BF16: return scores_impl<KvDtype::BF16>(q, nq, dk, scale, kv, off, n, scores, ahead);
    case KvDtype::Fp8E4M3: return scores_impl<KvDtype::Fp8E4M3>(q, nq, dk, scale, kv, off, n, scores, ahead);
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
