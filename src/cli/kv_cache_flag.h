// --kv-cache-dtype, as serve and generate both take it.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

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

}  // namespace ds::cli
