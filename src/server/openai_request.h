// OpenAI request bodies (/v1/chat/completions, /v1/completions) parsed and checked field by
// field. Every refusal is a 400 naming the field and the allowed range; checks that need the
// tokenizer or the engine's limits (vocabulary, max_model_len) come later, in generation.cpp.
// Fields this server does not act on (user, frequency_penalty, ...) are accepted and ignored, as
// clients send them by default.
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
};

// Invalid JSON or a body that is not an object: 400.
nlohmann::json parse_json_body(const std::string& body);

GenerationRequest parse_chat_request(const nlohmann::json& body);
GenerationRequest parse_completion_request(const nlohmann::json& body);

// For /tokenize and /detokenize, which share the field rules.
std::vector<ChatTurn> parse_messages(const nlohmann::json& body);
std::vector<int64_t> parse_token_array(const nlohmann::json& v, const std::string& field);

}  // namespace ds::server
