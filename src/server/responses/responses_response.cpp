#include "server/responses/responses_response.h"

#include "server/tools/tool_parser.h"

namespace ds::server {

using ojson = nlohmann::ordered_json;

namespace {

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

// The text as the client reads it back: bytes that are not UTF-8 become U+FFFD, as in the JSON
// it got. A stored turn holds this, so a continuation's prompt is the one the client would build
// by sending the output back itself.
std::string as_sent(const std::string& s) { return ojson::parse(dump(ojson(s))).get<std::string>(); }

std::string random_part() { return random_tool_call_id().substr(5); }  // after "call_"

ojson output_text_part(const std::string& text) {
  return {{"type", "output_text"}, {"annotations", ojson::array()}, {"text", text}};
}

class ResponsesStream final : public StreamEncoder {
 public:
  ResponsesStream(std::shared_ptr<const GenerationRun> run, std::shared_ptr<const ResponsesMeta> meta,
                  ResponsesStore& store)
      : run_(std::move(run)), meta_(meta), store_(store), w_(std::move(meta), true) {}

  std::string open() override { return w_.open(); }

  std::string step(const GenerationStep& s) override {
    if (s.content.empty() && s.calls.empty()) return {};
    return w_.add(s.content, s.calls);
  }

  std::string close(const GenerationOutcome& o) override {
    std::string out = w_.finish(o, run_->usage());
    store_response(store_, *meta_, w_);
    return out;
  }

  std::string fail(const std::string& message) override {
    if (w_.finished()) return {};
    return w_.failed(message);
  }

  std::string keepalive() override { return ": keep-alive\n\n"; }

