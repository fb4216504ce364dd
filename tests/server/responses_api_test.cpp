// POST /v1/responses and GET / DELETE /v1/responses/{id} (server/responses/): the translation of
// each input item and tool type into the internal request, the response object and the streamed
// event sequence, previous_response_id against the same conversation sent whole, the store's
// bounds, a parallel call cut by max_output_tokens, and the errors. Request bodies are written
// here in the API's documented shapes.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "../support/missing_dependency.h"
#include "../support/run_capture.h"
#include "server/api_error.h"
#include "server/responses/responses_request.h"
#include "server/responses/responses_response.h"
#include "server/responses/responses_store.h"
#include "server_harness.h"

namespace ds::testing {
namespace {

using server::ApiError;
using server::GenerationRequest;
using server::parse_responses_request;
using server::ResponsesRequest;
using server::ResponsesStore;
using server::StoredResponse;

// ---- translation ----

ResponsesRequest parse(const json& body) {
  static ResponsesStore empty(16, 1 << 20);
  return parse_responses_request(body.dump(), empty);
}

// The 400 (or other refusal) a body gets.
ApiError refusal(const json& body, ResponsesStore* store = nullptr) {
  ResponsesStore empty(16, 1 << 20);
  try {
    parse_responses_request(body.dump(), store ? *store : empty);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body.dump();
  return ApiError(0, "", "");
}

json function_tool(const std::string& name, json parameters = nullptr) {
  json t = {{"type", "function"}, {"name", name}, {"description", "The " + name + " tool"}};
  t["parameters"] = parameters.is_null() ? json{{"type", "object"},
                                               {"properties", {{"path", {{"type", "string"}}}}},
                                               {"required", {"path"}},
                                               {"additionalProperties", false}}
                                         : parameters;
  t["strict"] = true;
  return t;
}

TEST(ResponsesTranslation, StringInputIsOneUserTurnAfterTheInstructions) {
  const ResponsesRequest r = parse({{"model", "fake"}, {"instructions", "Be brief."}, {"input", "Hello"}});
  const GenerationRequest& g = r.g;
  EXPECT_TRUE(g.chat);
  EXPECT_EQ(g.api, server::Api::Responses);
  EXPECT_EQ(g.prompt_field, "input");
  EXPECT_EQ(g.max_tokens_field, "max_output_tokens");
  ASSERT_EQ(g.messages.size(), 2u);
  EXPECT_EQ(g.messages[0].role, "system");
  EXPECT_EQ(g.messages[0].content, "Be brief.");
  EXPECT_EQ(g.messages[1].role, "user");
  EXPECT_EQ(g.messages[1].content, "Hello");
  // The instructions are not part of what a stored response keeps.
  ASSERT_EQ(r.conversation.size(), 1u);
  EXPECT_EQ(r.conversation[0].content, "Hello");
  EXPECT_TRUE(r.store);
  EXPECT_EQ(g.tool_choice, server::ToolChoice::None);
  EXPECT_FALSE(g.max_tokens.has_value());
}

TEST(ResponsesTranslation, EveryInputItemBecomesItsTurn) {
  const json input = json::parse(R"([
    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Use the tools."}]},
    {"role": "user", "content": [{"type": "input_text", "text": "Read a.txt"}, {"type": "input_text", "text": "and b.txt"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
    {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
     "content": [{"type": "output_text", "text": "Reading both.", "annotations": []}]},
    {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "read", "arguments": "{\"path\": \"a.txt\"}", "status": "completed"},
    {"type": "function_call", "id": "fc_2", "call_id": "call_b", "name": "read", "arguments": "{\"path\": \"b.txt\"}"},
    {"type": "function_call_output", "call_id": "call_a", "output": "alpha"},
    {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "beta"}]},
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "x"}},
    {"type": "function_call", "call_id": "call_c", "name": "read", "arguments": "{\"path\": \"c.txt\"}"},
    {"type": "function_call_output", "call_id": "call_c", "output": "gamma"},
    {"type": "custom_tool_call", "call_id": "call_d", "name": "apply_patch", "input": "*** Begin Patch"},
    {"type": "custom_tool_call_output", "call_id": "call_d", "output": "Done"},
    {"type": "message", "role": "system", "content": "Now answer."},
    {"type": "message", "role": "user", "content": "Summarize."}
  ])");
  const ResponsesRequest r = parse({{"input", input}, {"tools", json::array({function_tool("read")})}});
  const auto& m = r.g.messages;
  ASSERT_EQ(m.size(), 11u);
  EXPECT_EQ(m[0].role, "system");
  EXPECT_EQ(m[0].content, "Use the tools.");  // developer is the system role
  EXPECT_EQ(m[1].role, "user");
  EXPECT_EQ(m[1].content, "Read a.txt\nand b.txt");
  // The assistant message and the calls after it are one turn; reasoning is dropped.
  EXPECT_EQ(m[2].role, "assistant");
  EXPECT_EQ(m[2].content, "Reading both.");
  ASSERT_EQ(m[2].tool_calls.size(), 2u);
  EXPECT_EQ(m[2].tool_calls[0].id, "call_a");
  EXPECT_EQ(m[2].tool_calls[0].name, "read");
  EXPECT_EQ(m[2].tool_calls[0].arguments, "{\"path\": \"a.txt\"}");
  EXPECT_EQ(m[2].tool_calls[1].id, "call_b");
  EXPECT_EQ(m[3].role, "tool");
  EXPECT_EQ(m[3].tool_call_id, "call_a");
  EXPECT_EQ(m[3].content, "alpha");
  EXPECT_EQ(m[4].role, "tool");
  EXPECT_EQ(m[4].content, "beta");
  // A call after a result opens an assistant turn of its own (the web search item is dropped).
  EXPECT_EQ(m[5].role, "assistant");
  EXPECT_EQ(m[5].content, "");
  ASSERT_EQ(m[5].tool_calls.size(), 1u);
  EXPECT_EQ(m[5].tool_calls[0].id, "call_c");
  EXPECT_EQ(m[6].role, "tool");
  EXPECT_EQ(m[6].content, "gamma");
  EXPECT_EQ(m[7].role, "assistant");
  ASSERT_EQ(m[7].tool_calls.size(), 1u);
  EXPECT_EQ(m[7].tool_calls[0].name, "apply_patch");
  EXPECT_EQ(m[7].tool_calls[0].arguments, "*** Begin Patch");
  EXPECT_EQ(m[8].role, "tool");
  EXPECT_EQ(m[8].tool_call_id, "call_d");
  EXPECT_EQ(m[9].role, "system");
  EXPECT_EQ(m[10].content, "Summarize.");
}

TEST(ResponsesTranslation, ToolsFunctionsAndNamespacesFlatOthersLeftOut) {
  const json tools = json::array(
      {function_tool("shell"),
       {{"type", "web_search"}, {"external_web_access", false}},
       {{"type", "namespace"},
        {"name", "mcp__files__"},
        {"description", "The files server."},
        {"tools", json::array({function_tool("read"), function_tool("shell"),
                               {{"type", "custom"}, {"name", "free"}, {"description", "free-form"}}})}},
       {{"type", "file_search"}, {"vector_store_ids", json::array({"vs_1"})}},
       {{"type", "custom"}, {"name", "apply_patch"}, {"description", "patch"}, {"format", {{"type", "text"}}}},
       {{"type", "local_shell"}},
       {{"type", "code_interpreter"}, {"container", {{"type", "auto"}}}},
       {{"type", "image_generation"}},
       {{"type", "mcp"}, {"server_label", "x"}, {"server_url", "https://example.invalid"}}});
  const ResponsesRequest r = parse({{"input", "hi"}, {"tools", tools}, {"tool_choice", "auto"}});
  const GenerationRequest& g = r.g;
  ASSERT_EQ(g.tools.size(), 3u);
  EXPECT_EQ(g.tools[0].name, "shell");
  EXPECT_EQ(g.tools[1].name, "read");  // unique: shown by its own name
  EXPECT_EQ(g.tools[2].name, "mcp__files____shell");  // shared with a top-level tool: qualified
  EXPECT_EQ(g.tool_choice, server::ToolChoice::Auto);
  ASSERT_EQ(r.namespaced.size(), 2u);
  EXPECT_EQ(r.namespaced.at("read").space, "mcp__files__");
  EXPECT_EQ(r.namespaced.at("read").name, "read");
  EXPECT_EQ(r.namespaced.at("mcp__files____shell").name, "shell");
  // The template is shown the function tools in chat's shape, the namespace's description first.
  const json shown = json::parse(g.tools_json);
  ASSERT_EQ(shown.size(), 3u);
  EXPECT_EQ(shown[1]["type"], "function");
  EXPECT_EQ(shown[1]["function"]["name"], "read");
  EXPECT_EQ(shown[1]["function"]["description"], "The files server.\n\nThe read tool");
  EXPECT_EQ(shown[1]["function"]["parameters"]["required"], json::array({"path"}));
  // The response repeats the tools as the client sent them.
  EXPECT_EQ(r.echo["tools"].size(), tools.size());

  // A call passed back with its namespace is the flat name the model saw.
  const json input = json::array({{{"type", "function_call"}, {"call_id", "c1"}, {"name", "shell"},
                                   {"namespace", "mcp__files__"}, {"arguments", "{}"}}});
  const ResponsesRequest back = parse({{"input", input}, {"tools", tools}});
  ASSERT_EQ(back.g.messages.size(), 1u);
  EXPECT_EQ(back.g.messages[0].tool_calls[0].name, "mcp__files____shell");
}

TEST(ResponsesTranslation, OnlyHostedToolsMeansNoCalls) {
  const ResponsesRequest r =
      parse({{"input", "hi"}, {"tools", json::array({{{"type", "web_search"}}})}, {"tool_choice", "auto"}});
  EXPECT_TRUE(r.g.tools.empty());
  EXPECT_TRUE(r.g.tools_json.empty());
  EXPECT_EQ(r.g.tool_choice, server::ToolChoice::None);
}

TEST(ResponsesTranslation, ToolChoiceAndParallelCalls) {
  const json tools = json::array({function_tool("read"), function_tool("write"),
                                  {{"type", "namespace"}, {"name", "ns"}, {"description", ""},
                                   {"tools", json::array({function_tool("grep")})}}});
  EXPECT_EQ(parse({{"input", "x"}, {"tools", tools}}).g.tool_choice, server::ToolChoice::Auto);
  EXPECT_EQ(parse({{"input", "x"}, {"tools", tools}, {"tool_choice", "none"}}).g.tool_choice, server::ToolChoice::None);
  EXPECT_EQ(parse({{"input", "x"}, {"tools", tools}, {"tool_choice", "required"}}).g.tool_choice,
            server::ToolChoice::Required);
  const ResponsesRequest named =
      parse({{"input", "x"}, {"tools", tools}, {"tool_choice", {{"type", "function"}, {"name", "write"}}},
             {"parallel_tool_calls", false}});
  EXPECT_EQ(named.g.tool_choice, server::ToolChoice::Named);
  EXPECT_EQ(named.g.tool_choice_name, "write");
  EXPECT_FALSE(named.g.parallel_tool_calls);
  const ResponsesRequest in_space = parse({{"input", "x"}, {"tools", tools}, {"tool_choice", {{"type", "function"}, {"name", "grep"}}}});
  EXPECT_EQ(in_space.g.tool_choice_name, "grep");
  EXPECT_TRUE(parse({{"input", "x"}, {"tools", tools}}).g.parallel_tool_calls);
}

TEST(ResponsesTranslation, TextFormatIsChatsResponseFormat) {
  EXPECT_EQ(parse({{"input", "x"}, {"text", {{"format", {{"type", "text"}}}}}}).g.response_format,
            server::ResponseFormat::Text);
  EXPECT_EQ(parse({{"input", "x"}, {"text", {{"format", {{"type", "json_object"}}}}}}).g.response_format,
            server::ResponseFormat::JsonObject);
  // Written as text: nlohmann::json would sort the properties.
  ResponsesStore store(1, 1024);
  const ResponsesRequest r = parse_responses_request(R"({"input": "x", "text": {"format": {"type": "json_schema",
      "name": "thing", "strict": true, "schema": {"type": "object", "properties": {"b": {"type": "integer"},
      "a": {"type": "string"}}}}, "verbosity": "low"}})",
                                                     store);
  EXPECT_EQ(r.g.response_format, server::ResponseFormat::JsonSchema);
  // The schema keeps its property order (the order the output writes them in).
  EXPECT_EQ(r.g.response_schema["properties"].begin().key(), "b");
  EXPECT_EQ(r.echo["text"]["format"]["name"], "thing");
}

