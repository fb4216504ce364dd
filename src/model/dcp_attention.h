// Decode context parallel attention (docs/ranks.md): this rank holds the KV rows of every
// dcp-th token; each query row attends over them as a decode row does, giving a partial output
// and its log-sum-exp per head; the group exchanges them and each rank merges its own heads'
// partials exactly (kernels/attention.h, merge_partitions: LSE = log sum_r exp(lse_r), o = sum_r exp(lse_r - LSE) o_r).
#pragma once
#include <cstddef>
#include <functional>

#include "kernels/attention.h"
#include "model/shard.h"
#include "model/step_context.h"

namespace ds {

// Arena floats dcp_attention takes for n rows.
size_t dcp_attention_temp_floats(int n, int nq_own, int dk, int dv, const AttentionShard& dcp);

// q: row t's own query heads at q + t * q_stride + h * dk (h < nq_own); out likewise with
// o_stride and dv. The heads attended are the group's (all ranks' own heads in rank order when
// heads_split, else the own ones), kv_heads of them sharing keys in equal consecutive runs;
// kv_of(seq, kv_head) views this rank's rows (local positions, block_size / dcp per block).
void dcp_attention(const StepContext& ctx, const AttentionShard& dcp, const float* q, size_t q_stride, int nq_own,
                   int kv_heads, int dk, int dv, float scale, const std::function<PagedKv(int, int)>& kv_of, float* out,
                   size_t o_stride);

}  // namespace ds
