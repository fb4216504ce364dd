// Attention over a paged KV cache for one query token, with the context split into partitions
// whose partial outputs merge exactly by log-sum-exp (docs/model-format.md, Numerics). The same merge
// serves partitions on one thread, threads, and decode-context-parallel ranks.
//
// MLA decode runs through the same kernel: with kv_b_proj absorbed into the query, every head
// attends to the shared latent row [c | k_pe] as its key and to c as its value (MQA).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/kv_dtype.h"

namespace ds {

// One head's view of a paged KV cache. Rows are in `dtype` (kernels/kv_format.h); fp8 rows carry
// an f32 scale each, found at the same strides from k_scale / v_scale. Strides are in bytes.
struct PagedKv {
  const std::byte* k = nullptr;        // key of token t in block b: k + b * block_stride + t * token_stride
  const std::byte* v = nullptr;        // value, same strides (may alias k: MLA's latent row)
  const std::byte* k_scale = nullptr;  // fp8 only
  const std::byte* v_scale = nullptr;  // fp8 only
  size_t block_stride = 0;
  size_t token_stride = 0;
  int block_size = 64;
  const int32_t* block_table = nullptr;
  KvDtype dtype = KvDtype::F32;
  // Decode may form q.k and p.v from bf16 operands (vdpbf16ps): the query and the probabilities
  // rounded to bf16, as --activation-dtype bf16 rounds what meets every bf16 weight. bf16 caches
  // on the AVX-512 kernels only (elsewhere products stay f32); prefill is unaffected. Each row's
  // arithmetic still depends on its own context alone, so batch invariance holds.
  bool bf16_products = false;

  // An f32 cache with strides counted in floats (tests, benchmarks).
  static PagedKv f32(const float* k, const float* v, size_t block_stride_floats, size_t token_stride_floats,
                     int block_size, const int32_t* block_table) {
    PagedKv kv;
    kv.k = reinterpret_cast<const std::byte*>(k);
    kv.v = reinterpret_cast<const std::byte*>(v);
    kv.block_stride = block_stride_floats * sizeof(float);
    kv.token_stride = token_stride_floats * sizeof(float);
    kv.block_size = block_size;
    kv.block_table = block_table;
    return kv;
  }

  size_t offset(int pos) const {
    return size_t(block_table[pos / block_size]) * block_stride + size_t(pos % block_size) * token_stride;
  }
  const std::byte* key(int pos) const { return k + offset(pos); }
  const std::byte* value(int pos) const { return v + offset(pos); }
  float key_scale(int pos) const { return scale_at(k_scale, pos); }
  float value_scale(int pos) const { return scale_at(v_scale, pos); }
  // Rows of position pos as f32 (n values).
  void key_f32(int pos, int n, float* out) const;
  void value_f32(int pos, int n, float* out) const;

 private:
  float scale_at(const std::byte* base, int pos) const {
    if (!base) return 1.f;
    float s;
    std::memcpy(&s, base + offset(pos), sizeof s);
    return s;
  }
};

// Tokens per partition: fixed, so a sequence's result never depends on what it is batched with.
constexpr int kAttnPartition = 256;

// Rows [t0, t0 + n) of another view (n <= kAttnPartition), requested while a partition
// computes: the next partition, or the first of the item a thread takes next. Decode attention
// runs out of cache at concurrency; a partition's own prefetches start when it does, so its
// arithmetic and its read took turns. Fetching the next one during this one keeps memory busy
// the whole time (the AVX-512 path; the others ignore it). Never changes a result.
struct KvAhead {
  const PagedKv* kv = nullptr;  // nullptr: nothing to fetch
  int t0 = 0, n = 0;
};

// One partition [t0, t1) for nq heads sharing a KV head: o_part[h] (normalised within the
// partition) and lse[h] = log sum_t exp(score). scores: nq * kAttnPartition floats of scratch.
void attention_partition(const float* q, int nq, int dk, int dv, float scale, const PagedKv& kv,
                         int t0, int t1, float* o_part, float* lse, float* scores, const KvAhead& ahead = {});

// LSE = log sum_r exp(lse_r); o = sum_r exp(lse_r - LSE) o_r. parts: [R][nq][dv], lses: [R][nq].
void merge_partitions(const float* parts, const float* lses, int R, int nq, int dv, float* out,
                      float* out_lse);

// Whole context [0, n_ctx) by partitions and merge. scratch: attention_scratch_floats(nq, dv, n_ctx).
size_t attention_scratch_floats(int nq, int dv, int n_ctx);
// next (optional): the KV and context of the item this thread computes next, whose first
// partition is fetched during this item's last (KvAhead).
// out_lse (optional): each head's log-sum-exp of its scores over the context, for a merge with
// other parts of the same context (decode context parallel ranks).
void attention_decode(const float* q, int nq, int dk, int dv, float scale, const PagedKv& kv,
                      int n_ctx, float* out, float* scratch, const PagedKv* next = nullptr, int next_ctx = 0,
                      float* out_lse = nullptr);

// Decode attention for T consecutive query rows of one sequence (a speculative chunk being
// verified): row j (q + j * q_stride, nq heads dk apart) sees the context [0, n_ctx0 + j) and
// writes out + j * o_stride (nq heads dv apart). Each row's result is bit-identical to
// attention_decode's for that row alone (the same partitions, score arithmetic, softmax and value
// sums), but a partition's key rows are scored once for every row's heads instead of once per
// row. As many rows go together as scratch_floats holds (attention_rows_scratch_floats); with
// room for one, or off AVX-512, the rows run one by one through attention_decode.
size_t attention_rows_scratch_floats(int rows, int nq, int dk, int dv, int n_ctx_last);
// next / next_ctx: as attention_decode's.
void attention_decode_rows(const float* q, size_t q_stride, int T, int nq, int dk, int dv, float scale,
                           const PagedKv& kv, int n_ctx0, float* out, size_t o_stride, float* scratch,
                           size_t scratch_floats, const PagedKv* next = nullptr, int next_ctx = 0);

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
