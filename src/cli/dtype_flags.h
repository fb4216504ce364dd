// --kv-cache-dtype and --activation-dtype, as serve and generate both take them.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "core/activation_dtype.h"
#include "core/kv_dtype.h"

namespace ds::cli {

inline void add_kv_cache_dtype_option(CLI::App* cmd, KvDtype* out) {
  cmd->add_option_function<std::string>(
         "--kv-cache-dtype", [out](const std::string& s) { *out = parse_kv_dtype(s).value_or(KvDtype::F32); },
         "Attention KV cache element type: f32 (exact), bf16 (half the bytes), fp8 (E4M3 with a scale per "
         "head and token: a quarter)")
      ->check(CLI::IsMember({"f32", "bf16", "fp8"}))
      ->default_str("f32");
}

inline void add_activation_dtype_option(CLI::App* cmd, ActivationDtype* out) {
  cmd->add_option_function<std::string>(
         "--activation-dtype",
         [out](const std::string& s) { *out = parse_activation_dtype(s).value_or(ActivationDtype::F32); },
         "How activations meet bf16 weights: f32 (exact products) or bf16 (rounded to nearest even, then "
         "AVX-512 BF16 dot products: about twice the compute-bound matmul rate, for prefill, verification and "
         "decode at concurrency; results move by the activations' rounding)")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->default_str("f32");
}

}  // namespace ds::cli
