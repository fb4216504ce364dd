// What a request asks be done to its logits before sampling, each over one row:
//   1. repetition_penalty (vLLM's / the CTRL paper's): every token seen in the prompt or the
//      output has its logit divided by p when positive, multiplied by p when not;
//   2. frequency and presence penalties (OpenAI's): logit -= frequency * count + presence * [count > 0],
//      with count the token's occurrences in the output so far;
//   3. logit_bias (OpenAI's): logit += bias[token];
//   4. a grammar mask: tokens outside it get -inf.
// In that order, the order vLLM applies them in. Sampling (temperature and the filters) then
// runs on the result.
#pragma once
#include <cstdint>
#include <span>
#include <utility>

namespace ds {

struct PenaltyParams {
  float repetition = 1.f;  // 1 = off; > 0
  float frequency = 0.f;   // 0 = off; OpenAI allows [-2, 2]
  float presence = 0.f;
  bool any() const { return repetition != 1.f || frequency != 0.f || presence != 0.f; }
};

// `output_counts`: (token, occurrences in the output), each token once. `seen`: every distinct
// token of the prompt and the output (for the repetition penalty), each once. Ids outside
// [0, vocab) are ignored.
void apply_penalties(float* logits, int vocab, const PenaltyParams& p,
                     std::span<const std::pair<int32_t, int32_t>> output_counts, std::span<const int32_t> seen);
void apply_logit_bias(float* logits, int vocab, std::span<const std::pair<int32_t, float>> bias);
// allowed: one bit per token id, 64 per word, at least ceil(vocab / 64) words.
void apply_token_mask(float* logits, int vocab, const uint64_t* allowed);

}  // namespace ds
