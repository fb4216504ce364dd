// The Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) on the fake model: the
// translation into the internal request (checked by the prompt it builds, which must equal the
// same conversation sent to /v1/chat/completions), the response and stream shapes, stop reasons,
// whole tool calls and cut ones, usage that adds up, and errors in Anthropic's shape. The request
// bodies are written here from Anthropic's documented shapes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server_harness.h"

namespace ds::testing {
namespace {

json weather_tool() {
  return json::parse(R"({"name": "get_weather", "description": "Weather in a city",
    "input_schema": {"type": "object", "properties": {
      "city": {"type": "string", "maxLength": 8},
      "unit": {"enum": ["celsius", "fahrenheit"]}},
      "required": ["city", "unit"], "additionalProperties": false}})");
}

// The same tool as chat completions declares it, key for key, so both APIs show the model the
// same definitions.
json weather_function() {
  json t = weather_tool();
  return {{"type", "function"},
          {"function", {{"name", t["name"]}, {"description", t["description"]}, {"parameters", t["input_schema"]}}}};
}

json msg_body(json extra = json::object()) {
  json body = {{"model", "fake"},
               {"max_tokens", 40},
               {"temperature", 0},
               {"messages", json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}})}};
  body.update(extra);
  return body;
}

struct AnthropicStream {
  int status = 0;
  std::vector<std::string> names;  // event: names in order
  std::vector<json> data;
  std::string raw;
};

AnthropicStream stream_messages(int port, json body) {
  body["stream"] = true;
  const HttpResult r = post(port, "/v1/messages", body);
  AnthropicStream out;
  out.status = r.status;
  out.raw = r.raw;
  size_t pos = 0;
  while (pos < r.raw.size()) {
    const size_t end = r.raw.find("\n\n", pos);
    if (end == std::string::npos) break;
    const std::string ev = r.raw.substr(pos, end - pos);
    pos = end + 2;
    if (ev.rfind("event: ", 0) != 0) continue;
    const size_t nl = ev.find('\n');
    out.names.push_back(ev.substr(7, nl - 7));
    out.data.push_back(json::parse(ev.substr(nl + 7), nullptr, false));
  }
  return out;
}

int prompt_tokens_of(const json& usage) {
  return usage["input_tokens"].get<int>() + usage["cache_read_input_tokens"].get<int>() +
         usage["cache_creation_input_tokens"].get<int>();
}

TEST(MessagesApi, AnswersWithTextBlocksAndUsageThatAddsUp) {
  EngineConfig cfg = TestServer::default_config();
  cfg.prefix.enabled = true;
  TestServer s(cfg);
  std::string system;
  for (int i = 0; i < 40; ++i) system += "Be brief. ";  // several blocks, so that some are cached
  const HttpResult r = post(s.port, "/v1/messages", msg_body({{"system", system}}));
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["type"], "message");
  EXPECT_EQ(r.body["role"], "assistant");
  EXPECT_EQ(r.body["model"], "fake");
  EXPECT_EQ(r.body["id"].get<std::string>().rfind("msg_", 0), 0u);
  ASSERT_TRUE(r.body["content"].is_array());
  ASSERT_FALSE(r.body["content"].empty()) << r.raw;
  EXPECT_EQ(r.body["content"][0]["type"], "text");
  EXPECT_EQ(r.body["stop_reason"], "max_tokens");  // the fake model never ends its turn
  EXPECT_TRUE(r.body["stop_sequence"].is_null());
  EXPECT_EQ(r.body["usage"]["output_tokens"], 40);

  const HttpResult count = post(s.port, "/v1/messages/count_tokens", msg_body({{"system", system}}));
  ASSERT_EQ(count.status, 200) << count.raw;
  EXPECT_EQ(prompt_tokens_of(r.body["usage"]), count.body["input_tokens"].get<int>());

  // The second time, the prompt is read from the prefix cache, and the counts still add up.
  const HttpResult again = post(s.port, "/v1/messages", msg_body({{"system", system}}));
  ASSERT_EQ(again.status, 200) << again.raw;
  EXPECT_GT(r.body["usage"]["cache_creation_input_tokens"].get<int>(), 0) << r.raw;
  EXPECT_GT(again.body["usage"]["cache_read_input_tokens"].get<int>(), 0) << again.raw;
  EXPECT_EQ(prompt_tokens_of(again.body["usage"]), count.body["input_tokens"].get<int>());
  EXPECT_EQ(again.body["content"], r.body["content"]);
}

