// An architecture's GGUF metadata ("llama.block_count", "kimi-linear.attention.kv_lora_rank", ...)
// to and from the config.json DeltaServe parses (model/config.h).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"

namespace ds {

class GgufFile;
class GgufWriter;

// general.architecture, checked to be one DeltaServe runs ("llama", "kimi-linear").
std::string gguf_architecture(const GgufFile& g);
// config.json for the file. Throws naming the file and the missing or contradictory key.
nlohmann::json gguf_arch_config(const GgufFile& g);
// Writes general.* and the architecture's keys for a parsed config (raw: the config.json it came
// from); returns the architecture name.
std::string gguf_write_arch_metadata(const ModelConfig& c, const nlohmann::json& raw, const std::string& name, GgufWriter& w);

}  // namespace ds
