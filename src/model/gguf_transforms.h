// What a GgufTransform (model/gguf_names.h) does to a tensor's bytes, both ways: reading a GGUF
// file (model/gguf_model.cpp) undoes what llama.cpp's converter did to the Hugging Face tensor,
// and exporting one (convert/gguf_export.cpp) does it again. One place, so the two stay inverses.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/gguf_names.h"

namespace ds {

// Rows of a q or k projection between llama.cpp's interleaved order and Hugging Face's halves
// (GgufTransform::PermuteQ / PermuteK). Throws naming `where` when the rows are not `heads`
// heads of an even size.
std::vector<std::byte> gguf_permute_rows(const std::byte* src, int64_t rows, size_t row_bytes, int heads, bool to_gguf,
                                         const std::string& where);
// The heads a PermuteQ (the query heads) or PermuteK (the key-value heads) tensor has.
int gguf_permuted_heads(GgufTransform t, const ModelConfig& c);

// kv_b_proj [H][nope + V][L] (rows of L values) <-> llama.cpp's attn_k_b [H][L][nope] (each
// head's key rows transposed) and attn_v_b [H][V][L]; es: bytes per element.
void gguf_join_kv_b(const std::byte* k_b, const std::byte* v_b, int64_t H, int64_t nope, int64_t V, int64_t L, size_t es,
                    std::byte* kv_b);
void gguf_split_kv_b(const std::byte* kv_b, int64_t H, int64_t nope, int64_t V, int64_t L, size_t es, std::byte* k_b,
                     std::byte* v_b);

}  // namespace ds
