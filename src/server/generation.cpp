#include "server/generation.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <random>

#include "server/api_error.h"
#include "server/chat_prompt.h"
#include "server/json_text.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/sse.h"
#include "server/text_output.h"
#include "server/tool_parser.h"

namespace ds::server {

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

uint64_t fresh_seed() {
  // A request without a seed still gets a reproducible-in-principle RNG stream of its own.
  static std::atomic<uint64_t> counter{std::random_device{}() | (uint64_t(std::random_device{}()) << 32)};
  return counter.fetch_add(0x9e3779b97f4a7c15ull);
}

std::vector<int32_t> prompt_ids(ServerContext& ctx, const GenerationRequest& g) {
  const int vocab = ctx.engine.vocab_size();
  std::vector<int32_t> ids;
  if (g.chat) {
    ids = chat_prompt_ids(ctx.tokenizer, ctx.chat_format, g.messages, g.tools_json, true);
  } else if (g.prompt_is_ids) {
    ids.reserve(g.prompt_ids.size());
    for (size_t i = 0; i < g.prompt_ids.size(); ++i) {
      const int64_t t = g.prompt_ids[i];
      if (t < 0 || t >= vocab)
        throw invalid_request("'prompt[" + std::to_string(i) + "]' = " + std::to_string(t) +
                                  " is not a token id: the vocabulary is [0, " + std::to_string(vocab) + ")",
                              "prompt");
      ids.push_back(int32_t(t));
    }
  } else {
    ids = ctx.tokenizer.encode(g.prompt_text, true);
  }
  const char* field = g.chat ? "messages" : "prompt";
  if (ids.empty()) throw invalid_request(std::string("'") + field + "' encodes to no tokens", field);
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)  // tokenizer larger than the model's vocabulary
      throw invalid_request("the tokenizer produced token " + std::to_string(ids[i]) +
                                ", outside the model's vocabulary [0, " + std::to_string(vocab) + ")",
                            field);
  return ids;
}

// logit_bias ids checked against the model's vocabulary; a repeated id (as "7" and "07") takes
// its last bias.
std::vector<std::pair<int32_t, float>> checked_logit_bias(const GenerationRequest& g, int vocab) {
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& entry : g.logit_bias) {
    // Not a structured binding: clang before 16 cannot capture one in the lambda below.
    const auto id = entry.first;
    const auto bias = entry.second;
    if (id < 0 || id >= vocab)
      throw invalid_request("'logit_bias' names token " + std::to_string(id) + ", outside the vocabulary [0, " +
                                std::to_string(vocab) + ")",
                            "logit_bias");
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == int32_t(id); });
    if (it != out.end()) it->second = bias;
    else out.emplace_back(int32_t(id), bias);
  }
  return out;
}

// Whether the output is read for tool calls: tools declared, calls allowed, and no
// response_format asking for plain JSON instead.
bool parses_tool_calls(const GenerationRequest& g) {
  return g.chat && !g.tools.empty() && g.tool_choice != ToolChoice::None && g.response_format == ResponseFormat::Text;
}

std::vector<std::string> tool_names(const GenerationRequest& g) {
  std::vector<std::string> names;
  for (const ToolSpec& t : g.tools) names.push_back(t.name);
  return names;
}

// One request's response, shared by the content provider and its releaser.
class ResponseWriter {
 public:
  ResponseWriter(ServerContext& ctx, std::shared_ptr<RequestStream> stream, ResponseMeta meta,
                 const GenerationRequest& g, int prompt_tokens)
      : guard_(ctx.active), stream_(std::move(stream)), meta_(std::move(meta)),
        text_(ctx.tokenizer, g.stop, parses_tool_calls(g) ? ctx.tool_syntax_ids : std::vector<int32_t>{}),
        lp_(ctx.tokenizer, g.chat, g.top_logprobs), want_logprobs_(g.logprobs), prompt_tokens_(prompt_tokens) {
    if (parses_tool_calls(g)) {
      tool_format_ = tool_format_for(ctx.chat_format);
      tool_names_ = tool_names(g);
      if (g.stream) parser_ = make_tool_call_parser(*tool_format_, tool_names_, {});
    }
  }

  ~ResponseWriter() {
    if (!done_) stream_->cancel();  // the client went away: free the engine's blocks
  }

  // Moves the engine's tokens into text and logprobs. True once the request is over.
  bool pump(std::chrono::milliseconds wait) {
    StreamBatch b;
    stream_->wait(wait, &b);
    for (const TokenOutput& t : b.tokens) {
      if (reason_ != FinishReason::None) break;
      ++completion_tokens_;
      if (want_logprobs_) lp_.add(t, text_.size());
      if (text_.add(t.token)) {
        reason_ = FinishReason::Stop;
        stream_->cancel();  // a stop string ended it; the engine need not go on
      }
    }
    if (b.finished && reason_ == FinishReason::None) {
      reason_ = b.reason;
      error_ = b.error;
    }
    return reason_ != FinishReason::None;
  }

