// The server (routes, generation, engine) against clients that misbehave at the HTTP level:
// the hardening issue's transport items, end to end. The transport's own tests
// (tests/http/transport_test.cpp) cover each limit alone.
#include <gtest/gtest.h>

#include <thread>

#include "../support/raw_client.h"
#include "server_harness.h"

namespace ds {
namespace {

using namespace testing;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

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
    const auto t0 = Clock::now();
    while (s.engine->in_flight() == 0 && Clock::now() - t0 < 5s) std::this_thread::sleep_for(2ms);
    ASSERT_EQ(s.engine->in_flight(), 1);
    std::this_thread::sleep_for(50ms);
  }  // hangs up
  const auto t0 = Clock::now();
  while (s.engine->in_flight() > 0 && Clock::now() - t0 < 3s) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(s.engine->in_flight(), 0) << "the request ran on after its client left";
  EXPECT_LT(Clock::now() - t0, 2s);
  s.model->step_delay_us = 0;
  const auto m = http_call(s.port, "GET", "/metrics");
  EXPECT_NE(m.raw.find("deltaserve:request_errors_total{kind=\"client_gone\"} 1"), std::string::npos);
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
  o.request_timeout_s = 1.5;
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
  int ok = 0, probes = 0;
  const auto until = Clock::now() + 2500ms;
  while (Clock::now() < until) {
    ok += http_call(s.port, "GET", "/health").status == 200;
    ok += http_call(s.port, "GET", "/metrics").status == 200;
    probes += 2;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(ok, probes);
  int timed_out = 0;
  for (auto& c : slow) timed_out += c->read_until("\r\n\r\n", 3000).rfind("HTTP/1.1 408 ", 0) == 0;
  stop = true;
  trickle.join();
  EXPECT_EQ(timed_out, 200);
  // A generation request still works.
  const auto r = post(s.port, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 4}});
  EXPECT_EQ(r.status, 200) << r.raw;
}

}  // namespace
}  // namespace ds
