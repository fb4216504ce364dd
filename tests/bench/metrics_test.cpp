// Metric arithmetic on hand-made timings, SSE parsing, validity rules, Prometheus parsing.
#include <gtest/gtest.h>

#include "bench/metrics.h"
#include "bench/server_facts.h"
#include "bench/server_probe.h"
#include "bench/sse_client.h"

namespace ds::bench {
namespace {

RequestRecord done(double send, double first, double gap, int tokens, int64_t cached = -1) {
  RequestRecord r;
  r.max_tokens = tokens;
  r.input_tokens = 100;
  r.theoretical_cached_tokens = 50;
  r.result.status = 200;
  r.result.send_s = send;
  for (int i = 0; i < tokens; ++i) r.result.chunk_s.push_back(first + gap * i);
  r.result.end_s = first + gap * (tokens - 1);
  r.result.completion_tokens = tokens;
  r.result.prompt_tokens = 100;
  r.result.cached_tokens = cached;
  return r;
}

TEST(Metrics, Percentiles) {
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 90), 10);
  const Dist d = distribution({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(d.mean, 2.5);
  EXPECT_DOUBLE_EQ(d.p99, 3.97);
  EXPECT_EQ(d.n, 4u);
}

TEST(Metrics, TtftItlTpotThroughput) {
  std::vector<RequestRecord> recs;
  recs.push_back(done(0.0, 0.5, 0.1, 11, 60));  // ends at 1.5
  recs.push_back(done(1.0, 1.2, 0.2, 6, 40));   // ends at 2.2
  RequestRecord warm = done(-5, -4, 1, 3);
  warm.warmup = true;
  recs.push_back(warm);
  RequestRecord failed;
  failed.result.send_s = 0.5;
  failed.result.end_s = 4.0;  // failures still bound the window
  failed.result.error = "HTTP 500";
  recs.push_back(failed);
  RequestRecord cancelled = done(3, 3.5, 0.1, 2);
  cancelled.result.cancelled = true;
  recs.push_back(cancelled);

  const PointMetrics m = compute_metrics(recs, 2);
  EXPECT_EQ(m.measured, 3);
  EXPECT_EQ(m.completed, 2);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.warmup, 1);
  EXPECT_EQ(m.cancelled, 1);
  EXPECT_NEAR(m.ttft.mean, (0.5 + 0.2) / 2, 1e-12);
  EXPECT_NEAR(m.ttft.p50, 0.35, 1e-12);
  EXPECT_NEAR(m.e2e.mean, (1.5 + 1.2) / 2, 1e-12);
  EXPECT_NEAR(m.tpot.mean, (0.1 + 0.2) / 2, 1e-12);
  // ITL pools the gaps: 10 of 0.1 s and 5 of 0.2 s.
  EXPECT_EQ(m.itl.n, 15u);
  EXPECT_NEAR(m.itl.mean, (10 * 0.1 + 5 * 0.2) / 15, 1e-12);
  EXPECT_NEAR(m.itl.p50, 0.1, 1e-12);
  EXPECT_NEAR(m.itl.p90, 0.2, 1e-12);
  EXPECT_NEAR(m.interactivity.p50, 10.0, 1e-9);
  EXPECT_NEAR(m.interactivity.p90, 5.0, 1e-9);
  EXPECT_DOUBLE_EQ(m.duration_s, 4.0);  // 0.0 .. 4.0
  EXPECT_NEAR(m.output_tok_s, 17 / 4.0, 1e-12);
  EXPECT_NEAR(m.total_tok_s, (17 + 200) / 4.0, 1e-12);
  EXPECT_NEAR(m.output_tok_s_per_rank, 17 / 8.0, 1e-12);
  EXPECT_NEAR(m.request_rate, 0.5, 1e-12);
  EXPECT_NEAR(m.failed_ratio, 1.0 / 3, 1e-12);
  EXPECT_NEAR(m.theoretical_hit_rate, 0.5, 1e-12);
  ASSERT_TRUE(m.served_hit_rate_usage.has_value());
  EXPECT_NEAR(*m.served_hit_rate_usage, 0.5, 1e-12);
}

TEST(Metrics, SeveralTokensPerEventSplitTheGap) {
  RequestRecord r = done(0, 1, 0.3, 4);  // 4 events, 10 tokens: 3 gaps carry 9 tokens
  r.result.completion_tokens = 10;
  r.max_tokens = 10;
  const RequestTiming t = timing_of(r.result);
  ASSERT_EQ(t.itl.size(), 3u);
  EXPECT_NEAR(t.itl[0], 0.1, 1e-12);
  EXPECT_NEAR(t.tpot, 0.9 / 9, 1e-12);
}

TEST(Metrics, Validity) {
  PointMetrics m;
  m.measured = 100;
  m.completed = 85;
  m.failed = 15;
  m.failed_ratio = 0.15;
  m.context_overflow = 2;
  m.context_overflow_ratio = 0.02;
  Validity v = judge(m, ValidityRules{}, false, false);
  EXPECT_FALSE(v.valid);
  ASSERT_EQ(v.reasons.size(), 2u);
  EXPECT_NE(v.reasons[0].find("failed requests 15.0%"), std::string::npos);
  EXPECT_NE(v.reasons[1].find("context overflow 2.0%"), std::string::npos);
  m.failed = 1;
  m.failed_ratio = 0.01;
  m.context_overflow_ratio = 0.01;  // at the limit is still valid
  m.completed = 99;
  EXPECT_TRUE(judge(m, ValidityRules{}, false, false).valid);
  m.completed = 3;
  v = judge(m, ValidityRules{}, false, false);
  EXPECT_FALSE(v.valid);
  EXPECT_NE(v.reasons[0].find("too few observations"), std::string::npos);
}

TEST(Sse, ParsesEventsSplitAnywhere) {
  const std::string stream =
      ": keep-alive\r\n\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: {\"b\":\ndata: 2}\n\ndata: [DONE]\n\n";
  for (size_t cut = 1; cut < stream.size(); ++cut) {
    std::vector<std::string> got;
    SseParser p([&](const std::string& d) { got.push_back(d); });
    p.feed(stream.data(), cut);
    p.feed(stream.data() + cut, stream.size() - cut);
    p.finish();
    ASSERT_EQ(got, (std::vector<std::string>{"{\"a\":1}", "{\"b\":\n2}", "[DONE]"})) << "cut " << cut;
  }
  std::vector<std::string> got;
  SseParser p([&](const std::string& d) { got.push_back(d); });
  const std::string unterminated = "data: tail";
  p.feed(unterminated.data(), unterminated.size());
  p.finish();
  EXPECT_EQ(got, (std::vector<std::string>{"tail"}));
}

TEST(Sse, ContextOverflowPhrases) {
  EXPECT_TRUE(is_context_overflow(R"({"error":{"message":"This model's maximum context length is 4096 tokens"}})"));
  EXPECT_TRUE(is_context_overflow("prompt is too long"));
  EXPECT_FALSE(is_context_overflow("internal error"));
}

TEST(Prometheus, ParsesSumsAndDeltas) {
  const MetricSamples before = parse_prometheus(
      "# HELP x\n# TYPE deltaserve:prefix_cache_hits_total counter\n"
      "deltaserve:prefix_cache_hits_total{model=\"m\"} 10\n"
      "deltaserve:prefix_cache_queries_total 100\n");
  const MetricSamples after = parse_prometheus(
      "deltaserve:prefix_cache_hits_total{model=\"m\"} 40\n"
      "deltaserve:prefix_cache_hits_total{model=\"a b\"} 5 1700000000\n"
      "deltaserve:prefix_cache_queries_total 200\n"
      "deltaserve:prefix_cache_queries_total_extra 7\n"
      "deltaserve:spec_acceptance_length 3.25\n"
      "garbage line\n");
  EXPECT_EQ(metric_sum(after, "deltaserve:prefix_cache_hits_total"), 45.0);
  EXPECT_EQ(metric_sum(after, "deltaserve:prefix_cache_queries_total"), 200.0);
  EXPECT_FALSE(metric_sum(after, "nothing").has_value());
  const MetricSamples d = metric_delta(before, after);
  auto hit = served_hit_rate_from_metrics(d);
  ASSERT_TRUE(hit.has_value());
  EXPECT_NEAR(hit->value, 35.0 / 100, 1e-12);
  auto al = acceptance_length(after, d);
  ASSERT_TRUE(al.has_value());
  EXPECT_DOUBLE_EQ(al->value, 3.25);
}

}  // namespace
}  // namespace ds::bench
