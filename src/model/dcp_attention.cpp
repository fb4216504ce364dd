#include "model/dcp_attention.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/work_sharing.h"

namespace ds {

namespace {
int group_heads(int nq_own, const AttentionShard& dcp) { return dcp.heads_split ? nq_own * dcp.size : nq_own; }
}  // namespace

size_t dcp_attention_temp_floats(int n, int nq_own, int dk, int dv, const AttentionShard& dcp) {
  if (!dcp.active()) return 0;
  const size_t rows = size_t(n), g = size_t(group_heads(nq_own, dcp)), D = size_t(dcp.size);
  const size_t gathered_q = dcp.heads_split ? D * rows * size_t(nq_own) * size_t(dk) : 0;
  // own queries packed, the group's queries, each (row, head)'s partial + lse, and all ranks' partials
  return rows * size_t(nq_own) * size_t(dk) + gathered_q + rows * g * size_t(dk) + rows * g * size_t(dv + 1) +
         D * rows * g * size_t(dv + 1) + 8 * 64;
}

void dcp_attention(const StepContext& ctx, const AttentionShard& dcp, const float* q, size_t q_stride, int nq_own,
                   int kv_heads, int dk, int dv, float scale, const std::function<PagedKv(int, int)>& kv_of, float* out,
                   size_t o_stride) {
  const int N = ctx.num_tokens, G = group_heads(nq_own, dcp), D = dcp.size;
  DS_CHECK(kv_heads > 0 && G % kv_heads == 0, "dcp attention: query heads do not group evenly over KV heads");
  const int per_kv = G / kv_heads;
  Arena& arena = *ctx.arena;
  // 1. The group's queries, [N][G][dk].
  float* own = arena.alloc<float>(size_t(N) * size_t(nq_own) * size_t(dk));
  for (int t = 0; t < N; ++t)
    std::memcpy(own + size_t(t) * size_t(nq_own) * size_t(dk), q + size_t(t) * q_stride, size_t(nq_own) * size_t(dk) * sizeof(float));
  float* Qg = arena.alloc<float>(size_t(N) * size_t(G) * size_t(dk));
  if (dcp.heads_split) {
    const size_t part = size_t(N) * size_t(nq_own) * size_t(dk);
    float* all = arena.alloc<float>(part * size_t(D));
    dcp.group->allgather(own, part, all);
    for (int m = 0; m < D; ++m)
      for (int t = 0; t < N; ++t)
        std::memcpy(Qg + (size_t(t) * size_t(G) + size_t(m) * size_t(nq_own)) * size_t(dk),
                    all + size_t(m) * part + size_t(t) * size_t(nq_own) * size_t(dk), size_t(nq_own) * size_t(dk) * sizeof(float));
  } else {
    std::memcpy(Qg, own, size_t(N) * size_t(G) * size_t(dk) * sizeof(float));
  }
  // 2. Each row's partial over this rank's tokens of its context [0, pos]: [N][G][dv + 1], the
  // last float of a head being its lse (-inf where this rank holds none of the context yet).
  const size_t W = size_t(dv) + 1;
  float* P = arena.alloc<float>(size_t(N) * size_t(G) * W);
  parallel_items(ctx.pool, N * kv_heads, [&](int item, int thread) {
    const int t = item / kv_heads, g = item % kv_heads;
    const int n_local = dcp.local_count(ctx.token_pos[t] + 1);
    float* dst = P + (size_t(t) * size_t(G) + size_t(g) * size_t(per_kv)) * W;
    if (n_local == 0) {
      for (int h = 0; h < per_kv; ++h) {
        std::memset(dst + size_t(h) * W, 0, size_t(dv) * sizeof(float));
        dst[size_t(h) * W + size_t(dv)] = -std::numeric_limits<float>::infinity();
      }
      return;
    }
    std::vector<float>& scratch = (*ctx.thread_scratch)[size_t(thread)];
    // The partial lands at the scratch's end: [per_kv][dv] outputs, then per_kv lses.
    float* o = scratch.data() + scratch.size() - size_t(per_kv) * W;
    float* lse = o + size_t(per_kv) * size_t(dv);
    const PagedKv kv = kv_of(ctx.token_seq[t], g);
    attention_decode(Qg + (size_t(t) * size_t(G) + size_t(g) * size_t(per_kv)) * size_t(dk), per_kv, dk, dv, scale, kv,
                     n_local, o, scratch.data(), nullptr, 0, lse);
    for (int h = 0; h < per_kv; ++h) {
      std::memcpy(dst + size_t(h) * W, o + size_t(h) * size_t(dv), size_t(dv) * sizeof(float));
      dst[size_t(h) * W + size_t(dv)] = lse[h];
    }
  }, double(dk + dv) * 256.0 * per_kv);
  // 3. Every rank's partials, then the exact merge of this rank's heads.
  const size_t part = size_t(N) * size_t(G) * W;
  float* all = arena.alloc<float>(part * size_t(D));
  dcp.group->allgather(P, part, all);
  const int first = dcp.heads_split ? dcp.rank * nq_own : 0;
  // The merge is the one partitions of one context use (kernels/attention.h); a rank holding
  // none of a context yet weighs exp(-inf) = 0, and rank 0 holds position 0 of every context.
  parallel_items(ctx.pool, N * nq_own, [&](int item, int thread) {
    const int t = item / nq_own, h = item % nq_own;
    const size_t at = (size_t(t) * size_t(G) + size_t(first + h)) * W;
    float* parts = (*ctx.thread_scratch)[size_t(thread)].data();  // [D][dv], then D lses
    float* lses = parts + size_t(D) * size_t(dv);
    for (int r = 0; r < D; ++r) {
      const float* src = all + size_t(r) * part + at;
      std::memcpy(parts + size_t(r) * size_t(dv), src, size_t(dv) * sizeof(float));
      lses[r] = src[dv];
    }
    merge_partitions(parts, lses, D, 1, dv, out + size_t(t) * o_stride + size_t(h) * size_t(dv), nullptr);
  }, double(D) * dv);
}

}  // namespace ds
