// Verification of one speculative round (docs/speculative-decoding.md):
// the target scored k+1 rows (row i: its distribution after the draft's first i tokens); the
// verifier decides how many draft tokens to accept and which token follows them. Every draw
// comes from the request's own stream, so a seeded request repeats.
//   greedy         accept while the draft token is the target's own choice at that row (the
//                  argmax at temperature 0; a token drawn from the row otherwise, which keeps
//                  the target's distribution too); the first mismatch emits the target's token.
//   probabilistic  token-wise rejection: accept x with min(1, p(x)/q(x)); on the first
//                  rejection draw from norm(max(0, p - q)); after a full accept, from row k.
//   block          block verification (Sun et al., ICLR 2025): accepts the longest prefix its
//                  joint test allows, which is never shorter on average than token-wise.
// p and q are the request's filtered distributions (temperature, top-k, top-p, min-p), the ones
// plain sampling and the drafter draw from.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/sampling.h"
#include "spec_decode/spec_options.h"

namespace ds {

struct VerifyRound {
  int k = 0;                             // draft tokens
  const int32_t* draft = nullptr;        // d_1..d_k
  const float* target_logits = nullptr;  // k+1 rows of vocab floats
  // k rows: q(.|X^i), the distribution d_{i+1} was drawn from; nullptr: the draft picked its
  // argmax (q is one-hot at each draft token).
  const float* draft_probs = nullptr;
  int vocab = 0;
  SamplingFilter filter;
};

struct VerifyOutcome {
  int accepted = 0;  // draft tokens accepted, 0..k
  int32_t next = 0;  // the token after them (correction or bonus): the round emits accepted + 1
};

class Verifier {
 public:
  explicit Verifier(int vocab);
  VerifyOutcome verify(SpecMethod method, const VerifyRound& r, const std::function<double()>& uniform);
  // Synthetic acceptance: the first `accepted` draft tokens stand; the next is drawn from row
  // `accepted` as plain sampling would draw it.
  VerifyOutcome accept_synthetic(const VerifyRound& r, int accepted, const std::function<double()>& uniform);

 private:
  VerifyOutcome greedy(const VerifyRound& r, const std::function<double()>& uniform);
  VerifyOutcome probabilistic(const VerifyRound& r, const std::function<double()>& uniform);
  VerifyOutcome block(const VerifyRound& r, const std::function<double()>& uniform);
  int32_t sample_row(const VerifyRound& r, int row, const std::function<double()>& uniform);
  const float* row(const VerifyRound& r, int i) const { return r.target_logits + size_t(i) * size_t(r.vocab); }
  // q(x | X^i) for the draft's row i.
  float q_of(const VerifyRound& r, int i, int32_t x) const;
  // Residual weights w(x) = max(0, scale * p(x) - q_i(x)) over p_ (row i's distribution).
  void residual(const VerifyRound& r, int i, float scale);

  Sampler sampler_;
  std::vector<float> p_, w_;
};

}  // namespace ds
