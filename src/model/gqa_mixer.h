// Grouped-query attention with rotate-half RoPE over a paged K/V cache (the llama type).
#pragma once
#include <cstddef>
#include <vector>

#include "core/kv_dtype.h"
#include "kernels/matmul.h"
#include "model/config.h"
#include "model/step_context.h"
#include "model/weight_loader.h"

namespace ds {

class GqaMixer {
 public:
  GqaMixer(const ModelConfig& c, const WeightLoader& w);
  // One token's row in the cache: keys of every KV head, then values, in dtype; for fp8 then
  // the f32 scales of the nkv key rows and the nkv value rows (from a 4-byte aligned offset).
  size_t kv_row_bytes(KvDtype dt) const;
  // kv_pool: this layer's [num_blocks][block_size][kv_row_bytes] cache.
  void forward(const StepContext& ctx, const float* h, float* x, std::byte* kv_pool, int block_size, KvDtype dt) const;
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
