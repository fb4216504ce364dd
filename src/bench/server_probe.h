// What the benchmark learns from the server besides the requests themselves: /v1/models
// metadata and Prometheus /metrics, scraped before and after each measured window.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "bench/http_target.h"

namespace ds::bench {

// Series name with its labels (`name{a="b"}`) -> value.
using MetricSamples = std::map<std::string, double>;

// Parses Prometheus text exposition; comment lines and malformed lines are skipped.
MetricSamples parse_prometheus(const std::string& text);
// Sum over every series of metric `name`, whatever its labels; nullopt if none.
std::optional<double> metric_sum(const MetricSamples& m, const std::string& name);
// after - before for every series in `after` (counters' growth, gauges' change).
MetricSamples metric_delta(const MetricSamples& before, const MetricSamples& after);

// Finds `key` anywhere in a JSON tree (depth-first); used for facts whose place in /v1/models
// differs between servers (vocab_size, max_model_len, synthetic acceptance).
const nlohmann::json* find_key(const nlohmann::json& j, const std::string& key);

class ServerProbe {
 public:
  explicit ServerProbe(HttpTarget target) : target_(std::move(target)) {}
  // /v1/models body, or null when the server does not answer it.
  nlohmann::json models() const;
  // /metrics samples; empty when the server exposes none.
  MetricSamples metrics() const;
  bool healthy() const;

 private:
  std::optional<std::string> get(const std::string& path) const;
  HttpTarget target_;
};

}  // namespace ds::bench
