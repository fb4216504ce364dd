// Speculative decoding with a parallel drafter (spec_decode/dspark_model.h): one draft forward per
// round proposes up to block_size tokens for every speculating sequence, read off the target's
// hidden states, instead of one forward of a draft model per token (spec_decode/drafter.h).
//
// What it keeps per state slot is a ring of the last context_window committed positions'
// context entries (keys and values for each draft layer), tagged with the sequence that owns
// the slot. After every target step the engine hands it the committed rows' taps (observe):
// a prefill chunk's last rows, a decode row, a verify chunk's accepted rows. So rejected draft
// positions never enter it and nothing needs rolling back. A prefix-cache hit leaves the
// cached positions out of the ring (the target never computes them again): the drafter then
// drafts from fewer positions, which costs acceptance, never correctness.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/sampling.h"
#include "spec_decode/draft_method.h"
#include "spec_decode/dspark_model.h"
#include "spec_decode/spec_options.h"

namespace ds {

class Model;

class ParallelDrafter {
 public:
  // confidence_threshold: 0 keeps every round whole; otherwise a round ends after the last
  // slot whose predicted prefix survival is at least the threshold (one slot at least).
  ParallelDrafter(const std::string& dir, const Model& target, DraftSample sample, int k, double confidence_threshold);
  const DSparkConfig& config() const { return model_.config(); }
  const DSparkModel& model() const { return model_; }
  void set_activation_dtype(ActivationDtype a) { model_.set_activation_dtype(a); }
  void allocate(int max_seqs, int max_rows);
  bool keeps_probs(const SamplingFilter& f) const;

  // After a target step: `rows` committed rows of `slot`'s sequence from position `first_pos`,
  // with their taps ([rows][taps * hidden]) and input tokens. Batched: call begin, add per
  // chunk, then end.
  void begin_observe();
  void add_observed(int slot, uint64_t owner, int32_t first_pos, const float* taps, const int32_t* tokens, int rows);
  void end_observe();

  void propose(std::span<ProposeJob> jobs);

 private:
  struct Ring {
    uint64_t owner = 0;
    int start = 0, count = 0;      // entries start .. start + count - 1 (mod W), oldest first
    std::vector<int32_t> pos;      // [W]
    std::vector<int32_t> tok;      // [W] the token at each position (the context copy term)
    std::vector<float> entries;    // [W][context_floats]
  };
  float* claim(Ring& r, uint64_t owner, int32_t pos, int32_t token);
  void pick(ProposeJob& job, int i, const float* logits);

  DSparkModel model_;
  DraftSample sample_;
  int k_;
  double threshold_;
  int vocab_;
  Sampler sampler_;
  std::vector<Ring> rings_;
  // Observation batch: taps and positions of the rows, and where their entries go.
  std::vector<float> obs_taps_;
  std::vector<int32_t> obs_pos_;
  std::vector<float*> obs_dst_;
  std::vector<float> obs_out_;
  // Proposal scratch, reused round after round.
  std::vector<const float*> ctx_ptrs_;
  std::vector<DSparkModel::Round> rounds_;
  std::vector<DSparkModel::CopyEntry> copy_;  // each round's window for the copy term, [B][W]
  std::vector<int> copy_n_;
  std::vector<size_t> first_;
  std::vector<float> z_, zs_, logits_, m_;
  std::vector<int> row_of_;
  std::vector<double> survive_;
  std::vector<char> open_;
};

}  // namespace ds
