// Saved recurrent state (every KDA layer's recurrent + conv state of one sequence) at block
// boundaries, keyed by the chained hash of the block that ends there. Attention KV alone cannot
// resume a hybrid model: a prompt resumes at a cached boundary only when this store also holds
// the state there (docs/prefix-cache.md).
//
// A fixed number of equal buffers sized at start-up, reused least recently used first, so
// saving in the step loop never allocates. A model without recurrent layers has 0-byte
// states: every boundary then counts as saved and the store holds nothing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

namespace ds {

class StateSnapshots {
 public:
  // capacity snapshots of state_bytes each.
  StateSnapshots(int capacity, size_t state_bytes);

  int capacity() const { return capacity_; }
  size_t state_bytes() const { return state_bytes_; }
  int size() const { return int(by_hash_.size()); }
  uint64_t num_evictions() const { return evictions_; }
  bool stateless() const { return state_bytes_ == 0; }

  // Whether a resume at the boundary named by hash has its state.
  bool contains(uint64_t hash) const { return stateless() || by_hash_.count(hash) > 0; }
  // The saved state (state_bytes), marked most recently used, or nullptr when absent (and for
  // a stateless model, where there is nothing to load).
  const void* find(uint64_t hash);
  // A buffer to save the state under hash into: the existing entry's (overwritten), a free one,
  // or the least recently used entry's, evicted. nullptr when the store has no room at all
  // (capacity 0) or the model is stateless.
  void* insert(uint64_t hash);
  // Forgets an entry (a superseded decode-boundary snapshot); absent hashes are ignored.
  void erase(uint64_t hash);

  // Called with an entry's hash and state just before insert() evicts it (the disk tier).
  void set_evict_hook(std::function<void(uint64_t, const void*)> hook) { evict_hook_ = std::move(hook); }
  // Every entry as (hash, state).
  template <typename F>
  void for_each(F&& f) {
    for (const auto& [hash, i] : by_hash_) f(hash, static_cast<const void*>(buffer(i)));
  }

 private:
  struct Entry {
    uint64_t hash = 0;
    int32_t prev = -1, next = -1;  // recency list: head is the least recently used
  };
  void unlink(int32_t i);
  void link_back(int32_t i);
  std::byte* buffer(int32_t i) { return data_.get() + size_t(i) * state_bytes_; }

  int capacity_;
  size_t state_bytes_;
  std::unique_ptr<std::byte[]> data_;  // not zeroed: pages are mapped as snapshots fill them
  std::vector<Entry> entries_;
  std::vector<int32_t> free_;
  std::unordered_map<uint64_t, int32_t> by_hash_;
  int32_t head_ = -1, tail_ = -1;
  uint64_t evictions_ = 0;
  std::function<void(uint64_t, const void*)> evict_hook_;
};

}  // namespace ds
