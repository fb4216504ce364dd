// `deltaserve serve` as a child process on a free port, for the CLI tests: started with the
// given arguments, killed when the object goes, its output kept in a log file.
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "../server/server_harness.h"
#include "../support/run_capture.h"
#include "../support/remove_at_exit.h"

namespace ds::testing {

class ServeProcess {
 public:
  // `serve_args`: everything after `deltaserve serve` but the port, which is chosen here.
  explicit ServeProcess(const std::vector<std::string>& serve_args) : port_(free_port()) {
    namespace fs = std::filesystem;
    log_ = ds::test::remove_at_exit(
        (fs::temp_directory_path() / ("ds_serve_" + std::to_string(getpid()) + "_" + std::to_string(port_) + ".log")).string());
    std::vector<std::string> args = {DS_CLI, "serve", "--port", std::to_string(port_)};
    args.insert(args.end(), serve_args.begin(), serve_args.end());
    pid_ = fork();
    if (pid_ == 0) {
      FILE* f = std::fopen(log_.c_str(), "w");
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~ServeProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  bool wait_healthy(int seconds = 120) {
    for (int i = 0; i < seconds * 20; ++i) {
      if (http_call(port_, "GET", "/health").status == 200) return true;
      int st;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        exited_ = true;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // Exit status after a signal, or -1 when it did not exit in time.
  int wait_exit(int seconds) {
    for (int i = 0; i < seconds * 20; ++i) {
      int st;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }
  long rss_kb() const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
    return -1;
  }
  std::string log() const {
    std::ifstream f(log_);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }

 private:
  int port_;
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string log_;
};

}  // namespace ds::testing
