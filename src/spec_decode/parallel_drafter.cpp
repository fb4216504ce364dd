#include "spec_decode/parallel_drafter.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "spec_decode/draft_pick.h"
#include "model/model.h"

namespace ds {

ParallelDrafter::ParallelDrafter(const std::string& dir, const Model& target, DraftSample sample, int k,
                                 double confidence_threshold)
    : model_(dir, target, k), sample_(sample), k_(k), threshold_(confidence_threshold),
      vocab_(target.config().vocab_size), sampler_(vocab_) {
  DS_CHECK(threshold_ >= 0 && threshold_ < 1, "--draft-confidence-threshold " + std::to_string(threshold_) +
                                                  " is outside [0, 1) (0: off)");
}

void ParallelDrafter::allocate(int max_seqs, int max_rows) {
  const int W = model_.config().context_window;
  rings_.assign(size_t(max_seqs), Ring{});
  for (Ring& r : rings_) {
    r.pos.assign(size_t(W), 0);
    r.tok.assign(size_t(W), 0);
    r.entries.assign(size_t(W) * model_.context_floats(), 0.f);
  }
  const size_t taps = model_.config().target_layer_ids.size() * size_t(model_.config().hidden_size);
  obs_taps_.reserve(size_t(max_rows) * taps);
  obs_pos_.reserve(size_t(max_rows));
  obs_dst_.reserve(size_t(max_rows));
}

bool ParallelDrafter::keeps_probs(const SamplingFilter& f) const {
  return sample_ == DraftSample::Probabilistic && !f.picks_argmax();
}

float* ParallelDrafter::claim(Ring& r, uint64_t owner, int32_t pos, int32_t token) {
  const int W = int(r.pos.size());
  if (r.owner != owner) {
    r.owner = owner;
    r.count = 0;
  }
  // A recomputed position (after preemption) replaces what followed it.
  while (r.count > 0 && r.pos[size_t((r.start + r.count - 1) % W)] >= pos) --r.count;
  if (r.count == W) {
    r.start = (r.start + 1) % W;
    --r.count;
  }
  const int at = (r.start + r.count) % W;
  ++r.count;
  r.pos[size_t(at)] = pos;
  r.tok[size_t(at)] = token;
  return r.entries.data() + size_t(at) * model_.context_floats();
}

void ParallelDrafter::begin_observe() {
  obs_taps_.clear();
  obs_pos_.clear();
  obs_dst_.clear();
}

void ParallelDrafter::add_observed(int slot, uint64_t owner, int32_t first_pos, const float* taps, const int32_t* tokens,
                                   int rows) {
  DS_CHECK(slot >= 0 && size_t(slot) < rings_.size(), "drafter: bad slot " + std::to_string(slot));
  const int W = model_.config().context_window;
  const size_t width = model_.config().target_layer_ids.size() * size_t(model_.config().hidden_size);
  const int skip = std::max(0, rows - W);  // only the last W can ever be attended
  Ring& r = rings_[size_t(slot)];
  for (int i = skip; i < rows; ++i) {
    obs_dst_.push_back(claim(r, owner, first_pos + i, tokens[i]));
    obs_pos_.push_back(first_pos + i);
    obs_taps_.insert(obs_taps_.end(), taps + size_t(i) * width, taps + size_t(i + 1) * width);
  }
}

void ParallelDrafter::end_observe() {
  const int n = int(obs_pos_.size());
  if (n == 0) return;
  const size_t cf = model_.context_floats();
  obs_out_.resize(size_t(n) * cf);
  model_.context(obs_taps_.data(), obs_pos_.data(), n, obs_out_.data());
  for (int i = 0; i < n; ++i) std::memcpy(obs_dst_[size_t(i)], obs_out_.data() + size_t(i) * cf, cf * sizeof(float));
}

void ParallelDrafter::pick(ProposeJob& job, int i, const float* logits) {
  const bool keep = keeps_probs(job.filter);
  job.tokens[i] = pick_draft_token(sampler_, logits, vocab_, keep, job.coupled, job.filter, job.uniform,
                                   keep && !job.coupled ? job.q + size_t(i) * size_t(vocab_) : nullptr);
}

void ParallelDrafter::propose(std::span<ProposeJob> jobs) {
  const DSparkConfig& c = model_.config();
  const int B = int(jobs.size()), Kb = c.block_size, H = c.hidden_size, r = c.markov_rank, W = c.context_window;
  if (B == 0) return;
  // Each round's context: its ring's entries within the window before its position.
  ctx_ptrs_.clear();
  rounds_.assign(size_t(B), DSparkModel::Round{});
  copy_.resize(size_t(B) * size_t(W));
  copy_n_.assign(size_t(B), 0);
  first_.assign(size_t(B), 0);
  for (int b = 0; b < B; ++b) {
    const ProposeJob& j = jobs[size_t(b)];
    DS_CHECK(j.k >= 1 && j.k <= k_ && j.slot >= 0 && size_t(j.slot) < rings_.size(), "drafter: bad job");
    first_[size_t(b)] = ctx_ptrs_.size();
    const Ring& ring = rings_[size_t(j.slot)];
    DSparkModel::CopyEntry* win = copy_.data() + size_t(b) * size_t(W);
    int& wn = copy_n_[size_t(b)];
    wn = 0;
    if (ring.owner == j.owner)
      for (int e = 0; e < ring.count; ++e) {
        const int at = (ring.start + e) % W;
        const int32_t p = ring.pos[size_t(at)];
        if (p < j.pos && p >= j.pos - W) {
          ctx_ptrs_.push_back(ring.entries.data() + size_t(at) * model_.context_floats());
          // The token after p: the next entry's when it holds p + 1, the pending token for
          // n - 1, unknown across a gap (positions the prefix cache supplied).
          int32_t next = -1;
          if (p == j.pos - 1) next = j.token;
          else if (e + 1 < ring.count && ring.pos[size_t((at + 1) % W)] == p + 1) next = ring.tok[size_t((at + 1) % W)];
          win[wn++] = {ring.tok[size_t(at)], next};
        }
      }
    rounds_[size_t(b)].token = j.token;
    rounds_[size_t(b)].pos = j.pos;
  }
  for (int b = 0; b < B; ++b) {
    const size_t end = b + 1 < B ? first_[size_t(b + 1)] : ctx_ptrs_.size();
    rounds_[size_t(b)].context = std::span<const float* const>(ctx_ptrs_.data() + first_[size_t(b)], end - first_[size_t(b)]);
  }
  z_.resize(size_t(B) * size_t(Kb) * size_t(H));
  model_.block(rounds_, z_.data());

  int kmax = 0;
  for (const ProposeJob& j : jobs) kmax = std::max(kmax, j.k);
  survive_.assign(size_t(B), 1.0);
  open_.assign(size_t(B), 1);
  for (ProposeJob& j : jobs) j.proposed = 0;
  m_.resize(size_t(B) * size_t(r));
  zs_.resize(size_t(B) * size_t(kmax) * size_t(H));
  row_of_.assign(size_t(B) * size_t(kmax), -1);
  // Base logits go through the target's LM head slot-major, so that each Markov step below is
  // one matmul over the rounds still drafting. Without a confidence cut every usable slot goes
  // in one matmul; with one, slot by slot for the rounds still open, so a cut round's later
  // slots never reach the LM head (most of a round's cost at K 7 when the cut comes early).
  // A row's logits are the same either way (the matmul's rows are independent).
  const bool slot_by_slot = threshold_ > 0;
  auto window = [&](int b) {
    return std::span<const DSparkModel::CopyEntry>(copy_.data() + size_t(b) * size_t(W), size_t(copy_n_[size_t(b)]));
  };
  int ready = 0;  // slots [0, ready) have their rows in logits_
  for (int i = 0; i < kmax; ++i) {
    // The cut first: slot i's survival needs only its hidden and the token drafted at i - 1.
    for (int b = 0; b < B; ++b) {
      const ProposeJob& j = jobs[size_t(b)];
      if (j.k <= i || !open_[size_t(b)]) continue;
      float* m = m_.data() + size_t(b) * size_t(r);
      const int32_t prev = i == 0 ? j.token : j.tokens[i - 1];
      model_.markov_embed(prev, m);
      if (threshold_ > 0) {
        const bool in_window = DSparkModel::copy_matches(window(b), prev) > 0;
        survive_[size_t(b)] *= double(model_.confidence(z_.data() + (size_t(b) * size_t(Kb) + size_t(i)) * size_t(H), m, i, in_window));
        if (i > 0 && survive_[size_t(b)] < threshold_) open_[size_t(b)] = 0;
      }
    }
    if (i >= ready) {
      const int last = slot_by_slot ? i + 1 : kmax;
      int rows = 0;
      for (int s = i; s < last; ++s)
        for (int b = 0; b < B; ++b)
          if (jobs[size_t(b)].k > s && open_[size_t(b)]) {
            std::memcpy(zs_.data() + size_t(rows) * size_t(H), z_.data() + (size_t(b) * size_t(Kb) + size_t(s)) * size_t(H),
                        size_t(H) * sizeof(float));
            row_of_[size_t(s) * size_t(B) + size_t(b)] = rows++;
          }
      if (rows == 0) break;
      logits_.resize(size_t(rows) * size_t(vocab_));
      model_.base_logits(zs_.data(), rows, logits_.data());
      ready = last;
    }
    // Sequential Markov steps: slot i's bias comes from the token drafted at slot i - 1. The
    // rows of slot i are contiguous, in round order; their Markov embeddings are gathered to
    // match.
    int lo = -1, n = 0;
    for (int b = 0; b < B; ++b) {
      const int row = row_of_[size_t(i) * size_t(B) + size_t(b)];
      if (row < 0 || !open_[size_t(b)]) continue;
      if (lo < 0) lo = row;
      if (n != b) std::memcpy(m_.data() + size_t(n) * size_t(r), m_.data() + size_t(b) * size_t(r), size_t(r) * sizeof(float));
      ++n;
    }
    if (n == 0) break;
    model_.add_markov(m_.data(), n, logits_.data() + size_t(lo) * size_t(vocab_));
    for (int b = 0; b < B; ++b) {
      const int row = row_of_[size_t(i) * size_t(B) + size_t(b)];
      if (row < 0 || !open_[size_t(b)]) continue;
      ProposeJob& j = jobs[size_t(b)];
      float* lg = logits_.data() + size_t(row) * size_t(vocab_);
      model_.add_copy(window(b), i == 0 ? j.token : j.tokens[i - 1], i, lg);
      pick(j, i, lg);
      j.proposed = i + 1;
    }
  }
}

}  // namespace ds
