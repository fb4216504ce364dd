#include "model/config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/json_parse.h"
#include "model/gguf_file.h"
#include "model/gguf_model.h"
#include "model/model_files.h"

namespace ds {

namespace {

using json = nlohmann::json;

struct Reader {
  const json& j;
  std::string where;

  const json& at(const json& obj, const char* key, const std::string& path) const {
    auto it = obj.find(key);
    DS_CHECK(it != obj.end() && !it->is_null(), where + ": missing key '" + path + key + "'");
    return *it;
  }
  int integer(const json& obj, const char* key, const std::string& path = "") const {
    const json& v = at(obj, key, path);
    DS_CHECK(v.is_number_integer(), where + ": key '" + path + key + "' must be an integer, got " + v.dump());
    return v.get<int>();
  }
  int integer_or(const json& obj, const char* key, int dflt) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return dflt;
    return integer(obj, key);
  }
  double number(const json& obj, const char* key) const {
    const json& v = at(obj, key, "");
    DS_CHECK(v.is_number(), where + ": key '" + std::string(key) + "' must be a number, got " + v.dump());
    return v.get<double>();
  }
  double number_or(const json& obj, const char* key, double dflt) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return dflt;
    return number(obj, key);
  }
  bool boolean_or(const json& obj, const char* key, bool dflt) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return dflt;
    DS_CHECK(it->is_boolean(), where + ": key '" + std::string(key) + "' must be true or false, got " + it->dump());
    return it->get<bool>();
  }
  void positive(int v, const char* key) const {
    DS_CHECK(v > 0, where + ": key '" + std::string(key) + "' must be > 0, got " + std::to_string(v));
  }
};

std::vector<int32_t> token_ids(const json& j, const char* key) {
  std::vector<int32_t> out;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return out;
  if (it->is_number_integer()) out.push_back(it->get<int32_t>());
  else if (it->is_array())
    for (auto& v : *it)
      if (v.is_number_integer()) out.push_back(v.get<int32_t>());
  return out;
}

void parse_common(const Reader& r, ModelConfig& c) {
  const json& j = r.j;
  c.hidden_size = r.integer(j, "hidden_size");
  c.num_layers = r.integer(j, "num_hidden_layers");
  c.vocab_size = r.integer(j, "vocab_size");
  c.intermediate_size = r.integer(j, "intermediate_size");
  r.positive(c.hidden_size, "hidden_size");
  r.positive(c.num_layers, "num_hidden_layers");
  r.positive(c.vocab_size, "vocab_size");
  r.positive(c.intermediate_size, "intermediate_size");
  c.rms_norm_eps = float(r.number_or(j, "rms_norm_eps", 1e-6));
  c.tie_word_embeddings = r.boolean_or(j, "tie_word_embeddings", false);
  c.max_position_embeddings = r.integer_or(j, "max_position_embeddings", 0);
  c.eos_token_ids = token_ids(j, "eos_token_id");
  auto bos = token_ids(j, "bos_token_id");
  c.bos_token_id = bos.empty() ? -1 : bos[0];
  if (auto it = j.find("hidden_act"); it != j.end() && !it->is_null())
    DS_CHECK(*it == "silu", r.where + ": hidden_act " + it->dump() + " is not supported (only \"silu\")");
}

