// Scratch files a test writes under the temp directory: names unique to the process (ctest runs
// test binaries side by side), and raw bytes written as they are.
#pragma once
#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace ds::test {

// <temp>/<prefix>-<pid>-<tag>
inline std::string scratch_path(const std::string& prefix, const std::string& tag) {
  return (std::filesystem::temp_directory_path() / (prefix + "-" + std::to_string(::getpid()) + "-" + tag)).string();
}

inline void write_bytes(const std::string& path, const std::vector<std::byte>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

}  // namespace ds::test
