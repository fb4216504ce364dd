#include "spec_decode/draft_length.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ds {

void StepCostModel::calibrate(std::vector<std::pair<int, double>> points) {
  DS_CHECK(!points.empty(), "step cost model: no calibration points");
  std::sort(points.begin(), points.end());
  // A bigger step never costs less. Timer noise only adds (a preempted thread, a slow wake-up),
  // so where a smaller step timed slower it is lowered to the bigger one's time; then every row
  // costs at least a thousandth of a one-row step (the LM head and the sampler see every row).
  for (size_t i = points.size() - 1; i-- > 0;) points[i].second = std::min(points[i].second, points[i + 1].second);
  for (size_t i = 1; i < points.size(); ++i)
    points[i].second = std::max(points[i].second, points[i - 1].second + 1e-3 * points[0].second *
                                                                              double(points[i].first - points[i - 1].first));
  points_ = std::move(points);
  n_ = sw_ = sr_ = sww_ = swr_ = offset_ = slope_ = 0;
}

double StepCostModel::measured(int rows) const {
  if (points_.empty()) return 0;
  if (rows <= points_.front().first) return points_.front().second * double(rows) / double(points_.front().first);
  for (size_t i = 1; i < points_.size(); ++i) {
    if (rows <= points_[i].first) {
      const auto [r0, c0] = points_[i - 1];
      const auto [r1, c1] = points_[i];
      return c0 + (c1 - c0) * double(rows - r0) / double(r1 - r0);
    }
  }
  // Past the last point: the last segment's slope (compute-bound steps grow linearly).
  const auto [r1, c1] = points_.back();
  double slope = c1 / double(r1);
  if (points_.size() >= 2) {
    const auto [r0, c0] = points_[points_.size() - 2];
    slope = (c1 - c0) / double(r1 - r0);
  }
  return c1 + slope * double(rows - r1);
}

double StepCostModel::cost(int base_rows, double base_work, int extra_rows, double extra_work) const {
  const int base = std::max(base_rows, 1);
  const double b = measured(base);
  const double extra = measured(base + std::max(extra_rows, 0)) - b + slope_ * std::max(extra_work, 0.0);
  return std::max(b + offset_ + slope_ * std::max(base_work, 0.0), 0.1 * b) + scale_ * extra;
}

void StepCostModel::observe(int rows, double work, double seconds) {
  if (points_.empty() || rows < 1 || !(seconds > 0) || !(work >= 0)) return;
  // Least squares of the residual on work, with forgetting: the offset is the step's work
  // outside the forward (accepting, streaming, waking the HTTP threads), which a round that
  // commits several tokens pays once; the slope is what a row pays per thousand tokens it
  // attends.
  const double r = seconds - measured(rows);
  n_ = kForget * n_ + 1;
  sw_ = kForget * sw_ + work;
  sr_ = kForget * sr_ + r;
  sww_ = kForget * sww_ + work * work;
  swr_ = kForget * swr_ + work * r;
  const double mw = sw_ / n_, mr = sr_ / n_;
  const double var = sww_ / n_ - mw * mw;
  // Attention never makes a step cheaper: a negative slope (noise) is read as none.
  slope_ = var > 1e-12 ? std::max(0.0, (swr_ / n_ - mw * mr) / var) : 0.0;
  offset_ = mr - slope_ * mw;
}

void StepCostModel::observe_draft(int positions, double seconds) {
  if (positions < 1 || !(seconds > 0)) return;
  const double per = seconds / double(positions + 1);
  draft_cost_ = draft_cost_ > 0 ? 0.9 * draft_cost_ + 0.1 * per : per;
}

AcceptanceModel::AcceptanceModel(int max_k) : max_k_(max_k), global_(fresh()) {}

