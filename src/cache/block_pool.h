// KV block ids and their reference counts. The model owns the memory behind a block id; this
// pool only decides which ids are free. Owned by the engine thread, so it takes no locks.
//
// Refcounts exist for prefix caching: a full block can be shared by every sequence whose prompt
// starts with the same tokens, and returns to the free list only when the last holder releases it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ds {

class BlockPool {
 public:
  BlockPool(int num_blocks, int block_size);

  int num_blocks() const { return int(refcount_.size()); }
  int block_size() const { return block_size_; }
  int num_free() const { return int(free_.size()); }
  int num_used() const { return num_blocks() - num_free(); }
  // Fraction of blocks held by some sequence: the KV pool usage gauge.
  double usage() const { return num_blocks() ? double(num_used()) / num_blocks() : 0.0; }

  // Blocks needed to hold `tokens` positions.
  int blocks_for(int64_t tokens) const { return int((tokens + block_size_ - 1) / block_size_); }

  // A free block with refcount 1, or -1 when none is free (the caller preempts or waits; the
  // step loop does not throw).
  int32_t allocate();
  // All n or none: appends n fresh blocks to out and returns true, or changes nothing.
  bool allocate(int n, std::vector<int32_t>* out);
  void retain(int32_t id);
  // Drops one reference; the block is free again when the count reaches zero.
  void release(int32_t id);
  void release_all(std::vector<int32_t>* ids);
  int refcount(int32_t id) const { return refcount_[size_t(id)]; }

 private:
  int block_size_;
  std::vector<int32_t> refcount_;
  std::vector<int32_t> free_;  // a stack: the most recently freed block is reused first (warm)
};

}  // namespace ds
