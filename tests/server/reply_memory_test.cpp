// Replies fed back as the ids they were generated as (server/reply_memory.h): an agent's next
// turn reads its previous reply from the prefix cache, through chat completions and Messages,
// with text and with calls; the same conversation gives the same output with the prefix cache
// on and off; a changed reply is re-tokenized; the memory's bounds.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/reply_memory.h"
#include "server_harness.h"

namespace ds::testing {
namespace {

EngineConfig with_cache(bool on) {
  EngineConfig c = TestServer::default_config();
  c.prefix.enabled = on;
  c.block_size = 16;
  c.max_model_len = 2048;
  c.num_kv_blocks = 1024;
  return c;
}

server::ServerOptions with_memory(size_t bytes) {
  server::ServerOptions o = TestServer::default_options();
  o.reply_memory_bytes = bytes;
  return o;
}

json first_turn() {
  std::string system;
  for (int i = 0; i < 12; ++i) system += "Answer about the weather. ";
  return json::array({{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", "Weather in Paris?"}}});
}

struct Turn {
  json messages;
  std::string reply;
  int prompt_tokens = 0, cached_tokens = 0;
};

// Two chat turns: the reply of the first goes back as the assistant message of the second.
std::pair<Turn, Turn> two_chat_turns(int port, double temperature, int max_tokens = 60) {
  Turn a, b;
  a.messages = first_turn();
  const json body = {{"model", "fake"}, {"max_tokens", max_tokens}, {"temperature", temperature}, {"seed", 7}};
  json first = body;
  first["messages"] = a.messages;
  const HttpResult r1 = post(port, "/v1/chat/completions", first);
  EXPECT_EQ(r1.status, 200) << r1.raw;
  a.reply = r1.body["choices"][0]["message"]["content"];
  a.prompt_tokens = r1.body["usage"]["prompt_tokens"];
  b.messages = a.messages;
  b.messages.push_back({{"role", "assistant"}, {"content", a.reply}});
  b.messages.push_back({{"role", "user"}, {"content", "And tomorrow?"}});
  json second = body;
  second["messages"] = b.messages;
  const HttpResult r2 = post(port, "/v1/chat/completions", second);
  EXPECT_EQ(r2.status, 200) << r2.raw;
  b.reply = r2.body["choices"][0]["message"]["content"];
  b.prompt_tokens = r2.body["usage"]["prompt_tokens"];
  b.cached_tokens = r2.body["usage"]["prompt_tokens_details"]["cached_tokens"];
  return {a, b};
}

TEST(ReplyMemory, TheNextTurnReadsThePreviousReplyFromTheCache) {
  TestServer s(with_cache(true), with_memory(64u << 20));
  const auto [a, b] = two_chat_turns(s.port, 1.0);
  // The first prompt and the 60 generated tokens are in the cache; the cache resumes at the last
  // block boundary before the second turn's new tokens.
  EXPECT_GE(b.cached_tokens, a.prompt_tokens + 60 - 16) << "prompt 1: " << a.prompt_tokens << ", prompt 2: " << b.prompt_tokens;
  EXPECT_EQ(s.http->context().replies.size(), 2u);
  // /tokenize counts the prompt the second turn ran.
  const HttpResult t = post(s.port, "/tokenize", {{"model", "fake"}, {"messages", b.messages}});
  ASSERT_EQ(t.status, 200) << t.raw;
  EXPECT_EQ(t.body["count"], b.prompt_tokens);
}

TEST(ReplyMemory, WithoutItTheReplyIsReTokenized) {
  TestServer on(with_cache(true), with_memory(64u << 20)), off(with_cache(true), with_memory(0));
  const auto [a_on, b_on] = two_chat_turns(on.port, 1.0);
  const auto [a_off, b_off] = two_chat_turns(off.port, 1.0);
  ASSERT_EQ(a_on.reply, a_off.reply);  // the same seed: the same first reply
  // The fake model's sampled ids are seldom the tokenizer's split of their text: re-tokenized,
  // the second prompt leaves the cache inside the reply.
  EXPECT_LT(b_off.cached_tokens, b_on.cached_tokens);
}

// The prefix cache stays exact with replies fed back: the same conversation, greedy, gives the
// same second answer with the cache on and off.
TEST(ReplyMemory, GreedyOutputIsTheSameWithAndWithoutThePrefixCache) {
  TestServer cached(with_cache(true), with_memory(64u << 20)), plain(with_cache(false), with_memory(64u << 20));
  const auto [a1, b1] = two_chat_turns(cached.port, 0.0);
  const auto [a2, b2] = two_chat_turns(plain.port, 0.0);
  EXPECT_EQ(a1.reply, a2.reply);
  EXPECT_EQ(b1.prompt_tokens, b2.prompt_tokens);
  EXPECT_EQ(b1.reply, b2.reply);
  EXPECT_GT(b1.cached_tokens, a1.prompt_tokens);
  EXPECT_EQ(b2.cached_tokens, 0);
}

const json& weather_tool() {
  static const json t = json::parse(R"({"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
                   "required": ["city"], "additionalProperties": false}}})");
  return t;
}

// A reply with a call comes back as the client's own rendering of it (arguments re-serialized,
// Anthropic's input as an object): it still matches, and the cache reaches through the call.
TEST(ReplyMemory, RepliesWithCallsMatchThroughEitherApi) {
  TestServer s(with_cache(true), with_memory(64u << 20));
  const json tools = json::array({weather_tool()});
  const json forced = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  const json body = {{"model", "fake"}, {"max_tokens", 100}, {"temperature", 0}, {"tools", tools},
                     {"tool_choice", forced}, {"messages", first_turn()}};
  const HttpResult r1 = post(s.port, "/v1/chat/completions", body);
  ASSERT_EQ(r1.status, 200) << r1.raw;
  const json call = r1.body["choices"][0]["message"]["tool_calls"][0];
  const int p1 = r1.body["usage"]["prompt_tokens"], generated = r1.body["usage"]["completion_tokens"];
  // Chat: the arguments back with other spacing.
  json spaced = call;
  spaced["function"]["arguments"] = json::parse(call["function"]["arguments"].get<std::string>()).dump(2);
  json messages = first_turn();
  messages.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({spaced})}});
  messages.push_back({{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "18 C"}});
  const HttpResult r2 = post(s.port, "/v1/chat/completions",
                             {{"model", "fake"}, {"max_tokens", 4}, {"tools", tools}, {"messages", messages}});
  ASSERT_EQ(r2.status, 200) << r2.raw;
  EXPECT_GE(r2.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), p1 + generated - 16) << r2.raw;

  // Messages: a forced call, then the reply back as a tool_use block with its input object.
  const json anthropic_tools =
      json::array({{{"name", "get_weather"}, {"input_schema", weather_tool()["function"]["parameters"]}}});
  const json question = {{"role", "user"}, {"content", "Weather in Paris?"}};
  const HttpResult m1 = post(s.port, "/v1/messages",
                             {{"model", "fake"}, {"max_tokens", 100}, {"temperature", 0}, {"system", first_turn()[0]["content"]},
                              {"tools", anthropic_tools}, {"tool_choice", {{"type", "tool"}, {"name", "get_weather"}}},
                              {"messages", json::array({question})}});
  ASSERT_EQ(m1.status, 200) << m1.raw;
  ASSERT_EQ(m1.body["content"].size(), 1u) << m1.raw;
  const json use = m1.body["content"][0];
  const int mp1 = m1.body["usage"]["input_tokens"].get<int>() + m1.body["usage"]["cache_read_input_tokens"].get<int>() +
                  m1.body["usage"]["cache_creation_input_tokens"].get<int>();
  const int mgen = m1.body["usage"]["output_tokens"];
  const json anthropic = {
      {"model", "fake"},
      {"max_tokens", 4},
      {"system", first_turn()[0]["content"]},
      {"tools", anthropic_tools},
      {"messages", json::array({question, {{"role", "assistant"}, {"content", json::array({use})}},
                                {{"role", "user"},
                                 {"content", json::array({{{"type", "tool_result"}, {"tool_use_id", use["id"]},
                                                           {"content", "18 C"}}})}}})}};
  const HttpResult m2 = post(s.port, "/v1/messages", anthropic);
  ASSERT_EQ(m2.status, 200) << m2.raw;
  EXPECT_GE(m2.body["usage"]["cache_read_input_tokens"].get<int>(), mp1 + mgen - 16) << m2.raw;
}

