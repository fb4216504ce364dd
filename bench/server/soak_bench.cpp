// Soak: `deltaserve serve` (a separate process, so its memory is its own) against 64 clients for
// 10 minutes on loopback: greedy streams checked token for token against the first answer to the
// same prompt, mixed with cancellations, clients that hang up on non-streamed requests,
// tricklers, and bad requests of several kinds. A benchmark, not a test: not in ctest. Run:
//   [DS_SOAK_SECONDS=600] [DS_BENCH_MODEL=tests/data/models/tiny-hybrid-f32] build/bench/server/server_bench --gtest_filter='Soak*'
// It prints a line every 30 s (requests by kind, failures among good requests, server RSS,
// /health latency) and the RSS after warm-up (60 s) against the RSS at the end.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "../support/raw_client.h"
#include "server_harness.h"

namespace ds {
namespace {

using namespace testing;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

long rss_kb(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;
}

std::string raw_post(const std::string& path, const std::string& body, const std::string& extra = {}) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + extra +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

TEST(Soak, SixtyFourClientsWithCancellationsAndBadRequests) {
  const int seconds = std::getenv("DS_SOAK_SECONDS") ? std::atoi(std::getenv("DS_SOAK_SECONDS")) : 600;
  const std::string model = std::getenv("DS_BENCH_MODEL") ? std::getenv("DS_BENCH_MODEL")
                                                          : std::string(DS_SOURCE_DIR) + "/tests/data/models/tiny-hybrid-f32";
  const int port = free_port();
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string ps = std::to_string(port);
    execl(DS_CLI, DS_CLI, "serve", "--model", model.c_str(), "--port", ps.c_str(), "--max-num-seqs", "64",
          "--max-num-batched-tokens", "1024", "--max-model-len", "512", "--max-body-mb", "1",
          "--http-request-timeout-s", "5", (char*)nullptr);
    _exit(127);
  }
  bool up = false;
  for (int i = 0; i < 600 && !up; ++i) {
    up = http_call(port, "GET", "/health").status == 200;
    if (!up) std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(up);

  enum Kind { Good, Cancel, HangUpNonStreamed, Trickle, BadJson, BadField, Oversized, ChunkedOversized, Garbage, kKinds };
  const char* names[kKinds] = {"good", "cancel", "hangup", "trickle", "badjson", "badfield", "oversized", "chunked413", "garbage"};
  std::atomic<long> count[kKinds] = {};
  std::atomic<long> failures{0}, good_tokens{0};
  std::mutex mu;
  std::map<int, std::string> reference;  // prompt -> the first greedy answer seen
  std::string first_failure;
  auto fail = [&](const std::string& what) {
    failures.fetch_add(1);
    std::lock_guard<std::mutex> lk(mu);
    if (first_failure.empty()) first_failure = what;
  };

  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::seconds(seconds);
  std::vector<std::thread> clients;
  for (int t = 0; t < 64; ++t)
    clients.emplace_back([&, t] {
      uint64_t rng = 0x9e3779b97f4a7c15ull * uint64_t(t + 1);
      auto next = [&] {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return rng;
      };
      while (Clock::now() < deadline) {
        const uint64_t r = next() % 100;
        // 70% good streams; the rest spread over the bad kinds.
        const Kind k = r < 70 ? Good : Kind(1 + int(r % (kKinds - 1)));
        const int prompt = int(next() % 32);
        json body = {{"messages", json::array({{{"role", "user"}, {"content", "soak prompt " + std::to_string(prompt)}}})},
                     {"max_tokens", 16 + prompt}, {"temperature", 0}, {"ignore_eos", true}};
        count[k].fetch_add(1);
        switch (k) {
          case Good: {
            SseResult s = stream(port, "/v1/chat/completions", body);
            if (s.status != 200 || !s.done || s.finish_reason != "length") {
              fail("good stream: status " + std::to_string(s.status) + " " + s.error + " " + s.raw.substr(0, 200));
              break;
            }
            good_tokens.fetch_add(16 + prompt);
            std::lock_guard<std::mutex> lk(mu);
            auto [it, fresh] = reference.emplace(prompt, s.content);
            if (!fresh && it->second != s.content) fail("greedy answer changed for prompt " + std::to_string(prompt));
            break;
          }
          case Cancel:
            stream(port, "/v1/chat/completions", body, 2);
            break;
          case HangUpNonStreamed: {
            RawClient c(port);
            c.send(raw_post("/v1/chat/completions", body.dump()));
            std::this_thread::sleep_for(std::chrono::milliseconds(next() % 20));
            break;
          }
          case Trickle: {
            RawClient c(port);
            c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-");
            // Half the tricklers outwait the server's 5 s request deadline and must get 408.
            if (next() % 2) {
              if (c.read_until("\r\n\r\n", 8000).rfind("HTTP/1.1 408 ", 0) != 0) fail("trickler not closed with 408");
            } else {
              std::this_thread::sleep_for(std::chrono::milliseconds(next() % 200));
            }
            break;
          }
          case BadJson: {
            auto res = http_call(port, "POST", "/v1/chat/completions", "{\"messages\": [", {});
            if (res.status != 400) fail("bad json got " + std::to_string(res.status));
            break;
          }
          case BadField: {
            body["max_tokens"] = "many";
            auto res = post(port, "/v1/chat/completions", body);
            if (res.status != 400) fail("bad field got " + std::to_string(res.status));
            break;
          }
          case Oversized: {
            RawClient c(port);
            c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   "Content-Length: 50000000\r\n\r\n");
            if (c.read_until("\r\n\r\n").rfind("HTTP/1.1 413 ", 0) != 0) fail("declared oversize not 413");
            break;
          }
          case ChunkedOversized: {
            RawClient c(port);
            c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n");
            const std::string piece = "10000\r\n" + std::string(0x10000, ' ') + "\r\n";
            for (int i = 0; i < 64 && !c.readable(0); ++i)
              if (!c.send(piece)) break;
            if (c.read_until("\r\n\r\n").rfind("HTTP/1.1 413 ", 0) != 0) fail("chunked oversize not 413");
            break;
          }
          case Garbage: {
            RawClient c(port);
            c.send("\x16\x03\x01 not http at all\r\n\r\n");
            c.wait_closed(2000);
            break;
          }
          default:
            break;
        }
      }
    });

