// Grouped-query attention with rotate-half RoPE over a paged K/V cache (the llama type).
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

class GqaMixer final : public Mixer {
 public:
  GqaMixer(const ModelConfig& c, const WeightLoader& w);
  // One KV head's row of one token: its key then its value in dtype; for fp8 then the key's and
  // the value's f32 scales (from a 4-byte aligned offset).
  size_t head_row_bytes(KvDtype dt) const;
  // One token's bytes in the cache: nkv head rows.
  size_t kv_row_bytes(KvDtype dt) const override;
  // kv_pool: this layer's cache, [num_blocks][nkv][block_size][head_row_bytes]: within a block
  // each KV head's rows are contiguous.
  void forward(const StepContext& ctx, const float* h, float* x, const LayerMemory& mem) const override;
  ForwardProfile::Part profile_part() const override { return ForwardProfile::Gqa; }
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
  size_t scratch_floats(int max_ctx) const;
  void set_activation_dtype(ActivationDtype a) override {
    ds::set_activation_dtype(qkv_, a);
    ds::set_activation_dtype(o_proj_, a);
    bf16_attention_ = a == ActivationDtype::BF16;
  }

 private:
  int nh_, nkv_, hd_, hidden_;
  float theta_;
  PackedWeight qkv_, o_proj_;
  // bf16 activations: decode attention over a bf16 cache forms its products in bf16 too
  // (PagedKv::bf16_products).
  bool bf16_attention_ = false;
  std::vector<float> inv_freq_;
};

}  // namespace ds
