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

// Seconds of one step. Two parts:
//   rows     measured at start-up over verify-shaped steps at short contexts (the matmuls, the
//            LM head, the per-token recurrence and the fork-joins: what a row costs anywhere),
//            interpolated between the sizes timed;
//   context  what start-up could not see: each row's attention over its context, and the
//            step's work outside the forward (accepting, streaming, waking HTTP threads);
//            fitted online as offset + slope x work by least squares with forgetting over the
//            residuals of steps of decode and verify rows (the engine leaves steps with a
//            prefill out: chunked prefill attention costs far less per position than a
//            row's), where work is the sum over rows of the context a row attends (in
//            thousands of tokens).
// A draft row then costs its share of the row curve plus the slope times its own context; a
// long prefill beside it makes the step dearer (its rows) without making the draft row dearer,
// which a single scale factor on the whole curve would get wrong.
class StepCostModel {
 public:
  // (rows, seconds) ascending in rows, at least one point.
  void calibrate(std::vector<std::pair<int, double>> points);
  void observe(int rows, double work, double seconds);
  double cost(int rows) const { return cost(rows, 0, 0, 0); }
  // A step of base_rows (attending base_work) plus extra_rows draft tokens (attending extra_work).
  double cost(int base_rows, double base_work, int extra_rows, double extra_work) const;
  // The draft model's seconds per draft position (its forwards per round are positions + 1).
  void set_draft_cost(double s) { draft_cost_ = s; }
  void observe_draft(int positions, double seconds);
  double draft_cost() const { return draft_cost_; }
  // Test hook: draft rows cost `scale` times what was measured.
  void set_row_cost_scale(double scale) { scale_ = scale; }
  const std::vector<std::pair<int, double>>& points() const { return points_; }
  double offset() const { return offset_; }
  double slope() const { return slope_; }

  static constexpr double kForget = 0.98;  // per observed step: about the last 50 count

 private:
  double measured(int rows) const;
  std::vector<std::pair<int, double>> points_;
  // Running sums of the residual fit (weights decay by kForget per observation).
  double n_ = 0, sw_ = 0, sr_ = 0, sww_ = 0, swr_ = 0;
  double offset_ = 0, slope_ = 0;
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
  double context = 0;          // thousands of tokens a draft row of this sequence attends
};

struct DraftChoice {
  std::vector<int> k;          // per candidate
  double expected_tokens = 0;  // committed tokens the choice expects (the decode rows included)
  double expected_accepted = 0;
  double seconds = 0;          // the modelled step time
};

// base_rows / base_work: the step without speculation (one row per decoding sequence, prefill
// tokens; the context they attend, in thousands of tokens).
DraftChoice choose_draft_lengths(const std::vector<DraftCandidate>& seqs, int base_rows, double base_work,
                                 const StepCostModel& cost);

}  // namespace ds
