// Reading the server's own account of a run out of its /metrics and /v1/models: the served
// prefix hit rate, the speculative acceptance length, and the facts a result must carry (served
// names, synthetic acceptance, build). Metric names are tried in order; DeltaServe's first, then
// vLLM's, so the benchmark reads other engines too.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "bench/server_probe.h"

namespace ds::bench {

struct SourcedValue {
  double value = 0;
  std::string source;  // the metric(s) it came from
};

// Prefix-cache hits / queries over the window, from counter deltas.
std::optional<SourcedValue> served_hit_rate_from_metrics(const MetricSamples& delta);
// Mean acceptance length (bonus token included): a gauge after the run, or 1 + accepted draft
// tokens / verify rounds from counter deltas.
std::optional<SourcedValue> acceptance_length(const MetricSamples& after,
                                              const MetricSamples& delta);
// served model names, synthetic acceptance, build / version, context length, vocab size.
nlohmann::json server_facts(const nlohmann::json& models, const MetricSamples& metrics);
// The series of `delta` whose names start with a prefix worth keeping with a result.
nlohmann::json engine_metrics(const MetricSamples& samples);

}  // namespace ds::bench
