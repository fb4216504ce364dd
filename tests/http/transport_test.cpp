// The transport against clients that misbehave: each test is one of the hardening issue's ways
// to exhaust or confuse a server (issue 11), on loopback with a small test application.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "http/http_transport.h"
#include "../support/raw_client.h"
#include "../support/wait_until.h"

namespace ds::http {
namespace {

using namespace std::chrono_literals;
using ds::testing::count_of;
using ds::testing::RawClient;
using Clock = std::chrono::steady_clock;
using ds::test::wait_until;

// The application: /health inline; /echo answers with the body's size; /block holds its
// worker until the client hangs up (or the test releases it); /stream writes until the sink
// refuses.
struct TestApp {
  std::atomic<int> handled{0}, echo_calls{0};
  std::atomic<bool> release{false};
  std::atomic<int> gone_seen{0};
  std::atomic<int> blocked{0};
  std::atomic<int> stream_refused{0};
  std::atomic<long> streamed_bytes{0};

  HttpApp app() {
    HttpApp a;
    a.runs_inline = [](const HttpRequest& r) { return r.path == "/health"; };
    a.handle = [this](const HttpRequest& r, HttpResponse& res) {
      handled.fetch_add(1);
      if (r.path == "/health") return res.set_content("ok", "text/plain");
      if (r.path == "/echo") {
        echo_calls.fetch_add(1);
        return res.set_content("len=" + std::to_string(r.body.size()) + " q=" + r.query, "text/plain");
      }
      if (r.path == "/block") {
        blocked.fetch_add(1);
        while (!r.client_gone() && !release.load()) std::this_thread::sleep_for(5ms);
        if (r.client_gone()) gone_seen.fetch_add(1);
        blocked.fetch_sub(1);
        return res.set_content("released", "text/plain");
      }
      if (r.path == "/stream") {
        res.content_type = "text/event-stream";
        res.stream = [this](ChunkSink& sink) {
          const std::string piece(64 << 10, 'x');
          for (int i = 0; i < 100000; ++i) {
            if (!sink.write(piece)) {
              stream_refused.fetch_add(1);
              return;
            }
            streamed_bytes.fetch_add(long(piece.size()));
          }
        };
        return;
      }
      res.status = 404;
      res.set_content("no route", "text/plain");
    };
    a.error = [](int status, const std::string& msg) {
      HttpResponse r;
      r.status = status;
      r.set_content("error: " + msg, "text/plain");
      return r;
    };
    return a;
  }
};

struct Server {
  TestApp app;
  std::unique_ptr<HttpTransport> t;
  int port = 0;
  explicit Server(TransportOptions o = {}) {
    o.host = "127.0.0.1";
    o.port = 0;
    t = std::make_unique<HttpTransport>(o, app.app());
    port = t->bind();
    t->start();
  }
  ~Server() {
    app.release = true;
    t->stop();
  }
};

std::string get(const std::string& path, const std::string& extra = {}) {
  return "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra + "\r\n";
}

// One request on a fresh connection; the whole response text.
std::string round_trip(int port, const std::string& req, const std::string& until = "\r\n\r\n", int ms = 30000) {
  RawClient c(port);
  if (!c.connected() || !c.send(req)) return {};
  std::string out = c.read_until(until, ms);
  // Read the body when it has a length.
  const size_t cl = out.find("Content-Length: ");
  const size_t head_end = out.find("\r\n\r\n");
  if (cl != std::string::npos && head_end != std::string::npos) {
    const size_t len = std::stoul(out.substr(cl + 16));
    while (out.size() < head_end + 4 + len && c.readable(ms)) {
      const std::string before = out;
      out = c.read_until(std::string(1, '\0') + "x", 50);
      if (out == before && c.closed_by_peer()) break;
    }
  }
  return out;
}

TEST(HttpTransport, AnswersAndKeepsTheConnection) {
  Server s;
  RawClient c(s.port);
  ASSERT_TRUE(c.connected());
  for (int i = 0; i < 3; ++i) {
    c.clear();
    ASSERT_TRUE(c.send("POST /echo?i=" + std::to_string(i) +
                       " HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"));
    const std::string r = c.read_until("q=i=" + std::to_string(i));
    EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
    EXPECT_NE(r.find("len=5 q=i=" + std::to_string(i)), std::string::npos) << r;
    EXPECT_EQ(r.find("Connection: close"), std::string::npos) << r;
  }
  EXPECT_EQ(s.t->stats().connections_accepted, 1u);
}

// Before: cpp-httplib read a chunked body whole, whatever its size (100 MB took the server to
// 2.9 GB). Now the parser stops at the limit: the 413 arrives while most of the body is unsent.
TEST(HttpTransport, AChunkedBodyOverTheLimitIsRefusedWhileItIsRead) {
  TransportOptions o;
  o.max_body_bytes = 64 << 10;
  Server s(o);
  RawClient c(s.port);
  ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
  const std::string piece(16 << 10, 'a');
  char size[16];
  std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
  size_t sent = 0;
  bool answered = false;
  for (int i = 0; i < 512 && !answered; ++i) {  // up to 8 MiB
    if (!c.send(std::string(size) + piece + "\r\n")) break;
    sent += piece.size();
    answered = c.readable(i < 4 ? 0 : 20);
  }
  const std::string r = c.read_until("\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 413 ", 0), 0u) << r.substr(0, 200);
  EXPECT_NE(r.find("over the limit of 65536 bytes"), std::string::npos);
  EXPECT_NE(r.find("Connection: close"), std::string::npos);
  EXPECT_LT(sent, size_t(1) << 20) << "the refusal came only after " << sent << " bytes";
  EXPECT_EQ(s.app.echo_calls.load(), 0);
  EXPECT_EQ(s.t->stats().oversized, 1u);
}

TEST(HttpTransport, ADeclaredBodyOverTheLimitIsRefusedBeforeItIsRead) {
  TransportOptions o;
  o.max_body_bytes = 1000;
  Server s(o);
  const std::string r = round_trip(s.port, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 413 ", 0), 0u) << r;
  EXPECT_EQ(s.app.echo_calls.load(), 0);
}

TEST(HttpTransport, TooManyOrTooLargeHeadersGet431) {
  TransportOptions o;
  o.max_header_count = 20;
  o.max_header_bytes = 4096;
  Server s(o);
  std::string many;
  for (int i = 0; i < 30; ++i) many += "X-H" + std::to_string(i) + ": v\r\n";
  std::string r = round_trip(s.port, get("/echo", many));
  EXPECT_EQ(r.rfind("HTTP/1.1 431 ", 0), 0u) << r;
  EXPECT_NE(r.find("more than 20 headers"), std::string::npos) << r;
  r = round_trip(s.port, get("/echo", "X-Big: " + std::string(8000, 'b') + "\r\n"));
  EXPECT_EQ(r.rfind("HTTP/1.1 431 ", 0), 0u) << r;
  EXPECT_NE(r.find("over the limit of 4096 bytes"), std::string::npos) << r;
  EXPECT_EQ(s.app.echo_calls.load(), 0);
  // The server is fine afterwards.
  r = round_trip(s.port, get("/health"), "ok");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 ", 0), 0u) << r;
}

TEST(HttpTransport, MalformedRequestsGet400AndClose) {
  Server s;
  for (const std::string& bad : {std::string("GARBAGE\r\n\r\n"), std::string("GET / HTTP/9.9\r\n\r\n"),
                                std::string("GET / HTTP/1.1\r\nBad Header\r\n\r\n"),
                                std::string("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")}) {
    RawClient c(s.port);
    ASSERT_TRUE(c.send(bad));
    const std::string r = c.read_until("\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 400 ", 0), 0u) << bad << " -> " << r;
    EXPECT_TRUE(c.wait_closed()) << bad;
  }
  EXPECT_EQ(s.app.echo_calls.load(), 0);
}

// Before: only the first of two pipelined requests was answered.
TEST(HttpTransport, PipelinedRequestsAreAnsweredInOrder) {
  Server s;
  RawClient c(s.port);
  std::string burst;
  for (int i = 0; i < 5; ++i)
    burst += "POST /echo?n=" + std::to_string(i) + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(i) +
             "\r\n\r\n" + std::string(size_t(i), 'z');
  ASSERT_TRUE(c.send(burst));
  const std::string r = c.read_until("len=4 q=n=4");
  size_t at = 0;
  for (int i = 0; i < 5; ++i) {
    const size_t p = r.find("len=" + std::to_string(i) + " q=n=" + std::to_string(i), at);
    ASSERT_NE(p, std::string::npos) << "answer " << i << " missing or out of order:\n" << r;
    at = p;
  }
  EXPECT_EQ(count_of(r, "HTTP/1.1 200 OK"), 5);
}

// Before: a client trickling one header byte at a time held an HTTP thread each; 600 of them
// pinned every thread and /health stopped answering. Now a trickler holds no thread, is closed
// with 408 when its request's deadline passes, and /health answers throughout. What is checked
// is an order of events, not a time: every /health probe is answered while all tricklers are
// still open (none has reached its deadline yet). With threads pinned, a probe would wait for
// the tricklers' 408s, and the count of timeouts at its answer would not be 0.
TEST(HttpTransport, TricklingClientsGet408AndHealthKeepsAnswering) {
  TransportOptions o;
  o.request_timeout = 8s;
  o.max_workers = 4;
  Server s(o);
  constexpr int kTricklers = 300;
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < kTricklers; ++i) {
    slow.push_back(std::make_unique<RawClient>(s.port));
    ASSERT_TRUE(slow.back()->connected());
  }
  std::atomic<bool> stop{false};
  std::atomic<size_t> sent{0};
  std::thread trickle([&] {
    const std::string req = "POST /echo HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(1000, 'a');
    for (size_t k = 0; k < req.size() && !stop.load(); ++k) {
      for (auto& c : slow) c->send(std::string(1, req[k]));
      sent = k + 1;
      std::this_thread::sleep_for(100ms);
    }
  });
  // Every trickler has started its request before the probes.
  ASSERT_TRUE(wait_until([&] { return sent.load() >= 2; }));
  int ok = 0, answered_while_open = 0;
  constexpr int kProbes = 8;
  for (int i = 0; i < kProbes; ++i) {
    const std::string r = round_trip(s.port, get("/health"), "ok");
    ok += r.rfind("HTTP/1.1 200 ", 0) == 0;
    answered_while_open += s.t->stats().request_timeouts == 0;
  }
  EXPECT_EQ(ok, kProbes);
  EXPECT_EQ(answered_while_open, kProbes) << "a /health probe waited for the tricklers' deadline";
  // One deadline for all of them (not one per client): a transport that never times them out
  // fails here once, instead of waiting out every client in turn.
  const bool all_timed_out = wait_until([&] { return s.t->stats().request_timeouts >= uint64_t(kTricklers); });
  stop = true;
  trickle.join();
  ASSERT_TRUE(all_timed_out) << s.t->stats().request_timeouts << " of " << kTricklers << " tricklers got 408";
  int timed_out = 0;
  for (auto& c : slow) {
    const std::string r = c->read_until("\r\n\r\n", 2000);
    timed_out += r.rfind("HTTP/1.1 408 ", 0) == 0;
  }
  EXPECT_EQ(timed_out, kTricklers);
  EXPECT_EQ(s.t->stats().request_timeouts, uint64_t(kTricklers));
  EXPECT_EQ(s.app.echo_calls.load(), 0);
}

