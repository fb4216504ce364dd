#include "server/openai_response.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>

namespace ds::server {

using nlohmann::json;

namespace {
std::string random_hex(int n) {
  // Ids only need to be unique and unguessable enough for logs; a per-thread generator seeded
  // from random_device avoids a shared lock.
  thread_local std::mt19937_64 rng{std::random_device{}() ^
                                   uint64_t(std::chrono::steady_clock::now().time_since_epoch().count())};
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < n; ++i) s += digits[rng() & 15];
  return s;
}
}  // namespace

ResponseMeta new_response_meta(bool chat, const std::string& model, bool include_usage) {
  ResponseMeta m;
  m.chat = chat;
  m.id = (chat ? "chatcmpl-" : "cmpl-") + random_hex(24);
  m.created = std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  m.model = model;
  m.include_usage = include_usage;
  return m;
}

json usage_json(const Usage& u) {
  json j = {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
  if (u.speculated)
    j["completion_tokens_details"] = {{"accepted_prediction_tokens", u.accepted_prediction_tokens},
                                      {"rejected_prediction_tokens", u.rejected_prediction_tokens}};
  return j;
}

std::string LogprobsBuilder::text_of(int32_t id) const {
  // A token the tokenizer does not define (a padded vocabulary) is rendered as no text, its
  // bytes as an empty list: defined output for every id the model can emit.
  return tok_.defines(id) ? tok_.token_text(id) : std::string();
}

json LogprobsBuilder::token_json(int32_t id, float lp) const {
  const std::string text = text_of(id);
  json bytes = json::array();
  for (unsigned char c : text) bytes.push_back(int(c));
  return {{"token", text}, {"logprob", lp}, {"bytes", bytes}};
}

void LogprobsBuilder::add(const TokenOutput& t, size_t text_offset) {
  ++count_;
  const size_t n = std::min(t.top.size(), size_t(top_n_));
  if (chat_) {
    json e = token_json(t.token, t.logprob);
    json tops = json::array();
    for (size_t i = 0; i < n; ++i) tops.push_back(token_json(t.top[i].first, t.top[i].second));
    e["top_logprobs"] = tops;
    content_.push_back(std::move(e));
  } else {
    tokens_.push_back(text_of(t.token));
    token_logprobs_.push_back(t.logprob);
    json tops = json::object();
    for (size_t i = 0; i < n; ++i) tops[text_of(t.top[i].first)] = t.top[i].second;
    top_.push_back(tops);
    offsets_.push_back(text_offset);
  }
}

json LogprobsBuilder::take() {
  json out;
  if (chat_) {
    out = {{"content", std::move(content_)}};
    content_ = json::array();
  } else {
    out = {{"tokens", std::move(tokens_)},
           {"token_logprobs", std::move(token_logprobs_)},
           {"top_logprobs", std::move(top_)},
           {"text_offset", std::move(offsets_)}};
    tokens_ = json::array();
    token_logprobs_ = json::array();
    top_ = json::array();
    offsets_ = json::array();
  }
  count_ = 0;
  return out;
}

json finish_reason_json(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "abort";
    case FinishReason::Error: return "error";
    case FinishReason::None: break;
  }
  return nullptr;
}

json tool_calls_json(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (const ToolCall& c : calls)
    out.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return out;
}

json tool_call_delta_json(const ToolCallDelta& d) {
  json out = {{"index", d.index}};
  json f = json::object();
  if (!d.id.empty()) {
    out["id"] = d.id;
    out["type"] = "function";
    f["name"] = d.name;
  }
  f["arguments"] = d.arguments;
  out["function"] = std::move(f);
  return out;
}

json full_response(const ResponseMeta& m, const std::string& text, FinishReason reason,
                   const json& logprobs, const Usage& usage, const std::vector<ToolCall>& calls) {
  json choice;
  choice["index"] = 0;
  if (m.chat && !calls.empty())
    choice["message"] = {{"role", "assistant"},
                         {"content", text.empty() ? json(nullptr) : json(text)},
                         {"tool_calls", tool_calls_json(calls)}};
  else if (m.chat)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = !calls.empty() && reason == FinishReason::Stop ? json("tool_calls") : finish_reason_json(reason);
  return {{"id", m.id},
          {"object", m.chat ? "chat.completion" : "text_completion"},
          {"created", m.created},
          {"model", m.model},
          {"choices", json::array({choice})},
          {"usage", usage_json(usage)}};
}

json stream_chunk(const ResponseMeta& m, const json& delta, const std::string& text,
                  const json& finish_reason, const json& logprobs) {
  json choice;
  choice["index"] = 0;
  if (m.chat)
    choice["delta"] = delta;
  else
    choice["text"] = text;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_reason;
  json out = {{"id", m.id},
              {"object", m.chat ? "chat.completion.chunk" : "text_completion"},
              {"created", m.created},
              {"model", m.model},
              {"choices", json::array({choice})}};
  if (m.include_usage) out["usage"] = nullptr;
  return out;
}

json usage_chunk(const ResponseMeta& m, const Usage& usage) {
  return {{"id", m.id},
          {"object", m.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", m.created},
          {"model", m.model},
          {"choices", json::array()},
          {"usage", usage_json(usage)}};
}

}  // namespace ds::server
