// `deltaserve bench`: builds the workload, learns the server's facts, and runs one measured point
// per concurrency against the same server, writing each point's results.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "bench/agentic_edit.h"
#include "bench/lanes.h"
#include "bench/metrics.h"
#include "bench/openai_sender.h"
#include "bench/synthetic.h"

namespace ds::bench {

struct BenchOptions {
  std::string url = "http://127.0.0.1:8000";
  std::string model;  // default: the first model /v1/models lists
  Endpoint endpoint = Endpoint::completions;
  std::string tokenizer_path;  // tokenizer.json; needed for --endpoint chat

  // Workload: a trace file, or a synthetic generator.
  std::string trace_path;
  std::string trace_format = "auto";  // auto | mooncake | agentic
  std::string synthetic;              // "", "agentic-code", "agentic-edit" or "fixed"
  SyntheticConfig synthetic_cfg;
  AgenticEditConfig edit_cfg;         // --synthetic agentic-edit
  int64_t block_size = 0;  // 0: the format's own (Mooncake 512, agentic traces' block_size)
  double scale = 1.0;
  int64_t vocab_size = 0;  // 0: from /v1/models or the tokenizer

  std::vector<int> concurrency = {1};
  LoadConfig load;
  double request_timeout_s = 600;
  std::optional<double> temperature;
  int ranks = 1;
  ValidityRules validity;

  std::string out_dir = "out/bench";
  std::string label;  // names the run in the report (default: model @ url)
  double progress_interval_s = 5;
  double wait_for_server_s = 0;  // poll /health this long before starting
};

// Runs the sweep; returns the process exit code (0 when every point ran, valid or not).
int run_bench(const BenchOptions& opts);

}  // namespace ds::bench
