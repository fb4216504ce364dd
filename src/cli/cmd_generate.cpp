// deltaserve generate: one prompt through the engine, measuring prefill and decode speed.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/command.h"
#include "cli/dtype_flags.h"
#include "cli/spec_flags.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/speculation.h"
#include "model/model.h"
#include "model/model_files.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace ds::cli {
namespace {

struct GenerateOptions {
  std::string model, prompt, prompt_ids;
  int max_tokens = 64;
  float temperature = 0.f, top_p = 1.f, min_p = 0.f;
  int top_k = 0;
  uint64_t seed = 0;
  bool seed_given = false;  // --seed: the text must not depend on speculation (SamplingParams::reproducible)
  int threads = 0;
  int prefill_chunk = 2048;
  int top_logprobs = 0;
  bool json = false, ignore_eos = false;
  KvDtype kv_cache_dtype = KvDtype::F32;
  ActivationDtype activation_dtype = ActivationDtype::F32;
  SpecFlags spec;
};

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    DS_CHECK(!item.empty(), "--prompt-ids: empty entry in '" + s + "'");
    size_t used = 0;
    long v = 0;
    try {
      v = std::stol(item, &used);
    } catch (...) {
      used = 0;
    }
    DS_CHECK(used == item.size(), "--prompt-ids: '" + item + "' is not an integer");
    ids.push_back(int32_t(v));
  }
  return ids;
}

int run(const GenerateOptions& o) {
  using clock = std::chrono::steady_clock;
  auto model = Model::load(o.model, o.threads);
  const ModelConfig cfg = model->config();
  const size_t decode_weight_bytes = model->decode_weight_bytes(), weights_bytes = model->weights_bytes();
  // KV bytes one token adds (and every later decode step reads again), in the cache's dtype.
  model->set_kv_dtype(o.kv_cache_dtype);
  const size_t kv_bytes_per_token = model->kv_bytes_per_block(64) / 64;
  std::optional<Tokenizer> tok;
  if (const std::optional<TokenizerText> t = model_tokenizer_json(o.model)) tok = Tokenizer::from_json_text(t->json, t->where);
  std::vector<int32_t> prompt;
  if (!o.prompt_ids.empty()) {
    prompt = parse_ids(o.prompt_ids);
  } else {
    DS_CHECK(tok, "--prompt needs the model's tokenizer (" + o.model + " has none); use --prompt-ids otherwise");
    prompt = tok->encode(o.prompt);
  }
  DS_CHECK(!prompt.empty(), "the prompt is empty");
  for (int32_t t : prompt)
    DS_CHECK(t >= 0 && t < cfg.vocab_size,
             "prompt token id " + std::to_string(t) + " outside [0, " + std::to_string(cfg.vocab_size) + ")");
  DS_CHECK(o.max_tokens >= 0, "--max-tokens must be >= 0");

  // One sequence through the engine: the same chunked prefill, sampling and stop handling as
  // `serve`. --max-tokens 0 measures the prefill alone (its one sampled token is dropped).
  const int new_tokens = std::max(1, o.max_tokens);
  EngineConfig ec;
  ec.max_num_seqs = 1;
  ec.max_num_batched_tokens = std::max(1, std::min(int(prompt.size()), o.prefill_chunk));
  ec.max_model_len = int(prompt.size()) + new_tokens;
  ec.num_kv_blocks = (ec.max_model_len + ec.block_size - 1) / ec.block_size + 1;
  ec.threads = o.threads;
  ec.prefix.enabled = false;
  ec.kv_cache_dtype = o.kv_cache_dtype;
  ec.activation_dtype = o.activation_dtype;
  ec.spec = spec_options_of(o.spec);
  std::unique_ptr<Speculator> speculator = make_speculator(ec.spec, *model);
  Engine engine(std::move(model), std::move(speculator), ec);
  const SpecOptions spec = engine.config().spec;

  Request req;
  req.prompt = prompt;
  req.max_tokens = new_tokens;
  req.ignore_eos = o.ignore_eos;
  req.sampling.temperature = o.temperature;
  req.sampling.top_k = o.top_k;
  req.sampling.top_p = o.top_p;
  req.sampling.min_p = o.min_p;
  req.sampling.seed = o.seed;
  req.sampling.reproducible = o.seed_given;
  req.logprobs = o.top_logprobs > 0 ? o.top_logprobs : -1;

  std::vector<int32_t> out;
  nlohmann::json top = nlohmann::json::array();
  std::optional<StreamDecoder> stream;
  if (tok && !o.json) stream.emplace(*tok);
  const auto t0 = clock::now();
  auto rs = engine.submit(std::move(req));
  clock::time_point first{}, last{};
  StreamBatch b;
  for (;;) {
    rs->wait(std::chrono::milliseconds(100), &b);
    const auto now = clock::now();
    for (const TokenOutput& t : b.tokens) {
      if (out.empty()) first = now;
      last = now;
      if (int(out.size()) >= o.max_tokens) continue;  // --max-tokens 0: prefill only
      out.push_back(t.token);
      if (o.top_logprobs > 0) {
        nlohmann::json row = nlohmann::json::array();
        for (auto& [id, lp] : t.top) row.push_back({id, lp});
        top.push_back(row);
      }
      if (stream) std::cout << stream->push(t.token) << std::flush;
    }
    const bool seen_first = first != clock::time_point{};
    b.tokens.clear();
    if (b.finished) {
      DS_CHECK(b.reason != FinishReason::Error, "generate: " + b.error);
      if (!seen_first) first = last = now;
      break;
    }
  }
  const double prefill_s = std::chrono::duration<double>(first - t0).count();
  const int decode_steps = std::max(0, int(out.size()) - 1);
  const double decode_s = std::chrono::duration<double>(last - first).count();
  const double decode_tps = decode_steps > 0 && decode_s > 0 ? decode_steps / decode_s : 0.0;
  if (o.json) {
    nlohmann::json j;
    j["prompt_tokens"] = prompt.size();
    j["tokens"] = out;
    j["text"] = tok ? tok->decode(out) : "";
    j["prefill_tokens_per_s"] = prefill_s > 0 ? double(prompt.size()) / prefill_s : 0.0;
    j["decode_tokens_per_s"] = decode_tps;
    j["weights_bytes"] = weights_bytes;
    j["decode_weight_bytes"] = decode_weight_bytes;
    j["decode_read_gb_per_s"] = double(decode_weight_bytes) * decode_tps / 1e9;
    j["isa"] = isa_name(active_isa());
    j["kv_cache_dtype"] = kv_dtype_name(o.kv_cache_dtype);
    j["kv_bytes_per_token"] = kv_bytes_per_token;
    j["activation_dtype"] = activation_dtype_name(o.activation_dtype);
    j["threads"] = o.threads;
    if (o.top_logprobs > 0) j["top_logprobs"] = top;
    if (spec.enabled()) {
      const int drafted = rs->accepted_prediction_tokens() + rs->rejected_prediction_tokens();
      nlohmann::json sj;
      sj["num_speculative_tokens"] = spec.num_speculative_tokens;
      sj["auto"] = spec.auto_k;
      sj["drafter"] = drafter_name(spec);
      sj["spec_method"] = spec_method_name(spec.method);
      sj["draft_sample"] = draft_sample_name(spec.draft_sample);
      sj["state_rollback"] = spec.state_rollback;
      sj["draft_tokens"] = drafted;
      sj["accepted_tokens"] = rs->accepted_prediction_tokens();
      const int rounds = rs->speculative_rounds();
      sj["rounds"] = rounds;
      sj["acceptance_length"] = rounds > 0 ? 1.0 + double(rs->accepted_prediction_tokens()) / rounds : 0.0;
      if (spec.synthetic()) {
        sj["synthetic_acceptance"] = {{"acceptance_length", spec.acceptance_length}, {"source", spec.acceptance_source}};
      }
      j["speculative"] = sj;
    }
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    if (stream) std::cout << stream->finish();
    std::cout << "\n";
    spdlog::info("prefill {} tokens at {:.1f} tok/s; decode {} tokens at {:.1f} tok/s ({:.2f} GB/s of weights)",
                 prompt.size(), prompt.size() / prefill_s, decode_steps, decode_tps,
                 double(decode_weight_bytes) * decode_tps / 1e9);
  }
  return 0;
}

