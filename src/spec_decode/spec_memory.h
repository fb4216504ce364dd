// The prefix cache's view of a target with a draft: one block id or state slot names the
// target's and the draft's memory together (the draft mirrors the target's block tables and
// slots), so a cached block, a state snapshot and a disk-tier entry carry both, and a resumed
// sequence resumes its draft at the same point.
#pragma once
#include <cstddef>

#include "cache/cache_memory.h"

namespace ds {

class SpecCacheMemory final : public CacheMemory {
 public:
  SpecCacheMemory(CacheMemory& target, CacheMemory& draft, int block_size)
      : target_(target), draft_(draft), block_size_(block_size) {}
  size_t kv_bytes_per_block(int block_size) const override {
    return target_.kv_bytes_per_block(block_size) + draft_.kv_bytes_per_block(block_size);
  }
  size_t state_bytes_per_slot() const override { return target_.state_bytes_per_slot() + draft_.state_bytes_per_slot(); }
  void save_state(int slot, void* dst) const override {
    target_.save_state(slot, dst);
    if (draft_.state_bytes_per_slot()) draft_.save_state(slot, static_cast<std::byte*>(dst) + target_.state_bytes_per_slot());
  }
  void load_state(int slot, const void* src) override {
    target_.load_state(slot, src);
    if (draft_.state_bytes_per_slot())
      draft_.load_state(slot, static_cast<const std::byte*>(src) + target_.state_bytes_per_slot());
  }
  void save_block(int block, void* dst) const override {
    target_.save_block(block, dst);
    if (draft_.kv_bytes_per_block(block_size_))
      draft_.save_block(block, static_cast<std::byte*>(dst) + target_.kv_bytes_per_block(block_size_));
  }
  void load_block(int block, const void* src) override {
    target_.load_block(block, src);
    if (draft_.kv_bytes_per_block(block_size_))
      draft_.load_block(block, static_cast<const std::byte*>(src) + target_.kv_bytes_per_block(block_size_));
  }

 private:
  CacheMemory& target_;
  CacheMemory& draft_;
  int block_size_;
};

}  // namespace ds
