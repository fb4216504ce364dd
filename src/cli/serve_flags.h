// `serve`'s options and the flags that fill them, in a header so that a test can parse a command
// line into the very struct the CLI fills (tests/recipe/serve_argv_test.cpp parses every recipe
// point's planned serve command back and compares it with the plan, field by field).
#pragma once
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "cli/dtype_flags.h"
#include "cli/spec_flags.h"
#include "distributed/ranks.h"
#include "engine/engine.h"
#include "server/server_context.h"

namespace ds::cli {

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
  distributed::RankOptions ranks;
};

// Declares every `serve` flag on `cmd`, each writing its field of `*a` (which must outlive the
// parse).
inline void add_serve_flags(CLI::App* cmd, ServeArgs* a) {
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
}

}  // namespace ds::cli
