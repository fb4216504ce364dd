// What the API layer costs, per API: the in-process server on a FakeModel (whose forward is
// nearly free), so the figures are the translation into the internal request, the prompt's
// template and tokenization, and the encoding of the response. A benchmark, not a test: not in
// ctest. Run:
//   [DS_BENCH_REQUESTS=400] [DS_BENCH_TOKENS=2000] build/bench/server/server_bench --gtest_filter='ApiTranslation*'
// Prints, for /v1/chat/completions, /v1/messages and /v1/responses on the same conversation (a
// system prompt, 12 tools, a few turns): non-streamed requests per second with max_tokens 1 and
// the ratio to chat completions; then, streaming DS_BENCH_TOKENS tokens, the microseconds each
// streamed token costs over the same request not streamed (the events' share of a decode step is
// that over the step time of a real model, which the note measures beside it).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <string>

#include "server/anthropic/messages_response.h"
#include "server/generation.h"
#include "server/generation_run.h"
#include "server/responses/responses_response.h"
#include "server_harness.h"

namespace ds {
namespace {

using namespace testing;
using SteadyClock = std::chrono::steady_clock;

int env_int(const char* name, int dflt) { return std::getenv(name) ? std::atoi(std::getenv(name)) : dflt; }

json tool_schema(int i) {
  return {{"type", "object"},
          {"properties",
           {{"path", {{"type", "string"}, {"description", "file " + std::to_string(i)}}},
            {"limit", {{"type", "integer"}}},
            {"mode", {{"enum", json::array({"read", "write"})}}}}},
          {"required", json::array({"path"})}};
}

const std::string kSystem = [] {
  std::string s;
  for (int i = 0; i < 8; ++i) s += "You are a careful coding agent; read before you write. ";
  return s;
}();

// The same conversation in each API's shape.
json chat_body(int max_tokens) {
  json tools = json::array();
  for (int i = 0; i < 12; ++i)
    tools.push_back({{"type", "function"},
                     {"function", {{"name", "tool_" + std::to_string(i)}, {"description", "does thing " + std::to_string(i)},
                                   {"parameters", tool_schema(i)}}}});
  return {{"model", "fake"},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"ignore_eos", true},
          {"tools", tools},
          {"messages", json::array({{{"role", "system"}, {"content", kSystem}},
                                    {{"role", "user"}, {"content", "List the files."}},
                                    {{"role", "assistant"}, {"content", "Looking."}},
                                    {{"role", "user"}, {"content", "Now read the first one."}}})}};
}

json messages_body(int max_tokens) {
  json tools = json::array();
  for (int i = 0; i < 12; ++i)
    tools.push_back({{"name", "tool_" + std::to_string(i)}, {"description", "does thing " + std::to_string(i)},
                     {"input_schema", tool_schema(i)}});
  return {{"model", "fake"},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"system", kSystem},
          {"tools", tools},
          {"messages", json::array({{{"role", "user"}, {"content", "List the files."}},
                                    {{"role", "assistant"}, {"content", "Looking."}},
                                    {{"role", "user"}, {"content", "Now read the first one."}}})}};
}

json responses_body(int max_tokens) {
  json tools = json::array();
  for (int i = 0; i < 12; ++i)
    tools.push_back({{"type", "function"}, {"name", "tool_" + std::to_string(i)},
                     {"description", "does thing " + std::to_string(i)}, {"parameters", tool_schema(i)}});
  return {{"model", "fake"},
          {"max_output_tokens", max_tokens},
          {"temperature", 0},
          {"instructions", kSystem},
          {"tools", tools},
          {"store", false},
          {"input", json::array({{{"role", "user"}, {"content", "List the files."}},
                                 {{"role", "assistant"}, {"content", "Looking."}},
                                 {{"role", "user"}, {"content", "Now read the first one."}}})}};
}

struct Api {
  const char* path;
  json (*body)(int);
};

const Api kApis[] = {{"/v1/chat/completions", chat_body}, {"/v1/messages", messages_body}, {"/v1/responses", responses_body}};

double seconds_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

