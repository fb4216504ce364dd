#include "spec_decode/dspark_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/elementwise.h"
#include "kernels/rope.h"
#include "model/model.h"
#include "core/work_sharing.h"
#include "model/weight_loader.h"

namespace ds {

namespace {
// n floats of v, grown (never shrunk) to fit.
float* room(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}
}  // namespace

DSparkModel::DSparkModel(const std::string& dir, const Model& target, int k)
    : target_(target), pool_(target.thread_pool().get()), cfg_(load_dspark_config(dir)) {
  check_dspark_fits(cfg_, target.config(), k);
  WeightStore store = WeightStore::open(dir);
  const int H = cfg_.hidden_size, D = cfg_.qkv_width(), r = cfg_.markov_rank;
  const int taps = int(cfg_.target_layer_ids.size());
  WeightLoader w{store, ""};
  fc_ = w.linear("fc.weight", H, taps * H);
  hidden_norm_ = w.vector_f32("hidden_norm.weight", H);
  final_norm_ = w.vector_f32("norm.weight", H);
  mask_embedding_ = w.vector_f32("mask_embedding", H);
  markov_w2_ = w.linear("markov_w2.weight", cfg_.vocab_size, r);
  const TensorView& w1 = w.float_tensor("markov_w1.weight", {int64_t(cfg_.vocab_size), int64_t(r)});
  markov_w1_dtype_ = w1.dtype;
  markov_w1_.resize(w1.nbytes);
  std::memcpy(markov_w1_.data(), w1.data, w1.nbytes);
  conf_w_ = w.vector_f32("confidence.weight", H + r);
  conf_b_ = w.vector_f32("confidence.bias", 1)[0];
  if (cfg_.context_copy) {
    copy_scale_ = w.vector_f32("copy_scale", cfg_.block_size);
    copy_confidence_ = w.vector_f32("copy_confidence", cfg_.block_size);
  }
  weights_bytes_ = fc_.bytes() + markov_w2_.bytes() + w1.nbytes;
  for (int i = 0; i < cfg_.num_layers; ++i) {
    WeightLoader lw{store, "layers." + std::to_string(i) + "."};
    Layer L;
    L.input_norm = lw.vector_f32("input_layernorm.weight", H);
    L.post_norm = lw.vector_f32("post_attention_layernorm.weight", H);
    L.qkv = lw.stacked({{"self_attn.q_proj.weight", D}, {"self_attn.k_proj.weight", D}, {"self_attn.v_proj.weight", D}}, H);
    L.kv = lw.stacked({{"self_attn.k_proj.weight", D}, {"self_attn.v_proj.weight", D}}, H);
    L.o = lw.linear("self_attn.o_proj.weight", H, D);
    L.gate_up = lw.stacked({{"mlp.gate_proj.weight", cfg_.intermediate_size}, {"mlp.up_proj.weight", cfg_.intermediate_size}}, H);
    L.down = lw.linear("mlp.down_proj.weight", H, cfg_.intermediate_size);
    weights_bytes_ += L.qkv.bytes() + L.o.bytes() + L.gate_up.bytes() + L.down.bytes();
    layers_.push_back(std::move(L));
  }
  inv_freq_ = rope_inv_freq(cfg_.head_dim, cfg_.rope_theta);
  scratch_.scores.assign(size_t(pool_ ? pool_->size() : 1), std::vector<float>(size_t(cfg_.context_window + cfg_.block_size)));
}

void DSparkModel::set_activation_dtype(ActivationDtype a) {
  for (PackedWeight* p : {&fc_, &markov_w2_}) ds::set_activation_dtype(*p, a);
  for (Layer& L : layers_)
    for (PackedWeight* p : {&L.qkv, &L.kv, &L.o, &L.gate_up, &L.down}) ds::set_activation_dtype(*p, a);
}

void DSparkModel::context(const float* taps, const int32_t* pos, int rows, float* out) const {
  if (rows <= 0) return;
  const int H = cfg_.hidden_size, D = cfg_.qkv_width(), hd = cfg_.head_dim;
  const size_t T = cfg_.target_layer_ids.size();
  float* fused = room(scratch_.fused, size_t(rows) * size_t(H));
  float* c = room(scratch_.c, size_t(rows) * size_t(H));
  float* kv = room(scratch_.kv, size_t(rows) * size_t(2 * D));
  matmul(taps, T * size_t(H), fc_, fused, size_t(H), rows, pool_);
  for (int t = 0; t < rows; ++t)
    rmsnorm(fused + size_t(t) * size_t(H), hidden_norm_.data(), cfg_.rms_norm_eps, c + size_t(t) * size_t(H), H);
  const size_t stride = context_floats();
  for (size_t l = 0; l < layers_.size(); ++l) {
    matmul(c, size_t(H), layers_[l].kv, kv, size_t(2 * D), rows, pool_);
    for (int t = 0; t < rows; ++t) {
      float* k = kv + size_t(t) * size_t(2 * D);
      float cs[kMaxRopeHalf], sn[kMaxRopeHalf];
      rope_angles(hd, pos[t], inv_freq_.data(), cs, sn);
      for (int h = 0; h < cfg_.num_heads; ++h) rope_rotate(k + size_t(h * hd), hd, cs, sn);
      std::memcpy(out + size_t(t) * stride + l * size_t(2 * D), k, size_t(2 * D) * sizeof(float));
    }
  }
}

void DSparkModel::block(std::span<const Round> rounds, float* z) const {
  const int B = int(rounds.size());
  if (B == 0) return;
  const int H = cfg_.hidden_size, D = cfg_.qkv_width(), hd = cfg_.head_dim, nh = cfg_.num_heads;
  const int Kb = cfg_.block_size, I = cfg_.intermediate_size;
  const int R = B * Kb;
  float* x = room(scratch_.x, size_t(R) * size_t(H));
  float* h = room(scratch_.h, size_t(R) * size_t(H));
  float* qkv = room(scratch_.qkv, size_t(R) * size_t(3 * D));
  float* o = room(scratch_.o, size_t(R) * size_t(D));
  float* gu = room(scratch_.gu, size_t(R) * size_t(2 * I));
  float* a = room(scratch_.a, size_t(R) * size_t(I));
  for (int b = 0; b < B; ++b) {
    target_.embed(std::span<const int32_t>(&rounds[size_t(b)].token, 1), x + size_t(b * Kb) * size_t(H));
    for (int j = 1; j < Kb; ++j)
      std::memcpy(x + size_t(b * Kb + j) * size_t(H), mask_embedding_.data(), size_t(H) * sizeof(float));
  }
  for (const Round& rd : rounds)  // the attention's scores row holds a window and a block
    DS_CHECK(int(rd.context.size()) <= cfg_.context_window, "drafter: a round attends more than its context window");
  const float scale = 1.f / std::sqrt(float(hd));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    for (int t = 0; t < R; ++t)
      rmsnorm(x + size_t(t) * size_t(H), L.input_norm.data(), cfg_.rms_norm_eps, h + size_t(t) * size_t(H), H);
    matmul(h, size_t(H), L.qkv, qkv, size_t(3 * D), R, pool_);
    for (int t = 0; t < R; ++t) {
      float* row = qkv + size_t(t) * size_t(3 * D);
      float cs[kMaxRopeHalf], sn[kMaxRopeHalf];
      rope_angles(hd, rounds[size_t(t / Kb)].pos + t % Kb, inv_freq_.data(), cs, sn);
      for (int hh = 0; hh < 2 * nh; ++hh) rope_rotate(row + size_t(hh * hd), hd, cs, sn);  // q and k
    }
    // Attention: each slot sees the round's context keys and every slot of its block.
    const double work = double(Kb) * double(D) * 2 * double(Kb + 32);
    parallel_items(pool_, B, [&](int b, int thread) {
      const Round& rd = rounds[size_t(b)];
      const int C = int(rd.context.size());
      std::vector<float>& s = scratch_.scores[size_t(thread)];
      for (int i = 0; i < Kb; ++i) {
        const float* q = qkv + size_t(b * Kb + i) * size_t(3 * D);
        float* out = o + size_t(b * Kb + i) * size_t(D);
        for (int hh = 0; hh < nh; ++hh) {
          const float* qh = q + size_t(hh * hd);
          auto key = [&](int e) {
            return e < C ? rd.context[size_t(e)] + l * size_t(2 * D) + size_t(hh * hd)
                         : qkv + size_t(b * Kb + (e - C)) * size_t(3 * D) + size_t(D + hh * hd);
          };
          float mx = -INFINITY;
          for (int e = 0; e < C + Kb; ++e) {
            const float* k = key(e);
            float d = 0;
            for (int u = 0; u < hd; ++u) d += qh[u] * k[u];
            s[size_t(e)] = d * scale;
            mx = std::max(mx, s[size_t(e)]);
          }
          float sum = 0;
          for (int e = 0; e < C + Kb; ++e) sum += (s[size_t(e)] = std::exp(s[size_t(e)] - mx));
          float* oh = out + size_t(hh * hd);
          std::fill(oh, oh + hd, 0.f);
          for (int e = 0; e < C + Kb; ++e) {
            const float p = s[size_t(e)] / sum;
            const float* v = key(e) + D;  // a key's value follows it by D (context entry and qkv row alike)
            for (int u = 0; u < hd; ++u) oh[u] += p * v[u];
          }
        }
      }
    }, work);
    matmul(o, size_t(D), L.o, x, size_t(H), R, pool_, /*accumulate=*/true);
    for (int t = 0; t < R; ++t)
      rmsnorm(x + size_t(t) * size_t(H), L.post_norm.data(), cfg_.rms_norm_eps, h + size_t(t) * size_t(H), H);
    matmul(h, size_t(H), L.gate_up, gu, size_t(2 * I), R, pool_);
    for (int t = 0; t < R; ++t)
      silu_mul(gu + size_t(t) * size_t(2 * I), gu + size_t(t) * size_t(2 * I) + I, a + size_t(t) * size_t(I), I);
    matmul(a, size_t(I), L.down, x, size_t(H), R, pool_, /*accumulate=*/true);
  }
  for (int t = 0; t < R; ++t)
    rmsnorm(x + size_t(t) * size_t(H), final_norm_.data(), cfg_.rms_norm_eps, z + size_t(t) * size_t(H), H);
}

