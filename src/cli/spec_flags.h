// The speculative-decoding flags `serve` and `generate` share (docs/speculative-decoding.md).
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "spec/spec_options.h"

namespace ds::cli {

struct SpecFlags {
  std::string draft_model;
  int k = 0;
  int window = 0;
  std::string method = "block", draft_sample = "probabilistic", rollback = "lanes";
  double al = 0;
  std::string golden;
};

inline void add_spec_flags(CLI::App* cmd, SpecFlags* f) {
  cmd->add_option("--draft-model", f->draft_model, "Draft model directory (same tokenizer): enables speculative decoding");
  cmd->add_option("--num-speculative-tokens", f->k, "Draft tokens per round, 1..16");
  cmd->add_option("--spec-method", f->method, "Verification: greedy, probabilistic or block (temperature 0 is always greedy)")
      ->capture_default_str();
  cmd->add_option("--draft-sample", f->draft_sample, "How the draft picks its tokens: greedy or probabilistic")
      ->capture_default_str();
  cmd->add_option("--state-rollback", f->rollback,
                  "How the target's KDA state rolls back after a partial accept: lanes or replay")
      ->capture_default_str();
  cmd->add_option("--spec-window", f->window,
                  "Most sequences verifying in one step (0: --max-num-seqs); the rest decode one token")
      ->capture_default_str();
  cmd->add_option("--spec-acceptance-length", f->al,
                  "Benchmarks only: accept this mean number of tokens per round whatever the target says");
  cmd->add_option("--golden-al", f->golden, "Benchmarks only: read the acceptance length for K from this golden curve (YAML)");
}

// Into the engine's options; resolve_spec_options (at engine start) checks them.
inline SpecOptions spec_options_of(const SpecFlags& f) {
  SpecOptions o;
  o.draft_model = f.draft_model;
  o.num_speculative_tokens = f.k;
  o.method = parse_spec_method(f.method);
  o.draft_sample = parse_draft_sample(f.draft_sample);
  o.state_rollback = f.rollback;
  o.window = f.window;
  o.acceptance_length = f.al;
  o.golden_al_file = f.golden;
  return o;
}

}  // namespace ds::cli