TEST(HttpTransport, AnIdleKeepAliveConnectionIsClosedAfterItsTimeout) {
  TransportOptions o;
  o.keepalive_timeout = 300ms;
  Server s(o);
  RawClient c(s.port);
  ASSERT_TRUE(c.send(get("/health")));
  ASSERT_NE(c.read_until("ok").find("200 OK"), std::string::npos);
  // Without the timeout the connection would stay open for good: the wait's deadline catches that.
  EXPECT_TRUE(c.wait_closed());
  // The server counts the close after the client sees it.
  EXPECT_TRUE(wait_until([&] { return s.t->stats().connections_open == 0; }));
}

// At the cap, a newcomer takes the slot of the connection that has waited longest for its
// request: idle or stalled clients cannot lock others out.
TEST(HttpTransport, AtTheCapTheLongestWaitingConnectionMakesRoom) {
  TransportOptions o;
  o.max_connections = 8;
  Server s(o);
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 8; ++i) {
    idle.push_back(std::make_unique<RawClient>(s.port));
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(wait_until([&] { return s.t->stats().connections_open >= 8; }));
  const std::string r = round_trip(s.port, get("/health"), "ok");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 ", 0), 0u) << r;
  EXPECT_GE(s.t->stats().connections_evicted, 1u);
  EXPECT_TRUE(idle.front()->wait_closed()) << "the oldest idle connection should have been closed";
  EXPECT_LE(s.t->stats().connections_open, 8u);
}