void AcceptanceModel::observe(Counts& seq, int k, int accepted) {
  if (seq.reached.size() != size_t(max_k_)) seq = fresh();
  // Position j was tested when every earlier one stood (j <= accepted + 1).
  for (Counts* c : {&seq, &global_}) {
    const float decay = float(c == &seq ? kSeqDecay : kGlobalDecay);
    for (int j = 0; j < max_k_; ++j) {
      c->reached[size_t(j)] *= decay;
      c->accepted[size_t(j)] *= decay;
    }
    for (int j = 0; j < std::min(k, max_k_) && j <= accepted; ++j) {
      c->reached[size_t(j)] += 1.f;
      if (j < accepted) c->accepted[size_t(j)] += 1.f;
    }
  }
}

void AcceptanceModel::estimate(const Counts& seq, std::vector<double>* alpha) const {
  // A position nobody has drafted yet takes its prior from the position before it: conditional
  // acceptance changes slowly along a round, and a flat 1/2 would price position j + 1 so low
  // that it is never drafted, so never learnt.
  alpha->resize(size_t(max_k_));
  const bool sized = seq.reached.size() == size_t(max_k_);  // a sequence never counted has none
  const Counts empty = sized ? Counts{} : fresh();
  const Counts& own = sized ? seq : empty;
  double g_prev = 0.5, a_prev = 0.5;
  for (int j = 0; j < max_k_; ++j) {
    const double g = (double(global_.accepted[size_t(j)]) + kPriorWeight * g_prev) /
                     (double(global_.reached[size_t(j)]) + kPriorWeight);
    // The sequence's own count, drawn towards the server's estimate at j and its own at j - 1.
    const double prior = j == 0 ? g : 0.5 * (g + a_prev);
    const double a = (double(own.accepted[size_t(j)]) + kPriorWeight * prior) / (double(own.reached[size_t(j)]) + kPriorWeight);
    (*alpha)[size_t(j)] = a;
    g_prev = g;
    a_prev = a;
  }
}

DraftChoice choose_draft_lengths(const std::vector<DraftCandidate>& seqs, int base_rows, double base_work,
                                 const StepCostModel& cost) {
  struct Gain {
    double g;
    int seq, pos;
  };
  std::vector<Gain> gains;
  for (size_t i = 0; i < seqs.size(); ++i) {
    double cum = 1.0;
    for (int j = 0; j < seqs[i].max_k && j < int(seqs[i].alpha.size()); ++j) {
      cum *= std::clamp(seqs[i].alpha[size_t(j)], 0.0, 1.0);
      gains.push_back({cum, int(i), j});
    }
  }
  // Falling gain; within a sequence gains never rise, and ties keep position order.
  std::stable_sort(gains.begin(), gains.end(), [](const Gain& a, const Gain& b) { return a.g > b.g; });
  DraftChoice c;
  c.k.assign(seqs.size(), 0);
  const double base_tokens = double(seqs.size());
  double tokens = base_tokens;
  std::vector<int> k(seqs.size(), 0);
  int max_k = 0;
  size_t best_n = 0;
  double best_seconds = cost.cost(base_rows, base_work, 0, 0);
  double extra_work = 0;
  double best_rate = tokens / best_seconds, best_tokens = tokens;
  for (size_t n = 1; n <= gains.size(); ++n) {
    const Gain& x = gains[n - 1];
    tokens += x.g;
    k[size_t(x.seq)] = x.pos + 1;
    max_k = std::max(max_k, x.pos + 1);
    extra_work += seqs[size_t(x.seq)].context;
    const double seconds = cost.cost(base_rows, base_work, int(n), extra_work) + cost.draft_cost() * double(max_k);
    const double rate = tokens / seconds;
    if (rate > best_rate * (1.0 + 1e-9)) {
      best_rate = rate;
      best_n = n;
      best_tokens = tokens;
      best_seconds = seconds;
    }
  }
  for (size_t n = 0; n < best_n; ++n) c.k[size_t(gains[n].seq)] = std::max(c.k[size_t(gains[n].seq)], gains[n].pos + 1);
  c.expected_tokens = best_tokens;
  c.expected_accepted = best_tokens - base_tokens;
  c.seconds = best_seconds;
  return c;
}

}  // namespace ds
