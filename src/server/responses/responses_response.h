// OpenAI Responses output, from the internal stream of events (server/generation_run.h):
//   whole:    the response object {"id": "resp_...", "object": "response", "created_at",
//             "status" (completed / incomplete / failed), "incomplete_details" ({"reason":
//             "max_output_tokens"} when the output was cut), "error", "model", "output" (a
//             "message" item {"id": "msg_...", "role": "assistant", "status", "content":
//             [{"type": "output_text", "text", "annotations": []}]} for the text, a
//             "function_call" item {"id": "fc_...", "call_id", "name", "arguments", "status",
//             and "namespace" for a namespaced tool} per call), "usage" ({input_tokens,
//             input_tokens_details.cached_tokens, output_tokens,
//             output_tokens_details.reasoning_tokens, total_tokens}), and the request's fields
//             the API repeats (instructions, tools, tool_choice, text, temperature, ...);
//   streamed: `event: <type>` / `data: <json>` pairs, each with a sequence_number counting from
//             0: response.created, response.in_progress; per message response.output_item.added,
//             response.content_part.added, response.output_text.delta..., response.output_text.done,
//             response.content_part.done, response.output_item.done; per call
//             response.output_item.added, response.function_call_arguments.delta (the whole
//             arguments: calls come whole), response.function_call_arguments.done,
//             response.output_item.done; then response.completed, or response.incomplete (cut by
//             max_output_tokens), or response.failed with {"code": "server_error", "message"}.
//             Keep-alives are SSE comments.
// Calls come whole (generation_run.h), so a call cut by max_output_tokens is not in the output:
// the calls completed before it are, with status "incomplete" on the response.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "server/generation_run.h"
#include "server/generation_stream.h"
#include "server/responses/responses_request.h"
#include "server/responses/responses_store.h"

namespace ds::server {

// What a response needs beyond the run's events.
struct ResponsesMeta {
  std::string id;  // resp_...
  int64_t created_at = 0;
  std::string model;
  nlohmann::ordered_json echo;  // ResponsesRequest::echo
  std::map<std::string, NamespacedTool> namespaced;
  bool store = true;
  std::vector<ChatTurn> conversation;  // kept only when store
};

// "resp_", "msg_", "fc_" and random letters and digits.
std::string new_response_id();

nlohmann::ordered_json responses_usage_json(const Usage& u);

// The output items and the response object, built from a run's events; each change also comes
// as the stream's events (empty strings when `streaming` is false). The whole response and the
// stream are built by the same steps, so they agree.
class ResponseWriter {
 public:
  ResponseWriter(std::shared_ptr<const ResponsesMeta> meta, bool streaming);

  std::string open();  // response.created, response.in_progress
  std::string add(const std::string& content, const std::vector<ToolCall>& calls);
  // The end: the open message closed, then response.completed / .incomplete; an engine error or
  // a cancelled request is failed().
  std::string finish(const GenerationOutcome& o, const Usage& u);
  std::string failed(const std::string& message);

  // The response object: in progress after open() (streaming), whole after finish().
  const nlohmann::ordered_json& response() const { return response_; }
  bool finished() const { return finished_; }
  // What the store keeps of a finished response.
  StoredResponse stored() const;

 private:
  static std::string event_text(const char* type, int n, const std::string& fields_json);
  // One numbered event; `make` builds its fields, called only when streaming.
  template <class Fields>
  std::string event(const char* type, Fields make);
  std::string response_event(const char* type);  // {"response": the response as it is now}
  std::string open_message();
  std::string close_message(const char* status);
  nlohmann::ordered_json response_object(const char* status) const;
  nlohmann::ordered_json message_item(const char* status) const;

  std::shared_ptr<const ResponsesMeta> meta_;
  bool streaming_;
  int sequence_ = 0;
  nlohmann::ordered_json output_ = nlohmann::ordered_json::array();
  nlohmann::ordered_json response_;
  int message_ = -1;  // output index of the open message item
  std::string message_id_, message_text_;
  std::string text_;                    // all output text, for the stored assistant turn
  std::vector<ToolCall> calls_;         // as the model named them
  bool finished_ = false;
};

// Stores `w`'s response when its request asked for it.
void store_response(ResponsesStore& store, const ResponsesMeta& meta, const ResponseWriter& w);

std::unique_ptr<StreamEncoder> responses_stream_encoder(std::shared_ptr<const GenerationRun> run,
                                                        std::shared_ptr<const ResponsesMeta> meta,
                                                        ResponsesStore& store);

}  // namespace ds::server