  // Waits for the whole answer. A client that hangs up meanwhile cancels the request: its
  // blocks and its share of the batch go back at once, not when the answer would have ended.
  json full_body(const http::HttpRequest& req) {
    while (!pump(50ms)) {
      if (req.client_gone()) {
        stream_->cancel();
        done_ = true;
        throw ApiError(499, "invalid_request_error", "the client closed the connection", {}, {}, "client_gone");
      }
    }
    done_ = true;
    if (reason_ == FinishReason::Error) throw ApiError(500, "server_error", error_, {}, {}, "engine");
    if (reason_ == FinishReason::Cancelled)
      throw shutting_down("the request was cancelled because the server is shutting down");
    json lp = want_logprobs_ ? lp_.take() : json(nullptr);
    std::string text = text_.flush();
    if (tool_format_) {
      // The streaming parser's rules over the whole text (tool_parser.h): the same content and
      // calls a streamed response gives, whatever ended the output.
      ParsedOutput parsed = parse_tool_calls(*tool_format_, text, tool_names_, {});
      return full_response(meta_, parsed.content, reason_, lp, usage(), parsed.calls);
    }
    return full_response(meta_, text, reason_, lp, usage());
  }

  // Writes the whole stream. Nothing may escape it: a failure ends this stream with an error
  // event (or just closes it) and cancels the request; everyone else carries on.
  void stream_all(http::ChunkSink& sink) {
    while (stream_step(sink)) {
    }
  }

 private:
  // One step of the stream: false once it is over (finished, failed, or the client gone).
  bool stream_step(http::ChunkSink& sink) {
    try {
      return stream_step_unguarded(sink);
    } catch (const std::exception& e) {
      return fail_stream(sink, e.what());
    } catch (...) {
      return fail_stream(sink, "unknown error");
    }
  }

  bool fail_stream(http::ChunkSink& sink, const std::string& what) {
    stream_->cancel();
    done_ = true;
    std::string tail;
    try {
      tail = sse_event(ApiError(500, "server_error", "the response failed: " + what, {}, {}, "internal").body()) + sse_done();
    } catch (...) {
      return false;
    }
    sink.write(tail);
    return false;
  }

  bool stream_step_unguarded(http::ChunkSink& sink) {
    auto write = [&](const std::string& s) {
      if (sink.write(s)) return true;
      stream_->cancel();
      return false;
    };
    if (sink.client_gone()) {  // hung up: no write needed to learn it
      stream_->cancel();
      return false;
    }
    if (meta_.chat && !sent_role_) {
      sent_role_ = true;
      return write(sse_event(stream_chunk(meta_, {{"role", "assistant"}, {"content", ""}}, {}, nullptr, nullptr)));
    }
    const bool over = pump(200ms);
    std::string delta = text_.take();
    if (over) delta += text_.flush();
    json lp = (want_logprobs_ && !lp_.empty()) ? lp_.take() : json(nullptr);
    std::vector<json> deltas;  // chat: the delta objects of this step's chunks
    if (parser_) {
      ParseEvents ev = parser_->feed(delta);
      if (over) {
        ParseEvents tail = parser_->finish();
        ev.content += tail.content;
        for (auto& c : tail.calls) ev.calls.push_back(std::move(c));
      }
      if (!ev.content.empty()) deltas.push_back({{"content", ev.content}});
      for (const ToolCallDelta& c : ev.calls) {
        deltas.push_back({{"tool_calls", json::array({tool_call_delta_json(c)})}});
        sent_calls_ = true;
      }
      if (deltas.empty() && !lp.is_null()) deltas.push_back({{"content", ""}});
    } else if (!delta.empty() || !lp.is_null()) {
      deltas.push_back({{"content", delta}});
    }
    if (!deltas.empty()) {
      last_write_ = std::chrono::steady_clock::now();
      std::string out;
      for (size_t i = 0; i < deltas.size(); ++i)  // logprobs ride on the step's first chunk
        out += sse_event(stream_chunk(meta_, deltas[i], delta, nullptr, i == 0 ? lp : json(nullptr)));
      if (!write(out)) return false;
    } else if (!over) {
      // Measured, not counted in waits: a step can return at once with tokens that add no text
      // yet (a held-back tool call), and those must not add up to keep-alives.
      const auto now = std::chrono::steady_clock::now();
      if (now - last_write_ >= 2000ms) {  // keeps proxies and clients from timing the stream out
        last_write_ = now;
        if (!write(sse_keepalive())) return false;
      }
    }
    if (!over) return true;
    std::string tail;
    if (reason_ == FinishReason::Error) {
      tail += sse_event(ApiError(500, "server_error", error_, {}, {}, "engine").body());
    } else {
      const json finish = sent_calls_ && reason_ == FinishReason::Stop ? json("tool_calls") : finish_reason_json(reason_);
      tail += sse_event(stream_chunk(meta_, json::object(), "", finish, nullptr));
      if (meta_.include_usage) tail += sse_event(usage_chunk(meta_, usage()));
    }
    tail += sse_done();
    done_ = true;
    sink.write(tail);
    return false;
  }

