// Grouped-query attention with rotate-half RoPE (the `llama` type), over a paged K/V cache.
#include "model/gqa_mixer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"
#include "model/attention_items.h"
#include "model/parallel.h"

namespace ds {

GqaMixer::GqaMixer(const ModelConfig& c, const WeightLoader& w)
    : nh_(c.gqa.num_heads), nkv_(c.gqa.num_kv_heads), hd_(c.gqa.head_dim), hidden_(c.hidden_size),
      theta_(c.gqa.rope_theta) {
  qkv_ = w.stacked({{"self_attn.q_proj.weight", nh_ * hd_}, {"self_attn.k_proj.weight", nkv_ * hd_},
                    {"self_attn.v_proj.weight", nkv_ * hd_}},
                   hidden_);
  o_proj_ = w.linear("self_attn.o_proj.weight", hidden_, nh_ * hd_);
  for (int i = 0; i < hd_ / 2; ++i)
    inv_freq_.push_back(float(1.0 / std::pow(double(theta_), double(2 * i) / double(hd_))));
}

size_t GqaMixer::temp_floats(int n) const {
  return size_t(n) * size_t((nh_ + 2 * nkv_) * hd_ + nh_ * hd_) + 4 * 64;
}
size_t GqaMixer::scratch_floats(int max_ctx) const {
  return std::max(attention_scratch_floats(nh_ / nkv_, hd_, max_ctx), attention_prefill_scratch_floats(nh_ / nkv_, hd_, hd_));
}
size_t GqaMixer::weight_bytes() const { return qkv_.bytes() + o_proj_.bytes(); }

namespace {
constexpr int kMaxRopeHalf = 256;  // config.cpp bounds head_dim at 512
// Rotate-half RoPE: dims i and i + hd/2 form a pair rotated by pos * inv_freq[i]. The angles'
// cosines and sines depend on the position only, so a token computes them once for all its heads
// (`rope_angles`), in double as before, which keeps every rotated value bit-identical.
void rope_angles(int hd, int pos, const float* inv_freq, float* cos_out, float* sin_out) {
  for (int i = 0; i < hd / 2; ++i) {
    const double a = double(pos) * double(inv_freq[i]);
    cos_out[i] = float(std::cos(a));
    sin_out[i] = float(std::sin(a));
  }
}
void rope(float* v, int hd, const float* c, const float* s) {
  const int half = hd / 2;
  for (int i = 0; i < half; ++i) {
    const float x0 = v[i], x1 = v[i + half];
    v[i] = x0 * c[i] - x1 * s[i];
    v[i + half] = x1 * c[i] + x0 * s[i];
  }
}
}  // namespace

void GqaMixer::forward(const StepContext& ctx, const float* h, float* x, float* kv_pool, int block_size) const {
  const int N = ctx.num_tokens;
  const size_t qkv_w = size_t((nh_ + 2 * nkv_) * hd_);
  const size_t kvw = size_t(nkv_ * hd_);
  const size_t token_stride = 2 * kvw, block_stride = size_t(block_size) * token_stride;
  Arena& arena = *ctx.arena;
  float* QKV = arena.alloc<float>(size_t(N) * qkv_w);
  float* O = arena.alloc<float>(size_t(N) * size_t(nh_ * hd_));
  matmul(h, size_t(hidden_), qkv_, QKV, qkv_w, N, ctx.pool);
  const auto& seqs = ctx.batch->seqs;
  parallel_rows(ctx.pool, N, (nh_ + nkv_) * hd_, [&](int t, int) {
    float* row = QKV + size_t(t) * qkv_w;
    const int pos = ctx.token_pos[t];
    float c[kMaxRopeHalf], sn[kMaxRopeHalf];
    rope_angles(hd_, pos, inv_freq_.data(), c, sn);
    for (int hh = 0; hh < nh_ + nkv_; ++hh) rope(row + size_t(hh * hd_), hd_, c, sn);
    const SeqChunk& sc = seqs[size_t(ctx.token_seq[t])];
    float* dst = kv_pool + size_t(sc.block_table[pos / block_size]) * block_stride + size_t(pos % block_size) * token_stride;
    std::memcpy(dst, row + size_t(nh_ * hd_), 2 * kvw * sizeof(float));  // k then v, as laid out
  });
  const int group = nh_ / nkv_;
  const float scale = 1.f / std::sqrt(float(hd_));
  AttnItem* items = nullptr;
  const int n_items = plan_attention(*ctx.batch, nkv_, group, arena, &items);
  parallel_items(ctx.pool, n_items, [&](int i, int thread) {
    const AttnItem& it = items[i];
    const SeqChunk& sc = seqs[size_t(it.seq)];
    const int g = it.group;
    PagedKv kv{kv_pool + size_t(g * hd_), kv_pool + kvw + size_t(g * hd_), block_stride, token_stride, block_size,
               sc.block_table};
    const float* q = QKV + size_t(sc.token_offset) * qkv_w + size_t(g * group * hd_);
    float* o = O + size_t(sc.token_offset) * size_t(nh_ * hd_) + size_t(g * group * hd_);
    float* scratch = (*ctx.thread_scratch)[size_t(thread)].data();
    if (sc.num_tokens == 1 || sc.spec_lane >= 0)  // a decode row, or one token of a speculative chunk
      attention_decode(q + size_t(it.t0) * qkv_w, group, hd_, hd_, scale, kv, sc.start_pos + it.t0 + 1,
                       o + size_t(it.t0) * size_t(nh_ * hd_), scratch);
    else
      attention_prefill(q, qkv_w, it.t0, it.t1, sc.start_pos, group, hd_, hd_, scale, kv, o, size_t(nh_ * hd_), scratch);
  });
  matmul(O, size_t(nh_ * hd_), o_proj_, x, size_t(hidden_), N, ctx.pool, /*accumulate=*/true);
}

}  // namespace ds
