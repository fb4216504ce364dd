// KV block ids, their reference counts, and the prefix cache over them. The model owns the
// memory behind a block id; this pool only decides which ids are free and which full blocks
// can be found again by their chained hash (cache/block_hash.h). Owned by the engine thread,
// so it takes no locks.
//
// A block is in one of three states:
//   free       refcount 0, no hash: handed out first;
//   held       refcount > 0: some sequence's block table points at it;
//   cached     refcount 0 but published under a hash: its contents are still valid, a later
//              prompt with the same prefix takes it back with acquire(); allocate() evicts the
//              least recently released cached block when no free one is left.
// Full blocks are immutable once published, so sharing never needs copy-on-write.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

namespace ds {

class BlockPool {
 public:
  BlockPool(int num_blocks, int block_size);

  int num_blocks() const { return int(refcount_.size()); }
  int block_size() const { return block_size_; }
  // Blocks allocate() can hand out: free ones plus cached ones nobody holds (evictable).
  int num_free() const { return int(free_.size()) + num_evictable_; }
  int num_used() const { return num_blocks() - num_free(); }
  int num_evictable() const { return num_evictable_; }
  int num_cached() const { return int(by_hash_.size()); }
  uint64_t num_evictions() const { return evictions_; }
  // Fraction of blocks held by some sequence: the KV pool usage gauge.
  double usage() const { return num_blocks() ? double(num_used()) / num_blocks() : 0.0; }

  // Blocks needed to hold `tokens` positions.
  int blocks_for(int64_t tokens) const { return int((tokens + block_size_ - 1) / block_size_); }

  // A block with refcount 1, or -1 when none is left (the caller preempts or waits; the step
  // loop does not throw). Takes a free block first, else evicts the oldest cached one.
  int32_t allocate();
  // All n or none: appends n fresh blocks to out and returns true, or changes nothing.
  bool allocate(int n, std::vector<int32_t>* out);
  void retain(int32_t id);
  // Drops one reference. At zero a published block stays cached (newest in the eviction
  // order); an unpublished one is free.
  void release(int32_t id);
  void release_all(std::vector<int32_t>* ids);
  int refcount(int32_t id) const { return refcount_[size_t(id)]; }

  // Prefix cache. The cached block for a chained hash, or -1.
  int32_t find(uint64_t hash) const;
  // find() and take a reference (a cached block leaves the eviction order), or -1.
  int32_t acquire(uint64_t hash);
  // Makes a held, full block findable under hash. Returns false, changing nothing, when the
  // block is already published or another block already holds that hash (two sequences
  // computed the same prefix at once: the second copy stays private and is freed normally).
  bool publish(int32_t id, uint64_t hash);
  bool is_published(int32_t id) const { return hash_of_[size_t(id)].has; }

  // Called with a cached block's id and hash just before allocate() evicts it, while its
  // contents are still intact: the disk tier copies it out here.
  void set_evict_hook(std::function<void(int32_t, uint64_t)> hook) { evict_hook_ = std::move(hook); }
  // Every published block (held or cached) as (id, hash).
  template <typename F>
  void for_each_published(F&& f) const {
    for (const auto& [hash, id] : by_hash_) f(id, hash);
  }

 private:
  struct HashSlot {
    uint64_t value = 0;
    bool has = false;
  };
  void lru_push_back(int32_t id);
  void lru_remove(int32_t id);
  void unpublish(int32_t id);

  int block_size_;
  std::vector<int32_t> refcount_;
  std::vector<int32_t> free_;  // a stack: the most recently freed block is reused first (warm)
  std::vector<HashSlot> hash_of_;
  std::unordered_map<uint64_t, int32_t> by_hash_;
  // Evictable cached blocks, oldest release first: an intrusive doubly linked list.
  std::vector<int32_t> prev_, next_;
  int32_t lru_head_ = -1, lru_tail_ = -1;
  int num_evictable_ = 0;
  uint64_t evictions_ = 0;
  std::function<void(int32_t, uint64_t)> evict_hook_;
};

}  // namespace ds
