// ISA-specific inner loops of decode attention, picked at run time by attention_partition, and
// the AVX-512 prefill kernel, picked by attention_prefill.
#pragma once
#include "kernels/attention.h"

namespace ds::detail {

// off[t] = kv.offset(t0 + t) for t in [0, n), walking the block table a block at a time: an
// offset per row costs an integer division by the block size (tens of cycles), which made the
// address arithmetic most of a decode row's attention.
void attention_row_offsets(const PagedKv& kv, int t0, int n, size_t* off);
// scores[h * kAttnPartition + t] = scale * q_h . key(t0 + t), for t in [0, n); off from
// attention_row_offsets.
// ahead: rows fetched into L2 on the way (KvAhead), spread over the pass.
void attention_scores_avx512(const float* q, int nq, int dk, float scale, const PagedKv& kv, const size_t* off, int n,
                             float* scores, const KvAhead& ahead = {});
// Per head h: lse[h] = log sum_t exp(scores[h][t]), and scores[h][t] becomes the normalised
// probability, for t in [0, n). 16 scores at a time: the scalar loop's running max and sum are
// serial reductions the compiler may not reorder, and one exp per score made the softmax most of
// a decode step's attention.
void attention_softmax_avx512(float* scores, int nq, int n, float* lse);
// o_part[h * dv + d] = sum_t probs[h * kAttnPartition + t] * value(t0 + t)[d] (overwrites).
void attention_pv_avx512(const float* probs, int nq, int dv, const PagedKv& kv, const size_t* off, int n, float* o_part);

// attention_prefill for nq <= 64 (attention_prefill_avx512.cpp says how); scratch as
// attention_prefill_scratch_floats gives it.
void attention_prefill_avx512(const float* q, size_t q_stride, int t0, int t1, int start, int nq, int dk, int dv,
                              float scale, const PagedKv& kv, float* out, size_t o_stride, float* scratch);

}  // namespace ds::detail
