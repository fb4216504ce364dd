// The whole bench path against a stub OpenAI-compatible server inside the test: it streams SSE
// with known delays, so TTFT and ITL have known lower bounds. A loaded 2-core CI machine can
// stretch any delay without limit, so timings are only bounded below and checked for order;
// metrics_test.cpp holds the arithmetic itself to exact values.
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/bench.h"
#include "bench/results.h"
#include "core/error.h"
#include "../support/wait_until.h"

namespace ds::bench {
namespace {

using nlohmann::json;
constexpr double kTtft = 0.15;
constexpr double kItl = 0.04;

class StubServer {
 public:
  StubServer() {
    srv_.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok", "text/plain"); });
    srv_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"stub-model","max_model_len":4096,"vocab_size":1000}]})",
                      "application/json");
    });
    srv_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard lock(mu_);
      res.set_content("deltaserve:prefix_cache_hits_total " + std::to_string(hits_) +
                          "\ndeltaserve:prefix_cache_queries_total " + std::to_string(queries_) +
                          "\ndeltaserve:spec_acceptance_length 2.5\ndeltaserve:spec_synthetic_acceptance 1\n",
                      "text/plain");
    });
    srv_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      const json body = json::parse(req.body);
      const int64_t prompt = static_cast<int64_t>(body.at("prompt").size());
      const int64_t max_tokens = body.at("max_tokens").get<int64_t>();
      const int64_t cached = prompt / 4;
      {
        std::lock_guard lock(mu_);
        ++requests_;
        flags_ok_ = flags_ok_ && body.value("ignore_eos", false) && body.value("stream", false) &&
                    body["stream_options"].value("include_usage", false) && body["model"] == "stub-model";
        for (auto& t : body["prompt"]) in_range_ = in_range_ && t.get<int>() >= 62 && t.get<int>() < 938;
        hits_ += cached;
        queries_ += prompt;
      }
      auto sent = std::make_shared<int64_t>(0);
      res.set_chunked_content_provider("text/event-stream", [=](size_t, httplib::DataSink& sink) {
        std::this_thread::sleep_for(std::chrono::duration<double>(*sent == 0 ? kTtft : kItl));
        const std::string ev = json({{"choices", {{{"index", 0}, {"text", "x"}, {"finish_reason", nullptr}}}}}).dump();
        std::string out = "data: " + ev + "\n\n";
        if (++*sent == max_tokens) {
          out += "data: " + json({{"choices", {{{"index", 0}, {"text", ""}, {"finish_reason", "length"}}}}}).dump() + "\n\n";
          out += "data: " + json({{"choices", json::array()},
                                  {"usage", {{"prompt_tokens", prompt}, {"completion_tokens", max_tokens},
                                             {"prompt_tokens_details", {{"cached_tokens", cached}}}}}}).dump() + "\n\n";
          out += "data: [DONE]\n\n";
          sink.write(out.data(), out.size());
          sink.done();
        } else {
          sink.write(out.data(), out.size());
        }
        return true;
      });
    });
    port_ = srv_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { srv_.listen_after_bind(); });
    // A server that never comes up fails here instead of hanging the run.
    if (!ds::test::wait_until([this] { return srv_.is_running(); })) throw std::runtime_error("the stub server did not start");
  }
  ~StubServer() {
    srv_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }
  bool flags_ok() {
    std::lock_guard lock(mu_);
    return flags_ok_ && in_range_;
  }

 private:
  httplib::Server srv_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  int64_t hits_ = 0, queries_ = 0;
  int requests_ = 0;
  bool flags_ok_ = true, in_range_ = true;
};

json read(const std::filesystem::path& p) {
  std::ifstream f(p);
  return json::parse(f);
}

