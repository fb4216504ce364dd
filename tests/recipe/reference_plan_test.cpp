// The reference recipe (recipes/kimi-k3-mi355x-agentx.yaml) plans every number of the published
// serving plan (docs/recipes.md): bands, draft tokens and golden AL, rollback, dcp, window,
// verify rows, max-num-seqs / max-batched-tokens, host DRAM per rank, the shared c=14/16 server.
#include <gtest/gtest.h>

#include <map>

#include "recipe/plan.h"
#include "recipe/recipe.h"

namespace ds::recipe {
namespace {

struct Want {
  const char* band;
  int k;
  double al;
  const char* rollback;
  int dcp, window, verify_rows, max_num_seqs, max_batched;
  int64_t total_gb, per_rank_gb;  // 0: no host tier
  int server_of;
};

const Plan& reference_plan() {
  static const Plan p = plan_recipe(load_recipe(std::string(DS_SOURCE_DIR) + "/recipes/kimi-k3-mi355x-agentx.yaml"));
  return p;
}

TEST(ReferenceRecipe, EveryPointMatchesThePublishedPlan) {
  const std::map<int, Want> want = {
      {1, {"latency-floor", 7, 3.84, "lanes", 1, 2, 16, 32, 8192, 0, 0, 1}},
      {2, {"latency-floor", 7, 3.84, "lanes", 1, 4, 32, 32, 8192, 0, 0, 2}},
      {4, {"latency-floor", 7, 3.84, "lanes", 1, 8, 64, 32, 8192, 0, 0, 4}},
      {8, {"mid", 3, 3.00, "replay", 8, 16, 64, 32, 4096, 1028, 128, 8}},
      {12, {"mid", 3, 3.00, "replay", 8, 24, 96, 24, 4096, 1028, 128, 12}},
      {14, {"mid", 3, 3.00, "replay", 8, 32, 128, 32, 8192, 1028, 128, 16}},
      {16, {"mid", 3, 3.00, "replay", 8, 32, 128, 32, 8192, 1028, 128, 16}},
      {32, {"throughput", 0, 0, "", 8, 64, 64, 64, 8192, 1028, 128, 32}},
      {40, {"throughput", 0, 0, "", 8, 80, 80, 80, 8192, 1028, 128, 40}},
      {56, {"throughput", 0, 0, "", 8, 112, 112, 112, 8192, 1538, 192, 56}},
      {64, {"throughput", 0, 0, "", 8, 128, 128, 128, 8192, 1538, 192, 64}},
  };
  const Plan& plan = reference_plan();
  ASSERT_EQ(plan.points.size(), want.size());
  for (const PointPlan& p : plan.points) {
    SCOPED_TRACE("concurrency " + std::to_string(p.concurrency));
    const auto it = want.find(p.concurrency);
    ASSERT_NE(it, want.end());
    const Want& w = it->second;
    EXPECT_EQ(p.band, w.band);
    EXPECT_EQ(p.draft_tokens, w.k);
    EXPECT_DOUBLE_EQ(p.acceptance_length, w.al);
    EXPECT_EQ(p.rollback, w.rollback);
    EXPECT_EQ(p.dcp, w.dcp);
    EXPECT_EQ(p.window, w.window);
    EXPECT_EQ(p.window_pinned, p.concurrency == 14);
    EXPECT_EQ(p.verify_rows, w.verify_rows);
    EXPECT_EQ(p.max_num_seqs, w.max_num_seqs);
    EXPECT_EQ(p.max_num_batched_tokens, w.max_batched);
    EXPECT_EQ(p.total_cpu_dram_gb, w.total_gb);
    EXPECT_EQ(p.per_rank_dram_gb, w.per_rank_gb);
    EXPECT_EQ(p.server_of, w.server_of);
    if (w.k > 0) {
      EXPECT_EQ(p.spec_method, "block");        // the curve's verification
      EXPECT_EQ(p.draft_sample, "probabilistic");  // and its drafting
    }
  }
}

// The plan's flags say the same: c=14 and c=16 run one server, whose command names the window.
TEST(ReferenceRecipe, ConcurrencyFourteenRunsTheSixteenServerUnchanged) {
  const Plan& plan = reference_plan();
  const PointPlan *p14 = nullptr, *p16 = nullptr;
  for (const PointPlan& p : plan.points) {
    if (p.concurrency == 14) p14 = &p;
    if (p.concurrency == 16) p16 = &p;
  }
  ASSERT_TRUE(p14 && p16);
  EXPECT_EQ(p14->serve_argv, p16->serve_argv);
  EXPECT_NE(shell_line(p16->serve_argv).find("--spec-window 32"), std::string::npos);
  EXPECT_NE(shell_line(p16->serve_argv).find("--total-cpu-dram-gb 1028"), std::string::npos);
  EXPECT_NE(p14->bench_argv, p16->bench_argv);  // only the client's concurrency differs
}

TEST(ReferenceRecipe, EveryPointServesUnderMpirunWithItsRanks) {
  for (const PointPlan& p : reference_plan().points) {
    SCOPED_TRACE("concurrency " + std::to_string(p.concurrency));
    const std::string line = shell_line(p.serve_argv);
    EXPECT_EQ(line.rfind("mpirun -np 8 --bind-to none ", 0), 0u) << line;
    EXPECT_NE(line.find(" --tp 8"), std::string::npos) << line;
    EXPECT_EQ(line.find(" --dcp ") != std::string::npos, p.dcp > 1) << line;
  }
}

// The formula of the reference, and its floor at each step.
TEST(HostBudget, AggregateThenPerRank) {
  EXPECT_EQ(total_cpu_dram_gb(3095781, 2861022, 0.343, 8, 8), 1028);
  EXPECT_EQ(total_cpu_dram_gb(3095781, 2861022, 0.513, 8, 8), 1538);
  EXPECT_EQ(total_cpu_dram_gb(1000000, 2861022, 0.5, 8, 8), 524);   // under the cap: available counts
  EXPECT_EQ(total_cpu_dram_gb(3095781, 2861022, 0.343, 4, 8), 514);  // half the node's devices
  EXPECT_EQ(total_cpu_dram_gb(3095781, 0, 0.343, 8, 8), 1113);       // no cap
}

TEST(CpuDemoRecipe, ThreeBandsRunnableHere) {
  PlanOptions o;
  o.machine_available_mib = 16384;
  const Plan p = plan_recipe(load_recipe(std::string(DS_SOURCE_DIR) + "/recipes/cpu-demo.yaml"), o);
  std::map<std::string, int> bands;
  for (const PointPlan& x : p.points) {
    EXPECT_NE(x.serve_argv[0], "mpirun") << x.concurrency;  // one process
    ++bands[x.band];
  }
  EXPECT_EQ(bands.size(), 3u);
  // Lanes at the bottom, replay in the middle, no draft at the top.
  EXPECT_EQ(p.points.front().rollback, "lanes");
  EXPECT_EQ(p.points.back().draft_tokens, 0);
  bool replay = false;
  for (const PointPlan& x : p.points) replay = replay || x.rollback == "replay";
  EXPECT_TRUE(replay);
}

}  // namespace
}  // namespace ds::recipe
