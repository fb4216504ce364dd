#include "server/responses/responses_route.h"

#include <chrono>

#include "server/api_error.h"
#include "server/generation_run.h"
#include "server/generation_stream.h"
#include "server/json_text.h"
#include "server/responses/responses_request.h"
#include "server/responses/responses_response.h"

namespace ds::server {

namespace {

ApiError response_not_found(const std::string& id) {
  return ApiError(404, "invalid_request_error", "Response with id '" + id + "' not found.", {}, "response_not_found",
                  "not_found");
}

}  // namespace

void handle_responses(ServerContext& ctx, const http::HttpRequest& req, http::HttpResponse& res) {
  if (ctx.draining.load()) throw shutting_down("the server is shutting down and accepts no new requests");
  ResponsesRequest r = parse_responses_request(req.body, ctx.responses);
  // Codex names its session in a header, and the API in prompt_cache_key.
  r.g.session = session_from_headers(req);
  if (r.g.session.empty()) r.g.session = r.prompt_cache_key;
  const bool stream = r.g.stream;
  auto meta = std::make_shared<ResponsesMeta>();
  meta->id = new_response_id();
  meta->created_at =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  meta->echo = std::move(r.echo);
  meta->namespaced = std::move(r.namespaced);
  meta->store = r.store;
  if (r.store) meta->conversation = std::move(r.conversation);
  std::shared_ptr<GenerationRun> run = start_generation(ctx, std::move(r.g));
  meta->model = run->model();
  if (!stream) {
    GenerationOutput out = run->collect(req);
    ResponseWriter w(meta, false);
    w.open();
    w.add(out.content, out.calls);
    w.finish(out.outcome, run->usage());
    store_response(ctx.responses, *meta, w);
    res.set_content(w.response().dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
                    "application/json");
    return;
  }
  stream_generation(run, responses_stream_encoder(run, meta, ctx.responses), res);
}

void handle_get_response(ServerContext& ctx, const std::string& id, http::HttpResponse& res) {
  std::shared_ptr<const StoredResponse> s = ctx.responses.get(id);
  if (!s) throw response_not_found(id);
  res.set_content(s->response.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
                  "application/json");
}

void handle_delete_response(ServerContext& ctx, const std::string& id, http::HttpResponse& res) {
  if (!ctx.responses.erase(id)) throw response_not_found(id);
  res.set_content(dump_json({{"id", id}, {"object", "response.deleted"}, {"deleted", true}}), "application/json");
}

}  // namespace ds::server
