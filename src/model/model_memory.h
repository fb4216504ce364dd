// The model's runtime memory, apart from its weights: the KV pool every attention layer's
// blocks live in, the recurrent state slots, the speculative rollback area (lanes or replay
// entries) and the hidden-state taps a drafter reads. Laid out from the layers' mixers
// (model/mixer.h: state floats, replay floats, KV row bytes) and allocated once; it is the
// memory behind the cache's block ids and state slots (cache/cache_memory.h).
//
// The model owns one beside its layers and hands each layer its share per step (layer()); the
// step's temporaries (the arena, per-thread scratch) stay with the forward pass.
#pragma once
#include <cstddef>
#include <vector>

#include "cache/cache_memory.h"
#include "core/huge_pages.h"
#include "core/kv_dtype.h"
#include "model/mixer.h"
#include "model/model.h"

namespace ds {

class ThreadPool;

class ModelMemory final : public CacheMemory {
 public:
  // mixers: every layer's, in order (they outlive this); hidden: the residual width (taps);
  // dcp: the decode context parallel group's size (this rank holds block_size / dcp rows of a block).
  ModelMemory(std::vector<const Mixer*> mixers, int hidden, int dcp);

  // The KV rows' element type: lays out the pool. Before allocate().
  void set_kv_dtype(KvDtype t);
  KvDtype kv_dtype() const { return kv_dtype_; }
  // Layers (0-based) whose output a drafter reads, and how many rows at each chunk's end.
  // Before allocate().
  void set_hidden_taps(const std::vector<int>& layers, int tail_rows);

  // Checks the limits and allocates the pool, the slots, the rollback area and the taps.
  void allocate(const RuntimeLimits& limits);
  bool allocated() const { return allocated_; }
  const RuntimeLimits& limits() const { return limits_; }

  // Layer li's share for a step: its state slots and rollback area, or its region of the pool.
  LayerMemory layer(size_t li);

  // After layer li in a step: copies its output x ([tokens][hidden]) into the taps when tapped.
  void tap(size_t li, const ForwardBatch& batch, const float* x);
  // [batch row][taps][hidden], or null without taps.
  const float* hidden_taps() const { return taps_.empty() ? nullptr : tap_rows_.data(); }

  // Model::commit_speculative: the committed state of `slot` becomes the one after its first
  // `keep` speculative tokens (a lane copied, or the replay run on pool; scratch: per thread).
  void commit_speculative(int slot, int keep, ThreadPool* pool, std::vector<std::vector<float>>& scratch);
  size_t rollback_bytes_per_slot() const;

  // CacheMemory. Under decode context parallel a block holds block_size / dcp rows here.
  size_t kv_bytes_per_block(int block_size) const override { return kv_bytes_per_token_ * size_t(block_size / dcp_); }
  size_t state_bytes_per_slot() const override { return state_floats_per_slot_ * 4; }
  void save_state(int slot, void* dst) const override;
  void load_state(int slot, const void* src) override;
  void save_block(int block, void* dst) const override;
  void load_block(int block, const void* src) override;

 private:
  // Where each layer's part lies: floats into a slot's state and into a replay entry (recurrent
  // mixers), bytes per token of the layers before it in the pool and of its own row (attention).
  struct Part {
    const Mixer* mixer;
    bool recurrent = false;  // has state in every slot
    size_t state_offset = 0, replay_offset = 0;
    size_t kv_offset = 0, kv_row = 0;
  };
  template <typename F>
  void for_each_block_span(int block, F&& f) const;

  std::vector<Part> parts_;
  std::vector<size_t> recurrent_;  // the layers with state, for replay
  // The replay's independent items, (layer, item) in layer order; each is priced at the first
  // recurrent layer's replay_item_work (only whether to share them out depends on it).
  struct ReplayItem {
    size_t layer;
    int item;
  };
  std::vector<ReplayItem> replay_items_;
  int hidden_, dcp_;
  KvDtype kv_dtype_ = KvDtype::F32;
  size_t kv_bytes_per_token_ = 0, state_floats_per_slot_ = 0, replay_floats_per_token_ = 0;

  RuntimeLimits limits_;
  bool allocated_ = false;
  // Not zeroed: a position is always written before it is read, and an untouched pool costs
  // no memory until blocks are used (the allocator maps large blocks lazily).
  LargeBuffer kv_pool_;  // huge pages: decode attention streams it (core/huge_pages.h)
  // Recurrent states of every slot (f32), on huge pages: a decode step reads and writes each
  // decoding sequence's (1.7 MB for bench-100m), scattered over the slots.
  LargeBuffer states_mem_;
  float* states_ = nullptr;
  // Speculative rollback: [max_seqs][spec_positions] states (lanes) or replay entries.
  std::vector<float> rollback_;
  std::vector<int> taps_;          // layers whose output a drafter reads, in tap order
  std::vector<int> tap_of_layer_;  // per layer: its index in taps_, or -1
  std::vector<float> tap_rows_;    // [max_batch_tokens][taps][hidden]
  int tap_tail_ = 0;               // rows copied at the end of each chunk
};

}  // namespace ds
