// Grouped-query attention with rotate-half RoPE over a paged K/V cache (the llama type).
#pragma once
#include <cstddef>
#include <vector>

#include "kernels/matmul.h"
#include "model/config.h"
#include "model/step_context.h"
#include "model/weight_loader.h"

namespace ds {

class GqaMixer {
 public:
  GqaMixer(const ModelConfig& c, const WeightLoader& w);
  size_t kv_floats_per_token() const { return size_t(2 * nkv_ * hd_); }
  // kv_pool: [num_blocks][block_size][2][nkv*hd] (keys then values of a token)
  void forward(const StepContext& ctx, const float* h, float* x, float* kv_pool, int block_size) const;
  size_t temp_floats(int n) const;
  size_t weight_bytes() const;
  size_t scratch_floats(int max_ctx) const;

 private:
  int nh_, nkv_, hd_, hidden_;
  float theta_;
  PackedWeight qkv_, o_proj_;
  std::vector<float> inv_freq_;
};

}  // namespace ds
