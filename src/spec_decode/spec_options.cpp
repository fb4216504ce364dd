#include "spec_decode/spec_options.h"

#include <cmath>

#include "core/error.h"
#include "model/model.h"
#include "spec_decode/draft_method.h"
#include "spec_decode/dspark_config.h"
#include "spec_decode/golden_curve.h"

namespace ds {

const char* spec_method_name(SpecMethod m) {
  switch (m) {
    case SpecMethod::Greedy: return "greedy";
    case SpecMethod::Probabilistic: return "probabilistic";
    case SpecMethod::Block: return "block";
  }
  return "?";
}

const char* draft_source_name(DraftSource d) { return d == DraftSource::Suffix ? "suffix" : "draft_model"; }

const char* drafter_name(const SpecOptions& o) {
  if (const DraftMethodEntry* e = find_draft_method(o.draft_method)) return e->label;
  return o.source == DraftSource::Suffix ? "suffix" : "draft_model";
}

const char* draft_sample_name(DraftSample d) { return d == DraftSample::Greedy ? "greedy" : "probabilistic"; }

SpecMethod parse_spec_method(const std::string& s) {
  if (s == "greedy") return SpecMethod::Greedy;
  if (s == "probabilistic") return SpecMethod::Probabilistic;
  if (s == "block") return SpecMethod::Block;
  throw Error("'" + s + "' is not one of greedy, probabilistic, block");
}

DraftSample parse_draft_sample(const std::string& s) {
  if (s == "greedy") return DraftSample::Greedy;
  if (s == "probabilistic") return DraftSample::Probabilistic;
  throw Error("--draft-sample '" + s + "' is not one of greedy, probabilistic");
}

void resolve_spec_options(SpecOptions* o) {
  DS_CHECK(o->state_rollback == "lanes" || o->state_rollback == "replay",
           "--state-rollback '" + o->state_rollback + "' is not one of lanes, replay");
  if (!o->enabled()) {
    const std::string need = " needs --draft-model or --spec-method suffix";
    DS_CHECK(o->state_rollback != "replay", "--state-rollback replay" + need + " (it rolls back speculation)");
    DS_CHECK(o->num_speculative_tokens == 0 && !o->auto_k, "--num-speculative-tokens" + need);
    DS_CHECK(o->window == 0, "--spec-window" + need);
    DS_CHECK(o->acceptance_length == 0 && o->golden_al_file.empty(), "--spec-acceptance-length and --golden-al" + need);
    DS_CHECK(o->draft_method.empty(), "--draft-method " + o->draft_method + need);
    return;
  }
  if (o->draft_method.empty())
    o->draft_method = o->source == DraftSource::Suffix ? "suffix" : is_dspark_dir(o->draft_model) ? "parallel" : "draft_model";
  DS_CHECK(find_draft_method(o->draft_method) != nullptr,
           "--draft-method '" + o->draft_method + "' is not one of " + draft_method_names());
  DS_CHECK((o->draft_method == "suffix") == (o->source == DraftSource::Suffix),
           "--draft-method " + o->draft_method + " does not go with --spec-method suffix");
  if (o->source == DraftSource::Suffix) {
    DS_CHECK(o->draft_model.empty(), "--spec-method suffix drafts from the session's tokens: it takes no --draft-model");
    DS_CHECK(o->acceptance_length == 0 && o->golden_al_file.empty(),
             "--spec-method suffix measures real acceptance: --spec-acceptance-length and --golden-al need --draft-model");
    const SuffixOptions& x = o->suffix;
    DS_CHECK(x.max_depth >= 2 && x.max_depth <= 256, "--suffix-max-depth " + std::to_string(x.max_depth) + " is outside [2, 256]");
    DS_CHECK(x.cache_tokens >= 0 && x.cache_tokens <= (int64_t(1) << 30),
             "--suffix-cache-tokens " + std::to_string(x.cache_tokens) + " is outside [0, 2^30]");
    DS_CHECK(x.spec_factor > 0 && std::isfinite(x.spec_factor), "suffix spec factor must be positive");
    DS_CHECK(x.min_prob >= 0 && x.min_prob <= 1, "suffix min prob must be in [0, 1]");
  }
  DS_CHECK(!(o->auto_k && (o->acceptance_length != 0 || !o->golden_al_file.empty())),
           "--num-speculative-tokens auto chooses K each step: synthetic acceptance needs a fixed K");
  if (o->auto_k && o->num_speculative_tokens == 0)
    o->num_speculative_tokens = o->has_draft_model() ? kAutoDraftModelTokens : kMaxSpeculativeTokens;
  const int k = o->num_speculative_tokens;
  DS_CHECK(k >= 1 && k <= kMaxSpeculativeTokens, "--num-speculative-tokens " + std::to_string(k) + " is outside [1, " +
                                                     std::to_string(kMaxSpeculativeTokens) + "]");
  DS_CHECK(o->window >= 0, "--spec-window " + std::to_string(o->window) + " is negative (0: max_num_seqs)");
  // A second run finds the golden file's AL already filled in (its source says so).
  DS_CHECK(!(o->acceptance_length != 0 && !o->golden_al_file.empty() && o->acceptance_source != o->golden_al_file),
           "give --spec-acceptance-length or --golden-al, not both");
  if (!o->golden_al_file.empty()) {
    const GoldenCurve c = load_golden_curve(o->golden_al_file);
    const auto it = c.al.find(k);
    if (it == c.al.end()) {
      std::string have;
      for (const auto& [kk, al] : c.al) have += (have.empty() ? "" : ", ") + std::to_string(kk);
      throw Error("golden AL file " + o->golden_al_file + " has no AL for --num-speculative-tokens " +
                  std::to_string(k) + " (it has " + have + ")");
    }
    o->acceptance_length = it->second;
    o->acceptance_source = o->golden_al_file;
  } else if (o->acceptance_length != 0) {
    o->acceptance_source = "--spec-acceptance-length";
  }
  if (o->acceptance_length != 0)
    DS_CHECK(std::isfinite(o->acceptance_length) && o->acceptance_length >= 1.0 &&
                 o->acceptance_length <= double(k + 1),
             "acceptance length " + std::to_string(o->acceptance_length) + " is outside [1, " + std::to_string(k + 1) +
                 "] for --num-speculative-tokens " + std::to_string(k) + " (AL counts the bonus token)");
}

void check_draft_matches(const Model& target, const Model& draft) {
  const ModelConfig& t = target.config();
  const ModelConfig& d = draft.config();
  DS_CHECK(t.vocab_size == d.vocab_size, "--draft-model has a vocabulary of " + std::to_string(d.vocab_size) +
                                             " tokens, the target " + std::to_string(t.vocab_size) +
                                             ": a draft must share the target's tokenizer");
  DS_CHECK(t.eos_token_ids == d.eos_token_ids && t.bos_token_id == d.bos_token_id,
           "--draft-model's special tokens (bos, eos) differ from the target's: a draft must share the target's tokenizer");
}

}  // namespace ds
