// The report: self-contained HTML that draws in headless Chromium without console errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "../support/missing_dependency.h"
#include "bench/report.h"
#include "bench/results.h"

namespace ds::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

RequestRecord rec(int lane, double send, int tokens, bool warmup, bool failed) {
  RequestRecord r;
  r.lane = lane;
  r.warmup = warmup;
  r.input_tokens = 200;
  r.max_tokens = tokens;
  r.theoretical_cached_tokens = 150;
  r.result.status = failed ? 500 : 200;
  r.result.send_s = send;
  if (failed) {
    r.result.error = "HTTP 500";
    r.result.end_s = send + 0.1;
    return r;
  }
  for (int i = 0; i < tokens; ++i) r.result.chunk_s.push_back(send + 0.3 + 0.05 * i);
  r.result.end_s = r.result.chunk_s.back();
  r.result.completion_tokens = tokens;
  r.result.prompt_tokens = 200;
  r.result.cached_tokens = 120;
  return r;
}

// Writes one result folder per concurrency, as `deltaserve bench` would.
fs::path make_results(const fs::path& dir) {
  for (int conc : {1, 2, 4}) {
    std::vector<RequestRecord> recs;
    for (int lane = 0; lane < conc; ++lane)
      for (int i = 0; i < 6; ++i) recs.push_back(rec(lane, i * 1.0 + 0.1 * lane, 8 + lane, i == 0, i == 5 && lane == 1));
    const PointMetrics m = compute_metrics(recs, 1);
    const Validity v = judge(m, ValidityRules{}, false, false);
    json r = {{"schema", kResultSchema},
              {"label", "stub <server>"},
              {"model", "m"},
              {"config", {{"concurrency", conc}}},
              {"metrics", metrics_json(m)},
              {"validity", {{"valid", v.valid}, {"reasons", v.reasons}}},
              {"server", {{"synthetic_acceptance", false}}}};
    r["metrics"]["prefix_cache"]["served_hit_rate_metrics"] = {{"value", 0.55}, {"source", "x"}};
    r["metrics"]["spec_acceptance_length"] = nullptr;
    write_point((dir / ("c" + std::to_string(conc))).string(), r, recs);
  }
  return dir;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(Report, RendersSelfContainedHtml) {
  const fs::path dir = fs::temp_directory_path() / ("ds-report-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  make_results(dir);
  const auto results = load_results({dir.string()});
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].requests.size(), 6u);
  const ReportAssets assets = ReportAssets::load(DS_SOURCE_DIR);
  const std::string html = render_report(results, assets, "Test <report>");
  EXPECT_NE(html.find("Test &lt;report&gt;"), std::string::npos);
  EXPECT_NE(html.find(assets.chart_js.substr(0, 200)), std::string::npos);  // inlined, not linked
  EXPECT_EQ(html.find("<script src"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("/*@"), std::string::npos);  // every placeholder filled
  fs::remove_all(dir);
}

TEST(Report, DrawsInHeadlessChromium) {
  const char* chromium = "/usr/bin/chromium";
  // Skips without chromium, except under CI (CI=true), where its absence is a failure.
  DS_REQUIRE_DEPENDENCY(access(chromium, X_OK) == 0, "no " << chromium << " (scripts/setup installs it)");
  const fs::path dir = fs::temp_directory_path() / ("ds-report-chromium-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  make_results(dir / "results");
  const auto results = load_results({(dir / "results").string()});
  const std::string html = render_report(results, ReportAssets::load(DS_SOURCE_DIR), "Chromium check");
  const fs::path page = dir / "report.html";
  std::ofstream(page) << html;

  const fs::path dom = dir / "dom.html", log = dir / "chromium.log";
  const std::string cmd = std::string("timeout 120 ") + chromium +
                          " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
                          " --disable-background-networking --disable-component-update --disable-sync"
                          " --disable-dev-shm-usage --user-data-dir=" + (dir / "profile").string() +
                          " --enable-logging=stderr --v=0 --virtual-time-budget=5000"
                          " --dump-dom file://" + page.string() + " > " + dom.string() + " 2> " + log.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(log);
  const std::string out = slurp(dom), err = slurp(log);

  // 4 summary charts + one timeline per result, each marked after Chart.js rendered it.
  EXPECT_NE(out.find("data-charts-drawn=\"7\""), std::string::npos) << out.substr(0, 2000);
  EXPECT_NE(out.find("data-charts-expected=\"7\""), std::string::npos);
  const std::regex drawn("<canvas[^>]*data-drawn=\"1\"");
  EXPECT_EQ(std::distance(std::sregex_iterator(out.begin(), out.end(), drawn), std::sregex_iterator()), 7);
  EXPECT_EQ(out.find("data-errors"), std::string::npos) << out.substr(0, 4000);
  // Console messages (errors included) appear in the log tagged CONSOLE; the page logs none.
  EXPECT_EQ(err.find("CONSOLE"), std::string::npos) << err;
  EXPECT_EQ(err.find("Uncaught"), std::string::npos) << err;
  // The summary table lists every point.
  EXPECT_NE(out.find("stub &lt;server&gt;"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ds::bench
