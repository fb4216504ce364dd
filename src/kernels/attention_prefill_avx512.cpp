// AVX-512 causal prefill attention (attention.h, attention_prefill): a tile of up to 64 query
// rows (tokens x heads of one KV head) against 64-key blocks, with the rows in vector lanes.
//   scores  S[j][r] = q_r . k_j: the tile's queries transposed once (QT[d][r]), each key's d-th
//           value broadcast; 4 keys x 4 row vectors of accumulators, one FMA chain over d per
//           score, d in order (as the plain kernel's chain).
//   softmax online per lane (row): max, exp and sum run across the block's keys one key at a
//           time, 16 rows per instruction; each row's sum adds its keys in order.
//   P V     O[r][d] += sum_j p[j][r] v_j[d]: 4 rows x 64 values in registers, keys in order.
// A row's arithmetic does not depend on the other rows of its tile (masked lanes add exact
// zeros, rows without a visible key in a block are left as they are), so a query's output is
// the same whatever chunk or tile it is computed in: the prefix cache's bit-identity rests on it.
// The scalar path (attention.cpp) has the plain loops; it is not bit-identical to this one (its
// exp runs through the compiler's contractions and its softmax sums keys of a row in a vector).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/attention_isa.h"
#include "kernels/vec_math_avx512.h"

