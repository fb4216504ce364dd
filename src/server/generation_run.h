// One generation request after its API's translation (server/generation_request.h): the prompt
// built and checked against the engine's limits, the request submitted, and the engine's tokens
// turned into the one stream of events every API renders (content text, whole tool calls,
// logprobs, the end and its usage). Stop strings, tool-call parsing and usage live here once;
// each API's encoder (openai_response.h, anthropic/, responses/) only spells these events.
//
// Tool calls are released whole: a call is held until its arguments close (the JSON object's
// last brace), then comes as one event with its id, name and arguments. So a call cut by
// max_tokens (or by any end of the output) before its arguments close is never sent, streamed or
// not: the calls completed before it stand, the unfinished tail is dropped, and the finish reason
// stays what ended the output ("length" / "max_tokens").
#pragma once
#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "http/http_message.h"
#include "server/generation_request.h"
#include "server/openai_response.h"
#include "server/server_context.h"
#include "server/text_output.h"
#include "server/tools/tool_parser.h"

namespace ds::server {

// What one step released, in order: content first, then the calls that completed.
struct GenerationStep {
  std::string content;
  std::vector<ToolCall> calls;
  nlohmann::json logprobs;  // null when none were asked for or none came
  int tokens = 0;           // tokens generated in this step (0 while the prompt is prefilled)
  bool over = false;
};

// How the output ended, once it has.
struct GenerationOutcome {
  FinishReason reason = FinishReason::None;
  std::string error;        // FinishReason::Error: the engine's message
  std::string stop_string;  // the stop string that ended it, when one did
  bool called_tools = false;  // at least one whole call was released
  int dropped_calls = 0;      // calls cut before their arguments closed
};

// The whole output of a request that was not streamed.
struct GenerationOutput {
  std::string content;
  std::vector<ToolCall> calls;
  nlohmann::json logprobs;
  GenerationOutcome outcome;
};

class GenerationRun {
 public:
  ~GenerationRun();
  GenerationRun(const GenerationRun&) = delete;
  GenerationRun& operator=(const GenerationRun&) = delete;

  // Waits up to `wait` for the engine, then releases what is ready.
  GenerationStep step(std::chrono::milliseconds wait);
  // Every step until the end. A client that hangs up meanwhile cancels the request (ApiError
  // 499); an engine error is a 500, a shutdown a 503.
  GenerationOutput collect(const http::HttpRequest& req);

  const GenerationOutcome& outcome() const { return outcome_; }
  Usage usage() const;
  const std::string& model() const { return model_; }
  const GenerationRequest& request() const { return g_; }
  int prompt_tokens() const { return prompt_tokens_; }
  bool parses_tool_calls() const { return bool(parser_); }
  // The client is gone or the stream failed: the engine frees the request's blocks at its next step.
  void cancel();

 private:
  friend std::shared_ptr<GenerationRun> start_generation(ServerContext& ctx, GenerationRequest g,
                                                         std::function<std::string()> new_call_id);
  GenerationRun(ServerContext& ctx, GenerationRequest g, std::shared_ptr<RequestStream> stream, int prompt_tokens,
                std::string model, std::function<std::string()> new_call_id);
  bool pump(std::chrono::milliseconds wait, int* tokens);
  void take_events(const ParseEvents& ev, GenerationStep& out);
  void log_request();
  void remember_reply();  // server/reply_memory.h

  struct PendingCall {
    ToolCall call;
    int depth = 0;  // open braces and brackets outside strings
    bool in_string = false, escaped = false, opened = false, released = false;
    bool add(const std::string& piece);  // true once the arguments object has closed
  };

  ServerContext& ctx_;
  ActiveGuard guard_;
  GenerationRequest g_;
  std::shared_ptr<RequestStream> stream_;
  int prompt_tokens_;
  std::string model_;
  TextOutput text_;
  LogprobsBuilder lp_;
  std::unique_ptr<ToolCallParser> parser_;
  std::vector<PendingCall> calls_;  // by the parser's call index
  std::vector<int32_t> generated_;  // every token of the reply, as the engine sent them
  std::string content_all_;         // the content and calls the client is given, in full
  std::vector<ToolCall> calls_all_;
  int completion_tokens_ = 0;
  FinishReason reason_ = FinishReason::None;
  std::string error_;
  GenerationOutcome outcome_;
  bool done_ = false;
  bool logged_ = false;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::time_point> first_token_;
};

// Builds the prompt (checked against the vocabulary and max_model_len; a 400 naming
// g.prompt_field), and submits it. Refusals before submission throw ApiError. `new_call_id` gives
// the ids of calls whose format does not write one (empty: random_tool_call_id).
std::shared_ptr<GenerationRun> start_generation(ServerContext& ctx, GenerationRequest g,
                                                std::function<std::string()> new_call_id = {});

// The conversation a request belongs to, when its client names one in a header (Claude Code's
// X-Claude-Code-Session-Id, Codex's session-id, opencode's x-session-id / x-session-affinity);
// empty otherwise. Only logged (server/request_log.h).
std::string session_from_headers(const http::HttpRequest& req);

// The prompt's token ids, as start_generation builds them (count_tokens, /tokenize).
std::vector<int32_t> generation_prompt_ids(ServerContext& ctx, const GenerationRequest& g);

}  // namespace ds::server
