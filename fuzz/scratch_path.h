// A scratch file or folder a fuzz target rewrites on every input, named per process and removed
// when libFuzzer ends the process (it returns through exit(), which runs static destructors).
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

struct ScratchPath {
  std::string path;
  explicit ScratchPath(const std::string& stem) : path("/tmp/" + stem + "-" + std::to_string(::getpid())) {}
  ~ScratchPath() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};
