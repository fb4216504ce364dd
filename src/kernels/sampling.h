// Token sampling over one row of logits: greedy, temperature, top-k, top-p (nucleus), min-p.
//
// The random draw comes from the caller (the engine keeps one stream per request). The Sampler
// keeps its scratch buffers between calls: after the first call at a given vocabulary size the
// hot path does not allocate.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace ds {

// Temperatures below this sample greedily (see Sampler::sample).
inline constexpr float kMinTemperature = 1e-6f;

// The distribution to draw from: softmax(logits / temperature) restricted by the filters.
struct SamplingFilter {
  float temperature = 1.f;  // 0 = greedy
  int top_k = 0;            // 0 = off
  float top_p = 1.f;        // 1 = off; must be in (0, 1]
  float min_p = 0.f;        // 0 = off; keeps tokens with p >= min_p * p_max
  // top_k == 1 keeps only the argmax, so it is greedy whatever the temperature.
  bool greedy() const { return temperature <= 0.f || top_k == 1; }
  // What Sampler::sample actually does: greedy, or a temperature too small to divide by (or NaN).
  bool picks_argmax() const { return greedy() || !(temperature >= kMinTemperature); }
};

class Sampler {
 public:
  explicit Sampler(int vocab = 0);

  // Picks one token. Greedy picks the argmax, the lowest id on ties. Otherwise the distribution
  // is softmax(logits / temperature) restricted by top-k, then top-p (on the top-k-renormalised
  // distribution), then min-p, renormalised. When `logprob` is given it receives the
  // log-probability of the chosen token under the distribution it was drawn from (for greedy:
  // the model's own log-softmax at temperature 1, since the degenerate one-hot would say 0).
  // `uniform` is the draw in [0, 1) that picks the token (unused when greedy): the caller owns
  // the random stream, so what a request draws depends only on its own seed.
  int32_t sample(const float* logits, int vocab, const SamplingFilter& filter, double uniform,
                 float* logprob = nullptr);

  // The n most likely tokens of the model's distribution (log-softmax of the raw logits), most
  // likely first, lower id first on ties. `out` is cleared and refilled; reuse it across calls to
  // keep its capacity.
  void top_logprobs(const float* logits, int vocab, int n,
                    std::vector<std::pair<int32_t, float>>* out);

  // log-softmax(logits)[token]: what OpenAI-style `logprobs` report for the chosen token.
  static float logprob_of(const float* logits, int vocab, int32_t token);
  static int32_t argmax(const float* logits, int vocab);

  // The distribution sample() draws from, as probabilities over the whole vocabulary (zero
  // where the filters drop a token; one-hot at the argmax when greedy): what speculative
  // verification compares target and draft by.
  void distribution(const float* logits, int vocab, const SamplingFilter& filter, float* probs);
  // Draws from non-negative weights (need not sum to 1) by their cumulative sum in id order;
  // -1 when every weight is zero.
  static int32_t draw(const float* weights, int vocab, double uniform);

 private:
  struct Cand {
    float logit;
    int32_t id;
  };
  void ensure(int vocab);
  // Usable logits into cand_ (returns how many; *max_logit their max), then the filters
  // (top-k, top-p, min-p) over them (returns how many are kept, in cand_'s first entries).
  int gather(const float* logits, int vocab, float* max_logit);
  int filter(int n, float m, const SamplingFilter& p);
  // Orders the first k candidates of cand_[0, n) by logit descending, id ascending.
  void sort_prefix(int n, int k);

  std::vector<Cand> cand_;
  std::vector<float> weight_;  // distribution's scratch: each kept candidate's exp
};

}  // namespace ds
