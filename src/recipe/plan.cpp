#include "recipe/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "spec_decode/golden_curve.h"

namespace ds::recipe {
namespace {

std::string fmt(double x, int digits = 2) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, x);
  return b;
}

// One rule broken at one point: "recipe FILE: concurrency C: ...".
[[noreturn]] void refuse(const Recipe& r, int c, const std::string& what) {
  throw Error("recipe " + r.path + ": concurrency " + std::to_string(c) + ": " + what);
}

std::string line_ref(int line) { return line > 0 ? " (line " + std::to_string(line) + ")" : ""; }

// The band knob, replaced by the point's override when it has one.
template <typename T>
std::optional<At<T>> pick(const std::optional<At<T>>& band, const std::optional<At<T>>& point) {
  return point ? point : band;
}

const Band* band_of(const Recipe& r, int c) {
  const Band* found = nullptr;
  for (const Band& b : r.bands) {
    if (c < b.lo || c > b.hi) continue;
    if (found)
      refuse(r, c, "lies in two bands, '" + found->name + "' (line " + std::to_string(found->line) + ") and '" + b.name +
                       "' (line " + std::to_string(b.line) + "); bands must not overlap");
    found = &b;
  }
  if (!found) refuse(r, c, "lies in no band; every point needs exactly one");
  return found;
}

// Knobs that mean nothing without speculation would be dropped silently at such a point.
void refuse_ignored(const Recipe& r, int c, const Knobs& k, const std::string& where, bool speculates,
                    bool seqs_from_window) {
  if (speculates) return;
  auto check = [&](const auto& knob, const char* name) {
    if (knob)
      refuse(r, c, std::string(where) + " sets " + name + line_ref(knob->line) +
                       " but the point does not speculate (draft_tokens 0): it would be silently ignored");
  };
  check(k.rollback, "rollback");
  check(k.spec_method, "spec_method");
  check(k.draft_sample, "draft_sample");
  if (!seqs_from_window) check(k.window, "window");
}

}  // namespace

int64_t total_cpu_dram_gb(double available_mib, double cap_mib, double utilization, int tp, int devices_per_node) {
  const double mib = cap_mib > 0 ? std::min(available_mib, cap_mib) : available_mib;
  return int64_t(std::floor(mib * 1048576.0 * utilization * double(tp) / double(devices_per_node) / 1e9));
}

double machine_available_mib() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib / 1024.0;
  throw Error("hardware.available_mib: this-machine: /proc/meminfo has no MemAvailable line");
}

std::string shell_line(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                         "0123456789-_./:=,@%+") == std::string::npos;
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char ch : a) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    out += '\'';
  }
  return out;
}

