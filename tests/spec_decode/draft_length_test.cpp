// --num-speculative-tokens auto's parts: the step-cost curve, per-position acceptance, and the
// choice of draft lengths, which must be the best of every assignment (exhaustive check), take
// nothing when verify rows are made expensive (the test hook) and something when they are cheap.
#include <gtest/gtest.h>

#include <functional>

#include "spec_decode/draft_length.h"

namespace ds {
namespace {

StepCostModel flat_then_linear() {
  // Bandwidth-bound to 8 rows, then 0.1 ms per row.
  StepCostModel m;
  m.calibrate({{1, 1e-3}, {8, 1.05e-3}, {16, 1.85e-3}, {64, 6.65e-3}});
  return m;
}

TEST(StepCostModel, InterpolatesExtrapolatesAndFollowsObservations) {
  StepCostModel m = flat_then_linear();
  EXPECT_NEAR(m.cost(1), 1e-3, 1e-12);
  EXPECT_NEAR(m.cost(12), 1.45e-3, 1e-9);
  EXPECT_NEAR(m.cost(128), 6.65e-3 + 64 * 0.1e-3, 1e-9);
  // Steps of 16 rows that also attend `work` thousand tokens of context cost 0.2 ms more per
  // thousand, plus 0.1 ms the calibration never saw: the online fit recovers both.
  for (int i = 0; i < 300; ++i) {
    const double work = double(i % 7) * 3.0;
    m.observe(16, work, 1.85e-3 + 0.1e-3 + 0.2e-3 * work);
  }
  EXPECT_NEAR(m.slope(), 0.2e-3, 1e-9);
  EXPECT_NEAR(m.offset(), 0.1e-3, 1e-9);
  EXPECT_NEAR(m.cost(16, 10.0, 0, 0), 1.85e-3 + 0.1e-3 + 2e-3, 1e-9);
  // A draft row pays the row curve and its own context, not the base's.
  EXPECT_NEAR(m.cost(16, 10.0, 8, 4.0) - m.cost(16, 10.0, 0, 0), (2.65e-3 - 1.85e-3) + 0.8e-3, 1e-9);
  m.set_row_cost_scale(0);
  EXPECT_NEAR(m.cost(1, 0, 63, 5.0), m.cost(1), 1e-12) << "scale 0: draft rows are free";
  m.set_row_cost_scale(10);
  EXPECT_NEAR(m.cost(16, 0, 8, 0) - m.cost(16), 10 * (2.65e-3 - 1.85e-3), 1e-9) << "only the draft rows are scaled";
  StepCostModel noisy;
  noisy.calibrate({{4, 2e-3}, {1, 1e-3}, {8, 1.5e-3}});  // out of order, and a slow outlier at 4
  EXPECT_GT(noisy.cost(8), noisy.cost(4));
  EXPECT_LE(noisy.cost(4), 1.5e-3) << "the outlier is lowered to the bigger step's time";
  EXPECT_GT(noisy.cost(2), noisy.cost(1)) << "a row is never free";
}

TEST(AcceptanceModel, LearnsPerPositionRatesTowardsThePrior) {
  AcceptanceModel a(4);
  AcceptanceModel::Counts good = a.fresh(), bad = a.fresh();
  std::vector<double> alpha;
  a.estimate(good, &alpha);
  for (double x : alpha) EXPECT_NEAR(x, 0.5, 1e-9) << "no rounds yet: the Beta(1, 1) prior";
  for (int r = 0; r < 50; ++r) a.observe(good, 4, 4);
  a.estimate(good, &alpha);
  for (double x : alpha) EXPECT_GT(x, 0.9);
  for (int r = 0; r < 50; ++r) a.observe(bad, 4, 0);
  a.estimate(bad, &alpha);
  EXPECT_LT(alpha[0], 0.2) << "the first position is always rejected";
  // Positions after a rejection were never tested: between the sequence's own first position
  // and the server-wide estimate there (high, from the good sequence).
  EXPECT_GT(alpha[1], alpha[0]);
  EXPECT_LT(alpha[1], 0.9);
  // A server that has only ever drafted one position prices the next like it, not at 1/2.
  AcceptanceModel one(4);
  AcceptanceModel::Counts s = one.fresh();
  for (int r = 0; r < 100; ++r) one.observe(s, 1, 1);
  AcceptanceModel::Counts fresh = one.fresh();
  one.estimate(fresh, &alpha);
  EXPECT_GT(alpha[0], 0.9);
  EXPECT_GT(alpha[1], 0.9) << "position 2 was never drafted: its prior is position 1's rate";
}

double rate(const std::vector<DraftCandidate>& seqs, const std::vector<int>& k, int base, const StepCostModel& m) {
  double tokens = 0;
  int extra = 0, max_k = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    double cum = 1;
    tokens += 1;
    for (int j = 0; j < k[i]; ++j) tokens += (cum *= seqs[i].alpha[size_t(j)]);
    extra += k[i];
    max_k = std::max(max_k, k[i]);
  }
  return tokens / (m.cost(base, 0, extra, 0) + m.draft_cost() * max_k);
}

TEST(DraftLength, ChoiceIsTheBestAssignment) {
  const StepCostModel m = flat_then_linear();
  std::vector<DraftCandidate> seqs = {{4, {0.9, 0.8, 0.6, 0.3}}, {3, {0.5, 0.5, 0.5}}, {4, {0.95, 0.95, 0.9, 0.9}}};
  for (int base : {3, 20}) {
    const DraftChoice c = choose_draft_lengths(seqs, base, 0, m);
    double best = 0;
    std::vector<int> k(seqs.size());
    std::function<void(size_t)> all = [&](size_t i) {
      if (i == seqs.size()) {
        best = std::max(best, rate(seqs, k, base, m));
        return;
      }
      for (k[i] = 0; k[i] <= seqs[i].max_k; ++k[i]) all(i + 1);
    };
    all(0);
    EXPECT_NEAR(rate(seqs, c.k, base, m), best, best * 1e-9) << "base rows " << base;
    EXPECT_NEAR(c.expected_tokens / c.seconds, best, best * 1e-9);
  }
}

TEST(DraftLength, ExpensiveRowsTakeNothingCheapRowsTakeAll) {
  StepCostModel m = flat_then_linear();
  std::vector<DraftCandidate> seqs(8, DraftCandidate{6, {0.7, 0.7, 0.7, 0.7, 0.7, 0.7}});
  m.set_row_cost_scale(1000);
  for (int k : choose_draft_lengths(seqs, 8, 0, m).k) EXPECT_EQ(k, 0);
  m.set_row_cost_scale(0);
  for (int k : choose_draft_lengths(seqs, 8, 0, m).k) EXPECT_EQ(k, 6);
  // As measured: one sequence in a bandwidth-bound step drafts; in a step of 64 busy rows
  // (16 tokens for 6.65 ms) a row costs 0.1 ms, more than a 0.2 chance of a token is worth.
  m.set_row_cost_scale(1);
  EXPECT_GT(choose_draft_lengths({seqs[0]}, 1, 0, m).k[0], 0);
  std::vector<DraftCandidate> weak(16, DraftCandidate{6, {0.2, 0.2, 0.2, 0.2, 0.2, 0.2}});
  for (int k : choose_draft_lengths(weak, 64, 0, m).k) EXPECT_EQ(k, 0);
  // A draft model's forwards cost per position: expensive ones shorten the rounds.
  StepCostModel d = flat_then_linear();
  const int free_k = choose_draft_lengths({seqs[0]}, 1, 0, d).k[0];
  d.set_draft_cost(2e-3);
  EXPECT_LT(choose_draft_lengths({seqs[0]}, 1, 0, d).k[0], free_k);
}

}  // namespace
}  // namespace ds
