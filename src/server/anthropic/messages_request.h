// Anthropic Messages request bodies (POST /v1/messages, /v1/messages/count_tokens) translated
// into the one internal request (server/generation_request.h):
//   system          a string or text blocks (cache_control and other block fields ignored):
//                   the first turn, role "system";
//   messages        user and assistant turns (and system ones where the client puts them mid
//                   conversation) whose content is a string or blocks: text;
//                   tool_use (assistant) becomes the turn's calls, input as the arguments' JSON;
//                   tool_result (user) becomes a "tool" turn answering tool_use_id, its content a
//                   string or text blocks, "Error: " before it when is_error; thinking and
//                   redacted_thinking blocks passed back are dropped (a model without a
//                   reasoning format never wrote them); image and document blocks are refused;
//   tools           custom tools (name, description, input_schema); Anthropic's server and
//                   client-defined tool types the server cannot run (web_search_..., bash_...)
//                   are left out of the prompt, never a failure;
//   tool_choice     auto / any (a call is required) / tool (that one) / none, and
//                   disable_parallel_tool_use (one call at most);
//   max_tokens (required), stop_sequences, temperature (0 to 1), top_p, top_k, stream;
//   metadata, thinking, service_tier, container, context_management, output_config and any field
//   this server does not know are accepted and ignored, as Anthropic's API does with unknown ones.
// Every refusal is a 400 naming the field (in Anthropic's error shape, by the route).
#pragma once
#include <string>

#include "server/generation_request.h"

namespace ds::server {

// `body` is the raw request body; count_tokens needs no max_tokens.
GenerationRequest parse_messages_request(const std::string& body, bool count_only = false);

}  // namespace ds::server
