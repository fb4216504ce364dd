// Aggregate decode throughput of `deltaserve serve` at several concurrencies (the issue's
// benchmark: greedy, 512-token prompts, 256 new tokens). A benchmark, not a test: not in ctest;
// it prints figures and ratios. Run:
//   DS_BENCH_MODEL=/path/to/model [DS_BENCH_CONCURRENCY=1,4,16,64] [DS_BENCH_PROMPT=512]
//   [DS_BENCH_NEW=256] [DS_BENCH_THREADS=0] [DS_BENCH_PROFILE_STEPS=N] [DS_BENCH_HTTP_SCHED=batch|normal]
//   [DS_BENCH_KV_DTYPE=f32|bf16|fp8] [DS_BENCH_ACTIVATION_DTYPE=f32|bf16] build/bench/server/server_bench
// Steady-state decode tok/s at concurrency c counts the tokens that arrive while all c streams
// are decoding (after the last first token, before the first stream ends), over that window.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <thread>

#include "server_harness.h"

namespace ds {
namespace {

using namespace testing;
using SteadyClock = std::chrono::steady_clock;

struct Timed {
  std::vector<SteadyClock::time_point> token_times;
  int status = 0;
};

// Streams one completion, recording when each token's chunk arrived (one token per chunk at
// most when logprobs are on: each chunk carries its tokens' logprobs, so we count those).
Timed timed_stream(int port, const std::vector<int>& prompt, int n) {
  json body = {{"model", "bench"}, {"prompt", prompt}, {"max_tokens", n}, {"temperature", 0},
               {"ignore_eos", true}, {"stream", true}, {"logprobs", 0}};
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(3600, 0);
  Timed out;
  std::string buf;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* d, size_t len, uint64_t, uint64_t) {
    buf.append(d, len);
    size_t pos;
    while ((pos = buf.find("\n\n")) != std::string::npos) {
      std::string ev = buf.substr(0, pos);
      buf.erase(0, pos + 2);
      if (ev.rfind("data: {", 0) != 0) continue;
      json j = json::parse(ev.substr(6), nullptr, false);
      if (!j.contains("choices") || j["choices"].empty()) continue;
      const json& lp = j["choices"][0]["logprobs"];
      if (lp.is_object())
        for (size_t k = 0; k < lp["tokens"].size(); ++k) out.token_times.push_back(SteadyClock::now());
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  cli.send(req, res, err);
  out.status = res.status;
  return out;
}

TEST(ServeBenchmark, DecodeThroughput) {
  const char* model = std::getenv("DS_BENCH_MODEL");
  if (!model) GTEST_SKIP() << "set DS_BENCH_MODEL to a model directory";
  std::vector<int> conc;
  {
    std::stringstream ss(std::getenv("DS_BENCH_CONCURRENCY") ? std::getenv("DS_BENCH_CONCURRENCY") : "1,4,16,64");
    std::string x;
    while (std::getline(ss, x, ',')) conc.push_back(std::atoi(x.c_str()));
  }
  const int plen = std::getenv("DS_BENCH_PROMPT") ? std::atoi(std::getenv("DS_BENCH_PROMPT")) : 512;
  const int nnew = std::getenv("DS_BENCH_NEW") ? std::atoi(std::getenv("DS_BENCH_NEW")) : 256;
  const std::string threads = std::getenv("DS_BENCH_THREADS") ? std::getenv("DS_BENCH_THREADS") : "0";
  const int maxc = *std::max_element(conc.begin(), conc.end());
  const int port = free_port();
  pid_t pid = fork();
  if (pid == 0) {
    const std::string ps = std::to_string(port), ms = std::to_string(maxc);
    // DS_BENCH_PROFILE_STEPS=N: the server logs its step profile every N steps (engine/step_profile.h).
    const std::string prof = std::getenv("DS_BENCH_PROFILE_STEPS") ? std::getenv("DS_BENCH_PROFILE_STEPS") : "0";
    // DS_BENCH_HTTP_SCHED=batch|normal: the HTTP threads' policy (serve --http-sched), for A/B runs.
    const std::string sched = std::getenv("DS_BENCH_HTTP_SCHED") ? std::getenv("DS_BENCH_HTTP_SCHED") : "normal";
    // DS_BENCH_KV_DTYPE=f32|bf16|fp8: the KV cache's element type (serve --kv-cache-dtype).
    const std::string kv = std::getenv("DS_BENCH_KV_DTYPE") ? std::getenv("DS_BENCH_KV_DTYPE") : "f32";
    // DS_BENCH_ACTIVATION_DTYPE=f32|bf16: how activations meet bf16 weights (serve --activation-dtype).
    const std::string act = std::getenv("DS_BENCH_ACTIVATION_DTYPE") ? std::getenv("DS_BENCH_ACTIVATION_DTYPE") : "f32";
    execl(DS_CLI, DS_CLI, "serve", "--model", model, "--served-model-name", "bench", "--port", ps.c_str(),
          "--max-num-seqs", ms.c_str(), "--max-num-batched-tokens", "2048", "--max-model-len",
          std::to_string(plen + nnew + 8).c_str(), "--threads", threads.c_str(), "--profile-steps", prof.c_str(),
          "--http-sched", sched.c_str(), "--kv-cache-dtype", kv.c_str(), "--activation-dtype", act.c_str(), (char*)nullptr);
    _exit(127);
  }
  bool up = false;
  for (int i = 0; i < 6000 && !up; ++i) {
    up = http_call(port, "GET", "/health").status == 200;
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(up);
  double base = 0;
  for (int c : conc) {
    std::vector<std::thread> th;
    std::vector<Timed> res(static_cast<size_t>(c));
    for (int i = 0; i < c; ++i)
      th.emplace_back([&, i] {
        std::vector<int> prompt;
        for (int k = 0; k < plen; ++k) prompt.push_back(1 + (i * 7919 + k * 131) % 400);
        res[size_t(i)] = timed_stream(port, prompt, nnew);
      });
    for (auto& t : th) t.join();
    SteadyClock::time_point last_first{}, first_end = SteadyClock::time_point::max();
    SteadyClock::time_point t0 = SteadyClock::time_point::max(), t1{};
    long total = 0;
    for (auto& r : res) {
      ASSERT_EQ(r.status, 200);
      ASSERT_EQ(int(r.token_times.size()), nnew);
      last_first = std::max(last_first, r.token_times.front());
      first_end = std::min(first_end, r.token_times.back());
      t0 = std::min(t0, r.token_times.front());
      t1 = std::max(t1, r.token_times.back());
      total += nnew - 1;
    }
    long steady = 0;
    for (auto& r : res)
      for (auto& t : r.token_times) steady += (t > last_first && t <= first_end);
    const double window = std::chrono::duration<double>(first_end - last_first).count();
    const double steady_tps = window > 0 ? steady / window : 0;
    const double overall = total / std::chrono::duration<double>(t1 - t0).count();
    if (c == conc.front()) base = steady_tps;
    std::printf("concurrency %3d: steady decode %8.1f tok/s (%.2fx of c=%d), decode overall %8.1f tok/s\n", c,
                steady_tps, base > 0 ? steady_tps / base : 0, conc.front(), overall);
    std::fflush(stdout);
  }
  kill(pid, SIGTERM);
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

}  // namespace
}  // namespace ds
