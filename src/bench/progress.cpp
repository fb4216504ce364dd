#include "bench/progress.h"

#include <cstdio>

namespace ds::bench {

ProgressPrinter::ProgressPrinter(const Replay& replay, std::string label, double duration_s,
                                 double interval_s)
    : replay_(replay), label_(std::move(label)), duration_s_(duration_s), interval_s_(interval_s) {
  if (interval_s_ > 0) thread_ = std::thread([this] { loop(); });
}

ProgressPrinter::~ProgressPrinter() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string ProgressPrinter::line() const {
  const ReplayCounters& c = replay_.counters();
  const double ms = measure_start_s_.load();
  char buf[256];
  if (ms < 0) {
    std::snprintf(buf, sizeof buf, "[bench %s] warming up: %lld sent, %lld in flight",
                  label_.c_str(), static_cast<long long>(c.sent.load()),
                  static_cast<long long>(c.in_flight.load()));
    return buf;
  }
  const double elapsed = replay_.now_s() - ms;
  const double tok_s = elapsed > 0 ? static_cast<double>(c.output_tokens.load()) / elapsed : 0;
  std::snprintf(buf, sizeof buf,
                "[bench %s] %.0f/%.0f s | %lld requests done, %lld failed | %lld in flight | "
                "%.1f output tok/s",
                label_.c_str(), std::min(elapsed, duration_s_), duration_s_,
                static_cast<long long>(c.done.load()), static_cast<long long>(c.failed.load()),
                static_cast<long long>(c.in_flight.load()), tok_s);
  return buf;
}

void ProgressPrinter::loop() {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::duration<double>(interval_s_), [&] { return stop_; }))
    std::fprintf(stderr, "%s\n", line().c_str());
}

}  // namespace ds::bench
