#include "bench/bench.h"

#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>

#include "bench/chat_text.h"
#include "bench/hash.h"
#include "bench/progress.h"
#include "bench/results.h"
#include "bench/server_facts.h"
#include "bench/server_probe.h"
#include "bench/workload_source.h"
#include "core/error.h"

namespace ds::bench {

using nlohmann::json;

namespace {

std::atomic<int> g_interrupts{0};
extern "C" void on_sigint(int) { g_interrupts.fetch_add(1); }

struct PointOutcome {
  int concurrency;
  PointMetrics metrics;
  Validity validity;
  std::optional<double> served_metrics_hit;
  std::optional<double> acceptance;
  std::string dir;
};

void wait_for_server(const ServerProbe& probe, double seconds) {
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  while (!probe.healthy()) {
    DS_CHECK(Clock::now() < until, "the server did not answer /health within " +
                                       std::to_string(seconds) + " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

json options_json(const BenchOptions& o, int concurrency, const Workload& w) {
  json j = {{"url", o.url},
            {"endpoint", o.endpoint == Endpoint::chat ? "chat" : "completions"},
            {"concurrency", concurrency},
            {"duration_s", o.load.duration_s},
            {"warmup_requests_per_lane", o.load.warmup_requests_per_lane},
            {"seed", o.load.seed},
            {"max_requests", o.load.max_requests},
            {"idle_gap_cap_s", o.load.idle_gap_cap_s},
            {"start_min_ratio", o.load.start_min_ratio},
            {"start_max_ratio", o.load.start_max_ratio},
            {"grace_period_s", o.load.grace_s},
            {"request_timeout_s", o.request_timeout_s},
            {"ranks", o.ranks},
            {"failed_request_threshold", o.validity.failed_request_threshold},
            {"min_observations", o.validity.min_observations},
            {"scale", o.scale},
            {"ignore_eos", o.synthetic != "agentic-edit"},
            {"stream", true}};
  if (o.temperature) j["temperature"] = *o.temperature;
  j["workload"] = {{"source", w.source},
                   {"format", w.format},
                   {"block_size", w.block_size},
                   {"sessions", w.sessions.size()},
                   {"requests", count_requests(w)}};
  if (o.synthetic == "agentic-edit") {
    const AgenticEditConfig& e = o.edit_cfg;
    j["workload"]["synthetic"] = {{"generator", o.synthetic}, {"corpus", e.corpus},       {"turns", e.turns},
                                  {"max_tokens", e.max_tokens}, {"file_chars", e.file_chars}, {"seed", e.seed}};
  } else if (o.synthetic == "fixed") {
    const SyntheticConfig& s = o.synthetic_cfg;
    j["workload"]["synthetic"] = {{"generator", o.synthetic},
                                  {"seed", s.seed},
                                  {"sessions", s.sessions},
                                  {"input_tokens", s.fixed_input_tokens},
                                  {"output_tokens", s.fixed_output_tokens}};
  } else if (!o.synthetic.empty()) {
    const SyntheticConfig& s = o.synthetic_cfg;
    j["workload"]["synthetic"] = {{"generator", o.synthetic},
                                  {"seed", s.seed},
                                  {"system_tokens", s.system_tokens},
                                  {"repos", s.repos},
                                  {"repo_tokens", s.repo_tokens},
                                  {"session_tokens", s.session_tokens},
                                  {"turns_min", s.turns_min},
                                  {"turns_max", s.turns_max},
                                  {"turn_input_tokens", s.turn_input_tokens},
                                  {"output_tokens", s.output_tokens},
                                  {"think_s", s.think_s},
                                  {"subagent_probability", s.subagent_probability}};
  }
  return j;
}

void print_summary(const std::vector<PointOutcome>& points) {
  std::printf("\n%5s %-7s %8s %9s %9s %9s %9s %9s %12s %8s %8s\n", "conc", "valid", "req/s",
              "out tok/s", "TTFT p50", "TTFT p90", "ITL p50", "ITL p90", "inter. p90", "theo hit",
              "served");
  for (const auto& p : points) {
    const PointMetrics& m = p.metrics;
    const auto served = m.served_hit_rate_usage ? m.served_hit_rate_usage : p.served_metrics_hit;
    char served_s[16] = "n/a";
    if (served) std::snprintf(served_s, sizeof served_s, "%.1f%%", 100 * *served);
    std::printf("%5d %-7s %8.2f %9.1f %8.0fms %8.0fms %8.1fms %8.1fms %8.1ftok/s %7.1f%% %8s\n",
                p.concurrency, p.validity.valid ? "yes" : "NO", m.request_rate, m.output_tok_s,
                1e3 * m.ttft.p50, 1e3 * m.ttft.p90, 1e3 * m.itl.p50, 1e3 * m.itl.p90,
                m.interactivity.p90, 100 * m.theoretical_hit_rate, served_s);
  }
  for (const auto& p : points)
    for (const auto& r : p.validity.reasons)
      std::printf("  conc %d invalid: %s\n", p.concurrency, r.c_str());
  std::fflush(stdout);
}

}  // namespace

int run_bench(const BenchOptions& o) {
  DS_CHECK(!o.concurrency.empty(), "--concurrency needs at least one value");
  DS_CHECK(o.ranks >= 1, "--ranks must be at least 1");
  // agentic-edit is closed-loop text (bench/agentic_edit.h), not a replay of token counts.
  const bool edit = o.synthetic == "agentic-edit";
  std::vector<EditFile> edit_files;
  Workload workload;
  if (edit) {
    edit_files = load_edit_files(o.edit_cfg.corpus);
    workload.source = o.edit_cfg.corpus;
    workload.format = "synthetic:agentic-edit";
    spdlog::info("bench: workload agentic-edit: {} held-out files of {}, {} turns a session, replies up to {} tokens",
                 edit_files.size(), o.edit_cfg.corpus, o.edit_cfg.turns, o.edit_cfg.max_tokens);
  } else {
    WorkloadSpec spec{o.trace_path, o.trace_format, o.synthetic, o.synthetic_cfg, o.block_size, o.scale};
    workload = make_workload(spec);
    spdlog::info("bench: workload {}: {} session trees, {} requests, block size {}", workload.source,
                 workload.sessions.size(), count_requests(workload), workload.block_size);
  }

  const HttpTarget target = HttpTarget::parse(o.url);
  const ServerProbe probe(target);
  if (o.wait_for_server_s > 0) wait_for_server(probe, o.wait_for_server_s);
  const json models = probe.models();
  DS_CHECK(!models.is_null(), "no answer from " + o.url + "/v1/models: is the server running?");
  std::string model = o.model;
  if (model.empty()) {
    const json* first = models.contains("data") && models["data"].is_array() && !models["data"].empty()
                            ? &models["data"][0]
                            : nullptr;
    DS_CHECK(first && first->contains("id"), "/v1/models lists no model: pass --model");
    model = (*first)["id"].get<std::string>();
  }

  std::optional<Tokenizer> tokenizer;
  if (!o.tokenizer_path.empty()) tokenizer = Tokenizer::load(o.tokenizer_path);
  DS_CHECK(o.endpoint != Endpoint::chat || tokenizer || edit,
           "--endpoint chat needs --tokenizer PATH (the served model's tokenizer.json)");
  int64_t vocab = o.vocab_size;
  if (vocab <= 0)
    if (const json* v = find_key(models, "vocab_size"); v && v->is_number_integer())
      vocab = v->get<int64_t>();
  if (vocab <= 0 && tokenizer) vocab = tokenizer->vocab_size();
  DS_CHECK(vocab > 0 || o.endpoint == Endpoint::chat || edit,
           "cannot tell the served vocabulary size: /v1/models does not say; pass --vocab-size N "
           "or --tokenizer PATH");
  // agentic-edit ends a session before a turn that might not fit the server's context.
  std::optional<AgenticEdit> editor;
  if (edit) {
    AgenticEditConfig ec = o.edit_cfg;
    if (const json* v = find_key(models, "max_model_len"); v && v->is_number_integer()) ec.context_limit = v->get<int64_t>();
    editor.emplace(ec, std::move(edit_files));
  }
  std::unique_ptr<ChatText> chat;
  TokenRange range = TokenRange::for_vocab(std::max<int64_t>(vocab, 32));
  if (o.endpoint == Endpoint::chat && !edit) {
    chat = std::make_unique<ChatText>(*tokenizer);
    range = {0, chat->word_count()};  // prompt ids index the chat word list
  }
  const PromptTokens tokens(o.load.seed, workload.block_size, range, shared_hash_ids(workload));

  SenderConfig sc;
  sc.target = target;
  sc.endpoint = o.endpoint;
  sc.model = model;
  sc.timeout_s = o.request_timeout_s;
  sc.temperature = o.temperature;
  if (chat) sc.to_text = [c = chat.get()](const std::vector<int32_t>& ids) { return c->text(ids); };

  g_interrupts = 0;
  auto previous = std::signal(SIGINT, on_sigint);
  std::vector<PointOutcome> points;
  const std::string label = o.label.empty() ? model + " @ " + o.url : o.label;
  const uint64_t run_nonce = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  for (size_t point = 0; point < o.concurrency.size(); ++point) {
    const int conc = o.concurrency[point];
    if (g_interrupts.load() > 0) break;
    LoadConfig lc = o.load;
    lc.concurrency = conc;
    lc.interrupt = &g_interrupts;
    lc.abort_failed_ratio = o.validity.failed_request_threshold;
    lc.play_namespace = mix64(run_nonce, point);
    const auto origin = Clock::now();
    sc.origin = origin;
    spdlog::info("bench: concurrency {} for {} s against {} ({})", conc, lc.duration_s, o.url, model);
    MetricSamples before;
    ReplayOutput out;
    if (edit) {
      out = editor->run(sc, lc, [&] { before = probe.metrics(); });
    } else {
      Replay replay(workload, tokens, lc, openai_sender_factory(sc), origin);
      ProgressPrinter progress(replay, "c=" + std::to_string(conc), lc.duration_s,
                               o.progress_interval_s);
      // The window's opening scrape, taken just before the first measured request goes out.
      out = replay.run([&] {
        before = probe.metrics();
        progress.measure_started(replay.now_s());
      });
    }
    const MetricSamples after = probe.metrics();
    const MetricSamples delta = metric_delta(before, after);

    PointOutcome p;
    p.concurrency = conc;
    p.metrics = compute_metrics(out.records, o.ranks);
    p.validity = judge(p.metrics, o.validity, out.interrupted, out.aborted_for_failures);
    json cache = metrics_json(p.metrics);
    json served_metrics = nullptr, al = nullptr;
    if (auto s = served_hit_rate_from_metrics(delta)) {
      p.served_metrics_hit = s->value;
      served_metrics = {{"value", s->value}, {"source", s->source}};
    }
    if (auto a = acceptance_length(after, delta)) {
      p.acceptance = a->value;
      al = {{"value", a->value}, {"source", a->source}};
    }
    json result = {{"schema", kResultSchema},
                   {"label", label},
                   {"model", model},
                   {"config", options_json(o, conc, workload)},
                   {"metrics", cache},
                   {"validity", {{"valid", p.validity.valid}, {"reasons", p.validity.reasons}}}};
    result["metrics"]["prefix_cache"]["served_hit_rate_metrics"] = served_metrics;
    result["metrics"]["spec_acceptance_length"] = al;
    result["server"] = server_facts(models, after);
    result["server"]["url"] = o.url;
    result["server"]["models"] = models;
    result["server"]["metrics_delta"] = engine_metrics(delta);
    result["server"]["metrics_after"] = engine_metrics(after);
    result["server"]["vocab_size_used"] = vocab;
    p.dir = (std::filesystem::path(o.out_dir) / ("c" + std::to_string(conc))).string();
    write_point(p.dir, result, out.records);
    spdlog::info("bench: concurrency {}: {} completed, {} failed, {:.1f} output tok/s, {} -> {}",
                 conc, p.metrics.completed, p.metrics.failed, p.metrics.output_tok_s,
                 p.validity.valid ? "valid" : "INVALID", p.dir + "/results.json");
    points.push_back(std::move(p));
  }
  std::signal(SIGINT, previous);
  print_summary(points);
  return g_interrupts.load() > 0 ? 130 : 0;
}

}  // namespace ds::bench
