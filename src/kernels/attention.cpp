#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/attention_isa.h"
#include "kernels/fast_math.h"
#include "kernels/kv_format.h"
#include "kernels/simd.h"

namespace ds {

namespace {
// A head's key and value rows sit a whole token row apart (all KV heads, k then v: 2 KiB for
// 4 heads of 64), so consecutive rows of one head are two per 4 KiB page and the hardware
// prefetcher, which stays inside a page, does not follow them: decode attention was bound by
// memory latency. Rows this far ahead are requested explicitly.
constexpr int kPrefetchRows = 16;
inline void prefetch_row(const std::byte* row, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 64) __builtin_prefetch(row + i, 0, 3);
}

// The scalar path reads rows of other types through a buffer of this many values at a time.
constexpr int kRowChunk = 256;

// n values of a row from value c0 on, as f32: the row itself for f32, else converted into buf.
inline const float* row_values(const PagedKv& kv, const std::byte* row, float row_scale, int c0, int n, float* buf) {
  if (kv.dtype == KvDtype::F32) return reinterpret_cast<const float*>(row) + c0;
  kv_load_row(kv.dtype, row + size_t(c0) * kv_elem_bytes(kv.dtype), row_scale, n, buf);
  return buf;
}

}  // namespace

void PagedKv::key_f32(int pos, int n, float* out) const { kv_load_row(dtype, key(pos), key_scale(pos), n, out); }
void PagedKv::value_f32(int pos, int n, float* out) const { kv_load_row(dtype, value(pos), value_scale(pos), n, out); }

DS_MULTIVERSION void attention_partition(const float* q, int nq, int dk, int dv, float scale,
                                         const PagedKv& kv, int t0, int t1, float* o_part,
                                         float* lse, float* scores, const KvAhead& ahead) {
  const int n = t1 - t0;
  static const bool avx512 = active_isa() == Isa::Avx512;
  size_t off[kAttnPartition];  // the rows' byte offsets (n <= kAttnPartition)
  if (avx512) {
    detail::attention_row_offsets(kv, t0, n, off);
    detail::attention_scores_avx512(q, nq, dk, scale, kv, off, n, scores, ahead);
  } else {
    // Each key row is loaded once and dotted with every head's query. The dot keeps kDotLanes
    // independent partial sums: one running sum is a serial dependency the compiler may not
    // reorder (no -ffast-math), which would leave the loop scalar.
    // Each key row is loaded once (in chunks of kRowChunk values) and dotted with every head's
    // query. The dot keeps kDotLanes independent partial sums: one running sum is a serial
    // dependency the compiler may not reorder (no -ffast-math), which would leave the loop scalar.
    constexpr int kDotLanes = 16;
    const size_t row_bytes = size_t(dk) * kv_elem_bytes(kv.dtype);
    float buf[kRowChunk];
    for (int t = 0; t < n; ++t) {
      const std::byte* row = kv.key(t0 + t);
      const float ks = kv.key_scale(t0 + t);
      if (t + kPrefetchRows < n) prefetch_row(kv.key(t0 + t + kPrefetchRows), row_bytes);
      for (int h = 0; h < nq; ++h) scores[size_t(h) * kAttnPartition + size_t(t)] = 0.f;
      for (int c0 = 0; c0 < dk; c0 += kRowChunk) {
        const int cn = std::min(kRowChunk, dk - c0);
        const float* kr = row_values(kv, row, ks, c0, cn, buf);
        const int dl = cn / kDotLanes * kDotLanes;
        for (int h = 0; h < nq; ++h) {
          const float* qh = q + size_t(h) * size_t(dk) + size_t(c0);
          float acc[kDotLanes] = {};
          for (int d = 0; d < dl; d += kDotLanes)
            for (int j = 0; j < kDotLanes; ++j) acc[j] += qh[d + j] * kr[d + j];
          float sum = 0.f;
          for (int d = dl; d < cn; ++d) sum += qh[d] * kr[d];
          for (int j = 0; j < kDotLanes; ++j) sum += acc[j];
          scores[size_t(h) * kAttnPartition + size_t(t)] += sum;
        }
      }
      for (int h = 0; h < nq; ++h) scores[size_t(h) * kAttnPartition + size_t(t)] *= scale;
    }
  }
  if (avx512) {
    detail::attention_softmax_avx512(scores, nq, n, lse);
    detail::attention_pv_avx512(scores, nq, dv, kv, off, n, o_part);
    return;
  }
  for (int h = 0; h < nq; ++h) {
    float* sh = scores + size_t(h) * kAttnPartition;
    float m = -INFINITY;
    for (int t = 0; t < n; ++t) m = std::max(m, sh[t]);
    float sum = 0.f;
    for (int t = 0; t < n; ++t) {
      sh[t] = exp_fast(sh[t] - m);
      sum += sh[t];
    }
    lse[h] = m + std::log(sum);
    const float inv = 1.f / sum;
    for (int t = 0; t < n; ++t) sh[t] *= inv;
  }
  for (int h = 0; h < nq; ++h)
    for (int d = 0; d < dv; ++d) o_part[size_t(h) * size_t(dv) + size_t(d)] = 0.f;
  const size_t vrow_bytes = size_t(dv) * kv_elem_bytes(kv.dtype);
  float buf[kRowChunk];
  for (int t = 0; t < n; ++t) {
    const std::byte* row = kv.value(t0 + t);
    const float vs = kv.value_scale(t0 + t);
    if (t + kPrefetchRows < n) prefetch_row(kv.value(t0 + t + kPrefetchRows), vrow_bytes);
    for (int c0 = 0; c0 < dv; c0 += kRowChunk) {
      const int cn = std::min(kRowChunk, dv - c0);
      const float* vr = row_values(kv, row, vs, c0, cn, buf);
      for (int h = 0; h < nq; ++h) {
        const float p = scores[size_t(h) * kAttnPartition + size_t(t)];
        float* oh = o_part + size_t(h) * size_t(dv) + size_t(c0);
        for (int d = 0; d < cn; ++d) oh[d] += p * vr[d];
      }
    }
  }
}

