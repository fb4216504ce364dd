// The draft model's side of speculative decoding. The draft mirrors the target's slots and
// block tables (its own KV pool and state slots, indexed by the same ids), feeds every token
// the target commits, and each round proposes k tokens per speculating sequence, batched: one
// draft forward per draft position for the whole batch. Its proposals run as speculative
// chunks (model.h), so after verification its state rolls back like the target's (lanes).
//
// A round for one sequence, whose target has fed tokens [0, n) and holds t_n pending:
//   forward 1   the committed tokens the draft has not fed yet (1, or 2 after a full accept,
//               or a prefill chunk mirrored from the target) -> d_1
//   forward i   d_{i-1} at lane i-2 -> d_i, for i = 2..k
//   (feed_last) d_k at lane k-1 without logits, so that a full accept leaves the draft level
//               with the target (wanted where the round ends on a block boundary: the state
//               snapshot there holds both).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kernels/sampling.h"
#include "model/model.h"
#include "spec_decode/spec_options.h"

namespace ds {

struct DraftJob {
  int32_t slot = 0;
  const int32_t* block_table = nullptr;
  int32_t start = 0;               // tokens the draft has fed (its start_pos)
  std::span<const int32_t> feed;   // committed tokens to feed first (not empty)
  int k = 0;                       // draft tokens to propose after the feed (0: feed only)
  bool feed_last = false;
  SamplingFilter filter;           // the request's: probabilistic drafting draws from it
  std::function<double()> uniform; // the request's stream
  bool coupled = false;            // a reproducible request: draft_pick.h's coupled draw
  int32_t* tokens = nullptr;       // out: k draft tokens
  float* q = nullptr;              // out: k rows of vocab floats, or null (drafting by argmax)
  // Speculative tokens the draft fed this round (k - 1, + 1 with feed_last): commit keeps up to
  // this many.
  int spec_fed() const { return k > 0 ? k - 1 + (feed_last ? 1 : 0) : 0; }
};

class Drafter {
 public:
  Drafter(std::unique_ptr<Model> draft, DraftSample sample, int k);
  // The target's limits: the same slots, blocks and block size; k lanes of rollback.
  void allocate(const RuntimeLimits& target);
  Model& model() { return *model_; }
  const Model& model() const { return *model_; }
  DraftSample sample_method() const { return sample_; }
  // Probabilistic drafting keeps q rows for the verifier; argmax drafting needs none.
  bool keeps_probs(const SamplingFilter& f) const;

  void propose(std::span<DraftJob> jobs);
  // After verification: `keep` of the sequence's speculative draft tokens were accepted.
  void commit(int slot, int keep) { model_->commit_speculative(slot, keep); }

 private:
  void pick(DraftJob& job, int i, const float* logits);
  void run(std::vector<int32_t>& tokens, std::vector<SeqChunk>& chunks);

  std::unique_ptr<Model> model_;
  DraftSample sample_;
  int k_;
  int vocab_;
  Sampler sampler_;
  std::vector<float> logits_;
  std::vector<int32_t> tokens_;
  std::vector<SeqChunk> chunks_;
  std::vector<int32_t> owner_;  // job index of each chunk with logits
};

}  // namespace ds
