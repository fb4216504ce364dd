#include "core/activation_dtype.h"

namespace ds {

std::string_view activation_dtype_name(ActivationDtype t) { return t == ActivationDtype::BF16 ? "bf16" : "f32"; }

std::optional<ActivationDtype> parse_activation_dtype(std::string_view s) {
  if (s == "f32" || s == "float32") return ActivationDtype::F32;
  if (s == "bf16" || s == "bfloat16") return ActivationDtype::BF16;
  return std::nullopt;
}

}  // namespace ds