TEST(ResponsesTranslation, SamplingAndIgnoredFields) {
  const ResponsesRequest r = parse(json::parse(R"({
    "model": "fake", "input": "x", "max_output_tokens": 17, "temperature": 0.5, "top_p": 0.9, "stream": true,
    "store": false, "prompt_cache_key": "session-1", "include": ["reasoning.encrypted_content"],
    "reasoning": {"effort": "high", "summary": "auto"}, "metadata": {"k": "v"}, "user": "u", "truncation": "auto",
    "service_tier": "auto", "safety_identifier": "s", "top_logprobs": 0, "some_future_field": {"x": 1}})"));
  EXPECT_EQ(r.g.model, "fake");
  EXPECT_EQ(r.g.max_tokens, 17);
  EXPECT_FLOAT_EQ(r.g.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.g.sampling.top_p, 0.9f);
  EXPECT_TRUE(r.g.stream);
  EXPECT_FALSE(r.store);
  EXPECT_EQ(r.prompt_cache_key, "session-1");
  EXPECT_EQ(r.echo["metadata"]["k"], "v");
  EXPECT_EQ(r.echo["max_output_tokens"], 17);
}

TEST(ResponsesTranslation, PreviousResponseIdPrependsTheStoredConversation) {
  ResponsesStore store(4, 1 << 20);
  StoredResponse prev;
  prev.response = {{"id", "resp_prev"}};
  prev.conversation = {{"user", "first"}, {"assistant", "answer"}};
  prev.conversation.back().tool_calls.push_back({"call_1", "read", "{}"});
  prev.conversation.push_back({"tool", "result"});
  ASSERT_TRUE(store.put("resp_prev", prev));
  const ResponsesRequest r = parse_responses_request(
      json({{"previous_response_id", "resp_prev"}, {"instructions", "New rules."}, {"input", "second"}}).dump(), store);
  const auto& m = r.g.messages;
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].content, "New rules.");
  EXPECT_EQ(m[1].content, "first");
  EXPECT_EQ(m[2].tool_calls.size(), 1u);
  EXPECT_EQ(m[4].content, "second");
  EXPECT_EQ(r.conversation.size(), 4u);  // without the instructions
  // No input: the stored conversation alone.
  EXPECT_EQ(parse_responses_request(json({{"previous_response_id", "resp_prev"}}).dump(), store).g.messages.size(), 3u);
  const ApiError e = refusal({{"previous_response_id", "resp_gone"}, {"input", "x"}}, &store);
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.param, "previous_response_id");
  EXPECT_NE(std::string(e.what()).find("resp_gone"), std::string::npos) << e.what();
}

