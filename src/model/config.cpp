#include "model/config.h"

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoint/gguf_file.h"
#include "core/error.h"
#include "core/json_parse.h"
#include "model/gguf_model.h"
#include "model/model_files.h"

namespace ds {

namespace {

using json = nlohmann::json;

// A JSON value short enough for an error message.
std::string snippet(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

constexpr int kIntMin = std::numeric_limits<int>::min(), kIntMax = std::numeric_limits<int>::max();

struct Reader {
  const json& j;
  std::string where;

  const json& at(const json& obj, const char* key, const std::string& path) const {
    auto it = obj.find(key);
    DS_CHECK(it != obj.end() && !it->is_null(), where + ": missing key '" + path + key + "'");
    return *it;
  }
  // An integer in [lo, hi], checked as the file wrote it (a value past int's range is out of
  // range, never truncated); the error names the key and the range.
  int in_range(const json& v, const std::string& name, int lo, int hi) const {
    DS_CHECK(v.is_number_integer(), where + ": key '" + name + "' must be an integer, got " + snippet(v));
    const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(int64_t(hi)) && int64_t(v.get<uint64_t>()) >= lo
                                             : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
    if (!fits) {
      if (lo == kIntMin && hi == kIntMax)
        throw Error(where + ": key '" + name + "' is " + v.dump() + ", too large for a size");
      throw Error(where + ": key '" + name + "' is " + v.dump() + ", outside [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "]");
    }
    return int(v.get<int64_t>());
  }
  int integer(const json& obj, const char* key, int lo, int hi, const std::string& path = "") const {
    return in_range(at(obj, key, path), path + key, lo, hi);
  }
  int integer_or(const json& obj, const char* key, int dflt, int lo, int hi, const std::string& path = "") const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return dflt;
    return integer(obj, key, lo, hi, path);
  }
  double number(const json& obj, const char* key) const {
    const json& v = at(obj, key, "");
    DS_CHECK(v.is_number(), where + ": key '" + std::string(key) + "' must be a number, got " + snippet(v));
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
    DS_CHECK(it->is_boolean(), where + ": key '" + std::string(key) + "' must be true or false, got " + snippet(*it));
    return it->get<bool>();
  }
  // A token id, or a list of them; other values are ignored, as before. An id outside
  // [0, kMaxConfigVocabSize) is an error, not a truncated int.
  std::vector<int32_t> token_ids(const char* key) const {
    std::vector<int32_t> out;
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return out;
    if (it->is_number_integer()) out.push_back(in_range(*it, key, 0, kMaxConfigVocabSize - 1));
    else if (it->is_array())
      for (auto& v : *it)
        if (v.is_number_integer()) out.push_back(in_range(v, key, 0, kMaxConfigVocabSize - 1));
    return out;
  }
};

void parse_common(const Reader& r, ModelConfig& c) {
  const json& j = r.j;
  c.hidden_size = r.integer(j, "hidden_size", 1, kMaxConfigHiddenSize);
  c.num_layers = r.integer(j, "num_hidden_layers", 1, kMaxConfigLayers);
  c.vocab_size = r.integer(j, "vocab_size", 1, kMaxConfigVocabSize);
  c.intermediate_size = r.integer(j, "intermediate_size", 1, kMaxConfigIntermediateSize);
  c.rms_norm_eps = float(r.number_or(j, "rms_norm_eps", 1e-6));
  c.tie_word_embeddings = r.boolean_or(j, "tie_word_embeddings", false);
  c.max_position_embeddings = r.integer_or(j, "max_position_embeddings", 0, 0, kMaxConfigPositions);
  c.eos_token_ids = r.token_ids("eos_token_id");
  auto bos = r.token_ids("bos_token_id");
  c.bos_token_id = bos.empty() ? -1 : bos[0];
  if (auto it = j.find("hidden_act"); it != j.end() && !it->is_null())
    DS_CHECK(*it == "silu", r.where + ": hidden_act " + snippet(*it) + " is not supported (only \"silu\")");
}

void parse_kimi(const Reader& r, ModelConfig& c) {
  const json& j = r.j;
  const json& la = r.at(j, "linear_attn_config", "");
  DS_CHECK(la.is_object(), r.where + ": 'linear_attn_config' must be an object");
  c.kda.num_heads = r.integer(la, "num_heads", 1, kMaxConfigHeads, "linear_attn_config.");
  c.kda.head_dim = r.integer(la, "head_dim", 1, kMaxConfigHeadDim, "linear_attn_config.");
  c.kda.conv_kernel = r.integer_or(la, "short_conv_kernel_size", 4, 1, 8, "linear_attn_config.");
  const json& kda_layers = r.at(la, "kda_layers", "linear_attn_config.");
  DS_CHECK(kda_layers.is_array(), r.where + ": linear_attn_config.kda_layers must be a list of 1-based layer numbers");
  // A layer number as written: 2^32 + 1 is not layer 1.
  auto layer_number = [&](const json& v) {
    return v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(c.num_layers)) &&
                   v.get<int64_t>() >= 1 && v.get<int64_t>() <= c.num_layers
               ? int(v.get<int64_t>())
               : 0;
  };
  c.mixer.assign(size_t(c.num_layers), MixerKind::Mla);
  for (auto& v : kda_layers) {
    const int l = layer_number(v);
    DS_CHECK(l > 0, r.where + ": linear_attn_config.kda_layers entry " + snippet(v) + " is not a layer number in [1, " +
                        std::to_string(c.num_layers) + "]");
    c.mixer[size_t(l - 1)] = MixerKind::Kda;
  }
  if (auto it = la.find("full_attn_layers"); it != la.end() && it->is_array()) {
    for (auto& v : *it) {
      const int l = layer_number(v);
      DS_CHECK(l > 0 && c.mixer[size_t(l - 1)] != MixerKind::Kda,
               r.where + ": linear_attn_config.full_attn_layers entry " + snippet(v) + " is not a layer number in [1, " +
                   std::to_string(c.num_layers) + "] outside kda_layers");
    }
  }
  if (c.num_layers_of(MixerKind::Mla) > 0) {
    c.mla.num_heads = r.integer(j, "num_attention_heads", 1, 256);
    c.mla.kv_lora_rank = r.integer(j, "kv_lora_rank", 1, kMaxConfigLoraRank);
    c.mla.qk_nope_head_dim = r.integer(j, "qk_nope_head_dim", 0, kMaxConfigHeadDim);
    c.mla.qk_rope_head_dim = r.integer_or(j, "qk_rope_head_dim", 0, 0, kMaxConfigHeadDim);
    c.mla.v_head_dim = r.integer(j, "v_head_dim", 1, kMaxConfigHeadDim);
    c.mla.use_nope = r.boolean_or(j, "mla_use_nope", false);
    DS_CHECK(c.mla.use_nope, r.where + ": mla_use_nope false (rotary MLA) is not supported; Kimi-Linear uses NoPE");
    auto q_lora = j.find("q_lora_rank");
    DS_CHECK(q_lora == j.end() || q_lora->is_null(),
             r.where + ": q_lora_rank must be null (low-rank query projection is not supported)");
  }
  c.first_k_dense_replace = r.integer_or(j, "first_k_dense_replace", 0, 0, c.num_layers);
  c.moe_layer_freq = r.integer_or(j, "moe_layer_freq", 1, 1, kMaxConfigLayers);
  c.moe.num_experts = r.integer_or(j, "num_experts", 0, 0, kMaxConfigExperts);
  c.ffn.assign(size_t(c.num_layers), FfnKind::Dense);
  if (c.moe.num_experts > 0) {
    c.moe.experts_per_token = r.integer(j, "num_experts_per_token", 1, c.moe.num_experts);
    c.moe.intermediate_size = r.integer(j, "moe_intermediate_size", 1, kMaxConfigIntermediateSize);
    c.moe.num_shared_experts = r.integer_or(j, "num_shared_experts", 0, 0, kMaxConfigExperts);
    c.moe.renormalize = r.boolean_or(j, "moe_renormalize", true);
    c.moe.routed_scaling_factor = float(r.number_or(j, "routed_scaling_factor", 1.0));
    c.moe.use_grouped_topk = r.boolean_or(j, "use_grouped_topk", false);
    c.moe.num_expert_group = r.integer_or(j, "num_expert_group", 1, kIntMin, kIntMax);
    c.moe.topk_group = r.integer_or(j, "topk_group", 1, kIntMin, kIntMax);
    if (auto it = j.find("moe_router_activation_func"); it != j.end() && !it->is_null())
      DS_CHECK(*it == "sigmoid", r.where + ": moe_router_activation_func " + snippet(*it) + " is not supported (only \"sigmoid\")");
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
  c.gqa.num_heads = r.integer(j, "num_attention_heads", 1, kMaxConfigHeads);
  c.gqa.num_kv_heads = r.integer_or(j, "num_key_value_heads", c.gqa.num_heads, 1, c.gqa.num_heads);
  DS_CHECK(c.gqa.num_heads % c.gqa.num_kv_heads == 0,
           r.where + ": num_attention_heads (" + std::to_string(c.gqa.num_heads) +
               ") must be a multiple of num_key_value_heads (" + std::to_string(c.gqa.num_kv_heads) + ")");
  c.gqa.head_dim = r.integer_or(j, "head_dim", c.hidden_size / c.gqa.num_heads, kIntMin, kIntMax);
  DS_CHECK(c.gqa.head_dim % 2 == 0, r.where + ": head_dim must be even for rotary embeddings");
  DS_CHECK(c.gqa.head_dim > 0 && c.gqa.head_dim <= kMaxConfigHeadDim,
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

bool ModelConfig::has_positional_encoding() const {
  for (MixerKind m : mixer)
    if (m == MixerKind::Gqa || (m == MixerKind::Mla && !mla.use_nope)) return true;
  return false;
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
