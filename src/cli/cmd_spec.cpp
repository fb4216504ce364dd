// deltaserve spec calibrate: measures real acceptance length per draft length K on held-out
// prompts and writes a golden curve (spec_decode/golden_curve.h) that benchmarks then read with
// --golden-al. Every K runs the same prompts through an engine with the draft, real
// acceptance (never synthetic), and reads the rounds and accepted tokens of every request.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/error.h"
#include "core/json_parse.h"
#include "engine/engine.h"
#include "engine/speculation.h"
#include "model/model.h"
#include "model/model_files.h"
#include "spec_decode/golden_curve.h"
#include "spec_decode/spec_options.h"
#include "tokenizer/tokenizer.h"

namespace ds::cli {
namespace {

struct CalibrateOptions {
  std::string model, draft, prompts, out, ks = "1..8";
  std::string method = "greedy", draft_sample = "greedy";
  int max_tokens = 128, threads = 0, concurrency = 8;
  float temperature = 0.f;
  float confidence_threshold = 0.f;  // a parallel drafter's cut (0: off)
};

std::vector<int> parse_ks(const std::string& s) {
  std::vector<int> ks;
  const size_t dots = s.find("..");
  try {
    if (dots != std::string::npos) {
      const int a = std::stoi(s.substr(0, dots)), b = std::stoi(s.substr(dots + 2));
      for (int k = a; k <= b; ++k) ks.push_back(k);
    } else {
      size_t at = 0;
      while (at <= s.size()) {
        const size_t comma = s.find(',', at);
        ks.push_back(std::stoi(s.substr(at, comma == std::string::npos ? std::string::npos : comma - at)));
        if (comma == std::string::npos) break;
        at = comma + 1;
      }
    }
  } catch (const std::exception&) {
    throw Error("--k '" + s + "': expected A..B or a comma-separated list of draft lengths");
  }
  DS_CHECK(!ks.empty(), "--k '" + s + "' names no draft length");
  for (int k : ks)
    DS_CHECK(k >= 1 && k <= kMaxSpeculativeTokens, "--k: " + std::to_string(k) + " is outside [1, " +
                                                       std::to_string(kMaxSpeculativeTokens) + "]");
  return ks;
}

// JSON lines, each {"prompt": "text"} or {"prompt_ids": [ids]}.
std::vector<std::vector<int32_t>> read_prompts(const std::string& path, const Tokenizer& tok) {
  std::ifstream f(path);
  DS_CHECK(f.good(), "--prompts: cannot read '" + path + "'");
  std::vector<std::vector<int32_t>> out;
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n);
    const nlohmann::json j = parse_json(line, where);
    DS_CHECK(j.is_object(), where + ": expected a JSON object {\"prompt\": ...} per line");
    if (j.contains("prompt_ids")) {
      DS_CHECK(j["prompt_ids"].is_array(), where + ": 'prompt_ids' must be an array of token ids");
      out.push_back(j["prompt_ids"].get<std::vector<int32_t>>());
    } else {
      DS_CHECK(j.contains("prompt") && j["prompt"].is_string(), where + ": expected 'prompt' (text) or 'prompt_ids'");
      out.push_back(tok.encode(j["prompt"].get<std::string>()));
    }
    DS_CHECK(!out.back().empty(), where + ": the prompt is empty");
  }
  DS_CHECK(!out.empty(), "--prompts: '" + path + "' has no prompts");
  return out;
}