Plan plan_recipe(const Recipe& r, const PlanOptions& o) {
  Plan plan;
  plan.recipe = r.name;
  plan.recipe_path = r.path;
  plan.tuned_isa = r.hw.tuned_isa;
  plan.served_name = r.served_name;
  plan.model = o.model_dir.empty() ? r.model : o.model_dir;
  plan.draft_model = o.draft_dir.empty() ? r.draft_model : o.draft_dir;
  plan.golden_al = r.golden_al;
  if (r.hw.this_machine) {
    plan.available_mib = o.machine_available_mib > 0 ? o.machine_available_mib : machine_available_mib();
    plan.available_from_machine = true;
  } else {
    plan.available_mib = r.hw.available_mib;
  }

  // The name the bench sends must be one the server registers, or every request is a 404.
  const std::string bench_name = r.bench.model ? r.bench.model->value : r.served_name;
  if (bench_name != r.served_name)
    throw Error("recipe " + r.path + ": bench.model '" + bench_name + "'" + line_ref(r.bench.model->line) +
                " differs from served_name '" + r.served_name + "'" + line_ref(r.served_name_line) +
                ": the server would answer every benchmark request with 404");

  for (const auto& [c, ov] : r.points)
    if (std::find(r.concurrency.begin(), r.concurrency.end(), c) == r.concurrency.end())
      refuse(r, c, "points." + std::to_string(c) + line_ref(ov.second) +
                       " overrides a concurrency that is not in 'concurrency': it would be silently ignored");

  std::optional<GoldenCurve> golden;
  auto curve = [&](int c) -> const GoldenCurve& {
    if (!golden) {
      if (r.golden_al.empty()) refuse(r, c, "speculates but the recipe names no golden_al curve to read its AL from");
      golden = load_golden_curve(r.golden_al);
    }
    return *golden;
  };

  for (int c : r.concurrency) {
    const Band& band = *band_of(r, c);
    static const Knobs kNone;
    const auto ov_it = r.points.find(c);
    const Knobs& ov = ov_it == r.points.end() ? kNone : ov_it->second.first;
    const Knobs& bk = band.knobs;
    PointPlan p;
    p.concurrency = c;
    p.band = band.name;
    const auto k = pick(bk.draft_tokens, ov.draft_tokens);
    p.draft_tokens = k ? k->value : 0;
    const bool speculates = p.draft_tokens > 0;
    const auto seqs = pick(bk.max_num_seqs, ov.max_num_seqs);
    const bool seqs_from_window = seqs && seqs->value == kSeqsFromWindow;
    refuse_ignored(r, c, bk, "band '" + band.name + "'", speculates, seqs_from_window);
    refuse_ignored(r, c, ov, "points." + std::to_string(c), speculates, seqs_from_window);

    if (speculates) {
      if (r.draft_model.empty()) refuse(r, c, "speculates (draft_tokens " + std::to_string(p.draft_tokens) + ") but the recipe has no draft_model");
      const GoldenCurve& g = curve(c);
      const auto it = g.al.find(p.draft_tokens);
      if (it == g.al.end())
        refuse(r, c, "draft_tokens " + std::to_string(p.draft_tokens) + " has no AL in the golden curve " + r.golden_al);
      p.acceptance_length = it->second;
      if (!(p.acceptance_length >= 1.0 && p.acceptance_length <= p.draft_tokens + 1.0))
        refuse(r, c, "the golden AL " + fmt(p.acceptance_length) + " at K " + std::to_string(p.draft_tokens) +
                         " lies outside [1, K+1] = [1, " + std::to_string(p.draft_tokens + 1) + "]");
      const auto rb = pick(bk.rollback, ov.rollback);
      p.rollback = rb ? rb->value : "lanes";
      // The curve holds for the methods it was measured with; another method has another AL.
      const auto sm = pick(bk.spec_method, ov.spec_method);
      const auto ds = pick(bk.draft_sample, ov.draft_sample);
      p.spec_method = sm ? sm->value : (g.rejection_sample_method.empty() ? "block" : g.rejection_sample_method);
      p.draft_sample = ds ? ds->value : (g.draft_sample_method.empty() ? "probabilistic" : g.draft_sample_method);
      if (!g.rejection_sample_method.empty() && p.spec_method != g.rejection_sample_method)
        refuse(r, c, "spec_method " + p.spec_method + " is not the " + g.rejection_sample_method +
                         " verification the golden curve was measured with: its AL would not apply");
      if (!g.draft_sample_method.empty() && p.draft_sample != g.draft_sample_method)
        refuse(r, c, "draft_sample " + p.draft_sample + " is not the " + g.draft_sample_method +
                         " drafting the golden curve was measured with: its AL would not apply");
    }

    const auto dcp = pick(bk.dcp, ov.dcp);
    p.dcp = dcp ? dcp->value : 1;
    if (r.hw.ranks % p.dcp != 0)
      refuse(r, c, "dcp " + std::to_string(p.dcp) + " does not divide the " + std::to_string(r.hw.ranks) +
                       " ranks (hardware.ranks); dcp shards attention over the tensor-parallel ranks");

    const auto win = ov.window ? ov.window : bk.window;
    p.window_pinned = bool(win);
    p.window = win ? win->value : 2 * c;
    p.verify_rows = p.window * (1 + p.draft_tokens);
    p.max_num_seqs = !seqs ? p.window : seqs_from_window ? p.window : seqs->value;
    const auto mbt = pick(bk.max_num_batched_tokens, ov.max_num_batched_tokens);
    p.max_num_batched_tokens = mbt ? mbt->value : std::max(2048, p.verify_rows);
    if (p.window > p.max_num_seqs)
      refuse(r, c, "window " + std::to_string(p.window) + " exceeds max_num_seqs " + std::to_string(p.max_num_seqs) +
                       ": a step never holds more sequences than max_num_seqs");
    if (p.max_num_batched_tokens < p.verify_rows)
      refuse(r, c, "max_num_batched_tokens " + std::to_string(p.max_num_batched_tokens) + " is below the verify rows " +
                       std::to_string(p.verify_rows) + " = window " + std::to_string(p.window) + " x (1 + " +
                       std::to_string(p.draft_tokens) + " draft tokens)");
    if (p.max_num_batched_tokens < p.max_num_seqs)
      refuse(r, c, "max_num_batched_tokens " + std::to_string(p.max_num_batched_tokens) + " is below max_num_seqs " +
                       std::to_string(p.max_num_seqs) + ": every running sequence needs a row each step");

    const auto util = pick(bk.dram_utilization, ov.dram_utilization);
    if (util) {
      if (plan.available_mib <= 0)
        refuse(r, c, "dram_utilization" + line_ref(util->line) + " needs hardware.available_mib (a figure or this-machine)");
      p.dram_utilization = util->value;
      p.total_cpu_dram_gb = total_cpu_dram_gb(plan.available_mib, r.hw.dram_cap_mib, p.dram_utilization, r.hw.ranks,
                                              r.hw.devices_per_node);
      p.per_rank_dram_gb = p.total_cpu_dram_gb / r.hw.ranks;
      if (p.per_rank_dram_gb < 1)
        refuse(r, c, "the host DRAM tier comes to " + std::to_string(p.total_cpu_dram_gb) + " GB for " +
                         std::to_string(r.hw.ranks) + " ranks, under 1 GB per rank");
    }

    // The server's command line. Flags at their defaults are left out, so that two points whose
    // servers are the same read the same.
    auto& s = p.serve_argv;
    // One process per rank (docs/ranks.md). mpirun binds each rank to one core by default
    // (OpenMPI, 2 ranks or fewer), which would squeeze a rank's threads onto it: serve pins its
    // ranks to NUMA nodes itself (--numa-bind auto).
    if (r.hw.ranks > 1) s = {"mpirun", "-np", std::to_string(r.hw.ranks), "--bind-to", "none"};
    s.insert(s.end(), {o.program, "serve", "--model", plan.model, "--served-model-name", r.served_name, "--host",
                       r.server.host, "--port", std::to_string(r.server.port), "--max-num-seqs",
                       std::to_string(p.max_num_seqs), "--max-num-batched-tokens",
                       std::to_string(p.max_num_batched_tokens)});
    if (r.server.threads > 0) s.insert(s.end(), {"--threads", std::to_string(r.server.threads)});
    if (r.server.kv_pool_gb > 0) {
      std::string gb = fmt(r.server.kv_pool_gb, 3);
      gb.erase(gb.find_last_not_of('0') + 1);
      if (gb.back() == '.') gb.pop_back();
      s.insert(s.end(), {"--kv-pool-gb", gb});
    }
    if (r.hw.ranks > 1) s.insert(s.end(), {"--tp", std::to_string(r.hw.ranks)});
    if (p.dcp > 1) s.insert(s.end(), {"--dcp", std::to_string(p.dcp)});
    if (util) s.insert(s.end(), {"--total-cpu-dram-gb", std::to_string(p.total_cpu_dram_gb)});
    if (speculates)
      s.insert(s.end(), {"--draft-model", plan.draft_model, "--num-speculative-tokens", std::to_string(p.draft_tokens),
                         "--spec-method", p.spec_method, "--draft-sample", p.draft_sample, "--state-rollback",
                         p.rollback, "--spec-window", std::to_string(p.window), "--golden-al", r.golden_al});

    // The bench writes <--out>/c<N>/results.json.
    p.result_dir = o.out_dir + "/points/c" + std::to_string(c);
    auto& b = p.bench_argv;
    b = {o.program, "bench", "--url", "http://" + r.server.host + ":" + std::to_string(r.server.port), "--model",
         bench_name, "--concurrency", std::to_string(c), "--duration", fmt(r.bench.duration_s, 0), "--grace-period",
         fmt(r.bench.grace_period_s, 0), "--seed", std::to_string(r.bench.seed), "--tokenizer",
         plan.model + "/tokenizer.json"};
    if (r.bench.workload == "trace")
      b.insert(b.end(), {"--trace", r.bench.trace});
    else
      b.insert(b.end(), {"--synthetic", r.bench.synthetic});
    if (r.bench.warmup_requests_per_lane >= 0)
      b.insert(b.end(), {"--warmup-requests-per-lane", std::to_string(r.bench.warmup_requests_per_lane)});
    if (r.hw.ranks > 1) b.insert(b.end(), {"--ranks", std::to_string(r.hw.ranks)});
    // One label for the whole sweep: the report draws the points as one curve.
    b.insert(b.end(), {"--label", r.name, "--progress-interval",
                       "0", "--out", o.out_dir + "/points"});
    plan.points.push_back(std::move(p));
  }

  // Points whose servers are identical share one: they run next to each other, on one server,
  // named after the largest concurrency it serves (concurrency 14 runs on the concurrency-16
  // server).
  std::vector<PointPlan> ordered;
  std::vector<bool> taken(plan.points.size(), false);
  for (size_t i = 0; i < plan.points.size(); ++i) {
    if (taken[i]) continue;
    const size_t first = ordered.size();
    int owner = 0;
    for (size_t j = i; j < plan.points.size(); ++j) {
      if (taken[j] || plan.points[j].serve_argv != plan.points[i].serve_argv) continue;
      taken[j] = true;
      owner = std::max(owner, plan.points[j].concurrency);
      ordered.push_back(plan.points[j]);
    }
    for (size_t j = first; j < ordered.size(); ++j) ordered[j].server_of = owner;
  }
  plan.points = std::move(ordered);
  return plan;
}

