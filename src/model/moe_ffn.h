// Mixture of experts: sigmoid router with grouped top-k and score-correction bias, rows grouped
// by expert so each expert's weights are read once per step, plus shared experts.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/matmul.h"
#include "model/config.h"
#include "model/dense_ffn.h"
#include "model/ffn.h"
#include "model/step_context.h"
#include "model/weight_loader.h"

namespace ds {

class MoeFfn final : public Ffn {
 public:
  MoeFfn(const ModelConfig& c, const WeightLoader& w);
  void forward(const StepContext& ctx, const float* h, float* x) const override;
  ForwardProfile::Part profile_part() const override { return ForwardProfile::Moe; }
  size_t temp_floats(int n) const override;
  size_t weight_bytes() const override;
  size_t decode_weight_bytes() const override;  // shared experts + router + top-k's share of the routed
  void set_activation_dtype(ActivationDtype a) override {
    ds::set_activation_dtype(router_, a);
    for (PackedWeight& w : w13_) ds::set_activation_dtype(w, a);
    for (PackedWeight& w : w2_) ds::set_activation_dtype(w, a);
    for (DenseFfn& f : shared_) f.set_activation_dtype(a);
  }

 private:
  MoeConfig m_;
  int hidden_;
  PackedWeight router_;
  std::vector<float> bias_;  // e_score_correction_bias (zeros when absent)
  int first_expert_ = 0, end_expert_ = 0;  // the experts this shard holds
  std::vector<PackedWeight> w13_, w2_;     // theirs, from first_expert_
  std::vector<DenseFfn> shared_;
  void route(const float* logits, int32_t* ids, float* weights) const;
  // Up to this many (token, expert) pairs in a step, experts run side by side (forward()).
  static constexpr int kSideBySideMaxPairs = 128;
};

}  // namespace ds
