// Grouped-query attention with rotate-half RoPE (the `llama` type), over a paged K/V cache.
#include "model/gqa_mixer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/kv_format.h"
#include "kernels/rope.h"
#include "model/attention_items.h"
#include "model/dcp_attention.h"
#include "core/work_sharing.h"

namespace ds {

GqaMixer::GqaMixer(const ModelConfig& c, const WeightLoader& w)
    : nh_(c.gqa.num_heads), nkv_(c.gqa.num_kv_heads), hd_(c.gqa.head_dim), hidden_(c.hidden_size),
      theta_(c.gqa.rope_theta) {
  qkv_ = w.stacked({{"self_attn.q_proj.weight", nh_ * hd_}, {"self_attn.k_proj.weight", nkv_ * hd_},
                    {"self_attn.v_proj.weight", nkv_ * hd_}},
                   hidden_);
  o_proj_ = w.linear("self_attn.o_proj.weight", hidden_, nh_ * hd_);
  inv_freq_ = rope_inv_freq(hd_, double(theta_));
}

size_t GqaMixer::temp_floats(int n) const {
  return size_t(n) * size_t((nh_ + 2 * nkv_) * hd_ + nh_ * hd_) + 4 * 64;
}
size_t GqaMixer::dcp_temp_floats(int n, const AttentionShard& dcp) const {
  return dcp_attention_temp_floats(n, nh_, hd_, hd_, dcp);
}

size_t GqaMixer::dcp_scratch_floats(const AttentionShard& dcp, int max_ctx) const {
  if (!dcp.active()) return 0;
  const int G = dcp.heads_split ? nh_ * dcp.size : nh_;
  return attention_scratch_floats(G, hd_, max_ctx) + size_t(G + dcp.size) * size_t(hd_ + 1);
}

size_t GqaMixer::scratch_floats(int max_ctx) const {
  return std::max(attention_scratch_floats(nh_ / nkv_, hd_, max_ctx), attention_prefill_scratch_floats(nh_ / nkv_, hd_, hd_));
}
namespace {
size_t align4(size_t n) { return (n + 3) / 4 * 4; }
}  // namespace

size_t GqaMixer::head_row_bytes(KvDtype dt) const {
  const size_t codes = size_t(2 * hd_) * kv_elem_bytes(dt);
  return kv_has_scales(dt) ? align4(codes) + 2 * sizeof(float) : codes;
}

size_t GqaMixer::kv_row_bytes(KvDtype dt) const { return size_t(nkv_) * head_row_bytes(dt); }

size_t GqaMixer::weight_bytes() const { return qkv_.bytes() + o_proj_.bytes(); }


void GqaMixer::forward(const StepContext& ctx, const float* h, float* x, const LayerMemory& mem) const {
  std::byte* kv_pool = mem.kv;
  const int block_size = mem.block_size;
  const KvDtype dt = mem.kv_dtype;
  const int N = ctx.num_tokens;
  const size_t qkv_w = size_t((nh_ + 2 * nkv_) * hd_);
  const size_t kvw = size_t(nkv_ * hd_);
  const size_t esize = kv_elem_bytes(dt);
  // A block holds each KV head's rows together ([nkv][block_size][head row]), so decode
  // attention, one item per KV head, streams contiguous memory: with every head's rows of a
  // token side by side, a head's rows sat 2 KiB apart and the hardware prefetcher lost them.
  const size_t head_row = head_row_bytes(dt), head_stride = size_t(block_size) * head_row;
  const size_t block_stride = size_t(nkv_) * head_stride;
  const size_t scales_at = align4(size_t(2 * hd_) * esize);  // fp8: the key's scale, then the value's
  Arena& arena = *ctx.arena;
  float* QKV = arena.alloc<float>(size_t(N) * qkv_w);
  float* O = arena.alloc<float>(size_t(N) * size_t(nh_ * hd_));
  matmul(h, size_t(hidden_), qkv_, QKV, qkv_w, N, ctx.pool);
  const auto& seqs = ctx.batch->seqs;
  parallel_rows(ctx.pool, N, (nh_ + nkv_) * hd_, [&](int t, int) {
    float* row = QKV + size_t(t) * qkv_w;
    int pos = ctx.token_pos[t];
    float c[kMaxRopeHalf], sn[kMaxRopeHalf];
    rope_angles(hd_, pos, inv_freq_.data(), c, sn);
    for (int hh = 0; hh < nh_ + nkv_; ++hh) rope_rotate(row + size_t(hh * hd_), hd_, c, sn);
    const SeqChunk& sc = seqs[size_t(ctx.token_seq[t])];
    if (ctx.dcp && ctx.dcp->active()) {  // every dcp-th row, at its local index
      if (!ctx.dcp->owns(pos)) return;
      pos = ctx.dcp->local(pos);
    }
    std::byte* tok = kv_pool + size_t(sc.block_table[pos / block_size]) * block_stride + size_t(pos % block_size) * head_row;
    const float* k_src = row + size_t(nh_ * hd_);  // every KV head's key, then every value
    const float* v_src = k_src + kvw;
    for (int g = 0; g < nkv_; ++g) {
      std::byte* dst = tok + size_t(g) * head_stride;
      auto* scales = kv_has_scales(dt) ? reinterpret_cast<float*>(dst + scales_at) : nullptr;
      kv_store_row(dt, k_src + size_t(g * hd_), hd_, dst, scales);
      kv_store_row(dt, v_src + size_t(g * hd_), hd_, dst + size_t(hd_) * esize, scales ? scales + 1 : nullptr);
    }
  });
  const float scale = 1.f / std::sqrt(float(hd_));
  // KV head g of sequence s as the attention kernels read it.
  auto kv_view = [&](int s, int g) {
    PagedKv kv;
    kv.k = kv_pool + size_t(g) * head_stride;
    kv.v = kv.k + size_t(hd_) * esize;
    if (kv_has_scales(dt)) {
      kv.k_scale = kv.k + scales_at;
      kv.v_scale = kv.k + scales_at + sizeof(float);
    }
    kv.block_stride = block_stride;
    kv.token_stride = head_row;
    kv.block_size = block_size;
    kv.block_table = seqs[size_t(s)].block_table;
    kv.dtype = dt;
    kv.bf16_products = bf16_attention_ && dt == KvDtype::BF16;
    return kv;
  };
  if (ctx.dcp && ctx.dcp->active()) {
    timed_into(ctx.kv_attention_seconds, [&] {
      dcp_attention(ctx, *ctx.dcp, QKV, qkv_w, nh_, nkv_, hd_, hd_, scale, kv_view, O, size_t(nh_ * hd_));
    });
    matmul(O, size_t(nh_ * hd_), o_proj_, x, size_t(hidden_), N, ctx.pool, /*accumulate=*/true);
    return;
  }
  const int group = nh_ / nkv_;
  AttnItem* items = nullptr;
  const int n_items = plan_attention(*ctx.batch, nkv_, group, arena, &items);
  auto view = [&](const AttnItem& it) { return kv_view(it.seq, it.group); };
  auto attend = [&](int i, int after, int thread) {
    const AttnItem& it = items[i];
    const SeqChunk& sc = seqs[size_t(it.seq)];
    const int g = it.group;
    const PagedKv kv = view(it);
    // The item this thread takes next, when it reads its context as decode does: its first
    // partition is fetched while this one computes (KvAhead).
    PagedKv next;
    int next_ctx = 0;
    if (after >= 0) {
      const SeqChunk& nc = seqs[size_t(items[after].seq)];
      if (attends_as_decode(nc)) {
        next = view(items[after]);
        next_ctx = nc.start_pos + 1;
      }
    }
    const PagedKv* next_kv = next_ctx > 0 ? &next : nullptr;
    const float* q = QKV + size_t(sc.token_offset) * qkv_w + size_t(g * group * hd_);
    float* o = O + size_t(sc.token_offset) * size_t(nh_ * hd_) + size_t(g * group * hd_);
    float* scratch = (*ctx.thread_scratch)[size_t(thread)].data();
    if (sc.num_tokens == 1)  // a decode row
      attention_decode(q, group, hd_, hd_, scale, kv, sc.start_pos + 1, o, scratch, next_kv, next_ctx);
    else if (sc.spec_lane >= 0)  // a speculative chunk's rows, each as decode would give it
      attention_decode_rows(q, qkv_w, sc.num_tokens, group, hd_, hd_, scale, kv, sc.start_pos + 1, o, size_t(nh_ * hd_),
                            scratch, (*ctx.thread_scratch)[size_t(thread)].size(), next_kv, next_ctx);
    else
      attention_prefill(q, qkv_w, it.t0, it.t1, sc.start_pos, group, hd_, hd_, scale, kv, o, size_t(nh_ * hd_), scratch);
  };
  timed_into(ctx.kv_attention_seconds, [&] { parallel_items_ahead(ctx.pool, n_items, attend); });
  matmul(O, size_t(nh_ * hd_), o_proj_, x, size_t(hidden_), N, ctx.pool, /*accumulate=*/true);
}

}  // namespace ds
