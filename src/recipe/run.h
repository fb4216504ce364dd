// `deltaserve recipe run`: a recipe's sweep, point by point (docs/recipes.md). Models are staged
// into the shared cache once; each server starts with a cleaned environment, must answer /health
// in time and list the served name the bench will send; points whose server settings are
// identical run on one server; every point's result, with the build and the kernel ISA that
// produced it, is appended to the results ledger, and the HTML report is drawn over the ledger.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "recipe/recipe.h"

namespace ds::recipe {

struct RunOptions {
  std::string out_dir;      // ledger.jsonl, report.html, points/c<N>/ (results, server and bench logs)
  std::string program;      // the deltaserve binary the points run
  std::string model_cache;  // the shared staging cache
  double machine_available_mib = 0;  // 0: /proc/meminfo, for `available_mib: this-machine`
  std::string report_assets;         // as `report --assets`; "" finds them as `report` does
  std::function<void(const std::string&)> log;  // progress lines
};

struct RunSummary {
  int points_ok = 0, points_failed = 0;
  std::string ledger, report;
};

// Refuses, before starting anything, a recipe whose plan fails or whose model cannot be staged.
// Points with ranks start their server under mpirun (docs/ranks.md). A point that fails (server start-up, served
// name, bench) is recorded in the ledger as failed with its reason, and the run goes on.
RunSummary run_recipe(const Recipe& r, const RunOptions& o);

// Waits for `url`/health (the server's process `pid` must stay alive) up to timeout_s, then
// checks that /v1/models lists `name`. Returns the /v1/models body; throws ds::Error saying which
// of the three failed (with the names the server does list).
nlohmann::json wait_for_server(const std::string& url, int pid, double timeout_s, const std::string& name);

}  // namespace ds::recipe
