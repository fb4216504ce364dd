// Model folders for the thread-rank tests: two tiny shapes whose every split size (heads, KV
// heads, FFN widths, routed experts, vocabulary) divides by 3, 4 and 8 ranks, and whose every
// row-parallel input (o_proj, down_proj) is a whole number of 32-value quantization blocks on
// each rank, so one folder serves every layout; in each weight format: f32, bf16, and q8_0,
// q4_0 and mxfp4 quantized from the f32 one (`deltaserve quantize`'s path). Written once per
// test process into a temp folder that is removed when the process ends (remove_at_exit).
#pragma once
#include <unistd.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "../support/remove_at_exit.h"
#include "convert/presets.h"
#include "convert/quantize.h"
#include "core/error.h"

namespace ds::test {

// hybrid: KDA (layers 1, 2, 4), MLA (layer 3), a dense first layer and MoE after it (grouped
// routing, a shared expert); llama: GQA, 48 query heads over 24 KV heads. Both 64 wide, with a
// vocabulary of 384 (24 x 16).
inline PresetSpec rank_test_shape(const std::string& shape) {
  using json = nlohmann::json;
  PresetSpec p;
  p.name = "rank-test-" + shape;
  p.vocab_size = 384;
  json j;
  if (shape == "hybrid") {
    j = json{{"model_type", "kimi_linear"}, {"architectures", {"KimiLinearForCausalLM"}}, {"hidden_size", 64},
             {"num_hidden_layers", 4}, {"vocab_size", p.vocab_size}, {"rms_norm_eps", 1e-5}, {"tie_word_embeddings", false},
             {"hidden_act", "silu"}, {"torch_dtype", "bfloat16"},
             {"linear_attn_config", {{"kda_layers", {1, 2, 4}}, {"full_attn_layers", {3}}, {"num_heads", 24}, {"head_dim", 32},
                                     {"short_conv_kernel_size", 4}}},
             {"q_lora_rank", nullptr}, {"mla_use_nope", true}, {"moe_router_activation_func", "sigmoid"},
             {"moe_renormalize", true}, {"num_attention_heads", 24}, {"num_key_value_heads", 24}, {"kv_lora_rank", 32},
             {"qk_nope_head_dim", 16}, {"qk_rope_head_dim", 8}, {"v_head_dim", 32}, {"intermediate_size", 768},
             {"first_k_dense_replace", 1}, {"moe_layer_freq", 1}, {"num_experts", 24}, {"num_experts_per_token", 2},
             // the shared expert is 96 x 8 = 768 wide: 96 per rank at 8 ranks
             {"num_shared_experts", 8}, {"moe_intermediate_size", 96}, {"routed_scaling_factor", 2.5},
             {"use_grouped_topk", true}, {"num_expert_group", 2}, {"topk_group", 1}};
  } else if (shape == "llama") {
    j = json{{"model_type", "llama"}, {"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 64},
             {"intermediate_size", 768}, {"num_hidden_layers", 2}, {"num_attention_heads", 48}, {"num_key_value_heads", 24},
             {"head_dim", 16}, {"vocab_size", p.vocab_size}, {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0},
             {"max_position_embeddings", 8192}, {"tie_word_embeddings", false}, {"hidden_act", "silu"},
             {"torch_dtype", "bfloat16"}};
  } else {
    throw Error("rank_test_shape: unknown shape " + shape);
  }
  p.config_json = j.dump(2);
  return p;
}

class RankModels {
 public:
  static RankModels& get() {
    static RankModels m;
    return m;
  }
  // The folder of `shape` in `format` (f32, bf16, q8_0, q4_0, mxfp4), written on first use.
  std::string dir(const std::string& shape, const std::string& format) {
    const std::string d = root_ + "/" + shape + "-" + format;
    if (made_.count(d)) return d;
    if (format == "f32" || format == "bf16") {
      write_preset_model(rank_test_shape(shape), 7, format == "f32" ? DType::F32 : DType::BF16, d, 383, 383);
    } else {
      QuantizeOptions o;
      o.format = format == "q8_0" ? QuantFormat::Q8_0 : format == "q4_0" ? QuantFormat::Q4_0 : QuantFormat::MXFP4;
      DS_CHECK(format == "q8_0" || format == "q4_0" || format == "mxfp4", "rank models: unknown format " + format);
      quantize_checkpoint(dir(shape, "f32"), d, o);
    }
    made_[d] = true;
    return d;
  }

 private:
  RankModels()
      : root_(remove_at_exit(
            (std::filesystem::temp_directory_path() / ("ds-rank-models-" + std::to_string(::getpid()))).string())) {}
  std::string root_;
  std::map<std::string, bool> made_;
};

}  // namespace ds::test
