#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/fast_math.h"
#include "kernels/simd.h"

namespace ds {

DS_MULTIVERSION void attention_partition(const float* q, int nq, int dk, int dv, float scale,
                                         const PagedKv& kv, int t0, int t1, float* o_part,
                                         float* lse, float* scores) {
  const int n = t1 - t0;
  // Scores: each key row is loaded once and dotted with every head's query.
  for (int t = 0; t < n; ++t) {
    const float* kr = kv.key(t0 + t);
    for (int h = 0; h < nq; ++h) {
      const float* qh = q + size_t(h) * size_t(dk);
      float s = 0.f;
      for (int d = 0; d < dk; ++d) s += qh[d] * kr[d];
      scores[size_t(h) * kAttnPartition + size_t(t)] = s * scale;
    }
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
    float* oh = o_part + size_t(h) * size_t(dv);
    for (int d = 0; d < dv; ++d) oh[d] = 0.f;
  }
  for (int t = 0; t < n; ++t) {
    const float* vr = kv.value(t0 + t);
    for (int h = 0; h < nq; ++h) {
      const float p = scores[size_t(h) * kAttnPartition + size_t(t)];
      float* oh = o_part + size_t(h) * size_t(dv);
      for (int d = 0; d < dv; ++d) oh[d] += p * vr[d];
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
                      int n_ctx, float* out, float* scratch) {
  const int R = (n_ctx + kAttnPartition - 1) / kAttnPartition;
  float* scores = scratch;
  if (R == 1) {  // one partition is already normalised; its lse is not needed
    float lse[256];
    attention_partition(q, nq, dk, dv, scale, kv, 0, n_ctx, out, lse, scores);
    return;
  }
  float* parts = scores + size_t(nq) * kAttnPartition;
  float* lses = parts + size_t(R) * size_t(nq) * size_t(dv);
  for (int r = 0; r < R; ++r) {
    const int t0 = r * kAttnPartition, t1 = std::min(n_ctx, t0 + kAttnPartition);
    attention_partition(q, nq, dk, dv, scale, kv, t0, t1, parts + size_t(r) * size_t(nq) * size_t(dv),
                        lses + size_t(r) * size_t(nq), scores);
  }
  merge_partitions(parts, lses, R, nq, dv, out, nullptr);
}

void attention_reference(const float* q, int nq, int dk, int dv, float scale, const PagedKv& kv,
                         int n_ctx, float* out) {
  std::vector<double> s(static_cast<size_t>(n_ctx));
  for (int h = 0; h < nq; ++h) {
    double m = -INFINITY;
    for (int t = 0; t < n_ctx; ++t) {
      double acc = 0;
      for (int d = 0; d < dk; ++d) acc += double(q[size_t(h) * size_t(dk) + size_t(d)]) * kv.key(t)[d];
      s[size_t(t)] = acc * scale;
      m = std::max(m, s[size_t(t)]);
    }
    double sum = 0;
    for (int t = 0; t < n_ctx; ++t) sum += std::exp(s[size_t(t)] - m);
    for (int d = 0; d < dv; ++d) {
      double acc = 0;
      for (int t = 0; t < n_ctx; ++t) acc += std::exp(s[size_t(t)] - m) / sum * kv.value(t)[d];
      out[size_t(h) * size_t(dv) + size_t(d)] = float(acc);
    }
  }
}

}  // namespace ds
