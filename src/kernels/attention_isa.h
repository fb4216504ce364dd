// ISA-specific inner loops of decode attention, picked at run time by attention_partition.
#pragma once
#include "kernels/attention.h"

namespace ds::detail {

// scores[h * kAttnPartition + t] = scale * q_h . key(t0 + t), for t in [0, n).
void attention_scores_avx512(const float* q, int nq, int dk, float scale, const PagedKv& kv, int t0, int n,
                             float* scores);
// o_part[h * dv + d] = sum_t probs[h * kAttnPartition + t] * value(t0 + t)[d] (overwrites).
void attention_pv_avx512(const float* probs, int nq, int dv, const PagedKv& kv, int t0, int n, float* o_part);

}  // namespace ds::detail
