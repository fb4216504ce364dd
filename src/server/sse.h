// Server-sent events as the OpenAI streaming API uses them: one `data:` line per event, a blank
// line after each, and `data: [DONE]` at the end. Comment lines (":") keep idle connections
// honest: writing one is how a stream notices that its client has gone.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "server/json_text.h"

namespace ds::server {

inline std::string sse_event(const nlohmann::json& j) { return "data: " + dump_json(j) + "\n\n"; }
inline std::string sse_done() { return "data: [DONE]\n\n"; }
inline std::string sse_keepalive() { return ": keep-alive\n\n"; }

}  // namespace ds::server
