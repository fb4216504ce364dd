// Picks and loads the workload the flags name: a Mooncake or agentic trace file, or a
// synthetic generator, then applies --scale.
#pragma once
#include <string>

#include "bench/synthetic.h"
#include "bench/workload.h"

namespace ds::bench {

struct WorkloadSpec {
  std::string trace_path;
  std::string trace_format = "auto";  // auto | mooncake | agentic
  std::string synthetic;              // "", "agentic-code" or "fixed"
  SyntheticConfig synthetic_cfg;
  int64_t block_size = 0;
  double scale = 1.0;
};

// "auto" reads the first non-blank line: a JSON object with input_length is Mooncake JSONL,
// anything else an agentic trace.
std::string detect_trace_format(const std::string& path);
Workload make_workload(const WorkloadSpec& spec);

}  // namespace ds::bench
