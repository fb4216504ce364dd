// Tools, forced calls, response_format and logit_bias through the HTTP server on the fake model:
// the request checks (each a 400 naming its field), the whole and the streamed response agreeing
// on a forced call, and logit_bias acting on the sampled tokens.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "server_harness.h"

namespace ds::testing {
namespace {

const json& weather_tool() {
  static const json t = json::parse(R"({"type": "function", "function": {"name": "get_weather",
    "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {
      "city": {"type": "string", "maxLength": 8},
      "unit": {"enum": ["celsius", "fahrenheit"]}},
      "required": ["city", "unit"], "additionalProperties": false}}})");
  return t;
}

json chat_body(json extra = json::object()) {
  json body = {{"model", "fake"},
               {"messages", json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}})},
               {"max_tokens", 200},
               {"temperature", 0}};
  body.update(extra);
  return body;
}

TEST(ToolsServer, NamedToolChoiceGivesTheSameCallWholeAndStreamed) {
  TestServer s;
  const json body = chat_body({{"tools", json::array({weather_tool()})},
                               {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}});
  const HttpResult r = post(s.port, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.raw;
  const json& choice = r.body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.raw;
  const json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  const std::string args = call["function"]["arguments"];
  const json a = json::parse(args);
  EXPECT_TRUE(a["city"].is_string());
  EXPECT_TRUE(a["unit"] == "celsius" || a["unit"] == "fahrenheit") << args;

  const SseResult st = stream(s.port, "/v1/chat/completions", body);
  ASSERT_EQ(st.status, 200) << st.raw;
  EXPECT_TRUE(st.done);
  EXPECT_EQ(st.finish_reason, "tool_calls");
  EXPECT_EQ(st.content, "");
  std::string streamed_args, name, id;
  for (const json& ev : st.events) {
    if (!ev.contains("choices") || ev["choices"].empty()) continue;
    const json& d = ev["choices"][0]["delta"];
    if (!d.contains("tool_calls")) continue;
    for (const json& tc : d["tool_calls"]) {
      EXPECT_EQ(tc["index"], 0);
      if (tc.contains("id")) id = tc["id"];
      if (tc.contains("function") && tc["function"].contains("name")) name = tc["function"]["name"];
      if (tc.contains("function") && tc["function"].contains("arguments")) streamed_args += tc["function"]["arguments"];
    }
  }
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(id.rfind("call_", 0), 0u) << id;
  EXPECT_EQ(streamed_args, args);
}

TEST(ToolsServer, RequiredWithoutParallelCallsMakesOneCall) {
  TestServer s;
  json second = weather_tool();
  second["function"]["name"] = "get_time";
  second["function"].erase("parameters");
  const HttpResult r = post(s.port, "/v1/chat/completions",
                            chat_body({{"tools", json::array({weather_tool(), second})},
                                       {"tool_choice", "required"},
                                       {"parallel_tool_calls", false}}));
  ASSERT_EQ(r.status, 200) << r.raw;
  ASSERT_EQ(r.body["choices"][0]["message"]["tool_calls"].size(), 1u) << r.raw;
  const json& f = r.body["choices"][0]["message"]["tool_calls"][0]["function"];
  EXPECT_TRUE(f["name"] == "get_weather" || f["name"] == "get_time") << r.raw;
  EXPECT_TRUE(json::parse(f["arguments"].get<std::string>()).is_object());
}

TEST(ToolsServer, ToolChoiceNoneAnswersInText) {
  TestServer s;
  const HttpResult r = post(s.port, "/v1/chat/completions",
                            chat_body({{"tools", json::array({weather_tool()})}, {"tool_choice", "none"},
                                       {"max_tokens", 8}}));
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_FALSE(r.body["choices"][0]["message"].contains("tool_calls") &&
               !r.body["choices"][0]["message"]["tool_calls"].empty());
  EXPECT_NE(r.body["choices"][0]["finish_reason"], "tool_calls");
}

TEST(ToolsServer, JsonSchemaResponseIsValidJson) {
  TestServer s;
  const json schema = weather_tool()["function"]["parameters"];
  const HttpResult r = post(s.port, "/v1/chat/completions",
                            chat_body({{"response_format",
                                        {{"type", "json_schema"}, {"json_schema", {{"name", "w"}, {"schema", schema}}}}}}));
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop");
  const json v = json::parse(r.body["choices"][0]["message"]["content"].get<std::string>());
  EXPECT_TRUE(v["unit"] == "celsius" || v["unit"] == "fahrenheit") << v.dump();
}

TEST(ToolsServer, BadToolRequestsAre400sNamingTheField) {
  TestServer s;
  struct Case {
    json extra;
    std::string param;
  };
  json patterned = weather_tool();
  patterned["function"]["parameters"] = {{"type", "object"}, {"patternProperties", {{"^x", json::object()}}}};
  const std::vector<Case> cases = {
      {{{"tools", json::array({weather_tool()})},
        {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}},
       "tool_choice"},
      {{{"tool_choice", "required"}}, "tool_choice"},
      {{{"tools", json::array({patterned})}, {"tool_choice", "required"}}, "tools"},
      {{{"tools", "get_weather"}}, "tools"},
      {{{"response_format", {{"type", "xml"}}}}, "response_format"},
      {{{"logit_bias", {{"999999", 5}}}}, "logit_bias"},
      {{{"logit_bias", {{"-1", 5}}}}, "logit_bias"},
      {{{"logit_bias", {{"3", 500}}}}, "logit_bias"},
  };
  for (const Case& c : cases) {
    const HttpResult r = post(s.port, "/v1/chat/completions", chat_body(c.extra));
    EXPECT_EQ(r.status, 400) << c.extra.dump() << " -> " << r.raw;
    EXPECT_EQ(r.body["error"]["param"], c.param) << c.extra.dump() << " -> " << r.raw;
  }
  // A padded model vocabulary: ids past the model's rows are refused, the message gives the range.
  const int vocab = s.engine->vocab_size();
  const HttpResult r = post(s.port, "/v1/chat/completions", chat_body({{"logit_bias", {{std::to_string(vocab), 1}}}}));
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find("[0, " + std::to_string(vocab) + ")"),
            std::string::npos)
      << r.raw;
  // The server still serves.
  EXPECT_EQ(post(s.port, "/v1/chat/completions", chat_body({{"max_tokens", 2}})).status, 200);
}

