// The files a run point leaves behind: results.json (figures, settings, server facts, validity)
// and requests.jsonl (one line per request), and reading them back for `deltaserve report`.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/metrics.h"
#include "bench/record.h"

namespace ds::bench {

inline constexpr const char* kResultSchema = "deltaserve-bench-result-v1";

nlohmann::json dist_json(const Dist& d);
nlohmann::json metrics_json(const PointMetrics& m);
nlohmann::json record_json(const RequestRecord& r);

// Writes dir/results.json and dir/requests.jsonl, creating dir.
void write_point(const std::string& dir, const nlohmann::json& result,
                 const std::vector<RequestRecord>& records);

struct LoadedResult {
  std::string path;            // the results.json read
  nlohmann::json result;
  nlohmann::json requests;     // array; empty when requests.jsonl is absent
};

// Each argument is a results.json file or a folder searched recursively for them. Throws
// ds::Error for a file that is not a benchmark result.
std::vector<LoadedResult> load_results(const std::vector<std::string>& paths);

}  // namespace ds::bench
