#include "bench/workload_source.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "bench/trace_agentic.h"
#include "bench/trace_mooncake.h"
#include "core/error.h"
#include "core/json_parse.h"

namespace ds::bench {

std::string detect_trace_format(const std::string& path) {
  std::ifstream f(path);
  DS_CHECK(f, "cannot open trace " + path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = parse_json_or_discarded(line);
    return !j.is_discarded() && j.is_object() && j.contains("input_length") ? "mooncake" : "agentic";
  }
  throw Error(path + ": the trace is empty");
}

Workload make_workload(const WorkloadSpec& spec) {
  DS_CHECK(spec.trace_path.empty() != spec.synthetic.empty(),
           "give exactly one workload: --trace PATH or --synthetic agentic-code");
  Workload w;
  if (!spec.synthetic.empty()) {
    DS_CHECK(spec.synthetic == "agentic-code" || spec.synthetic == "fixed",
             "unknown --synthetic \"" + spec.synthetic + "\" (known: agentic-code, fixed)");
    SyntheticConfig c = spec.synthetic_cfg;
    if (spec.block_size > 0) c.block_size = spec.block_size;
    w = spec.synthetic == "fixed" ? generate_fixed(c) : generate_agentic_code(c);
  } else {
    std::string format = spec.trace_format;
    if (format == "auto") format = detect_trace_format(spec.trace_path);
    if (format == "mooncake")
      w = load_mooncake(spec.trace_path, spec.block_size > 0 ? spec.block_size : 512);
    else if (format == "agentic")
      w = load_agentic(spec.trace_path, spec.block_size);
    else
      throw Error("unknown --trace-format \"" + format + "\" (known: auto, mooncake, agentic)");
  }
  scale_workload(w, spec.scale);
  return w;
}

}  // namespace ds::bench
