#include "server/routes.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <functional>
#include <optional>

#include "core/build_info.h"
#include "core/cpu_features.h"
#include "server/anthropic/messages_route.h"
#include "server/api_error.h"
#include "server/chat_prompt.h"
#include "server/generation.h"
#include "server/json_text.h"
#include "server/metrics_text.h"
#include "server/openai_request.h"
#include "server/request_guard.h"
#include "server/responses/responses_route.h"

namespace ds::server {

using nlohmann::json;

namespace {

using http::HttpRequest;
using http::HttpResponse;

// Anthropic's clients read errors in Anthropic's shape; everyone else gets OpenAI's.
bool anthropic_path(const std::string& path) { return path == "/v1/messages" || path.rfind("/v1/messages/", 0) == 0; }

void send_error(ServerContext& ctx, HttpResponse& res, const ApiError& e, bool anthropic = false) {
  res = HttpResponse{};
  res.status = e.status;
  if (e.status == 503) res.set_header("Retry-After", "1");
  res.set_content(dump_json(anthropic ? e.anthropic_body() : e.body()), "application/json");
  if (!e.kind.empty()) ctx.engine.metrics().request_error(e.kind);
}


// What a benchmark needs to read a served hit rate against the theoretical one.
json prefix_caching_card(const EngineConfig& c) {
  if (!c.prefix.enabled) return {{"enabled", false}};
  return {{"enabled", true},
          {"block_size", c.block_size},
          {"state_snapshots", c.prefix.num_state_snapshots},
          {"state_snapshot_interval", c.prefix.snapshot_interval},
          {"decode_snapshots", c.prefix.decode_snapshots}};
}

json speculative_card(const EngineConfig& c) {
  if (!c.spec.enabled()) return {{"enabled", false}};
  json j = {{"enabled", true},
            {"num_speculative_tokens", c.spec.num_speculative_tokens},
            {"auto", c.spec.auto_k},
            {"drafter", drafter_name(c.spec)},
            {"spec_method", spec_method_name(c.spec.method)},
            {"draft_sample", draft_sample_name(c.spec.draft_sample)},
            {"state_rollback", c.spec.state_rollback},
            {"synthetic_acceptance", nullptr}};
  // Benchmarks only: the server accepts draft tokens whatever the target says.
  if (c.spec.synthetic())
    j["synthetic_acceptance"] = {{"acceptance_length", c.spec.acceptance_length}, {"source", c.spec.acceptance_source}};
  return j;
}

// How the model is spread over processes, and each rank's memory (one process: no ranks).
json parallel_card(const Engine& engine) {
  const RankLayout& l = engine.config().ranks;
  json ranks = json::array();
  for (const RankMemory& m : engine.rank_memory())
    ranks.push_back({{"rank", m.rank},
                     {"numa_node", m.numa_node < 0 ? json(nullptr) : json(m.numa_node)},
                     {"weights_bytes", m.weights_bytes},
                     {"kv_pool_bytes", m.kv_pool_bytes},
                     {"state_bytes", m.state_bytes}});
  return {{"tp", l.tp}, {"dcp", l.dcp}, {"ranks", l.ranks}, {"numa", l.numa}, {"rank_memory", ranks}};
}

json model_card(const ServerContext& ctx, const std::string& name, int64_t created) {
  return {{"id", name},
          {"object", "model"},
          {"created", created},
          {"owned_by", "deltaserve"},
          // The model's path on this machine only when asked: it tells a client about the host.
          {"root", ctx.opts.expose_model_path ? json(ctx.opts.model_dir) : json(nullptr)},
          {"parent", nullptr},
          {"max_model_len", ctx.engine.config().max_model_len},
          {"vocab_size", ctx.engine.vocab_size()},
          {"kernel_isa", isa_name(active_isa())},
          {"kv_cache_dtype", kv_dtype_name(ctx.engine.config().kv_cache_dtype)},
          {"activation_dtype", activation_dtype_name(ctx.engine.config().activation_dtype)},
          {"build", {{"revision", build_info().revision}, {"compiler", build_info().compiler}}},
          {"prefix_caching", prefix_caching_card(ctx.engine.config())},
          {"speculative_decoding", speculative_card(ctx.engine.config())},
          {"parallel", parallel_card(ctx.engine)}};
}

void check_model_field(ServerContext& ctx, const json& body) {
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return;
  if (!it->is_string()) throw invalid_request("'model' must be a string", "model");
  if (!ctx.serves(it->get<std::string>())) throw model_not_found(it->get<std::string>(), ctx.served_names);
}

// The transport's own errors (timeouts, limits, malformed HTTP) in the API's shape.
ApiError transport_error(int status, const std::string& message) {
  switch (status) {
    case 400: return invalid_request(message);
    case 408: return ApiError(408, "invalid_request_error", message, {}, "request_timeout");
    case 413: return ApiError(413, "invalid_request_error", message, {}, "request_too_large");
    case 431: return ApiError(431, "invalid_request_error", message, {}, "headers_too_large");
    case 503: return overloaded(message);
    default: return ApiError(status, status >= 500 ? "server_error" : "invalid_request_error", message);
  }
}

RequestFacts request_facts(const HttpRequest& req) {
  return {req.method,
          req.path,
          req.header("Host"),
          req.header("Origin"),
          req.header("Content-Type"),
          req.header("Authorization"),
          req.header("Access-Control-Request-Method"),
          req.header("x-api-key")};
}

// Runs after the headers and before the body is read: a refused request costs no body read.
std::optional<HttpResponse> screen(ServerContext& ctx, const HttpRequest& req) {
  HttpResponse res;
  const RequestFacts facts = request_facts(req);
  if (auto refused = check_request(ctx.guard, facts)) {
    send_error(ctx, res, *refused, anthropic_path(req.path));
    return res;
  }
  const std::string len = req.header("Content-Length");
  if (!len.empty()) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(len.c_str(), &end, 10);
    if (n > ctx.opts.max_body_bytes) {
      send_error(ctx, res,
                 transport_error(413, "the request body has " + len + " bytes, over the limit of " +
                                          std::to_string(ctx.opts.max_body_bytes) + " bytes"),
                 anthropic_path(req.path));
      return res;
    }
  }
  return std::nullopt;
}

// Routes that never block: answered on the I/O thread, so they answer however busy the
// workers are (health checks under load).
bool runs_inline(const HttpRequest& req) {
  if (req.method == "OPTIONS") return true;  // a CORS preflight, or a 404
  return req.method == "GET" && (req.path == "/health" || req.path == "/metrics" || req.path == "/v1/models" ||
                                 req.path.rfind("/v1/models/", 0) == 0);
}

// A listed origin's preflight (the guard refused any other): 204 and what the browser may send.
void handle_preflight(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
  res.status = 204;
  res.content_type.clear();
  res.body.clear();
  for (http::Header& h : preflight_headers(ctx.guard, req.header("Origin"), req.header("Access-Control-Request-Headers")))
    res.set_header(std::move(h.name), std::move(h.value));
}

void handle_tokenize(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
  const json body = parse_json_body(req.body);
  check_model_field(ctx, body);
  std::vector<int32_t> ids;
  if (body.contains("messages")) {
    bool gen = true;
    if (auto it = body.find("add_generation_prompt"); it != body.end() && !it->is_null()) {
      if (!it->is_boolean()) throw invalid_request("'add_generation_prompt' must be a boolean", "add_generation_prompt");
      gen = it->get<bool>();
    }
    // The prompt a generation request would run: remembered replies as their generated ids.
    std::vector<ChatTurn> turns = parse_messages(body);
    ctx.replies.recall(turns);
    ids = chat_prompt_ids(ctx.tokenizer, ctx.chat_format, turns, {}, gen);
  } else {
    auto it = body.find("prompt");
    if (it == body.end() || !it->is_string())
      throw invalid_request("'prompt' (a string) or 'messages' is required", "prompt");
    ids = ctx.tokenizer.encode(it->get<std::string>(), true);
  }
  res.set_content(dump_json({{"count", ids.size()}, {"max_model_len", ctx.engine.config().max_model_len}, {"tokens", ids}}),
                  "application/json");
}

void handle_detokenize(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
  const json body = parse_json_body(req.body);
  check_model_field(ctx, body);
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) throw invalid_request("'tokens' must be an array of token ids", "tokens");
  std::vector<int64_t> raw = parse_token_array(*it, "tokens");
  std::vector<int32_t> ids;
  const int64_t vocab = ctx.tokenizer.vocab_size();
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] < 0 || raw[i] >= vocab)
      throw invalid_request("'tokens[" + std::to_string(i) + "]' = " + std::to_string(raw[i]) +
                                " is not a token id: the vocabulary is [0, " + std::to_string(vocab) + ")",
                            "tokens");
    ids.push_back(int32_t(raw[i]));
  }
  std::string text;
  try {
    text = ctx.tokenizer.decode(ids);
  } catch (const Error& e) {
    throw invalid_request(e.what(), "tokens");
  }
  res.set_content(dump_json({{"prompt", text}}), "application/json");
}

