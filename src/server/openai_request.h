// OpenAI request bodies (/v1/chat/completions, /v1/completions) parsed and checked field by
// field into the one internal request (server/generation_request.h). Every refusal is a 400
// naming the field and the allowed range; checks that need the tokenizer or the engine's limits
// (vocabulary, max_model_len) come later, in generation.cpp.
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

#include "server/generation_request.h"

namespace ds::server {

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
