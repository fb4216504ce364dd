#include "bench/server_probe.h"

#include <cstdlib>
#include <sstream>

#include "core/json_parse.h"

namespace ds::bench {

using nlohmann::json;

MetricSamples parse_prometheus(const std::string& text) {
  MetricSamples m;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    // The series ends at the first space outside the label braces; the value follows.
    size_t end = 0;
    bool in_labels = false, in_string = false;
    for (; end < line.size(); ++end) {
      const char c = line[end];
      if (in_string) {
        if (c == '\\') ++end;
        else if (c == '"') in_string = false;
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{') {
        in_labels = true;
      } else if (c == '}') {
        in_labels = false;
      } else if (c == ' ' && !in_labels) {
        break;
      }
    }
    if (end >= line.size()) continue;
    const std::string series = line.substr(0, end);
    const char* start = line.c_str() + end + 1;
    char* stop = nullptr;
    const double v = std::strtod(start, &stop);
    if (stop == start) continue;
    m[series] = v;
  }
  return m;
}

std::optional<double> metric_sum(const MetricSamples& m, const std::string& name) {
  std::optional<double> sum;
  for (auto it = m.lower_bound(name); it != m.end(); ++it) {
    const std::string& s = it->first;
    if (s.compare(0, name.size(), name) != 0) break;
    if (s.size() != name.size() && s[name.size()] != '{') continue;
    sum = sum.value_or(0) + it->second;
  }
  return sum;
}

MetricSamples metric_delta(const MetricSamples& before, const MetricSamples& after) {
  MetricSamples d;
  for (auto& [k, v] : after) {
    auto it = before.find(k);
    d[k] = v - (it == before.end() ? 0.0 : it->second);
  }
  return d;
}

const json* find_key(const json& j, const std::string& key) {
  if (j.is_object()) {
    if (auto it = j.find(key); it != j.end()) return &*it;
    for (auto& [k, v] : j.items())
      if (auto* f = find_key(v, key)) return f;
  } else if (j.is_array()) {
    for (auto& v : j)
      if (auto* f = find_key(v, key)) return f;
  }
  return nullptr;
}

std::optional<std::string> ServerProbe::get(const std::string& path) const {
  auto c = target_.client(10);
  auto res = c->Get(target_.path(path));
  if (!res || res->status != 200) return std::nullopt;
  return res->body;
}

json ServerProbe::models() const {
  auto body = get("/v1/models");
  if (!body) return nullptr;
  json j = parse_json_or_discarded(*body);
  return j.is_discarded() ? json(nullptr) : j;
}

MetricSamples ServerProbe::metrics() const {
  auto body = get("/metrics");
  return body ? parse_prometheus(*body) : MetricSamples{};
}

bool ServerProbe::healthy() const { return get("/health").has_value(); }

}  // namespace ds::bench
