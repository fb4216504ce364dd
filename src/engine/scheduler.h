// Continuous batching. Each step the scheduler decides which sequences run and how many of
// their tokens:
//   1. decode rows (sequences with exactly one token to feed), oldest first, growing their
//      block tables; when the pool is empty the newest running sequence is preempted (its
//      blocks and slot freed, its tokens kept) and goes back to the head of the waiting queue,
//      to be recomputed from prompt + generated tokens when there is room again;
//   2. prefill chunks of sequences already admitted, within max_num_batched_tokens;
//   3. new admissions, first come first served, while fewer than max_num_seqs run, the step
//      has token budget, and the pool has blocks for the whole prompt. The head of the queue
//      is never skipped, so a long prompt cannot starve.
// Admission reserves blocks for the whole prompt so a prefill never stalls half-way; decode
// grows one block at a time. The scheduler owns the sequences; the engine runs the plan.
//
// Prefix caching (docs/prefix-cache.md) is the cache's (cache/prefix_cache.h): at admission the
// scheduler asks it where the prompt resumes and claims the state to restore into the slot;
// each prefill chunk ends where the cache wants a snapshot; decode rows ask whether they fill a
// block; after the forward the cache publishes the full blocks. The plan carries the restores
// and saves, which the engine runs around the forward.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "cache/prefix_cache.h"
#include "engine/sequence.h"
#include "model/model.h"

namespace ds {

struct SchedulerLimits {
  int max_num_seqs = 8;
  int max_num_batched_tokens = 2048;
  int max_model_len = 4096;
  // Speculative decoding: draft tokens per round (0: none), the most sequences verifying in one
  // step (0: no bound beyond max_num_seqs), and whether a draft model mirrors the target (then
  // a round may end with the draft feeding its last token, and blocks publish only once both
  // have fed them).
  int spec_tokens = 0;
  int spec_window = 0;
  bool has_draft = false;
};

// A saved state to load into a slot before the forward, and one to save after it.
struct StateRestore {
  int32_t slot;
  const void* state;
};
struct StateSave {
  int32_t slot;
  uint64_t hash;  // the chained hash of the block that ends where the state is taken
};

// A planned chunk's speculative round: its draft tokens (0: not a verify chunk; its k
// placeholder tokens follow the pending token in the plan's tokens, proposed already or for the
// draft model to fill), and whether the draft also feeds its last token (the round ends on a
// block boundary).
struct ChunkSpec {
  int32_t k = 0;
  bool feed_last = false;
};

// One step: chunks in batch order (decode rows first), with the sequence behind each.
struct StepPlan {
  std::vector<int32_t> tokens;
  std::vector<SeqChunk> chunks;
  std::vector<Sequence*> seqs;
  std::vector<ChunkSpec> spec;  // per chunk
  int num_decode = 0;
  int num_logits = 0;
  int num_preempted = 0;  // preemptions made while planning this step
  std::vector<StateRestore> restores;  // before forward
  std::vector<StateSave> saves;        // after forward
  // After commit_step: the decode snapshots verify rounds landed on (known only once their
  // tokens are accepted). The engine runs these saves, as it runs the others.
  std::vector<StateSave> commit_saves;
  // Sequences admitted for the first time this step (num_cached_tokens is now set).
  std::vector<Sequence*> first_admitted;
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerLimits& limits, PrefixCache& cache);

  void add(std::unique_ptr<Sequence> seq);  // joins the back of the waiting queue

  // Takes every cancelled sequence (waiting or running) out, freeing its blocks and slot.
  void take_cancelled(std::vector<std::unique_ptr<Sequence>>* out);
  // Takes everything out (shutdown / engine failure), freeing blocks and slots.
  void take_all(std::vector<std::unique_ptr<Sequence>>* out);

  StepPlan& schedule();
  // After accept: every planned chunk's tokens are now in the model's cache and state, a verify
  // chunk's first kept[i] of them (the pending token and the accepted draft tokens before the
  // last emitted one). The cache publishes the blocks that became full; the decode snapshots
  // verify rounds landed on go into the plan's commit_saves.
  void commit_step(std::span<const int32_t> kept = {});
  // Removes a running sequence that is done, freeing its blocks and slot.
  std::unique_ptr<Sequence> finish(Sequence* seq);

  int num_running() const { return int(running_.size()); }
  // The running sequences, oldest first (the engine sets their draft budgets before a step).
  const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }
  int num_waiting() const { return int(waiting_.size()); }
  uint64_t num_preemptions() const { return preemptions_; }
  const BlockPool& pool() const { return pool_; }

 private:
  void preempt_newest();
  void release(Sequence& s);
  // The chunk of s's next n tokens (slot, blocks, position, offset in the step's tokens), and
  // appending one to the plan with its speculative fields.
  SeqChunk chunk_of(const Sequence* s, int n) const;
  void push_chunk(Sequence* s, const SeqChunk& c, int k, bool feed_last);
  void plan_chunk(Sequence* s, int num_tokens);
  // A decode row as a verify chunk: the pending token and k draft placeholders, all scored.
  void plan_verify(Sequence* s, int k, bool feed_last);
  // Draft tokens for s's round: K (or its spec.budget), or fewer where the sequence may emit fewer tokens, where the
  // round would cross a block boundary that wants a decode snapshot, or where the step's token
  // budget (`spare` tokens beyond one per decode row) runs out.
  int spec_length(const Sequence& s, int spare) const;
  // Block boundaries (decode snapshots, published decode blocks) must be landed on exactly.
  bool rounds_end_on_boundaries() const;
  // Tokens of s's prefill to feed this step within budget: up to the cache's next snapshot
  // point, else down to a block boundary.
  int prefill_length(const Sequence& s, int budget) const;
  // Admits the head of the waiting queue if the pool has room for its whole prompt (after the
  // cached prefix); false leaves it waiting, holding nothing.
  bool admit_head(int budget);

  SchedulerLimits limits_;
  PrefixCache& cache_;
  BlockPool& pool_;  // the cache's
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order: newest last
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<int32_t> free_slots_;
  StepPlan plan_;
  uint64_t preemptions_ = 0;
};

}  // namespace ds