// Tool arguments are a JSON object in every format: a parameters schema that admits anything
// else is refused whatever tool_choice says (a forced call used to write `850`, which no parser
// takes back, and answer with no tool_calls), naming the tool and where in its schema.
TEST(ToolsServer, ParametersThatAdmitANonObjectAreRefusedForEveryToolChoice) {
  TestServer s;
  const auto tool = [](const std::string& name, const json& parameters) {
    json t = {{"type", "function"}, {"function", {{"name", name}}}};
    if (!parameters.is_null()) t["function"]["parameters"] = parameters;
    return t;
  };
  struct Bad {
    json parameters;
    std::string where;  // in the message
  };
  const std::vector<Bad> bad = {
      {{{"type", "integer"}}, "'/type'"},
      {{{"type", json::array({"object", "null"})}}, "'/type'"},
      {{{"anyOf", json::array({{{"type", "object"}}, {{"type", "string"}}})}}, "'/anyOf/1/type'"},
      {{{"anyOf", json::array({{{"type", "object"}}, json::object()})}}, "'/anyOf/1'"},
      {{{"type", "object"}, {"oneOf", json::array({{{"type", "object"}}, {{"type", "array"}}})}}, "'/oneOf/1/type'"},
      {{{"enum", json::array({1, 2})}}, "'/enum'"},
      {{{"const", "x"}}, "'/const'"},
      {{{"items", {{"type", "string"}}}}, "'/items'"},
      {{{"$ref", "#/$defs/n"}, {"$defs", {{"n", {{"type", "integer"}}}}}}, "'/$defs/n/type'"},
      {json::parse(R"({"$ref": "#/definitions/a",
                       "definitions": {"a": {"$ref": "#/definitions/b"}, "b": {"type": "number"}}})"),
       "'/definitions/b/type'"},
      {{{"$ref", "#/$defs/missing"}, {"$defs", json::object()}}, "'/$ref'"},
      {{{"$ref", "https://example.com/args.json"}}, "'/$ref'"},
      {{{"$ref", "#/$defs/a"}, {"$defs", {{"a", {{"$ref", "#/$defs/a"}}}}}}, "32 levels"},
  };
  const std::vector<json> choices = {"auto", "none", "required",
                                     {{"type", "function"}, {"function", {{"name", "nums"}}}}};
  for (const Bad& b : bad) {
    for (const json& choice : choices) {
      const json tools = json::array({weather_tool(), tool("nums", b.parameters)});
      const HttpResult r = post(s.port, "/v1/chat/completions", chat_body({{"tools", tools}, {"tool_choice", choice}}));
      const std::string what = b.parameters.dump() + " with tool_choice " + choice.dump();
      ASSERT_EQ(r.status, 400) << what << " -> " << r.raw;
      EXPECT_EQ(r.body["error"]["type"], "invalid_request_error") << r.raw;
      EXPECT_EQ(r.body["error"]["param"], "tools") << r.raw;
      const std::string msg = r.body["error"]["message"];
      EXPECT_NE(msg.find("tools[1].function.parameters"), std::string::npos) << what << ": " << msg;
      EXPECT_NE(msg.find("'nums'"), std::string::npos) << what << ": " << msg;
      EXPECT_NE(msg.find(b.where), std::string::npos) << what << ": " << msg;
    }
  }
  // Schemas that admit only objects, or say nothing of the type: a forced call to them is a call
  // with an object for its arguments.
  const std::vector<json> good = {
      nullptr,
      json::object(),
      {{"description", "no type given"}},
      {{"type", "object"}},
      {{"type", json::array({"object"})}},
      {{"properties", {{"n", {{"type", "integer"}}}}}, {"required", json::array({"n"})}},
      {{"anyOf", json::array({{{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}},
                              {{"type", "object"}, {"properties", {{"b", {{"type", "boolean"}}}}}}})}},
      {{"allOf", json::array({{{"type", "object"}}})}},
      json::parse(R"({"$ref": "#/$defs/args", "$defs": {"args": {"type": "object",
                     "properties": {"n": {"type": "integer"}}, "required": ["n"]}}})"),
  };
  for (const json& p : good) {
    for (const json& choice : choices) {
      const HttpResult r = post(s.port, "/v1/chat/completions",
                                chat_body({{"tools", json::array({tool("nums", p)})},
                                           {"tool_choice", choice},
                                           {"max_tokens", 60}}));
      const std::string what = p.dump() + " with tool_choice " + choice.dump();
      ASSERT_EQ(r.status, 200) << what << " -> " << r.raw;
      if (choice == "auto" || choice == "none") continue;
      const json& msg = r.body["choices"][0]["message"];
      // The fake model may write a long map: cut by max_tokens, a call whose arguments never
      // closed is dropped (only whole calls are returned), so a cut reply may hold none. Every
      // call returned has an object for its arguments.
      const bool cut = r.body["choices"][0]["finish_reason"] == "length";
      if (!cut) {
        ASSERT_TRUE(msg.contains("tool_calls") && !msg["tool_calls"].empty()) << what << " -> " << r.raw;
      }
      if (!msg.contains("tool_calls")) continue;
      for (size_t i = 0; i < msg["tool_calls"].size(); ++i) {
        const json& call = msg["tool_calls"][i];
        EXPECT_EQ(call["function"]["name"], "nums") << r.raw;
        const std::string text = call["function"]["arguments"];
        EXPECT_TRUE(json::parse(text, nullptr, false).is_object()) << what << " -> " << r.raw;
      }
    }
  }
}

