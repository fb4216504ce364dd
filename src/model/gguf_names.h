// Tensor names between GGUF (llama.cpp's "blk.N.attn_q.weight") and the Hugging Face names the
// layers load ("model.layers.N.self_attn.q_proj.weight"), per architecture, with what the
// conversion does to the tensor on the way.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace ds {

enum class GgufTransform {
  None,
  // llama.cpp's llama rotary pairs dims (2i, 2i+1) of a head, Hugging Face's (i, i + d/2): its
  // converter interleaves the two halves of every head's q (by the query heads) and k (by the
  // key-value heads) rows.
  PermuteQ,
  PermuteK,
  // One GGUF tensor [E, n, k] holds every routed expert's projection; Hugging Face has E tensors
  // whose names carry "{E}".
  Experts,
  // A KDA short convolution: Hugging Face [C, 1, K]; GGUF {K, 1, C} or llama.cpp's {K, 1, C, 1}.
  Conv1d,
  // KDA's A_log [1, 1, H, 1]: GGUF's ssm_a holds the decay rate -exp(A_log) instead, which the
  // reader hands over as "self_attn.A" (model/kda_mixer.cpp takes either).
  DecayRate,
  // MLA's kv_b_proj [H * (nope + v), L] is two GGUF tensors in llama.cpp: attn_k_b {nope, L, H}
  // (each head's key rows, transposed) and attn_v_b {L, v, H} (its value rows).
  KvBKeys,
  KvBValues,
};

struct GgufName {
  std::string name;  // the other side's name, layer (and for Experts, "{E}") filled in
  GgufTransform transform = GgufTransform::None;
  int expert = -1;  // gguf_name_of_hf of one expert's tensor: its index
};

// "llama" or "kimi-linear" (GGUF's general.architecture). Nothing for a name the architecture
// does not have.
std::optional<GgufName> hf_name_of_gguf(std::string_view arch, std::string_view gguf_name);
std::optional<GgufName> gguf_name_of_hf(std::string_view arch, std::string_view hf_name);

}  // namespace ds
