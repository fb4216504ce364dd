// Model configuration read from a Hugging Face config.json, for the two model types DeltaServe
// runs: `kimi_linear` (KDA + MLA + MoE hybrid) and `llama` (GQA + RoPE, dense SwiGLU).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ds {

// The largest sizes a config may give (config.json, or a GGUF file's metadata), far above any
// real model's. Counts are checked against them before anything is sized by them: per-layer
// tables are made before any weight is read, so an unchecked num_hidden_layers of 10^8 cost
// gigabytes before the first missing tensor was found.
inline constexpr int kMaxConfigLayers = 1024;
inline constexpr int kMaxConfigHiddenSize = 1 << 16;
inline constexpr int kMaxConfigIntermediateSize = 1 << 20;
inline constexpr int kMaxConfigVocabSize = 1 << 24;  // tokenizer.json's ids stop there too
inline constexpr int kMaxConfigHeads = 1024;
inline constexpr int kMaxConfigHeadDim = 512;
inline constexpr int kMaxConfigLoraRank = 1 << 16;
inline constexpr int kMaxConfigExperts = 4096;
inline constexpr int kMaxConfigPositions = 1 << 24;

enum class ModelType { KimiLinear, Llama };
enum class MixerKind { Kda, Mla, Gqa };
enum class FfnKind { Dense, Moe };

struct KdaConfig {
  int num_heads = 0;
  int head_dim = 0;
  int conv_kernel = 4;  // short_conv_kernel_size
};

struct MlaConfig {
  int num_heads = 0;          // num_attention_heads
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  bool use_nope = true;       // mla_use_nope: no rotary embedding on k_pe / q_pe
};

struct GqaConfig {
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float rope_theta = 10000.f;
};

struct MoeConfig {
  int num_experts = 0;
  int experts_per_token = 0;
  int num_shared_experts = 0;
  int intermediate_size = 0;      // moe_intermediate_size
  bool renormalize = true;
  float routed_scaling_factor = 1.f;
  bool use_grouped_topk = false;
  int num_expert_group = 1;
  int topk_group = 1;
};

struct ModelConfig {
  ModelType type = ModelType::KimiLinear;
  std::string model_type;     // as written in config.json
  int hidden_size = 0;
  int num_layers = 0;
  int vocab_size = 0;
  int intermediate_size = 0;  // dense FFN width
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = false;
  // 0 = unbounded. A model with positional encoding (has_positional_encoding) cannot serve past
  // it; for one without, it is only the default context (engine_config.cpp warns above it).
  int max_position_embeddings = 0;
  std::vector<int32_t> eos_token_ids;
  int32_t bos_token_id = -1;

  std::vector<MixerKind> mixer;  // per layer (0-based)
  std::vector<FfnKind> ffn;      // per layer
  KdaConfig kda;
  MlaConfig mla;
  GqaConfig gqa;
  MoeConfig moe;
  int first_k_dense_replace = 0;
  int moe_layer_freq = 1;

  int num_layers_of(MixerKind k) const;
  // Whether any attention layer encodes absolute positions (GQA's RoPE; MLA only without
  // mla_use_nope, which config parsing refuses today). Such a model saw no position past
  // max_position_embeddings in training, so serving beyond it is refused; KDA and NoPE MLA carry
  // no position at all, so for them max_position_embeddings bounds nothing the weights depend on.
  bool has_positional_encoding() const;
};

// Parses config.json text; `where` names the file in errors. Throws ds::Error naming the key,
// and for a size out of range (see the bounds above) the range.
ModelConfig parse_model_config(const std::string& json_text, const std::string& where);
ModelConfig load_model_config(const std::string& dir);

}  // namespace ds
