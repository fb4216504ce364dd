// Dense SwiGLU feed-forward block: gate and up in one stacked matmul, then down.
#pragma once
#include <cstddef>
#include <string>

#include "kernels/matmul.h"
#include "model/ffn.h"
#include "model/step_context.h"
#include "model/weight_loader.h"

namespace ds {

// Final, so an MoE's shared experts (held by value) call it directly.
class DenseFfn final : public Ffn {
 public:
  DenseFfn(const WeightLoader& w, const std::string& gate, const std::string& up, const std::string& down,
           int hidden, int inter);
  // Over the first `rows` rows of h and x.
  void forward(const StepContext& ctx, const float* h, float* x, int rows) const;
  // Ffn: over every row of the step.
  void forward(const StepContext& ctx, const float* h, float* x) const override { forward(ctx, h, x, ctx.num_tokens); }
  ForwardProfile::Part profile_part() const override { return ForwardProfile::DenseFfn; }
  size_t temp_floats(int n) const override { return size_t(n) * size_t(3 * inter_); }
  size_t weight_bytes() const override { return gate_up_.bytes() + down_.bytes(); }
  void set_activation_dtype(ActivationDtype a) override {
    ds::set_activation_dtype(gate_up_, a);
    ds::set_activation_dtype(down_, a);
  }

 private:
  int hidden_, inter_;
  PackedWeight gate_up_, down_;
};

}  // namespace ds
