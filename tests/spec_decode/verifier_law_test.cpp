// The three verifiers (src/spec_decode/verifier.h) against laws written from the formulas, exactly,
// without a model. Toy target and draft "models" give context-dependent rows over vocabularies of
// 4 to 6 tokens; every draft of K = 1..4 tokens is enumerated with its probability under q, and
// the verifier's outcome law for each draft is integrated over its uniform draws by the
// UniformExplorer (no sampling). What is held:
//  - the joint law of all K + 1 positions a round decides (its emitted tokens, continued by
//    plain sampling from the target) is the target's, filtered by temperature, top-k, top-p and
//    min-p as plain sampling filters it: token-wise, block and exact-match verification, dense,
//    sparse and one-hot q (one-hot both as draft_probs == nullptr and as dense rows);
//  - token-wise verification emits y_1..y_m with prod_{j<m} min(p_j, q_j)(y_j) times
//    max(0, p_m - q_m)(y_m) (m <= K) or p_{K+1}(y_{K+1}) (m = K + 1);
//  - expected acceptance equals the closed forms: token-wise, P(accepted >= l) is the product of
//    E_q[min(1, p_j/q_j)] over j <= l where rows depend on the position only, and the sum over
//    prefixes of prod min(p_j, q_j) in general; block (Sun et al., ICLR 2025), P(tau >= l) =
//    E_q[p_l(X^l)] with p_l = min(1, p_{l-1} p/q), never below token-wise, equal for one-hot q,
//    and the paper's 11/9 against 10/9 on its two-token example.
// The references below never call the Sampler or the Verifier: filtering, the target's joint law
// and the closed forms are computed here in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "spec_decode/verifier.h"
#include "uniform_explorer.h"

