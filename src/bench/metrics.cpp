#include "bench/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace ds::bench {

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - static_cast<double>(lo));
}

Dist distribution(std::vector<double> v) {
  Dist d;
  d.n = v.size();
  if (v.empty()) return d;
  std::sort(v.begin(), v.end());
  d.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  d.p50 = percentile(v, 50);
  d.p90 = percentile(v, 90);
  d.p99 = percentile(v, 99);
  return d;
}

RequestTiming timing_of(const StreamResult& r) {
  RequestTiming t;
  t.output_tokens = r.completion_tokens >= 0 ? r.completion_tokens
                                             : static_cast<int64_t>(r.chunk_s.size());
  if (r.chunk_s.empty()) return t;
  t.ttft = r.chunk_s.front() - r.send_s;
  t.e2e = r.end_s - r.send_s;
  if (t.output_tokens > 1) t.tpot = (t.e2e - t.ttft) / static_cast<double>(t.output_tokens - 1);
  const size_t gaps = r.chunk_s.size() - 1;
  if (gaps > 0) {
    // With one token per event this is 1; speculative decoding may send several per event.
    const double tokens_per_gap =
        t.output_tokens > 1 ? std::max(1.0, static_cast<double>(t.output_tokens - 1) /
                                                static_cast<double>(gaps))
                            : 1.0;
    for (size_t i = 1; i < r.chunk_s.size(); ++i)
      t.itl.push_back((r.chunk_s[i] - r.chunk_s[i - 1]) / tokens_per_gap);
  }
  return t;
}

PointMetrics compute_metrics(const std::vector<RequestRecord>& records, int ranks) {
  PointMetrics m;
  std::vector<double> ttft, itl, tpot, e2e;
  double start = INFINITY, end = -INFINITY;
  int64_t theo = 0, theo_base = 0, cached = 0, cached_base = 0;
  bool any_cached = false;
  for (const auto& rec : records) {
    const StreamResult& r = rec.result;
    if (rec.warmup) {
      ++m.warmup;
      continue;
    }
    if (r.cancelled) {
      ++m.cancelled;
      continue;
    }
    ++m.measured;
    start = std::min(start, r.send_s);
    end = std::max(end, r.end_s);
    if (!r.error.empty()) {
      ++m.failed;
      if (r.context_overflow) ++m.context_overflow;
      continue;
    }
    ++m.completed;
    const RequestTiming t = timing_of(r);
    if (t.ttft >= 0) ttft.push_back(t.ttft);
    if (t.e2e >= 0) e2e.push_back(t.e2e);
    if (t.tpot >= 0) tpot.push_back(t.tpot);
    itl.insert(itl.end(), t.itl.begin(), t.itl.end());
    if (t.output_tokens != rec.max_tokens) ++m.output_length_mismatch;
    const int64_t prompt = r.prompt_tokens >= 0 ? r.prompt_tokens : rec.input_tokens;
    m.input_tokens += prompt;
    m.output_tokens += t.output_tokens;
    theo += rec.theoretical_cached_tokens;
    theo_base += rec.input_tokens;
    if (r.cached_tokens >= 0) {
      any_cached = true;
      cached += r.cached_tokens;
      cached_base += prompt;
    }
  }
  m.ttft = distribution(ttft);
  m.itl = distribution(itl);
  m.tpot = distribution(tpot);
  m.e2e = distribution(e2e);
  auto inv = [](double x) { return x > 0 ? 1.0 / x : 0.0; };
  m.interactivity = {inv(m.itl.mean), inv(m.itl.p50), inv(m.itl.p90), inv(m.itl.p99), m.itl.n};
  if (m.measured > 0) {
    m.window_start_s = start;
    m.window_end_s = end;
    m.duration_s = std::max(0.0, end - start);
    m.failed_ratio = static_cast<double>(m.failed) / static_cast<double>(m.measured);
    m.context_overflow_ratio =
        static_cast<double>(m.context_overflow) / static_cast<double>(m.measured);
  }
  if (m.duration_s > 0) {
    const double d = m.duration_s;
    m.input_tok_s = static_cast<double>(m.input_tokens) / d;
    m.output_tok_s = static_cast<double>(m.output_tokens) / d;
    m.total_tok_s = m.input_tok_s + m.output_tok_s;
    m.request_rate = static_cast<double>(m.completed) / d;
    const double r = std::max(1, ranks);
    m.output_tok_s_per_rank = m.output_tok_s / r;
    m.total_tok_s_per_rank = m.total_tok_s / r;
  }
  if (theo_base > 0) m.theoretical_hit_rate = static_cast<double>(theo) / static_cast<double>(theo_base);
  if (any_cached && cached_base > 0)
    m.served_hit_rate_usage = static_cast<double>(cached) / static_cast<double>(cached_base);
  return m;
}

Validity judge(const PointMetrics& m, const ValidityRules& rules, bool interrupted,
               bool aborted_for_failures) {
  Validity v;
  char buf[256];
  auto fail = [&](const char* s) {
    v.valid = false;
    v.reasons.emplace_back(s);
  };
  if (m.failed_ratio > rules.failed_request_threshold) {
    std::snprintf(buf, sizeof buf,
                  "failed requests %.1f%% (%lld of %lld) exceed --failed-request-threshold %.1f%%",
                  100 * m.failed_ratio, static_cast<long long>(m.failed),
                  static_cast<long long>(m.measured), 100 * rules.failed_request_threshold);
    fail(buf);
  }
  if (m.context_overflow_ratio > rules.context_overflow_threshold) {
    std::snprintf(buf, sizeof buf, "context overflow %.1f%% of requests exceeds %.1f%%",
                  100 * m.context_overflow_ratio, 100 * rules.context_overflow_threshold);
    fail(buf);
  }
  if (m.completed < rules.min_observations) {
    std::snprintf(buf, sizeof buf,
                  "too few observations: %lld completed requests, fewer than --min-observations %lld",
                  static_cast<long long>(m.completed), static_cast<long long>(rules.min_observations));
    fail(buf);
  }
  if (interrupted) fail("run interrupted before its duration");
  if (aborted_for_failures) fail("stopped early: the failure rate crossed the threshold");
  return v;
}

}  // namespace ds::bench