// Every block type, and the system prompt as blocks, build the prompt the same conversation
// builds through chat completions.
TEST(MessagesApi, TranslatesEveryBlockLikeTheChatApi) {
  TestServer s;
  const json messages = json::parse(R"([
    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"},
                                 {"type": "text", "text": "And Rome?"}]},
    {"role": "system", "content": [{"type": "text", "text": "It is Monday."}]},
    {"role": "assistant", "content": [
      {"type": "thinking", "thinking": "the client keeps this", "signature": "x"},
      {"type": "text", "text": "Checking."},
      {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris", "unit": "celsius"}},
      {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome", "unit": "celsius"}}]},
    {"role": "user", "content": [
      {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C"},
      {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true,
       "content": [{"type": "text", "text": "no station"}]},
      {"type": "text", "text": "Thanks"}]}
  ])");
  const json anthropic = {{"model", "fake"},
                          {"max_tokens", 1},
                          {"system", json::array({{{"type", "text"}, {"text", "Rule one."}, {"cache_control", {{"type", "ephemeral"}}}},
                                                  {{"type", "text"}, {"text", "Rule two."}}})},
                          {"messages", messages},
                          {"tools", json::array({weather_tool(), {{"type", "web_search_20250305"}, {"name", "web_search"}}})},
                          {"thinking", {{"type", "adaptive"}}},
                          {"metadata", {{"user_id", "u"}}},
                          {"context_management", {{"edits", json::array()}}},
                          {"some_future_field", 1}};
  const json chat = json::parse(R"([
    {"role": "system", "content": "Rule one.\nRule two."},
    {"role": "user", "content": "Weather in Paris?\nAnd Rome?"},
    {"role": "system", "content": "It is Monday."},
    {"role": "assistant", "content": "Checking.", "tool_calls": [
      {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\",\"unit\":\"celsius\"}"}},
      {"id": "toolu_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\",\"unit\":\"celsius\"}"}}]},
    {"role": "tool", "tool_call_id": "toolu_1", "content": "18 C"},
    {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: no station"},
    {"role": "user", "content": "Thanks"}
  ])");
  const HttpResult a = post(s.port, "/v1/messages", anthropic);
  ASSERT_EQ(a.status, 200) << a.raw;
  const HttpResult c = post(s.port, "/v1/chat/completions",
                            {{"model", "fake"}, {"max_tokens", 1}, {"messages", chat}, {"tools", json::array({weather_function()})}});
  ASSERT_EQ(c.status, 200) << c.raw;
  EXPECT_EQ(prompt_tokens_of(a.body["usage"]), c.body["usage"]["prompt_tokens"].get<int>());
  const HttpResult count = post(s.port, "/v1/messages/count_tokens", anthropic);
  ASSERT_EQ(count.status, 200) << count.raw;
  EXPECT_EQ(count.body["input_tokens"], c.body["usage"]["prompt_tokens"]);
}

TEST(MessagesApi, ForcedCallIsAToolUseBlockWholeAndStreamed) {
  TestServer s;
  for (const json& choice : {json{{"type", "any"}}, json{{"type", "tool"}, {"name", "get_weather"}}}) {
    const json body = msg_body({{"max_tokens", 200}, {"tools", json::array({weather_tool()})}, {"tool_choice", choice}});
    json one = body;
    one["tool_choice"]["disable_parallel_tool_use"] = true;
    const HttpResult r = post(s.port, "/v1/messages", one);
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body["stop_reason"], "tool_use") << r.raw;
    const json& content = r.body["content"];
    ASSERT_EQ(content.size(), 1u) << r.raw;
    const json& use = content[0];
    EXPECT_EQ(use["type"], "tool_use");
    EXPECT_EQ(use["name"], "get_weather");
    EXPECT_EQ(use["id"].get<std::string>().rfind("toolu_", 0), 0u);
    ASSERT_TRUE(use["input"].is_object());
    EXPECT_TRUE(use["input"]["city"].is_string());

    const AnthropicStream st = stream_messages(s.port, one);
    ASSERT_EQ(st.status, 200) << st.raw;
    const std::vector<std::string> expected = {"message_start", "content_block_start", "content_block_delta",
                                               "content_block_stop", "message_delta", "message_stop"};
    EXPECT_EQ(st.names, expected) << st.raw;
    ASSERT_EQ(st.data.size(), expected.size());
    EXPECT_EQ(st.data[0]["message"]["usage"]["output_tokens"].is_number(), true);
    EXPECT_EQ(st.data[1]["content_block"]["type"], "tool_use");
    EXPECT_EQ(st.data[1]["content_block"]["name"], "get_weather");
    EXPECT_EQ(st.data[2]["delta"]["type"], "input_json_delta");
    EXPECT_EQ(json::parse(st.data[2]["delta"]["partial_json"].get<std::string>()), use["input"]);
    EXPECT_EQ(st.data[4]["delta"]["stop_reason"], "tool_use");
    EXPECT_EQ(st.data[4]["usage"]["output_tokens"], r.body["usage"]["output_tokens"]);
  }
}

