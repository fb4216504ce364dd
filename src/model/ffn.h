// A layer's feed-forward block (dense SwiGLU, MoE) as the model's layer loop sees it. One
// virtual call per layer per step. A new kind implements this in its own file and registers
// its FfnKind in model/layer_registry.cpp.
#pragma once
#include <cstddef>

#include "core/activation_dtype.h"
#include "model/forward_profile.h"
#include "model/step_context.h"

namespace ds {

class Ffn {
 public:
  virtual ~Ffn() = default;
  // Adds the block's output for h into the residual x, over every row of the step.
  virtual void forward(const StepContext& ctx, const float* h, float* x) const = 0;
  virtual ForwardProfile::Part profile_part() const = 0;
  // Arena floats a step of n rows takes.
  virtual size_t temp_floats(int n) const = 0;
  virtual size_t weight_bytes() const = 0;
  // What one decode step reads (an MoE reads its routed experts' top-k share).
  virtual size_t decode_weight_bytes() const { return weight_bytes(); }
  virtual void set_activation_dtype(ActivationDtype a) = 0;
};

}  // namespace ds
