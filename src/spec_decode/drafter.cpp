#include "spec_decode/drafter.h"

#include <algorithm>

#include "core/error.h"
#include "spec_decode/draft_pick.h"

namespace ds {

Drafter::Drafter(std::unique_ptr<Model> draft, DraftSample sample, int k)
    : model_(std::move(draft)), sample_(sample), k_(k), vocab_(model_->config().vocab_size), sampler_(vocab_) {}

void Drafter::allocate(const RuntimeLimits& target) {
  RuntimeLimits l = target;
  l.max_logit_rows = target.max_seqs;  // one row per sequence per draft forward
  // Forward 1 feeds what the target feeds, but a sequence one behind after a full accept feeds
  // two tokens where the target feeds one (a round cut to no draft tokens).
  l.max_batch_tokens = target.max_batch_tokens + target.max_seqs;
  l.spec_positions = k_;               // k - 1 proposals fed, + the last with feed_last
  l.rollback = StateRollback::Lanes;   // one token per forward: lanes need no working state
  model_->allocate(l);
  logits_.resize(size_t(target.max_seqs) * size_t(vocab_));
  tokens_.reserve(size_t(l.max_batch_tokens));
  chunks_.reserve(size_t(target.max_seqs));
  owner_.reserve(size_t(target.max_seqs));
}

bool Drafter::keeps_probs(const SamplingFilter& f) const {
  return sample_ == DraftSample::Probabilistic && !f.picks_argmax();
}

void Drafter::pick(DraftJob& job, int i, const float* logits) {
  const bool keep = keeps_probs(job.filter);
  job.tokens[i] = pick_draft_token(sampler_, logits, vocab_, keep, job.coupled, job.filter, job.uniform,
                                   keep && !job.coupled ? job.q + size_t(i) * size_t(vocab_) : nullptr);
}

void Drafter::run(std::vector<int32_t>& tokens, std::vector<SeqChunk>& chunks) {
  ForwardBatch b{std::span<const int32_t>(tokens), std::span<const SeqChunk>(chunks)};
  model_->forward(b, logits_.data());
}

void Drafter::propose(std::span<DraftJob> jobs) {
  if (jobs.empty()) return;
  // Forward 1: every job's committed tokens; logits where a proposal starts.
  tokens_.clear();
  chunks_.clear();
  owner_.clear();
  for (size_t j = 0; j < jobs.size(); ++j) {
    DraftJob& job = jobs[j];
    DS_CHECK(!job.feed.empty() && job.k >= 0 && job.k <= k_, "drafter: bad job");
    SeqChunk c;
    c.slot = job.slot;
    c.block_table = job.block_table;
    c.start_pos = job.start;
    c.num_tokens = int32_t(job.feed.size());
    c.token_offset = int32_t(tokens_.size());
    c.num_logits = job.k > 0 ? 1 : 0;
    tokens_.insert(tokens_.end(), job.feed.begin(), job.feed.end());
    chunks_.push_back(c);
    if (c.num_logits) owner_.push_back(int32_t(j));
  }
  run(tokens_, chunks_);
  for (size_t r = 0; r < owner_.size(); ++r) pick(jobs[size_t(owner_[r])], 0, logits_.data() + r * size_t(vocab_));

  // Forward i (i = 2..): d_{i-1} as a one-token speculative chunk at lane i-2.
  for (int i = 2;; ++i) {
    tokens_.clear();
    chunks_.clear();
    owner_.clear();
    for (size_t j = 0; j < jobs.size(); ++j) {
      DraftJob& job = jobs[j];
      const bool propose = job.k >= i;
      const bool last = job.feed_last && job.k == i - 1 && job.k > 0;
      if (!propose && !last) continue;
      SeqChunk c;
      c.slot = job.slot;
      c.block_table = job.block_table;
      c.start_pos = job.start + int32_t(job.feed.size()) + (i - 2);
      c.num_tokens = 1;
      c.token_offset = int32_t(tokens_.size());
      c.num_logits = propose ? 1 : 0;
      c.spec_lane = i - 2;
      tokens_.push_back(job.tokens[i - 2]);
      chunks_.push_back(c);
      if (propose) owner_.push_back(int32_t(j));
    }
    if (chunks_.empty()) break;
    run(tokens_, chunks_);
    for (size_t r = 0; r < owner_.size(); ++r) pick(jobs[size_t(owner_[r])], i - 1, logits_.data() + r * size_t(vocab_));
  }
}

}  // namespace ds
