#include "model/gguf_arch.h"

#include "checkpoint/gguf_file.h"
#include "checkpoint/gguf_writer.h"
#include "core/error.h"

namespace ds {

using json = nlohmann::json;

namespace {

// A size or count from the file's metadata, in [lo, hi] (model/config.h's bounds): the error
// names the key and the range. Checked before the config is made, since per-layer tables are
// sized from it before any weight is read.
int64_t count(const GgufFile& g, const std::string& key, int64_t lo, int64_t hi) {
  const int64_t v = g.get_int(key);
  DS_CHECK(v >= lo && v <= hi, "GGUF " + g.path() + ": " + key + " is " + std::to_string(v) + ", outside [" +
                                   std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}
std::optional<int64_t> count_or_none(const GgufFile& g, const std::string& key, int64_t lo, int64_t hi) {
  if (!g.find(key)) return std::nullopt;
  return count(g, key, lo, hi);
}

// block_count, which every block's tensors (two norms at least) must be in the file for.
int64_t block_count(const GgufFile& g, const std::string& arch) {
  const std::string key = arch + ".block_count";
  const int64_t n = count(g, key, 1, kMaxConfigLayers);
  DS_CHECK(uint64_t(n) <= g.tensors().size(),
           "GGUF " + g.path() + ": " + key + " is " + std::to_string(n) + ", but the file has " +
               std::to_string(g.tensors().size()) + " tensors (every block has several)");
  return n;
}

// End-of-sequence ids: llama.cpp's eos, and its end of turn when that is another token.
json eos_ids(const GgufFile& g) {
  json ids = json::array();
  if (auto e = g.int_or_none("tokenizer.ggml.eos_token_id")) ids.push_back(*e);
  if (auto e = g.int_or_none("tokenizer.ggml.eot_token_id"); e && (ids.empty() || ids[0] != *e)) ids.push_back(*e);
  return ids;
}

int64_t vocab_of(const GgufFile& g, const std::string& arch) {
  if (auto v = count_or_none(g, arch + ".vocab_size", 1, kMaxConfigVocabSize)) return *v;
  if (const GgufTensor* t = g.find_tensor("token_embd.weight"); t && t->dims.size() == 2) {
    DS_CHECK(t->dims[1] <= kMaxConfigVocabSize, "GGUF " + g.path() + ": token_embd.weight has " + std::to_string(t->dims[1]) +
                                                    " rows, more than the largest vocabulary (" +
                                                    std::to_string(kMaxConfigVocabSize) + ")");
    return t->dims[1];
  }
  throw Error("GGUF " + g.path() + ": no " + arch + ".vocab_size and no 2-D token_embd.weight to read the vocabulary size from");
}

json llama_config(const GgufFile& g) {
  const std::string a = "llama.";
  const int64_t hidden = count(g, a + "embedding_length", 1, kMaxConfigHiddenSize);
  const int64_t heads = count(g, a + "attention.head_count", 1, kMaxConfigHeads);
  const int64_t kv_heads = count_or_none(g, a + "attention.head_count_kv", 1, heads).value_or(heads);
  DS_CHECK(hidden % heads == 0, "GGUF " + g.path() + ": llama.embedding_length must be a multiple of llama.attention.head_count");
  const int64_t head_dim = count_or_none(g, a + "attention.key_length", 1, kMaxConfigHeadDim).value_or(hidden / heads);
  if (auto rot = g.int_or_none(a + "rope.dimension_count"))
    DS_CHECK(*rot == head_dim, "GGUF " + g.path() + ": llama.rope.dimension_count " + std::to_string(*rot) +
                                   " is not the head size " + std::to_string(head_dim) + " (partial rotary is not supported)");
  DS_CHECK(!g.find(a + "rope.scaling.type") || g.get_string(a + "rope.scaling.type") == "none",
           "GGUF " + g.path() + ": llama.rope.scaling.type '" + g.get_string(a + "rope.scaling.type") + "' is not supported");
  json j = {{"model_type", "llama"},
            {"architectures", {"LlamaForCausalLM"}},
            {"hidden_size", hidden},
            {"intermediate_size", count(g, a + "feed_forward_length", 1, kMaxConfigIntermediateSize)},
            {"num_hidden_layers", block_count(g, "llama")},
            {"num_attention_heads", heads},
            {"num_key_value_heads", kv_heads},
            {"head_dim", head_dim},
            {"vocab_size", vocab_of(g, "llama")},
            {"rms_norm_eps", g.float_or_none(a + "attention.layer_norm_rms_epsilon").value_or(1e-5)},
            {"rope_theta", g.float_or_none(a + "rope.freq_base").value_or(10000.0)},
            {"max_position_embeddings", count_or_none(g, a + "context_length", 0, kMaxConfigPositions).value_or(0)},
            {"tie_word_embeddings", g.find_tensor("output.weight") == nullptr},
            {"hidden_act", "silu"},
            {"eos_token_id", eos_ids(g)}};
  if (auto b = g.int_or_none("tokenizer.ggml.bos_token_id")) j["bos_token_id"] = *b;
  return j;
}

void write_llama(const ModelConfig& c, GgufWriter& w) {
  const std::string a = "llama.";
  w.set_u32(a + "context_length", uint32_t(c.max_position_embeddings > 0 ? c.max_position_embeddings : 4096));
  w.set_u32(a + "embedding_length", uint32_t(c.hidden_size));
  w.set_u32(a + "block_count", uint32_t(c.num_layers));
  w.set_u32(a + "feed_forward_length", uint32_t(c.intermediate_size));
  w.set_u32(a + "attention.head_count", uint32_t(c.gqa.num_heads));
  w.set_u32(a + "attention.head_count_kv", uint32_t(c.gqa.num_kv_heads));
  w.set_u32(a + "attention.key_length", uint32_t(c.gqa.head_dim));
  w.set_u32(a + "attention.value_length", uint32_t(c.gqa.head_dim));
  w.set_u32(a + "rope.dimension_count", uint32_t(c.gqa.head_dim));
  w.set_f32(a + "rope.freq_base", c.gqa.rope_theta);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  w.set_u32(a + "vocab_size", uint32_t(c.vocab_size));
}

// Kimi-Linear as llama.cpp's converter writes it: which layers are KDA is a per-layer
// attention.head_count_kv (0 for KDA, 1 for full attention); KDA and MLA share
// attention.head_count; MLA's sizes are key_length_mla (nope + rope), value_length_mla and
// rope.dimension_count; expert_gating_func 2 is sigmoid.
json kimi_linear_config(const GgufFile& g) {
  const std::string a = "kimi-linear.";
  const std::string where = "GGUF " + g.path();
  const int64_t layers = block_count(g, "kimi-linear");
  const GgufValue* kv = g.find(a + "attention.head_count_kv");
  DS_CHECK(kv && kv->is_array() && int64_t(kv->ints.size()) == layers,
           where + ": kimi-linear.attention.head_count_kv must be a list of one entry per layer (0 marks a KDA layer)");
  json kda = json::array(), full = json::array();
  for (int64_t i = 0; i < layers; ++i) (kv->ints[size_t(i)] == 0 ? kda : full).push_back(i + 1);
  const int64_t heads = count(g, a + "attention.head_count", 1, kMaxConfigHeads);
  json j = {{"model_type", "kimi_linear"},
            {"architectures", {"KimiLinearForCausalLM"}},
            {"hidden_size", count(g, a + "embedding_length", 1, kMaxConfigHiddenSize)},
            {"intermediate_size", count(g, a + "feed_forward_length", 1, kMaxConfigIntermediateSize)},
            {"num_hidden_layers", layers},
            {"num_attention_heads", heads},
            {"num_key_value_heads", heads},
            {"vocab_size", vocab_of(g, "kimi-linear")},
            {"rms_norm_eps", g.float_or_none(a + "attention.layer_norm_rms_epsilon").value_or(1e-5)},
            {"max_position_embeddings", count_or_none(g, a + "context_length", 0, kMaxConfigPositions).value_or(0)},
            {"tie_word_embeddings", g.find_tensor("output.weight") == nullptr},
            {"hidden_act", "silu"},
            {"eos_token_id", eos_ids(g)},
            {"mla_use_nope", true},
            {"q_lora_rank", nullptr},
            {"linear_attn_config",
             {{"kda_layers", kda},
              {"full_attn_layers", full},
              {"num_heads", heads},
              {"head_dim", count(g, a + "kda.head_dim", 1, kMaxConfigHeadDim)},
              {"short_conv_kernel_size", count(g, a + "ssm.conv_kernel", 1, 8)}}}};
  if (auto b = g.int_or_none("tokenizer.ggml.bos_token_id")) j["bos_token_id"] = *b;
  if (auto lora = count_or_none(g, a + "attention.kv_lora_rank", 1, kMaxConfigLoraRank)) {
    const int64_t rope = count_or_none(g, a + "rope.dimension_count", 0, kMaxConfigHeadDim).value_or(0);
    const int64_t qk = count(g, a + "attention.key_length_mla", 0, 2 * kMaxConfigHeadDim);
    DS_CHECK(qk >= rope, where + ": kimi-linear.attention.key_length_mla " + std::to_string(qk) +
                             " is smaller than rope.dimension_count " + std::to_string(rope));
    j["kv_lora_rank"] = *lora;
    j["qk_rope_head_dim"] = rope;
    j["qk_nope_head_dim"] = qk - rope;
    j["v_head_dim"] = count(g, a + "attention.value_length_mla", 1, kMaxConfigHeadDim);
  } else {
    DS_CHECK(full.empty(), where + ": full-attention layers need kimi-linear.attention.kv_lora_rank");
  }
  if (auto experts = count_or_none(g, a + "expert_count", 0, kMaxConfigExperts); experts && *experts > 0) {
    const int64_t gating = g.int_or_none(a + "expert_gating_func").value_or(2);
    const int64_t groups = count_or_none(g, a + "expert_group_count", 1, *experts).value_or(1);
    j["num_experts"] = *experts;
    j["num_experts_per_token"] = count(g, a + "expert_used_count", 1, *experts);
    j["moe_intermediate_size"] = count(g, a + "expert_feed_forward_length", 1, kMaxConfigIntermediateSize);
    j["num_shared_experts"] = count_or_none(g, a + "expert_shared_count", 0, kMaxConfigExperts).value_or(0);
    j["first_k_dense_replace"] = count_or_none(g, a + "leading_dense_block_count", 0, layers).value_or(0);
    j["moe_layer_freq"] = 1;
    j["routed_scaling_factor"] = g.float_or_none(a + "expert_weights_scale").value_or(1.0);
    j["moe_renormalize"] = g.find(a + "expert_weights_norm") ? g.get_bool(a + "expert_weights_norm") : true;
    j["moe_router_activation_func"] = gating == 2 ? "sigmoid" : gating == 1 ? "softmax" : "gating function " + std::to_string(gating);
    j["use_grouped_topk"] = groups > 1;
    j["num_expert_group"] = groups;
    j["topk_group"] = count_or_none(g, a + "expert_group_used_count", 1, groups).value_or(1);
  }
  return j;
}

void write_kimi_linear(const ModelConfig& c, const json& raw, GgufWriter& w) {
  const std::string a = "kimi-linear.";
  // llama.cpp runs KDA with attention.head_count heads, the MLA layers' count.
  const int heads = raw.value("num_attention_heads", c.kda.num_heads);
  DS_CHECK(c.kda.num_heads == heads, "to GGUF: linear_attn_config.num_heads " + std::to_string(c.kda.num_heads) +
                                         " differs from num_attention_heads " + std::to_string(heads) +
                                         ", and kimi-linear GGUF has one head count for KDA and MLA");
  DS_CHECK(c.moe_layer_freq == 1, "to GGUF: moe_layer_freq " + std::to_string(c.moe_layer_freq) +
                                      " is not expressible in kimi-linear GGUF (every layer past the leading dense ones is MoE)");
  w.set_u32(a + "context_length", uint32_t(c.max_position_embeddings > 0 ? c.max_position_embeddings : 4096));
  w.set_u32(a + "embedding_length", uint32_t(c.hidden_size));
  w.set_u32(a + "block_count", uint32_t(c.num_layers));
  w.set_u32(a + "feed_forward_length", uint32_t(c.intermediate_size));
  w.set_u32(a + "attention.head_count", uint32_t(heads));
  std::vector<int32_t> kv_heads;
  for (MixerKind m : c.mixer) kv_heads.push_back(m == MixerKind::Kda ? 0 : 1);
  w.set_i32s(a + "attention.head_count_kv", kv_heads);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  w.set_u32(a + "vocab_size", uint32_t(c.vocab_size));
  w.set_u32(a + "ssm.conv_kernel", uint32_t(c.kda.conv_kernel));
  w.set_u32(a + "kda.head_dim", uint32_t(c.kda.head_dim));
  // The MLA sizes, from config.json when the model has no MLA layer (a KDA-only draft).
  const int lora = c.mla.kv_lora_rank > 0 ? c.mla.kv_lora_rank : raw.value("kv_lora_rank", 0);
  if (lora > 0) {
    const int rope = c.mla.kv_lora_rank > 0 ? c.mla.qk_rope_head_dim : raw.value("qk_rope_head_dim", 0);
    const int nope = c.mla.kv_lora_rank > 0 ? c.mla.qk_nope_head_dim : raw.value("qk_nope_head_dim", 0);
    const int v = c.mla.kv_lora_rank > 0 ? c.mla.v_head_dim : raw.value("v_head_dim", 0);
    w.set_u32(a + "attention.kv_lora_rank", uint32_t(lora));
    w.set_u32(a + "rope.dimension_count", uint32_t(rope));
    w.set_u32(a + "attention.key_length", uint32_t(lora + rope));
    w.set_u32(a + "attention.value_length", uint32_t(lora));
    w.set_u32(a + "attention.key_length_mla", uint32_t(nope + rope));
    w.set_u32(a + "attention.value_length_mla", uint32_t(v));
  }
  if (c.moe.num_experts > 0) {
    w.set_u32(a + "expert_count", uint32_t(c.moe.num_experts));
    w.set_u32(a + "expert_used_count", uint32_t(c.moe.experts_per_token));
    w.set_u32(a + "expert_feed_forward_length", uint32_t(c.moe.intermediate_size));
    w.set_u32(a + "expert_shared_count", uint32_t(c.moe.num_shared_experts));
    w.set_u32(a + "leading_dense_block_count", uint32_t(c.first_k_dense_replace));
    w.set_f32(a + "expert_weights_scale", c.moe.routed_scaling_factor);
    w.set_bool(a + "expert_weights_norm", c.moe.renormalize);
    w.set_u32(a + "expert_gating_func", 2);  // sigmoid, the only router config.cpp takes
    w.set_u32(a + "expert_group_count", uint32_t(c.moe.use_grouped_topk ? c.moe.num_expert_group : 1));
    w.set_u32(a + "expert_group_used_count", uint32_t(c.moe.use_grouped_topk ? c.moe.topk_group : 1));
  }
}

}  // namespace

std::string gguf_architecture(const GgufFile& g) {
  const std::string arch = g.get_string("general.architecture");
  DS_CHECK(arch == "llama" || arch == "kimi-linear",
           "GGUF " + g.path() + ": architecture '" + arch + "' is not supported (llama and kimi-linear are)");
  return arch;
}

json gguf_arch_config(const GgufFile& g) {
  const std::string arch = gguf_architecture(g);
  if (arch == "llama") return llama_config(g);
  return kimi_linear_config(g);
}

std::string gguf_write_arch_metadata(const ModelConfig& c, const json& raw, const std::string& name, GgufWriter& w) {
  const std::string arch = c.type == ModelType::Llama ? "llama" : "kimi-linear";
  w.set_string("general.architecture", arch);
  w.set_string("general.name", name);
  w.set_u32("general.alignment", 32);
  if (c.type == ModelType::Llama) write_llama(c, w);
  else write_kimi_linear(c, raw, w);
  return arch;
}

}  // namespace ds