DS_MULTIVERSION void merge_partitions(const float* parts, const float* lses, int R, int nq, int dv,
                                      float* out, float* out_lse) {
  for (int h = 0; h < nq; ++h) {
    float m = -INFINITY;
    for (int r = 0; r < R; ++r) m = std::max(m, lses[size_t(r) * size_t(nq) + size_t(h)]);
    float sum = 0.f;
    for (int r = 0; r < R; ++r) sum += std::exp(lses[size_t(r) * size_t(nq) + size_t(h)] - m);
    const float LSE = m + std::log(sum);
    float* oh = out + size_t(h) * size_t(dv);
    for (int d = 0; d < dv; ++d) oh[d] = 0.f;
    for (int r = 0; r < R; ++r) {
      const float w = std::exp(lses[size_t(r) * size_t(nq) + size_t(h)] - LSE);
      const float* ph = parts + (size_t(r) * size_t(nq) + size_t(h)) * size_t(dv);
      for (int d = 0; d < dv; ++d) oh[d] += w * ph[d];
    }
    if (out_lse) out_lse[h] = LSE;
  }
}

size_t attention_scratch_floats(int nq, int dv, int n_ctx) {
  const size_t R = size_t((n_ctx + kAttnPartition - 1) / kAttnPartition);
  return size_t(nq) * kAttnPartition + R * size_t(nq) * size_t(dv) + R * size_t(nq);
}

void attention_decode(const float* q, int nq, int dk, int dv, float scale, const PagedKv& kv,
                      int n_ctx, float* out, float* scratch, const PagedKv* next, int next_ctx, float* out_lse) {
  const int R = (n_ctx + kAttnPartition - 1) / kAttnPartition;
  float* scores = scratch;
  // Partition r fetches r + 1; the last fetches the next item's first.
  auto ahead_of = [&](int r) {
    if (r + 1 < R) return KvAhead{&kv, (r + 1) * kAttnPartition, std::min(n_ctx, (r + 2) * kAttnPartition) - (r + 1) * kAttnPartition};
    if (next && next_ctx > 0) return KvAhead{next, 0, std::min(next_ctx, kAttnPartition)};
    return KvAhead{};
  };
  if (R == 1) {  // one partition is already normalised
    float lse[256];
    attention_partition(q, nq, dk, dv, scale, kv, 0, n_ctx, out, out_lse ? out_lse : lse, scores, ahead_of(0));
    return;
  }
  float* parts = scores + size_t(nq) * kAttnPartition;
  float* lses = parts + size_t(R) * size_t(nq) * size_t(dv);
  for (int r = 0; r < R; ++r) {
    const int t0 = r * kAttnPartition, t1 = std::min(n_ctx, t0 + kAttnPartition);
    attention_partition(q, nq, dk, dv, scale, kv, t0, t1, parts + size_t(r) * size_t(nq) * size_t(dv),
                        lses + size_t(r) * size_t(nq), scores, ahead_of(r));
  }
  merge_partitions(parts, lses, R, nq, dv, out, out_lse);
}

