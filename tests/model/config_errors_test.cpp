#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_writer.h"
#include "core/error.h"
#include "model/config.h"
#include "model/model.h"
#include "model_util.h"
#include "../support/remove_at_exit.h"

namespace ds {
namespace {

std::string error_of(const std::string& json) {
  try {
    parse_model_config(json, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, ErrorsNameTheProblem) {
  EXPECT_NE(error_of(R"({"model_type": "gpt2"})").find("unknown model_type 'gpt2'"), std::string::npos);
  EXPECT_NE(error_of(R"({"hidden_size": 8})").find("missing key 'model_type'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1, "vocab_size": 10})")
                .find("missing key 'intermediate_size'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model_type": "llama", "hidden_size": "8"})").find("'hidden_size' must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of("{nope").find("not valid JSON"), std::string::npos);
  // GQA's RoPE keeps a head's angles on the stack: head_dim is bounded.
  EXPECT_NE(error_of(R"({"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 1, "vocab_size": 10,
      "intermediate_size": 16, "num_attention_heads": 1, "head_dim": 1024})")
                .find("head_dim must be in [2, 512], got 1024"),
            std::string::npos)
      << error_of(R"({"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 1, "vocab_size": 10,
      "intermediate_size": 16, "num_attention_heads": 1, "head_dim": 1024})");
  const std::string kimi =
      R"({"model_type": "kimi_linear", "hidden_size": 8, "num_hidden_layers": 2, "vocab_size": 10,
          "intermediate_size": 16, "linear_attn_config": {"num_heads": 1, "head_dim": 8, "kda_layers": [1, 3]}})";
  EXPECT_NE(error_of(kimi).find("kda_layers entry 3"), std::string::npos) << error_of(kimi);
}

// A value nested a million levels deep once parsed, then overflowed the stack when the error
// for it was written (hidden_act's message dumps it; dump() recurses per level). It is refused
// while parsing, naming the limit.
TEST(ModelConfig, DeepNestingIsRefusedNamingTheLimit) {
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  for (const std::string& text :
       {R"({"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1, "vocab_size": 10, "intermediate_size": 16,
            "hidden_act": )" + deep + "}",
        R"({"model_type": )" + deep + "}", deep,
        R"({"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1, "vocab_size": 10, "intermediate_size": 16,
            "num_attention_heads": 1, "rope_scaling": )" + deep + "}"}) {
    const std::string e = error_of(text);
    EXPECT_NE(e.find("config.json: JSON nests deeper than 256 levels"), std::string::npos) << e.substr(0, 300);
  }
}

// Sizes are checked against their range as written, before anything is sized by them:
// num_hidden_layers 10^8 once made per-layer tables of 10^8 entries, and 2^32 + 1 was read as 1.
TEST(ModelConfig, SizesOutsideTheirRangeAreRefusedNamingTheRange) {
  auto llama = [](const std::string& key, const std::string& value) {
    nlohmann::json j = nlohmann::json::parse(R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
        "vocab_size": 512, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2})");
    j[key] = nlohmann::json::parse(value);
    return j.dump();
  };
  struct Case {
    std::string key, value, want;
  };
  for (const Case& c : std::vector<Case>{
           {"num_hidden_layers", "100000000", "key 'num_hidden_layers' is 100000000, outside [1, 1024]"},
           {"num_hidden_layers", "2147483647", "key 'num_hidden_layers' is 2147483647, outside [1, 1024]"},
           {"num_hidden_layers", "4294967297", "key 'num_hidden_layers' is 4294967297, outside [1, 1024]"},
           {"num_hidden_layers", "18446744073709551615", "key 'num_hidden_layers' is 18446744073709551615, outside"},
           {"num_hidden_layers", "-1", "key 'num_hidden_layers' is -1, outside [1, 1024]"},
           {"num_hidden_layers", "0", "key 'num_hidden_layers' is 0, outside [1, 1024]"},
           {"hidden_size", "1000000000", "key 'hidden_size' is 1000000000, outside [1, 65536]"},
           {"vocab_size", "2147483647", "key 'vocab_size' is 2147483647, outside [1, 16777216]"},
           {"intermediate_size", "4294967296", "key 'intermediate_size' is 4294967296, outside [1, 1048576]"},
           {"num_attention_heads", "100000000", "key 'num_attention_heads' is 100000000, outside [1, 1024]"},
           {"num_key_value_heads", "8", "key 'num_key_value_heads' is 8, outside [1, 4]"},
           {"max_position_embeddings", "4294967296", "key 'max_position_embeddings' is 4294967296, outside [0, 16777216]"},
           {"head_dim", "4294967298", "key 'head_dim' is 4294967298, too large for a size"},
           {"eos_token_id", "4294967296", "key 'eos_token_id' is 4294967296, outside [0, 16777215]"},
           {"eos_token_id", "[1, -5]", "key 'eos_token_id' is -5, outside [0, 16777215]"},
       }) {
    const std::string e = error_of(llama(c.key, c.value));
    EXPECT_NE(e.find("config.json: " + c.want), std::string::npos) << c.key << " = " << c.value << ": " << e;
  }
  const std::string kimi =
      R"({"model_type": "kimi_linear", "hidden_size": 8, "num_hidden_layers": 2, "vocab_size": 10,
          "intermediate_size": 16, "linear_attn_config": {"num_heads": 1, "head_dim": 8, "kda_layers": [1, 4294967297]}})";
  EXPECT_NE(error_of(kimi).find("kda_layers entry 4294967297 is not a layer number in [1, 2]"), std::string::npos)
      << error_of(kimi);
  const std::string experts =
      R"({"model_type": "kimi_linear", "hidden_size": 8, "num_hidden_layers": 1, "vocab_size": 10,
          "intermediate_size": 16, "linear_attn_config": {"num_heads": 1, "head_dim": 8, "kda_layers": [1]},
          "num_experts": 100000000, "num_experts_per_token": 1, "moe_intermediate_size": 4})";
  EXPECT_NE(error_of(experts).find("key 'num_experts' is 100000000, outside [0, 4096]"), std::string::npos)
      << error_of(experts);
}

