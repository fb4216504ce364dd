#include "kernels/logit_processing.h"

#include <algorithm>
#include <limits>

namespace ds {

void apply_penalties(float* logits, int vocab, const PenaltyParams& p,
                     std::span<const std::pair<int32_t, int32_t>> output_counts, std::span<const int32_t> seen) {
  if (p.repetition != 1.f) {
    for (int32_t t : seen) {
      if (t < 0 || t >= vocab) continue;
      float& l = logits[t];
      l = l > 0.f ? l / p.repetition : l * p.repetition;
    }
  }
  if (p.frequency != 0.f || p.presence != 0.f) {
    for (const auto& [t, n] : output_counts) {
      if (t < 0 || t >= vocab || n <= 0) continue;
      logits[t] -= p.frequency * float(n) + p.presence;
    }
  }
}

void apply_logit_bias(float* logits, int vocab, std::span<const std::pair<int32_t, float>> bias) {
  for (const auto& [t, b] : bias)
    if (t >= 0 && t < vocab) logits[t] += b;
}

void apply_token_mask(float* logits, int vocab, const uint64_t* allowed) {
  constexpr float kNeg = -std::numeric_limits<float>::infinity();
  for (int w = 0; w * 64 < vocab; ++w) {
    uint64_t bits = allowed[w];
    const int end = std::min(vocab, (w + 1) * 64);
    if (bits == ~uint64_t(0)) continue;
    for (int t = w * 64; t < end; ++t, bits >>= 1)
      if (!(bits & 1)) logits[t] = kNeg;
  }
}

}  // namespace ds
