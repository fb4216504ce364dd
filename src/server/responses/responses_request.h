// OpenAI Responses request bodies (POST /v1/responses) translated into the one internal request
// (server/generation_request.h):
//   instructions     a system turn before everything else (not carried into continuations);
//   input            a string (one user turn) or items, in order:
//                    message (role user / assistant / system / developer; content a string or
//                    input_text / output_text / refusal parts; items with a role and no type are
//                    messages; image, file and audio parts are refused),
//                    function_call (call_id, name, arguments, namespace) and custom_tool_call: a
//                    call of the assistant turn before it, or of a new assistant turn,
//                    function_call_output and custom_tool_call_output (output a string or text
//                    parts): a "tool" turn answering call_id,
//                    reasoning items passed back, and the calls and results of tools this server
//                    never offers (web_search_call, local_shell_call, computer_call, ...): ignored;
//                    item_reference and unknown types are refused;
//   previous_response_id  a stored response's conversation (responses_store.h) goes before the
//                    input; unknown: 404 naming it;
//   tools            function tools; namespace groups flattened into their function tools (a
//                    name two tools share is shown as "<namespace>__<name>"; the call comes back
//                    with its own name and namespace); every other tool type (web_search,
//                    file_search, code_interpreter, custom, local_shell, mcp, ...) is left out of
//                    the prompt, never a failure;
//   tool_choice      "auto" / "none" / "required" / {"type": "function", "name"};
//   parallel_tool_calls, max_output_tokens, temperature (0 to 2), top_p, stream;
//   text.format      text / json_object / json_schema (name, schema, strict), as chat's
//                    response_format;
//   store (default true), prompt_cache_key (the session the request log names), and include,
//   reasoning, metadata, user, truncation, service_tier, safety_identifier and any field this
//   server does not know: accepted and ignored. background, conversation and prompt (which need
//   state this server does not keep) are refused when set.
// Every refusal is a 400 in OpenAI's shape naming the field.
#pragma once
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "server/generation_request.h"
#include "server/responses/responses_store.h"

namespace ds::server {

// A function tool declared inside a namespace, as the client names it.
struct NamespacedTool {
  std::string space, name;
};

struct ResponsesRequest {
  GenerationRequest g;
  // g.messages without the instructions turn: the conversation a stored response keeps (moved
  // into g.messages, so empty, when store is false).
  std::vector<ChatTurn> conversation;
  bool store = true;
  std::string previous_response_id;
  std::string prompt_cache_key;
  // The namespaced function tools by the name the model sees them under.
  std::map<std::string, NamespacedTool> namespaced;
  // The request's fields the response object repeats (instructions, tools, tool_choice, text,
  // temperature, ...), as the client sent them or as their defaults.
  nlohmann::ordered_json echo = nlohmann::ordered_json::object();
};

// `store` resolves previous_response_id.
ResponsesRequest parse_responses_request(const std::string& body, ResponsesStore& store);

}  // namespace ds::server