// max_tokens ending the reply inside a call: the calls that closed before it stand as tool_use
// blocks, the cut one is dropped, the stop reason is max_tokens; streamed and whole agree.
TEST(MessagesApi, ACallCutByMaxTokensIsDroppedAndTheOnesBeforeItStand) {
  TestServer s;
  bool saw_cut_after_a_call = false, saw_cut_before_any = false;
  for (int n = 4; n <= 120; n += 2) {
    const json body =
        msg_body({{"max_tokens", n}, {"tools", json::array({weather_tool()})}, {"tool_choice", {{"type", "any"}}}});
    const HttpResult r = post(s.port, "/v1/messages", body);
    ASSERT_EQ(r.status, 200) << r.raw;
    const json& content = r.body["content"];
    int uses = 0;
    for (const json& b : content) {
      // A forced call writes no text of its own; what was cut before a call began (part of its
      // opening tag) may come back as text, as the tool parser's rules say.
      if (b["type"] == "text") {
        EXPECT_EQ(r.body["stop_reason"], "max_tokens") << r.raw;
        continue;
      }
      ASSERT_EQ(b["type"], "tool_use") << "n=" << n << " " << r.raw;
      ASSERT_TRUE(b["input"].is_object()) << r.raw;
      ++uses;
    }
    if (r.body["stop_reason"] == "max_tokens") {
      saw_cut_after_a_call = saw_cut_after_a_call || uses > 0;
      saw_cut_before_any = saw_cut_before_any || uses == 0;
    }
    const AnthropicStream st = stream_messages(s.port, body);
    ASSERT_EQ(st.status, 200) << st.raw;
    json streamed = json::array();
    for (size_t i = 0; i < st.names.size(); ++i)
      if (st.names[i] == "content_block_delta" && st.data[i]["delta"]["type"] == "input_json_delta")
        streamed.push_back(json::parse(st.data[i]["delta"]["partial_json"].get<std::string>()));
    json whole = json::array();
    for (const json& b : content)
      if (b["type"] == "tool_use") whole.push_back(b["input"]);
    EXPECT_EQ(streamed, whole) << "n=" << n << "\n" << st.raw;
    ASSERT_FALSE(st.data.empty());
    EXPECT_EQ(st.data[st.data.size() - 2]["delta"]["stop_reason"], r.body["stop_reason"]);
  }
  EXPECT_TRUE(saw_cut_before_any);
  EXPECT_TRUE(saw_cut_after_a_call) << "no max_tokens fell after a whole call: the fake model wrote one call only";
}

TEST(MessagesApi, StopSequenceEndsTheTextAndIsNamed) {
  TestServer s;
  const HttpResult free_run = post(s.port, "/v1/messages", msg_body());
  ASSERT_EQ(free_run.status, 200) << free_run.raw;
  const std::string text = free_run.body["content"][0]["text"];
  ASSERT_GT(text.size(), 12u) << text;
  const std::string stop = text.substr(6, 3);
  const HttpResult r = post(s.port, "/v1/messages", msg_body({{"stop_sequences", json::array({stop})}}));
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["stop_reason"], "stop_sequence");
  EXPECT_EQ(r.body["stop_sequence"], stop);
  const std::string cut = r.body["content"].empty() ? std::string() : r.body["content"][0]["text"].get<std::string>();
  EXPECT_EQ(cut, text.substr(0, text.find(stop)));

  const AnthropicStream st = stream_messages(s.port, msg_body({{"stop_sequences", json::array({stop})}}));
  std::string streamed;
  for (size_t i = 0; i < st.names.size(); ++i)
    if (st.names[i] == "content_block_delta") streamed += st.data[i]["delta"]["text"].get<std::string>();
  EXPECT_EQ(streamed, cut);
  EXPECT_EQ(st.data[st.data.size() - 2]["delta"]["stop_reason"], "stop_sequence");
  EXPECT_EQ(st.data[st.data.size() - 2]["delta"]["stop_sequence"], stop);
}