TEST(HttpTransport, AtTheCapWithEveryConnectionBusyANewcomerGets503) {
  TransportOptions o;
  o.max_connections = 4;
  Server s(o);
  std::vector<std::unique_ptr<RawClient>> busy;
  for (int i = 0; i < 4; ++i) {
    busy.push_back(std::make_unique<RawClient>(s.port));
    ASSERT_TRUE(busy.back()->send(get("/block")));
  }
  ASSERT_TRUE(wait_until([&] { return s.app.blocked.load() >= 4; }));
  const std::string r = round_trip(s.port, get("/health"));
  EXPECT_EQ(r.rfind("HTTP/1.1 503 ", 0), 0u) << r;
  EXPECT_NE(r.find("Retry-After: 1"), std::string::npos) << r;
  EXPECT_EQ(s.t->stats().connections_refused, 1u);
  s.app.release = true;
  for (auto& c : busy) EXPECT_NE(c->read_until("released").find("released"), std::string::npos);
}

// Before: a non-streamed request whose client left ran to its end. Now the connection keeps
// reading while the handler works, sees end-of-file, and tells the handler.
TEST(HttpTransport, AClientThatHangsUpIsSeenWhileItsRequestIsHandled) {
  Server s;
  {
    RawClient c(s.port);
    ASSERT_TRUE(c.send(get("/block")));
    ASSERT_TRUE(wait_until([&] { return s.app.blocked.load() >= 1; }));
  }  // hangs up
  EXPECT_TRUE(wait_until([&] { return s.app.gone_seen.load() >= 1; }));
  EXPECT_EQ(s.app.gone_seen.load(), 1);
  EXPECT_EQ(s.t->stats().clients_gone, 1u);
}

