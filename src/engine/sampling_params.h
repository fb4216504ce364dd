// How a request wants its tokens drawn, and the per-request random stream it draws them from.
// The math (filters, softmax, the draw) is kernels/sampling.h; these are request state.
//
// Each request carries its own Rng seeded from its `seed`, so the tokens a request draws depend
// only on its own logits and seed, never on which other requests share the step.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace ds {

struct SamplingParams {
  float temperature = 1.f;  // 0 = greedy
  int top_k = 0;            // 0 = off
  float top_p = 1.f;        // 1 = off; must be in (0, 1]
  float min_p = 0.f;        // 0 = off; keeps tokens with p >= min_p * p_max
  uint64_t seed = 0;
  // The client gave the seed: the text must depend on nothing but the request (not the batch, the
  // drafter, K or auto's choice of it). Every token is then drawn with uniform_at(seed, its
  // position), and speculation verifies by exact match (docs/speculative-decoding.md, "Seeded
  // requests").
  bool reproducible = false;
  // Logit processing before sampling (kernels/logit_processing.h has the formulas and order).
  float presence_penalty = 0.f;    // OpenAI: [-2, 2]
  float frequency_penalty = 0.f;   // OpenAI: [-2, 2]
  float repetition_penalty = 1.f;  // vLLM: > 0, 1 = off
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token, bias), each token once
  // top_k == 1 keeps only the argmax, so it is greedy whatever the temperature.
  bool greedy() const { return temperature <= 0.f || top_k == 1; }
  bool penalized() const {
    return presence_penalty != 0.f || frequency_penalty != 0.f || repetition_penalty != 1.f || !logit_bias.empty();
  }
};

// A counter-based draw: uniform in [0, 1) from (seed, position) alone, with no stream state,
// so the token at a position draws the same number however the tokens before it were produced.
double uniform_at(uint64_t seed, uint64_t position);

// xoshiro256** seeded through splitmix64: small, fast, and the same sequence on every platform
// (std::mt19937 is too, but std distributions are not, so we draw uniforms ourselves).
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed);
  uint64_t next();
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t s_[4];
};

}  // namespace ds