namespace ds::test {
namespace {

using Dist = std::vector<double>;
using Tokens = std::vector<int32_t>;

// Float rounding only: the verifier works on float probabilities from float logits, the
// references in double, the explorer to 1e-11 per boundary. Measured: at most 5e-8 on any
// probability and 4.3e-8 in total variation; the planted faults were off by 1e-3 and more.
constexpr double kLawTol = 1e-6;

uint64_t mix(uint64_t z) {  // splitmix64's finalizer
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
double unit(uint64_t h) { return double(h >> 11) * 0x1.0p-53; }

enum class Draft { Dense, Sparse, OneHot, OneHotRows };
const char* draft_name(Draft d) {
  switch (d) {
    case Draft::Dense: return "dense q";
    case Draft::Sparse: return "sparse q";
    case Draft::OneHot: return "one-hot q (no draft_probs)";
    case Draft::OneHotRows: return "one-hot q (as rows)";
  }
  return "?";
}

struct Case {
  int vocab = 4;
  int k = 1;
  SamplingFilter filter;
  Draft draft = Draft::Dense;
  uint64_t salt = 1;
  bool position_only = false;  // rows depend on the position only, not on the tokens before it
  std::string name() const {
    char b[160];
    std::snprintf(b, sizeof b, "V=%d K=%d T=%g top_k=%d top_p=%g min_p=%g %s%s salt=%llu", vocab, k,
                  double(filter.temperature), filter.top_k, double(filter.top_p), double(filter.min_p),
                  draft_name(draft), position_only ? " position-only" : "", (unsigned long long)salt);
    return b;
  }
};

uint64_t context_hash(const Case& s, uint64_t which, const Tokens& prefix) {
  uint64_t h = mix(s.salt * 1000003u + which);
  if (!s.position_only)
    for (int32_t t : prefix) h = mix(h ^ (uint64_t(t) + 1) * 0x100000001b3ull);
  return mix(h ^ (prefix.size() + 17));
}

// The target's logits after the round's tokens `prefix`: spread over [-3, 3].
std::vector<float> target_logits(const Case& s, const Tokens& prefix) {
  const uint64_t h = context_hash(s, 1, prefix);
  std::vector<float> l(static_cast<size_t>(s.vocab));
  for (int x = 0; x < s.vocab; ++x) l[size_t(x)] = float(6.0 * unit(mix(h + uint64_t(x))) - 3.0);
  return l;
}

// The filtered distribution plain sampling draws from, from the formulas: softmax(l / T); the
// top_k most likely; then the shortest most-likely-first prefix whose mass (renormalised over
// the top-k) reaches top_p; then those with p >= min_p * p_max; renormalised. T = 0 or top_k = 1:
// the argmax (lowest id on ties). Cut points this close to a threshold would make the reference
// depend on rounding, so they fail the setup instead.
Dist reference_filtered(const std::vector<float>& l, const SamplingFilter& f) {
  const int v = int(l.size());
  Dist p(size_t(v), 0.0);
  if (f.temperature <= 0.f || f.top_k == 1) {
    p[size_t(std::max_element(l.begin(), l.end()) - l.begin())] = 1.0;
    return p;
  }
  const double m = *std::max_element(l.begin(), l.end());
  Dist w(static_cast<size_t>(v));
  for (int x = 0; x < v; ++x) w[size_t(x)] = std::exp((double(l[size_t(x)]) - m) / double(f.temperature));
  std::vector<int> order(static_cast<size_t>(v));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return w[size_t(a)] > w[size_t(b)]; });
  int n = v;
  if (f.top_k > 0 && f.top_k < n) n = f.top_k;
  if (f.top_p < 1.f) {
    double total = 0, cum = 0;
    for (int i = 0; i < n; ++i) total += w[size_t(order[size_t(i)])];
    for (int i = 0; i < n; ++i) {
      cum += w[size_t(order[size_t(i)])];
      EXPECT_GT(std::abs(cum / total - double(f.top_p)), 1e-5) << "top-p cut too close to call";
      if (cum >= double(f.top_p) * total) {
        n = i + 1;
        break;
      }
    }
  }
  std::vector<int> kept(order.begin(), order.begin() + n);
  if (f.min_p > 0.f) {
    std::vector<int> k2;
    for (int x : kept) {
      EXPECT_GT(std::abs(w[size_t(x)] - double(f.min_p)), 1e-5) << "min-p cut too close to call";
      if (w[size_t(x)] >= double(f.min_p)) k2.push_back(x);  // w is p / p_max
    }
    kept = k2;
  }
  double sum = 0;
  for (int x : kept) sum += w[size_t(x)];
  for (int x : kept) p[size_t(x)] = w[size_t(x)] / sum;
  return p;
}

Dist target_p(const Case& s, const Tokens& prefix) { return reference_filtered(target_logits(s, prefix), s.filter); }

// q(. | prefix) as the verifier is given it (floats): the target's logits blurred and shifted by
// noise, softmax; sparse q zeroes about a third of the tokens (keeping its argmax), so q misses
// tokens p has and keeps tokens the filters drop; one-hot q is its argmax.
std::vector<float> draft_q(const Case& s, const Tokens& prefix) {
  const auto tl = target_logits(s, prefix);
  const uint64_t h = context_hash(s, 2, prefix);
  Dist l(static_cast<size_t>(s.vocab));
  for (int x = 0; x < s.vocab; ++x) l[size_t(x)] = 0.6 * tl[size_t(x)] + 2.5 * unit(mix(h + uint64_t(x)));
  const int best = int(std::max_element(l.begin(), l.end()) - l.begin());
  std::vector<float> q(size_t(s.vocab), 0.f);
  if (s.draft == Draft::OneHot || s.draft == Draft::OneHotRows) {
    q[size_t(best)] = 1.f;
    return q;
  }
  Dist w(static_cast<size_t>(s.vocab));
  double sum = 0;
  for (int x = 0; x < s.vocab; ++x) {
    const bool drop = s.draft == Draft::Sparse && x != best && mix(h ^ (uint64_t(x) + 99)) % 3 == 0;
    sum += (w[size_t(x)] = drop ? 0.0 : std::exp(l[size_t(x)]));
  }
  for (int x = 0; x < s.vocab; ++x) q[size_t(x)] = float(w[size_t(x)] / sum);
  return q;
}

Tokens with(Tokens t, int32_t x) {
  t.push_back(x);
  return t;
}

// What the verifier does over every draft: the probability of each emitted sequence (accepted
// draft tokens, then the correction or bonus token), and P(accepted >= l) for l = 0..K.
struct RoundLaw {
  std::map<Tokens, double> emitted;
  std::vector<double> at_least;
  double mean_accepted() const { return std::accumulate(at_least.begin() + 1, at_least.end(), 0.0); }
};

RoundLaw verifier_law(const Case& s, SpecMethod method) {
  RoundLaw out;
  out.at_least.assign(size_t(s.k + 1), 0.0);
  Verifier verifier(s.vocab);
  // Every draft d_1..d_K with its probability prod q(d_i | d_<i).
  std::function<void(const Tokens&, double)> each_draft = [&](const Tokens& d, double w) {
    if (int(d.size()) < s.k) {
      const auto q = draft_q(s, d);
      for (int x = 0; x < s.vocab; ++x)
        if (q[size_t(x)] > 0.f) each_draft(with(d, x), w * double(q[size_t(x)]));
      return;
    }
    std::vector<float> logits, probs;
    for (int i = 0; i <= s.k; ++i) {
      const Tokens prefix(d.begin(), d.begin() + i);
      const auto l = target_logits(s, prefix);
      logits.insert(logits.end(), l.begin(), l.end());
      if (i < s.k) {
        const auto q = draft_q(s, prefix);
        probs.insert(probs.end(), q.begin(), q.end());
      }
    }
    VerifyRound r;
    r.k = s.k;
    r.draft = d.data();
    r.target_logits = logits.data();
    r.draft_probs = s.draft == Draft::OneHot ? nullptr : probs.data();
    r.vocab = s.vocab;
    r.filter = s.filter;
    UniformExplorer::Law law;
    UniformExplorer::add_law([&](const std::function<double()>& u) { return verifier.verify(method, r, u); }, w, &law);
    for (const auto& [o, pr] : law) {
      EXPECT_GE(o.first, 0);
      EXPECT_LE(o.first, s.k);
      Tokens y(d.begin(), d.begin() + std::clamp(o.first, 0, s.k));
      y.push_back(o.second);
      out.emitted[y] += pr;
      for (int l = 0; l <= std::clamp(o.first, 0, s.k); ++l) out.at_least[size_t(l)] += pr;
    }
  };
  each_draft({}, 1.0);
  return out;
}

// Index of y_1..y_{K+1} in a V^{K+1} table.
size_t cell(const Tokens& y, int vocab) {
  size_t i = 0;
  for (int32_t t : y) i = i * size_t(vocab) + size_t(t);
  return i;
}

// The target's joint law of K + 1 tokens sampled one after another.
std::vector<double> target_joint(const Case& s) {
  std::vector<double> joint(size_t(std::pow(s.vocab, s.k + 1)));
  std::function<void(const Tokens&, double)> go = [&](const Tokens& y, double w) {
    if (int(y.size()) == s.k + 1) {
      joint[cell(y, s.vocab)] = w;
      return;
    }
    const Dist p = target_p(s, y);
    for (int x = 0; x < s.vocab; ++x)
      if (p[size_t(x)] > 0) go(with(y, x), w * p[size_t(x)]);
  };
  go({}, 1.0);
  return joint;
}

// The law of the first K + 1 tokens when each emitted sequence is continued by plain sampling.
std::vector<double> continued(const Case& s, const std::map<Tokens, double>& emitted) {
  std::vector<double> joint(size_t(std::pow(s.vocab, s.k + 1)));
  std::function<void(const Tokens&, double)> go = [&](const Tokens& y, double w) {
    if (int(y.size()) >= s.k + 1) {
      joint[cell(Tokens(y.begin(), y.begin() + s.k + 1), s.vocab)] += w;
      return;
    }
    const Dist p = target_p(s, y);
    for (int x = 0; x < s.vocab; ++x)
      if (p[size_t(x)] > 0) go(with(y, x), w * p[size_t(x)]);
  };
  for (const auto& [y, w] : emitted) go(y, w);
  return joint;
}

struct Gap {
  double max_abs = 0, tv = 0;
};
Gap compare(const std::vector<double>& a, const std::vector<double>& b) {
  Gap g;
  for (size_t i = 0; i < a.size(); ++i) {
    g.max_abs = std::max(g.max_abs, std::abs(a[i] - b[i]));
    g.tv += 0.5 * std::abs(a[i] - b[i]);
  }
  return g;
}

// Token-wise verification's emission law, from the formula in the header comment.
std::map<Tokens, double> tokenwise_emission(const Case& s) {
  std::map<Tokens, double> out;
  std::function<void(const Tokens&, double)> go = [&](const Tokens& y, double w) {
    const Dist p = target_p(s, y);
    if (int(y.size()) == s.k) {
      for (int x = 0; x < s.vocab; ++x)
        if (w * p[size_t(x)] > 0) out[with(y, x)] += w * p[size_t(x)];
      return;
    }
    const auto q = draft_q(s, y);
    for (int x = 0; x < s.vocab; ++x) {
      const double px = p[size_t(x)], qx = q[size_t(x)];
      if (px - qx > 0 && w > 0) out[with(y, x)] += w * (px - qx);  // rejected here, x from the residual
      if (std::min(px, qx) > 0) go(with(y, x), w * std::min(px, qx));  // x drafted and accepted
    }
  };
  go({}, 1.0);
  return out;
}

double max_gap(const std::map<Tokens, double>& a, const std::map<Tokens, double>& b) {
  double g = 0;
  for (const auto& [y, w] : a) {
    const auto it = b.find(y);
    g = std::max(g, std::abs(w - (it == b.end() ? 0.0 : it->second)));
  }
  for (const auto& [y, w] : b)
    if (!a.count(y)) g = std::max(g, w);
  return g;
}

// Runs the joint-law check for one setup and method; returns the verifier's round law.
RoundLaw expect_target_law(const Case& s, SpecMethod m) {
  const RoundLaw law = verifier_law(s, m);
  double total = 0;
  for (const auto& [y, w] : law.emitted) total += w;
  EXPECT_NEAR(total, 1.0, kLawTol) << spec_method_name(m) << ", " << s.name();
  const Gap g = compare(continued(s, law.emitted), target_joint(s));
  EXPECT_LT(g.tv, kLawTol) << spec_method_name(m) << ", " << s.name() << ": the joint law of " << s.k + 1
                           << " positions is off (largest gap " << g.max_abs << ")";
  return law;
}

const Draft kDrafts[] = {Draft::Dense, Draft::Sparse, Draft::OneHot, Draft::OneHotRows};
struct Shape {
  int vocab, k;
};
const Shape kShapes[] = {{4, 1}, {5, 2}, {6, 3}, {4, 4}};

// A case of the shape and draft, its salt set apart per test by `base` (each test sees other rows).
Case case_of(const Shape& sh, Draft d, int base) {
  Case s;
  s.vocab = sh.vocab;
  s.k = sh.k;
  s.draft = d;
  s.salt = uint64_t(base * sh.k + int(d));
  return s;
}

TEST(VerifierLaw, TokenWiseKeepsTheTargetsLawOverAllPositions) {
  for (const Shape& sh : kShapes)
    for (Draft d : kDrafts) {
      Case s = case_of(sh, d, 10);
      const RoundLaw law = expect_target_law(s, SpecMethod::Probabilistic);
      EXPECT_LT(max_gap(law.emitted, tokenwise_emission(s)), kLawTol)
          << s.name() << ": token-wise emission law differs from prod min(p, q) * residual";
    }
}

TEST(VerifierLaw, BlockKeepsTheTargetsLawOverAllPositions) {
  for (const Shape& sh : kShapes)
    for (Draft d : kDrafts) {
      Case s = case_of(sh, d, 20);
      expect_target_law(s, SpecMethod::Block);
    }
}

TEST(VerifierLaw, ExactMatchWithSamplingKeepsTheTargetsLawOverAllPositions) {
  for (const Shape& sh : kShapes)
    for (Draft d : {Draft::Dense, Draft::OneHot}) {
      Case s = case_of(sh, d, 30);
      expect_target_law(s, SpecMethod::Greedy);
    }
}

TEST(VerifierLaw, FilteredTargetsLawOverAllPositions) {
  // The law must be the filtered target's (the one plain sampling draws from), for every
  // method; temperature 0 is the argmax chain whatever the method.
  const SamplingFilter filters[] = {
      {0.7f, 3, 1.f, 0.f}, {1.3f, 0, 0.75f, 0.f}, {1.f, 0, 1.f, 0.2f}, {0.9f, 5, 0.85f, 0.1f}, {0.f, 0, 1.f, 0.f},
  };
  for (const SamplingFilter& f : filters) {
    Case s;
    s.vocab = 6;
    s.k = 3;
    s.filter = f;
    // The filters must bite: some row of the toy target keeps fewer tokens than the vocabulary.
    int narrowed = 0;
    for (int a = 0; a < s.vocab; ++a) {
      const Dist p = target_p(s, {a});
      narrowed += std::count(p.begin(), p.end(), 0.0) > 0;
    }
    EXPECT_GT(narrowed, 0) << s.name();
    for (Draft d : {Draft::Dense, Draft::Sparse, Draft::OneHot}) {
      s.draft = d;
      for (SpecMethod m : {SpecMethod::Probabilistic, SpecMethod::Block, SpecMethod::Greedy}) {
        const RoundLaw law = expect_target_law(s, m);
        if (m == SpecMethod::Probabilistic) {
          EXPECT_LT(max_gap(law.emitted, tokenwise_emission(s)), kLawTol) << s.name();
        }
      }
    }
  }
}

// P(accepted >= l) for l = 0..K from the closed forms, summing over the draft prefixes x^l.
// tokenwise: prod_j min(p_j, q_j)(x_j); block: q(x^l) p_l(x^l), p_l = min(1, p_{l-1} p/q);
// exact match: q(x^l) prod_j p_j(x_j).
std::vector<double> closed_form_at_least(const Case& s, SpecMethod m) {
  std::vector<double> at(size_t(s.k + 1), 0.0);
  std::function<void(const Tokens&, double, double)> go = [&](const Tokens& x, double qx, double term) {
    at[x.size()] += m == SpecMethod::Block ? qx * term : term;
    if (int(x.size()) == s.k) return;
    const Dist p = target_p(s, x);
    const auto q = draft_q(s, x);
    for (int t = 0; t < s.vocab; ++t) {
      const double pt = p[size_t(t)], qt = q[size_t(t)];
      if (qt <= 0) continue;
      double next = 0;
      switch (m) {
        case SpecMethod::Probabilistic: next = term * std::min(pt, qt); break;
        case SpecMethod::Block: next = std::min(1.0, term * pt / qt); break;
        case SpecMethod::Greedy: next = term * qt * pt; break;
      }
      go(with(x, t), qx * qt, next);
    }
  };
  go({}, 1.0, 1.0);
  return at;
}

void expect_at_least(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t l = 0; l < got.size(); ++l)
    EXPECT_NEAR(got[l], want[l], kLawTol) << what << ": P(accepted >= " << l << ")";
}

