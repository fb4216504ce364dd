// What every route needs: the engine, the tokenizer, the options, and the server's own state
// (draining, requests in progress).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/output_constraint.h"
#include "server/request_guard.h"
#include "server/reply_memory.h"
#include "server/request_log.h"
#include "server/responses/responses_store.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ds::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                          // 0: any free port (tests)
  std::vector<std::string> served_model_names;  // first one is the default
  std::string model_dir;
  // The model's chat template when the caller has it (a GGUF file carries its own); empty: read
  // model_dir's tokenizer_config.json.
  std::string chat_template;
  std::string api_key;                      // empty: no authentication
  // Browser-facing safety (server/request_guard.h): Host names besides the listening address,
  // origins allowed to call cross-origin ("*": any).
  std::vector<std::string> allowed_hosts, allowed_origins;
  bool expose_model_path = false;           // /v1/models shows the model folder's path
  size_t max_body_bytes = 32u << 20;
  // The transport's limits (http/http_transport.h says what each bounds).
  int max_connections = 1024;
  double request_timeout_s = 30;    // a request's first byte to its last
  double keepalive_timeout_s = 60;  // idle between requests on one connection
  double write_timeout_s = 30;      // any one write to a client
  size_t max_header_bytes = 64u << 10;
  int max_header_count = 100;
  int http_threads = 512;  // handler threads, started on demand: a streamed response holds one for its life
  // HTTP worker threads run as SCHED_BATCH (http_server.cpp says why); false: the default policy.
  bool http_batch_policy = false;
  double drain_grace_s = 30;
  // Output constraints (server/output_constraint.h, docs/tools.md "Limits"): what one grammar
  // may cost, and the bytes the compiled grammars are kept in.
  grammar::GrammarLimits grammar_limits;
  size_t grammar_cache_bytes = 128u << 20;
  // server/request_log.h; empty: none.
  std::string request_log_path;
  // server/reply_memory.h: replies kept with their generated ids, so an agent's next turn reads
  // them from the prefix cache; 0 turns it off.
  size_t reply_memory_bytes = 64u << 20;
  // Past responses /v1/responses keeps for previous_response_id and GET (responses/).
  size_t responses_store_count = 256;
  size_t responses_store_bytes = 64u << 20;
};

struct ServerContext {
  ServerContext(Engine& e, Tokenizer t, ServerOptions o);

  Engine& engine;
  Tokenizer tokenizer;
  ServerOptions opts;
  GuardSettings guard;  // from opts
  std::string served_names;  // "a, b" for error messages
  int32_t end_of_turn = -1;  // the chat template's end-of-turn token, when the tokenizer has it
  // From the tokenizer and the model folder's chat template (tokenizer_config.json).
  ChatFormat chat_format = ChatFormat::ChatML;
  // Special tokens of the format's tool-call syntax: rendered as text in outputs with tools.
  std::vector<int32_t> tool_syntax_ids;
  OutputConstraints constraints;
  std::atomic<bool> draining{false};
  std::atomic<int> active{0};  // generation requests whose response is not fully written
  RequestLog request_log;
  ReplyMemory replies{opts.reply_memory_bytes};
  // /v1/responses' past responses (server/responses/), bounded by opts.
  ResponsesStore responses{opts.responses_store_count, opts.responses_store_bytes};

  bool serves(const std::string& name) const;
};

// Counts a generation request as active for as long as the guard (or its copies) live.
class ActiveGuard {
 public:
  explicit ActiveGuard(std::atomic<int>& n) : n_(&n) { n_->fetch_add(1); }
  ~ActiveGuard() {
    if (n_) n_->fetch_sub(1);
  }
  ActiveGuard(const ActiveGuard&) = delete;
  ActiveGuard& operator=(const ActiveGuard&) = delete;

 private:
  std::atomic<int>* n_;
};

}  // namespace ds::server
