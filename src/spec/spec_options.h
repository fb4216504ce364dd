// Speculative decoding settings (docs/speculative-decoding.md), as `serve` and `generate` take
// them, and their start-up validation against the models.
#pragma once
#include <string>

namespace ds {

class Model;

enum class SpecMethod { Greedy, Probabilistic, Block };
enum class DraftSample { Greedy, Probabilistic };

const char* spec_method_name(SpecMethod m);
const char* draft_sample_name(DraftSample d);
// Throws ds::Error naming the flag and the allowed values.
SpecMethod parse_spec_method(const std::string& s);
DraftSample parse_draft_sample(const std::string& s);

struct SpecOptions {
  std::string draft_model;           // --draft-model DIR; empty: no speculation
  int num_speculative_tokens = 0;    // --num-speculative-tokens K, 1..16
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

  bool enabled() const { return !draft_model.empty(); }
  bool synthetic() const { return acceptance_length > 0; }
};

inline constexpr int kMaxSpeculativeTokens = 16;

// Checks every rule that needs no model (K range, AL range, the golden file and its K, replay
// without a draft) and fills acceptance_length from the golden file. One line per failure.
void resolve_spec_options(SpecOptions* o);
// Checks the draft against the target: same vocabulary size and special tokens.
void check_draft_matches(const Model& target, const Model& draft);

}  // namespace ds
