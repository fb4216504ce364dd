// Kimi Delta Attention: projections, short causal convs, the gated delta rule over a per-slot
// recurrent state (chunked form for prefill pieces, recurrence for short ones), output gate.
#pragma once
#include <cstddef>
#include <vector>

#include "kernels/matmul.h"
#include "model/config.h"
#include "model/mixer.h"
#include "model/step_context.h"
#include "model/weight_loader.h"

namespace ds {

class KdaMixer final : public Mixer {
 public:
  KdaMixer(const ModelConfig& c, const WeightLoader& w);
  // Per slot state layout: [H][dk][dv] recurrent state, then [K-1][3*H*D] conv history.
  size_t state_floats() const override;
  // mem: the slots' states (mem.states) and their rollback area (mem.rollback).
  void forward(const StepContext& ctx, const float* h, float* x, const LayerMemory& mem) const override;
  ForwardProfile::Part profile_part() const override { return ForwardProfile::Kda; }
  // Replay: what one speculative token keeps: conv input [3*H*D], k, v, g [H*D] each, beta [H].
  size_t replay_floats() const override;
  // Replay commit: advances `state` (this layer's, one slot) through the first `keep` kept
  // tokens with the verify step's own arithmetic: the conv window, then each head's recurrence
  // (heads are independent: callers may run them on different threads). scratch: D floats.
  void replay_conv(float* state, const float* inputs, size_t stride, int keep) const;
  void replay_head(float* state, const float* inputs, size_t stride, int keep, int head, float* scratch) const;
  int num_heads() const { return H_; }
  size_t scratch_floats() const;
  size_t temp_floats(int n) const;
  size_t weight_bytes() const override;
  // Mixer: no KV rows, and decode context parallel adds nothing here.
  size_t step_temp_floats(int n, const AttentionShard&) const override { return temp_floats(n); }
  size_t step_scratch_floats(int, const AttentionShard&) const override { return scratch_floats(); }
  // Replay commit as the Mixer interface runs it: the conv window, then one item per head.
  int replay_items() const override { return H_; }
  double replay_item_work(int keep) const override { return 4.0 * double(D_) * D_ * keep; }
  void replay_prepare(float* state, const float* inputs, size_t stride, int keep) const override {
    replay_conv(state, inputs, stride, keep);
  }
  void replay_item(float* state, const float* inputs, size_t stride, int keep, int item, float* scratch) const override {
    replay_head(state, inputs, stride, keep, item, scratch);
  }
  void set_activation_dtype(ActivationDtype a) override {
    for (PackedWeight* w : {&in_proj_, &f_b_, &g_b_, &o_proj_}) ds::set_activation_dtype(*w, a);
  }

 private:
  int H_, D_, K_, hidden_;
  float eps_;
  PackedWeight in_proj_;   // [q | k | v | f_a | g_a | b]
  PackedWeight f_b_, g_b_, o_proj_;
  std::vector<float> conv_w_;  // [K][3*H*D] tap-major
  std::vector<float> dt_bias_, a_, o_norm_;  // a_: -exp(A_log) per head
};

}  // namespace ds
