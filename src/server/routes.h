// Every HTTP route of `deltaserve serve`, and the guards around them: API-key check, body size
// limit, OpenAI-shaped errors for anything that goes wrong, including unknown routes. No
// exception escapes a handler, so no request can take the server down.
#pragma once
#include <httplib.h>

#include "server/server_context.h"

namespace ds::server {

void install_routes(httplib::Server& svr, ServerContext& ctx);

}  // namespace ds::server