TEST(ReplyMemory, AChangedReplyIsNotRecalledAndTheMemoryIsBounded) {
  server::ReplyMemory m(4096);
  m.remember("hello", {}, {1, 2, 3}, "hello");
  std::vector<server::ChatTurn> turns = {{"user", "hi"}, {"assistant", "hello"}, {"assistant", "hello!"}};
  EXPECT_EQ(m.recall(turns), 1);
  EXPECT_EQ(turns[1].generated_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(turns[2].generated_ids.empty());
  EXPECT_TRUE(turns[0].generated_ids.empty());
  // Calls compared by name and parsed arguments.
  m.remember("", {{"call_1", "f", R"({"a": 1, "b": [2]})"}}, {4, 5}, "x");
  std::vector<server::ChatTurn> with_call = {{"assistant", ""}};
  with_call[0].tool_calls.push_back({"other_id", "f", R"({"b":[2],"a":1})"});
  EXPECT_EQ(m.recall(with_call), 1);
  with_call[0].generated_ids.clear();
  with_call[0].tool_calls[0].arguments = R"({"a": 2, "b": [2]})";
  EXPECT_EQ(m.recall(with_call), 0);
  // Bounded: old replies leave first.
  for (int i = 0; i < 100; ++i) m.remember("reply " + std::to_string(i), {}, std::vector<int32_t>(16, i), "r");
  EXPECT_LE(m.bytes(), 4096u);
  std::vector<server::ChatTurn> old = {{"assistant", "hello"}}, recent = {{"assistant", "reply 99"}};
  EXPECT_EQ(m.recall(old), 0);
  EXPECT_EQ(m.recall(recent), 1);
  server::ReplyMemory off(0);
  off.remember("hello", {}, {1}, "hello");
  EXPECT_EQ(off.size(), 0u);
}

}  // namespace
}  // namespace ds::testing