nlohmann::json plan_json(const Plan& p) {
  nlohmann::json pts = nlohmann::json::array();
  for (const PointPlan& x : p.points) {
    nlohmann::json j = {{"concurrency", x.concurrency},
                        {"band", x.band},
                        {"draft_tokens", x.draft_tokens},
                        {"acceptance_length", x.draft_tokens ? nlohmann::json(x.acceptance_length) : nlohmann::json(nullptr)},
                        {"rollback", x.draft_tokens ? nlohmann::json(x.rollback) : nlohmann::json(nullptr)},
                        {"spec_method", x.draft_tokens ? nlohmann::json(x.spec_method) : nlohmann::json(nullptr)},
                        {"draft_sample", x.draft_tokens ? nlohmann::json(x.draft_sample) : nlohmann::json(nullptr)},
                        {"dcp", x.dcp},
                        {"window", x.window},
                        {"window_pinned", x.window_pinned},
                        {"verify_rows", x.verify_rows},
                        {"max_num_seqs", x.max_num_seqs},
                        {"max_num_batched_tokens", x.max_num_batched_tokens},
                        {"dram_utilization", x.dram_utilization > 0 ? nlohmann::json(x.dram_utilization) : nlohmann::json(nullptr)},
                        {"total_cpu_dram_gb", x.dram_utilization > 0 ? nlohmann::json(x.total_cpu_dram_gb) : nlohmann::json(nullptr)},
                        {"per_rank_dram_gb", x.dram_utilization > 0 ? nlohmann::json(x.per_rank_dram_gb) : nlohmann::json(nullptr)},
                        {"server_of", x.server_of},
                        {"serve", x.serve_argv},
                        {"bench", x.bench_argv},
                        {"serve_line", shell_line(x.serve_argv)},
                        {"bench_line", shell_line(x.bench_argv)},
                        {"result_dir", x.result_dir}};
    pts.push_back(j);
  }
  return {{"recipe", p.recipe},
          {"recipe_path", p.recipe_path},
          {"served_name", p.served_name},
          {"model", p.model},
          {"draft_model", p.draft_model.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.draft_model)},
          {"golden_al", p.golden_al.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.golden_al)},
          {"available_mib", p.available_mib},
          {"available_from_machine", p.available_from_machine},
          {"tuned_isa", p.tuned_isa.empty() ? nlohmann::json(nullptr) : nlohmann::json(p.tuned_isa)},
          {"points", pts}};
}

