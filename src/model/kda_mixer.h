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

class KdaMixer {
 public:
  KdaMixer(const ModelConfig& c, const WeightLoader& w);
  // Per slot state layout: [H][dk][dv] recurrent state, then [K-1][3*H*D] conv history.
  size_t state_floats() const;
  // states: this layer's state in slot 0; slot s is at states + s * slot_stride.
  void forward(const StepContext& ctx, const float* h, float* x, float* states, size_t slot_stride) const;
  size_t scratch_floats() const;
  size_t temp_floats(int n) const;
  size_t weight_bytes() const;

 private:
  int H_, D_, K_, hidden_;
  float eps_;
  PackedWeight in_proj_;   // [q | k | v | f_a | g_a | b]
  PackedWeight f_b_, g_b_, o_proj_;
  std::vector<float> conv_w_;  // [K][3*H*D] tap-major
  std::vector<float> dt_bias_, a_log_, o_norm_;
};

}  // namespace ds
