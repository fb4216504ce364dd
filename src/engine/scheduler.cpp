#include "engine/scheduler.h"

#include <algorithm>
#include <cassert>

namespace ds {

Scheduler::Scheduler(const SchedulerLimits& limits, PrefixCache& cache)
    : limits_(limits), cache_(cache), pool_(cache.pool()) {
  running_.reserve(size_t(limits.max_num_seqs));
  // Highest slot first on the stack so slot 0 is used first.
  for (int i = limits.max_num_seqs - 1; i >= 0; --i) free_slots_.push_back(i);
  plan_.tokens.reserve(size_t(limits.max_num_batched_tokens));
  plan_.chunks.reserve(size_t(limits.max_num_seqs));
  plan_.seqs.reserve(size_t(limits.max_num_seqs));
  plan_.spec.reserve(size_t(limits.max_num_seqs));
  plan_.restores.reserve(size_t(limits.max_num_seqs));
  plan_.saves.reserve(size_t(limits.max_num_seqs) * 2);
  plan_.commit_saves.reserve(size_t(limits.max_num_seqs));
  plan_.first_admitted.reserve(size_t(limits.max_num_seqs));
}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  // Reserved once so block_table pointers handed to the model stay valid for a whole step and
  // decode never reallocates. +1: the position after a full max_model_len is never fed, but a
  // preempted-then-resumed sequence may briefly own one block past a boundary.
  seq->blocks.reserve(size_t(pool_.blocks_for(limits_.max_model_len) + 1));
  waiting_.push_back(std::move(seq));
}

void Scheduler::release(Sequence& s) {
  pool_.release_all(&s.blocks);
  if (s.slot >= 0) free_slots_.push_back(s.slot);
  s.slot = -1;
  s.num_computed = 0;
}

void Scheduler::take_cancelled(std::vector<std::unique_ptr<Sequence>>* out) {
  for (size_t i = 0; i < running_.size();) {
    if (running_[i]->stream->cancelled()) {
      release(*running_[i]);
      out->push_back(std::move(running_[i]));
      running_.erase(running_.begin() + long(i));
    } else {
      ++i;
    }
  }
  for (size_t i = 0; i < waiting_.size();) {
    if (waiting_[i]->stream->cancelled()) {
      out->push_back(std::move(waiting_[i]));
      waiting_.erase(waiting_.begin() + long(i));
    } else {
      ++i;
    }
  }
}

void Scheduler::take_all(std::vector<std::unique_ptr<Sequence>>* out) {
  for (auto& s : running_) {
    release(*s);
    out->push_back(std::move(s));
  }
  running_.clear();
  for (auto& s : waiting_) out->push_back(std::move(s));
  waiting_.clear();
}

void Scheduler::preempt_newest() {
  std::unique_ptr<Sequence> victim = std::move(running_.back());
  running_.pop_back();
  release(*victim);
  ++victim->num_preemptions;
  ++preemptions_;
  ++plan_.num_preempted;
  // Head of the queue: it was admitted before everything still waiting, so FCFS order holds.
  waiting_.push_front(std::move(victim));
}

SeqChunk Scheduler::chunk_of(const Sequence* s, int n) const {
  SeqChunk c;
  c.slot = s->slot;
  c.block_table = s->blocks.data();
  c.start_pos = s->num_computed;
  c.num_tokens = n;
  c.token_offset = int32_t(plan_.tokens.size());
  return c;
}

void Scheduler::push_chunk(Sequence* s, const SeqChunk& c, int k, bool feed_last) {
  plan_.chunks.push_back(c);
  plan_.seqs.push_back(s);
  plan_.spec.push_back({k, feed_last});
  plan_.num_logits += c.num_logits;
}

void Scheduler::plan_chunk(Sequence* s, int n) {
  SeqChunk c = chunk_of(s, n);
  // Logits only where a token will be sampled: the chunk that feeds the last pending token.
  c.num_logits = (n == s->pending()) ? 1 : 0;
  plan_.tokens.insert(plan_.tokens.end(), s->tokens.begin() + s->num_computed,
                      s->tokens.begin() + s->num_computed + n);
  push_chunk(s, c, 0, false);
  const int end = s->num_computed + n;
  // What this prompt adds to the prefix cache (Anthropic's cache_creation_input_tokens): up to
  // the state snapshot it saves, or for a model without recurrent state, the whole blocks.
  const int prompt_end = std::min(end, s->num_prompt);
  if (auto h = cache_.chunk_snapshot(&s->prefix, end)) {
    plan_.saves.push_back({s->slot, *h});
    if (s->stream) s->stream->note_cache_written(prompt_end);
  } else if (cache_.enabled() && cache_.stateless() && s->stream) {
    s->stream->note_cache_written(prompt_end / cache_.block_size() * cache_.block_size());
  }
}

