#include "spec_decode/verifier.h"

#include <algorithm>

namespace ds {

Verifier::Verifier(int vocab) : sampler_(vocab), p_(size_t(vocab)), w_(size_t(vocab)) {}

VerifyOutcome Verifier::verify(SpecMethod method, const VerifyRound& r, const std::function<double()>& uniform) {
  // Temperature 0 (or top-k 1): only the argmax can follow, whatever the method.
  if (r.filter.picks_argmax()) return greedy(r, uniform);
  switch (method) {
    case SpecMethod::Greedy: return greedy(r, uniform);
    case SpecMethod::Probabilistic: return probabilistic(r, uniform);
    case SpecMethod::Block: return block(r, uniform);
  }
  return greedy(r, uniform);
}

int32_t Verifier::sample_row(const VerifyRound& r, int i, const std::function<double()>& uniform) {
  // A request that picks the argmax draws nothing.
  return sampler_.sample(row(r, i), r.vocab, r.filter, r.filter.picks_argmax() ? 0.0 : uniform());
}

float Verifier::q_of(const VerifyRound& r, int i, int32_t x) const {
  if (!r.draft_probs) return x == r.draft[i] ? 1.f : 0.f;
  return r.draft_probs[size_t(i) * size_t(r.vocab) + size_t(x)];
}

void Verifier::residual(const VerifyRound& r, int i, float scale) {
  if (!r.draft_probs) {
    for (int x = 0; x < r.vocab; ++x) w_[size_t(x)] = scale * p_[size_t(x)];
    w_[size_t(r.draft[i])] = std::max(0.f, scale * p_[size_t(r.draft[i])] - 1.f);
    return;
  }
  const float* q = r.draft_probs + size_t(i) * size_t(r.vocab);
  for (int x = 0; x < r.vocab; ++x) w_[size_t(x)] = std::max(0.f, scale * p_[size_t(x)] - q[x]);
}

VerifyOutcome Verifier::greedy(const VerifyRound& r, const std::function<double()>& uniform) {
  for (int i = 0; i < r.k; ++i) {
    const int32_t t = sample_row(r, i, uniform);
    if (t != r.draft[i]) return {i, t};
  }
  return {r.k, sample_row(r, r.k, uniform)};
}

VerifyOutcome Verifier::probabilistic(const VerifyRound& r, const std::function<double()>& uniform) {
  for (int i = 0; i < r.k; ++i) {
    sampler_.distribution(row(r, i), r.vocab, r.filter, p_.data());
    const int32_t d = r.draft[i];
    const float pd = p_[size_t(d)], qd = q_of(r, i, d);
    // Accept with min(1, p/q), written without the division.
    if (uniform() * double(qd) < double(pd)) continue;
    residual(r, i, 1.f);
    int32_t t = Sampler::draw(w_.data(), r.vocab, uniform());
    if (t < 0) t = Sampler::draw(p_.data(), r.vocab, uniform());  // p == q to rounding
    return {i, t};
  }
  return {r.k, sample_row(r, r.k, uniform)};
}

VerifyOutcome Verifier::block(const VerifyRound& r, const std::function<double()>& uniform) {
  // p_i = min(1, p_{i-1} p(X_i)/q(X_i)), p_0 = 1; h_i = Z_{i+1} / (Z_{i+1} + 1 - p_i) for i < k
  // with Z_{i+1} = sum_x max(p_i p(x|X^i) - q(x|X^i), 0); h_k = p_k. tau: the largest i whose
  // eta_i <= h_i (0 if none).
  double pi = 1.0;
  int tau = 0;
  double p_tau = 1.0;
  for (int i = 1; i <= r.k; ++i) {
    sampler_.distribution(row(r, i - 1), r.vocab, r.filter, p_.data());
    const int32_t d = r.draft[i - 1];
    const double pd = p_[size_t(d)], qd = q_of(r, i - 1, d);
    pi = qd > 0 ? std::min(1.0, pi * pd / qd) : (pd > 0 ? std::min(1.0, pi) : 0.0);
    double h;
    if (i < r.k) {
      sampler_.distribution(row(r, i), r.vocab, r.filter, p_.data());
      residual(r, i, float(pi));
      double z = 0;
      for (int x = 0; x < r.vocab; ++x) z += w_[size_t(x)];
      const double den = z + 1.0 - pi;
      h = den > 0 ? z / den : 1.0;
    } else {
      h = pi;
    }
    if (uniform() <= h) {
      tau = i;
      p_tau = pi;
    }
  }
  if (tau == r.k) return {r.k, sample_row(r, r.k, uniform)};
  sampler_.distribution(row(r, tau), r.vocab, r.filter, p_.data());
  residual(r, tau, float(p_tau));
  int32_t t = Sampler::draw(w_.data(), r.vocab, uniform());
  if (t < 0) t = Sampler::draw(p_.data(), r.vocab, uniform());
  return {tau, t};
}

VerifyOutcome Verifier::accept_synthetic(const VerifyRound& r, int accepted, const std::function<double()>& uniform) {
  return {accepted, sample_row(r, accepted, uniform)};
}

}  // namespace ds
