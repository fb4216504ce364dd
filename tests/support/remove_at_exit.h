// Files and folders a test process writes under the temp directory (models made from presets,
// server logs, configs), removed when the process ends, so a run leaves nothing behind in /tmp
// (a 100M preset is ~200 MB, and every test binary makes its own per process).
#pragma once
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

namespace ds::test {

class RemovedAtExit {
 public:
  static RemovedAtExit& instance() {
    static RemovedAtExit r;
    return r;
  }
  void add(const std::string& path) {
    std::lock_guard lock(mu_);
    paths_.push_back(path);
  }
  ~RemovedAtExit() {
    // A child made by fork() that returns through exit() must not delete its parent's files.
    if (::getpid() != owner_) return;
    for (const auto& p : paths_) {
      std::error_code ec;
      std::filesystem::remove_all(p, ec);
    }
  }

 private:
  RemovedAtExit() : owner_(::getpid()) {}
  pid_t owner_;
  std::mutex mu_;
  std::vector<std::string> paths_;
};

// Registers `path` for removal when this process exits normally, and returns it.
inline const std::string& remove_at_exit(const std::string& path) {
  RemovedAtExit::instance().add(path);
  return path;
}

}  // namespace ds::test
