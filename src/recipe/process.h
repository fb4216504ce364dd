// The processes a recipe run starts (servers, benchmarks): spawned with a cleaned environment,
// output to a log file, waited for with a deadline, stopped with SIGTERM then SIGKILL.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

namespace ds::recipe {

// The environment a launched server or bench gets: this process's, without any proxy variable
// (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY in both cases: a proxy baked into the environment must not
// see loopback traffic), with NO_PROXY / no_proxy set to the loopback names.
std::vector<std::string> launch_environment(char** env);

// Starts argv[0] (searched in PATH) with `env`, stdin from /dev/null, stdout and stderr appended
// to `log_path`. Throws ds::Error when it cannot start.
pid_t spawn_process(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                    const std::string& log_path);

// Waits up to timeout_s for the process to exit: its exit status (128 + signal when killed by
// one), or -1 if it is still running.
int wait_process(pid_t pid, double timeout_s);
// Whether it has exited (reaping it); `status` gets what wait_process would return.
bool process_exited(pid_t pid, int* status);

// SIGTERM, up to grace_s to exit, then SIGKILL. Returns the exit status.
int stop_process(pid_t pid, double grace_s);

}  // namespace ds::recipe