size_t attention_rows_scratch_floats(int rows, int nq, int dk, int dv, int n_ctx_last) {
  const size_t R = size_t((n_ctx_last + kAttnPartition - 1) / kAttnPartition), Q = size_t(rows) * size_t(nq);
  return Q * size_t(dk) + Q * kAttnPartition + size_t(rows) * R * (size_t(nq) * size_t(dv) + size_t(nq));
}

namespace {

// Rows [0, T) of attention_decode_rows together (AVX-512). Per partition: the offsets and the
// scores of every row's heads that reach it in one pass (keys past a row's context are scored
// and ignored: a score does not depend on the others beside it), then each row's softmax and
// value sums over its own length, as attention_partition does; then each row's merge.
void decode_rows_together(const float* q, size_t q_stride, int T, int nq, int dk, int dv, float scale,
                          const PagedKv& kv, int n_ctx0, float* out, size_t o_stride, float* scratch, const KvAhead& after) {
  const int n_last = n_ctx0 + T - 1;
  const int R = (n_last + kAttnPartition - 1) / kAttnPartition;
  const size_t Q = size_t(T) * size_t(nq), head_out = size_t(nq) * size_t(dv);
  float* qs = scratch;                                  // [T * nq][dk]
  float* scores = qs + Q * size_t(dk);                  // [T * nq][kAttnPartition]
  float* parts = scores + Q * kAttnPartition;           // [T][R][nq][dv]
  float* lses = parts + size_t(T) * size_t(R) * head_out;  // [T][R][nq]
  for (int j = 0; j < T; ++j)
    std::copy(q + size_t(j) * q_stride, q + size_t(j) * q_stride + size_t(nq) * size_t(dk), qs + size_t(j) * size_t(nq) * size_t(dk));
  size_t off[kAttnPartition];
  for (int r = 0; r < R; ++r) {
    const int t0 = r * kAttnPartition;
    const int first = std::max(0, t0 + 1 - n_ctx0);  // the first row whose context reaches t0
    const int n_max = std::min(n_last, t0 + kAttnPartition) - t0;
    detail::attention_row_offsets(kv, t0, n_max, off);
    const KvAhead ahead = r + 1 < R ? KvAhead{&kv, t0 + kAttnPartition, std::min(n_last, t0 + 2 * kAttnPartition) - t0 - kAttnPartition}
                                    : after;
    detail::attention_scores_avx512(qs + size_t(first) * size_t(nq) * size_t(dk), (T - first) * nq, dk, scale, kv, off, n_max,
                                    scores + size_t(first) * size_t(nq) * kAttnPartition, ahead);
    for (int j = first; j < T; ++j) {
      const int n = std::min(n_ctx0 + j, t0 + kAttnPartition) - t0;
      float* sj = scores + size_t(j) * size_t(nq) * kAttnPartition;
      const size_t at = size_t(j) * size_t(R) + size_t(r);
      detail::attention_softmax_avx512(sj, nq, n, lses + at * size_t(nq));
      detail::attention_pv_avx512(sj, nq, dv, kv, off, n, parts + at * head_out);
    }
  }
  for (int j = 0; j < T; ++j) {
    const int Rj = (n_ctx0 + j + kAttnPartition - 1) / kAttnPartition;
    const float* pj = parts + size_t(j) * size_t(R) * head_out;
    if (Rj == 1)  // attention_decode writes a lone partition's output as it is
      std::copy(pj, pj + head_out, out + size_t(j) * o_stride);
    else
      merge_partitions(pj, lses + size_t(j) * size_t(R) * size_t(nq), Rj, nq, dv, out + size_t(j) * o_stride, nullptr);
  }
}

}  // namespace

void attention_decode_rows(const float* q, size_t q_stride, int T, int nq, int dk, int dv, float scale,
                           const PagedKv& kv, int n_ctx0, float* out, size_t o_stride, float* scratch,
                           size_t scratch_floats, const PagedKv* next, int next_ctx) {
  static const bool avx512 = active_isa() == Isa::Avx512;
  for (int j0 = 0; j0 < T;) {
    int rows = T - j0;
    while (rows > 1 && attention_rows_scratch_floats(rows, nq, dk, dv, n_ctx0 + j0 + rows - 1) > scratch_floats) --rows;
    // After these rows: the next group's first partition (this KV again), or the next item's.
    const bool last = j0 + rows == T;
    const PagedKv* after = last ? next : &kv;
    const int after_ctx = last ? next_ctx : n_ctx0 + j0 + rows;
    if (!avx512 || rows == 1) {
      attention_decode(q + size_t(j0) * q_stride, nq, dk, dv, scale, kv, n_ctx0 + j0, out + size_t(j0) * o_stride, scratch,
                       after, after_ctx);
      ++j0;
      continue;
    }
    const KvAhead ahead = after && after_ctx > 0 ? KvAhead{after, 0, std::min(after_ctx, kAttnPartition)} : KvAhead{};
    decode_rows_together(q + size_t(j0) * q_stride, q_stride, rows, nq, dk, dv, scale, kv, n_ctx0 + j0,
                         out + size_t(j0) * o_stride, o_stride, scratch, ahead);
    j0 += rows;
  }
}