std::string plan_text(const Plan& p) {
  std::ostringstream os;
  os << "recipe " << p.recipe << " (" << p.recipe_path << "), served as '" << p.served_name << "'";
  if (p.available_mib > 0)
    os << ", host memory " << fmt(p.available_mib, 0) << " MiB" << (p.available_from_machine ? " (this machine)" : "");
  os << "\n\n";
  char line[256];
  std::snprintf(line, sizeof line, "%5s  %-16s %3s %5s %-7s %4s %6s %7s %9s %11s %9s  %s\n", "conc", "band", "K", "AL",
                "rollbk", "dcp", "window", "verify", "max-seqs", "max-batched", "dram/rank", "server");
  os << line;
  for (const PointPlan& x : p.points) {
    const std::string al = x.draft_tokens ? fmt(x.acceptance_length) : "-";
    const std::string win = std::to_string(x.window) + (x.window_pinned ? "*" : "");
    const std::string dram = x.dram_utilization > 0 ? std::to_string(x.per_rank_dram_gb) + " GB" : "-";
    const std::string srv = x.server_of == x.concurrency ? "own" : "of c=" + std::to_string(x.server_of);
    std::snprintf(line, sizeof line, "%5d  %-16s %3d %5s %-7s %4d %6s %7d %9d %11d %9s  %s\n", x.concurrency,
                  x.band.c_str(), x.draft_tokens, al.c_str(), x.draft_tokens ? x.rollback.c_str() : "-", x.dcp,
                  win.c_str(), x.verify_rows, x.max_num_seqs, x.max_num_batched_tokens, dram.c_str(), srv.c_str());
    os << line;
  }
  os << "(* window pinned by the recipe; otherwise 2 x concurrency)\n";
  for (const PointPlan& x : p.points) {
    os << "\nc=" << x.concurrency << " (" << x.band << ")\n";
    if (x.server_of == x.concurrency)
      os << "  serve: " << shell_line(x.serve_argv) << "\n";
    else
      os << "  serve: the server of c=" << x.server_of << ", unchanged (identical settings)\n";
    os << "  bench: " << shell_line(x.bench_argv) << "\n";
  }
  return os.str();
}

}  // namespace ds::recipe