// ---- cut replies: max_tokens and stop strings inside the tool markup, streamed and whole ----

// A reply as the client sees it: content, calls (name, arguments) and finish_reason.
struct Reply {
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;
  std::string finish;
  int completion_tokens = 0;
  std::string raw;
};

bool operator==(const Reply& a, const Reply& b) {
  return a.content == b.content && a.calls == b.calls && a.finish == b.finish;
}

std::ostream& operator<<(std::ostream& os, const Reply& r) {
  os << "content " << json(r.content).dump() << ", finish " << r.finish << ", calls [";
  for (const auto& [n, a] : r.calls) os << " " << n << " " << json(a).dump();
  return os << " ]";
}

Reply whole_reply(int port, const json& body) {
  const HttpResult r = post(port, "/v1/chat/completions", body);
  Reply out;
  out.raw = r.raw;
  EXPECT_EQ(r.status, 200) << r.raw;
  if (r.status != 200) return out;
  const json& c = r.body["choices"][0];
  if (c["message"]["content"].is_string()) out.content = c["message"]["content"];
  if (c["message"].contains("tool_calls"))
    for (const json& t : c["message"]["tool_calls"]) out.calls.emplace_back(t["function"]["name"], t["function"]["arguments"]);
  out.finish = c["finish_reason"];
  out.completion_tokens = r.body["usage"]["completion_tokens"];
  return out;
}

