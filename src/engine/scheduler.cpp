#include "engine/scheduler.h"

#include <algorithm>
#include <cassert>

#include "cache/block_hash.h"

namespace ds {

Scheduler::Scheduler(const SchedulerLimits& limits, BlockPool& pool, StateSnapshots* snapshots,
                     PrefixCacheSettings prefix, PrefixTierHooks tier)
    : limits_(limits), pool_(pool), snapshots_(snapshots), prefix_(prefix), tier_(std::move(tier)) {
  if (snapshots_ == nullptr) prefix_.enabled = false;
  running_.reserve(size_t(limits.max_num_seqs));
  // Highest slot first on the stack so slot 0 is used first.
  for (int i = limits.max_num_seqs - 1; i >= 0; --i) free_slots_.push_back(i);
  plan_.tokens.reserve(size_t(limits.max_num_batched_tokens));
  plan_.chunks.reserve(size_t(limits.max_num_seqs));
  plan_.seqs.reserve(size_t(limits.max_num_seqs));
  plan_.restores.reserve(size_t(limits.max_num_seqs));
  plan_.saves.reserve(size_t(limits.max_num_seqs) * 2);
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

void Scheduler::plan_chunk(Sequence* s, int n) {
  SeqChunk c;
  c.slot = s->slot;
  c.block_table = s->blocks.data();
  c.start_pos = s->num_computed;
  c.num_tokens = n;
  c.token_offset = int32_t(plan_.tokens.size());
  // Logits only where a token will be sampled: the chunk that feeds the last pending token.
  c.num_logits = (n == s->pending()) ? 1 : 0;
  plan_.tokens.insert(plan_.tokens.end(), s->tokens.begin() + s->num_computed,
                      s->tokens.begin() + s->num_computed + n);
  plan_.chunks.push_back(c);
  plan_.seqs.push_back(s);
  plan_.num_logits += c.num_logits;
  // prefill_length() stops every chunk at the next snapshot point, so a point is either the
  // chunk's end or still ahead.
  const int end = s->num_computed + n;
  auto& pts = s->snapshot_points;
  if (s->next_snapshot < pts.size() && pts[s->next_snapshot] == end) {
    ++s->next_snapshot;
    const uint64_t h = s->block_hashes[size_t(end / pool_.block_size() - 1)];
    if (!snapshots_->contains(h)) plan_.saves.push_back({s->slot, h});
  }
  assert(s->next_snapshot >= pts.size() || pts[s->next_snapshot] > end);
}

int Scheduler::prefill_length(const Sequence& s, int budget) const {
  const int bs = pool_.block_size();
  const int from = s.num_computed;
  int end = from + std::min(s.pending(), budget);
  if (s.next_snapshot < s.snapshot_points.size() && s.snapshot_points[s.next_snapshot] < end) {
    end = s.snapshot_points[s.next_snapshot];
  } else if (end < int(s.tokens.size())) {
    const int aligned = end / bs * bs;
    if (aligned > from) end = aligned;  // a budget under one block still makes progress
  }
  return end - from;
}

void Scheduler::plan_snapshot_points(Sequence* s, int resume_blocks, int kv_blocks) {
  if (snapshots_->stateless()) return;  // nothing to save: any cached boundary resumes
  const int bs = pool_.block_size();
  const int len = int(s->tokens.size());
  const int start = resume_blocks * bs;
  auto& pts = s->snapshot_points;
  // Where the cached KV ends but the state was not saved: prompts sharing this prefix branch
  // here, and the next one can resume here instead of at the last snapshot.
  if (kv_blocks > resume_blocks) pts.push_back(kv_blocks * bs);
  if (prefix_.snapshot_interval > 0) {
    const int step = prefix_.snapshot_interval * bs;
    for (int p = (start / step + 1) * step; p <= len; p += step) pts.push_back(p);
  }
  // The prompt's end, aligned down: the next turn resumes here. When the prompt fills its last
  // block, also the boundary before it, where the same prompt sent again resumes (a resume
  // must leave one token to compute).
  pts.push_back(len / bs * bs);
  pts.push_back((len - 1) / bs * bs);
  std::sort(pts.begin(), pts.end());
  pts.erase(std::unique(pts.begin(), pts.end()), pts.end());
  pts.erase(pts.begin(), std::upper_bound(pts.begin(), pts.end(), start));
}

bool Scheduler::block_cached(uint64_t h) const {
  return pool_.find(h) >= 0 || (tier_.enabled() && tier_.has_block(h));
}

bool Scheduler::state_cached(uint64_t h) const {
  if (snapshots_->contains(h)) return true;
  // A state loaded from the tier goes into the store, whose least recently used entry it
  // replaces. Restores planned this step point into the store and are its most recent entries;
  // with room for twice as many, the entry replaced is never one of them.
  return tier_.enabled() && snapshots_->capacity() >= 2 * (int(plan_.restores.size()) + 1) && tier_.has_state(h);
}

int Scheduler::resume_from_cache(Sequence* s) {
  s->snapshot_points.clear();
  s->next_snapshot = 0;
  s->num_published = 0;
  if (!prefix_.enabled) return 0;
  const int bs = pool_.block_size();
  const int len = int(s->tokens.size());
  extend_block_hashes(prefix_.seed, s->tokens, bs, &s->block_hashes);
  const auto& h = s->block_hashes;
  // Retried when a tier entry proves unreadable: the tier has forgotten it, so the next look
  // finds a shorter prefix, and the loop ends.
  for (;;) {
    int kv = 0;
    while (kv < int(h.size()) && block_cached(h[size_t(kv)])) ++kv;
    // At least one token must be computed: its logits give the first new token.
    int resume = 0;
    for (int b = std::min(kv, (len - 1) / bs); b > 0; --b) {
      if (state_cached(h[size_t(b - 1)])) {
        resume = b;
        break;
      }
    }
    bool readable = resume == 0 || snapshots_->contains(h[size_t(resume - 1)]) || tier_.load_state(h[size_t(resume - 1)]);
    for (int i = 0; readable && i < resume; ++i) {
      int32_t id = pool_.acquire(h[size_t(i)]);
      if (id < 0) {  // only the tier has it
        id = pool_.allocate();
        if (id < 0) {
          pool_.release_all(&s->blocks);
          return -1;
        }
        if (!tier_.load_block(id, h[size_t(i)])) {
          pool_.release(id);
          readable = false;
          break;
        }
        pool_.publish(id, h[size_t(i)]);
      }
      s->blocks.push_back(id);
    }
    if (readable) {
      s->num_published = resume;
      plan_snapshot_points(s, resume, kv);
      return resume * bs;
    }
    pool_.release_all(&s->blocks);
  }
}

void Scheduler::plan_decode_snapshot(Sequence* s) {
  const int bs = pool_.block_size();
  const int end = s->num_computed + 1;
  if (!prefix_.enabled || !prefix_.decode_snapshots || snapshots_->stateless() || end % bs != 0) return;
  extend_block_hashes(prefix_.seed, s->tokens, bs, &s->block_hashes);
  const uint64_t h = s->block_hashes[size_t(end / bs - 1)];
  if (s->has_decode_snapshot) snapshots_->erase(s->decode_snapshot);
  s->decode_snapshot = h;
  s->has_decode_snapshot = true;
  if (!snapshots_->contains(h)) plan_.saves.push_back({s->slot, h});
}

const StepPlan& Scheduler::schedule() {
  plan_.tokens.clear();
  plan_.chunks.clear();
  plan_.seqs.clear();
  plan_.num_decode = 0;
  plan_.num_logits = 0;
  plan_.num_preempted = 0;
  plan_.restores.clear();
  plan_.saves.clear();
  plan_.first_admitted.clear();
  int budget = limits_.max_num_batched_tokens;

  // 1. Decode rows, oldest first. Victims come from the back, so a victim is never a sequence
  //    already planned in this loop.
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence* s = running_[i].get();
    if (s->pending() != 1) continue;
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
    assert(budget >= 1);  // validated: max_num_batched_tokens >= max_num_seqs
    plan_decode_snapshot(s);
    plan_chunk(s, 1);
    --budget;
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
    Sequence* s = waiting_.front().get();
    const int resume = resume_from_cache(s);
    if (resume < 0) break;  // no room for the cached prefix's blocks; retried next step
    const int need = pool_.blocks_for(int64_t(s->tokens.size())) - int(s->blocks.size());
    if (!pool_.allocate(need, &s->blocks)) {
      pool_.release_all(&s->blocks);  // the cached prefix goes back; retried next step
      break;
    }
    assert(!free_slots_.empty());
    s->slot = free_slots_.back();
    free_slots_.pop_back();
    s->num_computed = resume;
    if (resume > 0 && !snapshots_->stateless())
      plan_.restores.push_back({s->slot, snapshots_->find(s->block_hashes[size_t(resume / pool_.block_size() - 1)])});
    if (s->num_cached_tokens < 0) {
      s->num_cached_tokens = resume;
      plan_.first_admitted.push_back(s);
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    const int n = prefill_length(*s, budget);
    plan_chunk(s, n);
    budget -= n;
  }
  return plan_;
}

void Scheduler::commit_step() {
  const int bs = pool_.block_size();
  for (size_t i = 0; i < plan_.chunks.size(); ++i) {
    Sequence* s = plan_.seqs[i];
    s->num_computed += plan_.chunks[i].num_tokens;
    if (!prefix_.enabled) continue;
    const int full = s->num_computed / bs;
    if (full <= s->num_published) continue;
    // Decode computes a block's KV one row at a time, which differs from a prefill of the same
    // tokens in rounding; without decode snapshots nothing decode made is shared, so every
    // reused value is bit-identical to recomputing it.
    if (int(i) < plan_.num_decode && !prefix_.decode_snapshots) {
      s->num_published = full;
      continue;
    }
    extend_block_hashes(prefix_.seed, s->tokens, bs, &s->block_hashes);
    for (int b = s->num_published; b < full; ++b) pool_.publish(s->blocks[size_t(b)], s->block_hashes[size_t(b)]);
    s->num_published = full;
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
