// Anthropic Messages responses, from the internal stream of events (server/generation_run.h):
//   whole:    {"id": "msg_...", "type": "message", "role": "assistant", "model", "content": [text
//             and tool_use blocks], "stop_reason", "stop_sequence", "usage"};
//   streamed: message_start, then per block content_block_start / content_block_delta
//             (text_delta, input_json_delta) / content_block_stop, then message_delta (stop_reason,
//             usage) and message_stop; ping while the prompt is prefilled; error when the engine
//             fails. message_start waits for the first generated token, so its usage already says
//             what the prefix cache supplied.
// stop_reason: end_turn, tool_use (a call was made), stop_sequence (with the string),
// max_tokens. usage: input_tokens (read neither from nor into the cache),
// cache_read_input_tokens, cache_creation_input_tokens (what this prompt added to the prefix
// cache), output_tokens; the three input counts add up to the prompt.
#pragma once
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "server/generation_run.h"
#include "server/generation_stream.h"

namespace ds::server {

nlohmann::json messages_usage_json(const Usage& u);
const char* messages_stop_reason(const GenerationOutcome& o);

// "msg_" and random letters and digits; tool_use ids are "toolu_...".
std::string new_message_id();
std::string new_tool_use_id();

nlohmann::json messages_full_response(const std::string& id, const std::string& model, const GenerationOutput& out,
                                      const Usage& usage);

std::unique_ptr<StreamEncoder> messages_stream_encoder(std::shared_ptr<const GenerationRun> run, std::string id);

}  // namespace ds::server