Reply streamed_reply(int port, const json& body) {
  const SseResult st = stream(port, "/v1/chat/completions", body);
  Reply out;
  out.raw = st.raw;
  EXPECT_EQ(st.status, 200) << st.raw;
  EXPECT_TRUE(st.done) << st.raw;
  out.content = st.content;
  out.finish = st.finish_reason;
  for (const json& ev : st.events) {
    if (!ev.contains("choices") || ev["choices"].empty() || !ev["choices"][0]["delta"].contains("tool_calls")) continue;
    for (const json& tc : ev["choices"][0]["delta"]["tool_calls"]) {
      const size_t i = tc["index"];
      EXPECT_LE(i, out.calls.size()) << st.raw;
      if (i == out.calls.size()) {
        EXPECT_TRUE(tc.contains("id")) << "a call's first delta has its id";
        out.calls.emplace_back(tc["function"]["name"], "");
      }
      if (i < out.calls.size()) out.calls[i].second += tc["function"]["arguments"].get<std::string>();
    }
  }
  return out;
}

const json& time_tool() {
  static const json t = json::parse(R"({"type": "function", "function": {"name": "get_time",
    "parameters": {"type": "object", "properties": {"tz": {"enum": ["UTC", "CET"]}},
                   "required": ["tz"], "additionalProperties": false}}})");
  return t;
}

// A required-call request whose forced output (greedy, the fake model) makes at least two calls.
json two_call_body(int port) {
  for (int i = 0; i < 64; ++i) {
    const json body = chat_body({{"messages", json::array({{{"role", "user"}, {"content", "Weather and time " + std::to_string(i)}}})},
                                 {"tools", json::array({weather_tool(), time_tool()})},
                                 {"tool_choice", "required"},
                                 {"max_tokens", 250}});
    const Reply r = whole_reply(port, body);
    if (r.finish == "tool_calls" && r.calls.size() >= 2) return body;
  }
  ADD_FAILURE() << "no prompt made two calls";
  return nullptr;
}

