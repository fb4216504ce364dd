// deltaserve bench: the agentic load generator (src/bench/). Talks HTTP only.
#include <sstream>

#include "bench/bench.h"
#include "cli/command.h"
#include "core/error.h"

namespace ds::cli {
namespace {

std::vector<int> parse_int_list(const std::string& s, const char* flag) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    DS_CHECK(used == item.size() && used > 0 && v > 0,
             std::string(flag) + ": expected positive integers separated by commas, got \"" + s + "\"");
    out.push_back(v);
  }
  DS_CHECK(!out.empty(), std::string(flag) + " needs at least one value");
  return out;
}

void setup(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "bench", "Replay an agentic workload against an OpenAI-compatible server at fixed concurrency");
  auto o = std::make_shared<bench::BenchOptions>();
  auto concurrency = std::make_shared<std::string>("1");
  auto endpoint = std::make_shared<std::string>("completions");
  auto temperature = std::make_shared<double>(-1);
  bench::SyntheticConfig& s = o->synthetic_cfg;

  cmd->add_option("--url", o->url, "server base URL")->capture_default_str();
  cmd->add_option("--model", o->model, "model name to request (default: first of /v1/models)");
  cmd->add_option("--endpoint", *endpoint, "completions (token-id prompts) or chat")
      ->check(CLI::IsMember({"completions", "chat"}))
      ->capture_default_str();
  cmd->add_option("--tokenizer", o->tokenizer_path,
                  "served model's tokenizer.json (for --endpoint chat, or the vocabulary size)");
  auto* trace = cmd->add_option("--trace", o->trace_path, "trace file: Mooncake JSONL or agentic JSON/JSONL");
  cmd->add_option("--trace-format", o->trace_format, "auto, mooncake or agentic")
      ->check(CLI::IsMember({"auto", "mooncake", "agentic"}))
      ->capture_default_str();
  auto* syn = cmd->add_option("--synthetic", o->synthetic,
                              "synthetic workload: agentic-code (token counts, replayed), agentic-edit (real files, "
                              "closed-loop chat: the model's own replies) or fixed (independent requests of "
                              "--fixed-input-tokens and --fixed-output-tokens: steady-decode throughput)")
                  ->check(CLI::IsMember({"agentic-code", "agentic-edit", "fixed"}));
  trace->excludes(syn);
  cmd->add_option("--block-size", o->block_size,
                  "tokens per trace hash id (default: Mooncake 512, the agentic trace's own, synthetic 64)");
  cmd->add_option("--scale", o->scale, "multiply token counts and block size by F")->capture_default_str();
  cmd->add_option("--vocab-size", o->vocab_size,
                  "token ids are drawn from this vocabulary (default: /v1/models, else --tokenizer)");
  cmd->add_option("--concurrency", *concurrency, "lanes; a comma list runs a sweep, e.g. 1,2,4,8")
      ->capture_default_str();
  cmd->add_option("--duration", o->load.duration_s, "seconds of measurement per point")->capture_default_str();
  cmd->add_option("--warmup-requests-per-lane", o->load.warmup_requests_per_lane,
                  "unmeasured requests each lane sends first")
      ->capture_default_str();
  cmd->add_option("--seed", o->load.seed, "seed for token contents, start points and the generator")
      ->capture_default_str();
  cmd->add_option("--max-requests", o->load.max_requests, "stop after this many measured requests (0: no limit)")
      ->capture_default_str();
  cmd->add_option("--idle-gap-cap", o->load.idle_gap_cap_s, "longest think/tool gap replayed, seconds")
      ->capture_default_str();
  cmd->add_option("--start-min-ratio", o->load.start_min_ratio, "earliest start point of a lane's first session")
      ->capture_default_str();
  cmd->add_option("--start-max-ratio", o->load.start_max_ratio, "latest start point of a lane's first session")
      ->capture_default_str();
  cmd->add_option("--grace-period", o->load.grace_s,
                  "seconds in-flight requests may finish after the duration before they are cancelled")
      ->capture_default_str();
  cmd->add_option("--request-timeout", o->request_timeout_s, "seconds before one request counts as failed")
      ->capture_default_str();
  cmd->add_option("--temperature", *temperature, "sampling temperature to send (default: the server's)");
  cmd->add_option("--ranks", o->ranks, "ranks (GPUs / sockets) serving, for throughput per rank")
      ->capture_default_str();
  cmd->add_option("--failed-request-threshold", o->validity.failed_request_threshold,
                  "a point with a larger share of failed requests is invalid")
      ->capture_default_str();
  cmd->add_option("--min-observations", o->validity.min_observations,
                  "a point with fewer completed requests is invalid")
      ->capture_default_str();
  cmd->add_option("--out", o->out_dir, "results folder; each point writes <out>/c<N>/")->capture_default_str();
  cmd->add_option("--label", o->label, "name of this run in reports (default: model @ url)");
  cmd->add_option("--progress-interval", o->progress_interval_s, "seconds between progress lines (0: none)")
      ->capture_default_str();
  cmd->add_option("--wait-for-server", o->wait_for_server_s, "poll /health up to this many seconds first")
      ->capture_default_str();
  // Synthetic generator sizes.
  cmd->add_option("--syn-sessions", s.sessions, "synthetic: session trees")->capture_default_str();
  cmd->add_option("--syn-system-tokens", s.system_tokens, "synthetic: global system prompt + tools")
      ->capture_default_str();
  cmd->add_option("--syn-repos", s.repos, "synthetic: repository groups")->capture_default_str();
  cmd->add_option("--syn-repo-tokens", s.repo_tokens, "synthetic: repository context per group")
      ->capture_default_str();
  cmd->add_option("--syn-session-tokens", s.session_tokens, "synthetic: per-session context")
      ->capture_default_str();
  cmd->add_option("--syn-turns-min", s.turns_min, "synthetic: fewest turns per session")->capture_default_str();
  cmd->add_option("--syn-turns-max", s.turns_max, "synthetic: most turns per session")->capture_default_str();
  cmd->add_option("--syn-turn-input-tokens", s.turn_input_tokens, "synthetic: mean new input per turn")
      ->capture_default_str();
  cmd->add_option("--syn-output-tokens", s.output_tokens, "synthetic: mean output per turn")
      ->capture_default_str();
  cmd->add_option("--syn-think", s.think_s, "synthetic: mean think/tool gap, seconds")->capture_default_str();
  cmd->add_option("--syn-subagent-probability", s.subagent_probability,
                  "synthetic: chance a turn forks a subagent")
      ->capture_default_str();

  bench::AgenticEditConfig& e = o->edit_cfg;
  cmd->add_option("--edit-corpus", e.corpus, "agentic-edit: corpus.json naming the held-out source files")
      ->capture_default_str();
  cmd->add_option("--fixed-input-tokens", s.fixed_input_tokens, "fixed: prompt tokens per request")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--fixed-output-tokens", s.fixed_output_tokens, "fixed: new tokens per request (ignore_eos)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--edit-turns", e.turns, "agentic-edit: requests per session")->capture_default_str();
  cmd->add_option("--edit-max-tokens", e.max_tokens, "agentic-edit: most tokens per reply")->capture_default_str();
  cmd->add_option("--edit-file-chars", e.file_chars, "agentic-edit: characters of a file a tool result carries")
      ->capture_default_str();

  cmd->callback([o, concurrency, endpoint, temperature, &exit_code] {
    o->concurrency = parse_int_list(*concurrency, "--concurrency");
    o->endpoint = *endpoint == "chat" ? bench::Endpoint::chat : bench::Endpoint::completions;
    if (*temperature >= 0) o->temperature = *temperature;
    o->synthetic_cfg.seed = o->load.seed;
    o->edit_cfg.seed = o->load.seed;
    exit_code = bench::run_bench(*o);
  });
}

const RegisterCommand reg("bench", setup);

}  // namespace
}  // namespace ds::cli
