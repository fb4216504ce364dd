// A recipe: the serving plan of one model for an agentic benchmark, as one YAML file
// (docs/recipes.md): the model and its draft, the name it is served under, the hardware budget,
// the golden acceptance curve, the benchmark, the concurrency points, and bands of server
// settings keyed by concurrency ranges with per-point overrides. `load_recipe` only reads and
// type-checks; the rules that relate settings to each other are the plan's (recipe/plan.h).
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ds::recipe {

// A setting's value and the line it was written on (1-based), for messages that point at it.
template <typename T>
struct At {
  T value{};
  int line = 0;
};

// The knobs a band sets and a point may override. Absent knobs take the defaults of the plan.
struct Knobs {
  std::optional<At<int>> draft_tokens;           // K; 0: no speculation
  std::optional<At<std::string>> rollback;       // lanes | replay
  std::optional<At<std::string>> spec_method;    // greedy | probabilistic | block
  std::optional<At<std::string>> draft_sample;   // greedy | probabilistic
  std::optional<At<int>> dcp;                    // decode context parallel ranks
  std::optional<At<double>> dram_utilization;    // fraction of host DRAM for the per-rank tier
  std::optional<At<int>> max_num_seqs;           // -1: "window"
  std::optional<At<int>> max_num_batched_tokens;
  std::optional<At<int>> window;                 // batch-shape window, sequences; default 2 x c
};

inline constexpr int kSeqsFromWindow = -1;  // max_num_seqs: window

struct Band {
  std::string name;
  int lo = 0, hi = 0;  // concurrency range, inclusive
  int line = 0;
  Knobs knobs;
};

struct Hardware {
  // Host memory available to the server, MiB: a figure, or read from /proc/meminfo
  // (MemAvailable) when the recipe says `this-machine`.
  double available_mib = 0;
  bool this_machine = false;
  double dram_cap_mib = 0;  // 0: no cap
  int ranks = 1;            // tensor-parallel ranks serving one model
  int devices_per_node = 1;
  std::string tuned_isa;    // the kernel ISA the recipe was tuned on; "" if not said
};

struct BenchSpec {
  std::string workload = "synthetic";  // synthetic | trace
  std::string synthetic = "agentic-code";
  std::string trace;                    // path (relative to the recipe's folder) for workload trace
  std::optional<At<std::string>> model; // the name the bench sends; default: served_name
  double duration_s = 60;
  double grace_period_s = 10;
  int seed = 1;
  int warmup_requests_per_lane = -1;    // -1: the bench's default
};

struct ServerSpec {
  std::string host = "127.0.0.1";
  int port = 8790;                      // points' servers listen here, one at a time
  int threads = 0;                      // 0: the server's default (all cores)
  double kv_pool_gb = 0;                // 0: the server's auto sizing
  double start_timeout_s = 300;         // /health must answer within this
};

struct Recipe {
  std::string path;  // the file read
  std::string dir;   // its folder: relative paths in the recipe are relative to it
  std::string name;
  std::string model, draft_model;  // directories, resolved against dir
  std::string served_name;
  int served_name_line = 0;
  std::string golden_al;           // resolved against dir; "" when no band speculates
  Hardware hw;
  BenchSpec bench;
  ServerSpec server;
  std::vector<int> concurrency;
  std::vector<Band> bands;
  std::map<int, std::pair<Knobs, int>> points;  // concurrency -> overrides, and their line
};

// Reads and type-checks a recipe. Throws ds::Error naming the file, the line and the key for an
// unknown key, a key given twice (the second would silently replace the first), a wrong type or
// a value out of its range.
Recipe load_recipe(const std::string& path);

}  // namespace ds::recipe
