// Multi-head latent attention (Kimi-Linear's full-attention layers, no positional encoding):
// a paged cache of the latent [c | k_pe] per token, absorbed kv_b_proj in attention.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "core/kv_dtype.h"
#include "kernels/matmul.h"
#include "model/config.h"
#include "model/mixer.h"
#include "model/step_context.h"
#include "model/weight_loader.h"

namespace ds {

class MlaMixer final : public Mixer {
 public:
  MlaMixer(const ModelConfig& c, const WeightLoader& w);
  size_t latent_dim() const { return size_t(L_ + R_); }
  // One token's row in the cache: the latent [c | k_pe] in dtype; for fp8 then its f32 scale
  // (from a 4-byte aligned offset).
  size_t kv_row_bytes(KvDtype dt) const override;
  // kv_pool: this layer's [num_blocks][block_size][kv_row_bytes] latent cache.
  void forward(const StepContext& ctx, const float* h, float* x, const LayerMemory& mem) const override;
  ForwardProfile::Part profile_part() const override { return ForwardProfile::Mla; }
  size_t temp_floats(int n) const;
  // What decode context parallel adds: arena floats for n rows, and per-thread scratch.
  size_t dcp_temp_floats(int n, const AttentionShard& dcp) const;
  size_t dcp_scratch_floats(const AttentionShard& dcp, int max_ctx) const;
  size_t weight_bytes() const override;
  // Mixer: the projections' temporaries and attention's scratch, with decode context parallel's.
  size_t step_temp_floats(int n, const AttentionShard& dcp) const override { return temp_floats(n) + dcp_temp_floats(n, dcp); }
  size_t step_scratch_floats(int max_ctx, const AttentionShard& dcp) const override {
    return std::max(scratch_floats(max_ctx), dcp_scratch_floats(dcp, max_ctx));
  }
  // Per-thread scratch for attention over up to max_ctx tokens.
  size_t scratch_floats(int max_ctx) const;
  void set_activation_dtype(ActivationDtype a) override {
    for (PackedWeight* w : {&q_proj_, &kv_a_, &o_proj_}) ds::set_activation_dtype(*w, a);
    for (PackedWeight& w : k_absorb_) ds::set_activation_dtype(w, a);
    for (PackedWeight& w : v_up_) ds::set_activation_dtype(w, a);
    bf16_attention_ = a == ActivationDtype::BF16;
  }

 private:
  int nh_, nope_, R_, L_, V_, hidden_;
  float eps_, scale_;
  PackedWeight q_proj_, kv_a_, o_proj_;
  // bf16 activations: decode attention over a bf16 cache forms its products in bf16 too
  // (PagedKv::bf16_products).
  bool bf16_attention_ = false;
  std::vector<float> kv_norm_;
  std::vector<PackedWeight> k_absorb_;  // per head [L][nope]: q_nope -> latent
  std::vector<PackedWeight> v_up_;      // per head [V][L]: latent -> value
};

}  // namespace ds