TEST(ResponsesTranslation, RefusalsNameTheField) {
  struct Case {
    json body;
    std::string param, says;
  };
  const json tool = function_tool("read");
  const std::vector<Case> cases = {
      {json::object(), "input", "'input' is required"},
      {{{"input", 7}}, "input", "must be a string or an array"},
      {{{"input", json::array()}}, "input", "holds no messages"},
      {{{"input", json::array({"hi"})}}, "input", "'input[0]' must be an object"},
      {{{"input", json::array({{{"content", "x"}}})}}, "input", "'input[0].type' is required"},
      {{{"input", json::array({{{"role", "wizard"}, {"content", "x"}}})}}, "input", "wizard"},
      {{{"input", json::array({{{"role", "user"}}})}}, "input", "'input[0].content' is required"},
      {{{"input", json::array({{{"role", "user"}, {"content", json::array({{{"type", "input_image"}, {"image_url", "data:"}}})}}})}},
       "input", "input_image"},
      {{{"input", json::array({{{"role", "user"}, {"content", json::array({{{"type", "input_file"}, {"file_id", "f"}}})}}})}},
       "input", "text only"},
      {{{"input", json::array({{{"role", "user"}, {"content", json::array({{{"type", "input_text"}}})}}})}}, "input",
       "'input[0].content[0].text' is required"},
      {{{"input", json::array({{{"type", "function_call"}, {"name", "read"}, {"arguments", "{}"}}})}}, "input",
       "'input[0].call_id' is required"},
      {{{"input", json::array({{{"type", "function_call"}, {"call_id", "c"}, {"name", "read"}, {"arguments", 5}}})}},
       "input", "arguments"},
      {{{"input", json::array({{{"type", "function_call_output"}, {"call_id", "c"}}})}}, "input", "'input[0].output' is required"},
      {{{"input", json::array({{{"type", "function_call_output"}, {"call_id", "c"},
                                {"output", json::array({{{"type", "input_image"}}})}}})}},
       "input", "input_image"},
      {{{"input", json::array({{{"type", "item_reference"}, {"id", "msg_1"}}})}}, "input", "item_reference"},
      {{{"input", json::array({{{"type", "hologram"}}})}}, "input", "hologram"},
      {{{"input", "x"}, {"instructions", 5}}, "instructions", "must be a string"},
      {{{"input", "x"}, {"max_output_tokens", 0}}, "max_output_tokens", "at least 1"},
      {{{"input", "x"}, {"max_output_tokens", "9"}}, "max_output_tokens", "must be an integer"},
      {{{"input", "x"}, {"temperature", 3}}, "temperature", "[0, 2]"},
      {{{"input", "x"}, {"top_p", 0}}, "top_p", "(0, 1]"},
      {{{"input", "x"}, {"stream", "yes"}}, "stream", "boolean"},
      {{{"input", "x"}, {"store", 1}}, "store", "boolean"},
      {{{"input", "x"}, {"metadata", "m"}}, "metadata", "object"},
      {{{"input", "x"}, {"background", true}}, "background", "not supported"},
      {{{"input", "x"}, {"conversation", "conv_1"}}, "conversation", "not supported"},
      {{{"input", "x"}, {"tools", "read"}}, "tools", "must be an array"},
      {{{"input", "x"}, {"tools", json::array({{{"name", "read"}}})}}, "tools", "'tools[0].type' is required"},
      {{{"input", "x"}, {"tools", json::array({{{"type", "function"}}})}}, "tools", "'tools[0].name' is required"},
      {{{"input", "x"}, {"tools", json::array({function_tool("bad name")})}}, "tools", "bad name"},
      {{{"input", "x"}, {"tools", json::array({tool, tool})}}, "tools", "repeats"},
      {{{"input", "x"}, {"tools", json::array({function_tool("f", {{"type", "string"}})})}}, "tools", "JSON object"},
      {{{"input", "x"}, {"tools", json::array({{{"type", "namespace"}, {"name", "n"}, {"tools", 3}}})}}, "tools",
       "'tools[0].tools' must be an array"},
      {{{"input", "x"}, {"tool_choice", "required"}}, "tool_choice", "declares no 'tools'"},
      {{{"input", "x"}, {"tools", json::array({tool})}, {"tool_choice", "sometimes"}}, "tool_choice", "sometimes"},
      {{{"input", "x"}, {"tools", json::array({tool})}, {"tool_choice", {{"type", "function"}, {"name", "nope"}}}},
       "tool_choice", "nope"},
      {{{"input", "x"}, {"tools", json::array({tool})}, {"tool_choice", {{"type", "web_search"}}}}, "tool_choice",
       "web_search"},
      {{{"input", "x"}, {"parallel_tool_calls", "no"}}, "parallel_tool_calls", "boolean"},
      {{{"input", "x"}, {"text", "json"}}, "text", "must be an object"},
      {{{"input", "x"}, {"text", {{"format", {{"type", "xml"}}}}}}, "text.format", "xml"},
      {{{"input", "x"}, {"text", {{"format", {{"type", "json_schema"}, {"name", "n"}}}}}}, "text.format.schema",
       "JSON schema"},
      {{{"input", "x"},
        {"tools", json::array({tool})},
        {"tool_choice", "required"},
        {"text", {{"format", {{"type", "json_object"}}}}}},
       "text.format", "forced tool call"},
      {{{"input", "x"}, {"truncation", "sometimes"}}, "truncation", "auto"},
  };
  for (const Case& c : cases) {
    const ApiError e = refusal(c.body);
    EXPECT_EQ(e.status, 400) << c.body.dump();
    EXPECT_EQ(e.param, c.param) << c.body.dump() << " -> " << e.what();
    EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << c.body.dump() << " -> " << e.what();
  }
  // Not JSON at all.
  ResponsesStore store(1, 1024);
  EXPECT_THROW(parse_responses_request("{", store), ApiError);
  EXPECT_THROW(parse_responses_request("[1]", store), ApiError);
}