TEST(ModelConfig, KimiLayerKindsFollowTheRealConvention) {
  const std::string j =
      R"({"model_type": "kimi_linear", "hidden_size": 8, "num_hidden_layers": 4, "vocab_size": 10,
          "intermediate_size": 16, "linear_attn_config": {"num_heads": 1, "head_dim": 8, "kda_layers": [1, 2, 4],
          "full_attn_layers": [3]}, "num_attention_heads": 1, "kv_lora_rank": 4, "qk_nope_head_dim": 2,
          "qk_rope_head_dim": 2, "v_head_dim": 2, "mla_use_nope": true, "q_lora_rank": null,
          "first_k_dense_replace": 1, "moe_layer_freq": 1, "num_experts": 4, "num_experts_per_token": 2,
          "moe_intermediate_size": 4})";
  ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.mixer, (std::vector<MixerKind>{MixerKind::Kda, MixerKind::Kda, MixerKind::Mla, MixerKind::Kda}));
  EXPECT_EQ(c.ffn, (std::vector<FfnKind>{FfnKind::Dense, FfnKind::Moe, FfnKind::Moe, FfnKind::Moe}));
}

TEST(ModelLoad, MissingTensorIsNamed) {
  const std::string src = test::preset_dir("tiny-hybrid", 1, "f32");
  const std::string dir = test::remove_at_exit(src + "-missing");
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(src + "/config.json", dir + "/config.json", std::filesystem::copy_options::overwrite_existing);
  {
    WeightStore store = WeightStore::open(src);
    SafetensorsWriter w;
    for (const auto& name : store.names()) {
      if (name == "model.layers.2.self_attn.kv_b_proj.weight") continue;
      const TensorView& t = store.get(name);
      w.add(name, t.dtype, t.shape, {static_cast<const std::byte*>(t.data), t.nbytes});
    }
    w.write(dir + "/model.safetensors");
  }
  try {
    Model::load(dir, 1);
    FAIL() << "load succeeded without a tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.2.self_attn.kv_b_proj.weight"), std::string::npos) << e.what();
  }
}

// Which configs carry positions decides whether --max-model-len may pass max_position_embeddings
// (engine_config.cpp): KDA + NoPE MLA (the bundled models, the tiny hybrid) carry none; Llama's
// GQA has RoPE. The bundled models' default context serves coding agents' long prompts.
TEST(ModelConfig, PositionalEncodingFollowsTheAttentionLayers) {
  const std::string root = DS_SOURCE_DIR;
  for (const char* m : {"/models/deltacoder", "/models/deltacoder-draft", "/tests/data/models/tiny-hybrid-f32"})
    EXPECT_FALSE(load_model_config(root + m).has_positional_encoding()) << m;
  EXPECT_TRUE(load_model_config(root + "/tests/data/models/tiny-llama-f32").has_positional_encoding());
  for (const char* m : {"/models/deltacoder", "/models/deltacoder-draft"})
    EXPECT_GE(load_model_config(root + m).max_position_embeddings, 131072) << m;
}

}  // namespace
}  // namespace ds
