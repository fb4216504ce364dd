// Every HTTP route of `deltaserve serve`, and the guards around them: the browser-facing
// checks and API key before a body is read, OpenAI-shaped errors for anything that goes wrong
// (the transport's own included), unknown routes too. No exception escapes a handler, so no
// request can take the server down.
#pragma once
#include "http/http_transport.h"
#include "server/server_context.h"

namespace ds::server {

http::HttpApp make_http_app(ServerContext& ctx);

}  // namespace ds::server
