#include "core/kv_dtype.h"

namespace ds {

std::string_view kv_dtype_name(KvDtype t) {
  switch (t) {
    case KvDtype::F32: return "f32";
    case KvDtype::BF16: return "bf16";
    case KvDtype::Fp8E4M3: return "fp8";
  }
  return "?";
}

std::optional<KvDtype> parse_kv_dtype(std::string_view s) {
  if (s == "f32" || s == "float32") return KvDtype::F32;
  if (s == "bf16" || s == "bfloat16") return KvDtype::BF16;
  if (s == "fp8" || s == "fp8_e4m3") return KvDtype::Fp8E4M3;
  return std::nullopt;
}

}  // namespace ds