namespace {
constexpr int kKeyBlock = 64;
constexpr int kMaxTileRows = 64;
}  // namespace

int attention_prefill_tile(int nq) { return std::max(1, kMaxTileRows / nq); }

size_t attention_prefill_scratch_floats(int nq, int dk, int dv) {
  (void)nq;
  // + a key row and a block of value rows converted to f32 (caches of other types)
  const size_t plain = size_t(dk) * kKeyBlock + size_t(kMaxTileRows) * (kKeyBlock + size_t(dv) + 2) + size_t(dk) +
                       size_t(kKeyBlock) * size_t(dv) + 64;
  // The AVX-512 kernel: transposed queries, scores, outputs, 3 values per row, a block of keys
  // and of values as f32.
  const size_t avx512 = size_t(dk) * kMaxTileRows + size_t(kKeyBlock) * kMaxTileRows + size_t(kMaxTileRows) * size_t(dv) +
                        3 * size_t(kMaxTileRows) + size_t(kKeyBlock) * (size_t(dk) + size_t(dv)) + 64;
  return std::max(plain, avx512);
}

DS_MULTIVERSION void attention_prefill(const float* q, size_t q_stride, int t0, int t1, int start, int nq,
                                       int dk, int dv, float scale, const PagedKv& kv, float* out,
                                       size_t o_stride, float* scratch) {
  static const bool avx512 = active_isa() == Isa::Avx512;
  if (avx512 && nq <= kMaxTileRows)
    return detail::attention_prefill_avx512(q, q_stride, t0, t1, start, nq, dk, dv, scale, kv, out, o_stride, scratch);
  const int tile = attention_prefill_tile(nq);
  float* KT = scratch;                                   // [dk][64] keys of one block, transposed
  float* S = KT + size_t(dk) * kKeyBlock;                // [rows][64] scores, then probabilities
  float* O = S + size_t(kMaxTileRows) * kKeyBlock;       // [rows][dv] unnormalised outputs
  float* M = O + size_t(kMaxTileRows) * size_t(dv);      // [rows] running max
  float* Lsum = M + kMaxTileRows;                        // [rows] running sum
  float* KR = Lsum + kMaxTileRows;                       // [dk] one key row as f32
  float* VB = KR + dk;                                   // [64][dv] the block's values as f32
  const bool f32 = kv.dtype == KvDtype::F32;
  for (int q0 = t0; q0 < t1; q0 += tile) {
    const int nt = std::min(tile, t1 - q0);
    const int rows = nt * nq;  // row r: token q0 + r / nq, head r % nq
    for (int r = 0; r < rows; ++r) {
      M[r] = -INFINITY;
      Lsum[r] = 0.f;
      for (int d = 0; d < dv; ++d) O[size_t(r) * size_t(dv) + size_t(d)] = 0.f;
    }
    const int last_pos = start + q0 + nt - 1;  // the tile's last query sees keys [0, last_pos]
    for (int k0 = 0; k0 <= last_pos; k0 += kKeyBlock) {
      const int nk = std::min(kKeyBlock, last_pos + 1 - k0);
      for (int j = 0; j < nk; ++j) {
        const float* kr = KR;
        if (f32) kr = reinterpret_cast<const float*>(kv.key(k0 + j));
        else kv.key_f32(k0 + j, dk, KR);
        for (int d = 0; d < dk; ++d) KT[size_t(d) * kKeyBlock + size_t(j)] = kr[d];
      }
      for (int j = nk; j < kKeyBlock; ++j)
        for (int d = 0; d < dk; ++d) KT[size_t(d) * kKeyBlock + size_t(j)] = 0.f;
      for (int r = 0; r < rows; ++r) {
        const int qpos = start + q0 + r / nq;
        const float* qr = q + size_t(q0 + r / nq) * q_stride + size_t(r % nq) * size_t(dk);
        float acc[kKeyBlock] = {};
        for (int d = 0; d < dk; ++d) {
          const float qd = qr[d];
          const float* kt = KT + size_t(d) * kKeyBlock;
          for (int j = 0; j < kKeyBlock; ++j) acc[j] += qd * kt[j];
        }
        const int visible = std::min(nk, qpos - k0 + 1);  // causal: keys after the query are masked
        float* sr = S + size_t(r) * kKeyBlock;
        float mx = M[r];
        for (int j = 0; j < visible; ++j) {
          sr[j] = acc[j] * scale;
          mx = std::max(mx, sr[j]);
        }
        if (visible <= 0) {
          for (int j = 0; j < kKeyBlock; ++j) sr[j] = 0.f;
          continue;
        }
        const float corr = exp_fast(M[r] - mx);
        M[r] = mx;
        float sum = 0.f;
        for (int j = 0; j < visible; ++j) {
          sr[j] = exp_fast(sr[j] - mx);
          sum += sr[j];
        }
        for (int j = visible; j < kKeyBlock; ++j) sr[j] = 0.f;
        Lsum[r] = Lsum[r] * corr + sum;
        float* orow = O + size_t(r) * size_t(dv);
        for (int d = 0; d < dv; ++d) orow[d] *= corr;
      }
      // O += P V with each output row held in registers across the block's keys (64 values of
      // the row at a time); the block's values stay in L1 across rows.
      const float* vrows[kKeyBlock];
      for (int j = 0; j < nk; ++j) {
        if (f32) {
          vrows[j] = reinterpret_cast<const float*>(kv.value(k0 + j));
        } else {
          float* vb = VB + size_t(j) * size_t(dv);
          kv.value_f32(k0 + j, dv, vb);
          vrows[j] = vb;
        }
      }
      for (int r = 0; r < rows; ++r) {
        const float* pr = S + size_t(r) * kKeyBlock;
        float* orow = O + size_t(r) * size_t(dv);
        for (int d0 = 0; d0 < dv; d0 += 64) {
          const int dn = std::min(64, dv - d0);
          float acc[64];
          for (int d = 0; d < 64; ++d) acc[d] = d < dn ? orow[d0 + d] : 0.f;
          for (int j = 0; j < nk; ++j) {
            const float p = pr[j];
            const float* vr = vrows[j] + d0;
            if (dn == 64) {
              for (int d = 0; d < 64; ++d) acc[d] += p * vr[d];
            } else {
              for (int d = 0; d < dn; ++d) acc[d] += p * vr[d];
            }
          }
          for (int d = 0; d < dn; ++d) orow[d0 + d] = acc[d];
        }
      }
    }
    for (int r = 0; r < rows; ++r) {
      const float inv = 1.f / Lsum[r];
      float* dst = out + size_t(q0 + r / nq) * o_stride + size_t(r % nq) * size_t(dv);
      const float* orow = O + size_t(r) * size_t(dv);
      for (int d = 0; d < dv; ++d) dst[d] = orow[d] * inv;
    }
  }
}

