#include "bench/server_facts.h"

namespace ds::bench {

using nlohmann::json;

namespace {

std::optional<SourcedValue> ratio(const MetricSamples& d, const char* num, const char* den,
                                  double offset) {
  auto n = metric_sum(d, num), q = metric_sum(d, den);
  if (!n || !q || *q <= 0) return std::nullopt;
  return SourcedValue{offset + *n / *q, std::string(num) + " / " + den};
}

}  // namespace

std::optional<SourcedValue> served_hit_rate_from_metrics(const MetricSamples& delta) {
  const char* pairs[][2] = {
      {"deltaserve:prefix_cache_hits_total", "deltaserve:prefix_cache_queries_total"},
      {"deltaserve:prefix_cache_hit_tokens_total", "deltaserve:prompt_tokens_total"},
      {"vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"},
      {"vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"},
  };
  for (auto& p : pairs)
    if (auto r = ratio(delta, p[0], p[1], 0)) return r;
  return std::nullopt;
}

std::optional<SourcedValue> acceptance_length(const MetricSamples& after,
                                              const MetricSamples& delta) {
  if (auto g = metric_sum(after, "deltaserve:spec_acceptance_length"); g && *g > 0)
    return SourcedValue{*g, "deltaserve:spec_acceptance_length"};
  const char* pairs[][2] = {
      // Rounds are the acceptance-length histogram's count.
      {"deltaserve:spec_accepted_tokens_total", "deltaserve:spec_acceptance_length_count"},
      {"deltaserve:spec_accepted_tokens_total", "deltaserve:spec_rounds_total"},
      {"deltaserve:spec_accepted_tokens_total", "deltaserve:spec_verify_rounds_total"},
      {"vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_drafts_total"},
  };
  for (auto& p : pairs)
    if (auto r = ratio(delta, p[0], p[1], 1.0)) return r;
  return std::nullopt;
}

json server_facts(const json& models, const MetricSamples& metrics) {
  json f = json::object();
  json names = json::array();
  if (models.is_object() && models.contains("data") && models["data"].is_array())
    for (auto& m : models["data"])
      if (m.is_object() && m.contains("id")) names.push_back(m["id"]);
  f["served_models"] = names;
  for (const char* key : {"max_model_len", "vocab_size", "build", "version", "kernel_isa"})
    if (const json* v = find_key(models, key)) f[key] = *v;
  // Synthetic acceptance (acceptance lengths taken from a curve, not measured) must be visible in
  // every result it touched, so such figures are never read as measured speedups.
  bool synthetic = false;
  if (const json* v = find_key(models, "synthetic_acceptance")) {
    synthetic = v->is_boolean() ? v->get<bool>() : (v->is_number() ? v->get<double>() > 0 : !v->is_null());
    // DeltaServe's card says which AL was forced and where it came from (a golden curve).
    if (v->is_object()) f["synthetic_acceptance_detail"] = *v;
  }
  for (auto& [k, v] : metrics)
    if (k.find("synthetic") != std::string::npos && k.rfind("deltaserve:", 0) == 0 && v > 0)
      synthetic = true;
  f["synthetic_acceptance"] = synthetic;
  return f;
}

json engine_metrics(const MetricSamples& samples) {
  json j = json::object();
  for (auto& [k, v] : samples)
    if (k.rfind("deltaserve:", 0) == 0 || k.rfind("vllm:", 0) == 0) j[k] = v;
  return j;
}

}  // namespace ds::bench
