// Speculative decoding settings (docs/speculative-decoding.md), as `serve` and `generate` take
// them, and their start-up validation against the models.
#pragma once
#include <string>

namespace ds {

class Model;

enum class SpecMethod { Greedy, Probabilistic, Block };
enum class DraftSample { Greedy, Probabilistic };
// Where draft tokens come from, as the older flags say it: a model folder (--draft-model: a draft
// model, or a parallel drafter on the target's hidden states), or suffix tries over the session's
// own tokens and recent outputs (spec_decode/suffix_proposer.h). SpecOptions::draft_method names
// the method exactly (spec_decode/draft_method.h).
enum class DraftSource { Model, Suffix };

const char* spec_method_name(SpecMethod m);
const char* draft_sample_name(DraftSample d);
const char* draft_source_name(DraftSource d);
struct SpecOptions;
// What drafts, as /v1/models and generate report it: "suffix", "draft_model" or
// "parallel_drafter" (the registry's label of o.draft_method, spec_decode/draft_method.h).
const char* drafter_name(const SpecOptions& o);
// The registry's draft methods (spec_decode/draft_method.h): whether `name` is one, and all of
// them, "draft_model, suffix, parallel", for help texts and errors.
bool is_draft_method(const std::string& name);
std::string draft_method_names();
// Throws ds::Error naming the flag and the allowed values.
SpecMethod parse_spec_method(const std::string& s);
DraftSample parse_draft_sample(const std::string& s);

// Suffix drafting (--spec-method suffix).
struct SuffixOptions {
  int max_depth = 24;             // --suffix-max-depth: longest pattern + proposal the tries hold
  int64_t cache_tokens = 65536;   // --suffix-cache-tokens: recent outputs the global trie keeps
  double spec_factor = 1.0;       // proposal tokens per matched token (SuffixDecoding's alpha)
  double min_prob = 0.1;          // a proposal stops where its estimated chance falls below this
};

struct SpecOptions {
  DraftSource source = DraftSource::Model;
  std::string draft_model;           // --draft-model DIR
  // --num-speculative-tokens K, 1..16: draft tokens per round (with auto: the most a round may
  // take, kAutoDraftModelTokens or kMaxSpeculativeTokens unless given).
  int num_speculative_tokens = 0;
  // --num-speculative-tokens auto: K chosen per sequence and step by the cost model
  // (spec_decode/draft_length.h).
  bool auto_k = false;
  SuffixOptions suffix;
  // Test hook (< 0: off): the cost model's prices of rows beyond a step's first and of a draft
  // position, times this; the draft's price then stays its start-up share of a one-row step
  // instead of being timed. 0 makes drafting free, so auto's choices do not hang on how busy
  // the machine was while a step ran.
  double test_row_cost_scale = -1;
  SpecMethod method = SpecMethod::Block;
  DraftSample draft_sample = DraftSample::Probabilistic;
  std::string state_rollback = "lanes";  // --state-rollback lanes|replay (the target's KDA layers)
  // --spec-window N: at most N sequences verify in one step (0: max_num_seqs); the others decode
  // one token that step. It bounds a step's verify rows at N x (1 + K), the "batch-shape window"
  // of serving plans (docs/recipes.md), whatever the concurrency.
  int window = 0;
  // Synthetic acceptance (benchmarks only): accept this mean number of tokens per round
  // whatever the target says. From --spec-acceptance-length, or looked up for K in --golden-al.
  double acceptance_length = 0;      // 0: real acceptance
  std::string golden_al_file;
  std::string acceptance_source;     // "--spec-acceptance-length" or the golden file's path
  // --draft-confidence-threshold: a parallel drafter (spec_decode/parallel_drafter.h) ends a round
  // where its confidence head puts the prefix's survival below this (0: off).
  double confidence_threshold = 0;
  // --draft-method: the registry's name of what drafts (spec_decode/draft_method.h): draft_model,
  // suffix or parallel. Empty: resolve_spec_options names it from the other flags (suffix from
  // --spec-method suffix; for --draft-model, parallel when its config.json is a parallel
  // drafter's, else draft_model), so the engine never has to find out.
  std::string draft_method;

  bool enabled() const { return !draft_model.empty() || source == DraftSource::Suffix; }
  bool has_draft_model() const { return source == DraftSource::Model && !draft_model.empty(); }
  bool synthetic() const { return acceptance_length > 0; }
};

inline constexpr int kMaxSpeculativeTokens = 16;
// auto's bound on a round with a draft model: each position costs a draft forward, and the
// acceptance of a small draft rarely pays past 8.
inline constexpr int kAutoDraftModelTokens = 8;

// Checks every rule that needs no model (K range, AL range, the golden file and its K, replay
// without speculation, suffix without a draft model, the draft method against the flags) and
// fills draft_method, acceptance_length from the golden file and K under auto. One line per
// failure. Running it again changes nothing.
void resolve_spec_options(SpecOptions* o);
// Checks the draft against the target: same vocabulary size and special tokens.
void check_draft_matches(const Model& target, const Model& draft);

}  // namespace ds
