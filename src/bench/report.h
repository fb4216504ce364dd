// `deltaserve report`: one self-contained HTML file from benchmark results. The page is drawn by
// Chart.js from the npm registry (package.json), read from node_modules and inlined with the
// page template (src/bench/report/) at report time, so the file needs no network to view.
#pragma once
#include <string>
#include <vector>

#include "bench/results.h"

namespace ds::bench {

struct ReportAssets {
  std::string chart_js;        // node_modules/chart.js/dist/chart.umd.min.js
  std::string chart_version;   // from node_modules/chart.js/package.json
  std::string page;            // report.html template
  std::string script;          // report.js
  std::string style;           // report.css

  // The asset root is the first folder holding both src/bench/report/ and node_modules/chart.js:
  // `hint` (--assets), $DELTASERVE_ASSETS, the source tree this binary was built from, the
  // folder above the executable's, then the working directory. Throws ds::Error saying where it
  // looked and that `scripts/setup` installs node_modules.
  static ReportAssets load(const std::string& hint = "");
};

// Timeline rows kept per result; beyond this the timeline shows the first ones.
inline constexpr size_t kTimelineLimit = 4000;

std::string render_report(const std::vector<LoadedResult>& results, const ReportAssets& assets,
                          const std::string& title);

}  // namespace ds::bench
