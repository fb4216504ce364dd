// The memory behind block ids and state slots, as the cache reaches it. The model owns those
// bytes and implements this; the cache decides what they mean (which block holds which prefix,
// which saved state resumes where) and copies them to and from its snapshot store and disk
// tier through these calls only.
#pragma once
#include <cstddef>

namespace ds {

class CacheMemory {
 public:
  virtual ~CacheMemory() = default;
  // Bytes of one KV block across all attention layers (0 without attention layers), and of one
  // slot's whole recurrent memory (0 without recurrent layers).
  virtual size_t kv_bytes_per_block(int block_size) const = 0;
  virtual size_t state_bytes_per_slot() const = 0;
  // One slot's recurrent memory (every KDA layer's recurrent + conv state) to or from a buffer
  // of state_bytes_per_slot() bytes: snapshots and speculative rollback build on these.
  virtual void save_state(int slot, void* dst) const = 0;
  virtual void load_state(int slot, const void* src) = 0;
  // One KV block (every attention layer's rows for it) to or from a buffer of
  // kv_bytes_per_block(block_size) bytes: the disk tier builds on these.
  virtual void save_block(int block, void* dst) const = 0;
  virtual void load_block(int block, const void* src) = 0;
};

}  // namespace ds
