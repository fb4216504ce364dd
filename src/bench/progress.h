// The live progress line on stderr for long runs: elapsed of duration, requests done, current
// output throughput.
#pragma once
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "bench/lanes.h"

namespace ds::bench {

class ProgressPrinter {
 public:
  // Prints every `interval_s` until destroyed; interval <= 0 prints nothing.
  ProgressPrinter(const Replay& replay, std::string label, double duration_s, double interval_s);
  ~ProgressPrinter();
  // Told by the run when the measured window opens (the lane thread that opened it).
  void measure_started(double at_s) { measure_start_s_ = at_s; }

 private:
  void loop();
  std::string line() const;

  const Replay& replay_;
  std::string label_;
  double duration_s_;
  double interval_s_;
  std::atomic<double> measure_start_s_{-1};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ds::bench
