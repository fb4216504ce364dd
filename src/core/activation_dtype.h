// The type activations meet bf16 weights in (`--activation-dtype`). f32 keeps every product
// exact (f32 activation x bf16 weight, f32 FMAs); bf16 rounds each activation to nearest even
// first, so that two products come from one AVX-512 BF16 dot-product instruction (vdpbf16ps):
// twice the multiply-adds per instruction where the matmul is compute-bound (prefill, verify,
// decode at concurrency). llama.cpp treats bf16 weights the same way. F32 and quantized weights
// are unaffected (quantized ones always meet int8 activation blocks).
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace ds {

enum class ActivationDtype : uint8_t { F32, BF16 };

// "f32", "bf16"; parse also takes "float32" and "bfloat16".
std::string_view activation_dtype_name(ActivationDtype t);
std::optional<ActivationDtype> parse_activation_dtype(std::string_view s);

}  // namespace ds
