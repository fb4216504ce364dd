// The element type of the attention KV cache (`--kv-cache-dtype`): what one cached key or value
// costs in memory and in decode bandwidth. The kernels that write and read rows of each type are
// in kernels/kv_format.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ds {

enum class KvDtype : uint8_t {
  F32,      // the activations' own type: exact
  BF16,     // rounded to nearest even: half the bytes
  Fp8E4M3,  // OCP E4M3 (max 448) with one f32 scale per head and token row: a quarter of the bytes
};

constexpr size_t kv_elem_bytes(KvDtype t) { return t == KvDtype::F32 ? 4 : t == KvDtype::BF16 ? 2 : 1; }
constexpr bool kv_has_scales(KvDtype t) { return t == KvDtype::Fp8E4M3; }

// "f32", "bf16", "fp8"; parse also takes "float32", "bfloat16" and "fp8_e4m3".
std::string_view kv_dtype_name(KvDtype t);
std::optional<KvDtype> parse_kv_dtype(std::string_view s);

}  // namespace ds
