// Helpers for the recipe tests: recipes written to a temporary folder, next to a golden curve.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "../support/free_port.h"

namespace ds::recipe::testing {

// A file's whole text ("" when it cannot be read).
inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// A fresh folder per test, removed at the end.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    path = std::filesystem::temp_directory_path() / ("ds_recipe_" + tag + "_" + std::to_string(getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name, const std::string& text) const {
    const auto p = path / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
};

inline const char* kGolden = R"(model: m
draft_model: d
draft_sample_method: probabilistic
rejection_sample_method: block
thinking_on:
  1: 1.85
  3: 3.00
  7: 3.84
)";

}  // namespace ds::recipe::testing