namespace ds::detail {

namespace {

constexpr int kKeys = 64;   // keys per block
constexpr int kRows = 64;   // query rows per tile at most (4 vectors of 16)

// S[j][16 v + lane] = scale * q_row . k_j for keys j0 .. j0 + NK - 1 and RV row vectors.
template <int NK, int RV>
[[gnu::always_inline]] inline void score_keys(const float* QT, const float* const* keys, int j0, int dk, float scale,
                                              float* S) {
  __m512 acc[NK][RV];
  for (int k = 0; k < NK; ++k)
    for (int v = 0; v < RV; ++v) acc[k][v] = _mm512_setzero_ps();
  for (int d = 0; d < dk; ++d) {
    __m512 qv[RV];
    for (int v = 0; v < RV; ++v) qv[v] = _mm512_loadu_ps(QT + size_t(d) * kRows + 16 * v);
    for (int k = 0; k < NK; ++k) {
      const __m512 kb = _mm512_set1_ps(keys[j0 + k][d]);
      for (int v = 0; v < RV; ++v) acc[k][v] = _mm512_fmadd_ps(qv[v], kb, acc[k][v]);
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
  for (int k = 0; k < NK; ++k)
    for (int v = 0; v < RV; ++v) _mm512_storeu_ps(S + size_t(j0 + k) * kRows + 16 * v, _mm512_mul_ps(acc[k][v], sc));
}

template <int RV>
void score_block(const float* QT, const float* const* keys, int nk, int dk, float scale, float* S) {
  int j = 0;
  for (; j + 4 <= nk; j += 4) score_keys<4, RV>(QT, keys, j, dk, scale, S);
  for (; j < nk; ++j) score_keys<1, RV>(QT, keys, j, dk, scale, S);
}

// O[r][d] += sum_{j < nk} P[j][r] * values[j][d] for R rows from r0, d in [0, dv).
template <int R>
[[gnu::always_inline]] inline void pv_rows(const float* P, const float* const* values, int nk, int dv, int r0, float* O) {
  for (int d0 = 0; d0 < dv; d0 += 64) {
    __mmask16 m[4];
    for (int c = 0; c < 4; ++c) m[c] = tail_mask(dv - d0 - 16 * c);
    __m512 acc[R][4];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_maskz_loadu_ps(m[c], O + size_t(r0 + r) * size_t(dv) + size_t(d0 + 16 * c));
    for (int j = 0; j < nk; ++j) {
      __m512 vv[4];
      for (int c = 0; c < 4; ++c) vv[c] = _mm512_maskz_loadu_ps(m[c], values[j] + d0 + 16 * c);
      for (int r = 0; r < R; ++r) {
        const __m512 p = _mm512_set1_ps(P[size_t(j) * kRows + size_t(r0 + r)]);
        for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_fmadd_ps(p, vv[c], acc[r][c]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) _mm512_mask_storeu_ps(O + size_t(r0 + r) * size_t(dv) + size_t(d0 + 16 * c), m[c], acc[r][c]);
  }
}

}  // namespace

void attention_prefill_avx512(const float* q, size_t q_stride, int t0, int t1, int start, int nq, int dk, int dv,
                              float scale, const PagedKv& kv, float* out, size_t o_stride, float* scratch) {
  const int tile = std::max(1, kRows / nq);
  float* QT = scratch;                                 // [dk][64] the tile's queries, transposed
  float* S = QT + size_t(dk) * kRows;                  // [64 keys][64 rows] scores, then probabilities
  float* O = S + size_t(kKeys) * kRows;                // [rows][dv] unnormalised outputs
  float* M = O + size_t(kRows) * size_t(dv);           // [64] running max per row
  float* L = M + kRows;                                // [64] running sum per row
  float* C = L + kRows;                                // [64] this block's correction per row
  float* KB = C + kRows;                               // [64][dk] the block's keys as f32 (other dtypes)
  float* VB = KB + size_t(kKeys) * size_t(dk);         // [64][dv] its values as f32
  const bool f32 = kv.dtype == KvDtype::F32;
  const float* keys[kKeys];
  const float* values[kKeys];
  for (int q0 = t0; q0 < t1; q0 += tile) {
    const int nt = std::min(tile, t1 - q0);
    const int rows = nt * nq;  // row r: token q0 + r / nq, head r % nq
    const int RV = (rows + 15) / 16;
    // Lanes past `rows` hold zero queries and positions that see every key: finite, unused.
    for (int d = 0; d < dk; ++d)
      for (int r = 0; r < RV * 16; ++r)
        QT[size_t(d) * kRows + size_t(r)] =
            r < rows ? q[size_t(q0 + r / nq) * q_stride + size_t(r % nq) * size_t(dk) + size_t(d)] : 0.f;
    alignas(64) int32_t qpos[kRows];
    for (int r = 0; r < RV * 16; ++r) qpos[r] = r < rows ? start + q0 + r / nq : INT32_MAX;
    for (int r = 0; r < rows; ++r) {
      M[r] = -INFINITY;
      L[r] = 0.f;
    }
    std::fill(O, O + size_t(rows) * size_t(dv), 0.f);
    const int last_pos = start + q0 + nt - 1;  // the tile's last query sees keys [0, last_pos]
    for (int k0 = 0; k0 <= last_pos; k0 += kKeys) {
      const int nk = std::min(kKeys, last_pos + 1 - k0);
      for (int j = 0; j < nk; ++j) {
        if (f32) {
          keys[j] = reinterpret_cast<const float*>(kv.key(k0 + j));
          values[j] = reinterpret_cast<const float*>(kv.value(k0 + j));
        } else {
          float* kb = KB + size_t(j) * size_t(dk);
          float* vb = VB + size_t(j) * size_t(dv);
          kv.key_f32(k0 + j, dk, kb);
          kv.value_f32(k0 + j, dv, vb);
          keys[j] = kb;
          values[j] = vb;
        }
      }
      switch (RV) {
        case 1: score_block<1>(QT, keys, nk, dk, scale, S); break;
        case 2: score_block<2>(QT, keys, nk, dk, scale, S); break;
        case 3: score_block<3>(QT, keys, nk, dk, scale, S); break;
        default: score_block<4>(QT, keys, nk, dk, scale, S); break;
      }
      // Online softmax, 16 rows at a time. Key j is visible to a row at qpos >= k0 + j.
      for (int v = 0; v < RV; ++v) {
        const __m512i pos = _mm512_load_si512(qpos + 16 * v);
        const __mmask16 live = _mm512_cmpge_epi32_mask(pos, _mm512_set1_epi32(k0)) & tail_mask(rows - 16 * v);
        const __m512 m_old = _mm512_maskz_loadu_ps(tail_mask(rows - 16 * v), M + 16 * v);
        __m512 mx = m_old;
        for (int j = 0; j < nk; ++j) {
          const __mmask16 vis = _mm512_cmpge_epi32_mask(pos, _mm512_set1_epi32(k0 + j)) & live;
          mx = _mm512_mask_max_ps(mx, vis, mx, _mm512_loadu_ps(S + size_t(j) * kRows + 16 * v));
        }
        // Rows with no visible key in this block keep their max, sum and output (correction 1).
        const __m512 corr = _mm512_mask_blend_ps(live, _mm512_set1_ps(1.f), exp16(_mm512_sub_ps(m_old, mx)));
        __m512 sum = _mm512_setzero_ps();
        for (int j = 0; j < nk; ++j) {
          const __mmask16 vis = _mm512_cmpge_epi32_mask(pos, _mm512_set1_epi32(k0 + j)) & live;
          float* sj = S + size_t(j) * kRows + 16 * v;
          const __m512 p = _mm512_maskz_mov_ps(vis, exp16(_mm512_sub_ps(_mm512_loadu_ps(sj), mx)));
          _mm512_storeu_ps(sj, p);
          sum = _mm512_add_ps(sum, p);
        }
        const __mmask16 in = tail_mask(rows - 16 * v);
        _mm512_mask_storeu_ps(M + 16 * v, in & live, mx);
        _mm512_mask_storeu_ps(L + 16 * v, in, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(in, L + 16 * v), corr, sum));
        _mm512_mask_storeu_ps(C + 16 * v, in, corr);
      }
      for (int r = 0; r < rows; ++r) {
        if (C[r] == 1.f) continue;
        const __m512 c = _mm512_set1_ps(C[r]);
        float* orow = O + size_t(r) * size_t(dv);
        for (int d = 0; d < dv; d += 16) {
          const __mmask16 m = tail_mask(dv - d);
          _mm512_mask_storeu_ps(orow + d, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, orow + d), c));
        }
      }
      int r = 0;
      for (; r + 4 <= rows; r += 4) pv_rows<4>(S, values, nk, dv, r, O);
      for (; r < rows; ++r) pv_rows<1>(S, values, nk, dv, r, O);
    }
    for (int r = 0; r < rows; ++r) {
      const __m512 inv = _mm512_set1_ps(1.f / L[r]);
      float* dst = out + size_t(q0 + r / nq) * o_stride + size_t(r % nq) * size_t(dv);
      const float* orow = O + size_t(r) * size_t(dv);
      for (int d = 0; d < dv; d += 16) {
        const __mmask16 m = tail_mask(dv - d);
        _mm512_mask_storeu_ps(dst + d, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, orow + d), inv));
      }
    }
  }
}

}  // namespace ds::detail

#pragma GCC diagnostic pop