// ---- the store ----

StoredResponse stored_of(size_t text_bytes) {
  StoredResponse s;
  s.response = {{"id", "x"}};
  s.conversation = {{"user", std::string(text_bytes, 'a')}};
  return s;
}

TEST(ResponsesStore, BoundedByCountLeastRecentlyUsedFirst) {
  ResponsesStore store(3, 1 << 20);
  for (const char* id : {"a", "b", "c"}) ASSERT_TRUE(store.put(id, stored_of(10)));
  ASSERT_NE(store.get("a"), nullptr);  // a is now the most recently used
  ASSERT_TRUE(store.put("d", stored_of(10)));
  EXPECT_EQ(store.count(), 3u);
  EXPECT_EQ(store.get("b"), nullptr);  // the least recently used went
  EXPECT_NE(store.get("a"), nullptr);
  EXPECT_NE(store.get("c"), nullptr);
  EXPECT_NE(store.get("d"), nullptr);
  EXPECT_TRUE(store.erase("c"));
  EXPECT_FALSE(store.erase("c"));
  EXPECT_EQ(store.count(), 2u);
}

TEST(ResponsesStore, BoundedByBytes) {
  const size_t one = ResponsesStore::size_of(stored_of(1000));
  ResponsesStore store(100, one * 2 + one / 2);
  ASSERT_TRUE(store.put("a", stored_of(1000)));
  ASSERT_TRUE(store.put("b", stored_of(1000)));
  EXPECT_EQ(store.bytes(), 2 * one);
  ASSERT_TRUE(store.put("c", stored_of(1000)));
  EXPECT_EQ(store.count(), 2u);
  EXPECT_EQ(store.get("a"), nullptr);
  EXPECT_LE(store.bytes(), store.max_bytes());
  // Larger than the whole bound: not kept, and nothing else is dropped for it.
  EXPECT_FALSE(store.put("huge", stored_of(one * 3)));
  EXPECT_EQ(store.count(), 2u);
  EXPECT_EQ(store.get("huge"), nullptr);
  // Replacing an entry counts it once.
  ASSERT_TRUE(store.put("b", stored_of(1000)));
  EXPECT_EQ(store.bytes(), 2 * one);
  ResponsesStore none(0, 1 << 20);
  EXPECT_FALSE(none.put("a", stored_of(1)));
}

// ---- over HTTP ----

struct Event {
  std::string name;  // the `event:` line
  json data;
};

// The `event:` / `data:` blocks of an SSE text; comments (keep-alives) skipped.
std::vector<Event> events_of(const std::string& raw) {
  std::vector<Event> events;
  size_t start = 0, end;
  while ((end = raw.find("\n\n", start)) != std::string::npos) {
    const std::string block = raw.substr(start, end - start);
    start = end + 2;
    if (block.rfind(":", 0) == 0) continue;
    Event e;
    size_t line_start = 0;
    while (line_start < block.size()) {
      size_t line_end = block.find('\n', line_start);
      if (line_end == std::string::npos) line_end = block.size();
      const std::string line = block.substr(line_start, line_end - line_start);
      if (line.rfind("event: ", 0) == 0) e.name = line.substr(7);
      if (line.rfind("data: ", 0) == 0) e.data = json::parse(line.substr(6), nullptr, false);
      line_start = line_end + 1;
    }
    events.push_back(std::move(e));
  }
  return events;
}

struct ResponsesStream {
  int status = 0;
  std::vector<Event> events;
  std::string raw;
};

ResponsesStream stream_responses(int port, json body) {
  body["stream"] = true;
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120, 0);
  ResponsesStream out;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/responses";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    out.raw.append(d, n);
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  cli.send(req, res, err);
  out.status = res.status;
  if (res.status != 200 && out.raw.empty()) out.raw = res.body;
  out.events = events_of(out.raw);
  return out;
}

HttpResult http_delete(int port, const std::string& path) {
  httplib::Client cli("127.0.0.1", port);
  httplib::Result r = cli.Delete(path.c_str());
  HttpResult out;
  if (!r) return out;
  out.status = r->status;
  out.raw = r->body;
  out.body = json::parse(r->body, nullptr, false);
  return out;
}

json weather_tool() {
  return json::parse(R"({"type": "function", "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
      "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"], "additionalProperties": false},
    "strict": true})");
}

json time_tool() {
  return json::parse(R"({"type": "function", "name": "get_time",
    "parameters": {"type": "object", "properties": {"tz": {"enum": ["UTC", "CET"]}},
                   "required": ["tz"], "additionalProperties": false}})");
}

json body_of(json extra = json::object()) {
  json b = {{"model", "fake"}, {"input", "Weather in Paris?"}, {"temperature", 0}, {"max_output_tokens", 12}};
  b.update(extra);
  return b;
}