// max_tokens at every point of a two-call reply: the calls that closed before the cut are
// returned whole (the same calls, byte for byte, as the uncut reply), the call being written is
// dropped, finish_reason stays "length", and streamed equals whole. The case agent SDKs meet with
// parallel calls allowed: one whole call, a second cut by max_tokens, the first still a call.
void check_cuts(int port) {
  const json body = two_call_body(port);
  ASSERT_FALSE(body.is_null());
  const Reply full = whole_reply(port, body);
  ASSERT_EQ(streamed_reply(port, body), full);
  ASSERT_GE(full.calls.size(), 2u) << full;
  bool first_stands_second_cut = false;
  size_t before = 0;
  for (int n = 1; n < full.completion_tokens; ++n) {
    json cut = body;
    cut["max_tokens"] = n;
    const Reply whole = whole_reply(port, cut), streamed = streamed_reply(port, cut);
    ASSERT_EQ(streamed, whole) << "max_tokens " << n << "\nwhole: " << whole.raw << "\nstreamed: " << streamed.raw;
    EXPECT_EQ(whole.finish, "length") << "max_tokens " << n;
    // A call whose arguments closed stands, even when its closing marker was cut.
    ASSERT_LE(whole.calls.size(), full.calls.size()) << "max_tokens " << n << ": " << whole;
    ASSERT_GE(whole.calls.size(), before) << "max_tokens " << n << ": a longer reply lost a call";
    before = whole.calls.size();
    for (size_t i = 0; i < whole.calls.size(); ++i) {
      EXPECT_EQ(whole.calls[i], full.calls[i]) << "max_tokens " << n << ": call " << i;
      EXPECT_TRUE(json::parse(whole.calls[i].second).is_object()) << whole;
    }
    first_stands_second_cut = first_stands_second_cut || whole.calls.size() == 1;
  }
  EXPECT_TRUE(first_stands_second_cut);
}

// Stop strings inside the tool markup: the text is cut before the stop string and the cut text is
// parsed by the same rules, streamed and whole. A stop string that is a call's closing marker
// leaves that call complete.
void check_stops(int port, const std::vector<std::string>& stops, const std::string& closing) {
  const json body = two_call_body(port);
  ASSERT_FALSE(body.is_null());
  const Reply full = whole_reply(port, body);
  for (const std::string& stop : stops) {
    json b = body;
    b["stop"] = json::array({stop});
    const Reply whole = whole_reply(port, b), streamed = streamed_reply(port, b);
    ASSERT_EQ(streamed, whole) << "stop " << json(stop).dump() << "\nwhole: " << whole.raw << "\nstreamed: " << streamed.raw;
    // The output ended on a stop: with calls (whole or cut short) that is tool_calls.
    EXPECT_EQ(whole.finish, whole.calls.empty() ? "stop" : "tool_calls") << "stop " << json(stop).dump() << ": " << whole;
    if (stop != closing) continue;
    ASSERT_EQ(whole.calls.size(), 1u) << whole;
    EXPECT_EQ(whole.calls[0], full.calls[0]);
    EXPECT_TRUE(json::parse(whole.calls[0].second).is_object());
    EXPECT_EQ(whole.content, "");
    EXPECT_EQ(whole.finish, "tool_calls");
  }
}

TEST(ToolsServer, MaxTokensCutsGiveTheSameReplyStreamedAndWhole) {
  TestServer s;
  check_cuts(s.port);
}

TEST(ToolsServer, StopStringsInTheMarkupGiveTheSameReplyStreamedAndWhole) {
  TestServer s;
  check_stops(s.port, {"</tool_call>", "\n</tool_call>", "<tool_call>", "\n<tool_call>", "\"arguments\": ", "\"unit\"",
                       "}}", "celsius", "fahrenheit", "UTC", "CET"},
              "</tool_call>");
}

// A server whose tokenizer has Kimi's special tokens, so the chat format is Kimi's and its tool
// markers are single tokens.
struct KimiServer {
  static const Tokenizer& tokenizer() {
    static const Tokenizer tok = [] {
      std::vector<std::string> texts;
      for (int i = 0; i < 20; ++i) {
        texts.push_back("The quick brown fox jumps over the lazy dog. Hello, world! 0123456789 ");
        texts.push_back("functions.get_weather:0 {\"city\": \"Paris\", \"unit\": \"celsius\"} {\"tz\": \"UTC\"} ");
      }
      std::vector<std::string> specials = {"<|endoftext|>", "<|im_start|>"};
      for (std::string_view m : {kKimiSystem, kKimiUser, kKimiAssistant, kKimiMiddle, kKimiEnd, kKimiToolCallsBegin,
                                 kKimiToolCallsEnd, kKimiToolCallBegin, kKimiToolCallArgumentBegin, kKimiToolCallEnd})
        specials.emplace_back(m);
      return Tokenizer::from_json_text(train_bpe_tokenizer_json(texts, 400, specials), "kimi-test");
    }();
    return tok;
  }