TEST(HttpTransport, AStreamToAClientThatStopsReadingEndsAtTheWriteTimeout) {
  TransportOptions o;
  o.write_timeout = 500ms;
  Server s(o);
  RawClient c(s.port);
  int small = 4096;
  ::setsockopt(c.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  ASSERT_TRUE(c.send(get("/stream")));
  EXPECT_TRUE(wait_until([&] { return s.app.stream_refused.load() >= 1; }));
  EXPECT_EQ(s.app.stream_refused.load(), 1);
  EXPECT_EQ(s.t->stats().write_timeouts, 1u);
  // Bounded by the queue, not by how much the handler wanted to write.
  EXPECT_LT(s.app.streamed_bytes.load(), 64l << 20);
}

TEST(HttpTransport, ExpectContinueGetsContinueThenTheAnswer) {
  Server s;
  RawClient c(s.port);
  ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n"));
  EXPECT_NE(c.read_until("100 Continue\r\n\r\n").find("HTTP/1.1 100 Continue"), std::string::npos);
  ASSERT_TRUE(c.send("abc"));
  EXPECT_NE(c.read_until("len=3").find("len=3"), std::string::npos) << c.received();
}

TEST(HttpTransport, ScreenRefusesBeforeTheBodyIsRead) {
  TestApp app;
  HttpApp a = app.app();
  a.screen = [](const HttpRequest& r) -> std::optional<HttpResponse> {
    if (r.header("x-key") == "good") return std::nullopt;
    HttpResponse res;
    res.status = 401;
    res.set_content("no", "text/plain");
    return res;
  };
  HttpTransport t({}, a);
  const int port = t.bind();
  t.start();
  std::string r = round_trip(port, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
  EXPECT_EQ(r.rfind("HTTP/1.1 401 ", 0), 0u) << r;
  r = round_trip(port, "POST /echo HTTP/1.1\r\nHost: x\r\nX-Key: good\r\nContent-Length: 3\r\n\r\nabc", "len=3");
  EXPECT_NE(r.find("len=3"), std::string::npos) << r;
  EXPECT_EQ(app.echo_calls.load(), 1);
  t.stop();
}

TEST(HttpTransport, StopClosesEveryConnectionWhateverTheClients) {
  auto s = std::make_unique<Server>();
  RawClient trickler(s->port), reader_that_never_reads(s->port), blocked(s->port);
  ASSERT_TRUE(trickler.send("GET /he"));
  ASSERT_TRUE(reader_that_never_reads.send(get("/stream")));
  ASSERT_TRUE(blocked.send(get("/block")));
  ASSERT_TRUE(wait_until([&] { return s->app.blocked.load() >= 1; }));
  // stop() returns once every connection is closed; a hang in it fails the test by its deadline
  // instead of stalling the run.
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    s->t->stop();
    stopped = true;
  });
  const bool returned = wait_until([&] { return stopped.load(); });
  if (!returned) stopper.detach();  // leaks the server on purpose: the failure is the report
  else stopper.join();
  ASSERT_TRUE(returned) << "stop() did not return";
  EXPECT_TRUE(trickler.wait_closed());
  EXPECT_EQ(s->app.gone_seen.load(), 1);  // the blocked handler was told
}

