#include "model/tensor_split.h"

#include <string>

#include "core/error.h"

namespace ds {

namespace {
void need(int value, int tp, const char* what) {
  DS_CHECK(value % tp == 0, "invalid settings: --tp " + std::to_string(tp) + " does not divide the model's " + what + " (" +
                                std::to_string(value) + "): tensor parallel splits them evenly across ranks");
}
}  // namespace

void check_tensor_split(const ModelConfig& c, int tp, int dcp) {
  DS_CHECK(tp >= 1, "invalid settings: --tp must be >= 1, got " + std::to_string(tp));
  if (tp == 1) return;
  if (c.num_layers_of(MixerKind::Kda) > 0) need(c.kda.num_heads, tp, "KDA heads (linear_attn_config.num_heads)");
  if (c.num_layers_of(MixerKind::Mla) > 0) need(c.mla.num_heads, tp, "MLA heads (num_attention_heads)");
  if (c.num_layers_of(MixerKind::Gqa) > 0) {
    need(c.gqa.num_heads, tp, "attention heads (num_attention_heads)");
    if (dcp > 1 && tp % dcp == 0) need(c.gqa.num_kv_heads, tp / dcp, "KV heads (num_key_value_heads) over tp / dcp");
    else need(c.gqa.num_kv_heads, tp, "KV heads (num_key_value_heads)");
  }
  bool dense = false, moe = false;
  for (FfnKind f : c.ffn) (f == FfnKind::Moe ? moe : dense) = true;
  if (dense) need(c.intermediate_size, tp, "dense FFN width (intermediate_size)");
  if (moe) {
    need(c.moe.num_experts, tp, "routed experts (num_experts)");
    if (c.moe.num_shared_experts > 0)
      need(c.moe.intermediate_size * c.moe.num_shared_experts, tp, "shared experts' width (moe_intermediate_size x num_shared_experts)");
  }
  need(c.vocab_size, tp, "vocabulary (vocab_size)");
}

ModelConfig shard_config(const ModelConfig& c, const TensorShard& s) {
  ModelConfig l = c;
  l.kda.num_heads /= s.size;
  l.mla.num_heads /= s.size;
  l.gqa.num_heads /= s.size;
  // A dcp group's ranks hold the KV heads of all the group's query heads.
  l.gqa.num_kv_heads /= s.dcp > 1 && s.size > 1 ? s.size / s.dcp : s.size;
  l.intermediate_size /= s.size;
  return l;
}

}  // namespace ds
