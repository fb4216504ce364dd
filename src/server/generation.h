// POST /v1/chat/completions and /v1/completions: the OpenAI body translated into the internal
// request (openai_request.h), run (generation_run.h), and answered in one body or as an SSE
// stream of OpenAI chunks. Refusals before submission throw ApiError; once streaming has begun,
// errors are reported in the stream.
#pragma once
#include "http/http_message.h"
#include "server/server_context.h"

namespace ds::server {

// A client that hangs up (HttpRequest::client_gone) cancels its request, streamed or not.
void handle_generation(ServerContext& ctx, const http::HttpRequest& req, http::HttpResponse& res, bool chat);

}  // namespace ds::server