 private:
  std::shared_ptr<const GenerationRun> run_;
  std::shared_ptr<const ResponsesMeta> meta_;
  ResponsesStore& store_;
  ResponseWriter w_;
};

}  // namespace

std::string new_response_id() { return "resp_" + random_part(); }

ojson responses_usage_json(const Usage& u) {
  return {{"input_tokens", u.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"output_tokens", u.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

ResponseWriter::ResponseWriter(std::shared_ptr<const ResponsesMeta> meta, bool streaming)
    : meta_(std::move(meta)), streaming_(streaming) {}

// `{"type", "sequence_number", ...fields}`: the fields' JSON spliced in after the two, so a large
// field (a response object) is written once, not copied into the event first.
std::string ResponseWriter::event_text(const char* type, int n, const std::string& fields_json) {
  std::string out = std::string("event: ") + type + "\ndata: {\"type\":\"" + type + "\",\"sequence_number\":" +
                    std::to_string(n);
  if (fields_json.size() > 2) {
    out += ',';
    out.append(fields_json, 1, std::string::npos);
  } else {
    out += '}';
  }
  out += "\n\n";
  return out;
}

template <class Fields>
std::string ResponseWriter::event(const char* type, Fields make) {
  const int n = sequence_++;
  if (!streaming_) return {};  // a whole response: only the numbering goes on
  return event_text(type, n, dump(make()));
}

std::string ResponseWriter::response_event(const char* type) {
  const int n = sequence_++;
  if (!streaming_) return {};
  return event_text(type, n, "{\"response\":" + dump(response_) + "}");
}

ojson ResponseWriter::response_object(const char* status) const {
  const ResponsesMeta& m = *meta_;
  // Appended in order with no search for an earlier key (they are all new): an ordered object's
  // insert scans every key before it, and the initializer-list form builds each pair as an array
  // first; this object is built once or twice a request.
  ojson r = ojson::object();
  auto& members = static_cast<std::vector<std::pair<const std::string, ojson>>&>(r.get_ref<ojson::object_t&>());
  members.reserve(29);
  auto put = [&](const char* key, ojson v) { members.emplace_back(key, std::move(v)); };
  auto echo = [&](const char* key, ojson fallback = nullptr) {
    auto it = m.echo.find(key);
    put(key, it == m.echo.end() ? std::move(fallback) : *it);
  };
  put("id", m.id);
  put("object", "response");
  put("created_at", m.created_at);
  put("status", status);
  put("background", false);
  put("error", nullptr);
  put("incomplete_details", nullptr);
  echo("instructions");
  echo("max_output_tokens");
  put("max_tool_calls", nullptr);
  put("model", m.model);
  put("output", output_);
  echo("parallel_tool_calls", true);
  echo("previous_response_id");
  echo("prompt_cache_key");
  echo("reasoning");
  put("safety_identifier", nullptr);
  put("service_tier", "default");
  echo("store", true);
  echo("temperature", 1.0);
  echo("text");
  echo("tool_choice", "auto");
  echo("tools", ojson::array());
  put("top_logprobs", 0);
  echo("top_p", 1.0);
  echo("truncation", "disabled");
  put("usage", nullptr);
  echo("user");
  echo("metadata", ojson::object());
  return r;
}

ojson ResponseWriter::message_item(const char* status) const {
  ojson content = ojson::array();
  if (std::string(status) != "in_progress") content.push_back(output_text_part(message_text_));
  return {{"id", message_id_}, {"type", "message"}, {"status", status}, {"role", "assistant"}, {"content", content}};
}

std::string ResponseWriter::open() {
  if (!streaming_) {
    sequence_ += 2;
    return {};
  }
  response_ = response_object("in_progress");
  std::string out = response_event("response.created");
  out += response_event("response.in_progress");
  return out;
}

std::string ResponseWriter::open_message() {
  message_ = int(output_.size());
  message_id_ = "msg_" + random_part();
  message_text_.clear();
  output_.push_back(message_item("in_progress"));
  std::string out = event("response.output_item.added", [&] { return ojson{{"output_index", message_}, {"item", output_.back()}}; });
  out += event("response.content_part.added", [&] {
    return ojson{{"item_id", message_id_}, {"output_index", message_}, {"content_index", 0}, {"part", output_text_part("")}};
  });
  return out;
}

std::string ResponseWriter::close_message(const char* status) {
  if (message_ < 0) return {};
  const int index = message_;
  message_ = -1;
  output_[size_t(index)] = message_item(status);
  std::string out = event("response.output_text.done", [&] {
    return ojson{{"item_id", message_id_},
                 {"output_index", index},
                 {"content_index", 0},
                 {"text", message_text_},
                 {"logprobs", ojson::array()}};
  });
  out += event("response.content_part.done", [&] {
    return ojson{{"item_id", message_id_},
                 {"output_index", index},
                 {"content_index", 0},
                 {"part", output_text_part(message_text_)}};
  });
  out += event("response.output_item.done", [&] { return ojson{{"output_index", index}, {"item", output_[size_t(index)]}}; });
  return out;
}

std::string ResponseWriter::add(const std::string& content, const std::vector<ToolCall>& calls) {
  std::string out;
  if (!content.empty()) {
    if (message_ < 0) out += open_message();
    message_text_ += content;
    text_ += content;
    out += event("response.output_text.delta", [&] {
      return ojson{{"item_id", message_id_},
                   {"output_index", message_},
                   {"content_index", 0},
                   {"delta", content},
                   {"logprobs", ojson::array()}};
    });
  }
  for (const ToolCall& c : calls) {
    out += close_message("completed");
    calls_.push_back(c);
    const int index = int(output_.size());
    const std::string id = "fc_" + random_part();
    ojson item = {{"id", id}, {"type", "function_call"}, {"status", "in_progress"}, {"arguments", ""}, {"call_id", c.id},
                  {"name", c.name}};
    if (auto it = meta_->namespaced.find(c.name); it != meta_->namespaced.end()) {
      item["name"] = it->second.name;
      item["namespace"] = it->second.space;
    }
    out += event("response.output_item.added", [&] { return ojson{{"output_index", index}, {"item", item}}; });
    out += event("response.function_call_arguments.delta",
                 [&] { return ojson{{"item_id", id}, {"output_index", index}, {"delta", c.arguments}}; });
    out += event("response.function_call_arguments.done", [&] {
      return ojson{{"item_id", id}, {"output_index", index}, {"name", item["name"]}, {"arguments", c.arguments}};
    });
    item["status"] = "completed";
    item["arguments"] = c.arguments;
    output_.push_back(std::move(item));
    out += event("response.output_item.done", [&] { return ojson{{"output_index", index}, {"item", output_.back()}}; });
  }
  return out;
}

std::string ResponseWriter::finish(const GenerationOutcome& o, const Usage& u) {
  if (o.reason == FinishReason::Error) return failed(o.error.empty() ? "the engine failed" : o.error);
  if (o.reason == FinishReason::Cancelled) return failed("the request was cancelled because the server is shutting down");
  const bool cut = o.reason == FinishReason::Length;
  std::string out;
  // A response with neither text nor calls still says so with one (empty) message.
  if (output_.empty() && message_ < 0) out += open_message();
  out += close_message(cut ? "incomplete" : "completed");
  response_ = response_object(cut ? "incomplete" : "completed");
  if (cut) response_["incomplete_details"] = {{"reason", "max_output_tokens"}};
  response_["usage"] = responses_usage_json(u);
  finished_ = true;
  out += response_event(cut ? "response.incomplete" : "response.completed");
  return out;
}

std::string ResponseWriter::failed(const std::string& message) {
  std::string out = close_message("incomplete");
  response_ = response_object("failed");
  response_["error"] = {{"code", "server_error"}, {"message", message}};
  finished_ = true;
  out += response_event("response.failed");
  return out;
}

StoredResponse ResponseWriter::stored() const {
  StoredResponse s;
  s.response = response_;
  s.conversation = meta_->conversation;
  ChatTurn turn{"assistant", as_sent(text_)};
  for (const ToolCall& c : calls_) turn.tool_calls.push_back({as_sent(c.id), as_sent(c.name), as_sent(c.arguments)});
  s.conversation.push_back(std::move(turn));
  return s;
}

void store_response(ResponsesStore& store, const ResponsesMeta& meta, const ResponseWriter& w) {
  if (!meta.store || !w.finished()) return;
  const std::string status = w.response().value("status", "");
  if (status != "completed" && status != "incomplete") return;  // a failed response has nothing to continue
  store.put(meta.id, w.stored());
}

std::unique_ptr<StreamEncoder> responses_stream_encoder(std::shared_ptr<const GenerationRun> run,
                                                        std::shared_ptr<const ResponsesMeta> meta,
                                                        ResponsesStore& store) {
  return std::make_unique<ResponsesStream>(std::move(run), std::move(meta), store);
}

}  // namespace ds::server