RegisterCommand reg("generate", [](CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("generate", "generate from one prompt and report speed");
  auto o = std::make_shared<GenerateOptions>();
  cmd->add_option("--model", o->model, "model folder, or one GGUF file")->required();
  auto* p = cmd->add_option("--prompt", o->prompt, "prompt text");
  auto* pi = cmd->add_option("--prompt-ids", o->prompt_ids, "prompt as comma-separated token ids");
  p->excludes(pi);
  cmd->add_option("--max-tokens", o->max_tokens, "tokens to generate");
  cmd->add_option("--temperature", o->temperature, "0 = greedy")->check(CLI::Range(0.f, 100.f));
  cmd->add_option("--top-k", o->top_k, "0 = off")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", o->top_p, "in (0, 1]")->check(CLI::Range(1e-6f, 1.f));
  cmd->add_option("--min-p", o->min_p, "in [0, 1]")->check(CLI::Range(0.f, 1.f));
  auto* seed = cmd->add_option("--seed", o->seed, "sampling seed: the same text with or without speculation");
  cmd->add_option("--threads", o->threads, "0 = all cores")->check(CLI::NonNegativeNumber);
  cmd->add_option("--prefill-chunk", o->prefill_chunk, "tokens per prefill step")->check(CLI::PositiveNumber);
  add_kv_cache_dtype_option(cmd, &o->kv_cache_dtype);
  add_activation_dtype_option(cmd, &o->activation_dtype);
  cmd->add_option("--top-logprobs", o->top_logprobs, "with --json: top-N log-probabilities per token")
      ->check(CLI::Range(0, 20));
  cmd->add_flag("--ignore-eos", o->ignore_eos, "keep generating past end-of-text");
  cmd->add_flag("--json", o->json, "print one JSON object");
  add_spec_flags(cmd, &o->spec);
  cmd->callback([o, cmd, seed, &exit_code] {
    o->seed_given = seed->count() > 0;
    if (o->prompt.empty() && o->prompt_ids.empty()) {
      spdlog::error("generate: give --prompt or --prompt-ids");
      exit_code = 2;
      return;
    }
    (void)cmd;
    try {
      exit_code = run(*o);
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
      exit_code = 1;
    }
  });
});

}  // namespace
}  // namespace ds::cli