void DSparkModel::base_logits(const float* z, int rows, float* logits) const { target_.lm_head(z, rows, logits); }

void DSparkModel::markov_embed(int32_t prev, float* m) const {
  DS_CHECK(prev >= 0 && prev < cfg_.vocab_size, "drafter: token " + std::to_string(prev) + " outside the vocabulary");
  row_to_f32(markov_w1_.data(), markov_w1_dtype_, size_t(prev), cfg_.markov_rank, m);
}

void DSparkModel::add_markov(const float* m, int rows, float* logits) const {
  // A round runs this once per slot, for a handful of rows at low concurrency: a fork-join
  // would cost more than the vocab x rank multiply-adds of a row.
  ThreadPool* pool = double(rows) * double(cfg_.vocab_size) * double(cfg_.markov_rank) >= double(1 << 20) ? pool_ : nullptr;
  if (rows > 0) matmul(m, size_t(cfg_.markov_rank), markov_w2_, logits, size_t(cfg_.vocab_size), rows, pool, /*accumulate=*/true);
}

float DSparkModel::confidence(const float* z, const float* m, int slot, bool prev_in_window) const {
  const int H = cfg_.hidden_size;
  float s = conf_b_;
  for (int i = 0; i < H; ++i) s += conf_w_[size_t(i)] * z[i];
  for (int i = 0; i < cfg_.markov_rank; ++i) s += conf_w_[size_t(H + i)] * m[i];
  if (cfg_.context_copy && prev_in_window) s += copy_confidence_[size_t(slot)];
  return sigmoidf(s);
}

int DSparkModel::copy_matches(std::span<const CopyEntry> window, int32_t prev) {
  int n = 0;
  for (const CopyEntry& e : window) n += e.token == prev && e.next >= 0;
  return n;
}

void DSparkModel::add_copy(std::span<const CopyEntry> window, int32_t prev, int slot, float* logits) const {
  if (!cfg_.context_copy) return;
  const float scale = copy_scale_[size_t(slot)];
  for (size_t i = 0; i < window.size(); ++i) {
    const CopyEntry& e = window[i];
    if (e.token != prev || e.next < 0) continue;
    // Once per distinct next token, at its first match: the count of all its matches.
    bool seen = false;
    for (size_t q = 0; q < i && !seen; ++q) seen = window[q].token == prev && window[q].next == e.next;
    if (seen) continue;
    int count = 0;
    for (size_t q = i; q < window.size(); ++q) count += window[q].token == prev && window[q].next == e.next;
    logits[e.next] += float(count) * scale;
  }
}

}  // namespace ds
