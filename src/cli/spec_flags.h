// The speculative-decoding flags `serve` and `generate` share (docs/speculative-decoding.md).
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "core/error.h"
#include "spec_decode/spec_options.h"

namespace ds::cli {

struct SpecFlags {
  std::string draft_model;
  std::string draft_method;  // empty: named from the other flags (resolve_spec_options)
  std::string k;  // a count or "auto"
  int window = 0;
  std::string method = "block", verify, draft_sample = "probabilistic", rollback = "lanes";
  double al = 0;
  double confidence = 0;
  std::string golden;
  SuffixOptions suffix;
  // The options whose use depends on another flag, to tell given from defaulted (null: never
  // registered, as in tests that fill the fields by hand).
  const CLI::Option* method_opt = nullptr;
  const CLI::Option* draft_method_opt = nullptr;
  const CLI::Option* draft_sample_opt = nullptr;
  const CLI::Option* confidence_opt = nullptr;
  const CLI::Option* suffix_cache_opt = nullptr;
  const CLI::Option* suffix_depth_opt = nullptr;
};

inline void add_spec_flags(CLI::App* cmd, SpecFlags* f) {
  cmd->add_option("--draft-model", f->draft_model, "Draft model directory (same tokenizer): enables speculative decoding");
  f->draft_method_opt = cmd->add_option("--draft-method", f->draft_method,
                  "What drafts: draft_model or parallel (from --draft-model DIR), or suffix (suffix tries, no "
                  "draft model; the same as --spec-method suffix). Default: named by the other flags");
  cmd->add_option("--num-speculative-tokens", f->k,
                  "Draft tokens per round, 1..16, or auto: chosen per sequence and step by the cost model");
  f->method_opt = cmd->add_option("--spec-method", f->method,
                  "Verification (greedy, probabilistic or block; temperature 0 is always greedy), or suffix: draft "
                  "from suffix tries over the session's tokens and recent outputs, no draft model")
      ->capture_default_str();
  cmd->add_option("--spec-verify", f->verify, "Verification when --spec-method is suffix: greedy, probabilistic or block (default block)");
  f->suffix_cache_opt = cmd->add_option("--suffix-cache-tokens", f->suffix.cache_tokens, "Suffix drafting: recent outputs the global trie keeps, in tokens")
      ->capture_default_str();
  f->suffix_depth_opt = cmd->add_option("--suffix-max-depth", f->suffix.max_depth, "Suffix drafting: longest pattern plus proposal the tries hold")
      ->capture_default_str();
  f->draft_sample_opt = cmd->add_option("--draft-sample", f->draft_sample, "How the draft picks its tokens: greedy or probabilistic")
      ->capture_default_str();
  cmd->add_option("--state-rollback", f->rollback,
                  "How the target's KDA state rolls back after a partial accept: lanes or replay")
      ->capture_default_str();
  cmd->add_option("--spec-window", f->window,
                  "Most sequences verifying in one step (0: --max-num-seqs); the rest decode one token")
      ->capture_default_str();
  cmd->add_option("--spec-acceptance-length", f->al,
                  "Benchmarks only: accept this mean number of tokens per round whatever the target says");
  f->confidence_opt = cmd->add_option("--draft-confidence-threshold", f->confidence,
                  "Parallel drafter only: end a round where its confidence head puts the chance that the "
                  "drafted prefix survives below this (0: off; in [0, 1))")
      ->capture_default_str();
  cmd->add_option("--golden-al", f->golden, "Benchmarks only: read the acceptance length for K from this golden curve (YAML)");
}

// Flags that only mean something with another: the error names the flag that is missing,
// rather than complaining about the value a missing flag left behind (an absent
// --num-speculative-tokens is not "0 outside [1, 16]").
inline void check_spec_flag_pairs(const SpecFlags& f) {
  auto given = [](const CLI::Option* o) { return o != nullptr && o->count() > 0; };
  if (!f.draft_method.empty() && !is_draft_method(f.draft_method))
    throw Error("--draft-method '" + f.draft_method + "' is not one of " + draft_method_names());
  const bool by_method = f.draft_method == "suffix";
  const bool suffix = f.method == "suffix" || by_method;
  const std::string source = f.method == "suffix" ? "--spec-method suffix" : by_method ? "--draft-method suffix" : "--draft-model";
  if (by_method && !f.verify.empty() && f.method != "suffix")
    throw Error("--spec-verify goes with --spec-method suffix (with --draft-method suffix, --spec-method is the verifier)");
  if (!f.draft_method.empty() && !by_method && f.draft_model.empty())
    throw Error("--draft-method " + f.draft_method + " needs --draft-model (the drafter's folder)");
  if (f.k.empty() && (suffix || !f.draft_model.empty()))
    throw Error(source + " needs --num-speculative-tokens: draft tokens per round, a count in [1, " +
                std::to_string(kMaxSpeculativeTokens) + "], or auto");
  if (!suffix) {
    if (given(f.suffix_depth_opt)) throw Error("--suffix-max-depth goes with --spec-method suffix");
    if (given(f.suffix_cache_opt)) throw Error("--suffix-cache-tokens goes with --spec-method suffix");
  }
  if (f.draft_model.empty()) {
    if (given(f.method_opt) && !suffix)
      throw Error("--spec-method " + f.method + " needs --draft-model (it verifies a draft model's tokens; "
                  "--spec-method suffix drafts without one)");
    if (given(f.draft_sample_opt)) throw Error("--draft-sample needs --draft-model (it is how a draft model picks its tokens)");
    if (given(f.confidence_opt)) throw Error("--draft-confidence-threshold needs --draft-model (a parallel drafter)");
  }
}

// Into the engine's options; resolve_spec_options (at engine start) checks them.
inline SpecOptions spec_options_of(const SpecFlags& f) {
  check_spec_flag_pairs(f);
  SpecOptions o;
  o.draft_model = f.draft_model;
  if (f.k == "auto") {
    o.auto_k = true;
  } else if (!f.k.empty()) {
    size_t used = 0;
    int k = 0;
    try {
      k = std::stoi(f.k, &used);
    } catch (...) {
      used = 0;
    }
    DS_CHECK(used == f.k.size() && used > 0, "--num-speculative-tokens '" + f.k + "' is neither a count nor auto");
    o.num_speculative_tokens = k;
  }
  auto verifier = [](const std::string& flag, const std::string& v, const std::string& also) {
    try {
      return parse_spec_method(v);
    } catch (const Error&) {
      throw Error(flag + " '" + v + "' is not one of greedy, probabilistic, block" + also);
    }
  };
  o.draft_method = f.draft_method;
  if (f.method == "suffix") {
    o.source = DraftSource::Suffix;
    o.method = f.verify.empty() ? SpecMethod::Block : verifier("--spec-verify", f.verify, "");
  } else if (f.draft_method == "suffix") {
    o.source = DraftSource::Suffix;
    o.method = verifier("--spec-method", f.method, ", suffix");
  } else {
    DS_CHECK(f.verify.empty(), "--spec-verify goes with --spec-method suffix (otherwise --spec-method is the verifier)");
    o.method = verifier("--spec-method", f.method, ", suffix");
  }
  o.suffix = f.suffix;
  o.confidence_threshold = f.confidence;
  o.draft_sample = parse_draft_sample(f.draft_sample);
  o.state_rollback = f.rollback;
  o.window = f.window;
  o.acceptance_length = f.al;
  o.golden_al_file = f.golden;
  return o;
}

}  // namespace ds::cli
