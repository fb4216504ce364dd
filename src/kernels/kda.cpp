#include "kernels/kda.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cpu_features.h"
#include "kernels/elementwise.h"
#include "kernels/fast_math.h"
#include "kernels/simd.h"

namespace ds {

DS_MULTIVERSION void kda_recurrent_plain(float* S, int dk, int dv, int T, const KdaHeadIo& io) {
  float u[512];  // dv <= 512 is checked at config load
  for (int t = 0; t < T; ++t) {
    const KdaHeadIo at = io.advanced(t);
    const float *q = at.q, *k = at.k, *v = at.v, *g = at.g;
    const float beta = at.beta[0];
    float* o = at.o;
    // Pass 1: decay the state and accumulate S^T k.
    for (int j = 0; j < dv; ++j) u[j] = 0.f;
    for (int i = 0; i < dk; ++i) {
      const float e = std::exp(g[i]);
      float* row = S + size_t(i) * size_t(dv);
      const float ki = k[i];
      for (int j = 0; j < dv; ++j) {
        row[j] *= e;
        u[j] += ki * row[j];
      }
    }
    for (int j = 0; j < dv; ++j) u[j] = beta * (v[j] - u[j]);
    // Pass 2: rank-one update and the output S^T q.
    for (int j = 0; j < dv; ++j) o[j] = 0.f;
    for (int i = 0; i < dk; ++i) {
      float* row = S + size_t(i) * size_t(dv);
      const float ki = k[i], qi = q[i];
      for (int j = 0; j < dv; ++j) {
        row[j] += ki * u[j];
        o[j] += qi * row[j];
      }
    }
  }
}

void kda_recurrent(float* S, int dk, int dv, int T, const KdaHeadIo& io) {
  static const bool avx512 = active_isa() == Isa::Avx512;
  if (avx512 && detail::kda_recurrent_avx512(S, dk, dv, T, io)) return;
  kda_recurrent_plain(S, dk, dv, T, io);
}

size_t kda_chunk_scratch_floats(int dk, int dv) {
  const size_t C = kKdaChunk;
  // G, expG*K (W source), W, U (V'), A, Aqk, expG_end, kdecay row
  return C * size_t(dk) * 3 + C * size_t(dv) + C * C * 2 + size_t(dk) * 2 + 64;
}

DS_MULTIVERSION static void chunk(float* S, int dk, int dv, int c, const KdaHeadIo& io, int t0,
                                  float* scratch) {
  const int C = kKdaChunk;
  float* G = scratch;                          // [C][dk] cumulative log decay
  float* W = G + size_t(C) * size_t(dk);       // [C][dk]
  float* EK = W + size_t(C) * size_t(dk);      // [C][dk] exp(G) * q  (reused per row)
  float* U = EK + size_t(C) * size_t(dk);      // [C][dv]  U, then V'
  float* A = U + size_t(C) * size_t(dv);       // [C][C]
  float* Aqk = A + size_t(C) * size_t(C);      // [C][C]
  float* e = Aqk + size_t(C) * size_t(C);      // [dk]
  float* tmp = e + dk;                         // [dk]

  auto q_at = [&](int i) { return io.q + size_t(t0 + i) * io.stride_qk; };
  auto k_at = [&](int i) { return io.k + size_t(t0 + i) * io.stride_qk; };
  auto v_at = [&](int i) { return io.v + size_t(t0 + i) * io.stride_v; };
  auto beta_at = [&](int i) { return io.beta[size_t(t0 + i) * io.stride_beta]; };

  for (int i = 0; i < c; ++i) {
    const float* g = io.g + size_t(t0 + i) * io.stride_g;
    float* Gi = G + size_t(i) * size_t(dk);
    const float* Gp = i ? G + size_t(i - 1) * size_t(dk) : nullptr;
    for (int d = 0; d < dk; ++d) Gi[d] = (Gp ? Gp[d] : 0.f) + g[d];
  }
  // A[i][j] = beta_i sum_d k_i k_j exp(G_i - G_j) (j < i); Aqk[i][j] = sum_d q_i k_j exp(G_i - G_j) (j <= i)
  for (int i = 0; i < c; ++i) {
    const float* Gi = G + size_t(i) * size_t(dk);
    const float* ki = k_at(i);
    const float* qi = q_at(i);
    for (int j = 0; j <= i; ++j) {
      const float* Gj = G + size_t(j) * size_t(dk);
      const float* kj = k_at(j);
      float a = 0.f, aq = 0.f;
      for (int d = 0; d < dk; ++d) {
        const float w = exp_fast(Gi[d] - Gj[d]) * kj[d];
        a += ki[d] * w;
        aq += qi[d] * w;
      }
      A[size_t(i) * C + size_t(j)] = beta_at(i) * a;
      Aqk[size_t(i) * C + size_t(j)] = aq;
    }
  }
  // Forward substitution with the unit lower-triangular (I + A):
  // W_i = beta_i exp(G_i) k_i - sum_{j<i} A_ij W_j;  U_i = beta_i v_i - sum_{j<i} A_ij U_j.
  for (int i = 0; i < c; ++i) {
    const float* Gi = G + size_t(i) * size_t(dk);
    const float* ki = k_at(i);
    const float* vi = v_at(i);
    const float b = beta_at(i);
    float* Wi = W + size_t(i) * size_t(dk);
    float* Ui = U + size_t(i) * size_t(dv);
    for (int d = 0; d < dk; ++d) Wi[d] = b * exp_fast(Gi[d]) * ki[d];
    for (int d = 0; d < dv; ++d) Ui[d] = b * vi[d];
    for (int j = 0; j < i; ++j) {
      const float a = A[size_t(i) * C + size_t(j)];
      const float* Wj = W + size_t(j) * size_t(dk);
      const float* Uj = U + size_t(j) * size_t(dv);
      for (int d = 0; d < dk; ++d) Wi[d] -= a * Wj[d];
      for (int d = 0; d < dv; ++d) Ui[d] -= a * Uj[d];
    }
  }
  // V' = U - W S, after the substitution (it needs every U_j before correction).
  for (int i = 0; i < c; ++i) {
    const float* Wi = W + size_t(i) * size_t(dk);
    float* Ui = U + size_t(i) * size_t(dv);
    for (int d = 0; d < dk; ++d) {
      const float w = Wi[d];
      const float* Sr = S + size_t(d) * size_t(dv);
      for (int j = 0; j < dv; ++j) Ui[j] -= w * Sr[j];
    }
  }
  // O_i = (q_i * exp(G_i)) S + sum_{j<=i} Aqk_ij V'_j
  for (int i = 0; i < c; ++i) {
    const float* Gi = G + size_t(i) * size_t(dk);
    const float* qi = q_at(i);
    float* o = io.o + size_t(t0 + i) * io.stride_o;
    for (int j = 0; j < dv; ++j) o[j] = 0.f;
    for (int d = 0; d < dk; ++d) {
      const float w = qi[d] * exp_fast(Gi[d]);
      const float* Sr = S + size_t(d) * size_t(dv);
      for (int j = 0; j < dv; ++j) o[j] += w * Sr[j];
    }
    for (int j = 0; j <= i; ++j) {
      const float a = Aqk[size_t(i) * C + size_t(j)];
      const float* Vj = U + size_t(j) * size_t(dv);
      for (int d = 0; d < dv; ++d) o[d] += a * Vj[d];
    }
  }
  // S = exp(G_last) S + sum_j (k_j * exp(G_last - G_j)) V'_j^T
  const float* Gl = G + size_t(c - 1) * size_t(dk);
  for (int d = 0; d < dk; ++d) e[d] = exp_fast(Gl[d]);
  for (int d = 0; d < dk; ++d) {
    float* Sr = S + size_t(d) * size_t(dv);
    for (int j = 0; j < dv; ++j) Sr[j] *= e[d];
  }
  for (int i = 0; i < c; ++i) {
    const float* Gi = G + size_t(i) * size_t(dk);
    const float* ki = k_at(i);
    for (int d = 0; d < dk; ++d) tmp[d] = ki[d] * exp_fast(Gl[d] - Gi[d]);
    const float* Vi = U + size_t(i) * size_t(dv);
    for (int d = 0; d < dk; ++d) {
      float* Sr = S + size_t(d) * size_t(dv);
      const float w = tmp[d];
      for (int j = 0; j < dv; ++j) Sr[j] += w * Vi[j];
    }
  }
}

void kda_chunked(float* S, int dk, int dv, int T, const KdaHeadIo& io, float* scratch) {
  for (int t0 = 0; t0 < T; t0 += kKdaChunk) {
    const int c = std::min(kKdaChunk, T - t0);
    chunk(S, dk, dv, c, io, t0, scratch);
  }
}

DS_MULTIVERSION void causal_conv_silu(float* x, size_t ldx, int T, int C, const float* w, int K,
                                      float* state) {
  // Channels in blocks of 64 with the last K-1 inputs of each channel in a small window: in place,
  // no temporary of size T, and T < K-1 needs no special case.
  constexpr int kBlock = 64;
  const int H = K - 1;
  float win[7][kBlock];
  for (int cb = 0; cb < C; cb += kBlock) {
    const int n = std::min(kBlock, C - cb);
    for (int h = 0; h < H; ++h)
      for (int j = 0; j < n; ++j) win[h][j] = state[size_t(h) * size_t(C) + size_t(cb + j)];
    for (int t = 0; t < T; ++t) {
      // Loops over the block's channels, each its own vector loop; a channel's sum still runs
      // newest input first, then the window oldest first.
      float* row = x + size_t(t) * ldx + size_t(cb);
      const float* wl = w + size_t(H) * size_t(C) + size_t(cb);
      float acc[kBlock];
      for (int j = 0; j < n; ++j) acc[j] = wl[j] * row[j];
      for (int h = 0; h < H; ++h) {
        const float* wh = w + size_t(h) * size_t(C) + size_t(cb);
        for (int j = 0; j < n; ++j) acc[j] += wh[j] * win[h][j];
      }
      for (int h = 0; h + 1 < H; ++h)
        for (int j = 0; j < n; ++j) win[h][j] = win[h + 1][j];
      if (H > 0)
        for (int j = 0; j < n; ++j) win[H - 1][j] = row[j];
      for (int j = 0; j < n; ++j) row[j] = silu_fast(acc[j]);
    }
    for (int h = 0; h < H; ++h)
      for (int j = 0; j < n; ++j) state[size_t(h) * size_t(C) + size_t(cb + j)] = win[h][j];
  }
}

DS_MULTIVERSION void kda_gate(float* g, const float* dt_bias, float a, int n) {
  for (int i = 0; i < n; ++i) {
    g[i] = a * softplus_fast(g[i] + dt_bias[i]);
  }
}

}  // namespace ds
