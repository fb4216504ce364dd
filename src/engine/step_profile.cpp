#include "engine/step_profile.h"

#include <prometheus/family.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>

namespace ds {

const char* step_phase_name(int phase) {
  static const char* kNames[kStepPhases] = {"schedule", "draft", "forward", "sample",
                                            "accept",   "commit", "stream", "finish"};
  return kNames[phase];
}

StepProfiler::StepProfiler(EngineMetrics& metrics, int print_every) : print_every_(print_every) {
  using namespace prometheus;
  auto& r = metrics.registry();
  // 10 us to 10 s: sampling one row is microseconds, a long prefill step seconds.
  const Histogram::BucketBoundaries b = {1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3,
                                         1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 10};
  auto& phases = BuildHistogram()
                     .Name("deltaserve:step_phase_seconds")
                     .Help("Wall time of one engine step's phase (idle: waiting for work before a step; "
                           "between: admitting arrivals and cancellations before it)")
                     .Register(r);
  for (int p = 0; p < kStepPhases; ++p) phase_[p] = &phases.Add({{"phase", step_phase_name(p)}}, b);
  idle_ = &phases.Add({{"phase", "idle"}}, b);
  between_ = &phases.Add({{"phase", "between"}}, b);
  auto& parts = BuildHistogram()
                    .Name("deltaserve:forward_part_seconds")
                    .Help("Wall time of one forward's layer parts of a kind (all layers of the kind together)")
                    .Register(r);
  for (int p = 0; p < ForwardProfile::kParts; ++p) part_[p] = &parts.Add({{"part", ForwardProfile::name(p)}}, b);
  cpu_seconds_ = &BuildCounter()
                      .Name("deltaserve:engine_thread_cpu_seconds_total")
                      .Help("CPU time of the engine thread within steps")
                      .Register(r)
                      .Add({});
  off_cpu_seconds_ = &BuildCounter()
                          .Name("deltaserve:engine_thread_off_cpu_seconds_total")
                          .Help("Step wall time the engine thread spent off CPU: blocked at a fork-join barrier, "
                                "or descheduled for another thread")
                          .Register(r)
                          .Add({});
  if (print_every_ > 0) window_.reserve(size_t(print_every_));
}

void StepProfiler::record(const StepSample& s) {
  for (int p = 0; p < kStepPhases; ++p)
    if (p != PhaseDraft || s.phase[p] > 0) phase_[p]->Observe(s.phase[p]);
  for (int p = 0; p < ForwardProfile::kParts; ++p)
    if (s.forward.seconds[p] > 0) part_[p]->Observe(s.forward.seconds[p]);
  idle_->Observe(s.idle);
  between_->Observe(s.between);
  cpu_seconds_->Increment(std::min(s.cpu, s.wall));
  off_cpu_seconds_->Increment(std::max(0.0, s.wall - s.cpu));
  if (print_every_ <= 0) return;
  window_.push_back(s);
  if (int(window_.size()) < print_every_) return;
  spdlog::info("step profile, last {} steps:\n{}", window_.size(), table(window_));
  window_.clear();
}

std::string StepProfiler::table(const std::vector<StepSample>& w) {
  if (w.empty()) return "";
  double wall = 0, cpu = 0, rows = 0, seqs = 0, dec = 0;
  for (const auto& s : w) {
    wall += s.wall;
    cpu += s.cpu;
    rows += s.rows;
    seqs += s.seqs;
    dec += s.decode_seqs;
  }
  const double n = double(w.size());
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line,
                "  %zu steps: %.1f rows, %.1f sequences (%.1f decoding) per step; step %.3f ms mean; engine thread on CPU %.0f%%\n",
                w.size(), rows / n, seqs / n, dec / n, 1e3 * wall / n, wall > 0 ? 100 * cpu / wall : 0.0);
  out += line;
  std::snprintf(line, sizeof line, "  %-18s %9s %9s %9s %9s %7s\n", "", "mean ms", "p50 ms", "p90 ms", "max ms", "share");
  out += line;
  std::vector<double> v(w.size());
  auto row = [&](const std::string& name, auto get, bool share) {
    double sum = 0;
    for (size_t i = 0; i < w.size(); ++i) sum += v[i] = get(w[i]);
    if (sum == 0) return;
    std::sort(v.begin(), v.end());
    const auto q = [&](double f) { return 1e3 * v[std::min(v.size() - 1, size_t(f * double(v.size())))]; };
    char l[160];
    if (share)
      std::snprintf(l, sizeof l, "  %-18s %9.3f %9.3f %9.3f %9.3f %6.1f%%\n", name.c_str(), 1e3 * sum / n, q(0.5), q(0.9),
                    1e3 * v.back(), wall > 0 ? 100 * sum / wall : 0.0);
    else
      std::snprintf(l, sizeof l, "  %-18s %9.3f %9.3f %9.3f %9.3f %7s\n", name.c_str(), 1e3 * sum / n, q(0.5), q(0.9),
                    1e3 * v.back(), "");
    out += l;
  };
  row("step", [](const StepSample& s) { return s.wall; }, true);
  for (int p = 0; p < kStepPhases; ++p) {
    row(step_phase_name(p), [p](const StepSample& s) { return s.phase[p]; }, true);
    if (p == PhaseForward)
      for (int q = 0; q < ForwardProfile::kParts; ++q)
        row(std::string("  ") + ForwardProfile::name(q), [q](const StepSample& s) { return s.forward.seconds[q]; }, true);
  }
  row("off CPU (engine)", [](const StepSample& s) { return std::max(0.0, s.wall - s.cpu); }, true);
  row("idle before", [](const StepSample& s) { return s.idle; }, false);
  row("between steps", [](const StepSample& s) { return s.between; }, false);
  return out;
}

}  // namespace ds
