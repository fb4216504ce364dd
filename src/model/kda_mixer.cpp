// Kimi Delta Attention layer: fused input projection, short causal convs, gates, the per-head
// recurrence (decode) or chunked form (prefill), gated output norm, output projection.
#include "model/kda_mixer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/elementwise.h"
#include "kernels/kda.h"
#include "model/parallel.h"

namespace ds {

namespace {
// Chunks shorter than this run the recurrence: the chunked form's setup costs more than it saves.
constexpr int kChunkedMinTokens = 16;
}  // namespace

KdaMixer::KdaMixer(const ModelConfig& c, const WeightLoader& w)
    : H_(c.kda.num_heads), D_(c.kda.head_dim), K_(c.kda.conv_kernel), hidden_(c.hidden_size),
      eps_(c.rms_norm_eps) {
  const int HD = H_ * D_;
  in_proj_ = w.stacked({{"self_attn.q_proj.weight", HD}, {"self_attn.k_proj.weight", HD},
                        {"self_attn.v_proj.weight", HD}, {"self_attn.f_a_proj.weight", D_},
                        {"self_attn.g_a_proj.weight", D_}, {"self_attn.b_proj.weight", H_}},
                       hidden_);
  f_b_ = w.linear("self_attn.f_b_proj.weight", HD, D_);
  g_b_ = w.linear("self_attn.g_b_proj.weight", HD, D_);
  o_proj_ = w.linear("self_attn.o_proj.weight", hidden_, HD);
  conv_w_.assign(size_t(K_) * size_t(3 * HD), 0.f);
  const char* convs[3] = {"self_attn.q_conv1d.weight", "self_attn.k_conv1d.weight", "self_attn.v_conv1d.weight"};
  for (int part = 0; part < 3; ++part) {
    const TensorView& t = w.store.get(w.prefix + convs[part], {int64_t(HD), 1, int64_t(K_)});
    std::vector<float> cw = t.to_f32();  // [HD][1][K]
    for (int ch = 0; ch < HD; ++ch)
      for (int j = 0; j < K_; ++j)
        conv_w_[size_t(j) * size_t(3 * HD) + size_t(part * HD + ch)] = cw[size_t(ch) * size_t(K_) + size_t(j)];
  }
  dt_bias_ = w.vector_f32("self_attn.dt_bias", HD);
  a_log_ = w.vector_f32("self_attn.A_log", H_);
  o_norm_ = w.vector_f32("self_attn.o_norm.weight", D_);
}

size_t KdaMixer::state_floats() const {
  return size_t(H_) * size_t(D_) * size_t(D_) + size_t(K_ - 1) * size_t(3 * H_ * D_);
}

size_t KdaMixer::scratch_floats() const { return kda_chunk_scratch_floats(D_, D_); }

size_t KdaMixer::temp_floats(int n) const {
  const size_t HD = size_t(H_ * D_);
  const size_t Wp = 3 * HD + 2 * size_t(D_) + size_t(H_);
  return size_t(n) * (Wp + 3 * HD) + 4 * 64;
}

size_t KdaMixer::weight_bytes() const {
  return in_proj_.bytes() + f_b_.bytes() + g_b_.bytes() + o_proj_.bytes() +
         (conv_w_.size() + dt_bias_.size() + a_log_.size() + o_norm_.size()) * sizeof(float);
}

void KdaMixer::forward(const StepContext& ctx, const float* h, float* x, float* states,
                       size_t slot_stride) const {
  const int N = ctx.num_tokens;
  const int HD = H_ * D_;
  const size_t Wp = size_t(3 * HD + 2 * D_ + H_);
  const size_t col_fa = size_t(3 * HD), col_ga = col_fa + size_t(D_), col_b = col_ga + size_t(D_);
  Arena& arena = *ctx.arena;
  float* P = arena.alloc<float>(size_t(N) * Wp);
  float* G = arena.alloc<float>(size_t(N) * size_t(HD));
  float* Gate = arena.alloc<float>(size_t(N) * size_t(HD));
  float* O = arena.alloc<float>(size_t(N) * size_t(HD));
  matmul(h, size_t(hidden_), in_proj_, P, Wp, N, ctx.pool);
  matmul(P + col_fa, Wp, f_b_, G, size_t(HD), N, ctx.pool);
  matmul(P + col_ga, Wp, g_b_, Gate, size_t(HD), N, ctx.pool);

  const auto& seqs = ctx.batch->seqs;
  const size_t rec_floats = size_t(H_) * size_t(D_) * size_t(D_);
  // Short convolutions, one sequence at a time (each carries its own history).
  parallel_items(ctx.pool, int(seqs.size()), [&](int s, int) {
    const SeqChunk& sc = seqs[size_t(s)];
    float* st = states + size_t(sc.slot) * slot_stride;
    if (sc.start_pos == 0) std::memset(st, 0, state_floats() * sizeof(float));
    causal_conv_silu(P + size_t(sc.token_offset) * Wp, Wp, sc.num_tokens, 3 * HD, conv_w_.data(), K_,
                     st + rec_floats);
  }, double(K_) * 3 * HD * double(N) / double(seqs.size()));
  // Per token: normalise q and k per head, gates, beta.
  const float q_scale = 1.f / std::sqrt(float(D_));
  parallel_rows(ctx.pool, N, 4 * HD, [&](int t, int) {
    float* row = P + size_t(t) * Wp;
    for (int hh = 0; hh < H_; ++hh) {
      l2norm_scale(row + size_t(hh * D_), D_, 1e-6f, q_scale);
      l2norm_scale(row + size_t(HD + hh * D_), D_, 1e-6f, 1.f);
      kda_gate(G + size_t(t) * size_t(HD) + size_t(hh * D_), dt_bias_.data() + size_t(hh * D_), a_log_[size_t(hh)], D_);
      row[col_b + size_t(hh)] = sigmoidf(row[col_b + size_t(hh)]);
    }
  });
  // The recurrence, one (sequence, head) pair per item.
  parallel_items(ctx.pool, int(seqs.size()) * H_, [&](int item, int thread) {
    const SeqChunk& sc = seqs[size_t(item / H_)];
    const int hh = item % H_;
    float* S = states + size_t(sc.slot) * slot_stride + size_t(hh) * size_t(D_) * size_t(D_);
    const size_t off = size_t(sc.token_offset);
    KdaHeadIo io{P + off * Wp + size_t(hh * D_),
                 P + off * Wp + size_t(HD + hh * D_),
                 P + off * Wp + size_t(2 * HD + hh * D_),
                 G + off * size_t(HD) + size_t(hh * D_),
                 P + off * Wp + col_b + size_t(hh),
                 Wp, Wp, size_t(HD), Wp,
                 O + off * size_t(HD) + size_t(hh * D_), size_t(HD)};
    // Pieces end on absolute multiples of the chunk size, and each piece picks its form by its
    // own length: the state at a block boundary is then bit-identical however the scheduler
    // split the prompt into steps, which is what lets a cached state snapshot stand in for
    // recomputing the prefix.
    for (int done = 0; done < sc.num_tokens;) {
      const int pos = sc.start_pos + done;
      const int piece = std::min(sc.num_tokens - done, kKdaChunk - pos % kKdaChunk);
      const KdaHeadIo at = io.advanced(done);
      if (piece >= kChunkedMinTokens)
        kda_chunked(S, D_, D_, piece, at, (*ctx.thread_scratch)[size_t(thread)].data());
      else
        kda_recurrent(S, D_, D_, piece, at);
      done += piece;
    }
  }, 4.0 * D_ * D_ * double(N) / double(seqs.size()));
  // Gated output norm per head.
  parallel_rows(ctx.pool, N, 4 * HD, [&](int t, int) {
    for (int hh = 0; hh < H_; ++hh) {
      float* o = O + size_t(t) * size_t(HD) + size_t(hh * D_);
      const float* gt = Gate + size_t(t) * size_t(HD) + size_t(hh * D_);
      rmsnorm(o, o_norm_.data(), eps_, o, D_);
      for (int d = 0; d < D_; ++d) o[d] *= sigmoidf(gt[d]);
    }
  });
  matmul(O, size_t(HD), o_proj_, x, size_t(hidden_), N, ctx.pool, /*accumulate=*/true);
}

}  // namespace ds
