#include "model/gguf_names.h"

#include <cctype>
#include <vector>

namespace ds {

namespace {

struct Entry {
  const char* gguf;
  const char* hf;
  GgufTransform transform;
};

// {N}: the layer, 0-based on both sides; {E}: an expert.
const std::vector<Entry>& table(std::string_view arch) {
  using T = GgufTransform;
  static const std::vector<Entry> llama = {
      {"token_embd.weight", "model.embed_tokens.weight", T::None},
      {"output_norm.weight", "model.norm.weight", T::None},
      {"output.weight", "lm_head.weight", T::None},
      {"blk.{N}.attn_norm.weight", "model.layers.{N}.input_layernorm.weight", T::None},
      {"blk.{N}.attn_q.weight", "model.layers.{N}.self_attn.q_proj.weight", T::PermuteQ},
      {"blk.{N}.attn_k.weight", "model.layers.{N}.self_attn.k_proj.weight", T::PermuteK},
      {"blk.{N}.attn_v.weight", "model.layers.{N}.self_attn.v_proj.weight", T::None},
      {"blk.{N}.attn_output.weight", "model.layers.{N}.self_attn.o_proj.weight", T::None},
      {"blk.{N}.ffn_norm.weight", "model.layers.{N}.post_attention_layernorm.weight", T::None},
      {"blk.{N}.ffn_gate.weight", "model.layers.{N}.mlp.gate_proj.weight", T::None},
      {"blk.{N}.ffn_up.weight", "model.layers.{N}.mlp.up_proj.weight", T::None},
      {"blk.{N}.ffn_down.weight", "model.layers.{N}.mlp.down_proj.weight", T::None},
  };
  // As llama.cpp's converter names Kimi-Linear (KDA + MLA + MoE) tensors.
  static const std::vector<Entry> kimi_linear = {
      {"token_embd.weight", "model.embed_tokens.weight", T::None},
      {"output_norm.weight", "model.norm.weight", T::None},
      {"output.weight", "lm_head.weight", T::None},
      {"blk.{N}.attn_norm.weight", "model.layers.{N}.input_layernorm.weight", T::None},
      {"blk.{N}.ffn_norm.weight", "model.layers.{N}.post_attention_layernorm.weight", T::None},
      // KDA and MLA both
      {"blk.{N}.attn_q.weight", "model.layers.{N}.self_attn.q_proj.weight", T::None},
      {"blk.{N}.attn_output.weight", "model.layers.{N}.self_attn.o_proj.weight", T::None},
      // KDA
      {"blk.{N}.attn_k.weight", "model.layers.{N}.self_attn.k_proj.weight", T::None},
      {"blk.{N}.attn_v.weight", "model.layers.{N}.self_attn.v_proj.weight", T::None},
      {"blk.{N}.ssm_conv1d_q.weight", "model.layers.{N}.self_attn.q_conv1d.weight", T::Conv1d},
      {"blk.{N}.ssm_conv1d_k.weight", "model.layers.{N}.self_attn.k_conv1d.weight", T::Conv1d},
      {"blk.{N}.ssm_conv1d_v.weight", "model.layers.{N}.self_attn.v_conv1d.weight", T::Conv1d},
      {"blk.{N}.ssm_a", "model.layers.{N}.self_attn.A_log", T::DecayRate},
      {"blk.{N}.ssm_dt.bias", "model.layers.{N}.self_attn.dt_bias", T::None},
      {"blk.{N}.ssm_beta.weight", "model.layers.{N}.self_attn.b_proj.weight", T::None},
      {"blk.{N}.ssm_f_a.weight", "model.layers.{N}.self_attn.f_a_proj.weight", T::None},
      {"blk.{N}.ssm_f_b.weight", "model.layers.{N}.self_attn.f_b_proj.weight", T::None},
      {"blk.{N}.ssm_g_a.weight", "model.layers.{N}.self_attn.g_a_proj.weight", T::None},
      {"blk.{N}.ssm_g_b.weight", "model.layers.{N}.self_attn.g_b_proj.weight", T::None},
      {"blk.{N}.ssm_norm.weight", "model.layers.{N}.self_attn.o_norm.weight", T::None},
      // MLA (attn_kv_b: the single tensor older converters wrote, read only)
      {"blk.{N}.attn_kv_a_mqa.weight", "model.layers.{N}.self_attn.kv_a_proj_with_mqa.weight", T::None},
      {"blk.{N}.attn_kv_a_norm.weight", "model.layers.{N}.self_attn.kv_a_layernorm.weight", T::None},
      {"blk.{N}.attn_k_b.weight", "model.layers.{N}.self_attn.kv_b_proj.weight", T::KvBKeys},
      {"blk.{N}.attn_v_b.weight", "model.layers.{N}.self_attn.kv_b_proj.weight", T::KvBValues},
      {"blk.{N}.attn_kv_b.weight", "model.layers.{N}.self_attn.kv_b_proj.weight", T::None},
      // dense FFN
      {"blk.{N}.ffn_gate.weight", "model.layers.{N}.mlp.gate_proj.weight", T::None},
      {"blk.{N}.ffn_up.weight", "model.layers.{N}.mlp.up_proj.weight", T::None},
      {"blk.{N}.ffn_down.weight", "model.layers.{N}.mlp.down_proj.weight", T::None},
      // MoE
      {"blk.{N}.ffn_gate_inp.weight", "model.layers.{N}.block_sparse_moe.gate.weight", T::None},
      {"blk.{N}.exp_probs_b.bias", "model.layers.{N}.block_sparse_moe.gate.e_score_correction_bias", T::None},
      {"blk.{N}.ffn_gate_exps.weight", "model.layers.{N}.block_sparse_moe.experts.{E}.w1.weight", T::Experts},
      {"blk.{N}.ffn_up_exps.weight", "model.layers.{N}.block_sparse_moe.experts.{E}.w3.weight", T::Experts},
      {"blk.{N}.ffn_down_exps.weight", "model.layers.{N}.block_sparse_moe.experts.{E}.w2.weight", T::Experts},
      {"blk.{N}.ffn_gate_shexp.weight", "model.layers.{N}.block_sparse_moe.shared_experts.gate_proj.weight", T::None},
      {"blk.{N}.ffn_up_shexp.weight", "model.layers.{N}.block_sparse_moe.shared_experts.up_proj.weight", T::None},
      {"blk.{N}.ffn_down_shexp.weight", "model.layers.{N}.block_sparse_moe.shared_experts.down_proj.weight", T::None},
  };
  static const std::vector<Entry> none;
  if (arch == "llama") return llama;
  if (arch == "kimi-linear") return kimi_linear;
  return none;
}

// Cuts the first run of digits after `prefix` out of name, leaving "{N}" (or `slot`) in its place.
bool abstract_number(std::string& name, std::string_view prefix, std::string_view slot, int* value) {
  const size_t at = name.find(prefix);
  if (at == std::string::npos) return false;
  size_t b = at + prefix.size(), e = b;
  while (e < name.size() && std::isdigit(static_cast<unsigned char>(name[e]))) ++e;
  if (e == b || e - b > 6) return false;
  *value = std::stoi(name.substr(b, e - b));
  name.replace(b, e - b, slot);
  return true;
}

std::string fill(std::string s, std::string_view slot, int v) {
  if (const size_t at = s.find(slot); at != std::string::npos) s.replace(at, slot.size(), std::to_string(v));
  return s;
}

}  // namespace

std::optional<GgufName> hf_name_of_gguf(std::string_view arch, std::string_view gguf_name) {
  std::string key(gguf_name);
  int layer = -1;
  if (key.rfind("blk.", 0) == 0 && !abstract_number(key, "blk.", "{N}", &layer)) return std::nullopt;
  for (const Entry& e : table(arch))
    if (key == e.gguf) return GgufName{fill(e.hf, "{N}", layer), e.transform};
  return std::nullopt;
}

std::optional<GgufName> gguf_name_of_hf(std::string_view arch, std::string_view hf_name) {
  std::string key(hf_name);
  int layer = -1, expert = -1;
  if (key.rfind("model.layers.", 0) == 0 && !abstract_number(key, "model.layers.", "{N}", &layer)) return std::nullopt;
  abstract_number(key, ".experts.", "{E}", &expert);
  for (const Entry& e : table(arch))
    if (key == e.hf) return GgufName{fill(e.gguf, "{N}", layer), e.transform, expert};
  return std::nullopt;
}

}  // namespace ds
