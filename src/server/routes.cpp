#include "server/routes.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <functional>

#include "core/build_info.h"
#include "core/cpu_features.h"
#include "server/api_error.h"
#include "server/chat_prompt.h"
#include "server/generation.h"
#include "server/json_text.h"
#include "server/metrics_text.h"
#include "server/openai_request.h"
#include "server/request_guard.h"

namespace ds::server {

using nlohmann::json;

namespace {

void send_error(ServerContext& ctx, httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 503) res.set_header("Retry-After", "1");
  res.set_content(dump_json(e.body()), "application/json");
  if (!e.kind.empty()) ctx.engine.metrics().request_error(e.kind);
}

using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

// Every handler runs inside this: ApiError becomes its response, anything else a 500.
httplib::Server::Handler guarded(ServerContext& ctx, Handler h) {
  return [&ctx, h = std::move(h)](const httplib::Request& req, httplib::Response& res) {
    try {
      h(req, res);
    } catch (const ApiError& e) {
      send_error(ctx, res, e);
    } catch (const std::exception& e) {
      spdlog::error("{} {}: {}", req.method, req.path, e.what());
      send_error(ctx, res, internal_error(std::string("internal error: ") + e.what()));
    } catch (...) {
      send_error(ctx, res, internal_error("internal error"));
    }
  };
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
            {"drafter", draft_source_name(c.spec.source)},
            {"spec_method", spec_method_name(c.spec.method)},
            {"draft_sample", draft_sample_name(c.spec.draft_sample)},
            {"state_rollback", c.spec.state_rollback},
            {"synthetic_acceptance", nullptr}};
  // Benchmarks only: the server accepts draft tokens whatever the target says.
  if (c.spec.synthetic())
    j["synthetic_acceptance"] = {{"acceptance_length", c.spec.acceptance_length}, {"source", c.spec.acceptance_source}};
  return j;
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
          {"build", {{"revision", build_info().revision}, {"compiler", build_info().compiler}}},
          {"prefix_caching", prefix_caching_card(ctx.engine.config())},
          {"speculative_decoding", speculative_card(ctx.engine.config())}};
}

void check_model_field(ServerContext& ctx, const json& body) {
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return;
  if (!it->is_string()) throw invalid_request("'model' must be a string", "model");
  if (!ctx.serves(it->get<std::string>())) throw model_not_found(it->get<std::string>(), ctx.served_names);
}

}  // namespace

void install_routes(httplib::Server& svr, ServerContext& ctx) {
  const int64_t started = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();

  // Runs after the headers and before the body is read: a refused request costs no body read.
  svr.set_pre_routing_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    RequestFacts facts{req.method, req.path, req.get_header_value("Host"), req.get_header_value("Origin"),
                       req.get_header_value("Content-Type"), req.get_header_value("Authorization")};
    if (auto refused = check_request(ctx.guard, facts)) {
      send_error(ctx, res, *refused);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!facts.origin.empty()) res.set_header("Access-Control-Allow-Origin", facts.origin);  // listed: allowed
    const std::string len = req.get_header_value("Content-Length");
    if (!len.empty()) {
      char* end = nullptr;
      const unsigned long long n = std::strtoull(len.c_str(), &end, 10);
      if (n > ctx.opts.max_body_bytes) {
        send_error(ctx, res,
                   invalid_request("the request body has " + len + " bytes, over the limit of " +
                                   std::to_string(ctx.opts.max_body_bytes) + " bytes"));
        res.set_header("Connection", "close");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  // Errors httplib produces itself (no route, body over the payload limit) in the API's shape.
  svr.set_error_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // our own error responses already have their body
    if (res.status == 413) {
      send_error(ctx, res, invalid_request("the request body is over the limit of " +
                                           std::to_string(ctx.opts.max_body_bytes) + " bytes"));
    } else if (res.status == 404) {
      send_error(ctx, res, not_found("no route for " + req.method + " " + req.path));
    } else {
      ApiError e(res.status, "invalid_request_error", "HTTP error " + std::to_string(res.status));
      res.set_content(dump_json(e.body()), "application/json");
    }
  });
  svr.set_exception_handler([&ctx](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(ctx, res, internal_error(what));
  });

  svr.Post("/v1/chat/completions", guarded(ctx, [&ctx](const httplib::Request& req, httplib::Response& res) {
             handle_generation(ctx, req, res, true);
           }));
  svr.Post("/v1/completions", guarded(ctx, [&ctx](const httplib::Request& req, httplib::Response& res) {
             handle_generation(ctx, req, res, false);
           }));

  svr.Get("/v1/models", guarded(ctx, [&ctx, started](const httplib::Request&, httplib::Response& res) {
            json data = json::array();
            for (const auto& n : ctx.opts.served_model_names) data.push_back(model_card(ctx, n, started));
            res.set_content(dump_json({{"object", "list"}, {"data", data}}), "application/json");
          }));
  svr.Get(R"(/v1/models/(.+))", guarded(ctx, [&ctx, started](const httplib::Request& req, httplib::Response& res) {
            const std::string name = req.matches[1];
            if (!ctx.serves(name)) throw model_not_found(name, ctx.served_names);
            res.set_content(dump_json(model_card(ctx, name, started)), "application/json");
          }));

  svr.Get("/health", guarded(ctx, [&ctx](const httplib::Request&, httplib::Response& res) {
            const bool ok = ctx.engine.alive() && !ctx.draining.load();
            res.status = ok ? 200 : 503;
            res.set_content(ok ? "{\"status\":\"ok\"}"
                               : (ctx.draining.load() ? "{\"status\":\"draining\"}" : "{\"status\":\"engine down\"}"),
                            "application/json");
          }));

  svr.Get("/metrics", guarded(ctx, [&ctx](const httplib::Request&, httplib::Response& res) {
            res.set_content(metrics_text(ctx.engine.metrics().registry()), "text/plain; version=0.0.4; charset=utf-8");
          }));

  svr.Post("/tokenize", guarded(ctx, [&ctx](const httplib::Request& req, httplib::Response& res) {
             const json body = parse_json_body(req.body);
             check_model_field(ctx, body);
             std::vector<int32_t> ids;
             if (body.contains("messages")) {
               bool gen = true;
               if (auto it = body.find("add_generation_prompt"); it != body.end() && !it->is_null()) {
                 if (!it->is_boolean()) throw invalid_request("'add_generation_prompt' must be a boolean", "add_generation_prompt");
                 gen = it->get<bool>();
               }
               ids = chat_prompt_ids(ctx.tokenizer, ctx.chat_format, parse_messages(body), {}, gen);
             } else {
               auto it = body.find("prompt");
               if (it == body.end() || !it->is_string())
                 throw invalid_request("'prompt' (a string) or 'messages' is required", "prompt");
               ids = ctx.tokenizer.encode(it->get<std::string>(), true);
             }
             res.set_content(dump_json({{"count", ids.size()},
                                        {"max_model_len", ctx.engine.config().max_model_len},
                                        {"tokens", ids}}),
                             "application/json");
           }));
  svr.Post("/detokenize", guarded(ctx, [&ctx](const httplib::Request& req, httplib::Response& res) {
             const json body = parse_json_body(req.body);
             check_model_field(ctx, body);
             auto it = body.find("tokens");
             if (it == body.end() || !it->is_array())
               throw invalid_request("'tokens' must be an array of token ids", "tokens");
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
           }));
}

}  // namespace ds::server
