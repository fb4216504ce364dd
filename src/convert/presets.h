// Named model shapes that `deltaserve make-model` writes with seeded random weights: small ones
// for tests, ~100M-parameter ones for benchmarks (a Llama shape other engines run unchanged).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace ds {

struct PresetSpec {
  std::string name;
  std::string config_json;  // config.json text; vocab_size and token ids filled by write_preset
  int vocab_size = 0;
};

std::vector<std::string> preset_names();
// Throws ds::Error listing the known names.
PresetSpec preset(const std::string& name);

// Writes config.json and model.safetensors for the preset into dir with weights drawn from a
// generator seeded by seed (same seed, same bytes). Special token ids go into the config.
// Big-matrix weights in `dtype` (bf16 or f32); conv, gate-bias and A_log tensors are always F32,
// as in real checkpoints.
void write_preset_model(const PresetSpec& spec, uint64_t seed, DType dtype, const std::string& dir,
                        int32_t bos_id, int32_t eos_id);

}  // namespace ds
