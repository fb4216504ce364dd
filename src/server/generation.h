// POST /v1/chat/completions and /v1/completions: the OpenAI body translated into the internal
// request (openai_request.h), run (generation_run.h), and answered in one body or as an SSE
// stream of OpenAI chunks. Refusals before submission throw ApiError; once streaming has begun,
// errors are reported in the stream.
#pragma once
#include <memory>

#include "http/http_message.h"
#include "server/generation_stream.h"
#include "server/openai_response.h"
#include "server/server_context.h"

namespace ds::server {

// A client that hangs up (HttpRequest::client_gone) cancels its request, streamed or not.
void handle_generation(ServerContext& ctx, const http::HttpRequest& req, http::HttpResponse& res, bool chat);

// OpenAI's stream: a role chunk first (chat), a chunk per step, the finish chunk, the usage chunk
// when asked for, and [DONE].
std::unique_ptr<StreamEncoder> openai_stream_encoder(std::shared_ptr<const GenerationRun> run, ResponseMeta meta);

}  // namespace ds::server
