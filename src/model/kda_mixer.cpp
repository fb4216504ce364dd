// Kimi Delta Attention layer: fused input projection, short causal convs, gates, the per-head
// recurrence (decode) or chunked form (prefill), gated output norm, output projection.
#include "model/kda_mixer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/elementwise.h"
#include "kernels/kda.h"
#include "core/work_sharing.h"

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
    const TensorView& t = w.get(convs[part], {int64_t(HD), 1, int64_t(K_)});
    std::vector<float> cw = t.to_f32();  // [HD][1][K]
    for (int ch = 0; ch < HD; ++ch)
      for (int j = 0; j < K_; ++j)
        conv_w_[size_t(j) * size_t(3 * HD) + size_t(part * HD + ch)] = cw[size_t(ch) * size_t(K_) + size_t(j)];
  }
  dt_bias_ = w.vector_f32("self_attn.dt_bias", HD);
  // The decay rate a = -exp(A_log) per head. A GGUF file stores a itself (as llama.cpp's
  // converter writes it), which its reader hands over as "A": taking it as is keeps a GGUF model
  // bit-identical to its folder.
  if (w.store.find(w.prefix + "self_attn.A")) {
    a_ = w.vector_f32("self_attn.A", H_);
  } else {
    a_ = w.vector_f32("self_attn.A_log", H_);
    for (float& v : a_) v = -std::exp(v);
  }
  o_norm_ = w.vector_f32("self_attn.o_norm.weight", D_);
}

size_t KdaMixer::state_floats() const {
  return size_t(H_) * size_t(D_) * size_t(D_) + size_t(K_ - 1) * size_t(3 * H_ * D_);
}

size_t KdaMixer::scratch_floats() const {
  // A speculative chunk runs its recurrence on a copy of the state.
  return std::max(kda_chunk_scratch_floats(D_, D_), size_t(D_) * size_t(D_));
}

size_t KdaMixer::replay_floats() const { return size_t(6 * H_ * D_ + H_); }

size_t KdaMixer::temp_floats(int n) const {
  const size_t HD = size_t(H_ * D_);
  const size_t Wp = 3 * HD + 2 * size_t(D_) + size_t(H_);
  // + speculative chunks: their conv inputs and one conv window per sequence (at most n)
  return size_t(n) * (Wp + 3 * HD) + size_t(n) * 3 * HD + size_t(n) * size_t(K_ - 1) * 3 * HD + 6 * 64;
}

size_t KdaMixer::weight_bytes() const {
  return in_proj_.bytes() + f_b_.bytes() + g_b_.bytes() + o_proj_.bytes() +
         (conv_w_.size() + dt_bias_.size() + a_.size() + o_norm_.size()) * sizeof(float);
}