// The checks every response object passes.
void expect_response_shape(const json& r) {
  EXPECT_EQ(r["object"], "response") << r.dump();
  EXPECT_EQ(r["id"].get<std::string>().rfind("resp_", 0), 0u) << r.dump();
  EXPECT_TRUE(r["created_at"].is_number_integer());
  EXPECT_EQ(r["model"], "fake");
  EXPECT_TRUE(r["error"].is_null());
  EXPECT_TRUE(r["tools"].is_array());
  EXPECT_TRUE(r.contains("tool_choice"));
  EXPECT_TRUE(r.contains("parallel_tool_calls"));
  EXPECT_TRUE(r.contains("temperature"));
  EXPECT_TRUE(r.contains("top_p"));
  EXPECT_TRUE(r.contains("instructions"));
  EXPECT_TRUE(r.contains("metadata"));
  EXPECT_TRUE(r["text"]["format"].is_object());
  const json& u = r["usage"];
  EXPECT_GT(u["input_tokens"].get<int>(), 0);
  EXPECT_GE(u["input_tokens_details"]["cached_tokens"].get<int>(), 0);
  EXPECT_EQ(u["output_tokens_details"]["reasoning_tokens"], 0);
  EXPECT_EQ(u["total_tokens"].get<int>(), u["input_tokens"].get<int>() + u["output_tokens"].get<int>());
  for (const json& item : r["output"]) {
    const std::string type = item["type"];
    if (type == "message") {
      EXPECT_EQ(item["id"].get<std::string>().rfind("msg_", 0), 0u);
      EXPECT_EQ(item["role"], "assistant");
      ASSERT_EQ(item["content"].size(), 1u);
      EXPECT_EQ(item["content"][0]["type"], "output_text");
      EXPECT_EQ(item["content"][0]["annotations"], json::array());
    } else {
      EXPECT_EQ(type, "function_call");
      EXPECT_EQ(item["id"].get<std::string>().rfind("fc_", 0), 0u);
      EXPECT_EQ(item["status"], "completed");
      EXPECT_TRUE(item["call_id"].is_string());
      EXPECT_TRUE(json::parse(item["arguments"].get<std::string>()).is_object()) << item.dump();
    }
  }
}

TEST(ResponsesServer, TextCutByMaxOutputTokensIsIncomplete) {
  TestServer s;
  const HttpResult r = post(s.port, "/v1/responses", body_of({{"instructions", "Be brief."}, {"max_output_tokens", 5}}));
  ASSERT_EQ(r.status, 200) << r.raw;
  expect_response_shape(r.body);
  EXPECT_EQ(r.body["status"], "incomplete");
  EXPECT_EQ(r.body["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(r.body["usage"]["output_tokens"], 5);
  EXPECT_EQ(r.body["instructions"], "Be brief.");
  EXPECT_EQ(r.body["max_output_tokens"], 5);
  EXPECT_EQ(r.body["store"], true);
  ASSERT_EQ(r.body["output"].size(), 1u);
  EXPECT_EQ(r.body["output"][0]["status"], "incomplete");
}

TEST(ResponsesServer, JsonSchemaCompletes) {
  TestServer s;
  const json schema = weather_tool()["parameters"];
  const HttpResult r = post(s.port, "/v1/responses",
                            body_of({{"max_output_tokens", 200},
                                     {"text", {{"format", {{"type", "json_schema"}, {"name", "w"}, {"schema", schema}}}}}}));
  ASSERT_EQ(r.status, 200) << r.raw;
  expect_response_shape(r.body);
  EXPECT_EQ(r.body["status"], "completed");
  EXPECT_TRUE(r.body["incomplete_details"].is_null());
  const json v = json::parse(r.body["output"][0]["content"][0]["text"].get<std::string>());
  EXPECT_TRUE(v["unit"] == "celsius" || v["unit"] == "fahrenheit") << v.dump();
  EXPECT_EQ(r.body["output"][0]["status"], "completed");
}

// The types in order and the sequence numbers 0, 1, 2, ...; each `event:` line names its data's type.
std::vector<std::string> checked_types(const ResponsesStream& st) {
  std::vector<std::string> types;
  for (size_t i = 0; i < st.events.size(); ++i) {
    const Event& e = st.events[i];
    EXPECT_EQ(e.data["sequence_number"], int(i)) << st.raw;
    EXPECT_EQ(e.data["type"], e.name) << st.raw;
    types.push_back(e.name);
  }
  return types;
}

// ---- the writer on its own: what the fake model cannot make happen ----

std::shared_ptr<server::ResponsesMeta> meta_of(const json& body) {
  ResponsesRequest r = parse(body);
  auto meta = std::make_shared<server::ResponsesMeta>();
  meta->id = "resp_test";
  meta->created_at = 1;
  meta->model = "fake";
  meta->echo = r.echo;
  meta->namespaced = r.namespaced;
  meta->store = r.store;
  meta->conversation = r.conversation;
  return meta;
}

ResponsesStream written(const std::string& raw) { return {200, events_of(raw), raw}; }

TEST(ResponsesEvents, AnEngineErrorFailsTheResponse) {
  server::ResponseWriter w(meta_of({{"input", "x"}}), true);
  std::string raw = w.open();
  raw += w.add("Hel", {});
  raw += w.add("lo", {});
  server::GenerationOutcome o;
  o.reason = FinishReason::Error;
  o.error = "the engine stopped";
  raw += w.finish(o, server::Usage{10, 2, 0});
  const ResponsesStream st = written(raw);
  const std::vector<std::string> want = {"response.created",          "response.in_progress",
                                         "response.output_item.added", "response.content_part.added",
                                         "response.output_text.delta", "response.output_text.delta",
                                         "response.output_text.done",  "response.content_part.done",
                                         "response.output_item.done",  "response.failed"};
  EXPECT_EQ(checked_types(st), want) << raw;
  const json& r = st.events.back().data["response"];
  EXPECT_EQ(r["status"], "failed");
  EXPECT_EQ(r["error"]["code"], "server_error");
  EXPECT_EQ(r["error"]["message"], "the engine stopped");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "Hello");
  EXPECT_EQ(r["output"][0]["status"], "incomplete");
  EXPECT_TRUE(w.finished());
  // A failed response is not kept: there is nothing to continue.
  ResponsesStore store(4, 1 << 20);
  server::store_response(store, *meta_of({{"input", "x"}}), w);
  EXPECT_EQ(store.count(), 0u);
}

TEST(ResponsesEvents, TextAfterACallIsAMessageOfItsOwnAndNamespacesComeBack) {
  const json tools = json::array({{{"type", "namespace"}, {"name", "fs"}, {"description", ""},
                                   {"tools", json::array({function_tool("read")})}},
                                  function_tool("fs__read")});
  auto meta = meta_of({{"input", "x"}, {"tools", tools}});
  ASSERT_EQ(meta->namespaced.count("read"), 1u);
  server::ResponseWriter w(meta, true);
  std::string raw = w.open();
  raw += w.add("Reading.", {{"call_1", "read", "{\"path\": \"a\"}"}});
  raw += w.add("", {{"call_2", "fs__read", "{}"}});
  raw += w.add("Done.", {});
  server::GenerationOutcome o;
  o.reason = FinishReason::Stop;
  o.called_tools = true;
  raw += w.finish(o, server::Usage{10, 5, 4});
  const ResponsesStream st = written(raw);
  checked_types(st);
  const json& r = st.events.back().data["response"];
  EXPECT_EQ(st.events.back().name, "response.completed");
  ASSERT_EQ(r["output"].size(), 4u) << raw;
  EXPECT_EQ(r["output"][0]["type"], "message");
  EXPECT_EQ(r["output"][1]["name"], "read");
  EXPECT_EQ(r["output"][1]["namespace"], "fs");
  EXPECT_EQ(r["output"][1]["call_id"], "call_1");
  EXPECT_EQ(r["output"][2]["name"], "fs__read");  // a top-level tool: no namespace
  EXPECT_FALSE(r["output"][2].contains("namespace"));
  EXPECT_EQ(r["output"][3]["content"][0]["text"], "Done.");
  EXPECT_EQ(r["usage"]["input_tokens_details"]["cached_tokens"], 4);
  // Every output_index the events name is the item's place in the final output.
  for (const Event& e : st.events)
    if (e.data.contains("item")) {
      EXPECT_EQ(e.data["item"]["id"], r["output"][e.data["output_index"].get<size_t>()]["id"]);
    }
  // The stored conversation: the input, then one assistant turn with the calls as the model named them.
  const StoredResponse kept = w.stored();
  ASSERT_EQ(kept.conversation.size(), 2u);
  EXPECT_EQ(kept.conversation[1].content, "Reading.Done.");
  ASSERT_EQ(kept.conversation[1].tool_calls.size(), 2u);
  EXPECT_EQ(kept.conversation[1].tool_calls[0].name, "read");
  EXPECT_EQ(kept.conversation[1].tool_calls[1].id, "call_2");
}

TEST(ResponsesEvents, NothingWrittenIsOneEmptyMessage) {
  server::ResponseWriter w(meta_of({{"input", "x"}}), false);
  EXPECT_EQ(w.open(), "");  // not streaming: no event text
  server::GenerationOutcome o;
  o.reason = FinishReason::Stop;
  EXPECT_EQ(w.finish(o, server::Usage{3, 1, 0}), "");
  const json r = json::parse(w.response().dump());
  ASSERT_EQ(r["output"].size(), 1u);
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "");
  EXPECT_EQ(r["status"], "completed");
}