void Scheduler::plan_verify(Sequence* s, int k, bool feed_last) {
  SeqChunk c = chunk_of(s, k + 1);
  c.num_logits = k + 1;
  c.spec_lane = 0;
  plan_.tokens.push_back(s->tokens[size_t(s->num_computed)]);
  // A draft model fills the placeholders in its phase; an early method proposed them already.
  const size_t from = plan_.tokens.size();
  plan_.tokens.insert(plan_.tokens.end(), size_t(k), 0);
  const std::vector<int32_t>& proposal = s->spec.proposal;
  for (size_t j = 0; j < size_t(k) && j < proposal.size(); ++j) plan_.tokens[from + j] = proposal[j];
  push_chunk(s, c, k, feed_last);
}

bool Scheduler::rounds_end_on_boundaries() const { return cache_.enabled() && cache_.decode_snapshots(); }

int Scheduler::spec_length(const Sequence& s, int spare) const {
  if (limits_.spec_tokens == 0 || s.req.processes_logits()) return 0;
  // Tokens the sequence may still emit; a round emits up to k + 1.
  const int left = std::min(s.req.max_tokens - s.num_generated(), limits_.max_model_len - int(s.tokens.size()));
  int k = std::min({limits_.spec_tokens, left - 1, spare});
  if (s.spec.budget >= 0) k = std::min(k, s.spec.budget);
  if (rounds_end_on_boundaries()) {
    const int bs = cache_.block_size();
    const int boundary = (s.num_computed / bs + 1) * bs;
    k = std::min(k, boundary - s.num_computed - 1);
  }
  return std::max(k, 0);
}

int Scheduler::prefill_length(const Sequence& s, int budget) const {
  const int from = s.num_computed;
  return cache_.chunk_end(s.prefix, from, from + std::min(s.pending(), budget), int(s.tokens.size())) - from;
}

bool Scheduler::admit_head(int budget) {
  Sequence* s = waiting_.front().get();
  const int resume = cache_.resume(s->tokens, &s->prefix, &s->blocks, int(plan_.restores.size()));
  if (resume < 0) return false;  // no room for the cached prefix's blocks; retried next step
  const int need = pool_.blocks_for(int64_t(s->tokens.size())) - int(s->blocks.size());
  if (!pool_.allocate(need, &s->blocks)) {
    pool_.release_all(&s->blocks);  // the cached prefix goes back; retried next step
    return false;
  }
  assert(!free_slots_.empty());
  s->slot = free_slots_.back();
  free_slots_.pop_back();
  s->num_computed = resume;  // a resumed state and block carry a mirroring draft's part too
  if (resume > 0) {
    if (const void* st = cache_.claim_state(s->prefix, resume)) plan_.restores.push_back({s->slot, st});
  }
  if (s->num_cached_tokens < 0) {
    s->num_cached_tokens = resume;
    plan_.first_admitted.push_back(s);
  }
  running_.push_back(std::move(waiting_.front()));
  waiting_.pop_front();
  plan_chunk(s, prefill_length(*s, budget));
  return true;
}