TEST(HttpTransport, AHandlerThatThrowsGets500AndTheServerGoesOn) {
  TestApp app;
  HttpApp a = app.app();
  a.handle = [](const HttpRequest& r, HttpResponse& res) {
    if (r.path == "/boom") throw std::runtime_error("kaboom");
    res.set_content("fine", "text/plain");
  };
  HttpTransport t({}, a);
  const int port = t.bind();
  t.start();
  std::string r = round_trip(port, get("/boom"));
  EXPECT_EQ(r.rfind("HTTP/1.1 500 ", 0), 0u) << r;
  r = round_trip(port, get("/other"), "fine");
  EXPECT_NE(r.find("fine"), std::string::npos);
  t.stop();
}

// decorate() sees every answer to a request whose headers were read, whoever made it: the
// handler (streams too), screen's refusal, a handler that threw, and the transport's own error
// while the body was read. Errors before the headers are whole have no request to go by.
TEST(HttpTransport, DecorateRunsOnEveryAnswerToARequestWithHeaders) {
  TestApp app;
  HttpApp a = app.app();
  a.screen = [](const HttpRequest& r) -> std::optional<HttpResponse> {
    if (r.path != "/refused") return std::nullopt;
    HttpResponse res;
    res.status = 403;
    res.set_content("refused", "text/plain");
    return res;
  };
  const auto handle = a.handle;
  a.handle = [handle](const HttpRequest& r, HttpResponse& res) {
    if (r.path == "/boom") throw std::runtime_error("kaboom");
    handle(r, res);
  };
  a.decorate = [](const HttpRequest& r, HttpResponse& res) {
    if (!r.header("X-Tag").empty()) res.set_header("X-Tagged", r.header("X-Tag"));
  };
  TransportOptions o;
  o.max_body_bytes = 64 << 10;
  o.max_header_count = 20;
  HttpTransport t(o, a);
  const int port = t.bind();
  t.start();
  auto req = [](const std::string& path, const std::string& tag) {
    return "GET " + path + " HTTP/1.1\r\nHost: x\r\nX-Tag: " + tag + "\r\n\r\n";
  };
  std::string r = round_trip(port, req("/echo", "a"), "len=");
  EXPECT_NE(r.find("X-Tagged: a\r\n"), std::string::npos) << r;
  r = round_trip(port, req("/health", "inline"), "ok");
  EXPECT_NE(r.find("X-Tagged: inline\r\n"), std::string::npos) << r;
  r = round_trip(port, req("/refused", "b"));
  EXPECT_EQ(r.rfind("HTTP/1.1 403 ", 0), 0u) << r;
  EXPECT_NE(r.find("X-Tagged: b\r\n"), std::string::npos) << r;
  r = round_trip(port, req("/boom", "c"));
  EXPECT_EQ(r.rfind("HTTP/1.1 500 ", 0), 0u) << r;
  EXPECT_NE(r.find("X-Tagged: c\r\n"), std::string::npos) << r;
  {  // a stream's head
    RawClient c(port);
    ASSERT_TRUE(c.send(req("/stream", "d")));
    const std::string head = c.read_until("\r\n\r\n");
    EXPECT_NE(head.substr(0, head.find("\r\n\r\n")).find("X-Tagged: d\r\n"), std::string::npos) << head.substr(0, 300);
  }
  {  // a chunked body over the limit: 413 while it is read
    RawClient c(port);
    ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: x\r\nX-Tag: e\r\nTransfer-Encoding: chunked\r\n\r\n"));
    const std::string piece(16 << 10, 'a');
    for (int i = 0; i < 64 && !c.readable(i < 4 ? 0 : 20); ++i)
      if (!c.send("4000\r\n" + piece + "\r\n")) break;
    r = c.read_until("\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 413 ", 0), 0u) << r.substr(0, 200);
    EXPECT_NE(r.find("X-Tagged: e\r\n"), std::string::npos) << r.substr(0, 300);
  }
  // Too many headers: refused before they were all read, so nothing to decorate with.
  std::string many;
  for (int i = 0; i < 30; ++i) many += "X-H" + std::to_string(i) + ": v\r\n";
  r = round_trip(port, "GET /echo HTTP/1.1\r\nHost: x\r\nX-Tag: f\r\n" + many + "\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 431 ", 0), 0u) << r;
  EXPECT_EQ(r.find("X-Tagged"), std::string::npos) << r;
  // The next request's error is not decorated with the one before's headers.
  {
    RawClient c(port);
    ASSERT_TRUE(c.send(req("/echo", "g")));
    r = c.read_until("len=");
    c.clear();
    ASSERT_TRUE(c.send("GARBAGE\r\n\r\n"));
    r = c.read_until("\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 400 ", 0), 0u) << r;
    EXPECT_EQ(r.find("X-Tagged"), std::string::npos) << r;
  }
  t.stop();
}

}  // namespace
}  // namespace ds::http
