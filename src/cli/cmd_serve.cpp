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
#include "cli/serve_flags.h"
#include "core/error.h"
#include "distributed/ranks.h"
#include "engine/engine.h"
#include "engine/speculation.h"
#include "model/model.h"
#include "model/model_files.h"
#include "server/http_server.h"
#include "tokenizer/tokenizer.h"

namespace ds::cli {
namespace {

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
  distributed::Ranks ranks;
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
  // Speculation is built beside the target, its options resolved before the engine starts.
  std::unique_ptr<Speculator> spec = make_speculator(ec.spec, *model);
  Engine engine(std::move(model), std::move(spec), ec);
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
  add_serve_flags(cmd, a.get());
  cmd->callback([a, &exit_code] { exit_code = run_serve(*a); });
});

}  // namespace
}  // namespace ds::cli
