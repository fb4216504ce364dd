// The one internal request every generation API translates into: OpenAI chat and text
// completions (openai_request.h), Anthropic Messages (anthropic/) and OpenAI Responses
// (responses/). Everything after the translation (the prompt, limits, tool-call parsing, output
// constraints, stop strings, usage) reads only this, so it exists once for all three APIs.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "tokenizer/chat_template.h"

namespace ds::server {

// A chat message as the tokenizer's template takes it (role, content, earlier calls, results).
using ChatTurn = ChatMessage;

inline constexpr size_t kMaxStopStrings = 4;
inline constexpr size_t kMaxTools = 128;
inline constexpr size_t kMaxLogitBias = 1024;
inline constexpr size_t kMaxStopBytes = 1024;

struct ToolSpec {
  std::string name;
  nlohmann::ordered_json parameters;  // a JSON schema; null when the tool declares none
};

enum class ToolChoice { None, Auto, Required, Named };
enum class ResponseFormat { Text, JsonObject, JsonSchema };

// Which API a request came in by: error shapes, metrics and the request log say it.
enum class Api { ChatCompletions, Completions, Messages, Responses };
const char* api_name(Api api);

struct GenerationRequest {
  Api api = Api::ChatCompletions;
  bool chat = false;
  std::string model;  // empty: the first served name
  std::vector<ChatTurn> messages;
  bool prompt_is_ids = false;
  std::string prompt_text;
  std::vector<int64_t> prompt_ids;
  // The body's field errors about the prompt name ("messages", "prompt", "input").
  std::string prompt_field = "messages";
  std::optional<int64_t> max_tokens;
  std::string max_tokens_field = "max_tokens";
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
  // The client's conversation, when it names one (a session header, prompt_cache_key): logged
  // with the request, so one agent session's turns can be followed through the request log.
  std::string session;
};

}  // namespace ds::server
