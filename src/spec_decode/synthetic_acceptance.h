// Synthetic acceptance for benchmarks (docs/speculative-decoding.md): the verifier accepts a
// drawn number of draft tokens whatever the target says, so only speed is measured.
//
// The distribution: each draft position is accepted with one probability alpha, independently,
// until the first rejection (a truncated geometric, the shape real acceptance has when every
// position is about as hard as the next). alpha is solved so that the mean acceptance length
// 1 + E[accepted] = 1 + alpha + alpha^2 + ... + alpha^K equals AL; AL 1 gives alpha 0, K+1
// gives alpha 1. A round with fewer than K draft tokens (near max_tokens or a block boundary)
// truncates the same draw, so its mean is below AL.
#pragma once
#include <functional>

namespace ds {

class SyntheticAcceptance {
 public:
  SyntheticAcceptance(double al, int k);
  double alpha() const { return alpha_; }
  double acceptance_length() const { return al_; }
  // Accepted draft tokens for a round of `k` draft tokens (k <= the K it was built for).
  int draw(int k, const std::function<double()>& uniform) const;

 private:
  double al_;
  int k_;
  double alpha_;
};

}  // namespace ds
