// deltaserve serve: load a model and its tokenizer, start the engine and the OpenAI-compatible
// HTTP server, and run until SIGTERM or SIGINT, which drain gracefully and exit 0.
#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli/command.h"
#include "cli/dtype_flags.h"
#include "cli/spec_flags.h"
#include "core/error.h"
#include "dist/ranks.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/model_files.h"
#include "server/http_server.h"
#include "tokenizer/tokenizer.h"

namespace ds::cli {
namespace {

struct ServeArgs {
  std::string model;
  std::vector<std::string> served_names;
  std::string host = "127.0.0.1";
  int port = 8000;
  EngineConfig engine;
  SpecFlags spec;
  std::string api_key, api_key_file;
  std::vector<std::string> allowed_hosts, allowed_origins;
  bool expose_model_path = false;
  int http_threads = 512;
  std::string http_sched = "normal";
  double grace_s = 30;
  double max_body_mb = 32;
  double grammar_cache_mb = 128;
  std::string request_log;
  double reply_memory_mb = 64;
  size_t responses_store_count = 256;
  double responses_store_mb = 64;
  server::ServerOptions http;  // the transport's limits, parsed in place
  dist::RankOptions ranks;
};

std::string default_served_name(const std::string& dir) {
  std::filesystem::path p(dir);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "models/x/" -> "x"
  std::string name = p.filename().string();
  return name.empty() ? dir : name;
}

// The key from --api-key-file or $DELTASERVE_API_KEY keeps it out of the process list; --api-key
// still works. More than one source is refused rather than guessed between.
std::string resolve_api_key(const ServeArgs& a) {
  const char* env = std::getenv("DELTASERVE_API_KEY");
  const int sources = !a.api_key.empty() + !a.api_key_file.empty() + (env != nullptr && *env != 0);
  DS_CHECK(sources <= 1, "invalid settings: give the API key once: --api-key, --api-key-file or $DELTASERVE_API_KEY");
  if (!a.api_key_file.empty()) {
    std::ifstream f(a.api_key_file);
    DS_CHECK(bool(f), "--api-key-file " + a.api_key_file + ": cannot read the file");
    std::string key;
    std::getline(f, key);
    while (!key.empty() && (key.back() == '\r' || key.back() == ' ' || key.back() == '\t')) key.pop_back();
    DS_CHECK(!key.empty(), "--api-key-file " + a.api_key_file + ": the first line is empty");
    return key;
  }
  if (env != nullptr && *env != 0) return env;
  return a.api_key;
}

int run_serve(const ServeArgs& a) {
  // Signals are taken by one thread with sigwait: block them before any other thread exists so
  // every thread inherits the mask, and ignore SIGPIPE from clients that hang up mid-write.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Under mpirun every process starts here: the ranks other than 0 hold their shards and follow
  // rank 0's steps (the signals blocked above reach them too, so mpirun's forwarded SIGTERM
  // leaves them to rank 0's drain, which releases them); rank 0 goes on to serve. Declared
  // before the engine, so it outlives it.
  dist::Ranks ranks;
  if (ranks.rank() != 0) return ranks.serve_as_worker();

  DS_CHECK(a.grace_s >= 0, "invalid settings: --shutdown-grace-s must be >= 0, got " + std::to_string(a.grace_s));
  DS_CHECK(a.max_body_mb > 0, "invalid settings: --max-body-mb must be > 0, got " + std::to_string(a.max_body_mb));
  DS_CHECK(std::filesystem::is_directory(a.model) || is_gguf_model(a.model),
           "--model " + a.model + " is neither a model folder nor a GGUF file");
  const std::optional<TokenizerText> tok_text = model_tokenizer_json(a.model);
  DS_CHECK(tok_text, "--model " + a.model + " has no tokenizer (tokenizer.json, or tokenizer.ggml.* in a GGUF file)");
  const std::string& tok_path = tok_text->where;
  Tokenizer tokenizer = Tokenizer::from_json_text(tok_text->json, tok_path);
  std::unique_ptr<Model> model = ranks.open_model(a.model, a.engine.threads, a.ranks);
  const int model_vocab = model->config().vocab_size;
  DS_CHECK(tokenizer.vocab_size() <= model_vocab,
           "tokenizer " + tok_path + " has " + std::to_string(tokenizer.vocab_size()) +
               " tokens, more than the model's vocab_size " + std::to_string(model_vocab));
  EngineConfig ec = a.engine;
  ec.spec = spec_options_of(a.spec);
  ec.total_cpu_dram_gb = a.ranks.total_cpu_dram_gb;
  ec.ranks = RankLayout{a.ranks.tp, a.ranks.dcp, ranks.size(), ranks.placement().note};
  if (ec.spec.has_draft_model()) {
    // The draft must speak the target's tokens: the same tokenizer file where it has one.
    if (const std::optional<TokenizerText> draft_tok = model_tokenizer_json(ec.spec.draft_model))
      DS_CHECK(draft_tok->json == tok_text->json,
               "--draft-model " + ec.spec.draft_model + " has another tokenizer than the target (" + draft_tok->where +
                   " differs from " + tok_path + "): a draft must share the target's tokenizer");
  }
  Engine engine(std::move(model), ec);
  const EngineConfig& c = engine.config();
  spdlog::info("engine: max_num_seqs {}, max_num_batched_tokens {}, max_model_len {}, {} KV blocks of {} tokens ({:.3f} GiB)",
               c.max_num_seqs, c.max_num_batched_tokens, c.max_model_len, c.num_kv_blocks, c.block_size, c.kv_pool_gb);
  if (c.prefix.enabled)
    spdlog::info("prefix cache: on, {} state snapshots ({:.3f} GiB), snapshot every {} blocks{}",
                 c.prefix.num_state_snapshots, c.prefix.state_cache_gb, c.prefix.snapshot_interval,
                 c.prefix.decode_snapshots ? " and at decode block boundaries" : "");
  else
    spdlog::info("prefix cache: off");
  if (c.spec.enabled())
    spdlog::info("speculative decoding: draft {}, {} tokens per round{}, {} verification, {} drafting, {} rollback{}",
                 c.spec.has_draft_model() ? c.spec.draft_model : std::string("suffix tries"), c.spec.num_speculative_tokens,
                 c.spec.auto_k ? " at most (auto: chosen per step)" : "", spec_method_name(c.spec.method),
                 draft_sample_name(c.spec.draft_sample), c.spec.state_rollback,
                 c.spec.synthetic() ? " (SYNTHETIC acceptance, AL " + std::to_string(c.spec.acceptance_length) + " from " +
                                          c.spec.acceptance_source + ": for benchmarks only)"
                                    : std::string());

  server::ServerOptions o;
  o.host = a.host;
  o.port = a.port;
  o.served_model_names = a.served_names.empty() ? std::vector<std::string>{default_served_name(a.model)} : a.served_names;
  o.model_dir = a.model;
  o.chat_template = model_chat_template_text(a.model);
  o.api_key = resolve_api_key(a);
  o.allowed_hosts = a.allowed_hosts;
  o.allowed_origins = a.allowed_origins;
  o.expose_model_path = a.expose_model_path;
  o.http_threads = a.http_threads;
  DS_CHECK(a.http_sched == "batch" || a.http_sched == "normal",
           "invalid settings: --http-sched '" + a.http_sched + "' is not one of batch, normal");
  o.http_batch_policy = a.http_sched == "batch";
  o.drain_grace_s = a.grace_s;
  o.max_body_bytes = size_t(a.max_body_mb * 1024 * 1024);
  o.max_connections = a.http.max_connections;
  o.request_timeout_s = a.http.request_timeout_s;
  o.keepalive_timeout_s = a.http.keepalive_timeout_s;
  o.write_timeout_s = a.http.write_timeout_s;
  o.max_header_bytes = a.http.max_header_bytes;
  o.max_header_count = a.http.max_header_count;
  o.grammar_limits = a.http.grammar_limits;
  DS_CHECK(a.grammar_cache_mb > 0, "invalid settings: --grammar-cache-mb must be > 0, got " + std::to_string(a.grammar_cache_mb));
  o.grammar_cache_bytes = size_t(a.grammar_cache_mb * 1024 * 1024);
  o.request_log_path = a.request_log;
  DS_CHECK(a.reply_memory_mb >= 0, "invalid settings: --reply-memory-mb must be >= 0, got " + std::to_string(a.reply_memory_mb));
  o.reply_memory_bytes = size_t(a.reply_memory_mb * 1024 * 1024);
  DS_CHECK(a.responses_store_mb >= 0,
           "invalid settings: --responses-store-mb must be >= 0, got " + std::to_string(a.responses_store_mb));
  o.responses_store_count = a.responses_store_count;
  o.responses_store_bytes = size_t(a.responses_store_mb * 1024 * 1024);
  server::HttpServer http(engine, std::move(tokenizer), o);
  const int port = http.bind();
  spdlog::info("serving {} on http://{}:{}", o.served_model_names.front(), a.host, port);

  std::atomic<bool> done{false};
  std::thread signals([&] {
    const timespec tick{0, 200 * 1000 * 1000};
    while (!done.load()) {
      const int sig = sigtimedwait(&sigs, nullptr, &tick);
      if (sig == SIGTERM || sig == SIGINT) {
        spdlog::info("{}: draining", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        // Closes every connection at the end, however slow its client: serve() then returns.
        http.drain_and_stop(std::chrono::milliseconds(int64_t(a.grace_s * 1000)));
        return;
      }
    }
  });
  http.serve();
  done.store(true);
  signals.join();
  engine.stop();
  spdlog::info("stopped");
  return 0;
}

RegisterCommand reg("serve", [](CLI::App& app, int& exit_code) {
  auto a = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  cmd->add_option("--model", a->model, "Model folder (config.json, safetensors, tokenizer.json) or one GGUF file")->required();
  cmd->add_option("--served-model-name", a->served_names,
                  "Names clients use for the model (several allowed; default: the directory's name)");
  cmd->add_option("--host", a->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", a->port, "Port to listen on")->capture_default_str();
  cmd->add_option("--max-num-seqs", a->engine.max_num_seqs, "Sequences running at once")->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", a->engine.max_num_batched_tokens, "Tokens in one forward step")
      ->capture_default_str();
  cmd->add_option("--max-model-len", a->engine.max_model_len,
                  "Prompt plus generated tokens per sequence (default: the model's max_position_embeddings, or 8192; "
                  "above it only for attention without positional encoding, with a warning)");
  cmd->add_option("--kv-pool-gb", a->engine.kv_pool_gb,
                  "KV block pool size in GiB (0: enough for max-num-seqs full-length sequences, with prefix caching at least 1; at most 4)")
      ->capture_default_str();
  cmd->add_option("--threads", a->engine.threads, "Compute threads (0: all cores)")->capture_default_str();
  cmd->add_option("--block-size", a->engine.block_size, "Tokens per KV block (the prefix cache's granularity)")
      ->capture_default_str();
  add_kv_cache_dtype_option(cmd, &a->engine.kv_cache_dtype);
  add_activation_dtype_option(cmd, &a->engine.activation_dtype);
  cmd->add_flag("!--no-prefix-caching", a->engine.prefix.enabled,
                "Turn off prefix caching (cached KV blocks and recurrent-state snapshots)");
  cmd->add_option("--state-snapshot-interval", a->engine.prefix.snapshot_interval,
                  "Blocks between recurrent-state snapshots in a prefill (0: prompt ends and branch points only)")
      ->capture_default_str();
  cmd->add_option("--state-cache-gb", a->engine.prefix.state_cache_gb,
                  "Memory for recurrent-state snapshots, GiB (0: as much as the KV pool, at least 1; at most 4)")
      ->capture_default_str();
  cmd->add_option("--disk-tier-dir", a->engine.prefix.disk_tier_dir,
                  "Folder for the disk tier behind the prefix cache: evicted blocks and states, and all of it at shutdown");
  cmd->add_option("--disk-tier-gb", a->engine.prefix.disk_tier_gb, "Disk tier budget, GiB")->capture_default_str();
  cmd->add_flag("!--no-decode-snapshots", a->engine.prefix.decode_snapshots,
                "Cache only what prefill computes, not the blocks decode fills or the state there: the next turn resumes at its prompt's end, and every reused value is bit-identical to recomputing it");
  cmd->add_option("--api-key", a->api_key, "Require 'Authorization: Bearer KEY' on /v1 routes (visible in the process list: prefer --api-key-file or $DELTASERVE_API_KEY)");
  cmd->add_option("--api-key-file", a->api_key_file, "Read the API key from the first line of this file");
  cmd->add_option("--allowed-hosts", a->allowed_hosts,
                  "Host header names accepted besides the listening address (and loopback names on loopback); '*' for any")
      ->delimiter(',');
  cmd->add_option("--allowed-origins", a->allowed_origins,
                  "Browser origins allowed to call the API cross-origin (e.g. http://localhost:3000); '*' for any")
      ->delimiter(',');
  cmd->add_flag("--expose-model-path", a->expose_model_path, "Show the model folder's path in /v1/models (root)");
  cmd->add_option("--max-waiting", a->engine.max_waiting, "Queued requests before 503 + Retry-After")
      ->capture_default_str();
  cmd->add_option("--http-sched", a->http_sched,
                  "Scheduling policy of the HTTP threads: batch (a woken writer does not preempt the model's threads) or normal")
      ->capture_default_str();
  cmd->add_option("--http-threads", a->http_threads,
                  "Most HTTP handler threads, started on demand (a streamed response holds one for its life)")
      ->capture_default_str();
  cmd->add_option("--max-connections", a->http.max_connections,
                  "Open connections at most; past it the one waiting longest for its request is closed (lowered to fit the open-file limit)")
      ->capture_default_str();
  cmd->add_option("--http-request-timeout-s", a->http.request_timeout_s,
                  "Seconds from a request's first byte to its last (headers and body) before 408")
      ->capture_default_str();
  cmd->add_option("--http-keepalive-timeout-s", a->http.keepalive_timeout_s,
                  "Seconds an idle connection waits for its next request")
      ->capture_default_str();
  cmd->add_option("--http-write-timeout-s", a->http.write_timeout_s,
                  "Seconds any one write to a client may take before the connection is closed")
      ->capture_default_str();
  cmd->add_option("--max-header-bytes", a->http.max_header_bytes, "Largest request line and headers, bytes (431 past it)")
      ->capture_default_str();
  cmd->add_option("--max-headers", a->http.max_header_count, "Most request headers (431 past it)")
      ->capture_default_str();
  cmd->add_option("--shutdown-grace-s", a->grace_s, "Seconds in-flight requests get after SIGTERM")
      ->capture_default_str();
  add_spec_flags(cmd, &a->spec);
  cmd->add_option("--tp", a->ranks.tp, "Tensor-parallel ranks: one process per rank, started by mpirun -np TP")
      ->capture_default_str();
  cmd->add_option("--dcp", a->ranks.dcp, "Decode-context-parallel size (must divide --tp; only 1 is built)")
      ->capture_default_str();
  cmd->add_option("--numa-bind", a->ranks.numa,
                  "Pin each rank's threads and memory to a NUMA node: auto (rank r on node r mod nodes), off, or a node per rank (0,1)")
      ->capture_default_str();
  cmd->add_option("--total-cpu-dram-gb", a->ranks.total_cpu_dram_gb,
                  "Host memory for the KV pool and state snapshots, GB summed over ranks (each rank gets its share; 0: not set)")
      ->capture_default_str();
  cmd->add_option("--rank-step-timeout-s", a->ranks.step_timeout_s,
                  "Seconds one step may wait for the other ranks before the server stops with an error")
      ->capture_default_str();
  cmd->add_option("--profile-steps", a->engine.profile_steps,
                  "Log a table of where step time goes every N steps (the same figures are always in /metrics)")
      ->capture_default_str();
  cmd->add_option("--max-body-mb", a->max_body_mb, "Largest request body accepted, MiB")->capture_default_str();
  // Output constraints' limits (docs/tools.md "Limits"): a schema past them is a 400.
  grammar::GrammarLimits& gl = a->http.grammar_limits;
  cmd->add_option("--grammar-max-rules", gl.max_rules, "Rules one response_format or tool grammar may have")
      ->check(CLI::Range(size_t(16), size_t(1) << 24))
      ->capture_default_str();
  cmd->add_option("--grammar-max-regex-states", gl.max_regex_dfa_states,
                  "Automaton states one JSON-schema pattern may compile to")
      ->check(CLI::Range(size_t(16), size_t(1) << 20))
      ->capture_default_str();
  cmd->add_option("--grammar-max-state-heads", gl.max_state_heads,
                  "Parses one constrained output may keep alive at once (an ambiguous schema past it is held to fewer)")
      ->check(CLI::Range(size_t(1), size_t(1) << 16))
      ->capture_default_str();
  cmd->add_option("--grammar-compile-timeout-s", gl.max_compile_seconds, "Seconds compiling one grammar may take")
      ->check(CLI::Range(0.01, 600.0))
      ->capture_default_str();
  cmd->add_option("--grammar-cache-mb", a->grammar_cache_mb, "Memory the compiled grammars are kept in, MiB")
      ->capture_default_str();
  cmd->add_option("--reply-memory-mb", a->reply_memory_mb,
                  "Memory for replies kept with their generated token ids, so a client that sends a reply back "
                  "unchanged continues the prefix cache through it (docs/apis.md); 0: off")
      ->check(CLI::Range(0.0, 65536.0))
      ->capture_default_str();
  cmd->add_option("--request-log", a->request_log,
                  "Append one JSON line per finished generation request to this file (API, session, prompt and cached "
                  "tokens, output tokens, time to first token, total time; never the text)");
  // /v1/responses keeps past responses for previous_response_id and GET (docs/apis.md).
  cmd->add_option("--responses-store-count", a->responses_store_count,
                  "Past /v1/responses responses kept in memory for previous_response_id and GET (0: none)")
      ->capture_default_str();
  cmd->add_option("--responses-store-mb", a->responses_store_mb,
                  "Memory the kept /v1/responses responses may use, MiB (the least recently used go first)")
      ->capture_default_str();
  cmd->callback([a, &exit_code] { exit_code = run_serve(*a); });
});

}  // namespace
}  // namespace ds::cli