void route(ServerContext& ctx, int64_t started, const HttpRequest& req, HttpResponse& res) {
  const std::string& m = req.method;
  const std::string& p = req.path;
  if (is_preflight(request_facts(req))) return handle_preflight(ctx, req, res);
  if (m == "POST" && p == "/v1/chat/completions") return handle_generation(ctx, req, res, true);
  if (m == "POST" && p == "/v1/completions") return handle_generation(ctx, req, res, false);
  if (m == "POST" && p == "/v1/messages") return handle_messages(ctx, req, res);
  if (m == "POST" && p == "/v1/messages/count_tokens") return handle_count_tokens(ctx, req, res);
  if (m == "POST" && p == "/v1/responses") return handle_responses(ctx, req, res);
  if (p.rfind("/v1/responses/", 0) == 0 && p.size() > 14 && p.find('/', 14) == std::string::npos) {
    if (m == "GET") return handle_get_response(ctx, p.substr(14), res);
    if (m == "DELETE") return handle_delete_response(ctx, p.substr(14), res);
  }
  if (m == "POST" && p == "/tokenize") return handle_tokenize(ctx, req, res);
  if (m == "POST" && p == "/detokenize") return handle_detokenize(ctx, req, res);
  if (m == "GET" && p == "/v1/models") {
    json data = json::array();
    for (const auto& n : ctx.opts.served_model_names) data.push_back(model_card(ctx, n, started));
    return res.set_content(dump_json({{"object", "list"}, {"data", data}}), "application/json");
  }
  if (m == "GET" && p.rfind("/v1/models/", 0) == 0 && p.size() > 11) {
    const std::string name = p.substr(11);
    if (!ctx.serves(name)) throw model_not_found(name, ctx.served_names);
    return res.set_content(dump_json(model_card(ctx, name, started)), "application/json");
  }
  if (m == "GET" && p == "/health") {
    const bool ok = ctx.engine.alive() && !ctx.draining.load();
    res.status = ok ? 200 : 503;
    return res.set_content(ok ? "{\"status\":\"ok\"}"
                              : (ctx.draining.load() ? "{\"status\":\"draining\"}" : "{\"status\":\"engine down\"}"),
                           "application/json");
  }
  if (m == "GET" && p == "/metrics")
    return res.set_content(metrics_text(ctx.engine.metrics().registry()), "text/plain; version=0.0.4; charset=utf-8");
  throw not_found("no route for " + m + " " + p);
}

}  // namespace

