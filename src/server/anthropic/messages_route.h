// POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API over the one internal
// request (messages_request.h in, messages_response.h out). Errors take Anthropic's shape
// (ApiError::anthropic_body), chosen by the route table for every path under /v1/messages.
#pragma once
#include "http/http_message.h"
#include "server/server_context.h"

namespace ds::server {

void handle_messages(ServerContext& ctx, const http::HttpRequest& req, http::HttpResponse& res);
// {"input_tokens": N}: the prompt the same body would run, with its tools, counted.
void handle_count_tokens(ServerContext& ctx, const http::HttpRequest& req, http::HttpResponse& res);

}  // namespace ds::server
