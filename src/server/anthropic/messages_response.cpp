#include "server/anthropic/messages_response.h"

#include "server/api_error.h"
#include "server/json_text.h"
#include "server/tools/tool_parser.h"

namespace ds::server {

using nlohmann::json;

namespace {

// A call's arguments as the tool_use input object. The run releases a call once its arguments
// close, so they parse; arguments that close but are not JSON (the model's own braces in a
// broken object) come back as text instead of an input that would lie about them.
std::optional<json> call_input(const ToolCall& c) {
  json v = json::parse(c.arguments, nullptr, false);
  if (v.is_discarded() || !v.is_object()) return std::nullopt;
  return v;
}

std::string sse(const char* event, const json& data) {
  return std::string("event: ") + event + "\ndata: " + dump_json(data) + "\n\n";
}

class MessagesStream final : public StreamEncoder {
 public:
  MessagesStream(std::shared_ptr<const GenerationRun> run, std::string id) : run_(std::move(run)), id_(std::move(id)) {}

  std::string open() override { return {}; }

  std::string step(const GenerationStep& s) override {
    std::string out;
    if (!started_ && (s.tokens > 0 || s.over)) out += start();
    if (!s.content.empty()) {
      if (open_ != Block::Text) {
        out += stop_block();
        out += sse("content_block_start", {{"type", "content_block_start"},
                                           {"index", index_},
                                           {"content_block", {{"type", "text"}, {"text", ""}}}});
        open_ = Block::Text;
      }
      out += sse("content_block_delta", {{"type", "content_block_delta"},
                                         {"index", index_},
                                         {"delta", {{"type", "text_delta"}, {"text", s.content}}}});
    }
    for (const ToolCall& c : s.calls) {
      out += stop_block();
      if (auto input = call_input(c)) {
        out += sse("content_block_start",
                   {{"type", "content_block_start"},
                    {"index", index_},
                    {"content_block", {{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", json::object()}}}});
        out += sse("content_block_delta", {{"type", "content_block_delta"},
                                           {"index", index_},
                                           {"delta", {{"type", "input_json_delta"}, {"partial_json", input->dump()}}}});
        open_ = Block::ToolUse;
      } else {
        out += sse("content_block_start", {{"type", "content_block_start"},
                                           {"index", index_},
                                           {"content_block", {{"type", "text"}, {"text", ""}}}});
        out += sse("content_block_delta", {{"type", "content_block_delta"},
                                           {"index", index_},
                                           {"delta", {{"type", "text_delta"}, {"text", c.arguments}}}});
        open_ = Block::Text;
      }
      out += stop_block();
    }
    return out;
  }

  std::string close(const GenerationOutcome& o) override {
    if (o.reason == FinishReason::Error)
      return sse("error", ApiError(500, "server_error", o.error, {}, {}, "engine").anthropic_body());
    if (o.reason == FinishReason::Cancelled)
      return sse("error", ApiError(503, "server_error", "the request was cancelled because the server is shutting down")
                              .anthropic_body());
    std::string out;
    if (!started_) out += start();
    out += stop_block();
    const Usage u = run_->usage();
    out += sse("message_delta", {{"type", "message_delta"},
                                 {"delta",
                                  {{"stop_reason", messages_stop_reason(o)},
                                   {"stop_sequence", o.stop_string.empty() ? json(nullptr) : json(o.stop_string)}}},
                                 {"usage", messages_usage_json(u)}});
    out += sse("message_stop", {{"type", "message_stop"}});
    return out;
  }

  std::string fail(const std::string& message) override {
    return sse("error", ApiError(500, "server_error", message).anthropic_body());
  }

  std::string keepalive() override { return sse("ping", {{"type", "ping"}}); }

 private:
  enum class Block { None, Text, ToolUse };

  std::string start() {
    started_ = true;
    json usage = messages_usage_json(run_->usage());
    return sse("message_start", {{"type", "message_start"},
                                 {"message",
                                  {{"id", id_},
                                   {"type", "message"},
                                   {"role", "assistant"},
                                   {"model", run_->model()},
                                   {"content", json::array()},
                                   {"stop_reason", nullptr},
                                   {"stop_sequence", nullptr},
                                   {"usage", usage}}}});
  }

  std::string stop_block() {
    if (open_ == Block::None) return {};
    open_ = Block::None;
    return sse("content_block_stop", {{"type", "content_block_stop"}, {"index", index_++}});
  }

  std::shared_ptr<const GenerationRun> run_;
  std::string id_;
  bool started_ = false;
  Block open_ = Block::None;
  int index_ = 0;
};

}  // namespace

json messages_usage_json(const Usage& u) {
  const int read = u.cached_tokens, created = u.cache_creation_tokens;
  return {{"input_tokens", std::max(0, u.prompt_tokens - read - created)},
          {"cache_creation_input_tokens", created},
          {"cache_read_input_tokens", read},
          {"output_tokens", u.completion_tokens}};
}

const char* messages_stop_reason(const GenerationOutcome& o) {
  if (o.reason == FinishReason::Length) return "max_tokens";
  if (!o.stop_string.empty()) return "stop_sequence";
  if (o.called_tools) return "tool_use";
  return "end_turn";
}

std::string new_message_id() {
  std::string id = random_tool_call_id();  // "call_" and 24 random characters
  return "msg_" + id.substr(5);
}

std::string new_tool_use_id() { return "toolu_" + random_tool_call_id().substr(5); }

json messages_full_response(const std::string& id, const std::string& model, const GenerationOutput& out,
                            const Usage& usage) {
  json content = json::array();
  if (!out.content.empty()) content.push_back({{"type", "text"}, {"text", out.content}});
  for (const ToolCall& c : out.calls) {
    if (auto input = call_input(c))
      content.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", *input}});
    else
      content.push_back({{"type", "text"}, {"text", c.arguments}});
  }
  const GenerationOutcome& o = out.outcome;
  return {{"id", id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model},
          {"content", content},
          {"stop_reason", messages_stop_reason(o)},
          {"stop_sequence", o.stop_string.empty() ? json(nullptr) : json(o.stop_string)},
          {"usage", messages_usage_json(usage)}};
}

std::unique_ptr<StreamEncoder> messages_stream_encoder(std::shared_ptr<const GenerationRun> run, std::string id) {
  return std::make_unique<MessagesStream>(std::move(run), std::move(id));
}

}  // namespace ds::server