TEST(ApiTranslationBenchmark, RequestsPerSecondAndStreamedTokenCost) {
  const int n = env_int("DS_BENCH_REQUESTS", 400);
  const int tokens = env_int("DS_BENCH_TOKENS", 2000);
  EngineConfig cfg = TestServer::default_config();
  cfg.max_model_len = tokens + 8192;
  cfg.num_kv_blocks = (cfg.max_model_len / cfg.block_size + 2) * 4;
  cfg.prefix.enabled = false;  // every request builds and prefills its whole prompt
  TestServer s(cfg);
  httplib::Client cli("127.0.0.1", s.port);
  cli.set_keep_alive(true);
  cli.set_tcp_nodelay(true);  // else the client's header and body writes meet delayed ACKs
  cli.set_read_timeout(600, 0);

  for (const bool shortened : {false, true}) {
  double chat_rps = 0;
  std::printf("%-22s %8s %12s %10s   (%s)\n", "api", "prompt", "requests/s", "vs chat",
              shortened ? "one short user turn, no tools" : "system prompt, 12 tools, 3 turns");
  for (const Api& api : kApis) {
    json full = api.body(1);
    if (shortened) {
      full.erase("tools");
      full.erase("system");
      full.erase("instructions");
      const json turn = {{"role", "user"}, {"content", "Read the first file."}};
      full[full.contains("input") ? "input" : "messages"] = json::array({turn});
    }
    const std::string body = full.dump();
    auto probe = cli.Post(api.path, body, "application/json");
    if (!probe || probe->status != 200) {
      std::printf("%-22s (not served: %d %s)\n", api.path, probe ? probe->status : -1,
                  probe ? probe->body.substr(0, 200).c_str() : "");
      continue;
    }
    const json usage = json::parse(probe->body)["usage"];
    const int prompt = usage.contains("prompt_tokens") ? usage["prompt_tokens"].get<int>()
                       : usage.contains("input_tokens") && usage.contains("cache_read_input_tokens")
                           ? usage["input_tokens"].get<int>() + usage["cache_read_input_tokens"].get<int>() +
                                 usage["cache_creation_input_tokens"].get<int>()
                           : usage.value("input_tokens", 0);
    const auto t0 = SteadyClock::now();
    for (int i = 0; i < n; ++i) {
      auto r = cli.Post(api.path, body, "application/json");
      ASSERT_TRUE(r && r->status == 200);
    }
    const double rps = n / seconds_since(t0);
    if (chat_rps == 0) chat_rps = rps;
    std::printf("%-22s %8d %12.1f %10.3f\n", api.path, prompt, rps, rps / chat_rps);
  }
  }

  std::printf("\n%-22s %10s %14s %16s\n", "api", "tokens", "whole tok/s", "stream us/token");
  for (const Api& api : kApis) {
    json whole = api.body(tokens);
    json streamed = whole;
    streamed["stream"] = true;
    if (std::string(api.path) == "/v1/chat/completions") {
      whole["tools"] = streamed["tools"] = nullptr;  // plain text: the events, not the tool parser
    } else {
      whole.erase("tools");
      streamed.erase("tools");
    }
    auto probe = cli.Post(api.path, whole.dump(), "application/json");
    if (!probe || probe->status != 200) continue;
    // The best of five of each, alternating, so a stray pause on this shared machine does not
    // decide the difference.
    double t_whole = 1e9, t_stream = 1e9;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = SteadyClock::now();
      auto a = cli.Post(api.path, whole.dump(), "application/json");
      t_whole = std::min(t_whole, seconds_since(t0));
      ASSERT_TRUE(a && a->status == 200);
      const auto t1 = SteadyClock::now();
      auto b = cli.Post(api.path, streamed.dump(), "application/json");
      t_stream = std::min(t_stream, seconds_since(t1));
      ASSERT_TRUE(b && b->status == 200);
    }
    const json u = json::parse(probe->body)["usage"];
    const int made = u.contains("completion_tokens") ? u["completion_tokens"].get<int>() : u["output_tokens"].get<int>();
    std::printf("%-22s %10d %14.0f %16.2f\n", api.path, made, made / t_whole, 1e6 * (t_stream - t_whole) / made);
  }
}

// Each API's stream encoder alone, one token's step at a time: what streaming a token costs the
// handler thread in each API, beside a decode step of a real model.
TEST(ApiTranslationBenchmark, StreamEncoderCostPerToken) {
  const int steps = env_int("DS_BENCH_STEPS", 200000);
  TestServer s;
  server::GenerationRequest g;
  g.chat = true;
  g.messages = {{"user", "hi"}};
  g.max_tokens = 1;
  auto run = server::start_generation(s.http->context(), g);
  server::GenerationStep step;
  step.content = " word";
  step.tokens = 1;
  auto meta = std::make_shared<server::ResponsesMeta>();
  meta->id = server::new_response_id();
  meta->model = "fake";
  meta->store = false;
  struct Named {
    const char* api;
    std::unique_ptr<server::StreamEncoder> enc;
  };
  std::vector<Named> encoders;
  encoders.push_back({"chat", server::openai_stream_encoder(run, server::new_response_meta(true, "fake", false))});
  encoders.push_back({"messages", server::messages_stream_encoder(run, server::new_message_id())});
  encoders.push_back({"responses", server::responses_stream_encoder(run, meta, s.http->context().responses)});
  std::printf("%-10s %12s %12s\n", "api", "ns/token", "bytes/token");
  for (Named& e : encoders) {
    size_t bytes = e.enc->open().size();
    bytes = 0;
    const auto t0 = SteadyClock::now();
    for (int i = 0; i < steps; ++i) bytes += e.enc->step(step).size();
    const double ns = 1e9 * seconds_since(t0) / steps;
    std::printf("%-10s %12.0f %12.1f\n", e.api, ns, double(bytes) / steps);
  }
}

}  // namespace
}  // namespace ds
