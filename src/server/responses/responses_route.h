// POST /v1/responses, GET and DELETE /v1/responses/{id}: OpenAI's Responses API over the one
// internal request (responses_request.h in, responses_response.h out), with the stored responses
// of responses_store.h. Errors take OpenAI's shape.
#pragma once
#include "http/http_message.h"
#include "server/server_context.h"

namespace ds::server {

void handle_responses(ServerContext& ctx, const http::HttpRequest& req, http::HttpResponse& res);
// `id`: the path's last part.
void handle_get_response(ServerContext& ctx, const std::string& id, http::HttpResponse& res);
void handle_delete_response(ServerContext& ctx, const std::string& id, http::HttpResponse& res);

}  // namespace ds::server
