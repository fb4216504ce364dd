// The server (routes, generation, engine) against clients that misbehave at the HTTP level:
// the hardening issue's transport items, end to end. The transport's own tests
// (tests/http/transport_test.cpp) cover each limit alone.
#include <gtest/gtest.h>

#include <thread>

#include "../support/raw_client.h"
#include "../support/wait_until.h"
#include "server_harness.h"

namespace ds {
namespace {

using namespace testing;
using namespace std::chrono_literals;
using ds::test::wait_until;

std::string completion_request(const json& body) {
  const std::string b = body.dump();
  return "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(b.size()) + "\r\n\r\n" + b;
}

// Before: a non-streamed request kept generating after its client left (48 of them ran 38 s of
// work). Now the connection sees the hang-up and the request is cancelled.
TEST(HostileClient, ANonStreamedRequestWhoseClientLeavesIsCancelled) {
  TestServer s;
  s.model->step_delay_us = 5000;  // 900 tokens would take 4.5 s
  {
    RawClient c(s.port);
    ASSERT_TRUE(c.send(completion_request({{"prompt", "Hello"}, {"max_tokens", 900}, {"ignore_eos", true}})));
    ASSERT_TRUE(wait_until([&] { return s.engine->in_flight() == 1; }));
    std::this_thread::sleep_for(50ms);
  }  // hangs up
  EXPECT_TRUE(wait_until([&] { return s.engine->in_flight() == 0; }));
  s.model->step_delay_us = 0;
  // Cancelled, not run to its end: it stopped short of its 900 tokens (a count, not a time).
  const auto m = http_call(s.port, "GET", "/metrics");
  EXPECT_NE(m.raw.find("deltaserve:request_errors_total{kind=\"client_gone\"} 1"), std::string::npos);
  const size_t at = m.raw.find("\ndeltaserve:generation_tokens_total");
  ASSERT_NE(at, std::string::npos) << m.raw;
  const double generated = std::stod(m.raw.substr(m.raw.find(' ', at + 1) + 1));
  EXPECT_LT(generated, 900) << "the request ran on after its client left";
  EXPECT_EQ(s.http->transport_stats().clients_gone, 1u);
}

// Before: the body limit held only for a declared Content-Length; a chunked body was read whole.
TEST(HostileClient, AChunkedBodyOverTheLimitGets413InTheApisShape) {
  auto o = TestServer::default_options();
  o.max_body_bytes = 16 << 10;
  TestServer s(TestServer::default_config(), o);
  RawClient c(s.port);
  ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n"));
  const std::string piece = "4000\r\n" + std::string(0x4000, ' ') + "\r\n";
  for (int i = 0; i < 64 && !c.readable(i < 2 ? 0 : 10); ++i)
    if (!c.send(piece)) break;
  const std::string r = c.read_until("}}");
  EXPECT_EQ(r.rfind("HTTP/1.1 413 ", 0), 0u) << r.substr(0, 300);
  EXPECT_NE(r.find("\"code\":\"request_too_large\""), std::string::npos) << r;
  EXPECT_NE(r.find("over the limit of 16384 bytes"), std::string::npos) << r;
  EXPECT_EQ(http_call(s.port, "GET", "/health").status, 200);
}

// Before: of requests pipelined on one connection only the first was answered.
TEST(HostileClient, PipelinedRequestsAreAnsweredInOrder) {
  TestServer s;
  RawClient c(s.port);
  std::string burst;
  for (int i = 0; i < 4; ++i) {
    const std::string b = json({{"prompt", std::string(size_t(i + 1), 'a')}}).dump();
    burst += "POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
             std::to_string(b.size()) + "\r\n\r\n" + b;
  }
  burst += "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  ASSERT_TRUE(c.send(burst));
  const std::string r = c.read_until("{\"status\":\"ok\"}");
  EXPECT_EQ(count_of(r, "HTTP/1.1 200 OK"), 5) << r;
  // Answers in the order asked: token counts of "a", "aa", ... then the health check.
  size_t at = 0;
  for (int i = 0; i < 4; ++i) {
    const size_t p = r.find("\"count\":", at);
    ASSERT_NE(p, std::string::npos) << r;
    at = p + 1;
  }
  EXPECT_GT(r.find("{\"status\":\"ok\"}"), at);
}

// Before: 600 connections trickling a header byte every 8 s pinned every HTTP thread and
// /health stopped answering for over a minute. Now tricklers cost no thread and get 408 at the
// request deadline; /health and /metrics answer throughout.
TEST(HostileClient, HealthAndMetricsAnswerUnderTricklingClients) {
  auto o = TestServer::default_options();
  o.http_threads = 8;
  o.request_timeout_s = 8;
  TestServer s(TestServer::default_config(), o);
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < 200; ++i) slow.push_back(std::make_unique<RawClient>(s.port));
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + std::string(500, 'a');
    for (size_t k = 0; k < req.size() && !stop.load(); ++k) {
      for (auto& c : slow) c->send(std::string(1, req[k]));
      std::this_thread::sleep_for(100ms);
    }
  });
  // Probed while every trickler is still open (none has reached its deadline): with threads
  // pinned, a probe would wait for the 408s and the timeout count at its answer would not be 0.
  int ok = 0, answered_while_open = 0;
  constexpr int kProbes = 4;
  for (int i = 0; i < kProbes; ++i) {
    ok += http_call(s.port, "GET", "/health").status == 200;
    ok += http_call(s.port, "GET", "/metrics").status == 200;
    answered_while_open += s.http->transport_stats().request_timeouts == 0;
  }
  EXPECT_EQ(ok, 2 * kProbes);
  EXPECT_EQ(answered_while_open, kProbes);
  int timed_out = 0;
  // One deadline for all of them, then each answer (already sent) read.
  const bool all_timed_out = wait_until([&] { return s.http->transport_stats().request_timeouts >= 200u; });
  stop = true;
  trickle.join();
  ASSERT_TRUE(all_timed_out) << s.http->transport_stats().request_timeouts << " of 200 tricklers got 408";
  for (auto& c : slow) timed_out += c->read_until("\r\n\r\n", 2000).rfind("HTTP/1.1 408 ", 0) == 0;
  EXPECT_EQ(timed_out, 200);
  // A generation request still works.
  const auto r = post(s.port, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 4}});
  EXPECT_EQ(r.status, 200) << r.raw;
}

}  // namespace
}  // namespace ds
