// The step profiler, always on: where each engine step's wall time goes (the step loop's
// phases, the forward by kind of layer part, the engine thread's time off CPU), and how long the
// engine waited for work before it. Each step is observed into /metrics histograms
// (deltaserve:step_phase_seconds{phase}, deltaserve:forward_part_seconds{part}); with
// `serve --profile-steps N` every N steps are also printed as one table. Cost: a dozen clock
// reads and histogram observations per step, microseconds against steps of milliseconds.
#pragma once
#include <prometheus/counter.h>
#include <prometheus/histogram.h>

#include <string>
#include <vector>

#include "engine/metrics.h"
#include "model/forward_profile.h"

namespace ds {

enum StepPhase { PhaseSchedule, PhaseDraft, PhaseForward, PhaseSample, PhaseAccept, PhaseCommit, PhaseStream,
                 PhaseFinish, kStepPhases };
const char* step_phase_name(int phase);

struct StepSample {
  double phase[kStepPhases] = {};
  ForwardProfile forward;
  double wall = 0;     // the step, schedule to finish
  double cpu = 0;      // the engine thread's CPU time in it (the rest: barriers, or descheduled)
  double idle = 0;     // before it: the engine thread waiting for work
  double between = 0;  // before it, not waiting: admission of arrivals, cancellations
  int rows = 0, seqs = 0, decode_seqs = 0;
};

class StepProfiler {
 public:
  // print_every 0: metrics only.
  StepProfiler(EngineMetrics& metrics, int print_every);
  void record(const StepSample& s);
  // The table for a window of steps: per phase and part, mean / p50 / p90 / max ms and the
  // share of step time.
  static std::string table(const std::vector<StepSample>& window);

 private:
  int print_every_;
  std::vector<StepSample> window_;
  prometheus::Histogram* phase_[kStepPhases];
  prometheus::Histogram* part_[ForwardProfile::kParts];
  prometheus::Histogram* idle_;
  prometheus::Histogram* between_;
  prometheus::Counter* cpu_seconds_;
  prometheus::Counter* off_cpu_seconds_;
};

}  // namespace ds
