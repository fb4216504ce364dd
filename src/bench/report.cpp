#include "bench/report.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "bench/text_file.h"
#include "core/error.h"
#include "core/json_parse.h"

namespace ds::bench {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const char* kChartFile = "node_modules/chart.js/dist/chart.umd.min.js";

bool is_asset_root(const fs::path& root) {
  std::error_code ec;
  return fs::exists(root / "src/bench/report/report.html", ec) && fs::exists(root / kChartFile, ec);
}

std::vector<fs::path> candidate_roots(const std::string& hint) {
  std::vector<fs::path> c;
  if (!hint.empty()) c.emplace_back(hint);
  if (const char* env = std::getenv("DELTASERVE_ASSETS"); env && *env) c.emplace_back(env);
  // The source tree this was built from (src/CMakeLists.txt defines it).
  c.push_back(fs::path(DS_SOURCE_ROOT));
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) c.push_back(exe.parent_path().parent_path());
  c.push_back(fs::current_path(ec));
  return c;
}

// Inline <script> text must not contain "</script"; "<\/" means the same inside JS strings
// and regular expressions.
std::string script_safe(std::string s) {
  for (size_t p = 0; (p = s.find("</", p)) != std::string::npos; p += 3) s.replace(p, 2, "<\\/");
  return s;
}

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

void replace_once(std::string& s, const std::string& what, const std::string& with) {
  const size_t p = s.find(what);
  DS_CHECK(p != std::string::npos, "report template lacks " + what);
  s.replace(p, what.size(), with);
}

void replace_all(std::string& s, const std::string& what, const std::string& with) {
  for (size_t p = 0; (p = s.find(what, p)) != std::string::npos; p += with.size())
    s.replace(p, what.size(), with);
}

json nullable(const json& j, const char* key) {
  return j.is_object() && j.contains(key) ? j[key] : json(nullptr);
}

// What the page needs from one result, flattened.
json page_run(const LoadedResult& r) {
  const json& res = r.result;
  const json& m = res.at("metrics");
  json run;
  run["label"] = res.value("label", r.path);
  run["concurrency"] = res.at("config").value("concurrency", 0);
  run["valid"] = res.at("validity").value("valid", false);
  run["reasons"] = res.at("validity").value("reasons", json::array());
  run["completed"] = m.at("requests").value("completed", 0);
  run["failed"] = m.at("requests").value("failed", 0);
  for (const char* k : {"output_tok_s", "total_tok_s", "output_tok_s_per_rank", "request_rate"})
    run[k] = m.at("throughput").value(k, 0.0);
  for (const char* k : {"ttft", "itl", "tpot", "e2e"}) run[k] = m.at("latency_s").at(k);
  run["interactivity"] = m.at("interactivity_tok_s");
  const json& pc = m.at("prefix_cache");
  const json metrics_rate = nullable(pc, "served_hit_rate_metrics");
  run["cache"] = {{"theoretical", nullable(pc, "theoretical_hit_rate")},
                  {"usage", nullable(pc, "served_hit_rate_usage")},
                  {"metrics", metrics_rate.is_object() ? metrics_rate["value"] : json(nullptr)}};
  const json al = nullable(m, "spec_acceptance_length");
  run["acceptance_length"] = al.is_object() ? al["value"] : json(nullptr);
  run["synthetic_acceptance"] =
      res.contains("server") && res["server"].value("synthetic_acceptance", false);
  json timeline = json::array();
  for (const json& q : r.requests) {
    if (timeline.size() >= kTimelineLimit) break;
    if (!q.contains("send_s") || !q.contains("end_s")) continue;
    timeline.push_back({q.value("lane", 0), q.value("depth", 0), q["send_s"],
                        nullable(q, "first_token_s"), q["end_s"], q.value("warmup", false),
                        q.contains("error")});
  }
  run["timeline_truncated"] = r.requests.size() > timeline.size();
  run["timeline"] = std::move(timeline);
  return run;
}

}  // namespace

ReportAssets ReportAssets::load(const std::string& hint) {
  std::string looked;
  for (const fs::path& root : candidate_roots(hint)) {
    if (root.empty()) continue;
    if (!is_asset_root(root)) {
      looked += " " + root.string();
      continue;
    }
    ReportAssets a;
    a.chart_js = read_text_file((root / kChartFile).string());
    json pkg = parse_json_or_discarded(read_text_file((root / "node_modules/chart.js/package.json").string()));
    a.chart_version = pkg.is_object() ? pkg.value("version", "") : "";
    a.page = read_text_file((root / "src/bench/report/report.html").string());
    a.script = read_text_file((root / "src/bench/report/report.js").string());
    a.style = read_text_file((root / "src/bench/report/report.css").string());
    return a;
  }
  throw Error("report assets not found (need src/bench/report/ and " + std::string(kChartFile) +
              "; looked in" + looked + "): run scripts/setup to install node_modules, or pass --assets DIR");
}

std::string render_report(const std::vector<LoadedResult>& results, const ReportAssets& assets,
                          const std::string& title) {
  DS_CHECK(!results.empty(), "report: no results to draw");
  json data = {{"runs", json::array()}};
  std::vector<const LoadedResult*> order;
  for (auto& r : results) order.push_back(&r);
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) {
    return a->result.value("label", "") == b->result.value("label", "")
               ? a->result.at("config").value("concurrency", 0) < b->result.at("config").value("concurrency", 0)
               : a->result.value("label", "") < b->result.value("label", "");
  });
  for (auto* r : order) {
    try {
      data["runs"].push_back(page_run(*r));
    } catch (const json::exception& e) {
      throw Error(r->path + ": missing a field the report needs (" + e.what() + ")");
    }
  }
  std::string page = assets.page;
  replace_all(page, "@TITLE@", html_escape(title));
  replace_all(page, "@CHARTJS_VERSION@", html_escape(assets.chart_version));
  replace_once(page, "/*@CSS@*/", assets.style);
  // Later placeholders are replaced first so text inserted earlier is never searched again.
  replace_once(page, "/*@REPORT_JS@*/", script_safe(assets.script));
  replace_once(page, "/*@DATA@*/", script_safe(data.dump()));
  replace_once(page, "/*@CHARTJS@*/", script_safe(assets.chart_js));
  return page;
}

}  // namespace ds::bench
