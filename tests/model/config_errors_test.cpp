#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "model/config.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "model_util.h"

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
// for it was written (dump() recurses per level). It is refused while parsing, naming the limit.
TEST(ModelConfig, DeepNestingIsRefusedNamingTheLimit) {
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  for (const std::string& text :
       {R"({"model_type": "llama", "hidden_act": )" + deep + "}", R"({"model_type": )" + deep + "}", deep,
        R"({"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1, "vocab_size": 10, "intermediate_size": 16,
            "num_attention_heads": 1, "rope_scaling": )" + deep + "}"}) {
    const std::string e = error_of(text);
    EXPECT_NE(e.find("config.json: JSON nests deeper than 256 levels"), std::string::npos) << e.substr(0, 300);
  }
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
  const std::string dir = src + "-missing";
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

}  // namespace
}  // namespace ds
