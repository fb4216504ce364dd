// deltaserve recipe plan FILE [--json]   the derived settings and exact commands of every point
// deltaserve recipe run FILE --out DIR   the sweep: staging, servers, benches, ledger, report
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "cli/command.h"
#include "recipe/plan.h"
#include "recipe/recipe.h"
#include "recipe/run.h"

namespace ds::cli {
namespace {

struct RecipeArgs {
  std::string file;
  bool json = false;
  std::string out = "out/recipe";
  std::string model_cache;
  std::string assets;
};

// The shared staging cache: --model-cache, $DELTASERVE_MODEL_CACHE, $XDG_CACHE_HOME/deltaserve/models,
// then ~/.cache/deltaserve/models.
std::string default_model_cache() {
  if (const char* d = std::getenv("DELTASERVE_MODEL_CACHE"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/deltaserve/models";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/deltaserve/models";
  return "/tmp/deltaserve-models";
}

// The binary the planned commands run: this one.
std::string self_path() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("deltaserve") : p.string();
}

void setup(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("recipe", "Serving recipes: concurrency bands -> validated settings, and their sweep");
  cmd->require_subcommand(1);
  auto a = std::make_shared<RecipeArgs>();

  auto* plan = cmd->add_subcommand("plan", "Validate a recipe and print every point's derived values and commands");
  plan->add_option("file", a->file, "recipe YAML")->required();
  plan->add_flag("--json", a->json, "print the plan as JSON");
  plan->add_option("--out", a->out, "results folder the bench commands write to")->capture_default_str();
  plan->callback([a, &exit_code] {
    recipe::PlanOptions o;
    o.out_dir = a->out;
    const recipe::Plan p = recipe::plan_recipe(recipe::load_recipe(a->file), o);
    const std::string text = a->json ? recipe::plan_json(p).dump(2) + "\n" : recipe::plan_text(p);
    std::fputs(text.c_str(), stdout);
    exit_code = 0;
  });

  auto* run = cmd->add_subcommand("run", "Run a recipe's sweep: stage models, serve and bench each point, ledger, report");
  run->add_option("file", a->file, "recipe YAML")->required();
  run->add_option("--out", a->out, "folder for ledger.jsonl, report.html and points/c<N>/")->capture_default_str();
  run->add_option("--model-cache", a->model_cache,
                  "shared folder models are staged into (default: $DELTASERVE_MODEL_CACHE, else ~/.cache/deltaserve/models)");
  run->add_option("--assets", a->assets, "report assets folder, as for `report --assets`");
  run->callback([a, &exit_code] {
    recipe::RunOptions o;
    o.out_dir = a->out;
    o.program = self_path();
    o.model_cache = a->model_cache.empty() ? default_model_cache() : a->model_cache;
    o.report_assets = a->assets;
    o.log = [](const std::string& s) { spdlog::info("recipe: {}", s); };
    const recipe::Recipe r = recipe::load_recipe(a->file);
    const recipe::RunSummary s = recipe::run_recipe(r, o);
    spdlog::info("recipe: {} points ok, {} failed; ledger {}{}", s.points_ok, s.points_failed, s.ledger,
                 s.report.empty() ? "" : ", report " + s.report);
    exit_code = s.points_failed == 0 ? 0 : 1;
  });
}

const RegisterCommand reg("recipe", setup);

}  // namespace
}  // namespace ds::cli
