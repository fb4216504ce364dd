// The server over real HTTP on loopback, with the FakeModel behind the engine: response shapes,
// streaming, batch invariance, isolation of bad requests, cancellation, errors, auth, drain.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "server_harness.h"

namespace ds {
namespace {

using namespace testing;

json chat_body(const std::string& user, int max_tokens) {
  return {{"model", "fake"},
          {"messages", json::array({{{"role", "user"}, {"content", user}}})},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"ignore_eos", true}};
}

std::vector<int32_t> chat_reference(TestServer& s, const std::string& user, int n) {
  return s.model->reference_generate(s.chat_ids({{"user", user}}), n);
}

TEST(Server, ModelsHealthAndUnknownModel) {
  TestServer s;
  auto m = http_call(s.port, "GET", "/v1/models");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(m.body["object"], "list");
  ASSERT_EQ(m.body["data"].size(), 2u);
  EXPECT_EQ(m.body["data"][0]["id"], "fake");
  EXPECT_EQ(m.body["data"][1]["id"], "fake-alias");
  EXPECT_EQ(m.body["data"][0]["object"], "model");
  EXPECT_EQ(http_call(s.port, "GET", "/health").status, 200);
  auto bad = post(s.port, "/v1/chat/completions", [] {
    json b = chat_body("hi", 4);
    b["model"] = "nope";
    return b;
  }());
  EXPECT_EQ(bad.status, 404);
  EXPECT_EQ(bad.body["error"]["param"], "model");
  EXPECT_NE(bad.body["error"]["message"].get<std::string>().find("fake, fake-alias"), std::string::npos);
  auto alias = post(s.port, "/v1/chat/completions", [] {
    json b = chat_body("hi", 4);
    b["model"] = "fake-alias";
    return b;
  }());
  EXPECT_EQ(alias.status, 200);
  EXPECT_EQ(alias.body["model"], "fake-alias");
  EXPECT_EQ(http_call(s.port, "GET", "/v1/nothing").status, 404);
}

TEST(Server, ChatCompletionMatchesReference) {
  TestServer s;
  auto r = post(s.port, "/v1/chat/completions", chat_body("Hello, world!", 12));
  ASSERT_EQ(r.status, 200) << r.raw;
  const auto& b = r.body;
  EXPECT_EQ(b["object"], "chat.completion");
  EXPECT_EQ(b["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_TRUE(b["created"].is_number_integer());
  EXPECT_EQ(b["model"], "fake");
  ASSERT_EQ(b["choices"].size(), 1u);
  EXPECT_EQ(b["choices"][0]["index"], 0);
  EXPECT_EQ(b["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(b["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(b["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(b["choices"][0]["message"]["content"], expected_text(chat_reference(s, "Hello, world!", 12)));
  const int prompt = int(s.chat_ids({{"user", "Hello, world!"}}).size());
  EXPECT_EQ(b["usage"]["prompt_tokens"], prompt);
  EXPECT_EQ(b["usage"]["completion_tokens"], 12);
  EXPECT_EQ(b["usage"]["total_tokens"], prompt + 12);
}

TEST(Server, StreamedChatWithUsage) {
  TestServer s;
  json body = chat_body("Stream me", 10);
  body["stream_options"] = {{"include_usage", true}};
  auto r = stream(s.port, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200);
  ASSERT_TRUE(r.done);
  ASSERT_GE(r.events.size(), 3u);
  EXPECT_EQ(r.events.front()["object"], "chat.completion.chunk");
  EXPECT_EQ(r.events.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(r.events.front()["usage"].is_null());
  const std::string id = r.events.front()["id"];
  for (auto& e : r.events) EXPECT_EQ(e["id"], id);
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(r.content, expected_text(chat_reference(s, "Stream me", 10)));
  const json& last = r.events.back();
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"]["completion_tokens"], 10);
  EXPECT_EQ(last["usage"]["prompt_tokens"], int(s.chat_ids({{"user", "Stream me"}}).size()));
  // Without include_usage there is no usage chunk and no usage key.
  auto r2 = stream(s.port, "/v1/chat/completions", chat_body("Stream me", 3));
  EXPECT_TRUE(r2.usage.is_null());
  for (auto& e : r2.events) EXPECT_FALSE(e.contains("usage"));
}

TEST(Server, CompletionWithTokenIdPromptAndLogprobs) {
  TestServer s;
  std::vector<int32_t> prompt = {5, 17, 42, 99, 3};
  json body = {{"model", "fake"}, {"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0},
               {"ignore_eos", true}, {"logprobs", 2}};
  auto r = post(s.port, "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["object"], "text_completion");
  EXPECT_EQ(r.body["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  auto ref = s.model->reference_generate(prompt, 6);
  EXPECT_EQ(r.body["choices"][0]["text"], expected_text(ref));
  const json& lp = r.body["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 6u);
  ASSERT_EQ(lp["token_logprobs"].size(), 6u);
  ASSERT_EQ(lp["top_logprobs"].size(), 6u);
  ASSERT_EQ(lp["text_offset"].size(), 6u);
  EXPECT_LE(lp["top_logprobs"][0].size(), 2u);
  // Each token's logprob against a log-softmax of the fake model's logits computed here.
  std::vector<int32_t> history = prompt;
  for (size_t i = 0; i < 6; ++i) {
    const auto want = s.model->reference_logprobs(history);
    EXPECT_EQ(want[0].first, ref[i]);
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), want[0].second, 1e-5) << "token " << i;
    history.push_back(ref[i]);
  }
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], 5);
  // Nested single prompt form and the string form.
  body["prompt"] = json::array({prompt});
  EXPECT_EQ(post(s.port, "/v1/completions", body).body["choices"][0]["text"], expected_text(ref));
  body["prompt"] = "Hello";
  EXPECT_EQ(post(s.port, "/v1/completions", body).status, 200);
}

TEST(Server, UsageReportsCachedPromptTokensAndMetricsCountThem) {
  TestServer s;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 150; ++i) prompt.push_back(1 + (i * 37) % 300);
  json body = {{"model", "fake"}, {"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true}};
  auto first = post(s.port, "/v1/completions", body);
  ASSERT_EQ(first.status, 200) << first.raw;
  EXPECT_EQ(first.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  // The next turn: the same history and more. It resumes at the first prompt's last block end.
  for (int i = 0; i < 30; ++i) prompt.push_back(7 + i);
  body["prompt"] = prompt;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto second = stream(s.port, "/v1/completions", body);
  ASSERT_FALSE(second.usage.is_null());
  EXPECT_EQ(second.usage["prompt_tokens"], 180);
  EXPECT_EQ(second.usage["prompt_tokens_details"]["cached_tokens"], 128);
  EXPECT_EQ(second.content, expected_text(s.model->reference_generate(prompt, 4)));
  auto m = http_call(s.port, "GET", "/metrics");
  EXPECT_NE(m.raw.find("deltaserve:prefix_cache_queries_total 330\n"), std::string::npos) << m.raw.substr(0, 3000);
  EXPECT_NE(m.raw.find("deltaserve:prefix_cache_hits_total 128\n"), std::string::npos);
}

TEST(Server, ChatLogprobsShape) {
  TestServer s;
  json body = chat_body("hi", 3);
  body["logprobs"] = true;
  body["top_logprobs"] = 3;
  auto r = post(s.port, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.raw;
  const json& c = r.body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(c.size(), 3u);
  EXPECT_TRUE(c[0]["token"].is_string());
  EXPECT_TRUE(c[0]["logprob"].is_number());
  EXPECT_TRUE(c[0]["bytes"].is_array());
  EXPECT_EQ(c[0]["top_logprobs"].size(), 3u);
  // Against a log-softmax of the fake model's logits computed here: the chosen token's logprob
  // and the three most likely tokens, in order.
  std::vector<int32_t> history = s.chat_ids({{"user", "hi"}});
  for (size_t i = 0; i < 3; ++i) {
    const auto want = s.model->reference_logprobs(history);
    EXPECT_NEAR(c[i]["logprob"].get<double>(), want[0].second, 1e-5) << "token " << i;
    for (size_t k = 0; k < 3; ++k) {
      // Compared as bytes: a token that is part of a UTF-8 sequence is not valid text alone.
      std::vector<int> bytes;
      for (unsigned char ch : test_tokenizer().token_text(want[k].first)) bytes.push_back(ch);
      EXPECT_EQ(c[i]["top_logprobs"][k]["bytes"].get<std::vector<int>>(), bytes) << i << " top " << k;
      EXPECT_NEAR(c[i]["top_logprobs"][k]["logprob"].get<double>(), want[k].second, 1e-5) << i << " top " << k;
    }
    history.push_back(want[0].first);
  }
}

TEST(Server, StopStringCutsTextAndFinishesWithStop) {
  TestServer s;
  auto ref = chat_reference(s, "stop test", 40);
  const std::string full = expected_text(ref);
  // A stop string from the middle of the expected output (bytes 10..13), ASCII-safe or not.
  ASSERT_GT(full.size(), 20u);
  std::string stop = full.substr(10, 3);
  json body = chat_body("stop test", 40);
  body["stop"] = stop;
  auto r = post(s.port, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop");
  const std::string got = r.body["choices"][0]["message"]["content"];
  EXPECT_EQ(got, full.substr(0, full.find(stop)));
  EXPECT_LT(r.body["usage"]["completion_tokens"].get<int>(), 40);
  auto st = stream(s.port, "/v1/chat/completions", body);
  EXPECT_EQ(st.content, got);
  EXPECT_EQ(st.finish_reason, "stop");
}

TEST(Server, SixteenConcurrentGreedyStreamsEqualEachAlone) {
  TestServer s;
  const int n = 16;
  std::vector<std::string> alone(n);
  for (int i = 0; i < n; ++i) {
    auto r = stream(s.port, "/v1/chat/completions", chat_body("prompt number " + std::to_string(i * 7919), 24));
    alone[size_t(i)] = r.content;
    EXPECT_EQ(r.content, expected_text(chat_reference(s, "prompt number " + std::to_string(i * 7919), 24)));
  }
  std::vector<std::future<SseResult>> fs;
  for (int i = 0; i < n; ++i)
    fs.push_back(std::async(std::launch::async, [&, i] {
      return stream(s.port, "/v1/chat/completions", chat_body("prompt number " + std::to_string(i * 7919), 24));
    }));
  for (int i = 0; i < n; ++i) {
    auto r = fs[size_t(i)].get();
    EXPECT_EQ(r.content, alone[size_t(i)]) << "stream " << i;
    EXPECT_EQ(r.finish_reason, "length");
  }
  EXPECT_GT(s.model->max_rows_seen.load(), 1);
  EXPECT_EQ(s.model->violations.load(), 0) << s.model->first_violation;
}

TEST(Server, BadRequestAmongRunningStreamsChangesNothing) {
  TestServer s;
  s.model->step_delay_us = 1000;
  std::vector<std::future<SseResult>> fs;
  for (int i = 0; i < 8; ++i)
    fs.push_back(std::async(std::launch::async, [&, i] {
      return stream(s.port, "/v1/chat/completions", chat_body("isolated " + std::to_string(i), 40));
    }));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(http_call(s.port, "POST", "/v1/chat/completions", "{not json").status, 400);
  json bad = chat_body("x", 5);
  bad["temperature"] = -1;
  EXPECT_EQ(post(s.port, "/v1/chat/completions", bad).status, 400);
  bad = chat_body("x", 5);
  bad["messages"][0]["role"] = "wizard";
  EXPECT_EQ(post(s.port, "/v1/chat/completions", bad).status, 400);
  EXPECT_EQ(post(s.port, "/v1/completions", {{"prompt", {1, 2, 999999}}}).status, 400);
  for (int i = 0; i < 8; ++i) {
    auto r = fs[size_t(i)].get();
    EXPECT_EQ(r.content, expected_text(chat_reference(s, "isolated " + std::to_string(i), 40))) << i;
    EXPECT_EQ(r.finish_reason, "length");
  }
}

TEST(Server, TwoHundredCancelledStreamsReturnThePoolToZero) {
  TestServer s;
  s.model->step_delay_us = 300;
  std::vector<std::future<SseResult>> fs;
  int ok = 0;
  auto check = [&](SseResult r) {
    EXPECT_EQ(r.status, 200) << r.error << " " << r.raw.substr(0, 300);
    ok += r.status == 200;
  };
  for (int i = 0; i < 200; ++i) {
    fs.push_back(std::async(std::launch::async, [&, i] {
      return stream(s.port, "/v1/chat/completions", chat_body("cancel me " + std::to_string(i), 500), 1 + i % 5);
    }));
    if (fs.size() >= 32) {  // keep 32 clients at a time: bounded threads, same churn
      check(fs.front().get());
      fs.erase(fs.begin());
    }
  }
  for (auto& f : fs) check(f.get());
  EXPECT_EQ(ok, 200);
  for (int i = 0; i < 500 && (s.engine->snapshot().kv_blocks_used != 0 || s.engine->in_flight() != 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(s.engine->snapshot().kv_blocks_used, 0);
  EXPECT_EQ(s.engine->in_flight(), 0);
  auto m = http_call(s.port, "GET", "/metrics");
  EXPECT_NE(m.raw.find("deltaserve:kv_pool_usage_perc 0\n"), std::string::npos) << m.raw.substr(0, 2000);
  EXPECT_NE(m.raw.find("deltaserve:request_success_total{finish_reason=\"cancelled\"} 200"), std::string::npos)
      << m.raw.substr(m.raw.find("deltaserve:request_success_total"), 300);
  EXPECT_EQ(s.model->violations.load(), 0) << s.model->first_violation;
}

struct BadCase {
  std::string path;
  std::string body;
  int status;
  std::string param;
  std::string message_part;
};

TEST(Server, ErrorsNameTheFieldAndRange) {
  EngineConfig c = TestServer::default_config();
  c.max_model_len = 64;
  server::ServerOptions o = TestServer::default_options();
  o.max_body_bytes = 4096;
  TestServer s(c, o);
  const std::string chat = "/v1/chat/completions", cmpl = "/v1/completions";
  const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
  std::vector<BadCase> cases = {
      {chat, "{", 400, "", "not valid JSON"},
      {chat, "[1,2]", 400, "", "must be a JSON object"},
      {chat, R"({"model":"fake"})", 400, "messages", "'messages' is required"},
      {chat, R"({"messages":[]})", 400, "messages", "must not be empty"},
      {chat, R"({"messages":"hi"})", 400, "messages", "must be an array"},
      {chat, R"({"messages":[{"role":"wizard","content":"x"}]})", 400, "messages", "wizard"},
      {chat, "{" + msgs + R"(,"temperature":-0.5})", 400, "temperature", "'temperature' must be in [0, 2], got -0.5"},
      {chat, "{" + msgs + R"(,"temperature":"hot"})", 400, "temperature", "must be a number, got string"},
      {chat, "{" + msgs + R"(,"top_p":0})", 400, "top_p", "'top_p' must be in (0, 1], got 0"},
      {chat, "{" + msgs + R"(,"top_p":1.5})", 400, "top_p", "(0, 1]"},
      {chat, "{" + msgs + R"(,"max_tokens":0})", 400, "max_tokens", "'max_tokens' must be at least 1, got 0"},
      {chat, "{" + msgs + R"(,"max_completion_tokens":-3})", 400, "max_completion_tokens", "at least 1"},
      {chat, "{" + msgs + R"(,"max_tokens":1000})", 400, "max_tokens", "exceeds max_model_len 64"},
      {chat, "{" + msgs + R"(,"max_tokens":"5"})", 400, "max_tokens", "must be an integer"},
      {chat, "{" + msgs + R"(,"n":2})", 400, "n", "'n' must be 1"},
      {chat, "{" + msgs + R"(,"stream":"yes"})", 400, "stream", "must be a boolean"},
      {chat, "{" + msgs + R"(,"top_logprobs":3})", 400, "top_logprobs", "requires 'logprobs'"},
      {chat, "{" + msgs + R"(,"stop":[1]})", 400, "stop", "must be a string"},
      {cmpl, R"({"model":"fake"})", 400, "prompt", "'prompt' is required"},
      {cmpl, R"({"prompt":""})", 400, "prompt", "must not be empty"},
      {cmpl, R"({"prompt":[]})", 400, "prompt", "must not be empty"},
      {cmpl, R"({"prompt":[1,2,100000]})", 400, "prompt", "'prompt[2]' = 100000 is not a token id"},
      {cmpl, R"({"prompt":[1,-2]})", 400, "prompt", "is not a token id"},
      {cmpl, R"({"prompt":[1,"a"]})", 400, "prompt", "must be an integer token id"},
      {cmpl, R"({"prompt":["a","b"]})", 400, "prompt", "2 prompts"},
      {cmpl, R"({"prompt":3})", 400, "prompt", "must be a string"},
      {cmpl, R"({"prompt":")" + std::string(200, 'x') + R"("})", 400, "prompt", "but max_model_len is 64"},
      {cmpl, R"({"prompt":"x","logprobs":50})", 400, "logprobs", "[0, 20]"},
      {cmpl, R"({"prompt":"x","model":"other"})", 404, "model", "does not exist"},
      {cmpl, "{\"prompt\":\"" + std::string(5000, 'y') + "\"}", 413, "", "over the limit of 4096 bytes"},
  };
  for (const auto& bc : cases) {
    auto r = http_call(s.port, "POST", bc.path, bc.body);
    EXPECT_EQ(r.status, bc.status) << bc.body.substr(0, 80) << " -> " << r.raw;
    ASSERT_TRUE(r.body.is_object() && r.body.contains("error")) << r.raw;
    const json& e = r.body["error"];
    EXPECT_TRUE(e.contains("message") && e.contains("type") && e.contains("param") && e.contains("code"));
    if (bc.param.empty())
      EXPECT_TRUE(e["param"].is_null()) << r.raw;
    else
      EXPECT_EQ(e["param"], bc.param) << r.raw;
    EXPECT_NE(e["message"].get<std::string>().find(bc.message_part), std::string::npos)
        << "want '" << bc.message_part << "' in " << r.raw;
  }
  auto m = http_call(s.port, "GET", "/metrics");
  EXPECT_NE(m.raw.find("deltaserve:request_errors_total{kind=\"invalid_request\"}"), std::string::npos);
  // The server is unharmed.
  EXPECT_EQ(post(s.port, chat, chat_body("still fine", 3)).status, 200);
}

TEST(Server, ApiKeyGuardsV1Routes) {
  server::ServerOptions o = TestServer::default_options();
  o.api_key = "sekret";
  TestServer s(TestServer::default_config(), o);
  auto none = post(s.port, "/v1/chat/completions", chat_body("x", 2));
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.body["error"]["type"], "authentication_error");
  EXPECT_EQ(post(s.port, "/v1/chat/completions", chat_body("x", 2), {{"Authorization", "Bearer wrong"}}).status, 401);
  EXPECT_EQ(http_call(s.port, "GET", "/v1/models").status, 401);
  EXPECT_EQ(post(s.port, "/v1/chat/completions", chat_body("x", 2), {{"Authorization", "Bearer sekret"}}).status, 200);
  EXPECT_EQ(http_call(s.port, "GET", "/health").status, 200);
  EXPECT_EQ(http_call(s.port, "GET", "/metrics").status, 200);
}

TEST(Server, QueueOverItsBoundGets503WithRetryAfter) {
  EngineConfig c = TestServer::default_config();
  c.max_num_seqs = 1;
  c.max_num_batched_tokens = 16;
  c.max_waiting = 2;
  TestServer s(c);
  s.model->step_delay_us = 5000;
  // Six at once against one running slot and two waiting places: some must be refused, and
  // every one accepted must still finish normally.
  std::vector<std::future<SseResult>> fs;
  for (int i = 0; i < 6; ++i)
    fs.push_back(std::async(std::launch::async, [&, i] {
      return stream(s.port, "/v1/chat/completions", chat_body("queue " + std::to_string(i), 40));
    }));
  int refused = 0, finished = 0;
  for (auto& f : fs) {
    auto x = f.get();
    if (x.status == 503) {
      ++refused;
      json e = json::parse(x.raw, nullptr, false);
      EXPECT_EQ(e["error"]["code"], "server_overloaded") << x.raw;
      EXPECT_EQ(x.headers.count("Retry-After"), 1u);
      EXPECT_NE(e["error"]["message"].get<std::string>().find("2 requests are already waiting"), std::string::npos);
    } else {
      EXPECT_EQ(x.status, 200) << x.error;
      EXPECT_EQ(x.finish_reason, "length");
      ++finished;
    }
  }
  EXPECT_GE(refused, 1);
  EXPECT_GE(finished, 2);  // the bound counts requests not yet admitted, so two always fit
}

TEST(Server, DrainFinishesInFlightAndRefusesNew) {
  TestServer s;
  s.model->step_delay_us = 5000;  // 60 tokens: 300+ ms in flight
  std::vector<std::future<SseResult>> fs;
  for (int i = 0; i < 4; ++i)
    fs.push_back(std::async(std::launch::async, [&, i] {
      return stream(s.port, "/v1/chat/completions", chat_body("drain " + std::to_string(i), 60));
    }));
  for (int i = 0; i < 500 && s.engine->in_flight() < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto drainer = std::async(std::launch::async, [&] { s.http->drain_and_stop(std::chrono::seconds(30)); });
  // Waits for the drain to begin (the drainer thread may start late on a loaded machine); the
  // streams take 300+ ms of steps, so they are still in flight when it has.
  int health = 200;
  for (int i = 0; i < 500 && health != 503; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    health = http_call(s.port, "GET", "/health").status;
  }
  EXPECT_EQ(health, 503);
  auto refused = post(s.port, "/v1/chat/completions", chat_body("late", 3));
  EXPECT_EQ(refused.status, 503);
  for (int i = 0; i < 4; ++i) {
    auto r = fs[size_t(i)].get();
    EXPECT_EQ(r.finish_reason, "length");
    EXPECT_TRUE(r.done);
    EXPECT_EQ(r.content, expected_text(chat_reference(s, "drain " + std::to_string(i), 60)));
  }
  drainer.get();
}

TEST(Server, DrainGraceOverCancelsTheRest) {
  TestServer s;
  s.model->step_delay_us = 20000;
  auto f = std::async(std::launch::async, [&] { return stream(s.port, "/v1/chat/completions", chat_body("slow", 900)); });
  for (int i = 0; i < 500 && s.engine->in_flight() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  s.http->drain_and_stop(std::chrono::milliseconds(200));
  auto r = f.get();
  EXPECT_TRUE(r.done);
  EXPECT_EQ(r.finish_reason, "abort");
}

TEST(Server, TokenizeDetokenizeMetrics) {
  TestServer s;
  auto t = post(s.port, "/tokenize", {{"prompt", "Hello, world!"}});
  ASSERT_EQ(t.status, 200) << t.raw;
  EXPECT_EQ(t.body["count"], t.body["tokens"].size());
  EXPECT_EQ(t.body["max_model_len"], 1024);
  auto d = post(s.port, "/detokenize", {{"tokens", t.body["tokens"]}});
  ASSERT_EQ(d.status, 200);
  EXPECT_EQ(d.body["prompt"], "Hello, world!");
  auto tc = post(s.port, "/tokenize", {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}});
  EXPECT_EQ(tc.body["tokens"], s.chat_ids({{"user", "hi"}}));
  EXPECT_EQ(post(s.port, "/detokenize", {{"tokens", {1, 100000}}}).status, 400);
  post(s.port, "/v1/chat/completions", chat_body("count me", 5));
  auto m = http_call(s.port, "GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  for (const char* name :
       {"deltaserve:num_requests_running", "deltaserve:num_requests_waiting", "deltaserve:kv_pool_usage_perc",
        "deltaserve:step_rows_bucket", "deltaserve:prompt_tokens_total", "deltaserve:generation_tokens_total",
        "deltaserve:time_to_first_token_seconds_bucket", "deltaserve:inter_token_latency_seconds_bucket",
        "deltaserve:num_preemptions_total", "deltaserve:request_errors_total"})
    EXPECT_NE(m.raw.find(name), std::string::npos) << name;
  EXPECT_NE(m.raw.find("deltaserve:generation_tokens_total 5"), std::string::npos);
}

}  // namespace
}  // namespace ds


namespace ds {
namespace {

// Hostile and malformed bodies get a 4xx error object and leave the server serving.
// Bodies nested far past any request's shape get 400 in the API's error shape, naming the
// limit, on every route that reads a body; the server goes on serving.
TEST(Server, DeeplyNestedBodiesGet400NamingTheLimit) {
  testing::TestServer s;
  std::string mixed;
  for (int i = 0; i < 100000; ++i) mixed += i % 2 ? "{\"a\":" : "[";
  const std::vector<std::string> bodies = {
      std::string(100000, '[') + std::string(100000, ']'),
      std::string(1000000, '[') + std::string(1000000, ']'),
      R"({"messages":[{"role":"user","content":"x"}],"tools":)" + std::string(100000, '[') + std::string(100000, ']') + "}",
      mixed,
  };
  for (const auto& b : bodies)
    for (const char* path : {"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"}) {
      auto r = testing::http_call(s.port, "POST", path, b);
      EXPECT_EQ(r.status, 400) << path << " " << r.raw.substr(0, 200);
      ASSERT_TRUE(r.body.is_object() && r.body.contains("error")) << path << " " << r.raw.substr(0, 200);
      EXPECT_EQ(r.body["error"]["type"], "invalid_request_error");
      const std::string m = r.body["error"]["message"];
      EXPECT_NE(m.find("nests deeper than 32 levels"), std::string::npos) << m;
    }
  EXPECT_EQ(testing::http_call(s.port, "GET", "/health").status, 200);
  EXPECT_EQ(testing::post(s.port, "/v1/completions", {{"prompt", "ok"}, {"max_tokens", 2}}).status, 200);
}

TEST(Server, NeverCrashesOnMalformedBodies) {
  testing::TestServer s;
  std::vector<std::string> bodies = {
      "",
      "null",
      "\"str\"",
      std::string(20000, '['),
      std::string(5000, '{'),
      R"({"messages":[{"role":"user","content":"x"}],"temperature":1e400})",
      R"({"messages":[{"role":"user","content":"x"}],"max_tokens":99999999999999999999999})",
      R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1.5})",
      R"({"messages":[{"role":"user","content":"x"}],"seed":"abc"})",
      R"({"messages":[{"role":"user","content":"x"}],"stream_options":5})",
      R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
      R"({"messages":[{"role":"user","content":[{"type":"text","text":7}]}]})",
      R"({"messages":[{"role":7,"content":"x"}]})",
      R"({"messages":[null]})",
      R"({"messages":[{"role":"user","content":"x"}],"model":["a"]})",
      std::string("{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}"),
      std::string("{\"prompt\":\"a\0b\"}", 15),
      R"({"prompt":[[1,2],[3]]})",
      R"({"prompt":[[]]})",
      R"({"prompt":[1.5]})",
      R"({"prompt":{"a":1}})",
  };
  int i = 0;
  for (const auto& b : bodies) {
    for (const char* path : {"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"}) {
      // Only the structurally broken bodies are errors for every route.
      if (i >= 5 && std::string(path).find("tokenize") != std::string::npos) continue;
      auto r = testing::http_call(s.port, "POST", path, b);
      EXPECT_GE(r.status, 400) << i << " " << path << " " << r.raw.substr(0, 200);
      EXPECT_LT(r.status, 500) << i << " " << path << " " << r.raw.substr(0, 200);
      EXPECT_TRUE(r.body.is_object() && r.body.contains("error")) << i << " " << path << " " << r.raw.substr(0, 200);
    }
    ++i;
  }
  EXPECT_EQ(testing::http_call(s.port, "GET", "/health").status, 200);
  EXPECT_EQ(testing::post(s.port, "/v1/completions", {{"prompt", "ok"}, {"max_tokens", 2}}).status, 200);
}

}  // namespace
}  // namespace ds

namespace ds {
namespace {

using namespace testing;

// A model whose embedding has more rows than its tokenizer has tokens (a padded vocabulary,
// which start-up accepts) emits ids with no text. Streamed with logprobs, these once threw inside
// httplib's content provider and aborted the process; every id must render as defined output.
TEST(Server, PaddedVocabularyTokensRenderAsNoTextInStreamsAndLogprobs) {
  const int tok_vocab = test_tokenizer().vocab_size();
  TestServer s(TestServer::default_config(), TestServer::default_options(), 2 * tok_vocab);
  json body = chat_body("padded", 40);
  body["logprobs"] = true;
  body["top_logprobs"] = 5;
  const auto ref = chat_reference(s, "padded", 40);
  int undefined = 0;
  for (int32_t t : ref) undefined += t >= tok_vocab;
  ASSERT_GT(undefined, 0) << "the reference output never reaches the padded ids";
  // Streamed: the process survives, the stream ends normally, the text is that of the defined ids.
  body["stream"] = true;
  auto st = stream(s.port, "/v1/chat/completions", body);
  EXPECT_TRUE(st.done);
  EXPECT_EQ(st.finish_reason, "length");
  std::vector<int32_t> defined;
  for (int32_t t : ref)
    if (t < tok_vocab) defined.push_back(t);
  EXPECT_EQ(st.content, expected_text(defined));
  // Not streamed: the same, and each undefined token's logprob entry is empty text, no bytes.
  body["stream"] = false;
  auto r = post(s.port, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["message"]["content"], expected_text(defined));
  const json& c = r.body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(c.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    if (ref[i] < tok_vocab) continue;
    EXPECT_EQ(c[i]["token"], "");
    EXPECT_TRUE(c[i]["bytes"].empty());
  }
  EXPECT_EQ(http_call(s.port, "GET", "/health").status, 200);
}

}  // namespace
}  // namespace ds

namespace ds {
namespace {

using namespace testing;

// The same checks end to end: what a web page could send to a local server is refused, an API
// client's request is not; /v1/models no longer tells the model's path unless asked.
TEST(Server, BrowserFacingRequestsAreRefused) {
  TestServer s;
  const std::string body = R"({"model":"fake","prompt":[1,2,3],"max_tokens":2,"temperature":0})";
  httplib::Client cli("127.0.0.1", s.port);
  auto form = cli.Post("/v1/completions", body, "text/plain");  // a cross-site "simple" POST
  ASSERT_TRUE(form);
  EXPECT_EQ(form->status, 415);
  httplib::Headers evil_origin = {{"Origin", "https://evil.example"}};
  auto cross = cli.Post("/v1/completions", evil_origin, body, "application/json");
  ASSERT_TRUE(cross);
  EXPECT_EQ(cross->status, 403);
  httplib::Headers rebound = {{"Host", "evil.example:" + std::to_string(s.port)}};
  auto rebind = cli.Post("/v1/completions", rebound, body, "application/json");
  ASSERT_TRUE(rebind);
  EXPECT_EQ(rebind->status, 403);
  auto ok = cli.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  auto models = http_call(s.port, "GET", "/v1/models");
  EXPECT_TRUE(models.body["data"][0]["root"].is_null());
}

TEST(Server, ListedOriginsMayCallCrossOrigin) {
  server::ServerOptions o = TestServer::default_options();
  o.allowed_origins = {"http://localhost:3000"};
  TestServer s(TestServer::default_config(), o);
  httplib::Client cli("127.0.0.1", s.port);
  httplib::Headers origin = {{"Origin", "http://localhost:3000"}};
  auto r = cli.Post("/v1/completions", origin, R"({"prompt":[1,2],"max_tokens":1})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "http://localhost:3000");
}

TEST(Server, TooManyOrTooLongStopStringsAreRefused) {
  TestServer s;
  json body = chat_body("stops", 4);
  body["stop"] = {"a", "b", "c", "d", "e"};
  auto r = post(s.port, "/v1/chat/completions", body);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "stop");
  body["stop"] = {std::string(2000, 'x')};
  EXPECT_EQ(post(s.port, "/v1/chat/completions", body).status, 400);
  body["stop"] = {"a", "b", "c", "d"};
  EXPECT_EQ(post(s.port, "/v1/chat/completions", body).status, 200);
}

}  // namespace
}  // namespace ds
