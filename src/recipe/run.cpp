#include "recipe/run.h"

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <thread>

#include "bench/http_target.h"
#include "bench/report.h"
#include "bench/results.h"
#include "bench/server_probe.h"
#include "core/build_info.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/json_parse.h"
#include "recipe/digest.h"
#include "recipe/ledger.h"
#include "recipe/plan.h"
#include "recipe/process.h"
#include "recipe/stage.h"

extern char** environ;

namespace ds::recipe {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return b;
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

json staged_json(const StagedModel& m, const std::string& source) {
  return {{"source", source}, {"staged", m.path}, {"outcome", stage_outcome_name(m.outcome)},
          {"sha256", m.content_sha256}, {"files", m.files}, {"seconds", m.seconds}};
}

// What the ledger keeps of a bench result: the headline figures, and where the rest is.
json result_summary(const std::string& results_json) {
  std::ifstream f(results_json, std::ios::binary);
  DS_CHECK(f, "the bench wrote no " + results_json);
  const json r = parse_json(std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()), results_json);
  const json& m = r.at("metrics");
  json s = {{"valid", r.at("validity").value("valid", false)},
            {"reasons", r.at("validity").value("reasons", json::array())},
            {"output_tok_s", m.at("throughput").value("output_tok_s", 0.0)},
            {"total_tok_s", m.at("throughput").value("total_tok_s", 0.0)},
            {"interactivity_p90_tok_s", m.at("interactivity_tok_s").value("p90", 0.0)},
            {"ttft_p90_s", m.at("latency_s").at("ttft").value("p90", 0.0)},
            {"completed", m.at("requests").value("completed", 0)},
            {"failed", m.at("requests").value("failed", 0)},
            {"acceptance_length", m.contains("spec_acceptance_length") ? m["spec_acceptance_length"] : json(nullptr)},
            {"synthetic_acceptance", r.contains("server") ? r["server"].value("synthetic_acceptance", json(nullptr)) : json(nullptr)}};
  return s;
}

// The server's own account of its build, from /v1/models (the first card).
json server_build(const json& models) {
  if (!models.is_object() || !models.contains("data") || !models["data"].is_array() || models["data"].empty()) return nullptr;
  const json& card = models["data"][0];
  return {{"kernel_isa", card.value("kernel_isa", "")}, {"build", card.value("build", json(nullptr))}};
}

void render(const std::string& ledger, const std::string& out, const std::string& assets_hint, const std::string& title) {
  std::vector<json> entries = read_ledger(ledger);
  std::vector<bench::LoadedResult> results;
  std::set<std::string> runs;
  for (const json& e : entries)
    if (e.value("status", "") == "ok") runs.insert(e.value("run", ""));
  for (const json& e : entries) {
    if (e.value("status", "") != "ok") continue;
    const std::string path = e.value("results", "");
    if (!fs::exists(path)) continue;  // results moved away since: the ledger still holds the figures
    for (auto& lr : bench::load_results({path})) {
      // Several runs in one ledger: each is its own curve.
      if (runs.size() > 1) lr.result["label"] = lr.result.value("label", "") + " · run " + e.value("run", "");
      results.push_back(std::move(lr));
    }
  }
  DS_CHECK(!results.empty(), "recipe run: no successful point in " + ledger + " to draw a report from");
  const auto assets = bench::ReportAssets::load(assets_hint);
  std::ofstream f(out);
  f << bench::render_report(results, assets, title);
  DS_CHECK(f.good(), "cannot write " + out);
}

}  // namespace

