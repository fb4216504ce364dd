// The hybrid model's prefix cache (docs/prefix-cache.md): the KV block pool
// with its cached full blocks, the recurrent-state snapshots, the disk tier behind both, and the
// hash chain that names every cached entry. Attention KV alone cannot resume a hybrid model: a
// prompt resumes at a block boundary only where every block before it is cached and the state
// there is saved.
//
// It speaks in token spans, block ids, slots and hashes, never in the engine's sequences: each
// sequence carries a PrefixCursor, and the scheduler asks, per sequence,
//   resume()           where its prompt resumes (taking the cached blocks, loading those only
//                      the disk tier has) and which points its prefill must stop at to save state;
//   chunk_end()        where a prefill chunk must end to reach the next such point;
//   chunk_snapshot()   whether the chunk it planned ends at one (the state to save after forward);
//   decode_snapshot()  whether a decode row fills a block (save the state there);
//   publish()          after the forward, which full blocks become findable.
// The engine saves and restores states around the forward and flushes at shutdown. The model's
// bytes are reached only through CacheMemory. Owned by the engine thread: no locks.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cache/block_hash.h"
#include "cache/block_pool.h"
#include "cache/cache_memory.h"
#include "cache/disk_tier.h"
#include "cache/state_snapshots.h"

namespace ds {

// One sequence's place in the cache. Reset by resume() (but for the hashes, which only grow
// with the tokens, and the decode snapshot, which outlives a preemption).
struct PrefixCursor {
  // Chained hashes of the tokens' leading full blocks (extended as blocks fill); the sequence's
  // blocks[0, num_published) are findable in the pool.
  std::vector<uint64_t> block_hashes;
  int num_published = 0;
  // Positions, ascending and beyond what is computed, where a prefill chunk must end so the
  // state can be saved there (prompt end aligned down to a block, branch points, intervals).
  std::vector<int32_t> snapshot_points;
  size_t next_snapshot = 0;
  // The latest decode-boundary snapshot this sequence saved, superseded by its next one.
  std::optional<uint64_t> decode_snapshot;
};

struct PrefixCacheConfig {
  int num_blocks = 0;
  int block_size = 64;
  bool enabled = false;        // off: a plain block pool, nothing cached or saved
  int num_snapshots = 0;
  int snapshot_interval = 8;   // blocks between prefill snapshots; 0: only the points above
  bool decode_snapshots = true;
  uint64_t seed = 0;           // chain seed naming the model (cache/block_hash.h)
  std::string disk_dir;        // empty: no disk tier
  uint64_t disk_bytes = 0;
};

// A cumulative count the cache keeps, for the engine to export as it stands.
struct CacheCounter {
  const char* name;  // Prometheus name, without the `deltaserve:` prefix
  const char* help;
  uint64_t value;
};

class PrefixCache {
 public:
  // Opens the disk tier (indexing what an earlier run left there) when cfg.disk_dir is set.
  // Throws ds::Error when the folder cannot be used.
  PrefixCache(const PrefixCacheConfig& cfg, CacheMemory& memory);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  bool enabled() const { return cfg_.enabled; }
  int block_size() const { return cfg_.block_size; }
  // Decode rows fill blocks that are shared and end in state snapshots.
  bool decode_snapshots() const { return cfg_.enabled && cfg_.decode_snapshots; }
  // A model without recurrent layers: every cached block boundary resumes, nothing is saved.
  bool stateless() const { return !snapshots_ || snapshots_->stateless(); }

  // Where `tokens` resume: appends the cached prefix's blocks to *blocks (each with a reference
  // taken; those only the disk tier had are loaded into fresh blocks) and plans the cursor's
  // snapshot points. Returns the tokens already in cache and state (0 with the cache off), or
  // -1 when the pool has no room for the blocks to load (*blocks is then as it was).
  // `restores_planned`: states already claimed for restores this step, which a state loaded
  // from the tier must not evict.
  int resume(std::span<const int32_t> tokens, PrefixCursor* cur, std::vector<int32_t>* blocks, int restores_planned);
  // The saved state to load into the slot of a sequence resuming at `pos` > 0 (marked most
  // recently used, so later loads this step do not evict it); nullptr for a stateless model.
  const void* claim_state(const PrefixCursor& cur, int pos);

  // Where a prefill chunk from `from` that could run to `end` must stop: the next snapshot point
  // before end, else end aligned down to a block (unless that leaves nothing, or end is the
  // whole sequence `len`).
  int chunk_end(const PrefixCursor& cur, int from, int end, int len) const;
  // For a chunk just planned to end at `end`: the hash to save the state under after the
  // forward, when end is the cursor's next snapshot point and the store lacks it.
  std::optional<uint64_t> chunk_snapshot(PrefixCursor* cur, int end);
  // For a decode row that makes `end` tokens computed: when it fills a block (and decode
  // snapshots are on), the hash to save the state under, superseding the cursor's last one.
  std::optional<uint64_t> decode_snapshot(std::span<const int32_t> tokens, PrefixCursor* cur, int end);

  // After the forward: `computed` tokens are in `blocks`; the full ones become findable.
  // `decoded`: this step fed one decode row, whose block is shared only with decode snapshots on.
  void publish(std::span<const int32_t> tokens, PrefixCursor* cur, std::span<const int32_t> blocks, int computed,
               bool decoded);

  // Around the forward: a claimed state into a slot before, a slot's state into the store after.
  void restore_state(int slot, const void* state);
  void save_state(int slot, uint64_t hash);

  // Everything still cached to the disk tier (at shutdown), so the next start resumes warm.
  void flush();

  int num_cached_blocks() const { return pool_.num_cached(); }
  int num_snapshots() const { return snapshots_ ? snapshots_->size() : 0; }
  // Every cumulative count, for /metrics (a fixed list: the step loop reads it without allocating).
  static constexpr size_t kNumCounters = 6;
  std::array<CacheCounter, kNumCounters> counters() const;

 private:
  // Entries under dir that are not in the subfolder `own` (other seeds, the old flat layout).
  static uint64_t count_foreign_entries(const std::string& dir, const std::string& own);
  bool block_cached(uint64_t h) const;
  bool state_cached(uint64_t h, int restores_planned) const;
  bool load_block_from_disk(int32_t id, uint64_t h);
  bool load_state_from_disk(uint64_t h);
  // Copies a block or state to the disk unless it is there already; true when written.
  bool write_block_to_disk(int32_t id, uint64_t h);
  bool write_state_to_disk(uint64_t h, const void* state);
  void plan_snapshot_points(PrefixCursor* cur, int len, int resume_blocks, int kv_blocks) const;

  PrefixCacheConfig cfg_;
  ChainKey key_;  // keys the block-hash chain (cache/block_hash.h)
  CacheMemory& memory_;
  BlockPool pool_;
  std::unique_ptr<StateSnapshots> snapshots_;  // null when the cache is off
  std::unique_ptr<DiskTier> disk_;             // null without a disk folder
  size_t block_bytes_ = 0;
  std::vector<std::byte> block_buf_;           // one KV block on its way to or from the disk
  uint64_t saves_ = 0, restores_ = 0, disk_loads_ = 0, foreign_entries_ = 0;
};

}  // namespace ds
