// OpenAI request bodies (/v1/chat/completions, /v1/completions) parsed and checked field by
// field. Every refusal is a 400 naming the field and the allowed range; checks that need the
// tokenizer or the engine's limits (vocabulary, max_model_len) come later, in generation.cpp.
// Fields this server does not act on (user, metadata, store, ...) are accepted and ignored, as
// clients send them by default.
//
// Tools and response_format carry JSON schemas whose property order is the order the output
// writes them in; nlohmann::json sorts keys, so those two fields are read from an
// order-preserving parse of the same body (parse_json_body_ordered).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "tokenizer/chat_template.h"

namespace ds::server {

// A chat message as the tokenizer's template takes it (role, content).
using ChatTurn = ChatMessage;

inline constexpr size_t kMaxStopStrings = 4;
inline constexpr size_t kMaxTools = 128;
inline constexpr size_t kMaxLogitBias = 1024;

struct ToolSpec {
  std::string name;
  nlohmann::ordered_json parameters;  // a JSON schema; null when the tool declares none
};

enum class ToolChoice { None, Auto, Required, Named };
enum class ResponseFormat { Text, JsonObject, JsonSchema };
inline constexpr size_t kMaxStopBytes = 1024;

struct GenerationRequest {
  bool chat = false;
  std::string model;  // empty: the first served name
  std::vector<ChatTurn> messages;
  bool prompt_is_ids = false;
  std::string prompt_text;
  std::vector<int64_t> prompt_ids;
  std::optional<int64_t> max_tokens;
  SamplingParams sampling;
  bool seed_given = false;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  bool ignore_eos = false;
  bool logprobs = false;  // report the chosen token's logprob
  int top_logprobs = 0;   // and this many alternatives
  // logit_bias as given: token ids are checked against the vocabulary in generation.cpp.
  std::vector<std::pair<int64_t, float>> logit_bias;
  // Chat only.
  std::vector<ToolSpec> tools;
  std::string tools_json;  // the function definitions, as the chat template shows them
  ToolChoice tool_choice = ToolChoice::Auto;
  std::string tool_choice_name;  // ToolChoice::Named
  bool parallel_tool_calls = true;
  ResponseFormat response_format = ResponseFormat::Text;
  nlohmann::ordered_json response_schema;  // ResponseFormat::JsonSchema
};

// Invalid JSON or a body that is not an object: 400.
nlohmann::json parse_json_body(const std::string& body);
nlohmann::ordered_json parse_json_body_ordered(const std::string& body);

// `ordered`: the same body parsed with parse_json_body_ordered; needed when it has tools or a
// response_format (a 500 otherwise: the caller's bug).
GenerationRequest parse_chat_request(const nlohmann::json& body, const nlohmann::ordered_json* ordered = nullptr);
GenerationRequest parse_completion_request(const nlohmann::json& body);

// For /tokenize and /detokenize, which share the field rules.
std::vector<ChatTurn> parse_messages(const nlohmann::json& body);
std::vector<int64_t> parse_token_array(const nlohmann::json& v, const std::string& field);

}  // namespace ds::server
