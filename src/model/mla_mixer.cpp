// Multi-head latent attention without positional encoding (Kimi-Linear's full-attention
// layers). The cache holds only the latent row [c | k_pe] per token. Prefill and decode both run
// the absorbed form: each head's query is mapped into latent space, attends to the shared
// latent rows (keys [c | k_pe], values c), and the result is mapped out by the value half of
// kv_b_proj - one code path, so prefill and decode agree to rounding.
#include "model/mla_mixer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/kv_format.h"
#include "kernels/elementwise.h"
#include "model/attention_items.h"
#include "model/dcp_attention.h"
#include "core/work_sharing.h"

namespace ds {

MlaMixer::MlaMixer(const ModelConfig& c, const WeightLoader& w)
    : nh_(c.mla.num_heads), nope_(c.mla.qk_nope_head_dim), R_(c.mla.qk_rope_head_dim),
      L_(c.mla.kv_lora_rank), V_(c.mla.v_head_dim), hidden_(c.hidden_size), eps_(c.rms_norm_eps) {
  scale_ = 1.f / std::sqrt(float(nope_ + R_));
  q_proj_ = w.linear("self_attn.q_proj.weight", nh_ * (nope_ + R_), hidden_);
  kv_a_ = w.linear("self_attn.kv_a_proj_with_mqa.weight", L_ + R_, hidden_);
  o_proj_ = w.linear("self_attn.o_proj.weight", hidden_, nh_ * V_);
  kv_norm_ = w.vector_f32("self_attn.kv_a_layernorm.weight", L_);
  // Split per head and transposed below, so it is read as numbers: it stays unquantized.
  const TensorView& kvb = w.float_tensor("self_attn.kv_b_proj.weight", {int64_t(nh_ * (nope_ + V_)), int64_t(L_)});
  std::vector<float> b = kvb.to_f32();  // per head: nope rows (k_nope), then V rows (value)
  const bool keep_bf16 = kvb.dtype == DType::BF16;
  auto pack = [&](const std::vector<float>& m, int out, int in) {
    if (!keep_bf16) return pack_weight(m.data(), DType::F32, out, in);
    std::vector<uint16_t> h(m.size());
    for (size_t i = 0; i < m.size(); ++i) h[i] = f32_to_bf16(m[i]);
    return pack_weight(h.data(), DType::BF16, out, in);
  };
  for (int hh = 0; hh < nh_; ++hh) {
    const size_t base = size_t(hh) * size_t(nope_ + V_) * size_t(L_);
    std::vector<float> kT(size_t(L_) * size_t(nope_));  // [L][nope] = W_kb^T
    for (int n = 0; n < nope_; ++n)
      for (int l = 0; l < L_; ++l) kT[size_t(l) * size_t(nope_) + size_t(n)] = b[base + size_t(n) * size_t(L_) + size_t(l)];
    k_absorb_.push_back(pack(kT, L_, nope_));
    std::vector<float> vu(b.begin() + long(base + size_t(nope_) * size_t(L_)),
                          b.begin() + long(base + size_t(nope_ + V_) * size_t(L_)));
    v_up_.push_back(pack(vu, V_, L_));
  }
}

size_t MlaMixer::temp_floats(int n) const {
  return size_t(n) * (size_t(nh_ * (nope_ + R_)) + size_t(L_ + R_) + size_t(nh_ * (L_ + R_)) +
                      size_t(nh_ * L_) + size_t(nh_ * V_)) + 8 * 64;
}

size_t MlaMixer::dcp_temp_floats(int n, const AttentionShard& dcp) const {
  return dcp_attention_temp_floats(n, nh_, L_ + R_, L_, dcp);
}

size_t MlaMixer::dcp_scratch_floats(const AttentionShard& dcp, int max_ctx) const {
  if (!dcp.active()) return 0;
  const int G = dcp.heads_split ? nh_ * dcp.size : nh_;
  return attention_scratch_floats(G, L_, max_ctx) + size_t(G + dcp.size) * size_t(L_ + 1);
}

size_t MlaMixer::scratch_floats(int max_ctx) const {
  return std::max(attention_scratch_floats(nh_, L_, max_ctx), attention_prefill_scratch_floats(nh_, L_ + R_, L_));
}

size_t MlaMixer::weight_bytes() const {
  size_t b = q_proj_.bytes() + kv_a_.bytes() + o_proj_.bytes() + kv_norm_.size() * 4;
  for (auto& w : k_absorb_) b += w.bytes();
  for (auto& w : v_up_) b += w.bytes();
  return b;
}

namespace {
size_t align4(size_t n) { return (n + 3) / 4 * 4; }
}  // namespace

size_t MlaMixer::kv_row_bytes(KvDtype dt) const {
  const size_t codes = latent_dim() * kv_elem_bytes(dt);
  return kv_has_scales(dt) ? align4(codes) + sizeof(float) : codes;
}

void MlaMixer::forward(const StepContext& ctx, const float* h, float* x, const LayerMemory& mem) const {
  std::byte* kv_pool = mem.kv;
  const int block_size = mem.block_size;
  const KvDtype dt = mem.kv_dtype;
  const int N = ctx.num_tokens;
  const size_t qw = size_t(nh_ * (nope_ + R_)), lat = size_t(L_ + R_);
  Arena& arena = *ctx.arena;
  float* Q = arena.alloc<float>(size_t(N) * qw);
  float* KVA = arena.alloc<float>(size_t(N) * lat);
  float* QL = arena.alloc<float>(size_t(N) * size_t(nh_) * lat);   // absorbed queries [N][nh][L+R]
  float* OL = arena.alloc<float>(size_t(N) * size_t(nh_ * L_));    // latent outputs [N][nh][L]
  float* OV = arena.alloc<float>(size_t(N) * size_t(nh_ * V_));    // values [N][nh][V]
  matmul(h, size_t(hidden_), q_proj_, Q, qw, N, ctx.pool);
  matmul(h, size_t(hidden_), kv_a_, KVA, lat, N, ctx.pool);

  const auto& seqs = ctx.batch->seqs;
  const size_t token_stride = kv_row_bytes(dt), block_stride = size_t(block_size) * token_stride;
  const size_t scale_at = align4(lat * kv_elem_bytes(dt));  // fp8: the row's scale
  // Normalise c and write every token's latent row into the cache before any attention reads it.
  parallel_rows(ctx.pool, N, int(lat) * 2, [&](int t, int) {
    float* row = KVA + size_t(t) * lat;
    rmsnorm(row, kv_norm_.data(), eps_, row, L_);
    const SeqChunk& sc = seqs[size_t(ctx.token_seq[t])];
    int pos = ctx.token_pos[t];
    if (ctx.dcp && ctx.dcp->active()) {  // every dcp-th row, at its local index
      if (!ctx.dcp->owns(pos)) return;
      pos = ctx.dcp->local(pos);
    }
    std::byte* dst = kv_pool + size_t(sc.block_table[pos / block_size]) * block_stride + size_t(pos % block_size) * token_stride;
    kv_store_row(dt, row, int(lat), dst, kv_has_scales(dt) ? reinterpret_cast<float*>(dst + scale_at) : nullptr);
  });
  // Absorbed queries: each head's q_nope mapped into latent space, q_pe appended.
  parallel_items(ctx.pool, N * nh_, [&](int item, int) {
    const int t = item / nh_, hh = item % nh_;
    const float* qh = Q + size_t(t) * qw + size_t(hh * (nope_ + R_));
    float* ql = QL + (size_t(t) * size_t(nh_) + size_t(hh)) * lat;
    matmul(qh, size_t(nope_), k_absorb_[size_t(hh)], ql, lat, 1, nullptr);
    std::memcpy(ql + L_, qh + nope_, size_t(R_) * sizeof(float));
  }, double(nope_) * L_);
  // The latent rows of sequence s as the attention kernels read them (every head shares them).
  auto view = [&](const SeqChunk& sc) {
    PagedKv kv;
    kv.k = kv.v = kv_pool;
    if (kv_has_scales(dt)) kv.k_scale = kv.v_scale = kv_pool + scale_at;
    kv.block_stride = block_stride;
    kv.token_stride = token_stride;
    kv.block_size = block_size;
    kv.block_table = sc.block_table;
    kv.dtype = dt;
    kv.bf16_products = bf16_attention_ && dt == KvDtype::BF16;
    return kv;
  };
  if (ctx.dcp && ctx.dcp->active()) {
    timed_into(ctx.kv_attention_seconds, [&] {
      dcp_attention(ctx, *ctx.dcp, QL, size_t(nh_) * lat, nh_, 1, L_ + R_, L_, scale_,
                    [&](int s, int) { return view(seqs[size_t(s)]); }, OL, size_t(nh_ * L_));
    });
  } else {
    // Attention: decode rows and speculative chunks split their heads into groups when there are
    // too few of them to keep every thread busy; prefill chunks split into query tiles with all
    // heads together.
    const int threads = ctx.pool ? ctx.pool->size() : 1;
    int row_items = 0;  // decode rows and speculative chunks (one item each), and prefill tokens
    for (const SeqChunk& sc : seqs) row_items += attends_as_decode(sc) ? 1 : sc.num_tokens;
    const int groups = row_items >= 2 * threads ? 1 : std::min(nh_, threads);
    const int per_group = (nh_ + groups - 1) / groups;
    AttnItem* items = nullptr;
    const int n_items = plan_attention(*ctx.batch, groups, nh_, arena, &items);
    auto attend = [&](int i, int after, int thread) {
      const AttnItem& it = items[i];
      const SeqChunk& sc = seqs[size_t(it.seq)];
      const PagedKv kv = view(sc);
      float* scratch = (*ctx.thread_scratch)[size_t(thread)].data();
      const float* ql = QL + size_t(sc.token_offset) * size_t(nh_) * lat;
      float* ol = OL + size_t(sc.token_offset) * size_t(nh_ * L_);
      if (attends_as_decode(sc)) {  // a decode row, or a speculative chunk's rows
        // The next item's latent rows are fetched while this one computes (KvAhead); another
        // head group of the same sequence finds them in cache already.
        PagedKv next;
        int next_ctx = 0;
        if (after >= 0 && items[after].seq != it.seq) {
          const SeqChunk& nc = seqs[size_t(items[after].seq)];
          if (attends_as_decode(nc)) {
            next = view(nc);
            next_ctx = nc.start_pos + 1;
          }
        }
        const int h0 = it.group * per_group, h1 = std::min(nh_, h0 + per_group);
        if (h0 < h1)
          attention_decode_rows(ql + size_t(h0) * lat, size_t(nh_) * lat, sc.num_tokens, h1 - h0, L_ + R_, L_, scale_, kv,
                                sc.start_pos + 1, ol + size_t(h0 * L_), size_t(nh_ * L_), scratch,
                                (*ctx.thread_scratch)[size_t(thread)].size(), next_ctx > 0 ? &next : nullptr, next_ctx);
      } else if (it.group == 0) {  // prefill tiles carry all heads; other groups have nothing to do
        attention_prefill(ql, size_t(nh_) * lat, it.t0, it.t1, sc.start_pos, nh_, L_ + R_, L_, scale_, kv, ol,
                          size_t(nh_ * L_), scratch);
      }
    };
    timed_into(ctx.kv_attention_seconds, [&] { parallel_items_ahead(ctx.pool, n_items, attend); });
  }
  // Values: each head's latent output mapped out by its half of kv_b_proj.
  parallel_items(ctx.pool, N * nh_, [&](int item, int) {
    const int t = item / nh_, hh = item % nh_;
    matmul(OL + size_t(t) * size_t(nh_ * L_) + size_t(hh * L_), size_t(L_), v_up_[size_t(hh)],
           OV + size_t(t) * size_t(nh_ * V_) + size_t(hh * V_), size_t(V_), 1, nullptr);
  }, double(L_) * V_);
  matmul(OV, size_t(nh_ * V_), o_proj_, x, size_t(hidden_), N, ctx.pool, /*accumulate=*/true);
}

}  // namespace ds