int calibrate(const CalibrateOptions& o) {
  const std::vector<int> ks = parse_ks(o.ks);
  const std::optional<TokenizerText> tok_text = model_tokenizer_json(o.model);
  DS_CHECK(tok_text, "--model " + o.model + " has no tokenizer");
  const Tokenizer tok = Tokenizer::from_json_text(tok_text->json, tok_text->where);
  const auto prompts = read_prompts(o.prompts, tok);
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  GoldenCurve curve;
  curve.model = std::filesystem::path(o.model).filename().string();
  curve.draft_model = std::filesystem::path(o.draft).filename().string();
  curve.draft_sample_method = o.draft_sample;
  curve.rejection_sample_method = o.method;
  curve.curve_key = "acceptance_length";
  // One pass of every prompt through an engine (k = 0: no speculation): tok/s, rounds, accepted.
  struct Pass {
    double tok_s = 0, draft_s = 0;
    long rounds = 0, accepted = 0, drafted = 0;
  };
  auto pass = [&](int k) {
    EngineConfig ec;
    ec.max_num_seqs = o.concurrency;
    ec.max_model_len = int(longest) + o.max_tokens + 1;
    ec.threads = o.threads;
    ec.max_waiting = int(prompts.size()) + 1;
    ec.prefix.enabled = false;
    if (k > 0) {
      ec.spec.draft_model = o.draft;
      ec.spec.num_speculative_tokens = k;
      ec.spec.method = parse_spec_method(o.method);
      ec.spec.draft_sample = parse_draft_sample(o.draft_sample);
      ec.spec.confidence_threshold = o.confidence_threshold;
    }
    std::unique_ptr<Model> target = Model::load(o.model, o.threads);
    std::unique_ptr<Speculator> spec = make_speculator(ec.spec, *target);
    Engine engine(std::move(target), std::move(spec), ec);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 0; i < prompts.size(); ++i) {
      Request r;
      r.prompt = prompts[i];
      r.max_tokens = o.max_tokens;
      r.sampling.temperature = o.temperature;
      r.sampling.seed = uint64_t(i + 1);
      streams.push_back(engine.submit(std::move(r)));
    }
    Pass p;
    long tokens = 0;
    for (auto& s : streams) {
      StreamBatch b;
      for (;;) {
        s->wait(std::chrono::milliseconds(200), &b);
        if (b.finished) break;
      }
      DS_CHECK(b.reason != FinishReason::Error, "calibrate: " + b.error);
      tokens += long(b.tokens.size());
      p.rounds += s->speculative_rounds();
      p.accepted += s->accepted_prediction_tokens();
      p.drafted += s->accepted_prediction_tokens() + s->rejected_prediction_tokens();
    }
    p.tok_s = double(tokens) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    p.draft_s = engine.snapshot().draft_seconds;
    return p;
  };
  const Pass base = pass(0);
  // draft ms/round: the engine's drafting time over the rounds it drafted (a step drafts every
  // running sequence's round at once, so at concurrency c a step's drafting is shared by c).
  // drafted/round: the tokens each round sent to verification, K unless a confidence cut
  // (--draft-confidence-threshold) ended rounds early.
  std::printf("%3s %8s %8s %10s %10s %8s %14s %14s\n", "K", "AL", "rounds", "accepted", "tok/s", "speedup", "draft ms/round",
              "drafted/round");
  std::printf("%3d %8s %8s %10s %10.1f %8.2f %14s %14s\n", 0, "-", "-", "-", base.tok_s, 1.0, "-", "-");
  for (int k : ks) {
    const Pass p = pass(k);
    DS_CHECK(p.rounds > 0, "calibrate: no speculative round ran (prompts too close to max_model_len?)");
    const double al = 1.0 + double(p.accepted) / double(p.rounds);
    curve.al[k] = al;
    std::printf("%3d %8.3f %8ld %10ld %10.1f %8.2f %14.3f %14.2f\n", k, al, p.rounds, p.accepted, p.tok_s,
                p.tok_s / base.tok_s, 1e3 * p.draft_s / double(p.rounds), double(p.drafted) / double(p.rounds));
    std::fflush(stdout);
  }
  save_golden_curve(curve, o.out);
  spdlog::info("spec calibrate: wrote {} ({} prompts, {} tokens each at most)", o.out, prompts.size(), o.max_tokens);
  return 0;
}

RegisterCommand reg("spec", [](CLI::App& app, int& exit_code) {
  auto* spec = app.add_subcommand("spec", "speculative decoding tools");
  spec->require_subcommand(1);
  auto* cmd = spec->add_subcommand("calibrate", "measure real acceptance length per K and write a golden AL curve");
  auto o = std::make_shared<CalibrateOptions>();
  cmd->add_option("--model", o->model, "target model directory")->required();
  cmd->add_option("--draft-model", o->draft, "draft model directory")->required();
  cmd->add_option("--k", o->ks, "draft lengths: A..B or a list")->capture_default_str();
  cmd->add_option("--spec-method", o->method, "verification: greedy, probabilistic or block")->capture_default_str();
  cmd->add_option("--draft-sample", o->draft_sample, "drafting: greedy or probabilistic")->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "sampling temperature of the requests (0: greedy)")
      ->check(CLI::Range(0.f, 100.f));
  cmd->add_option("--prompts", o->prompts, "JSON lines of {\"prompt\": text} or {\"prompt_ids\": [...]}")->required();
  cmd->add_option("--max-tokens", o->max_tokens, "tokens generated per prompt")->capture_default_str();
  cmd->add_option("--concurrency", o->concurrency, "prompts in flight at once")->capture_default_str();
  cmd->add_option("--threads", o->threads, "0 = all cores");
  cmd->add_option("--draft-confidence-threshold", o->confidence_threshold,
                  "a parallel drafter ends a round where its predicted survival falls below this (0: off)")
      ->check(CLI::Range(0.f, 0.999f));
  cmd->add_option("--out", o->out, "golden curve to write (YAML)")->required();
  cmd->callback([o, &exit_code] {
    try {
      exit_code = calibrate(*o);
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
      exit_code = 1;
    }
  });
});

}  // namespace
}  // namespace ds::cli
