// The configuration of a parallel drafter (model_type "deltaserve_dspark"; tools/train/dspark.py
// writes it): which target layers it reads, its block and its layers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ds {

struct ModelConfig;

inline constexpr const char* kDSparkModelType = "deltaserve_dspark";

struct DSparkConfig {
  int hidden_size = 0;
  int vocab_size = 0;
  std::vector<int> target_layer_ids;  // 0-based layers of the target whose outputs it fuses
  int num_layers = 1;
  int num_heads = 0;
  int head_dim = 0;
  int intermediate_size = 0;
  int block_size = 0;       // draft slots per round: the most tokens one round proposes
  int markov_rank = 0;
  int context_window = 0;   // context features a round attends (the last W committed positions)
  // The context copy term (spec_decode/dspark_model.h): copy_scale and copy_confidence per slot.
  bool context_copy = false;
  double rope_theta = 10000.0;
  float rms_norm_eps = 1e-6f;
  std::vector<int32_t> eos_token_ids;
  int32_t bos_token_id = -1;
  int qkv_width() const { return num_heads * head_dim; }
};

// Whether dir's config.json names a parallel drafter (an unreadable one is not: the model
// loader then gives its own error).
bool is_dspark_dir(const std::string& dir);
// Parses dir/config.json; throws ds::Error naming the file and key.
DSparkConfig load_dspark_config(const std::string& dir);
// Start-up checks against the target and the draft length: one clear line each for layers the
// target lacks, another hidden size or vocabulary, other special tokens, or K beyond the block.
void check_dspark_fits(const DSparkConfig& d, const ModelConfig& target, int k);

}  // namespace ds
