// Bounded load: 64 concurrent streaming clients against the in-process server (FakeModel) for
// 10 s (DS_LOAD_SECONDS=N to change, DS_LOAD_FULL=1 for the 60 s). Every response must
// be complete and exact; the test reports throughput and resident memory, and asserts no
// timings.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "server_harness.h"

namespace ds {
namespace {

using namespace testing;

long status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::atol(line.c_str() + std::strlen(key));
  return -1;
}

int load_seconds() {
  if (const char* full = std::getenv("DS_LOAD_FULL"); full && std::string(full) == "1") return 60;
  if (const char* s = std::getenv("DS_LOAD_SECONDS")) return std::max(1, std::atoi(s));
  return 10;
}

TEST(Load, SixtyFourConcurrentStreamingClients) {
  EngineConfig c = TestServer::default_config();
  c.max_num_seqs = 64;
  c.max_num_batched_tokens = 2048;
  c.num_kv_blocks = 1024;
  server::ServerOptions o = TestServer::default_options();
  o.http_threads = 256;
  TestServer s(c, o);
  s.model->step_delay_us = 500;  // a step costs something, as a real one would
  const int seconds = load_seconds();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  std::atomic<int> requests{0}, failures{0};
  std::atomic<long> tokens{0};
  std::mutex mu;
  std::string first_failure;
  std::vector<std::thread> clients;
  const long rss_before = status_kb("VmRSS:");
  for (int t = 0; t < 64; ++t) {
    clients.emplace_back([&, t] {
      for (int k = 0; std::chrono::steady_clock::now() < deadline; ++k) {
        const std::string user = "load client " + std::to_string(t) + " turn " + std::to_string(k);
        const int n = 8 + (t * 31 + k * 17) % 57;
        json body = {{"model", "fake"}, {"messages", json::array({{{"role", "user"}, {"content", user}}})},
                     {"max_tokens", n}, {"temperature", 0}, {"ignore_eos", true},
                     {"stream_options", {{"include_usage", true}}}};
        SseResult r = stream(s.port, "/v1/chat/completions", body);
        ++requests;
        const bool ok = r.status == 200 && r.done && r.finish_reason == "length" && !r.usage.is_null() &&
                        r.usage["completion_tokens"] == n &&
                        r.content == expected_text(s.model->reference_generate(s.chat_ids({{"user", user}}), n));
        if (!ok) {
          ++failures;
          std::lock_guard<std::mutex> lock(mu);
          if (first_failure.empty())
            first_failure = std::to_string(r.status) + " " + r.error + " " + r.raw.substr(0, 300);
        } else {
          tokens += n;
        }
      }
    });
  }
  for (auto& th : clients) th.join();
  const long rss_after = status_kb("VmRSS:");
  std::printf("load: %d s, 64 clients, %d requests, %ld tokens (%.0f tok/s), %d failures, "
              "RSS %ld -> %ld MiB (peak %ld MiB), %d engine steps\n",
              seconds, requests.load(), tokens.load(), double(tokens.load()) / seconds, failures.load(),
              rss_before / 1024, rss_after / 1024, status_kb("VmHWM:") / 1024, s.model->steps.load());
  EXPECT_EQ(failures.load(), 0) << first_failure;
  EXPECT_GT(requests.load(), 64);
  EXPECT_EQ(s.model->violations.load(), 0) << s.model->first_violation;
  for (int i = 0; i < 200 && s.engine->snapshot().kv_blocks_used != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(s.engine->snapshot().kv_blocks_used, 0);
}

}  // namespace
}  // namespace ds
