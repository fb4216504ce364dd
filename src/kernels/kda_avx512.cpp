// AVX-512 form of the KDA recurrence (kernels/kda.h) for a value width dv = 16 * NV, NV <= 16:
// a state row is NV vectors, and the column sums S^T k (pass 1) and S^T q (pass 2) stay in NV
// registers across the dk rows. The plain kda_recurrent_plain left to the compiler ran at about
// 1.3 us per 64 x 64 head and token (BM_KdaStep), most of it 64 scalar expf calls and a loop
// the vectoriser split into 256-bit pieces with run-time tails.
//
// Per element the arithmetic is the plain form's: row *= e, u += k_i row (one FMA), then
// row += k_i u', o += q_i row (FMAs), each column's sum over the rows in row order. Only the
// decay exp(g) differs: exp16 (vec_math_avx512.h), within a couple of ulp of expf.
// GCC 12 warns inside its own AVX-512 headers where masked builtins are inlined (their
// _mm512_undefined_* operands, GCC PR 105593): the warning is about the header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "kernels/kda.h"
#include "kernels/vec_math_avx512.h"

namespace ds::detail {

namespace {

template <int NV>
void recurrent_nv(float* S, int dk, int T, const KdaHeadIo& io) {
  constexpr int dv = 16 * NV;
  alignas(64) float e[512];  // dk <= 512 is checked at config load
  for (int t = 0; t < T; ++t) {
    const KdaHeadIo at = io.advanced(t);
    const float *q = at.q, *k = at.k, *v = at.v, *g = at.g;
    const float beta = at.beta[0];
    float* o = at.o;
    for (int i = 0; i < dk; i += 16) {
      const __mmask16 m = tail_mask(dk - i);
      _mm512_mask_storeu_ps(e + i, m, exp16(_mm512_maskz_loadu_ps(m, g + i)));
    }
    // Pass 1: decay the state and accumulate S^T k.
    __m512 u[NV];
    for (int c = 0; c < NV; ++c) u[c] = _mm512_setzero_ps();
    for (int i = 0; i < dk; ++i) {
      float* row = S + size_t(i) * dv;
      const __m512 ei = _mm512_set1_ps(e[i]), ki = _mm512_set1_ps(k[i]);
      for (int c = 0; c < NV; ++c) {
        const __m512 r = _mm512_mul_ps(_mm512_loadu_ps(row + 16 * c), ei);
        _mm512_storeu_ps(row + 16 * c, r);
        u[c] = _mm512_fmadd_ps(ki, r, u[c]);
      }
    }
    const __m512 b = _mm512_set1_ps(beta);
    for (int c = 0; c < NV; ++c) u[c] = _mm512_mul_ps(b, _mm512_sub_ps(_mm512_loadu_ps(v + 16 * c), u[c]));
    // Pass 2: rank-one update and the output S^T q.
    __m512 acc[NV];
    for (int c = 0; c < NV; ++c) acc[c] = _mm512_setzero_ps();
    for (int i = 0; i < dk; ++i) {
      float* row = S + size_t(i) * dv;
      const __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i]);
      for (int c = 0; c < NV; ++c) {
        const __m512 r = _mm512_fmadd_ps(ki, u[c], _mm512_loadu_ps(row + 16 * c));
        _mm512_storeu_ps(row + 16 * c, r);
        acc[c] = _mm512_fmadd_ps(qi, r, acc[c]);
      }
    }
    for (int c = 0; c < NV; ++c) _mm512_storeu_ps(o + 16 * c, acc[c]);
  }
}

using RecurrentFn = void (*)(float*, int, int, const KdaHeadIo&);
constexpr RecurrentFn kRecurrent[17] = {nullptr,          recurrent_nv<1>,  recurrent_nv<2>,  recurrent_nv<3>,
                                        recurrent_nv<4>,  recurrent_nv<5>,  recurrent_nv<6>,  recurrent_nv<7>,
                                        recurrent_nv<8>,  recurrent_nv<9>,  recurrent_nv<10>, recurrent_nv<11>,
                                        recurrent_nv<12>, recurrent_nv<13>, recurrent_nv<14>, recurrent_nv<15>,
                                        recurrent_nv<16>};

}  // namespace

bool kda_recurrent_avx512(float* S, int dk, int dv, int T, const KdaHeadIo& io) {
  if (dv % 16 != 0 || dv > 256 || dk > 512) return false;
  kRecurrent[dv / 16](S, dk, T, io);
  return true;
}

}  // namespace ds::detail

#pragma GCC diagnostic pop
