#include "bench/results.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "bench/text_file.h"
#include "core/error.h"
#include "core/json_parse.h"

namespace ds::bench {

using nlohmann::json;
namespace fs = std::filesystem;

json dist_json(const Dist& d) {
  return {{"mean", d.mean}, {"p50", d.p50}, {"p90", d.p90}, {"p99", d.p99}, {"n", d.n}};
}

json metrics_json(const PointMetrics& m) {
  json served = m.served_hit_rate_usage ? json(*m.served_hit_rate_usage) : json(nullptr);
  return {
      {"requests",
       {{"measured", m.measured},
        {"completed", m.completed},
        {"failed", m.failed},
        {"context_overflow", m.context_overflow},
        {"cancelled_at_end", m.cancelled},
        {"warmup", m.warmup},
        {"output_length_mismatch", m.output_length_mismatch}}},
      {"window_s", {{"start", m.window_start_s}, {"end", m.window_end_s}, {"duration", m.duration_s}}},
      {"latency_s",
       {{"ttft", dist_json(m.ttft)},
        {"itl", dist_json(m.itl)},
        {"tpot", dist_json(m.tpot)},
        {"e2e", dist_json(m.e2e)}}},
      {"interactivity_tok_s", dist_json(m.interactivity)},
      {"tokens", {{"input", m.input_tokens}, {"output", m.output_tokens}}},
      {"throughput",
       {{"input_tok_s", m.input_tok_s},
        {"output_tok_s", m.output_tok_s},
        {"total_tok_s", m.total_tok_s},
        {"output_tok_s_per_rank", m.output_tok_s_per_rank},
        {"total_tok_s_per_rank", m.total_tok_s_per_rank},
        {"request_rate", m.request_rate}}},
      {"failed_request_ratio", m.failed_ratio},
      {"context_overflow_ratio", m.context_overflow_ratio},
      {"prefix_cache",
       {{"theoretical_hit_rate", m.theoretical_hit_rate}, {"served_hit_rate_usage", served}}},
  };
}

json record_json(const RequestRecord& r) {
  const StreamResult& s = r.result;
  const RequestTiming t = timing_of(s);
  auto opt = [](double v) { return v >= 0 ? json(v) : json(nullptr); };
  auto opt_i = [](int64_t v) { return v >= 0 ? json(v) : json(nullptr); };
  double itl_mean = -1;
  if (!t.itl.empty()) {
    itl_mean = 0;
    for (double g : t.itl) itl_mean += g;
    itl_mean /= static_cast<double>(t.itl.size());
  }
  json j = {{"lane", r.lane},
            {"session", r.session},
            {"play", r.play},
            {"turn", r.turn},
            {"depth", r.depth},
            {"warmup", r.warmup},
            {"input_tokens", r.input_tokens},
            {"max_tokens", r.max_tokens},
            {"theoretical_cached_tokens", r.theoretical_cached_tokens},
            {"send_s", s.send_s},
            {"first_token_s", s.chunk_s.empty() ? json(nullptr) : json(s.chunk_s.front())},
            {"end_s", s.end_s},
            {"ttft_s", opt(t.ttft)},
            {"tpot_s", opt(t.tpot)},
            {"itl_mean_s", opt(itl_mean)},
            {"e2e_s", opt(t.e2e)},
            {"status", s.status},
            {"prompt_tokens", opt_i(s.prompt_tokens)},
            {"completion_tokens", opt_i(s.completion_tokens)},
            {"cached_tokens", opt_i(s.cached_tokens)},
            {"finish_reason", s.finish_reason}};
  if (!s.error.empty()) j["error"] = s.error;
  if (s.context_overflow) j["context_overflow"] = true;
  if (s.cancelled) j["cancelled"] = true;
  return j;
}

void write_point(const std::string& dir, const json& result,
                 const std::vector<RequestRecord>& records) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  DS_CHECK(!ec, "cannot create " + dir + ": " + ec.message());
  {
    std::ofstream f(fs::path(dir) / "results.json");
    DS_CHECK(f, "cannot write " + dir + "/results.json");
    f << result.dump(2) << "\n";
  }
  std::ofstream f(fs::path(dir) / "requests.jsonl");
  DS_CHECK(f, "cannot write " + dir + "/requests.jsonl");
  std::vector<const RequestRecord*> sorted;
  for (auto& r : records) sorted.push_back(&r);
  std::sort(sorted.begin(), sorted.end(),
            [](auto* a, auto* b) { return a->result.send_s < b->result.send_s; });
  for (auto* r : sorted) f << record_json(*r).dump() << "\n";
}

namespace {

json read_json(const fs::path& p) {
  return parse_json(read_text_file(p.string()), p.string());
}

LoadedResult load_one(const fs::path& p) {
  LoadedResult r;
  r.path = p.string();
  r.result = read_json(p);
  DS_CHECK(r.result.is_object() && r.result.value("schema", "") == kResultSchema,
           p.string() + ": not a deltaserve bench result (schema " + kResultSchema + ")");
  r.requests = json::array();
  const fs::path req = p.parent_path() / "requests.jsonl";
  std::ifstream f(req);
  std::string line;
  int n = 0;
  while (f && std::getline(f, line)) {
    ++n;
    if (line.empty()) continue;
    r.requests.push_back(parse_json(line, req.string() + ":" + std::to_string(n)));
  }
  return r;
}

}  // namespace

std::vector<LoadedResult> load_results(const std::vector<std::string>& paths) {
  std::vector<LoadedResult> out;
  for (const auto& arg : paths) {
    const fs::path p(arg);
    DS_CHECK(fs::exists(p), "no such file or folder: " + arg);
    if (fs::is_directory(p)) {
      std::vector<fs::path> found;
      for (auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file() && e.path().filename() == "results.json") found.push_back(e.path());
      DS_CHECK(!found.empty(), arg + ": no results.json inside");
      std::sort(found.begin(), found.end());
      for (auto& f : found) out.push_back(load_one(f));
    } else {
      out.push_back(load_one(p));
    }
  }
  return out;
}

}  // namespace ds::bench