StepPlan& Scheduler::schedule() {
  plan_.tokens.clear();
  plan_.chunks.clear();
  plan_.seqs.clear();
  plan_.spec.clear();
  plan_.num_decode = 0;
  plan_.num_logits = 0;
  plan_.num_preempted = 0;
  plan_.restores.clear();
  plan_.saves.clear();
  plan_.commit_saves.clear();
  plan_.first_admitted.clear();
  int budget = limits_.max_num_batched_tokens;

  // 1. Decode rows, oldest first. Victims come from the back, so a victim is never a sequence
  //    already planned in this loop. With speculation a decode row becomes a verify chunk of
  //    k + 1 tokens; every later decode row keeps at least its one token of the budget.
  int decode_left = 0;
  int verifying = 0;  // sequences given a verify chunk so far, bounded by the spec window
  for (const auto& up : running_) decode_left += up->pending() == 1 ? 1 : 0;
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence* s = running_[i].get();
    if (s->pending() != 1) continue;
    --decode_left;
    int k = spec_length(*s, budget - 1 - decode_left);
    if (limits_.spec_window > 0 && verifying >= limits_.spec_window) k = 0;
    const int need = pool_.blocks_for(int64_t(s->num_computed) + 1);
    bool alive = true;
    while (int(s->blocks.size()) < need) {
      int32_t b = pool_.allocate();
      if (b >= 0) {
        s->blocks.push_back(b);
        continue;
      }
      const bool self = running_.back().get() == s;
      preempt_newest();
      if (self) {
        alive = false;
        break;
      }
    }
    if (!alive) break;  // s was the newest: nothing after it is left to plan
    if (k > 0) {
      // Speculation never preempts: the blocks its draft rows need come from what is free, and
      // the round shrinks to fit (what it takes goes back at commit when unused).
      const int want = pool_.blocks_for(int64_t(s->num_computed) + 1 + k);
      while (int(s->blocks.size()) < want) {
        const int32_t b = pool_.allocate();
        if (b < 0) break;
        s->blocks.push_back(b);
      }
      k = std::min(k, int(s->blocks.size()) * pool_.block_size() - s->num_computed - 1);
    }
    assert(budget >= 1 + k);  // validated: max_num_batched_tokens >= max_num_seqs
    if (k > 0) {
      // The round's decode snapshot, if it lands on one, is taken at commit (commit_step).
      const bool on_boundary = rounds_end_on_boundaries() && (s->num_computed + k + 1) % cache_.block_size() == 0;
      plan_verify(s, k, limits_.has_draft && on_boundary);
      ++verifying;
    } else {
      if (auto h = cache_.decode_snapshot(s->tokens, &s->prefix, s->num_computed + 1)) plan_.saves.push_back({s->slot, *h});
      plan_chunk(s, 1);
    }
    budget -= 1 + k;
    ++plan_.num_decode;
  }

  // 2. Prefills already under way, oldest first.
  for (auto& up : running_) {
    if (budget == 0) break;
    Sequence* s = up.get();
    if (s->pending() <= 1) continue;
    const int n = prefill_length(*s, budget);
    plan_chunk(s, n);
    budget -= n;
  }

  // 3. Admissions, FCFS. A sequence preempted in step 1 sits at the head and will not fit
  //    this step (its blocks just went to an older sequence), so admission stops there.
  while (budget > 0 && int(running_.size()) < limits_.max_num_seqs && !waiting_.empty()) {
    if (!admit_head(budget)) break;
    budget -= plan_.chunks.back().num_tokens;
  }
  return plan_;
}

void Scheduler::commit_step(std::span<const int32_t> kept) {
  for (size_t i = 0; i < plan_.chunks.size(); ++i) {
    Sequence* s = plan_.seqs[i];
    const SeqChunk& c = plan_.chunks[i];
    if (c.spec_lane < 0) {
      s->num_computed += c.num_tokens;
    } else {
      // A verify round: the speculator rolled the states back to the accepted tokens (and set
      // the draft's count). Rows past them are rewritten before they are read; blocks holding
      // only those go back to the pool.
      assert(i < kept.size());
      s->num_computed += kept[i];
      const size_t need = size_t(pool_.blocks_for(int64_t(s->num_computed) + 1));
      while (s->blocks.size() > need) {
        pool_.release(s->blocks.back());
        s->blocks.pop_back();
      }
      if (auto h = cache_.decode_snapshot(s->tokens, &s->prefix, s->num_computed)) {
        assert(!limits_.has_draft || s->spec.draft_computed == s->num_computed);
        plan_.commit_saves.push_back({s->slot, *h});
      }
    }
    // Blocks publish once the draft's rows in them are written too.
    const int both = limits_.has_draft ? std::min(s->num_computed, s->spec.draft_computed) : s->num_computed;
    cache_.publish(s->tokens, &s->prefix, s->blocks, both, int(i) < plan_.num_decode);
  }
}

std::unique_ptr<Sequence> Scheduler::finish(Sequence* seq) {
  auto it = std::find_if(running_.begin(), running_.end(),
                         [&](const std::unique_ptr<Sequence>& p) { return p.get() == seq; });
  assert(it != running_.end());
  std::unique_ptr<Sequence> out = std::move(*it);
  running_.erase(it);
  release(*out);
  return out;
}

}  // namespace ds
