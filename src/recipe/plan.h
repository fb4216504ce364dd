// A recipe's plan: for every concurrency point, its band, the values derived from the recipe's
// rules (docs/recipes.md), and the exact `deltaserve serve` and `deltaserve bench` command lines.
// Planning validates the whole recipe first and refuses it with one line naming the point and
// the rule broken; a plan that exists is one every point of which can be launched as printed.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "recipe/recipe.h"

namespace ds::recipe {

struct PointPlan {
  int concurrency = 0;
  std::string band;
  int draft_tokens = 0;          // K
  double acceptance_length = 0;  // golden AL at K; 0 without speculation
  std::string rollback, spec_method, draft_sample;  // empty without speculation
  int dcp = 1;
  int window = 0;                // sequences; 2 x concurrency unless pinned
  bool window_pinned = false;
  int verify_rows = 0;           // window x (1 + K)
  int max_num_seqs = 0;
  int max_num_batched_tokens = 0;
  double dram_utilization = 0;   // 0: no host DRAM tier
  int64_t total_cpu_dram_gb = 0;
  int64_t per_rank_dram_gb = 0;
  std::vector<std::string> serve_argv;  // program first; `mpirun -np N` before it with ranks
  std::vector<std::string> bench_argv;
  std::string result_dir;        // <out>/points/c<N>: the bench writes results.json here, the logs go beside it
  // The point whose server this one runs on: points with identical server settings share one
  // server, named after the largest concurrency among them.
  int server_of = 0;
};

struct Plan {
  std::string recipe;            // name
  std::string recipe_path;
  double available_mib = 0;      // what the host budget was computed from
  bool available_from_machine = false;
  std::string golden_al;
  std::string tuned_isa;
  std::string served_name;
  std::string model, draft_model;  // as the server is given them
  std::vector<PointPlan> points;   // run order: points sharing a server are adjacent
};

struct PlanOptions {
  std::string program = "deltaserve";  // argv[0] of the planned commands
  std::string out_dir = "out/recipe";  // results land in <out_dir>/points/c<N>/
  // Staged copies to serve instead of the recipe's own paths (recipe run); empty: the recipe's.
  std::string model_dir, draft_dir;
  // Host memory for `available_mib: this-machine`; 0 reads /proc/meminfo.
  double machine_available_mib = 0;
};

// The host DRAM budget of the agentic benchmark convention (docs/recipes.md):
//   total = floor(min(available, cap) MiB x 1,048,576 x utilisation x tp / devices_per_node / 1e9) GB,
//   per rank = floor(total / tp) GB.
int64_t total_cpu_dram_gb(double available_mib, double cap_mib, double utilization, int tp, int devices_per_node);

// MemAvailable of /proc/meminfo, MiB.
double machine_available_mib();

Plan plan_recipe(const Recipe& r, const PlanOptions& o = {});

nlohmann::json plan_json(const Plan& p);
// A table of the points and their derived values, then each point's two command lines.
std::string plan_text(const Plan& p);
// argv as one shell line, each argument quoted where the shell would split or expand it.
std::string shell_line(const std::vector<std::string>& argv);

}  // namespace ds::recipe
