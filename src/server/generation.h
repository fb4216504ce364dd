// POST /v1/chat/completions and /v1/completions: validate, template, tokenize, submit to the
// engine, then answer in one body or as an SSE stream. Refusals before submission throw
// ApiError; once streaming has begun, errors are reported in the stream.
#pragma once
#include <httplib.h>

#include "server/server_context.h"

namespace ds::server {

void handle_generation(ServerContext& ctx, const httplib::Request& req, httplib::Response& res, bool chat);

}  // namespace ds::server