TEST(ResponsesServer, StreamedTextFollowsTheDocumentedSequence) {
  TestServer s;
  const json body = body_of({{"max_output_tokens", 8}});
  const ResponsesStream st = stream_responses(s.port, body);
  ASSERT_EQ(st.status, 200) << st.raw;
  const std::vector<std::string> types = checked_types(st);
  ASSERT_GE(types.size(), 9u) << st.raw;
  EXPECT_EQ(types[0], "response.created");
  EXPECT_EQ(types[1], "response.in_progress");
  EXPECT_EQ(types[2], "response.output_item.added");
  EXPECT_EQ(types[3], "response.content_part.added");
  size_t i = 4;
  std::string text;
  while (i < types.size() && types[i] == "response.output_text.delta") {
    const json& d = st.events[i].data;
    EXPECT_EQ(d["output_index"], 0);
    EXPECT_EQ(d["content_index"], 0);
    EXPECT_EQ(d["item_id"], st.events[2].data["item"]["id"]);
    text += d["delta"].get<std::string>();
    ++i;
  }
  EXPECT_GT(i, 4u) << "at least one delta";
  ASSERT_EQ(types.size(), i + 4) << st.raw;
  EXPECT_EQ(types[i], "response.output_text.done");
  EXPECT_EQ(st.events[i].data["text"], text);
  EXPECT_EQ(types[i + 1], "response.content_part.done");
  EXPECT_EQ(st.events[i + 1].data["part"]["text"], text);
  EXPECT_EQ(types[i + 2], "response.output_item.done");
  EXPECT_EQ(st.events[i + 2].data["item"]["status"], "incomplete");
  EXPECT_EQ(types[i + 3], "response.incomplete");
  const json& created = st.events[0].data["response"];
  EXPECT_EQ(created["status"], "in_progress");
  EXPECT_EQ(created["output"], json::array());
  EXPECT_TRUE(created["usage"].is_null());
  const json& final = st.events.back().data["response"];
  expect_response_shape(final);
  EXPECT_EQ(final["id"], created["id"]);
  EXPECT_EQ(final["status"], "incomplete");
  EXPECT_EQ(final["output"][0]["content"][0]["text"], text);

  // The whole response has the same output, and the stored one is the final event's.
  const HttpResult whole = post(s.port, "/v1/responses", body);
  ASSERT_EQ(whole.status, 200);
  EXPECT_EQ(whole.body["output"][0]["content"][0]["text"], text);
  const HttpResult got = http_call(s.port, "GET", "/v1/responses/" + final["id"].get<std::string>());
  ASSERT_EQ(got.status, 200) << got.raw;
  EXPECT_EQ(got.body, final);
}

