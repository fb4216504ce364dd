// Two launchers appending to one ledger at once (two `recipe run`s sharing an --out folder) make
// one valid chain: append_ledger reads the chain and writes the next entry under an exclusive
// flock, so neither ever links to an entry the other has already followed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "recipe/ledger.h"
#include "recipe_test_util.h"

namespace ds::recipe {
namespace {

using testing::TempDir;

constexpr int kWriters = 2, kEach = 50;

// The child's whole life: wait for the start signal, append kEach entries, exit 0 (1 with the
// reason on stderr). It never returns into the test framework.
[[noreturn]] void writer(int go_fd, const std::string& path, int w) {
  char c = 0;
  if (::read(go_fd, &c, 1) != 1) ::_exit(2);
  // About the size of a real entry (a point's plan, staged files, summary: a KB or more), which is
  // also what makes an unlocked read-check-write slow enough to be overtaken.
  const std::string plan(1024, 'p');
  try {
    for (int i = 0; i < kEach; ++i) append_ledger(path, {{"writer", w}, {"i", i}, {"plan", plan}});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "writer %d: %s\n", w, e.what());
    ::_exit(1);
  }
  ::_exit(0);
}

// The child's exit status, or -1 if it has not ended by the deadline (a hang: it is killed, by
// its pid). The deadline only catches a hang; a healthy run takes about a second.
int wait_child(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    int st = 0;
    const pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (r < 0) return -2;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TEST(LedgerProcesses, TwoProcessesAppendingFiftyEachMakeOneChainOfAHundred) {
  TempDir d("ledger_procs");
  const std::string path = (d.path / "ledger.jsonl").string();
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> pids;
  for (int w = 0; w < kWriters; ++w) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(go[1]);
      writer(go[0], path, w);
    }
    pids.push_back(pid);
  }
  ::close(go[0]);
  // Both are forked and waiting: start them together, so their appends overlap.
  const char start[kWriters] = {};
  ASSERT_EQ(::write(go[1], start, kWriters), kWriters);
  ::close(go[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  for (int w = 0; w < kWriters; ++w) EXPECT_EQ(wait_child(pids[size_t(w)], deadline), 0) << "writer " << w;

  const std::vector<nlohmann::json> entries = read_ledger(path);  // the chain checks, or throws
  ASSERT_EQ(entries.size(), size_t(kWriters * kEach));
  // Each writer's entries are all there, once, in the order it appended them.
  int next[kWriters] = {};
  for (const nlohmann::json& e : entries) {
    const int w = e.at("writer").get<int>();
    ASSERT_TRUE(w >= 0 && w < kWriters) << e;
    EXPECT_EQ(e.at("i").get<int>(), next[w]++) << e;
  }
  for (int w = 0; w < kWriters; ++w) EXPECT_EQ(next[w], kEach);
}

}  // namespace
}  // namespace ds::recipe