TEST(MessagesApi, StreamedTextEqualsTheWholeAnswer) {
  TestServer s;
  const HttpResult r = post(s.port, "/v1/messages", msg_body());
  const AnthropicStream st = stream_messages(s.port, msg_body());
  ASSERT_EQ(st.status, 200) << st.raw;
  ASSERT_GE(st.names.size(), 5u);
  EXPECT_EQ(st.names.front(), "message_start");
  EXPECT_EQ(st.names[1], "content_block_start");
  EXPECT_EQ(st.names[st.names.size() - 3], "content_block_stop");
  EXPECT_EQ(st.names[st.names.size() - 2], "message_delta");
  EXPECT_EQ(st.names.back(), "message_stop");
  std::string text;
  for (size_t i = 0; i < st.names.size(); ++i) {
    EXPECT_EQ(st.data[i]["type"], st.names[i]);
    if (st.names[i] == "content_block_delta") {
      EXPECT_EQ(st.data[i]["index"], 0);
      text += st.data[i]["delta"]["text"].get<std::string>();
    }
  }
  EXPECT_EQ(text, r.body["content"][0]["text"].get<std::string>());
  EXPECT_EQ(st.data[st.data.size() - 2]["usage"]["output_tokens"], 40);
}

TEST(MessagesApi, ErrorsTakeAnthropicsShape) {
  TestServer s;
  auto expect_error = [&](const json& body, int status, const std::string& type, const std::string& words) {
    const HttpResult r = post(s.port, "/v1/messages", body);
    EXPECT_EQ(r.status, status) << r.raw;
    EXPECT_EQ(r.body["type"], "error") << r.raw;
    EXPECT_EQ(r.body["error"]["type"], type) << r.raw;
    EXPECT_NE(r.body["error"]["message"].get<std::string>().find(words), std::string::npos) << r.raw;
  };
  json no_max = msg_body();
  no_max.erase("max_tokens");
  expect_error(no_max, 400, "invalid_request_error", "'max_tokens' is required");
  expect_error(msg_body({{"model", "nope"}}), 404, "not_found_error", "nope");
  expect_error(msg_body({{"temperature", 1.5}}), 400, "invalid_request_error", "[0, 1]");
  expect_error(msg_body({{"messages", json::array({{{"role", "tool"}, {"content", "x"}}})}}), 400,
               "invalid_request_error", "messages[0].role");
  expect_error(msg_body({{"messages", json::array({{{"role", "user"},
                                                   {"content", json::array({{{"type", "image"}, {"source", json::object()}}})}}})}}),
               400, "invalid_request_error", "\"image\"");
  expect_error(msg_body({{"tools", json::array({weather_tool()})}, {"tool_choice", {{"type", "tool"}, {"name", "other"}}}}),
               400, "invalid_request_error", "'other'");
  expect_error(msg_body({{"max_tokens", 5000}}), 400, "invalid_request_error", "max_model_len");
  const HttpResult bad_json = http_call(s.port, "POST", "/v1/messages", "{not json");
  EXPECT_EQ(bad_json.status, 400);
  EXPECT_EQ(bad_json.body["type"], "error") << bad_json.raw;
}

TEST(MessagesApi, XApiKeyAuthenticates) {
  server::ServerOptions o = TestServer::default_options();
  o.api_key = "sekrit";
  TestServer s(TestServer::default_config(), o);
  EXPECT_EQ(post(s.port, "/v1/messages", msg_body(), {{"x-api-key", "sekrit"}, {"anthropic-version", "2023-06-01"}}).status, 200);
  EXPECT_EQ(post(s.port, "/v1/messages", msg_body(), {{"Authorization", "Bearer sekrit"}}).status, 200);
  const HttpResult wrong = post(s.port, "/v1/messages", msg_body(), {{"x-api-key", "nope"}});
  EXPECT_EQ(wrong.status, 401);
  EXPECT_EQ(wrong.body["error"]["type"], "authentication_error") << wrong.raw;
  EXPECT_EQ(post(s.port, "/v1/messages", msg_body()).status, 401);
  // The key in either header works on OpenAI's routes too.
  EXPECT_EQ(post(s.port, "/v1/chat/completions",
                 {{"model", "fake"}, {"max_tokens", 2}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}},
                 {{"x-api-key", "sekrit"}})
                .status,
            200);
}

}  // namespace
}  // namespace ds::testing
