// --num-speculative-tokens auto: the draft length of every decoding sequence, chosen each step
// to maximise expected committed tokens per second of step time (docs/speculative-decoding.md).
//   tokens(k)   sum over sequences of 1 + a_1 + a_1 a_2 + ... + a_1...a_k, where a_j is the
//               chance that draft position j is accepted once j - 1 were (AcceptanceModel);
//   seconds(k)  the step-cost model at the step's rows (decode rows + prefill tokens + draft
//               tokens), plus the draft model's cost per draft position (its forwards run once
//               per position for the whole batch; zero for suffix drafting).
// Each extra draft token adds its cumulative acceptance to the numerator, and gains only fall
// along a sequence, so taking tokens in order of falling gain and keeping the best prefix of
// that order maximises the rate. With a flat cost (a bandwidth-bound step) every plausible
// token is taken; once rows cost as much as they bring, none is: the band boundary of serving
// plans falls out of the measured costs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ds {

// Seconds of one step as a function of its rows: measured at start-up over verify-shaped steps,
// interpolated, and scaled online by the running ratio of observed to predicted step times.
class StepCostModel {
 public:
  // (rows, seconds) ascending in rows, at least one point.
  void calibrate(std::vector<std::pair<int, double>> points);
  void observe(int rows, double seconds);
  double cost(int rows) const { return cost(rows, 0); }
  // A step of base_rows plus extra_rows draft tokens to verify.
  double cost(int base_rows, int extra_rows) const;
  // The draft model's seconds per draft position (its forwards per round are positions + 1).
  void set_draft_cost(double s) { draft_cost_ = s; }
  void observe_draft(int positions, double seconds);
  double draft_cost() const { return draft_cost_; }
  // Test hook: draft rows (the extra rows of cost(base, extra)) cost `scale` times what was measured.
  void set_row_cost_scale(double scale) { scale_ = scale; }
  const std::vector<std::pair<int, double>>& points() const { return points_; }
  double ratio() const { return ratio_; }

 private:
  double measured(int rows) const;
  std::vector<std::pair<int, double>> points_;
  double ratio_ = 1.0;
  double draft_cost_ = 0;
  double scale_ = 1.0;
};

// Per-position acceptance: a_j = P(position j accepted | positions before it were), counted with
// exponential decay per sequence (recent rounds matter most). While counts are few, a position is
// drawn towards the one before it (the server-wide count at j towards the server's a_{j-1}, a
// Beta(1, 1) prior at the first; a sequence's towards the server's a_j and its own a_{j-1}), so a
// position never drafted is priced like its neighbour and gets tried.
class AcceptanceModel {
 public:
  explicit AcceptanceModel(int max_k);
  struct Counts {
    std::vector<float> reached, accepted;
  };
  Counts fresh() const { return {std::vector<float>(size_t(max_k_), 0.f), std::vector<float>(size_t(max_k_), 0.f)}; }
  // A round of k draft tokens of which `accepted` stood.
  void observe(Counts& seq, int k, int accepted);
  // a_1..a_max_k for a sequence.
  void estimate(const Counts& seq, std::vector<double>* alpha) const;

  static constexpr double kSeqDecay = 0.9, kGlobalDecay = 0.99, kPriorWeight = 2.0;

 private:
  int max_k_;
  Counts global_;
};

struct DraftCandidate {
  int max_k = 0;               // the most this sequence may draft (its proposal, its budget)
  std::vector<double> alpha;   // a_1..a_max_k
};

struct DraftChoice {
  std::vector<int> k;          // per candidate
  double expected_tokens = 0;  // committed tokens the choice expects (the decode rows included)
  double expected_accepted = 0;
  double seconds = 0;          // the modelled step time
};

// base_rows: the step's rows without speculation (one per decoding sequence, prefill tokens).
DraftChoice choose_draft_lengths(const std::vector<DraftCandidate>& seqs, int base_rows, const StepCostModel& cost);

}  // namespace ds