void parse_kimi(const Reader& r, ModelConfig& c) {
  const json& j = r.j;
  const json& la = r.at(j, "linear_attn_config", "");
  DS_CHECK(la.is_object(), r.where + ": 'linear_attn_config' must be an object");
  c.kda.num_heads = r.integer(la, "num_heads", "linear_attn_config.");
  c.kda.head_dim = r.integer(la, "head_dim", "linear_attn_config.");
  c.kda.conv_kernel = r.integer_or(la, "short_conv_kernel_size", 4);
  r.positive(c.kda.num_heads, "linear_attn_config.num_heads");
  r.positive(c.kda.head_dim, "linear_attn_config.head_dim");
  DS_CHECK(c.kda.head_dim <= 512, r.where + ": linear_attn_config.head_dim must be <= 512, got " + std::to_string(c.kda.head_dim));
  DS_CHECK(c.kda.conv_kernel >= 1 && c.kda.conv_kernel <= 8,
           r.where + ": linear_attn_config.short_conv_kernel_size must be in [1, 8], got " + std::to_string(c.kda.conv_kernel));
  const json& kda_layers = r.at(la, "kda_layers", "linear_attn_config.");
  DS_CHECK(kda_layers.is_array(), r.where + ": linear_attn_config.kda_layers must be a list of 1-based layer numbers");
  c.mixer.assign(size_t(c.num_layers), MixerKind::Mla);
  for (auto& v : kda_layers) {
    DS_CHECK(v.is_number_integer() && v.get<int>() >= 1 && v.get<int>() <= c.num_layers,
             r.where + ": linear_attn_config.kda_layers entry " + v.dump() + " is not a layer number in [1, " +
                 std::to_string(c.num_layers) + "]");
    c.mixer[size_t(v.get<int>() - 1)] = MixerKind::Kda;
  }
  if (auto it = la.find("full_attn_layers"); it != la.end() && it->is_array()) {
    for (auto& v : *it) {
      DS_CHECK(v.is_number_integer() && v.get<int>() >= 1 && v.get<int>() <= c.num_layers &&
                   c.mixer[size_t(v.get<int>() - 1)] != MixerKind::Kda,
               r.where + ": linear_attn_config.full_attn_layers entry " + v.dump() +
                   " is not a layer number in [1, " + std::to_string(c.num_layers) + "] outside kda_layers");
    }
  }
  if (c.num_layers_of(MixerKind::Mla) > 0) {
    c.mla.num_heads = r.integer(j, "num_attention_heads");
    c.mla.kv_lora_rank = r.integer(j, "kv_lora_rank");
    c.mla.qk_nope_head_dim = r.integer(j, "qk_nope_head_dim");
    c.mla.qk_rope_head_dim = r.integer_or(j, "qk_rope_head_dim", 0);
    c.mla.v_head_dim = r.integer(j, "v_head_dim");
    c.mla.use_nope = r.boolean_or(j, "mla_use_nope", false);
    r.positive(c.mla.num_heads, "num_attention_heads");
    r.positive(c.mla.kv_lora_rank, "kv_lora_rank");
    r.positive(c.mla.v_head_dim, "v_head_dim");
    DS_CHECK(c.mla.num_heads <= 256, r.where + ": num_attention_heads must be <= 256");
    DS_CHECK(c.mla.use_nope, r.where + ": mla_use_nope false (rotary MLA) is not supported; Kimi-Linear uses NoPE");
    auto q_lora = j.find("q_lora_rank");
    DS_CHECK(q_lora == j.end() || q_lora->is_null(),
             r.where + ": q_lora_rank must be null (low-rank query projection is not supported)");
  }
  c.first_k_dense_replace = r.integer_or(j, "first_k_dense_replace", 0);
  c.moe_layer_freq = r.integer_or(j, "moe_layer_freq", 1);
  r.positive(c.moe_layer_freq, "moe_layer_freq");
  c.moe.num_experts = r.integer_or(j, "num_experts", 0);
  c.ffn.assign(size_t(c.num_layers), FfnKind::Dense);
  if (c.moe.num_experts > 0) {
    c.moe.experts_per_token = r.integer(j, "num_experts_per_token");
    c.moe.intermediate_size = r.integer(j, "moe_intermediate_size");
    c.moe.num_shared_experts = r.integer_or(j, "num_shared_experts", 0);
    c.moe.renormalize = r.boolean_or(j, "moe_renormalize", true);
    c.moe.routed_scaling_factor = float(r.number_or(j, "routed_scaling_factor", 1.0));
    c.moe.use_grouped_topk = r.boolean_or(j, "use_grouped_topk", false);
    c.moe.num_expert_group = r.integer_or(j, "num_expert_group", 1);
    c.moe.topk_group = r.integer_or(j, "topk_group", 1);
    r.positive(c.moe.intermediate_size, "moe_intermediate_size");
    DS_CHECK(c.moe.experts_per_token >= 1 && c.moe.experts_per_token <= c.moe.num_experts,
             r.where + ": num_experts_per_token must be in [1, num_experts=" + std::to_string(c.moe.num_experts) +
                 "], got " + std::to_string(c.moe.experts_per_token));
    if (auto it = j.find("moe_router_activation_func"); it != j.end() && !it->is_null())
      DS_CHECK(*it == "sigmoid", r.where + ": moe_router_activation_func " + it->dump() + " is not supported (only \"sigmoid\")");
    if (c.moe.use_grouped_topk) {
      DS_CHECK(c.moe.num_expert_group >= 1 && c.moe.num_experts % c.moe.num_expert_group == 0,
               r.where + ": num_experts must be divisible by num_expert_group");
      DS_CHECK(c.moe.topk_group >= 1 && c.moe.topk_group <= c.moe.num_expert_group,
               r.where + ": topk_group must be in [1, num_expert_group]");
    }
    for (int i = 0; i < c.num_layers; ++i)
      if (i >= c.first_k_dense_replace && i % c.moe_layer_freq == 0) c.ffn[size_t(i)] = FfnKind::Moe;
  }
}