TEST(VerifierLaw, TokenWiseAcceptanceIsTheProductOfMinRatios) {
  for (const Shape& sh : kShapes)
    for (Draft d : kDrafts) {
      // Rows that depend on the position only: P(accepted >= l) = prod_{j<=l} beta_j with
      // beta_j = E_{x ~ q_j}[min(1, p_j(x) / q_j(x))].
      Case s = case_of(sh, d, 40);
      s.position_only = true;
      std::vector<double> want(size_t(s.k + 1), 1.0);
      Tokens pos;
      for (int j = 1; j <= s.k; ++j) {
        const Dist p = target_p(s, pos);
        const auto q = draft_q(s, pos);
        double beta = 0;
        for (int x = 0; x < s.vocab; ++x)
          if (q[size_t(x)] > 0) beta += double(q[size_t(x)]) * std::min(1.0, p[size_t(x)] / double(q[size_t(x)]));
        want[size_t(j)] = want[size_t(j - 1)] * beta;
        pos.push_back(0);
      }
      expect_at_least(verifier_law(s, SpecMethod::Probabilistic).at_least, want, s.name());
      // Context-dependent rows: the sum over prefixes.
      s.position_only = false;
      expect_at_least(verifier_law(s, SpecMethod::Probabilistic).at_least,
                      closed_form_at_least(s, SpecMethod::Probabilistic), s.name());
      // Exact match accepts x with p(x): the same as token-wise for one-hot q.
      expect_at_least(verifier_law(s, SpecMethod::Greedy).at_least, closed_form_at_least(s, SpecMethod::Greedy),
                      std::string("exact match, ") + s.name());
    }
}