TEST(BenchAgainstStub, MetricsMatchTheStreamedTiming) {
  StubServer stub;
  const auto dir = std::filesystem::temp_directory_path() / ("ds-bench-stub-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  BenchOptions o;
  o.url = stub.url() + "/v1";
  o.synthetic = "agentic-code";
  SyntheticConfig& s = o.synthetic_cfg;
  s.sessions = 8;
  s.system_tokens = 64;
  s.repo_tokens = 32;
  s.session_tokens = 16;
  s.turn_input_tokens = 16;
  s.output_tokens = 6;
  s.think_s = 0.01;
  s.block_size = 16;
  o.concurrency = {1, 2};
  o.load.max_requests = 6;
  o.load.warmup_requests_per_lane = 1;
  o.load.duration_s = 60;
  o.progress_interval_s = 0;
  o.validity.min_observations = 3;
  o.ranks = 2;
  o.out_dir = dir.string();
  ASSERT_EQ(run_bench(o), 0);
  EXPECT_TRUE(stub.flags_ok());
  EXPECT_EQ(stub.requests(), 6 + 1 + 6 + 2);  // measured + one warm-up per lane, per point

  for (int conc : {1, 2}) {
    SCOPED_TRACE("concurrency " + std::to_string(conc));
    const auto point = dir / ("c" + std::to_string(conc));
    const json r = read(point / "results.json");
    EXPECT_EQ(r["schema"], kResultSchema);
    EXPECT_EQ(r["model"], "stub-model");
    EXPECT_EQ(r["config"]["concurrency"], conc);
    const json& m = r["metrics"];
    EXPECT_EQ(m["requests"]["completed"], 6);
    EXPECT_EQ(m["requests"]["failed"], 0);
    EXPECT_EQ(m["requests"]["warmup"], conc);
    EXPECT_EQ(m["requests"]["output_length_mismatch"], 0);
    const json& lat = m["latency_s"];
    // The stub sleeps its delays, so a measured gap can never be shorter than the delay (minus
    // clock granularity). A sleep may overshoot by any amount on a loaded machine, so there is
    // no upper bound; instead the figures must be ordered as their definitions make them.
    const double at_least = 0.003;
    for (const char* stat : {"mean", "p50"}) {
      EXPECT_GE(lat["ttft"][stat].get<double>(), kTtft - at_least) << stat;
      EXPECT_GE(lat["itl"][stat].get<double>(), kItl - at_least) << stat;
      // Every request's end to end time contains its TTFT, so every statistic of them does too.
      EXPECT_GE(lat["e2e"][stat].get<double>(), lat["ttft"][stat].get<double>()) << stat;
    }
    EXPECT_GE(lat["tpot"]["mean"].get<double>(), kItl - at_least);
    EXPECT_LE(lat["ttft"]["p50"].get<double>(), lat["ttft"]["p99"].get<double>());
    EXPECT_LE(lat["itl"]["p50"].get<double>(), lat["itl"]["p99"].get<double>());
    EXPECT_NEAR(m["interactivity_tok_s"]["p50"].get<double>(), 1 / lat["itl"]["p50"].get<double>(), 1e-9);
    const double out_tok_s = m["throughput"]["output_tok_s"].get<double>();
    EXPECT_NEAR(m["throughput"]["output_tok_s_per_rank"].get<double>(), out_tok_s / 2, 1e-9);
    EXPECT_NEAR(m["prefix_cache"]["served_hit_rate_usage"].get<double>(), 0.25, 0.01);
    EXPECT_NEAR(m["prefix_cache"]["served_hit_rate_metrics"]["value"].get<double>(), 0.25, 0.02);
    EXPECT_GT(m["prefix_cache"]["theoretical_hit_rate"].get<double>(), 0.3);
    EXPECT_DOUBLE_EQ(m["spec_acceptance_length"]["value"].get<double>(), 2.5);
    EXPECT_TRUE(r["server"]["synthetic_acceptance"].get<bool>());
    EXPECT_EQ(r["server"]["served_models"][0], "stub-model");
    EXPECT_EQ(r["server"]["vocab_size_used"], 1000);
    EXPECT_TRUE(r["validity"]["valid"].get<bool>()) << r["validity"].dump();

    // requests.jsonl: every request, each prompt exactly as long as recorded, E2E = TTFT + gaps.
    std::ifstream f(point / "requests.jsonl");
    std::string line;
    int lines = 0;
    while (std::getline(f, line)) {
      const json q = json::parse(line);
      ++lines;
      EXPECT_EQ(q["prompt_tokens"], q["input_tokens"]);
      EXPECT_EQ(q["completion_tokens"], q["max_tokens"]);
      const double expect_e2e = kTtft + kItl * (q["max_tokens"].get<double>() - 1);
      EXPECT_GE(q["e2e_s"].get<double>(), expect_e2e - 0.005);
      EXPECT_GE(q["ttft_s"].get<double>(), kTtft - 0.003);
      EXPECT_GE(q["e2e_s"].get<double>(), q["ttft_s"].get<double>());
    }
    EXPECT_EQ(lines, 6 + conc);
  }
  std::filesystem::remove_all(dir);
}

TEST(BenchAgainstStub, RefusesAServerThatIsNotThere) {
  BenchOptions o;
  o.url = "http://127.0.0.1:9";  // discard port: nothing listens
  o.synthetic = "agentic-code";
  o.progress_interval_s = 0;
  try {
    run_bench(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/v1/models"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ds::bench
