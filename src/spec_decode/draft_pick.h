// How a drafter picks one draft token from its logits, shared by the draft model's drafter and
// the parallel drafter: the argmax, or (probabilistic drafting of a sampling request) a draw
// from the request's filtered distribution, which is kept as q for the verifier.
#pragma once
#include <cstdint>
#include <functional>

#include "kernels/sampling.h"

namespace ds {

// keep_probs: draw and write q (vocab floats); otherwise the argmax and q untouched. coupled (a
// reproducible request, verified by exact match, which needs no q): the token plain sampling
// would draw from these logits with this uniform, the same draw the target's row takes, so a
// draft close to the target picks the target's token; q untouched.
inline int32_t pick_draft_token(Sampler& sampler, const float* logits, int vocab, bool keep_probs, bool coupled,
                                const SamplingFilter& filter, const std::function<double()>& uniform, float* q) {
  if (!keep_probs) return Sampler::argmax(logits, vocab);
  if (coupled) return sampler.sample(logits, vocab, filter, uniform());
  sampler.distribution(logits, vocab, filter, q);
  const int32_t t = Sampler::draw(q, vocab, uniform());
  return t >= 0 ? t : Sampler::argmax(logits, vocab);
}

}  // namespace ds