TEST(VerifierLaw, BlockAcceptanceIsSunEtAlsClosedForm) {
  double most_gain = 0;
  for (const Shape& sh : kShapes)
    for (Draft d : kDrafts) {
      Case s = case_of(sh, d, 50);
      const RoundLaw block = verifier_law(s, SpecMethod::Block);
      expect_at_least(block.at_least, closed_form_at_least(s, SpecMethod::Block), s.name());
      // Never below token-wise's closed form, and the same where q is one-hot.
      const auto tw = closed_form_at_least(s, SpecMethod::Probabilistic);
      const double tw_mean = std::accumulate(tw.begin() + 1, tw.end(), 0.0);
      EXPECT_GE(block.mean_accepted(), tw_mean - kLawTol) << s.name();
      if (d == Draft::OneHot || d == Draft::OneHotRows) {
        EXPECT_NEAR(block.mean_accepted(), tw_mean, kLawTol) << s.name();
      }
      if (s.k > 1) most_gain = std::max(most_gain, block.mean_accepted() - tw_mean);
    }
  EXPECT_GT(most_gain, 1e-3) << "block verification never accepted more than token-wise on a dense draft";
}

TEST(VerifierLaw, BlockMatchesThePapersTwoTokenExample) {
  // Sun et al.'s example: two tokens, context-free, M_b = (1/3, 2/3), M_s = (2/3, 1/3), K = 2:
  // token-wise accepts 10/9 tokens on average, block verification 11/9.
  const std::vector<float> logits = {0.f, std::log(2.f), 0.f, std::log(2.f), 0.f, std::log(2.f)};
  const std::vector<float> q = {2.f / 3, 1.f / 3, 2.f / 3, 1.f / 3};
  Verifier verifier(2);
  for (auto [m, want] : {std::pair{SpecMethod::Probabilistic, 10.0 / 9}, std::pair{SpecMethod::Block, 11.0 / 9}}) {
    double mean = 0;
    for (int32_t a = 0; a < 2; ++a)
      for (int32_t b = 0; b < 2; ++b) {
        const int32_t d[2] = {a, b};
        VerifyRound r;
        r.k = 2;
        r.draft = d;
        r.target_logits = logits.data();
        r.draft_probs = q.data();
        r.vocab = 2;
        UniformExplorer::Law law;
        UniformExplorer::add_law([&](const std::function<double()>& u) { return verifier.verify(m, r, u); },
                                 double(q[size_t(a)]) * double(q[size_t(b)]), &law);
        for (const auto& [o, pr] : law) mean += o.first * pr;
      }
    EXPECT_NEAR(mean, want, kLawTol) << spec_method_name(m);
  }
}

}  // namespace
}  // namespace ds::test
