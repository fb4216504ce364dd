// POST /v1/chat/completions and /v1/completions: validate, template, tokenize, submit to the
// engine, then answer in one body or as an SSE stream. Refusals before submission throw
// ApiError; once streaming has begun, errors are reported in the stream.
#pragma once
#include "http/http_message.h"
#include "server/server_context.h"

namespace ds::server {

// A client that hangs up (HttpRequest::client_gone) cancels its request, streamed or not.
void handle_generation(ServerContext& ctx, const http::HttpRequest& req, http::HttpResponse& res, bool chat);

}  // namespace ds::server
