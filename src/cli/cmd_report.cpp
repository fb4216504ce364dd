// deltaserve report RESULTS... --out report.html
#include <spdlog/spdlog.h>

#include <fstream>

#include "bench/report.h"
#include "cli/command.h"
#include "core/error.h"

namespace ds::cli {
namespace {

struct ReportArgs {
  std::vector<std::string> inputs;
  std::string out = "report.html";
  std::string assets;
  std::string title = "DeltaServe agentic benchmark";
};

void setup(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "report", "Draw benchmark results as one self-contained HTML page (no network needed to view)");
  auto a = std::make_shared<ReportArgs>();
  cmd->add_option("results", a->inputs, "results.json files or folders holding them")->required();
  cmd->add_option("--out", a->out, "HTML file to write")->capture_default_str();
  cmd->add_option("--assets", a->assets,
                  "folder holding src/bench/report/ and node_modules/ (default: found automatically)");
  cmd->add_option("--title", a->title, "page title")->capture_default_str();
  cmd->callback([a, &exit_code] {
    const auto results = bench::load_results(a->inputs);
    const auto assets = bench::ReportAssets::load(a->assets);
    const std::string html = bench::render_report(results, assets, a->title);
    std::ofstream f(a->out, std::ios::binary);
    DS_CHECK(f, "cannot write " + a->out);
    f << html;
    f.close();
    DS_CHECK(f, "write failed for " + a->out);
    spdlog::info("report: {} results -> {} ({} KiB)", results.size(), a->out, html.size() / 1024);
    exit_code = 0;
  });
}

const RegisterCommand reg("report", setup);

}  // namespace
}  // namespace ds::cli
