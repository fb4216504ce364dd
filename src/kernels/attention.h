// Attention over a paged KV cache for one query token, with the context split into partitions
// whose partial outputs merge exactly by log-sum-exp (docs/model-format.md, Numerics). The same merge
// serves partitions on one thread, threads, and decode-context-parallel ranks.
//
// MLA decode runs through the same kernel: with kv_b_proj absorbed into the query, every head
// attends to the shared latent row [c | k_pe] as its key and to c as its value (MQA).
#pragma once
#include <cstddef>
#include <cstdint>

namespace ds {

struct PagedKv {
  const float* k = nullptr;   // key of token t in block b: k + b * block_stride + t * token_stride
  const float* v = nullptr;   // value, same strides (may alias k: MLA's latent row)
  size_t block_stride = 0;    // floats
  size_t token_stride = 0;    // floats
  int block_size = 64;
  const int32_t* block_table = nullptr;

  const float* key(int pos) const {
    return k + size_t(block_table[pos / block_size]) * block_stride + size_t(pos % block_size) * token_stride;
  }
  const float* value(int pos) const {
    return v + size_t(block_table[pos / block_size]) * block_stride + size_t(pos % block_size) * token_stride;
  }
};

// Tokens per partition: fixed, so a sequence's result never depends on what it is batched with.
constexpr int kAttnPartition = 256;

// One partition [t0, t1) for nq heads sharing a KV head: o_part[h] (normalised within the
// partition) and lse[h] = log sum_t exp(score). scores: nq * kAttnPartition floats of scratch.
void attention_partition(const float* q, int nq, int dk, int dv, float scale, const PagedKv& kv,
                         int t0, int t1, float* o_part, float* lse, float* scores);

// LSE = log sum_r exp(lse_r); o = sum_r exp(lse_r - LSE) o_r. parts: [R][nq][dv], lses: [R][nq].
void merge_partitions(const float* parts, const float* lses, int R, int nq, int dv, float* out,
                      float* out_lse);

// Whole context [0, n_ctx) by partitions and merge. scratch: attention_scratch_floats(nq, dv, n_ctx).
size_t attention_scratch_floats(int nq, int dv, int n_ctx);
void attention_decode(const float* q, int nq, int dk, int dv, float scale, const PagedKv& kv,
                      int n_ctx, float* out, float* scratch);

// Causal attention for a chunk of T consecutive query tokens of one sequence, at positions
// [start, start + T), over the context [0, start + T): the prefill path. Tiles of queries (all
// nq heads of a KV head together) meet 64-key blocks as two small matrix products with an
// online softmax, instead of one pass over the context per query.
// q: token t, head h at q + t * q_stride + h * dk; out: at out + t * o_stride + h * dv.
// Queries [t0, t1) of the chunk are computed (so callers can split a chunk across threads).
size_t attention_prefill_scratch_floats(int nq, int dk, int dv);
void attention_prefill(const float* q, size_t q_stride, int t0, int t1, int start, int nq, int dk, int dv,
                       float scale, const PagedKv& kv, float* out, size_t o_stride, float* scratch);
// Query tokens per tile for nq heads: the unit callers split work by.
int attention_prefill_tile(int nq);

// The reference: one softmax over the whole context in double precision.
void attention_reference(const float* q, int nq, int dk, int dv, float scale, const PagedKv& kv,
                         int n_ctx, float* out);

}  // namespace ds
