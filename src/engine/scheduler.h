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
// Prefix caching (DESIGN.md section 5). At admission a sequence resumes from the deepest block
// boundary whose KV blocks are all cached in the pool and whose recurrent state is in the
// snapshot store, leaving at least one token to compute; its state is restored into its slot
// before the step's forward. Prefill chunks end on block boundaries, and at every point where
// a snapshot is wanted (the prompt's end aligned down to a block, the point where the cached
// KV runs out but no state was saved - a branch point that the next prompt sharing this prefix
// will want - and every snapshot_interval blocks); the engine saves the state there after the
// forward. Decode saves one when it fills a block. Full blocks are published as they complete
// (those decode fills only with decode snapshots on).
//
// Chunks always end on block boundaries (unless the budget is smaller than a block) whether
// the cache is on or not: the chunked KDA form then sees the same 64-token pieces whatever was
// cached, so a state restored from a prefill snapshot is bit-identical to recomputing it.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "cache/block_pool.h"
#include "cache/state_snapshots.h"
#include "engine/sequence.h"
#include "model/model.h"

namespace ds {

struct SchedulerLimits {
  int max_num_seqs = 8;
  int max_num_batched_tokens = 2048;
  int max_model_len = 4096;
};

struct PrefixCacheSettings {
  bool enabled = false;
  int snapshot_interval = 8;  // blocks between prefill snapshots; 0: only the points above
  bool decode_snapshots = true;
  uint64_t seed = 0;          // chain seed naming the model (cache/block_hash.h)
};

// A slower tier behind the pool and the snapshot store (the engine wires these to the disk
// tier). The loads run during scheduling and return false for an entry that turned out
// unreadable, which the tier has then forgotten.
struct PrefixTierHooks {
  std::function<bool(uint64_t hash)> has_block, has_state;
  std::function<bool(int32_t block, uint64_t hash)> load_block;  // into the model's block
  std::function<bool(uint64_t hash)> load_state;                 // into the snapshot store
  bool enabled() const { return bool(has_block); }
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

// One step: chunks in batch order (decode rows first), with the sequence behind each.
struct StepPlan {
  std::vector<int32_t> tokens;
  std::vector<SeqChunk> chunks;
  std::vector<Sequence*> seqs;
  int num_decode = 0;
  int num_logits = 0;
  int num_preempted = 0;  // preemptions made while planning this step
  std::vector<StateRestore> restores;  // before forward
  std::vector<StateSave> saves;        // after forward
  // Sequences admitted for the first time this step (num_cached_tokens is now set).
  std::vector<Sequence*> first_admitted;
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  // snapshots may be null when prefix caching is off.
  Scheduler(const SchedulerLimits& limits, BlockPool& pool, StateSnapshots* snapshots = nullptr,
            PrefixCacheSettings prefix = {}, PrefixTierHooks tier = {});

  void add(std::unique_ptr<Sequence> seq);  // joins the back of the waiting queue

  // Takes every cancelled sequence (waiting or running) out, freeing its blocks and slot.
  void take_cancelled(std::vector<std::unique_ptr<Sequence>>* out);
  // Takes everything out (shutdown / engine failure), freeing blocks and slots.
  void take_all(std::vector<std::unique_ptr<Sequence>>* out);

  const StepPlan& schedule();
  // After the forward: every planned chunk's tokens are now in the model's cache and state.
  // Publishes the blocks that became full.
  void commit_step();
  // Removes a running sequence that is done, freeing its blocks and slot.
  std::unique_ptr<Sequence> finish(Sequence* seq);

  int num_running() const { return int(running_.size()); }
  int num_waiting() const { return int(waiting_.size()); }
  uint64_t num_preemptions() const { return preemptions_; }
  const BlockPool& pool() const { return pool_; }

 private:
  void preempt_newest();
  void release(Sequence& s);
  void plan_chunk(Sequence* s, int num_tokens);
  // Tokens of s's prefill to feed this step within budget: up to the next snapshot point,
  // else down to a block boundary.
  int prefill_length(const Sequence& s, int budget) const;
  // Looks up the cached prefix (pool and snapshot store first, then the tier), takes its
  // blocks (loading those only the tier has) and plans the snapshot points. Returns the resume
  // position (tokens already in cache and state), or -1 when the pool has no room for the
  // blocks to load (s then holds nothing).
  int resume_from_cache(Sequence* s);
  bool block_cached(uint64_t h) const;
  bool state_cached(uint64_t h) const;
  void plan_snapshot_points(Sequence* s, int resume_blocks, int kv_blocks);
  void plan_decode_snapshot(Sequence* s);

  SchedulerLimits limits_;
  BlockPool& pool_;
  StateSnapshots* snapshots_;
  PrefixCacheSettings prefix_;
  PrefixTierHooks tier_;
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order: newest last
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<int32_t> free_slots_;
  StepPlan plan_;
  uint64_t preemptions_ = 0;
};

}  // namespace ds