http::HttpApp make_http_app(ServerContext& ctx) {
  const int64_t started = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  http::HttpApp app;
  app.screen = [&ctx](const HttpRequest& req) { return screen(ctx, req); };
  app.runs_inline = runs_inline;
  // Every handler runs inside this: ApiError becomes its response, anything else a 500.
  app.handle = [&ctx, started](const HttpRequest& req, HttpResponse& res) {
    try {
      route(ctx, started, req, res);
    } catch (const ApiError& e) {
      send_error(ctx, res, e, anthropic_path(req.path));
    } catch (const std::exception& e) {
      spdlog::error("{} {}: {}", req.method, req.path, e.what());
      send_error(ctx, res, internal_error(std::string("internal error: ") + e.what()), anthropic_path(req.path));
    } catch (...) {
      send_error(ctx, res, internal_error("internal error"), anthropic_path(req.path));
    }
  };
  // Every answer to a listed origin (errors, streams and refusals included) says the page may
  // read it; a preflight's answer says so already.
  app.decorate = [&ctx](const HttpRequest& req, HttpResponse& res) {
    for (const http::Header& h : res.headers)
      if (http::iequals(h.name, "Access-Control-Allow-Origin")) return;
    for (http::Header& h : cors_headers(ctx.guard, req.header("Origin"))) res.set_header(std::move(h.name), std::move(h.value));
  };
  app.error = [&ctx](int status, const std::string& message) {
    HttpResponse res;
    send_error(ctx, res, transport_error(status, message));
    return res;
  };
  return app;
}

}  // namespace ds::server
