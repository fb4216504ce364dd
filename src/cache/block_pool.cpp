#include "cache/block_pool.h"

#include <cassert>

#include "core/error.h"

namespace ds {

BlockPool::BlockPool(int num_blocks, int block_size) : block_size_(block_size) {
  DS_CHECK(num_blocks >= 0, "block pool: negative block count " + std::to_string(num_blocks));
  DS_CHECK(block_size > 0, "block pool: block size must be positive, got " +
                               std::to_string(block_size));
  refcount_.assign(size_t(num_blocks), 0);
  free_.reserve(size_t(num_blocks));
  // Pushed in reverse so block 0 is handed out first: easier to read in tests and dumps.
  for (int i = num_blocks - 1; i >= 0; --i) free_.push_back(i);
}

int32_t BlockPool::allocate() {
  if (free_.empty()) return -1;
  int32_t id = free_.back();
  free_.pop_back();
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
  if (--refcount_[size_t(id)] == 0) free_.push_back(id);
}

void BlockPool::release_all(std::vector<int32_t>* ids) {
  for (int32_t id : *ids) release(id);
  ids->clear();
}

}  // namespace ds