void parse_llama(const Reader& r, ModelConfig& c) {
  const json& j = r.j;
  c.gqa.num_heads = r.integer(j, "num_attention_heads");
  c.gqa.num_kv_heads = r.integer_or(j, "num_key_value_heads", c.gqa.num_heads);
  r.positive(c.gqa.num_heads, "num_attention_heads");
  r.positive(c.gqa.num_kv_heads, "num_key_value_heads");
  DS_CHECK(c.gqa.num_heads % c.gqa.num_kv_heads == 0,
           r.where + ": num_attention_heads (" + std::to_string(c.gqa.num_heads) +
               ") must be a multiple of num_key_value_heads (" + std::to_string(c.gqa.num_kv_heads) + ")");
  c.gqa.head_dim = r.integer_or(j, "head_dim", c.hidden_size / c.gqa.num_heads);
  DS_CHECK(c.gqa.head_dim % 2 == 0, r.where + ": head_dim must be even for rotary embeddings");
  DS_CHECK(c.gqa.head_dim > 0 && c.gqa.head_dim <= 512,
           r.where + ": head_dim must be in [2, 512], got " + std::to_string(c.gqa.head_dim));
  c.gqa.rope_theta = float(r.number_or(j, "rope_theta", 10000.0));
  if (auto it = j.find("rope_scaling"); it != j.end() && !it->is_null())
    DS_CHECK(false, r.where + ": rope_scaling is not supported");
  c.mixer.assign(size_t(c.num_layers), MixerKind::Gqa);
  c.ffn.assign(size_t(c.num_layers), FfnKind::Dense);
}

}  // namespace

int ModelConfig::num_layers_of(MixerKind k) const {
  int n = 0;
  for (auto m : mixer) n += m == k;
  return n;
}

ModelConfig parse_model_config(const std::string& text, const std::string& where) {
  const json j = parse_json(text, where);
  DS_CHECK(j.is_object(), where + ": config must be a JSON object");
  Reader r{j, where};
  ModelConfig c;
  const json& mt = r.at(j, "model_type", "");
  DS_CHECK(mt.is_string(), where + ": model_type must be a string");
  c.model_type = mt.get<std::string>();
  if (c.model_type != "kimi_linear" && c.model_type != "llama")
    throw Error(where + ": unknown model_type '" + c.model_type + "' (supported: kimi_linear, llama)");
  parse_common(r, c);
  if (c.model_type == "kimi_linear") {
    c.type = ModelType::KimiLinear;
    parse_kimi(r, c);
  } else if (c.model_type == "llama") {
    c.type = ModelType::Llama;
    parse_llama(r, c);
  } else {
    throw Error(where + ": unknown model_type '" + c.model_type + "' (supported: kimi_linear, llama)");
  }
  return c;
}

ModelConfig load_model_config(const std::string& dir) {
  if (is_gguf_model(dir)) return parse_model_config(gguf_config_json(GgufFile::open(dir)), "GGUF " + dir);
  const std::string path = dir + "/config.json";
  std::ifstream f(path);
  DS_CHECK(f, "cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_model_config(ss.str(), path);
}

}  // namespace ds
