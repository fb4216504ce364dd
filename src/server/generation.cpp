#include "server/generation.h"

#include <memory>
#include <vector>

#include "server/api_error.h"
#include "server/generation_run.h"
#include "server/generation_stream.h"
#include "server/json_text.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/sse.h"

namespace ds::server {

using nlohmann::json;

namespace {

// OpenAI's chunks: a role chunk first (chat), a chunk per step, the finish chunk, the usage
// chunk when asked for, and [DONE].
class OpenAiStream final : public StreamEncoder {
 public:
  OpenAiStream(std::shared_ptr<const GenerationRun> run, ResponseMeta meta) : run_(std::move(run)), meta_(std::move(meta)) {}

  std::string open() override {
    if (!meta_.chat) return {};
    return sse_event(stream_chunk(meta_, {{"role", "assistant"}, {"content", ""}}, {}, nullptr, nullptr));
  }

  std::string step(const GenerationStep& s) override {
    std::vector<json> deltas;  // chat: the delta objects of this step's chunks
    if (run_->parses_tool_calls()) {
      if (!s.content.empty()) deltas.push_back({{"content", s.content}});
      for (const ToolCall& c : s.calls)
        deltas.push_back({{"tool_calls", json::array({tool_call_delta_json({calls_++, c.id, c.name, c.arguments})})}});
      if (deltas.empty() && !s.logprobs.is_null()) deltas.push_back({{"content", ""}});
    } else if (!s.content.empty() || !s.logprobs.is_null()) {
      deltas.push_back({{"content", s.content}});
    }
    std::string out;
    for (size_t i = 0; i < deltas.size(); ++i)  // logprobs ride on the step's first chunk
      out += sse_event(stream_chunk(meta_, deltas[i], s.content, nullptr, i == 0 ? s.logprobs : json(nullptr)));
    return out;
  }

  std::string close(const GenerationOutcome& o) override {
    std::string tail;
    if (o.reason == FinishReason::Error) {
      tail += sse_event(ApiError(500, "server_error", o.error, {}, {}, "engine").body());
    } else {
      const json finish = o.called_tools && o.reason == FinishReason::Stop ? json("tool_calls") : finish_reason_json(o.reason);
      tail += sse_event(stream_chunk(meta_, json::object(), "", finish, nullptr));
      if (meta_.include_usage) tail += sse_event(usage_chunk(meta_, run_->usage()));
    }
    return tail + sse_done();
  }

  std::string fail(const std::string& message) override {
    return sse_event(ApiError(500, "server_error", message, {}, {}, "internal").body()) + sse_done();
  }

  std::string keepalive() override { return sse_keepalive(); }

 private:
  std::shared_ptr<const GenerationRun> run_;
  ResponseMeta meta_;
  int calls_ = 0;
};

}  // namespace

std::unique_ptr<StreamEncoder> openai_stream_encoder(std::shared_ptr<const GenerationRun> run, ResponseMeta meta) {
  return std::make_unique<OpenAiStream>(std::move(run), std::move(meta));
}

namespace {

GenerationRequest parse_openai_body(const std::string& text, bool chat) {
  // The parsed bodies live only while the request is read out of them: a request with a large
  // schema may wait for its compile (server/output_constraint.h), and should not hold two parses
  // of its body meanwhile.
  const json body = parse_json_body(text);
  if (!chat) return parse_completion_request(body);
  // Schemas keep their property order only in an order-preserving parse (openai_request.h).
  bool needs_order = false;
  for (const char* key : {"tools", "tool_choice", "response_format", "parallel_tool_calls"})
    needs_order = needs_order || body.contains(key);
  if (!needs_order) return parse_chat_request(body);
  const nlohmann::ordered_json ordered = parse_json_body_ordered(text);
  return parse_chat_request(body, &ordered);
}

}  // namespace

void handle_generation(ServerContext& ctx, const http::HttpRequest& http_req, http::HttpResponse& res, bool chat) {
  if (ctx.draining.load()) throw shutting_down("the server is shutting down and accepts no new requests");
  GenerationRequest g = parse_openai_body(http_req.body, chat);
  g.api = chat ? Api::ChatCompletions : Api::Completions;
  g.prompt_field = chat ? "messages" : "prompt";
  g.session = session_from_headers(http_req);
  const bool stream = g.stream, include_usage = g.include_usage;
  std::shared_ptr<GenerationRun> run = start_generation(ctx, std::move(g));
  ResponseMeta meta = new_response_meta(chat, run->model(), stream && include_usage);
  if (!stream) {
    GenerationOutput out = run->collect(http_req);
    res.set_content(dump_json(full_response(meta, out.content, out.outcome.reason, out.logprobs, run->usage(), out.calls)),
                    "application/json");
    return;
  }
  stream_generation(run, openai_stream_encoder(run, std::move(meta)), res);
}

}  // namespace ds::server
