#include "cache/block_pool.h"

#include <cassert>

#include "core/error.h"

namespace ds {

BlockPool::BlockPool(int num_blocks, int block_size) : block_size_(block_size) {
  DS_CHECK(num_blocks >= 0, "block pool: negative block count " + std::to_string(num_blocks));
  DS_CHECK(block_size > 0, "block pool: block size must be positive, got " +
                               std::to_string(block_size));
  refcount_.assign(size_t(num_blocks), 0);
  hash_of_.assign(size_t(num_blocks), HashSlot{});
  prev_.assign(size_t(num_blocks), -1);
  next_.assign(size_t(num_blocks), -1);
  free_.reserve(size_t(num_blocks));
  by_hash_.reserve(size_t(num_blocks));
  // Pushed in reverse so block 0 is handed out first: easier to read in tests and dumps.
  for (int i = num_blocks - 1; i >= 0; --i) free_.push_back(i);
}

void BlockPool::lru_push_back(int32_t id) {
  prev_[size_t(id)] = lru_tail_;
  next_[size_t(id)] = -1;
  if (lru_tail_ >= 0) next_[size_t(lru_tail_)] = id;
  else lru_head_ = id;
  lru_tail_ = id;
  ++num_evictable_;
}

void BlockPool::lru_remove(int32_t id) {
  const int32_t p = prev_[size_t(id)], n = next_[size_t(id)];
  if (p >= 0) next_[size_t(p)] = n;
  else lru_head_ = n;
  if (n >= 0) prev_[size_t(n)] = p;
  else lru_tail_ = p;
  prev_[size_t(id)] = next_[size_t(id)] = -1;
  --num_evictable_;
}

void BlockPool::unpublish(int32_t id) {
  HashSlot& h = hash_of_[size_t(id)];
  if (!h.has) return;
  by_hash_.erase(h.value);
  h = HashSlot{};
}

int32_t BlockPool::allocate() {
  int32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else if (lru_head_ >= 0) {
    id = lru_head_;
    lru_remove(id);
    if (evict_hook_) evict_hook_(id, hash_of_[size_t(id)].value);
    unpublish(id);
    ++evictions_;
  } else {
    return -1;
  }
  assert(refcount_[size_t(id)] == 0);
  refcount_[size_t(id)] = 1;
  return id;
}

bool BlockPool::allocate(int n, std::vector<int32_t>* out) {
  if (n > num_free()) return false;
  for (int i = 0; i < n; ++i) out->push_back(allocate());
  return true;
}

void BlockPool::retain(int32_t id) {
  assert(refcount_[size_t(id)] > 0);
  ++refcount_[size_t(id)];
}

void BlockPool::release(int32_t id) {
  assert(id >= 0 && size_t(id) < refcount_.size() && refcount_[size_t(id)] > 0);
  if (--refcount_[size_t(id)] > 0) return;
  if (hash_of_[size_t(id)].has) lru_push_back(id);
  else free_.push_back(id);
}

void BlockPool::release_all(std::vector<int32_t>* ids) {
  // Last block first: a sequence's deepest blocks are the least likely to be shared, so they
  // are released first and evicted first, keeping the shared prefix cached longest.
  for (size_t i = ids->size(); i-- > 0;) release((*ids)[i]);
  ids->clear();
}

int32_t BlockPool::find(uint64_t hash) const {
  auto it = by_hash_.find(hash);
  return it == by_hash_.end() ? -1 : it->second;
}

int32_t BlockPool::acquire(uint64_t hash) {
  const int32_t id = find(hash);
  if (id < 0) return -1;
  if (refcount_[size_t(id)] == 0) lru_remove(id);
  ++refcount_[size_t(id)];
  return id;
}

bool BlockPool::publish(int32_t id, uint64_t hash) {
  assert(refcount_[size_t(id)] > 0);
  if (hash_of_[size_t(id)].has) return false;
  if (!by_hash_.emplace(hash, id).second) return false;
  hash_of_[size_t(id)] = HashSlot{hash, true};
  return true;
}

}  // namespace ds
