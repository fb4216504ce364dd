#include "model/gguf_transforms.h"

#include <cstring>

#include "core/error.h"

namespace ds {

// Within head h of d rows, Hugging Face row h*d + s*d/2 + i is GGUF row h*d + 2i + s.
std::vector<std::byte> gguf_permute_rows(const std::byte* src, int64_t rows, size_t row_bytes, int heads, bool to_gguf,
                                         const std::string& where) {
  DS_CHECK(heads > 0 && rows % (2 * int64_t(heads)) == 0,
           where + ": " + std::to_string(rows) + " rows cannot be " + std::to_string(heads) + " heads of an even size");
  std::vector<std::byte> out(size_t(rows) * row_bytes);
  const int64_t d = rows / heads;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t s = 0; s < 2; ++s) {
        const int64_t hf = h * d + s * (d / 2) + i, gg = h * d + 2 * i + s;
        const int64_t from = to_gguf ? hf : gg, to = to_gguf ? gg : hf;
        std::memcpy(out.data() + size_t(to) * row_bytes, src + size_t(from) * row_bytes, row_bytes);
      }
  return out;
}

int gguf_permuted_heads(GgufTransform t, const ModelConfig& c) {
  return t == GgufTransform::PermuteQ ? c.gqa.num_heads : c.gqa.num_kv_heads;
}

void gguf_join_kv_b(const std::byte* k_b, const std::byte* v_b, int64_t H, int64_t nope, int64_t V, int64_t L, size_t es,
                    std::byte* kv_b) {
  for (int64_t h = 0; h < H; ++h) {
    std::byte* head = kv_b + size_t(h * (nope + V) * L) * es;
    for (int64_t i = 0; i < nope; ++i)
      for (int64_t j = 0; j < L; ++j)
        std::memcpy(head + size_t(i * L + j) * es, k_b + size_t((h * L + j) * nope + i) * es, es);
    std::memcpy(head + size_t(nope * L) * es, v_b + size_t(h * V * L) * es, size_t(V * L) * es);
  }
}

void gguf_split_kv_b(const std::byte* kv_b, int64_t H, int64_t nope, int64_t V, int64_t L, size_t es, std::byte* k_b,
                     std::byte* v_b) {
  for (int64_t h = 0; h < H; ++h) {
    const std::byte* head = kv_b + size_t(h * (nope + V) * L) * es;
    for (int64_t i = 0; i < nope; ++i)
      for (int64_t j = 0; j < L; ++j)
        std::memcpy(k_b + size_t((h * L + j) * nope + i) * es, head + size_t(i * L + j) * es, es);
    std::memcpy(v_b + size_t(h * V * L) * es, head + size_t(nope * L) * es, size_t(V * L) * es);
  }
}

}  // namespace ds
