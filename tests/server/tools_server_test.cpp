// Tools, forced calls, response_format and logit_bias through the HTTP server on the fake model:
// the request checks (each a 400 naming its field), the whole and the streamed response agreeing
// on a forced call, and logit_bias acting on the sampled tokens.
#include <gtest/gtest.h>

#include <string>

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
      ASSERT_TRUE(msg.contains("tool_calls") && !msg["tool_calls"].empty()) << what << " -> " << r.raw;
      // The fake model may write a long map: cut by max_tokens, the last call's arguments are
      // the start of an object; a call that ended has an object.
      const bool cut = r.body["choices"][0]["finish_reason"] == "length";
      for (size_t i = 0; i < msg["tool_calls"].size(); ++i) {
        const json& call = msg["tool_calls"][i];
        EXPECT_EQ(call["function"]["name"], "nums") << r.raw;
        const std::string text = call["function"]["arguments"];
        if (cut && i + 1 == msg["tool_calls"].size()) {
          EXPECT_EQ(text.substr(0, 1), "{") << what << " -> " << r.raw;
          continue;
        }
        EXPECT_TRUE(json::parse(text, nullptr, false).is_object()) << what << " -> " << r.raw;
      }
    }
  }
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
