#include "server/anthropic/messages_route.h"

#include "server/anthropic/messages_request.h"
#include "server/anthropic/messages_response.h"
#include "server/api_error.h"
#include "server/generation_run.h"
#include "server/generation_stream.h"
#include "server/json_text.h"

namespace ds::server {

void handle_messages(ServerContext& ctx, const http::HttpRequest& req, http::HttpResponse& res) {
  if (ctx.draining.load()) throw shutting_down("the server is shutting down and accepts no new requests");
  GenerationRequest g = parse_messages_request(req.body);
  g.session = session_from_headers(req);
  const bool stream = g.stream;
  std::shared_ptr<GenerationRun> run = start_generation(ctx, std::move(g), new_tool_use_id);
  const std::string id = new_message_id();
  if (!stream) {
    GenerationOutput out = run->collect(req);
    res.set_content(dump_json(messages_full_response(id, run->model(), out, run->usage())), "application/json");
    return;
  }
  stream_generation(run, messages_stream_encoder(run, id), res);
}

void handle_count_tokens(ServerContext& ctx, const http::HttpRequest& req, http::HttpResponse& res) {
  GenerationRequest g = parse_messages_request(req.body, true);
  if (!g.model.empty() && !ctx.serves(g.model)) throw model_not_found(g.model, ctx.served_names);
  const size_t n = generation_prompt_ids(ctx, g).size();
  res.set_content(dump_json({{"input_tokens", n}}), "application/json");
}

}  // namespace ds::server
