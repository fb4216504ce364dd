#include "kernels/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/fast_math.h"
#include "kernels/simd.h"

namespace ds {

namespace {
// NaN logits (a numerics bug upstream) must not poison sampling: they are treated as -inf, the
// same as masked tokens.
bool usable(float l) { return l > -std::numeric_limits<float>::infinity(); }

// sum over usable logits of exp(l - m), m the finite maximum. Sixteen partial sums in float, so
// the loop vectorises (a step's stream phase computes one of these per token over the whole
// vocabulary when logprobs are asked for; the scalar double loop cost ~100 us at vocab 8192).
DS_MULTIVERSION float sum_exp_shifted(const float* l, int n, float m) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float acc[16] = {};
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) {
      const float x = l[i + j];
      acc[j] += x > kNegInf ? exp_fast(x - m) : 0.f;
    }
  for (; i < n; ++i)
    if (l[i] > kNegInf) acc[0] += exp_fast(l[i] - m);
  float s = 0;
  for (float a : acc) s += a;
  return s;
}
}  // namespace

Sampler::Sampler(int vocab) { ensure(vocab); }

void Sampler::ensure(int vocab) {
  if (int(cand_.size()) < vocab) cand_.resize(size_t(vocab));
}

int32_t Sampler::argmax(const float* logits, int vocab) {
  int32_t best = 0;
  float best_l = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < vocab; ++i) {
    // Strict '>' keeps the lowest id on ties, so greedy output never depends on scan order.
    if (logits[i] > best_l) {
      best_l = logits[i];
      best = i;
    }
  }
  return best;
}

float Sampler::logprob_of(const float* logits, int vocab, int32_t token) {
  float m = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < vocab; ++i)
    if (logits[i] > m) m = logits[i];
  if (!usable(m) || !usable(logits[token])) return -std::numeric_limits<float>::infinity();
  if (!std::isfinite(m)) return logits[token] == m ? 0.f : -std::numeric_limits<float>::infinity();  // +inf wins
  const double s = sum_exp_shifted(logits, vocab, m);  // >= 1: the maximum contributes exp(0)
  return float(double(logits[token] - m) - std::log(s));
}

void Sampler::sort_prefix(int n, int k) {
  auto before = [](const Cand& a, const Cand& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  auto* c = cand_.data();
  if (k < n) std::nth_element(c, c + k, c + n, before);
  std::sort(c, c + std::min(k, n), before);
}

int Sampler::gather(const float* logits, int vocab, float* max_logit) {
  int n = 0;
  float m = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < vocab; ++i) {
    float l = logits[i];
    if (!usable(l)) continue;
    cand_[size_t(n++)] = {l, i};
    if (l > m) m = l;
  }
  *max_logit = m;
  return n;
}

int Sampler::filter(int n, float m, const SamplingFilter& p) {
  const float inv_t = 1.f / p.temperature;
  auto weight = [&](float l) { return std::exp((l - m) * inv_t); };
  if (p.top_k > 0 && p.top_k < n) {
    // Only membership matters here; nth_element is O(vocab) where a sort would not be.
    sort_prefix(n, p.top_k);
    n = p.top_k;
  }
  if (p.top_p < 1.f) {
    double total = 0;
    for (int i = 0; i < n; ++i) total += weight(cand_[size_t(i)].logit);
    const double target = double(p.top_p) * total;
    // The nucleus is usually a few dozen tokens: sort a growing prefix instead of the vocabulary.
    int k = std::min(n, 64);
    for (;;) {
      sort_prefix(n, k);
      double cum = 0;
      int cut = -1;
      for (int i = 0; i < k; ++i) {
        cum += weight(cand_[size_t(i)].logit);
        if (cum >= target) {
          cut = i + 1;
          break;
        }
      }
      if (cut > 0) {
        n = cut;
        break;
      }
      if (k == n) break;  // rounding left the target just out of reach: keep everything
      k = std::min(n, k * 4);
    }
  }
  if (p.min_p > 0.f) {
    // p_i >= min_p * p_max  <=>  (l_i - m) / T >= log(min_p). The max always survives.
    const float thr = std::log(p.min_p);
    int w = 0;
    for (int i = 0; i < n; ++i)
      if ((cand_[size_t(i)].logit - m) * inv_t >= thr) cand_[size_t(w++)] = cand_[size_t(i)];
    n = w;
  }
  return n;
}