void KdaMixer::forward(const StepContext& ctx, const float* h, float* x, const LayerMemory& mem) const {
  float* states = mem.states;
  const size_t slot_stride = mem.slot_stride;
  const RollbackArea& rb = mem.rollback;
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
  const size_t C3 = size_t(3 * HD), hist = size_t(K_ - 1) * C3;
  // A speculative chunk's conv inputs (the conv overwrites them) and conv window per sequence.
  float* Raw = arena.alloc<float>(size_t(N) * C3);
  float* Win = arena.alloc<float>(std::max<size_t>(1, seqs.size() * hist));
  // Short convolutions, one sequence at a time (each carries its own history).
  parallel_items(ctx.pool, int(seqs.size()), [&](int s, int) {
    const SeqChunk& sc = seqs[size_t(s)];
    float* st = states + size_t(sc.slot) * slot_stride;
    float* xs = P + size_t(sc.token_offset) * Wp;
    if (sc.spec_lane < 0) {
      if (sc.start_pos == 0) std::memset(st, 0, state_floats() * sizeof(float));
      causal_conv_silu(xs, Wp, sc.num_tokens, 3 * HD, conv_w_.data(), K_, st + rec_floats);
      return;
    }
    // Speculative: the committed history stays; the conv runs on a copy, and each token's
    // window (last K-1 inputs, oldest first, as causal_conv_silu keeps it) goes to its lane.
    const float* src = sc.spec_lane == 0 ? st + rec_floats : rb.at(sc.slot, sc.spec_lane - 1) + rec_floats;
    float* raw = Raw + size_t(sc.token_offset) * C3;
    float* win = Win + size_t(s) * hist;
    for (int t = 0; t < sc.num_tokens; ++t) std::memcpy(raw + size_t(t) * C3, xs + size_t(t) * Wp, C3 * sizeof(float));
    std::memcpy(win, src, hist * sizeof(float));
    causal_conv_silu(xs, Wp, sc.num_tokens, 3 * HD, conv_w_.data(), K_, win);
    if (rb.mode == StateRollback::Lanes) {
      std::memcpy(win, src, hist * sizeof(float));
      for (int t = 0; t < sc.num_tokens; ++t) {
        if (K_ > 1) {
          std::memmove(win, win + C3, (hist - C3) * sizeof(float));
          std::memcpy(win + hist - C3, raw + size_t(t) * C3, C3 * sizeof(float));
        }
        std::memcpy(rb.at(sc.slot, sc.spec_lane + t) + rec_floats, win, hist * sizeof(float));
      }
    } else {
      for (int t = 0; t < sc.num_tokens; ++t)
        std::memcpy(rb.at(sc.slot, sc.spec_lane + t), raw + size_t(t) * C3, C3 * sizeof(float));
    }
  }, double(K_) * 3 * HD * double(N) / double(seqs.size()));
  // Per token: normalise q and k per head, gates, beta.
  const float q_scale = 1.f / std::sqrt(float(D_));
  parallel_rows(ctx.pool, N, 4 * HD, [&](int t, int) {
    float* row = P + size_t(t) * Wp;
    for (int hh = 0; hh < H_; ++hh) {
      l2norm_scale(row + size_t(hh * D_), D_, 1e-6f, q_scale);
      l2norm_scale(row + size_t(HD + hh * D_), D_, 1e-6f, 1.f);
      kda_gate(G + size_t(t) * size_t(HD) + size_t(hh * D_), dt_bias_.data() + size_t(hh * D_), a_[size_t(hh)], D_);
      row[col_b + size_t(hh)] = sigmoidf(row[col_b + size_t(hh)]);
    }
  });
  // Replay keeps each speculative token's k, v, g and beta after the conv input.
  if (rb.mode == StateRollback::Replay) {
    for (const SeqChunk& sc : seqs) {
      if (sc.spec_lane < 0) continue;
      for (int t = 0; t < sc.num_tokens; ++t) {
        const size_t tok = size_t(sc.token_offset + t);
        float* dst = rb.at(sc.slot, sc.spec_lane + t) + C3;
        std::memcpy(dst, P + tok * Wp + size_t(HD), size_t(2 * HD) * sizeof(float));  // k, v
        std::memcpy(dst + 2 * HD, G + tok * size_t(HD), size_t(HD) * sizeof(float));
        std::memcpy(dst + 3 * HD, P + tok * Wp + col_b, size_t(H_) * sizeof(float));
      }
    }
  }
  // The recurrence, one (sequence, head) pair per item.
  parallel_items(ctx.pool, int(seqs.size()) * H_, [&](int item, int thread) {
    const SeqChunk& sc = seqs[size_t(item / H_)];
    const int hh = item % H_;
    const size_t head = size_t(hh) * size_t(D_) * size_t(D_);
    float* S = states + size_t(sc.slot) * slot_stride + head;
    const size_t off = size_t(sc.token_offset);
    KdaHeadIo io{P + off * Wp + size_t(hh * D_),
                 P + off * Wp + size_t(HD + hh * D_),
                 P + off * Wp + size_t(2 * HD + hh * D_),
                 G + off * size_t(HD) + size_t(hh * D_),
                 P + off * Wp + col_b + size_t(hh),
                 Wp, Wp, size_t(HD), Wp,
                 O + off * size_t(HD) + size_t(hh * D_), size_t(HD)};
    if (sc.spec_lane >= 0) {
      // One token at a time, as decode runs it, on a copy of the starting state.
      float* Sc = (*ctx.thread_scratch)[size_t(thread)].data();
      const float* src = sc.spec_lane == 0 ? S : rb.at(sc.slot, sc.spec_lane - 1) + head;
      std::memcpy(Sc, src, size_t(D_) * size_t(D_) * sizeof(float));
      for (int t = 0; t < sc.num_tokens; ++t) {
        kda_recurrent(Sc, D_, D_, 1, io.advanced(t));
        if (rb.mode == StateRollback::Lanes)
          std::memcpy(rb.at(sc.slot, sc.spec_lane + t) + head, Sc, size_t(D_) * size_t(D_) * sizeof(float));
      }
      return;
    }
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
      mul_sigmoid(o, gt, D_);
    }
  });
  matmul(O, size_t(HD), o_proj_, x, size_t(hidden_), N, ctx.pool, /*accumulate=*/true);
}

void KdaMixer::replay_conv(float* state, const float* inputs, size_t stride, int keep) const {
  const size_t C3 = size_t(3 * H_ * D_), hist = size_t(K_ - 1) * C3;
  float* win = state + size_t(H_) * size_t(D_) * size_t(D_);
  for (int t = 0; t < keep && K_ > 1; ++t) {
    std::memmove(win, win + C3, (hist - C3) * sizeof(float));
    std::memcpy(win + hist - C3, inputs + size_t(t) * stride, C3 * sizeof(float));
  }
}

void KdaMixer::replay_head(float* state, const float* inputs, size_t stride, int keep, int hh, float* scratch) const {
  // The verify step ran kda_recurrent one token at a time; so does this. Its output is not
  // needed: q is k and every token writes the same scratch row.
  const int HD = H_ * D_;
  const size_t C3 = size_t(3 * HD);
  const float* k = inputs + C3 + size_t(hh * D_);
  const float* v = inputs + C3 + size_t(HD + hh * D_);
  const float* g = inputs + C3 + size_t(2 * HD + hh * D_);
  const float* beta = inputs + C3 + size_t(3 * HD + hh);
  const KdaHeadIo io{k, k, v, g, beta, stride, stride, stride, stride, scratch, 0};
  float* S = state + size_t(hh) * size_t(D_) * size_t(D_);
  for (int t = 0; t < keep; ++t) kda_recurrent(S, D_, D_, 1, io.advanced(t));
}

}  // namespace ds
