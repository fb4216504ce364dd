// OpenAI response bodies and stream chunks for chat and text completions, field for field.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/tools/tool_parser.h"
#include "tokenizer/tokenizer.h"

namespace ds::server {

struct ResponseMeta {
  std::string id;  // chatcmpl-... / cmpl-...
  int64_t created = 0;
  std::string model;
  bool chat = false;
  bool include_usage = false;  // stream chunks then carry "usage": null until the usage chunk
};

ResponseMeta new_response_meta(bool chat, const std::string& model, bool include_usage);

// Token counts of one response; cached_tokens is the share of the prompt the prefix cache
// supplied (usage.prompt_tokens_details.cached_tokens).
struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
  // Prompt tokens this request added to the prefix cache beyond what it read from it
  // (Anthropic's cache_creation_input_tokens).
  int cache_creation_tokens = 0;
  // Speculative decoding: draft tokens accepted and rejected (OpenAI's prediction-token fields);
  // reported only when the server speculates.
  bool speculated = false;
  int accepted_prediction_tokens = 0;
  int rejected_prediction_tokens = 0;
};

nlohmann::json usage_json(const Usage& u);

// Logprobs in the shape of each API. `top_n` limits the alternatives reported.
class LogprobsBuilder {
 public:
  LogprobsBuilder(const Tokenizer& tok, bool chat, int top_n) : tok_(tok), chat_(chat), top_n_(top_n) {}
  void add(const TokenOutput& t, size_t text_offset);
  bool empty() const { return count_ == 0; }
  // Takes what was added since the last take (a stream chunk's share) or everything.
  nlohmann::json take();

 private:
  nlohmann::json token_json(int32_t id, float lp) const;
  std::string text_of(int32_t id) const;
  const Tokenizer& tok_;
  bool chat_;
  int top_n_;
  size_t count_ = 0;
  nlohmann::json content_ = nlohmann::json::array();  // chat
  nlohmann::json tokens_ = nlohmann::json::array(), token_logprobs_ = nlohmann::json::array(),
                 top_ = nlohmann::json::array(), offsets_ = nlohmann::json::array();  // completions
};

// finish_reason as the API spells it: "stop", "length", or null while running.
nlohmann::json finish_reason_json(FinishReason r);

// With tool calls (chat only), message.content is the text outside them (null when there is
// none), message.tool_calls lists them, and a normal end is finish_reason "tool_calls".
nlohmann::json full_response(const ResponseMeta& m, const std::string& text, FinishReason reason,
                             const nlohmann::json& logprobs, const Usage& usage,
                             const std::vector<ToolCall>& calls = {});

// message.tool_calls entries, and one streamed delta.tool_calls entry: the call's first delta
// carries its id, type and name; every delta carries its share of the arguments text.
nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls);
nlohmann::json tool_call_delta_json(const ToolCallDelta& d);

// One stream chunk. For chat, `delta` is the delta object; for completions `text` is used.
nlohmann::json stream_chunk(const ResponseMeta& m, const nlohmann::json& delta, const std::string& text,
                            const nlohmann::json& finish_reason, const nlohmann::json& logprobs);
nlohmann::json usage_chunk(const ResponseMeta& m, const Usage& usage);

}  // namespace ds::server