void attention_reference(const float* q, int nq, int dk, int dv, float scale, const PagedKv& kv,
                         int n_ctx, float* out) {
  std::vector<double> s(static_cast<size_t>(n_ctx));
  std::vector<float> keys(size_t(n_ctx) * size_t(dk)), values(size_t(n_ctx) * size_t(dv));
  for (int t = 0; t < n_ctx; ++t) {
    kv.key_f32(t, dk, keys.data() + size_t(t) * size_t(dk));
    kv.value_f32(t, dv, values.data() + size_t(t) * size_t(dv));
  }
  for (int h = 0; h < nq; ++h) {
    double m = -INFINITY;
    for (int t = 0; t < n_ctx; ++t) {
      double acc = 0;
      for (int d = 0; d < dk; ++d) acc += double(q[size_t(h) * size_t(dk) + size_t(d)]) * keys[size_t(t) * size_t(dk) + size_t(d)];
      s[size_t(t)] = acc * scale;
      m = std::max(m, s[size_t(t)]);
    }
    double sum = 0;
    for (int t = 0; t < n_ctx; ++t) sum += std::exp(s[size_t(t)] - m);
    for (int d = 0; d < dv; ++d) {
      double acc = 0;
      for (int t = 0; t < n_ctx; ++t) acc += std::exp(s[size_t(t)] - m) / sum * values[size_t(t) * size_t(dv) + size_t(d)];
      out[size_t(h) * size_t(dv) + size_t(d)] = float(acc);
    }
  }
}

}  // namespace ds