  Usage usage() const {
    Usage u{prompt_tokens_, completion_tokens_, stream_->cached_tokens()};
    u.speculated = stream_->speculated();
    u.accepted_prediction_tokens = stream_->accepted_prediction_tokens();
    u.rejected_prediction_tokens = stream_->rejected_prediction_tokens();
    return u;
  }

  ActiveGuard guard_;
  std::shared_ptr<RequestStream> stream_;
  ResponseMeta meta_;
  TextOutput text_;
  LogprobsBuilder lp_;
  bool want_logprobs_;
  int prompt_tokens_;
  int completion_tokens_ = 0;
  FinishReason reason_ = FinishReason::None;
  std::string error_;
  bool sent_role_ = false;
  bool done_ = false;
  std::optional<ToolFormat> tool_format_;  // set when the output is read for tool calls
  std::vector<std::string> tool_names_;
  std::unique_ptr<ToolCallParser> parser_;  // streamed responses
  bool sent_calls_ = false;
  std::chrono::steady_clock::time_point last_write_ = std::chrono::steady_clock::now();
};

}  // namespace

void handle_generation(ServerContext& ctx, const http::HttpRequest& http_req, http::HttpResponse& res, bool chat) {
  if (ctx.draining.load()) throw shutting_down("the server is shutting down and accepts no new requests");
  // The parsed bodies live only while the request is read out of them: a request with a large
  // schema may wait for its compile (server/output_constraint.h), and should not hold two parses
  // of its body meanwhile.
  GenerationRequest g = [&] {
    const json body = parse_json_body(http_req.body);
    if (!chat) return parse_completion_request(body);
    // Schemas keep their property order only in an order-preserving parse (openai_request.h).
    bool needs_order = false;
    for (const char* key : {"tools", "tool_choice", "response_format", "parallel_tool_calls"})
      needs_order = needs_order || body.contains(key);
    if (!needs_order) return parse_chat_request(body);
    const nlohmann::ordered_json ordered = parse_json_body_ordered(http_req.body);
    return parse_chat_request(body, &ordered);
  }();
  const std::string model = g.model.empty() ? ctx.opts.served_model_names.front() : g.model;
  if (!ctx.serves(model)) throw model_not_found(model, ctx.served_names);

  std::vector<int32_t> ids = prompt_ids(ctx, g);
  const int n = int(ids.size());
  const int max_len = ctx.engine.config().max_model_len;
  const char* pfield = chat ? "messages" : "prompt";
  if (n >= max_len)
    throw invalid_request("the prompt has " + std::to_string(n) + " tokens, but max_model_len is " +
                              std::to_string(max_len) + " (prompt and at least one new token must fit)",
                          pfield);
  int max_tokens = max_len - n;
  if (g.max_tokens) {
    if (*g.max_tokens > int64_t(max_len - n))
      throw invalid_request("max_tokens " + std::to_string(*g.max_tokens) + " plus the prompt's " +
                                std::to_string(n) + " tokens exceeds max_model_len " + std::to_string(max_len) +
                                " (at most " + std::to_string(max_len - n) + " new tokens fit)",
                            "max_tokens");
    max_tokens = int(*g.max_tokens);
  }

  Request r;
  r.prompt = std::move(ids);
  r.sampling = g.sampling;
  r.sampling.logit_bias = checked_logit_bias(g, ctx.engine.vocab_size());
  r.constraint = ctx.constraints.for_request(g);
  if (!g.seed_given) r.sampling.seed = fresh_seed();
  r.sampling.reproducible = g.seed_given;  // a seed the client gave repeats its text, speculation or not
  r.max_tokens = max_tokens;
  r.ignore_eos = g.ignore_eos;
  if (chat && ctx.end_of_turn >= 0) r.stop_token_ids.push_back(ctx.end_of_turn);
  r.logprobs = g.logprobs ? g.top_logprobs : -1;

  std::shared_ptr<RequestStream> stream;
  try {
    stream = ctx.engine.submit(std::move(r));
  } catch (const EngineBusy& e) {
    throw overloaded(e.what());
  } catch (const EngineStopped& e) {
    throw shutting_down(e.what());
  } catch (const Error& e) {
    throw invalid_request(e.what(), pfield);
  }

  auto writer = std::make_shared<ResponseWriter>(
      ctx, stream, new_response_meta(chat, model, g.stream && g.include_usage), g, n);
  if (!g.stream) {
    res.set_content(dump_json(writer->full_body(http_req)), "application/json");
    return;
  }
  res.content_type = "text/event-stream";
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  // The writer lives as long as the stream function; dropping it cancels an unfinished request
  // and ends the request's share of `active`.
  res.stream = [writer](http::ChunkSink& sink) { writer->stream_all(sink); };
}

}  // namespace ds::server
