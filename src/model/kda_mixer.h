// Kimi Delta Attention: projections, short causal convs, the gated delta rule over a per-slot
// recurrent state (chunked form for prefill pieces, recurrence for short ones), output gate.
#pragma once
#include <cstddef>
#include <vector>

#include "kernels/matmul.h"
#include "model/config.h"
#include "model/step_context.h"
#include "model/weight_loader.h"

namespace ds {

// Where a layer keeps what speculative chunks need for rollback (model.h, StateRollback).
// Entry (slot s, position j) is at base + (s * positions + j) * stride; base already points at
// this layer's part.
struct KdaRollback {
  StateRollback mode = StateRollback::Lanes;
  int positions = 0;
  float* base = nullptr;  // lanes: states; replay: inputs (replay_floats() each)
  size_t stride = 0;
  float* at(int slot, int j) const { return base + (size_t(slot) * size_t(positions) + size_t(j)) * stride; }
};

class KdaMixer {
 public:
  KdaMixer(const ModelConfig& c, const WeightLoader& w);
  // Per slot state layout: [H][dk][dv] recurrent state, then [K-1][3*H*D] conv history.
  size_t state_floats() const;
  // states: this layer's state in slot 0; slot s is at states + s * slot_stride.
  void forward(const StepContext& ctx, const float* h, float* x, float* states, size_t slot_stride,
               const KdaRollback& rb) const;
  // Replay: what one speculative token keeps: conv input [3*H*D], k, v, g [H*D] each, beta [H].
  size_t replay_floats() const;
  // Replay commit: advances `state` (this layer's, one slot) through the first `keep` kept
  // tokens with the verify step's own arithmetic: the conv window, then each head's recurrence
  // (heads are independent: callers may run them on different threads). scratch: D floats.
  void replay_conv(float* state, const float* inputs, size_t stride, int keep) const;
  void replay_head(float* state, const float* inputs, size_t stride, int keep, int head, float* scratch) const;
  int num_heads() const { return H_; }
  size_t scratch_floats() const;
  size_t temp_floats(int n) const;
  size_t weight_bytes() const;
  void set_activation_dtype(ActivationDtype a) {
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
