// The HTTP transport's own cost: the in-process server on a FakeModel (whose forward is nearly
// free), so what is measured is request parsing, SSE framing and writing, and the threads
// between the engine and the sockets. A benchmark, not a test: not in ctest. Run:
//   [DS_BENCH_CONCURRENCY=1,16,64] [DS_BENCH_NEW=4000] build/bench/server/server_bench --gtest_filter='Transport*'
// It prints, per concurrency, streamed tokens per second (over the whole run: first request
// sent to last event read), and the p50 / max latency of GET /health probes sent meanwhile; then
// small non-streamed requests per second over keep-alive connections.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "server_harness.h"

namespace ds {
namespace {

using namespace testing;
using SteadyClock = std::chrono::steady_clock;

std::vector<int> env_list(const char* name, const char* dflt) {
  std::vector<int> out;
  std::stringstream ss(std::getenv(name) ? std::getenv(name) : dflt);
  std::string x;
  while (std::getline(ss, x, ',')) out.push_back(std::atoi(x.c_str()));
  return out;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

TEST(TransportBenchmark, StreamedTokensAndHealthLatency) {
  const std::vector<int> conc = env_list("DS_BENCH_CONCURRENCY", "1,16,64");
  const int nnew = std::getenv("DS_BENCH_NEW") ? std::atoi(std::getenv("DS_BENCH_NEW")) : 4000;
  EngineConfig cfg = TestServer::default_config();
  cfg.max_num_seqs = *std::max_element(conc.begin(), conc.end());
  cfg.max_num_batched_tokens = 4096;
  cfg.max_model_len = nnew + 64;
  cfg.num_kv_blocks = (cfg.max_model_len / cfg.block_size + 2) * cfg.max_num_seqs;
  auto opts = TestServer::default_options();
  TestServer s(cfg, opts);
  for (int c : conc) {
    std::vector<SseResult> res(static_cast<size_t>(c));
    std::atomic<bool> streaming{true};
    std::vector<double> health_ms;
    std::thread prober([&] {
      while (streaming.load()) {
        const auto t0 = SteadyClock::now();
        const int st = http_call(s.port, "GET", "/health").status;
        health_ms.push_back(std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count());
        EXPECT_EQ(st, 200);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    const auto t0 = SteadyClock::now();
    std::vector<std::thread> th;
    for (int i = 0; i < c; ++i)
      th.emplace_back([&, i] {
        res[size_t(i)] = stream(s.port, "/v1/completions",
                                {{"prompt", "Hello world " + std::to_string(i)}, {"max_tokens", nnew},
                                 {"temperature", 0}, {"ignore_eos", true}});
      });
    for (auto& t : th) t.join();
    const double secs = std::chrono::duration<double>(SteadyClock::now() - t0).count();
    streaming.store(false);
    prober.join();
    long events = 0;
    for (auto& r : res) {
      ASSERT_EQ(r.status, 200) << r.error;
      ASSERT_TRUE(r.done);
      events += long(r.events.size());
    }
    const double tokens = double(c) * nnew;
    std::printf("concurrency %3d: %9.0f streamed tok/s, %8.0f events/s, %.2f s; /health p50 %.2f ms max %.2f ms (%zu probes)\n",
                c, tokens / secs, double(events) / secs, secs, percentile(health_ms, 0.5), percentile(health_ms, 1.0),
                health_ms.size());
    std::fflush(stdout);
  }
  // Small requests: 8 clients, each on one keep-alive connection.
  const int clients = 8, per = 400;
  const auto t0 = SteadyClock::now();
  std::vector<std::thread> th;
  std::atomic<int> ok{0};
  for (int i = 0; i < clients; ++i)
    th.emplace_back([&] {
      httplib::Client cli("127.0.0.1", s.port);
      cli.set_keep_alive(true);
      cli.set_tcp_nodelay(true);  // else the client's header and body writes meet delayed ACKs
      for (int k = 0; k < per; ++k) {
        auto r = cli.Post("/tokenize", R"({"prompt":"The quick brown fox jumps over the lazy dog."})", "application/json");
        if (r && r->status == 200) ok.fetch_add(1);
      }
    });
  for (auto& t : th) t.join();
  const double secs = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  EXPECT_EQ(ok.load(), clients * per);
  std::printf("keep-alive /tokenize: %.0f requests/s (%d clients x %d)\n", clients * per / secs, clients, per);
}

}  // namespace
}  // namespace ds
