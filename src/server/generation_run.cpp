#include "server/generation_run.h"

#include <algorithm>
#include <atomic>
#include <random>

#include "server/api_error.h"
#include "server/chat_prompt.h"

namespace ds::server {

using nlohmann::json;
using namespace std::chrono_literals;

const char* api_name(Api api) {
  switch (api) {
    case Api::ChatCompletions: return "chat";
    case Api::Completions: return "completions";
    case Api::Messages: return "messages";
    case Api::Responses: return "responses";
  }
  return "chat";
}

namespace {

uint64_t fresh_seed() {
  // A request without a seed still gets a reproducible-in-principle RNG stream of its own.
  static std::atomic<uint64_t> counter{std::random_device{}() | (uint64_t(std::random_device{}()) << 32)};
  return counter.fetch_add(0x9e3779b97f4a7c15ull);
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
bool reads_tool_calls(const GenerationRequest& g) {
  return g.chat && !g.tools.empty() && g.tool_choice != ToolChoice::None && g.response_format == ResponseFormat::Text;
}

std::vector<std::string> tool_names(const GenerationRequest& g) {
  std::vector<std::string> names;
  for (const ToolSpec& t : g.tools) names.push_back(t.name);
  return names;
}

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

std::string session_from_headers(const http::HttpRequest& req) {
  for (const char* name : {"X-Claude-Code-Session-Id", "session-id", "x-session-id", "x-session-affinity"}) {
    std::string v = req.header(name);
    if (!v.empty()) return v.substr(0, 200);
  }
  return {};
}

std::vector<int32_t> generation_prompt_ids(ServerContext& ctx, const GenerationRequest& g) {
  const int vocab = ctx.engine.vocab_size();
  const std::string& field = g.prompt_field;
  std::vector<int32_t> ids;
  if (g.chat) {
    std::vector<ChatTurn> turns = g.messages;
    ctx.replies.recall(turns);
    ids = chat_prompt_ids(ctx.tokenizer, ctx.chat_format, turns, g.tools_json, true);
  } else if (g.prompt_is_ids) {
    ids.reserve(g.prompt_ids.size());
    for (size_t i = 0; i < g.prompt_ids.size(); ++i) {
      const int64_t t = g.prompt_ids[i];
      if (t < 0 || t >= vocab)
        throw invalid_request("'" + field + "[" + std::to_string(i) + "]' = " + std::to_string(t) +
                                  " is not a token id: the vocabulary is [0, " + std::to_string(vocab) + ")",
                              field);
      ids.push_back(int32_t(t));
    }
  } else {
    ids = ctx.tokenizer.encode(g.prompt_text, true);
  }
  if (ids.empty()) throw invalid_request("'" + field + "' encodes to no tokens", field);
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)  // tokenizer larger than the model's vocabulary
      throw invalid_request("the tokenizer produced token " + std::to_string(ids[i]) +
                                ", outside the model's vocabulary [0, " + std::to_string(vocab) + ")",
                            field);
  return ids;
}

std::shared_ptr<GenerationRun> start_generation(ServerContext& ctx, GenerationRequest g,
                                                std::function<std::string()> new_call_id) {
  if (ctx.draining.load()) throw shutting_down("the server is shutting down and accepts no new requests");
  const std::string model = g.model.empty() ? ctx.opts.served_model_names.front() : g.model;
  if (!ctx.serves(model)) throw model_not_found(model, ctx.served_names);

  std::vector<int32_t> ids = generation_prompt_ids(ctx, g);
  const int n = int(ids.size());
  const int max_len = ctx.engine.config().max_model_len;
  if (n >= max_len)
    throw invalid_request("the prompt has " + std::to_string(n) + " tokens, but max_model_len is " +
                              std::to_string(max_len) + " (prompt and at least one new token must fit)",
                          g.prompt_field);
  int max_tokens = max_len - n;
  if (g.max_tokens) {
    if (*g.max_tokens > int64_t(max_len - n))
      throw invalid_request(g.max_tokens_field + " " + std::to_string(*g.max_tokens) + " plus the prompt's " +
                                std::to_string(n) + " tokens exceeds max_model_len " + std::to_string(max_len) +
                                " (at most " + std::to_string(max_len - n) + " new tokens fit)",
                            g.max_tokens_field);
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
  if (g.chat && ctx.end_of_turn >= 0) r.stop_token_ids.push_back(ctx.end_of_turn);
  r.logprobs = g.logprobs ? g.top_logprobs : -1;

  std::shared_ptr<RequestStream> stream;
  try {
    stream = ctx.engine.submit(std::move(r));
  } catch (const EngineBusy& e) {
    throw overloaded(e.what());
  } catch (const EngineStopped& e) {
    throw shutting_down(e.what());
  } catch (const Error& e) {
    throw invalid_request(e.what(), g.prompt_field);
  }
  return std::shared_ptr<GenerationRun>(
      new GenerationRun(ctx, std::move(g), std::move(stream), n, model, std::move(new_call_id)));
}

GenerationRun::GenerationRun(ServerContext& ctx, GenerationRequest g, std::shared_ptr<RequestStream> stream,
                             int prompt_tokens, std::string model, std::function<std::string()> new_call_id)
    : ctx_(ctx), guard_(ctx.active), g_(std::move(g)), stream_(std::move(stream)), prompt_tokens_(prompt_tokens),
      model_(std::move(model)),
      text_(ctx.tokenizer, g_.stop, reads_tool_calls(g_) ? ctx.tool_syntax_ids : std::vector<int32_t>{}),
      lp_(ctx.tokenizer, g_.chat, g_.top_logprobs) {
  if (reads_tool_calls(g_)) parser_ = make_tool_call_parser(tool_format_for(ctx.chat_format), tool_names(g_), std::move(new_call_id));
}

GenerationRun::~GenerationRun() {
  if (!done_) stream_->cancel();  // the client went away: free the engine's blocks
  log_request();
}

void GenerationRun::cancel() {
  stream_->cancel();
  if (!done_) {
    done_ = true;
    if (reason_ == FinishReason::None) reason_ = FinishReason::Cancelled;
    outcome_.reason = reason_;
  }
}

Usage GenerationRun::usage() const {
  Usage u{prompt_tokens_, completion_tokens_, stream_->cached_tokens()};
  u.cache_creation_tokens = std::max(0, stream_->cache_written_end() - u.cached_tokens);
  u.speculated = stream_->speculated();
  u.accepted_prediction_tokens = stream_->accepted_prediction_tokens();
  u.rejected_prediction_tokens = stream_->rejected_prediction_tokens();
  return u;
}

bool GenerationRun::pump(std::chrono::milliseconds wait, int* tokens) {
  StreamBatch b;
  stream_->wait(wait, &b);
  for (const TokenOutput& t : b.tokens) {
    if (reason_ != FinishReason::None) break;
    if (!first_token_) first_token_ = std::chrono::steady_clock::now();
    ++completion_tokens_;
    ++*tokens;
    generated_.push_back(t.token);
    if (g_.logprobs) lp_.add(t, text_.size());
    if (text_.add(t.token)) {
      reason_ = FinishReason::Stop;
      outcome_.stop_string = text_.stop_string();
      stream_->cancel();  // a stop string ended it; the engine need not go on
    }
  }
  if (b.finished && reason_ == FinishReason::None) {
    reason_ = b.reason;
    error_ = b.error;
  }
  return reason_ != FinishReason::None;
}

bool GenerationRun::PendingCall::add(const std::string& piece) {
  for (char c : piece) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      opened = true;
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return opened && depth <= 0;
}

void GenerationRun::take_events(const ParseEvents& ev, GenerationStep& out) {
  out.content += ev.content;
  content_all_ += ev.content;
  for (const ToolCallDelta& d : ev.calls) {
    if (d.index >= int(calls_.size())) calls_.resize(size_t(d.index) + 1);
    PendingCall& p = calls_[size_t(d.index)];
    if (!d.id.empty() || !d.name.empty()) {
      p.call.id = d.id;
      p.call.name = d.name;
    }
    // Arguments after the object closed would be the parser's bug (it trims them); the call
    // already went out as it was.
    if (p.released) continue;
    p.call.arguments += d.arguments;
    if (p.add(d.arguments)) {
      p.released = true;
      out.calls.push_back(p.call);
      calls_all_.push_back(p.call);
      outcome_.called_tools = true;
    }
  }
}

GenerationStep GenerationRun::step(std::chrono::milliseconds wait) {
  GenerationStep out;
  if (done_) {
    out.over = true;
    return out;
  }
  const bool over = pump(wait, &out.tokens);
  std::string delta = text_.take();
  if (over) delta += text_.flush();
  if (g_.logprobs && !lp_.empty()) out.logprobs = lp_.take();
  if (parser_) {
    take_events(parser_->feed(delta), out);
    if (over) take_events(parser_->finish(), out);
  } else {
    content_all_ += delta;
    out.content = std::move(delta);
  }
  if (over) {
    done_ = true;
    out.over = true;
    outcome_.reason = reason_;
    outcome_.error = error_;
    for (const PendingCall& p : calls_) outcome_.dropped_calls += p.released ? 0 : 1;
    remember_reply();
    log_request();
  }
  return out;
}

void GenerationRun::remember_reply() {
  // Only a reply the client saw whole: not one cut by a stop string (its ids run past the cut)
  // or missing a dropped call.
  if (!g_.chat || !outcome_.stop_string.empty() || outcome_.dropped_calls > 0) return;
  if (outcome_.reason != FinishReason::Stop && outcome_.reason != FinishReason::Length) return;
  std::vector<int32_t> ids = std::move(generated_);
  // The end-of-turn token that ended it: the template writes its own after the turn.
  if (outcome_.reason == FinishReason::Stop && !ids.empty() && ctx_.tokenizer.is_special(ids.back())) ids.pop_back();
  if (ids.empty()) return;
  std::string text;
  try {
    text = ctx_.tokenizer.decode(ids);
  } catch (const std::exception&) {
    return;  // ids the tokenizer cannot decode (a padded vocabulary): nothing to feed back
  }
  ctx_.replies.remember(content_all_, calls_all_, std::move(ids), std::move(text));
}

GenerationOutput GenerationRun::collect(const http::HttpRequest& req) {
  GenerationOutput all;
  bool any_logprobs = false;
  json lp = json::array();
  for (;;) {
    GenerationStep s = step(50ms);
    all.content += s.content;
    for (ToolCall& c : s.calls) all.calls.push_back(std::move(c));
    if (!s.logprobs.is_null()) {
      any_logprobs = true;
      lp.push_back(std::move(s.logprobs));
    }
    if (s.over) break;
    if (req.client_gone()) {
      cancel();
      throw ApiError(499, "invalid_request_error", "the client closed the connection", {}, {}, "client_gone");
    }
  }
  if (outcome_.reason == FinishReason::Error) throw ApiError(500, "server_error", outcome_.error, {}, {}, "engine");
  if (outcome_.reason == FinishReason::Cancelled)
    throw shutting_down("the request was cancelled because the server is shutting down");
  if (any_logprobs) {
    // The pieces taken along the way, put back together in the API's shape.
    all.logprobs = lp.front();
    for (size_t i = 1; i < lp.size(); ++i)
      for (auto& [key, v] : lp[i].items())
        for (auto& e : v) all.logprobs[key].push_back(std::move(e));
  }
  all.outcome = outcome_;
  return all;
}

void GenerationRun::log_request() {
  if (logged_ || !ctx_.request_log.enabled()) return;
  logged_ = true;
  const auto now = std::chrono::steady_clock::now();
  const Usage u = usage();
  json line = {{"api", api_name(g_.api)},
               {"model", model_},
               {"session", g_.session.empty() ? json(nullptr) : json(g_.session)},
               {"prompt_tokens", u.prompt_tokens},
               {"cached_tokens", u.cached_tokens},
               {"completion_tokens", u.completion_tokens},
               {"ttft_ms", first_token_ ? json(ms_between(started_, *first_token_)) : json(nullptr)},
               {"total_ms", ms_between(started_, now)},
               {"finish", outcome_.reason == FinishReason::None ? "abort" : finish_reason_name(outcome_.reason)},
               {"tool_calls", [&] {
                  int n = 0;
                  for (const PendingCall& p : calls_) n += p.released ? 1 : 0;
                  return n;
                }()},
               {"dropped_tool_calls", outcome_.dropped_calls},
               {"stream", g_.stream}};
  ctx_.request_log.write(line);
}

}  // namespace ds::server