int32_t Sampler::sample(const float* logits, int vocab, const SamplingFilter& p, double uniform,
                        float* logprob) {
  // Below kMinTemperature the distribution is the argmax to float precision, and 1/T heads for
  // overflow (inf below ~3e-39, where a tie's (l - m) / T is 0 * inf = NaN): greedy. The negated
  // comparison also takes a NaN temperature there.
  if (p.picks_argmax()) {
    int32_t tok = argmax(logits, vocab);
    if (logprob) *logprob = logprob_of(logits, vocab, tok);
    return tok;
  }
  ensure(vocab);
  float m = 0.f;
  int n = gather(logits, vocab, &m);
  if (n == 0) {  // every logit masked: nothing to draw from, fall back to a defined answer
    if (logprob) *logprob = -std::numeric_limits<float>::infinity();
    return 0;
  }
  if (!std::isfinite(m)) {  // a +inf logit outweighs everything: (inf - inf) would be NaN below
    const int32_t tok = argmax(logits, vocab);
    if (logprob) *logprob = 0.f;
    return tok;
  }
  const float inv_t = 1.f / p.temperature;
  auto weight = [&](float l) { return std::exp((l - m) * inv_t); };
  n = filter(n, m, p);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += weight(cand_[size_t(i)].logit);
  const double u = uniform * sum;
  double cum = 0;
  int chosen = n - 1;  // if rounding leaves u beyond the last bucket, take the last candidate
  for (int i = 0; i < n; ++i) {
    cum += weight(cand_[size_t(i)].logit);
    if (u < cum) {
      chosen = i;
      break;
    }
  }
  const Cand c = cand_[size_t(chosen)];
  if (logprob) *logprob = float(double((c.logit - m) * inv_t) - std::log(sum));
  return c.id;
}

void Sampler::top_logprobs(const float* logits, int vocab, int n,
                           std::vector<std::pair<int32_t, float>>* out) {
  out->clear();
  if (n <= 0) return;
  ensure(vocab);
  int cnt = 0;
  float m = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < vocab; ++i) {
    if (!usable(logits[i])) continue;
    cand_[size_t(cnt++)] = {logits[i], i};
    if (logits[i] > m) m = logits[i];
  }
  if (cnt == 0) return;
  const bool inf_top = !std::isfinite(m);  // +inf logits take all the mass
  // The same sum as logprob_of, so a token's logprob and its entry here agree.
  const double lse = inf_top ? double(m) : double(m) + std::log(double(sum_exp_shifted(logits, vocab, m)));
  const int k = std::min(n, cnt);
  sort_prefix(cnt, k);
  for (int i = 0; i < k; ++i)
    out->emplace_back(cand_[size_t(i)].id, inf_top ? (cand_[size_t(i)].logit == m ? 0.f : -std::numeric_limits<float>::infinity())
                                                    : float(double(cand_[size_t(i)].logit) - lse));
}

void Sampler::distribution(const float* logits, int vocab, const SamplingFilter& p, float* probs) {
  for (int i = 0; i < vocab; ++i) probs[i] = 0.f;
  if (p.picks_argmax()) {
    probs[argmax(logits, vocab)] = 1.f;
    return;
  }
  ensure(vocab);
  float m = 0.f;
  int n = gather(logits, vocab, &m);
  if (n == 0) {
    probs[0] = 1.f;
    return;
  }
  if (!std::isfinite(m)) {
    probs[argmax(logits, vocab)] = 1.f;
    return;
  }
  n = filter(n, m, p);
  const float inv_t = 1.f / p.temperature;
  // Each weight once (a drafter keeps a distribution per draft slot: the vocabulary's exps
  // twice over were most of a probabilistic draft round); the same floats, sum and quotients.
  if (weight_.size() < size_t(n)) weight_.resize(size_t(n));
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += (weight_[size_t(i)] = std::exp((cand_[size_t(i)].logit - m) * inv_t));
  for (int i = 0; i < n; ++i) probs[cand_[size_t(i)].id] = float(weight_[size_t(i)] / sum);
}

int32_t Sampler::draw(const float* weights, int vocab, double uniform) {
  double sum = 0;
  int32_t last = -1;
  for (int i = 0; i < vocab; ++i) {
    if (weights[i] > 0.f) {
      sum += weights[i];
      last = i;
    }
  }
  if (last < 0) return -1;
  const double u = uniform * sum;
  double cum = 0;
  for (int i = 0; i < vocab; ++i) {
    if (!(weights[i] > 0.f)) continue;
    cum += weights[i];
    if (u < cum) return i;
  }
  return last;  // rounding left u beyond the last bucket
}

}  // namespace ds