  long rss_warm = -1, rss_peak = 0;
  int next_report = 30;
  std::vector<double> health_ms;
  while (Clock::now() < deadline) {
    std::this_thread::sleep_for(1s);
    const auto h0 = Clock::now();
    const int st = http_call(port, "GET", "/health").status;
    health_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - h0).count());
    if (st != 200) fail("/health " + std::to_string(st));
    const long rss = rss_kb(pid);
    rss_peak = std::max(rss_peak, rss);
    const int el = int(std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - t0).count());
    if (rss_warm < 0 && el >= std::min(60, seconds / 2)) rss_warm = rss;
    if (el >= next_report) {
      next_report += 30;
      std::string line;
      for (int k = 0; k < kKinds; ++k) line += std::string(names[k]) + " " + std::to_string(count[k].load()) + "  ";
      std::printf("%4d s: %s| failures %ld | server RSS %.1f MiB | /health %.1f ms\n", el, line.c_str(),
                  failures.load(), rss / 1024.0, health_ms.back());
      std::fflush(stdout);
    }
  }
  for (auto& c : clients) c.join();
  const long rss_end = rss_kb(pid);
  std::sort(health_ms.begin(), health_ms.end());
  long total = 0;
  for (auto& c : count) total += c.load();
  std::printf("soak %d s: %ld requests (%ld good, %ld good tokens), %ld failures among good requests and checks\n", seconds,
              total, count[Good].load(), good_tokens.load(), failures.load());
  std::printf("server RSS: %.1f MiB after warm-up, %.1f MiB at the end, %.1f MiB peak; /health p50 %.1f ms, max %.1f ms\n",
              rss_warm / 1024.0, rss_end / 1024.0, rss_peak / 1024.0, health_ms[health_ms.size() / 2], health_ms.back());
  if (!first_failure.empty()) std::printf("first failure: %s\n", first_failure.c_str());
  EXPECT_EQ(failures.load(), 0);
  kill(pid, SIGTERM);
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

// The hostile review's slow-client attack as it was run: 600 connections each trickling one
// header byte every 8 s at `deltaserve serve` with its default limits. Before, /health stopped
// answering for over a minute; it must answer every probe, and each trickler must get 408 at
// the request deadline (30 s). Run: build/bench/server/server_bench --gtest_filter='Soak.SixHundred*'
TEST(Soak, SixHundredTricklersAgainstTheDefaultLimits) {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, 4096);
  setrlimit(RLIMIT_NOFILE, &rl);
  const std::string model = std::string(DS_SOURCE_DIR) + "/tests/data/models/tiny-hybrid-f32";
  const int port = free_port();
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string ps = std::to_string(port);
    execl(DS_CLI, DS_CLI, "serve", "--model", model.c_str(), "--port", ps.c_str(), (char*)nullptr);
    _exit(127);
  }
  bool up = false;
  for (int i = 0; i < 600 && !up; ++i) {
    up = http_call(port, "GET", "/health").status == 200;
    if (!up) std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(up);
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < 600; ++i) {
    slow.push_back(std::make_unique<RawClient>(port));
    ASSERT_TRUE(slow.back()->connected()) << i;
  }
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + std::string(100, 'a');
  const auto t0 = Clock::now();
  int probes = 0, ok = 0, byte = 0;
  double worst = 0;
  auto next_byte = t0;
  while (Clock::now() - t0 < 40s) {
    if (Clock::now() >= next_byte) {
      for (auto& c : slow) c->send(std::string(1, req[size_t(byte)]));
      ++byte;
      next_byte += 8s;
    }
    const auto h0 = Clock::now();
    ok += http_call(port, "GET", "/health").status == 200;
    ++probes;
    worst = std::max(worst, std::chrono::duration<double, std::milli>(Clock::now() - h0).count());
    std::this_thread::sleep_for(500ms);
  }
  int got408 = 0;
  for (auto& c : slow) got408 += c->read_until("\r\n\r\n", 1000).rfind("HTTP/1.1 408 ", 0) == 0;
  std::printf("600 tricklers, 1 byte / 8 s, 40 s: /health %d of %d probes answered (worst %.1f ms); %d tricklers got 408\n",
              ok, probes, worst, got408);
  EXPECT_EQ(ok, probes);
  EXPECT_EQ(got408, 600);
  kill(pid, SIGTERM);
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

}  // namespace
}  // namespace ds
