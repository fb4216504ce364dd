#include "recipe/process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace ds::recipe {
namespace {

int status_of(int raw) {
  if (WIFEXITED(raw)) return WEXITSTATUS(raw);
  if (WIFSIGNALED(raw)) return 128 + WTERMSIG(raw);
  return -1;
}

}  // namespace

std::vector<std::string> launch_environment(char** env) {
  static const char* kProxyVars[] = {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
                                     "http_proxy", "https_proxy", "all_proxy", "no_proxy"};
  std::vector<std::string> out;
  for (char** e = env; e && *e; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    bool proxy = false;
    for (const char* p : kProxyVars) proxy = proxy || key == p;
    if (!proxy) out.push_back(kv);
  }
  out.push_back("NO_PROXY=127.0.0.1,localhost,::1");
  out.push_back("no_proxy=127.0.0.1,localhost,::1");
  return out;
}

pid_t spawn_process(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                    const std::string& log_path) {
  DS_CHECK(!argv.empty(), "spawn: no program");
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  DS_CHECK(log >= 0, "cannot open the log " + log_path + ": " + std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, log, 1);
  posix_spawn_file_actions_adddup2(&fa, log, 2);
  std::vector<char*> av, ev;
  for (const auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  for (const auto& e : env) ev.push_back(const_cast<char*>(e.c_str()));
  ev.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, av[0], &fa, nullptr, av.data(), ev.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(log);
  DS_CHECK(rc == 0, "cannot start " + argv[0] + ": " + std::strerror(rc));
  return pid;
}

bool process_exited(pid_t pid, int* status) {
  int raw = 0;
  const pid_t r = ::waitpid(pid, &raw, WNOHANG);
  if (r == pid) {
    *status = status_of(raw);
    return true;
  }
  if (r < 0 && errno == ECHILD) {
    *status = -1;
    return true;
  }
  return false;
}

int wait_process(pid_t pid, double timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = -1;
  while (!process_exited(pid, &status)) {
    if (std::chrono::steady_clock::now() >= end) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return status;
}

int stop_process(pid_t pid, double grace_s) {
  int status = -1;
  if (process_exited(pid, &status)) return status;
  ::kill(pid, SIGTERM);
  status = wait_process(pid, grace_s);
  if (status >= 0) return status;
  ::kill(pid, SIGKILL);
  return wait_process(pid, 30);
}

}  // namespace ds::recipe