  KimiServer() {
    engine = std::make_unique<Engine>(std::make_unique<FakeModel>(tokenizer().vocab_size()), TestServer::default_config());
    server::ServerOptions opts = TestServer::default_options();
    opts.host = "127.0.0.1";
    opts.port = 0;
    http = std::make_unique<server::HttpServer>(*engine, tokenizer(), opts);
    port = http->bind();
    http->start();
  }
  ~KimiServer() {
    http->stop();
    engine->stop();
  }

  std::unique_ptr<Engine> engine;
  std::unique_ptr<server::HttpServer> http;
  int port = 0;
};

TEST(ToolsServer, KimiMaxTokensCutsGiveTheSameReplyStreamedAndWhole) {
  KimiServer s;
  ASSERT_EQ(detect_chat_format(KimiServer::tokenizer(), ""), ChatFormat::Kimi);
  check_cuts(s.port);
}

TEST(ToolsServer, KimiStopStringsInTheMarkupGiveTheSameReplyStreamedAndWhole) {
  KimiServer s;
  check_stops(s.port,
              {std::string(kKimiToolCallEnd), std::string(kKimiToolCallsEnd), std::string(kKimiToolCallArgumentBegin),
               std::string(kKimiToolCallBegin), "functions.", ":1", "\"unit\"", "}", "celsius", "UTC"},
              std::string(kKimiToolCallEnd));
}

TEST(ToolsServer, LogitBiasSteersGreedyDecoding) {
  TestServer s;
  const auto hello = test_tokenizer().token_id("Hello");
  const int32_t token = hello ? *hello : 300;
  const HttpResult r = post(s.port, "/v1/completions",
                            {{"model", "fake"}, {"prompt", "The quick"}, {"max_tokens", 4}, {"temperature", 0},
                             {"logit_bias", {{std::to_string(token), 100}}}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["text"], expected_text({token, token, token, token}));
  // -100 bans: greedy never picks the token it would have picked.
  const HttpResult base = post(s.port, "/v1/completions",
                               {{"model", "fake"}, {"prompt", {1, 2, 3}}, {"max_tokens", 1}, {"temperature", 0},
                                {"logprobs", 1}});
  ASSERT_EQ(base.status, 200) << base.raw;
  const int32_t first = s.model->reference_next({1, 2, 3});
  const HttpResult banned = post(s.port, "/v1/completions",
                                 {{"model", "fake"}, {"prompt", {1, 2, 3}}, {"max_tokens", 1}, {"temperature", 0},
                                  {"logit_bias", {{std::to_string(first), -100}}}});
  ASSERT_EQ(banned.status, 200) << banned.raw;
  EXPECT_EQ(base.body["choices"][0]["text"], expected_text({first}));
  EXPECT_NE(banned.body["choices"][0]["text"], base.body["choices"][0]["text"]);
}

TEST(ToolsServer, DeveloperRoleIsASystemTurn) {
  TestServer s;
  const auto tok = [&](const std::string& role) {
    return post(s.port, "/tokenize",
                {{"model", "fake"}, {"messages", json::array({{{"role", role}, {"content", "Be brief."}},
                                                              {{"role", "user"}, {"content", "Hi"}}})}});
  };
  const HttpResult dev = tok("developer"), sys = tok("system");
  ASSERT_EQ(dev.status, 200) << dev.raw;
  EXPECT_EQ(dev.body["tokens"], sys.body["tokens"]);
}

}  // namespace
}  // namespace ds::testing