json wait_for_server(const std::string& url, int pid, double timeout_s, const std::string& name) {
  const bench::ServerProbe probe(bench::HttpTarget::parse(url));
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    if (probe.healthy()) break;
    int status = 0;
    if (pid > 0 && process_exited(pid, &status))
      throw Error("the server exited during start-up (status " + std::to_string(status) + ")");
    if (since(t0) > timeout_s)
      throw Error(url + "/health did not answer within " + std::to_string(int(timeout_s)) + " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const json models = probe.models();
  std::string listed;
  if (models.is_object() && models.contains("data") && models["data"].is_array())
    for (const json& m : models["data"]) {
      const std::string id = m.value("id", "");
      if (id == name) return models;
      listed += (listed.empty() ? "'" : ", '") + id + "'";
    }
  throw Error("the server lists " + (listed.empty() ? std::string("no model") : listed) + " in /v1/models, not '" +
              name + "' that the bench sends: every request would be a 404");
}

RunSummary run_recipe(const Recipe& r, const RunOptions& o) {
  auto log = [&](const std::string& s) {
    if (o.log) o.log(s);
  };
  PlanOptions po;
  po.program = o.program;
  po.out_dir = o.out_dir;
  po.machine_available_mib = o.machine_available_mib;
  Plan plan = plan_recipe(r, po);

  fs::create_directories(o.out_dir);
  const std::string ledger = o.out_dir + "/ledger.jsonl";
  read_ledger(ledger);  // a tampered ledger stops the run before any point is spent on it

  // Stage what the servers read, once, before any server starts.
  json staged = json::object();
  const StagedModel model = stage_model(r.model, o.model_cache);
  log("staged " + r.model + " -> " + model.path + " (" + stage_outcome_name(model.outcome) + ")");
  staged["model"] = staged_json(model, r.model);
  po.model_dir = model.path;
  bool speculates = false;
  for (const PointPlan& p : plan.points) speculates = speculates || p.draft_tokens > 0;
  if (speculates) {
    const StagedModel draft = stage_model(r.draft_model, o.model_cache);
    log("staged " + r.draft_model + " -> " + draft.path + " (" + stage_outcome_name(draft.outcome) + ")");
    staged["draft_model"] = staged_json(draft, r.draft_model);
    po.draft_dir = draft.path;
  }
  plan = plan_recipe(r, po);

  const std::vector<std::string> env = launch_environment(environ);
  const std::string run_id = now_utc();
  const std::string url = "http://" + r.server.host + ":" + std::to_string(r.server.port);
  const json launcher = {{"revision", build_info().revision},
                         {"compiler", build_info().compiler},
                         {"cpu_isa", isa_name(active_isa())},
                         {"program", o.program}};
  const std::string recipe_sha256 = sha256_file_hex(r.path);
  const json point_plans = plan_json(plan)["points"];
  RunSummary sum;
  sum.ledger = ledger;
  pid_t server = -1;
  int server_of = 0;    // the server group running now
  int started_for = 0;  // the point it was started for
  std::string server_error;
  json server_models;
  std::string server_isa;
  auto stop_server = [&] {
    if (server > 0) stop_process(server, 30);
    server = -1;
  };
  // An error that ends the run (a ledger that cannot be written, a bench that cannot start) must
  // not leave a server behind.
  struct StopOnExit {
    std::function<void()> f;
    ~StopOnExit() { f(); }
  } stop_on_exit{stop_server};

  for (const PointPlan& p : plan.points) {
    const auto t0 = std::chrono::steady_clock::now();
    fs::create_directories(p.result_dir);
    json entry = {{"run", run_id},
                  {"recipe", r.name},
                  {"recipe_file", r.path},
                  {"recipe_sha256", recipe_sha256},
                  {"concurrency", p.concurrency},
                  {"band", p.band},
                  {"plan", point_plans[size_t(&p - plan.points.data())]},
                  {"staged", staged},
                  {"launcher", launcher},
                  {"started_at", now_utc()}};
    const bool fresh = p.server_of != server_of;
    if (fresh) {
      stop_server();
      server_of = p.server_of;
      started_for = p.concurrency;
      server_error.clear();
      server_models = nullptr;  // nothing of the previous server may be recorded for this one
      server_isa.clear();
      log("c=" + std::to_string(p.concurrency) + ": starting " + shell_line(p.serve_argv));
      try {
        server = spawn_process(p.serve_argv, env, p.result_dir + "/server.log");
        server_models = wait_for_server(url, server, r.server.start_timeout_s, r.served_name);
        const json b = server_build(server_models);
        server_isa = b.is_object() ? b.value("kernel_isa", "") : "";
      } catch (const Error& e) {
        server_error = e.what();
        stop_server();
      }
    } else {
      log("c=" + std::to_string(p.concurrency) + ": reuses the server started for c=" + std::to_string(started_for) +
          " (identical settings)");
    }
    entry["server_reused"] = !fresh;
    entry["server_started_for"] = started_for;
    entry["server"] = server_build(server_models);
    if (!r.hw.tuned_isa.empty() && !server_isa.empty()) {
      entry["isa_drift"] = server_isa != r.hw.tuned_isa;
      if (server_isa != r.hw.tuned_isa)
        log("warning: the server runs " + server_isa + " kernels; the recipe was tuned on " + r.hw.tuned_isa +
            ": its figures may not hold");
    }
    std::string error = server_error;
    if (error.empty()) {
      log("c=" + std::to_string(p.concurrency) + ": " + shell_line(p.bench_argv));
      const pid_t bench = spawn_process(p.bench_argv, env, p.result_dir + "/bench.log");
      // The bench's own deadline is its duration plus grace; this bounds a bench that hangs.
      const double limit = 2 * (r.bench.duration_s + r.bench.grace_period_s) + 600;
      const int status = wait_process(bench, limit);
      if (status < 0) {
        stop_process(bench, 10);
        error = "the bench ran past " + std::to_string(int(limit)) + " s";
      } else if (status != 0) {
        error = "the bench exited with status " + std::to_string(status) + " (see " + p.result_dir + "/bench.log)";
      }
      int srv_status = 0;
      if (error.empty() && server > 0 && process_exited(server, &srv_status)) {
        error = "the server exited during the bench (status " + std::to_string(srv_status) + ")";
        server_error = error;  // the points that would reuse it fail with the same reason
        server = -1;
      }
      if (error.empty()) {
        try {
          entry["summary"] = result_summary(p.result_dir + "/results.json");
          entry["results"] = p.result_dir + "/results.json";
          entry["results_sha256"] = sha256_file_hex(p.result_dir + "/results.json");
        } catch (const std::exception& e) {
          error = e.what();
        }
      }
    }
    entry["status"] = error.empty() ? "ok" : "failed";
    if (!error.empty()) entry["error"] = error;
    entry["wall_s"] = since(t0);
    append_ledger(ledger, entry);
    if (error.empty()) {
      ++sum.points_ok;
      const json& s = entry["summary"];
      log("c=" + std::to_string(p.concurrency) + ": " + std::to_string(s.value("output_tok_s", 0.0)) + " output tok/s, p90 interactivity " +
          std::to_string(s.value("interactivity_p90_tok_s", 0.0)) + " tok/s");
    } else {
      ++sum.points_failed;
      log("c=" + std::to_string(p.concurrency) + ": FAILED: " + error);
    }
  }
  stop_server();
  if (sum.points_ok > 0) {
    sum.report = o.out_dir + "/report.html";
    render(ledger, sum.report, o.report_assets, "DeltaServe recipe " + r.name);
  }
  return sum;
}

}  // namespace ds::recipe
