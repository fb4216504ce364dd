// Helpers for the speculative-decoding tests: the checked-in tiny models, and tiny-vocabulary
// models written once per test process for the distribution tests.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "convert/presets.h"
#include "nlohmann/json.hpp"
#include "../support/remove_at_exit.h"

namespace ds::test {

inline std::string model_path(const std::string& name) { return std::string(DS_SOURCE_DIR) + "/tests/data/models/" + name; }

// A preset's shape with a vocabulary of `vocab` tokens (bos = eos = vocab - 1), weights from
// `seed` in `dtype`, in a temp folder (written once per process). The same seed in bf16 gives
// the f32 weights rounded: a draft that agrees with its f32 target often, not always.
inline std::string preset_model(const std::string& name, int vocab, uint64_t seed, DType dtype = DType::F32) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("ds-spec-test-" + std::to_string(::getpid()) + "-" + name + "-v" + std::to_string(vocab) +
                            "-s" + std::to_string(seed) + (dtype == DType::F32 ? "-f32" : "-bf16")))
                              .string();
  if (!std::filesystem::exists(dir + "/model.safetensors")) {
    remove_at_exit(dir);
    PresetSpec p = preset(name);
    nlohmann::json j = nlohmann::json::parse(p.config_json);
    j["vocab_size"] = vocab;
    p.config_json = j.dump();
    p.vocab_size = vocab;
    std::filesystem::create_directories(dir);
    write_preset_model(p, seed, dtype, dir, vocab - 1, vocab - 1);
  }
  return dir;
}

}  // namespace ds::test
