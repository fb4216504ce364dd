#include "convert/presets.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "checkpoint/safetensors_writer.h"
#include "core/error.h"
#include "model/config.h"

namespace ds {

namespace {

using json = nlohmann::json;

json kimi_base(int hidden, int layers, const std::vector<int>& kda, const std::vector<int>& full, int vocab) {
  return json{{"model_type", "kimi_linear"},
              {"architectures", {"KimiLinearForCausalLM"}},
              {"hidden_size", hidden},
              {"num_hidden_layers", layers},
              {"vocab_size", vocab},
              {"rms_norm_eps", 1e-5},
              {"tie_word_embeddings", false},
              {"hidden_act", "silu"},
              {"torch_dtype", "bfloat16"},
              {"linear_attn_config", {{"kda_layers", kda}, {"full_attn_layers", full}}},
              {"q_lora_rank", nullptr},
              {"mla_use_nope", true},
              {"moe_router_activation_func", "sigmoid"},
              {"moe_renormalize", true}};
}

PresetSpec make(const std::string& name) {
  PresetSpec p;
  p.name = name;
  json j;
  if (name == "tiny-hybrid") {
    // Every feature in a few MB: KDA, MLA, a dense layer, MoE with grouped routing and a shared expert.
    p.vocab_size = 512;
    j = kimi_base(64, 4, {1, 2, 4}, {3}, p.vocab_size);
    j["linear_attn_config"].update({{"num_heads", 2}, {"head_dim", 32}, {"short_conv_kernel_size", 4}});
    j.update({{"num_attention_heads", 2}, {"num_key_value_heads", 2}, {"kv_lora_rank", 32},
              {"qk_nope_head_dim", 16}, {"qk_rope_head_dim", 8}, {"v_head_dim", 16},
              {"intermediate_size", 128}, {"first_k_dense_replace", 1}, {"moe_layer_freq", 1},
              {"num_experts", 4}, {"num_experts_per_token", 2}, {"num_shared_experts", 1},
              {"moe_intermediate_size", 32}, {"routed_scaling_factor", 2.5}, {"use_grouped_topk", true},
              {"num_expert_group", 2}, {"topk_group", 1}});
  } else if (name == "bench-100m") {
    // ~105M parameters, ~60M active per token: 3 KDA : 1 MLA, dense first layer, 8-expert MoE.
    p.vocab_size = 8192;
    j = kimi_base(768, 12, {1, 2, 3, 5, 6, 7, 9, 10, 11}, {4, 8, 12}, p.vocab_size);
    j["linear_attn_config"].update({{"num_heads", 12}, {"head_dim", 64}, {"short_conv_kernel_size", 4}});
    j.update({{"num_attention_heads", 12}, {"num_key_value_heads", 12}, {"kv_lora_rank", 256},
              {"qk_nope_head_dim", 64}, {"qk_rope_head_dim", 32}, {"v_head_dim", 64},
              {"intermediate_size", 2048}, {"first_k_dense_replace", 1}, {"moe_layer_freq", 1},
              {"num_experts", 8}, {"num_experts_per_token", 2}, {"num_shared_experts", 1},
              {"moe_intermediate_size", 256}, {"routed_scaling_factor", 2.5}, {"use_grouped_topk", false},
              {"num_expert_group", 1}, {"topk_group", 1}});
  } else if (name == "bench-draft") {
    // A draft for bench-100m (same layer types and vocabulary), about 1/16 of its decode bytes.
    p.vocab_size = 8192;
    j = kimi_base(256, 3, {1, 2}, {3}, p.vocab_size);
    j["linear_attn_config"].update({{"num_heads", 4}, {"head_dim", 64}, {"short_conv_kernel_size", 4}});
    j.update({{"num_attention_heads", 4}, {"num_key_value_heads", 4}, {"kv_lora_rank", 128},
              {"qk_nope_head_dim", 64}, {"qk_rope_head_dim", 32}, {"v_head_dim", 64},
              {"intermediate_size", 512}, {"first_k_dense_replace", 1}, {"moe_layer_freq", 1},
              {"num_experts", 4}, {"num_experts_per_token", 2}, {"num_shared_experts", 1},
              {"moe_intermediate_size", 128}, {"routed_scaling_factor", 2.5}, {"use_grouped_topk", false},
              {"num_expert_group", 1}, {"topk_group", 1}});
  } else if (name == "bench-draft-dense") {
    // A draft for bench-100m-dense (llama, same vocabulary), about 1/16 of its decode bytes.
    p.vocab_size = 8192;
    j = json{{"model_type", "llama"},
             {"architectures", {"LlamaForCausalLM"}},
             {"hidden_size", 256},
             {"intermediate_size", 768},
             {"num_hidden_layers", 4},
             {"num_attention_heads", 4},
             {"num_key_value_heads", 2},
             {"vocab_size", p.vocab_size},
             {"rms_norm_eps", 1e-5},
             {"rope_theta", 10000.0},
             {"max_position_embeddings", 8192},
             {"tie_word_embeddings", false},
             {"hidden_act", "silu"},
             {"torch_dtype", "bfloat16"}};
  } else if (name == "tiny-llama" || name == "bench-100m-dense") {
    const bool tiny = name == "tiny-llama";
    p.vocab_size = tiny ? 512 : 8192;
    j = json{{"model_type", "llama"},
             {"architectures", {"LlamaForCausalLM"}},
             {"hidden_size", tiny ? 64 : 768},
             {"intermediate_size", tiny ? 128 : 2048},
             {"num_hidden_layers", tiny ? 2 : 12},
             {"num_attention_heads", tiny ? 4 : 12},
             {"num_key_value_heads", tiny ? 2 : 4},
             {"vocab_size", p.vocab_size},
             {"rms_norm_eps", 1e-5},
             {"rope_theta", 10000.0},
             {"max_position_embeddings", 8192},
             {"tie_word_embeddings", false},
             {"hidden_act", "silu"},
             {"torch_dtype", "bfloat16"}};
  } else {
    std::string known;
    for (auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error("unknown preset '" + name + "' (known: " + known + ")");
  }
  p.config_json = j.dump(2);
  return p;
}

struct Writer {
  SafetensorsWriter out;
  std::mt19937_64 rng;
  DType dtype;

  void normal(const std::string& name, std::vector<int64_t> shape, float std, DType dt) {
    size_t n = 1;
    for (auto d : shape) n *= size_t(d);
    std::normal_distribution<float> nd(0.f, std);
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng);
    out.add_f32_as(name, dt, std::move(shape), v);
  }
  void constant(const std::string& name, std::vector<int64_t> shape, float value, DType dt) {
    size_t n = 1;
    for (auto d : shape) n *= size_t(d);
    std::vector<float> v(n, value);
    out.add_f32_as(name, dt, std::move(shape), v);
  }
  void linear(const std::string& name, int o, int i) { normal(name, {o, i}, 1.f / std::sqrt(float(i)) * 0.5f, dtype); }
  void norm(const std::string& name, int n) { constant(name, {n}, 1.f, dtype); }
};

}  // namespace

std::vector<std::string> preset_names() {
  return {"tiny-hybrid", "tiny-llama", "bench-100m", "bench-100m-dense", "bench-draft", "bench-draft-dense"};
}

PresetSpec preset(const std::string& name) { return make(name); }

void write_preset_model(const PresetSpec& spec, uint64_t seed, DType dtype, const std::string& dir,
                        int32_t bos_id, int32_t eos_id) {
  DS_CHECK(dtype == DType::BF16 || dtype == DType::F32, "make-model: --dtype must be bf16 or f32");
  json j = json::parse(spec.config_json);
  j["bos_token_id"] = bos_id;
  j["eos_token_id"] = eos_id;
  const ModelConfig c = parse_model_config(j.dump(), "preset " + spec.name);
  Writer w{{}, std::mt19937_64(seed), dtype};
  const int H = c.hidden_size;
  w.normal("model.embed_tokens.weight", {c.vocab_size, H}, 1.f, dtype);
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    w.norm(p + "input_layernorm.weight", H);
    w.norm(p + "post_attention_layernorm.weight", H);
    switch (c.mixer[size_t(i)]) {
      case MixerKind::Kda: {
        const int nh = c.kda.num_heads, hd = c.kda.head_dim, HD = nh * hd, K = c.kda.conv_kernel;
        for (const char* n : {"q_proj", "k_proj", "v_proj"}) w.linear(p + "self_attn." + n + ".weight", HD, H);
        for (const char* n : {"q_conv1d", "k_conv1d", "v_conv1d"})
          w.normal(p + "self_attn." + n + ".weight", {HD, 1, K}, 0.5f, DType::F32);
        w.linear(p + "self_attn.f_a_proj.weight", hd, H);
        w.linear(p + "self_attn.f_b_proj.weight", HD, hd);
        // dt in [1e-3, 1e-1] log-uniform, stored as its inverse softplus; A in [1, 16].
        std::uniform_real_distribution<float> u(0.f, 1.f);
        std::vector<float> dtb(static_cast<size_t>(HD)), alog(static_cast<size_t>(nh));
        for (auto& v : dtb) {
          const float dt = std::exp(std::log(1e-3f) + u(w.rng) * (std::log(1e-1f) - std::log(1e-3f)));
          v = dt + std::log(-std::expm1(-dt));
        }
        for (auto& v : alog) v = std::log(1.f + 15.f * u(w.rng));
        w.out.add_f32_as(p + "self_attn.dt_bias", DType::F32, {HD}, dtb);
        w.out.add_f32_as(p + "self_attn.A_log", DType::F32, {1, 1, nh, 1}, alog);
        w.linear(p + "self_attn.b_proj.weight", nh, H);
        w.linear(p + "self_attn.g_a_proj.weight", hd, H);
        w.linear(p + "self_attn.g_b_proj.weight", HD, hd);
        w.norm(p + "self_attn.o_norm.weight", hd);
        w.linear(p + "self_attn.o_proj.weight", H, HD);
        break;
      }
      case MixerKind::Mla: {
        const auto& m = c.mla;
        w.linear(p + "self_attn.q_proj.weight", m.num_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim), H);
        w.linear(p + "self_attn.kv_a_proj_with_mqa.weight", m.kv_lora_rank + m.qk_rope_head_dim, H);
        w.norm(p + "self_attn.kv_a_layernorm.weight", m.kv_lora_rank);
        w.linear(p + "self_attn.kv_b_proj.weight", m.num_heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank);
        w.linear(p + "self_attn.o_proj.weight", H, m.num_heads * m.v_head_dim);
        break;
      }
      case MixerKind::Gqa: {
        const auto& g = c.gqa;
        w.linear(p + "self_attn.q_proj.weight", g.num_heads * g.head_dim, H);
        w.linear(p + "self_attn.k_proj.weight", g.num_kv_heads * g.head_dim, H);
        w.linear(p + "self_attn.v_proj.weight", g.num_kv_heads * g.head_dim, H);
        w.linear(p + "self_attn.o_proj.weight", H, g.num_heads * g.head_dim);
        break;
      }
    }
    if (c.ffn[size_t(i)] == FfnKind::Moe) {
      const auto& m = c.moe;
      w.linear(p + "block_sparse_moe.gate.weight", m.num_experts, H);
      w.normal(p + "block_sparse_moe.gate.e_score_correction_bias", {m.num_experts}, 0.05f, DType::F32);
      for (int e = 0; e < m.num_experts; ++e) {
        const std::string q = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
        w.linear(q + "w1.weight", m.intermediate_size, H);
        w.linear(q + "w3.weight", m.intermediate_size, H);
        w.linear(q + "w2.weight", H, m.intermediate_size);
      }
      if (m.num_shared_experts > 0) {
        const int I = m.intermediate_size * m.num_shared_experts;
        w.linear(p + "block_sparse_moe.shared_experts.gate_proj.weight", I, H);
        w.linear(p + "block_sparse_moe.shared_experts.up_proj.weight", I, H);
        w.linear(p + "block_sparse_moe.shared_experts.down_proj.weight", H, I);
      }
    } else {
      w.linear(p + "mlp.gate_proj.weight", c.intermediate_size, H);
      w.linear(p + "mlp.up_proj.weight", c.intermediate_size, H);
      w.linear(p + "mlp.down_proj.weight", H, c.intermediate_size);
    }
  }
  w.norm("model.norm.weight", H);
  if (!c.tie_word_embeddings) w.linear("lm_head.weight", c.vocab_size, H);
  w.out.set_metadata("format", "pt");
  w.out.set_metadata("generator", "deltaserve make-model --preset " + spec.name + " --seed " + std::to_string(seed));
  std::filesystem::create_directories(dir);
  w.out.write(dir + "/model.safetensors");
  std::ofstream(dir + "/config.json") << j.dump(2) << "\n";
  json gen{{"bos_token_id", bos_id}, {"eos_token_id", eos_id}, {"do_sample", false}};
  std::ofstream(dir + "/generation_config.json") << gen.dump(2) << "\n";
}

}  // namespace ds
