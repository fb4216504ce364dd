// The building blocks of a forward step, each owning its packed weights: KDA, MLA and GQA
// mixers, dense SwiGLU and MoE feed-forward blocks. A step hands them the flattened batch
// (StepContext); each adds its output into the residual stream x.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "model/config.h"
#include "model/model.h"
#include "model/safetensors.h"

namespace ds {

// Where every token of the step belongs.
struct StepContext {
  const ForwardBatch* batch = nullptr;
  int num_tokens = 0;
  const int32_t* token_seq = nullptr;  // [num_tokens] index into batch->seqs
  const int32_t* token_pos = nullptr;  // [num_tokens] absolute position in its sequence
  ThreadPool* pool = nullptr;
  Arena* arena = nullptr;
  std::vector<std::vector<float>>* thread_scratch = nullptr;  // per thread, sized at allocate()
};

// Loading helpers shared by the layers: shape-checked, copied into aligned memory.
struct WeightLoader {
  const WeightStore& store;
  std::string prefix;  // e.g. "model.layers.3."

  PackedWeight linear(const std::string& name, int out, int in) const;
  // Several [out_i, in] linears of the same input stacked into one matmul.
  PackedWeight stacked(const std::vector<std::pair<std::string, int>>& names_out, int in) const;
  std::vector<float> vector_f32(const std::string& name, int64_t numel) const;
  const TensorView& raw(const std::string& name) const;
};

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

class MlaMixer {
 public:
  MlaMixer(const ModelConfig& c, const WeightLoader& w);
  size_t latent_dim() const { return size_t(L_ + R_); }
  // kv_pool: this layer's [num_blocks][block_size][L+R] latent cache.
  void forward(const StepContext& ctx, const float* h, float* x, float* kv_pool, int block_size) const;
  size_t temp_floats(int n) const;
  size_t weight_bytes() const;
  // Per-thread scratch for attention over up to max_ctx tokens.
  size_t scratch_floats(int max_ctx) const;

 private:
  int nh_, nope_, R_, L_, V_, hidden_;
  float eps_, scale_;
  PackedWeight q_proj_, kv_a_, o_proj_;
  std::vector<float> kv_norm_;
  std::vector<PackedWeight> k_absorb_;  // per head [L][nope]: q_nope -> latent
  std::vector<PackedWeight> v_up_;      // per head [V][L]: latent -> value
};

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

class DenseFfn {
 public:
  DenseFfn(const WeightLoader& w, const std::string& gate, const std::string& up, const std::string& down,
           int hidden, int inter);
  void forward(const StepContext& ctx, const float* h, float* x, int rows) const;
  size_t temp_floats(int n) const { return size_t(n) * size_t(3 * inter_); }
  size_t weight_bytes() const { return gate_up_.bytes() + down_.bytes(); }

 private:
  int hidden_, inter_;
  PackedWeight gate_up_, down_;
};

class MoeFfn {
 public:
  MoeFfn(const ModelConfig& c, const WeightLoader& w);
  void forward(const StepContext& ctx, const float* h, float* x) const;
  size_t temp_floats(int n) const;
  size_t weight_bytes() const;
  size_t decode_weight_bytes() const;  // shared experts + router + top-k's share of the routed

 private:
  MoeConfig m_;
  int hidden_;
  PackedWeight router_;
  std::vector<float> bias_;  // e_score_correction_bias (zeros when absent)
  std::vector<PackedWeight> w13_, w2_;
  std::vector<DenseFfn> shared_;
  void route(const float* logits, int32_t* ids, float* weights) const;
};

}  // namespace ds
