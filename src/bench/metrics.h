// Turns request records into the figures a run reports. Formulas (docs/bench.md):
//   TTFT  = first text event - send              E2E = last byte - send
//   ITL   = gap between consecutive text events, divided by the tokens each event carried
//           on average when the server packs several tokens into one event
//   TPOT  = (E2E - TTFT) / (output tokens - 1), per request
//   interactivity pX = 1 / ITL pX, tokens/s seen by one user
//   throughput = tokens of measured, successful requests / measured window, and / ranks
// Percentiles interpolate linearly between order statistics.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "bench/record.h"

namespace ds::bench {

struct Dist {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
  size_t n = 0;
};

// p in [0, 100] over ascending `sorted`; 0 when empty.
double percentile(const std::vector<double>& sorted, double p);
Dist distribution(std::vector<double> v);

struct RequestTiming {
  double ttft = -1, e2e = -1, tpot = -1;
  std::vector<double> itl;
  int64_t output_tokens = 0;
};
// Timing of one successful streamed request.
RequestTiming timing_of(const StreamResult& r);

struct PointMetrics {
  int64_t measured = 0;  // sent after warm-up and not cancelled by the end of the run
  int64_t completed = 0, failed = 0, context_overflow = 0, cancelled = 0, warmup = 0;
  int64_t output_length_mismatch = 0;  // completed with fewer / more tokens than max_tokens
  double window_start_s = 0, window_end_s = 0, duration_s = 0;
  Dist ttft, itl, tpot, e2e, interactivity;
  int64_t input_tokens = 0, output_tokens = 0;
  double input_tok_s = 0, output_tok_s = 0, total_tok_s = 0;
  double output_tok_s_per_rank = 0, total_tok_s_per_rank = 0;
  double request_rate = 0;
  double failed_ratio = 0, context_overflow_ratio = 0;
  double theoretical_hit_rate = 0;
  std::optional<double> served_hit_rate_usage;  // from usage...cached_tokens, when reported
};

PointMetrics compute_metrics(const std::vector<RequestRecord>& records, int ranks);

struct ValidityRules {
  double failed_request_threshold = 0.10;
  double context_overflow_threshold = 0.01;
  int64_t min_observations = 10;
};

struct Validity {
  bool valid = true;
  std::vector<std::string> reasons;
};

Validity judge(const PointMetrics& m, const ValidityRules& rules, bool interrupted,
               bool aborted_for_failures);

}  // namespace ds::bench