TEST(ResponsesServer, ForcedCallWholeAndStreamed) {
  TestServer s;
  const json body = body_of({{"tools", json::array({weather_tool(), {{"type", "web_search"}}})},
                             {"tool_choice", {{"type", "function"}, {"name", "get_weather"}}},
                             {"max_output_tokens", 200}});
  const HttpResult r = post(s.port, "/v1/responses", body);
  ASSERT_EQ(r.status, 200) << r.raw;
  expect_response_shape(r.body);
  EXPECT_EQ(r.body["status"], "completed");
  ASSERT_EQ(r.body["output"].size(), 1u) << r.raw;
  const json& call = r.body["output"][0];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(call["call_id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_FALSE(call.contains("namespace"));
  const json args = json::parse(call["arguments"].get<std::string>());
  EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit");
  EXPECT_EQ(r.body["tools"].size(), 2u);  // as sent, the web search tool too

  const ResponsesStream st = stream_responses(s.port, body);
  ASSERT_EQ(st.status, 200) << st.raw;
  const std::vector<std::string> types = checked_types(st);
  const std::vector<std::string> want = {"response.created",
                                         "response.in_progress",
                                         "response.output_item.added",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.done",
                                         "response.output_item.done",
                                         "response.completed"};
  ASSERT_EQ(types, want) << st.raw;
  const json& added = st.events[2].data;
  EXPECT_EQ(added["output_index"], 0);
  EXPECT_EQ(added["item"]["type"], "function_call");
  EXPECT_EQ(added["item"]["status"], "in_progress");
  EXPECT_EQ(added["item"]["name"], "get_weather");
  const std::string item_id = added["item"]["id"];
  EXPECT_EQ(st.events[3].data["item_id"], item_id);
  EXPECT_EQ(st.events[3].data["delta"], call["arguments"]);
  EXPECT_EQ(st.events[4].data["arguments"], call["arguments"]);
  EXPECT_EQ(st.events[4].data["name"], "get_weather");
  EXPECT_EQ(st.events[5].data["item"]["status"], "completed");
  EXPECT_EQ(st.events[5].data["item"]["arguments"], call["arguments"]);
  EXPECT_EQ(st.events[6].data["response"]["status"], "completed");
  EXPECT_EQ(st.events[6].data["response"]["output"][0]["arguments"], call["arguments"]);
}

TEST(ResponsesServer, NamespacedCallComesBackWithItsNamespace) {
  TestServer s;
  json inner = weather_tool();
  const json body = body_of({{"tools", json::array({{{"type", "namespace"},
                                                     {"name", "mcp__weather__"},
                                                     {"description", "Weather server"},
                                                     {"tools", json::array({inner})}}})},
                             {"tool_choice", "required"},
                             {"parallel_tool_calls", false},
                             {"max_output_tokens", 200}});
  const HttpResult r = post(s.port, "/v1/responses", body);
  ASSERT_EQ(r.status, 200) << r.raw;
  ASSERT_EQ(r.body["output"].size(), 1u) << r.raw;
  EXPECT_EQ(r.body["output"][0]["name"], "get_weather");
  EXPECT_EQ(r.body["output"][0]["namespace"], "mcp__weather__");
}

// Output items without their ids: text, or name and arguments.
json essence(const json& output) {
  json out = json::array();
  for (const json& item : output)
    out.push_back(item["type"] == "message" ? json{"message", item["content"][0]["text"]}
                                            : json{item["name"], item["arguments"]});
  return out;
}

// The prompt a continuation runs is the prompt of the same conversation sent whole: the same
// input_tokens and, greedy on the fake model (whose next token hashes the whole history), the
// same output.
TEST(ResponsesServer, PreviousResponseIdContinuesAsTheWholeConversation) {
  TestServer s;
  const json tools = json::array({weather_tool(), time_tool()});
  const json first = body_of({{"instructions", "You are a weather bot."},
                              {"input", json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}})},
                              {"tools", tools},
                              {"tool_choice", "required"},
                              {"max_output_tokens", 200}});
  const HttpResult r1 = post(s.port, "/v1/responses", first);
  ASSERT_EQ(r1.status, 200) << r1.raw;
  ASSERT_FALSE(r1.body["output"].empty());

  // The results of its calls, sent back as a continuation and as the whole conversation.
  json results = json::array();
  for (const json& item : r1.body["output"])
    if (item["type"] == "function_call")
      results.push_back({{"type", "function_call_output"}, {"call_id", item["call_id"]}, {"output", "sunny, 21 C"}});
  ASSERT_FALSE(results.empty()) << r1.raw;
  const json next = body_of({{"instructions", "You are a weather bot."}, {"tools", tools}, {"max_output_tokens", 6}});
  json continued = next;
  continued["previous_response_id"] = r1.body["id"];
  continued["input"] = results;
  json whole = next;
  whole["input"] = first["input"];
  for (const json& item : r1.body["output"]) whole["input"].push_back(item);  // the output items as they came
  for (const json& item : results) whole["input"].push_back(item);

  const HttpResult c = post(s.port, "/v1/responses", continued);
  const HttpResult w = post(s.port, "/v1/responses", whole);
  ASSERT_EQ(c.status, 200) << c.raw;
  ASSERT_EQ(w.status, 200) << w.raw;
  EXPECT_EQ(c.body["usage"]["input_tokens"], w.body["usage"]["input_tokens"]);
  EXPECT_GT(c.body["usage"]["input_tokens"].get<int>(), r1.body["usage"]["input_tokens"].get<int>());
  EXPECT_EQ(essence(c.body["output"]), essence(w.body["output"]));
  EXPECT_EQ(c.body["previous_response_id"], r1.body["id"]);

  // And a second step down the chain: text output this time.
  json third_c = next;
  third_c["previous_response_id"] = c.body["id"];
  third_c["input"] = "Thanks. And tomorrow?";
  json third_w = next;
  third_w["input"] = whole["input"];
  for (const json& item : w.body["output"]) third_w["input"].push_back(item);
  third_w["input"].push_back({{"role", "user"}, {"content", "Thanks. And tomorrow?"}});
  const HttpResult c3 = post(s.port, "/v1/responses", third_c);
  const HttpResult w3 = post(s.port, "/v1/responses", third_w);
  ASSERT_EQ(c3.status, 200) << c3.raw;
  ASSERT_EQ(w3.status, 200) << w3.raw;
  EXPECT_EQ(c3.body["usage"]["input_tokens"], w3.body["usage"]["input_tokens"]);
  EXPECT_EQ(essence(c3.body["output"]), essence(w3.body["output"]));
}

TEST(ResponsesServer, GetDeleteAndUnknownIds) {
  TestServer s;
  const HttpResult r = post(s.port, "/v1/responses", body_of());
  ASSERT_EQ(r.status, 200) << r.raw;
  const std::string id = r.body["id"];
  const HttpResult got = http_call(s.port, "GET", "/v1/responses/" + id);
  ASSERT_EQ(got.status, 200) << got.raw;
  EXPECT_EQ(got.body, r.body);
  const HttpResult del = http_delete(s.port, "/v1/responses/" + id);
  ASSERT_EQ(del.status, 200) << del.raw;
  EXPECT_EQ(del.body, json({{"id", id}, {"object", "response.deleted"}, {"deleted", true}}));
  for (const HttpResult& gone : {http_call(s.port, "GET", "/v1/responses/" + id), http_delete(s.port, "/v1/responses/" + id)}) {
    EXPECT_EQ(gone.status, 404) << gone.raw;
    EXPECT_EQ(gone.body["error"]["code"], "response_not_found");
    EXPECT_NE(gone.body["error"]["message"].get<std::string>().find(id), std::string::npos);
  }
  const HttpResult cont = post(s.port, "/v1/responses", body_of({{"previous_response_id", id}}));
  EXPECT_EQ(cont.status, 404) << cont.raw;
  EXPECT_EQ(cont.body["error"]["param"], "previous_response_id");
  EXPECT_EQ(cont.body["error"]["type"], "invalid_request_error");
  EXPECT_NE(cont.body["error"]["message"].get<std::string>().find(id), std::string::npos);
}

