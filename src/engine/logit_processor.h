// A sequence's logits made ready for sampling: its penalties, logit bias and output constraint
// applied to a copy of its row (kernels/logit_processing.h has the formulas and their order).
// Engine thread only. The raw row is left alone: logprobs report the model's distribution.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/sequence.h"

namespace ds {

class LogitProcessor {
 public:
  LogitProcessor(int vocab, std::vector<int32_t> eos_ids);

  // The row to sample from for s, or null when its constraint allows no token at all (the
  // caller ends the request). Valid until the next call.
  const float* process(Sequence& s, const float* logits);
  // After `token` joins s (and before the next process()): the penalty counts and the
  // constraint advance. False when the constraint refuses the token (it never does for a
  // token process() allowed).
  bool observe(Sequence& s, int32_t token);

  // Time spent in process() and observe(), and the constraint's share (mask lookups and walks).
  double seconds() const { return seconds_; }
  int64_t constrained_tokens() const { return constrained_tokens_; }

 private:
  bool is_end(const Sequence& s, int32_t token) const;

  int vocab_;
  std::vector<int32_t> eos_;
  std::vector<float> row_;
  std::vector<uint64_t> mask_;
  double seconds_ = 0;
  int64_t constrained_tokens_ = 0;
};

}  // namespace ds
