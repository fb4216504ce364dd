// The launcher: a started process gets no proxy variable (and loopback in NO_PROXY); a server
// that does not list the name the bench sends stops its point with that message; a run of a small
// recipe against the real CLI stages the model, reuses one server for two points with identical
// settings, appends one ledger entry per point with the build and kernel ISA, and draws the report.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "../support/missing_dependency.h"
#include "core/error.h"
#include "recipe/ledger.h"
#include "recipe/process.h"
#include "recipe/recipe.h"
#include "recipe/run.h"
#include "recipe_test_util.h"

extern char** environ;

namespace ds::recipe {
namespace {

namespace fs = std::filesystem;
using testing::read_text;
using testing::TempDir;

TEST(Launch, StartedProcessesSeeNoProxyVariable) {
  TempDir d("launch_env");
  for (const char* v : {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"})
    setenv(v, "http://proxy.invalid:3128", 1);
  setenv("NO_PROXY", "example.com", 1);
  setenv("DS_RECIPE_TEST_KEEP", "kept", 1);
  const std::string out = (d.path / "env.txt").string();
  const pid_t pid = spawn_process({"sh", "-c", "env > " + out}, launch_environment(environ), (d.path / "log").string());
  EXPECT_EQ(wait_process(pid, 30), 0);
  for (const char* v : {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"})
    unsetenv(v);
  unsetenv("NO_PROXY");
  const std::string env = read_text(out);
  EXPECT_EQ(env.find("proxy.invalid"), std::string::npos) << env;
  EXPECT_EQ(env.find("example.com"), std::string::npos);
  EXPECT_NE(env.find("NO_PROXY=127.0.0.1,localhost,::1"), std::string::npos);
  EXPECT_NE(env.find("no_proxy=127.0.0.1,localhost,::1"), std::string::npos);
  EXPECT_NE(env.find("DS_RECIPE_TEST_KEEP=kept"), std::string::npos) << "the rest of the environment is kept";
}

bool cli_built() { return fs::exists(DS_CLI); }
std::string tiny_model() { return std::string(DS_SOURCE_DIR) + "/tests/data/models/tiny-hybrid-f32"; }

TEST(Launch, WrongServedNameStopsThePointWithTheMessage) {
  DS_REQUIRE_DEPENDENCY(cli_built(), "the deltaserve CLI is not built");
  TempDir d("launch_name");
  const int port = ds::testing::free_port();
  const pid_t pid = spawn_process({DS_CLI, "serve", "--model", tiny_model(), "--served-model-name", "other",
                                   "--threads", "1", "--port", std::to_string(port)},
                                  launch_environment(environ), (d.path / "server.log").string());
  std::string msg;
  try {
    wait_for_server("http://127.0.0.1:" + std::to_string(port), pid, 120, "tiny");
  } catch (const Error& e) {
    msg = e.what();
  }
  stop_process(pid, 30);
  EXPECT_NE(msg.find("lists 'other'"), std::string::npos) << msg << "\n" << read_text(d.path / "server.log");
  EXPECT_NE(msg.find("not 'tiny' that the bench sends"), std::string::npos) << msg;
}

TEST(Launch, ServerThatDiesAtStartUpIsReportedNotWaitedFor) {
  DS_REQUIRE_DEPENDENCY(cli_built(), "the deltaserve CLI is not built");
  TempDir d("launch_dies");
  const pid_t pid = spawn_process({DS_CLI, "serve", "--model", (d.path / "no-model").string(), "--port",
                                   std::to_string(ds::testing::free_port())},
                                  launch_environment(environ), (d.path / "server.log").string());
  try {
    wait_for_server("http://127.0.0.1:1", pid, 120, "x");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exited during start-up"), std::string::npos) << e.what();
  }
}

TEST(RecipeRun, SmallSweepStagesReusesAServerLedgersAndReports) {
  DS_REQUIRE_DEPENDENCY(cli_built(), "the deltaserve CLI is not built");
  TempDir d("run");
  const int port = ds::testing::free_port();
  // Two points on one server: the window is pinned, so their settings are identical.
  const std::string path = d.file("tiny.yaml",
                                  "name: tiny-sweep\nmodel: " + tiny_model() +
                                      "\nserved_name: tiny\nhardware:\n  available_mib: this-machine\n  tuned_isa: avx512\n"
                                      "server:\n  port: " + std::to_string(port) +
                                      "\n  threads: 1\n  kv_pool_gb: 0.25\n"
                                      "bench:\n  duration_s: 2\n  grace_period_s: 2\n  warmup_requests_per_lane: 0\n"
                                      "concurrency: [1, 2]\nbands:\n  - name: all\n    concurrency: 1-8\n"
                                      "    window: 4\n    max_num_seqs: window\n");
  RunOptions o;
  o.out_dir = (d.path / "out").string();
  o.program = DS_CLI;
  o.model_cache = (d.path / "cache").string();
  std::vector<std::string> lines;
  o.log = [&](const std::string& s) { lines.push_back(s); };
  const RunSummary s = run_recipe(load_recipe(path), o);
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  ASSERT_EQ(s.points_ok, 2) << all << read_text(d.path / "out/points/c1/server.log") << read_text(d.path / "out/points/c1/bench.log");
  EXPECT_EQ(s.points_failed, 0);
  EXPECT_NE(all.find("(copied)"), std::string::npos) << all;
  EXPECT_NE(all.find("c=2: reuses the server started for c=1"), std::string::npos) << all;

  const auto entries = read_ledger(s.ledger);
  ASSERT_EQ(entries.size(), 2u);
  for (const auto& e : entries) {
    EXPECT_EQ(e["status"], "ok");
    EXPECT_EQ(e["recipe"], "tiny-sweep");
    EXPECT_FALSE(e["launcher"]["revision"].get<std::string>().empty());
    EXPECT_FALSE(e["server"]["kernel_isa"].get<std::string>().empty());
    EXPECT_TRUE(e["server"]["build"].contains("compiler"));
    EXPECT_EQ(e["staged"]["model"]["files"].size(), 4u);  // with a checksum each
    EXPECT_GT(e["summary"]["completed"].get<int>(), 0);
    EXPECT_TRUE(fs::exists(e["results"].get<std::string>()));
  }
  EXPECT_EQ(entries[0]["server_reused"], false);
  EXPECT_EQ(entries[1]["server_reused"], true);
  ASSERT_FALSE(s.report.empty());
  EXPECT_NE(read_text(s.report).find("tiny-sweep"), std::string::npos);

  // A second run reuses the staged copy and extends the same chain.
  const RunSummary again = run_recipe(load_recipe(path), o);
  EXPECT_EQ(again.points_ok, 2);
  EXPECT_EQ(read_ledger(s.ledger).size(), 4u);
}

TEST(RecipeRun, AModelThatIsNotOnThisMachineStopsTheRunBeforeAnyServerStarts) {
  // The published plan's points run under mpirun with 8 ranks; its checkpoint is not here, so
  // staging stops the run first, naming it, and no point is recorded.
  TempDir d("run_ranks");
  RunOptions o;
  o.out_dir = (d.path / "out").string();
  o.program = DS_CLI;
  o.model_cache = (d.path / "cache").string();
  try {
    run_recipe(load_recipe(std::string(DS_SOURCE_DIR) + "/recipes/kimi-k3-mi355x-agentx.yaml"), o);
    FAIL() << "ran a recipe whose model is missing";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/models/Kimi-K3-FP4"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(read_ledger(o.out_dir + "/ledger.jsonl").empty());
}

}  // namespace
}  // namespace ds::recipe