TEST(ResponsesServer, StoreFalseIsNotKept) {
  TestServer s;
  for (bool streamed : {false, true}) {
    std::string id;
    if (streamed) {
      const ResponsesStream st = stream_responses(s.port, body_of({{"store", false}}));
      ASSERT_EQ(st.status, 200);
      id = st.events.back().data["response"]["id"];
      EXPECT_EQ(st.events.back().data["response"]["store"], false);
    } else {
      const HttpResult r = post(s.port, "/v1/responses", body_of({{"store", false}}));
      ASSERT_EQ(r.status, 200);
      id = r.body["id"];
      EXPECT_EQ(r.body["store"], false);
    }
    EXPECT_EQ(http_call(s.port, "GET", "/v1/responses/" + id).status, 404);
    EXPECT_EQ(post(s.port, "/v1/responses", body_of({{"previous_response_id", id}})).status, 404);
  }
}

TEST(ResponsesServer, TheStoreKeepsTheMostRecentResponses) {
  server::ServerOptions opts = TestServer::default_options();
  opts.responses_store_count = 2;
  TestServer s(TestServer::default_config(), opts);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    const HttpResult r = post(s.port, "/v1/responses", body_of({{"input", "Hello " + std::to_string(i)}}));
    ASSERT_EQ(r.status, 200);
    ids.push_back(r.body["id"]);
  }
  EXPECT_EQ(http_call(s.port, "GET", "/v1/responses/" + ids[0]).status, 404);
  EXPECT_EQ(http_call(s.port, "GET", "/v1/responses/" + ids[1]).status, 200);
  EXPECT_EQ(http_call(s.port, "GET", "/v1/responses/" + ids[2]).status, 200);
}

// Two calls allowed and required; max_output_tokens inside the second: the first complete call
// is a function_call item, the cut one is dropped, and the response is incomplete. Whole and
// streamed agree.
TEST(ResponsesServer, ParallelCallCutByMaxOutputTokensKeepsTheCompleteCall) {
  TestServer s;
  json body;
  json full;
  for (int i = 0; i < 64 && body.is_null(); ++i) {
    const json b = body_of({{"input", "Weather and time " + std::to_string(i)},
                            {"tools", json::array({weather_tool(), time_tool()})},
                            {"tool_choice", "required"},
                            {"max_output_tokens", 250}});
    const HttpResult r = post(s.port, "/v1/responses", b);
    ASSERT_EQ(r.status, 200) << r.raw;
    if (r.body["status"] == "completed" && r.body["output"].size() >= 2) {
      body = b;
      full = r.body;
    }
  }
  ASSERT_FALSE(body.is_null()) << "no prompt made two calls";
  const int total = full["usage"]["output_tokens"];
  bool cut_in_second = false;
  for (int n = 1; n < total; ++n) {
    json cut = body;
    cut["max_output_tokens"] = n;
    const HttpResult r = post(s.port, "/v1/responses", cut);
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body["status"], "incomplete") << n;
    EXPECT_EQ(r.body["incomplete_details"]["reason"], "max_output_tokens");
    const json& out = r.body["output"];
    size_t calls = 0;
    for (const json& item : out) {
      if (item["type"] != "function_call") continue;
      EXPECT_EQ(item["name"], full["output"][calls]["name"]) << n;
      EXPECT_EQ(item["arguments"], full["output"][calls]["arguments"]) << n << ": only complete calls";
      EXPECT_EQ(item["status"], "completed");
      ++calls;
    }
    if (calls == 1) cut_in_second = true;
    const ResponsesStream st = stream_responses(s.port, cut);
    ASSERT_EQ(st.status, 200);
    const json& final = st.events.back().data;
    EXPECT_EQ(final["type"], "response.incomplete") << n;
    json streamed_calls = json::array(), whole_calls = json::array();
    for (const json& item : final["response"]["output"])
      if (item["type"] == "function_call") streamed_calls.push_back({item["name"], item["arguments"]});
    for (const json& item : out)
      if (item["type"] == "function_call") whole_calls.push_back({item["name"], item["arguments"]});
    EXPECT_EQ(streamed_calls, whole_calls) << n;
  }
  EXPECT_TRUE(cut_in_second);
}

TEST(ResponsesServer, ErrorsInOpenAisShape) {
  TestServer s;
  struct Case {
    std::string body;
    int status;
    std::string param;
  };
  const std::vector<Case> cases = {
      {"not json", 400, ""},
      {R"({"model": "fake"})", 400, "input"},
      {R"({"model": "other", "input": "x"})", 404, "model"},
      {R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x"}]}]})", 400, "input"},
      {R"({"input": "x", "max_output_tokens": 100000})", 400, "max_output_tokens"},
      {R"({"input": "x", "tool_choice": "required"})", 400, "tool_choice"},
  };
  for (const Case& c : cases) {
    const HttpResult r = http_call(s.port, "POST", "/v1/responses", c.body);
    EXPECT_EQ(r.status, c.status) << c.body << " -> " << r.raw;
    ASSERT_TRUE(r.body.contains("error")) << r.raw;
    EXPECT_EQ(r.body["error"]["type"].is_string(), true);
    EXPECT_TRUE(r.body["error"]["message"].is_string());
    if (c.param.empty()) EXPECT_TRUE(r.body["error"]["param"].is_null()) << r.raw;
    else EXPECT_EQ(r.body["error"]["param"], c.param) << r.raw;
  }
  EXPECT_EQ(http_call(s.port, "GET", "/v1/responses/resp_nope").status, 404);
  EXPECT_EQ(http_call(s.port, "GET", "/v1/responses/a/b").status, 404);
}

// The official `openai` npm package (tests/clients/responses_openai_client.mjs) against the server.
TEST(ResponsesServer, OpenAiClient) {
  const std::string root = DS_SOURCE_DIR;
  int st = 0;
  run_capture("node --version > /dev/null 2>&1", &st);
  DS_REQUIRE_DEPENDENCY(st == 0, "node is not installed (run scripts/setup)");
  DS_REQUIRE_DEPENDENCY(std::filesystem::exists(root + "/node_modules/openai/package.json"),
                        "node_modules/openai is missing (run scripts/setup)");
  TestServer s;
  const std::string cmd = "cd '" + root + "' && DS_BASE_URL=http://127.0.0.1:" + std::to_string(s.port) +
                          " DS_MODEL=fake node tests/clients/responses_openai_client.mjs 2>&1";
  const std::string out = run_capture(cmd, &st);
  EXPECT_EQ(st, 0) << out;
  EXPECT_NE(out.find("responses client: ok"), std::string::npos) << out;
}

}  // namespace
}  // namespace ds::testing
