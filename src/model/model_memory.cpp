#include "model/model_memory.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/thread_pool.h"
#include "core/work_sharing.h"

namespace ds {

ModelMemory::ModelMemory(std::vector<const Mixer*> mixers, int hidden, int dcp) : hidden_(hidden), dcp_(dcp) {
  for (size_t li = 0; li < mixers.size(); ++li) {
    Part p{mixers[li]};
    if (const size_t n = p.mixer->state_floats(); n > 0) {
      p.recurrent = true;
      p.state_offset = state_floats_per_slot_;
      state_floats_per_slot_ += n;
      p.replay_offset = replay_floats_per_token_;
      replay_floats_per_token_ += p.mixer->replay_floats();
      recurrent_.push_back(li);
      for (int i = 0; i < p.mixer->replay_items(); ++i) replay_items_.push_back({li, i});
    }
    parts_.push_back(p);
  }
  set_kv_dtype(KvDtype::F32);
}

void ModelMemory::set_kv_dtype(KvDtype t) {
  DS_CHECK(!allocated_, "the KV cache dtype is fixed once the runtime is allocated");
  kv_dtype_ = t;
  kv_bytes_per_token_ = 0;
  for (Part& p : parts_) {
    p.kv_row = p.mixer->kv_row_bytes(t);
    if (p.kv_row == 0) continue;
    p.kv_offset = kv_bytes_per_token_;
    kv_bytes_per_token_ += p.kv_row;
  }
}

void ModelMemory::set_hidden_taps(const std::vector<int>& layers, int tail_rows) {
  DS_CHECK(!allocated_, "hidden taps are set before the runtime is allocated");
  DS_CHECK(tail_rows > 0, "hidden taps: tail_rows must be positive");
  const int num_layers = int(parts_.size());
  tap_tail_ = tail_rows;
  tap_of_layer_.assign(parts_.size(), -1);
  for (size_t i = 0; i < layers.size(); ++i) {
    const int l = layers[i];
    DS_CHECK(l >= 0 && l < num_layers, "hidden tap: layer " + std::to_string(l) + " is outside the target's layers [0, " +
                                           std::to_string(num_layers) + ")");
    DS_CHECK(tap_of_layer_[size_t(l)] < 0, "hidden tap: layer " + std::to_string(l) + " is listed twice");
    tap_of_layer_[size_t(l)] = int(i);
  }
  taps_ = layers;
}

void ModelMemory::allocate(const RuntimeLimits& limits) {
  DS_CHECK(!allocated_, "model runtime already allocated");
  DS_CHECK(limits.max_seqs > 0 && limits.max_batch_tokens > 0 && limits.max_logit_rows > 0 &&
               limits.num_kv_blocks > 0 && limits.block_size > 0,
           "runtime limits must all be positive");
  DS_CHECK(limits.spec_positions >= 0 && limits.spec_positions <= 64, "speculative positions must be in [0, 64]");
  limits_ = limits;
  DS_CHECK(limits.block_size % dcp_ == 0, "decode context parallel: --dcp " + std::to_string(dcp_) +
                                              " does not divide the block size " + std::to_string(limits.block_size));
  kv_pool_ = allocate_large(std::max<size_t>(1, kv_bytes_per_block(limits.block_size) * size_t(limits.num_kv_blocks)));
  const size_t state_bytes = state_floats_per_slot_ * size_t(limits.max_seqs) * sizeof(float);
  states_mem_ = allocate_large(std::max<size_t>(state_bytes, 1));
  states_ = reinterpret_cast<float*>(states_mem_.get());
  std::memset(states_, 0, state_bytes);
  rollback_.assign(rollback_bytes_per_slot() / 4 * size_t(limits.max_seqs), 0.f);
  tap_rows_.assign(size_t(limits.max_batch_tokens) * taps_.size() * size_t(hidden_), 0.f);
  allocated_ = true;
}

LayerMemory ModelMemory::layer(size_t li) {
  const Part& p = parts_[li];
  LayerMemory m;
  if (p.recurrent) {
    m.states = states_ + p.state_offset;
    m.slot_stride = state_floats_per_slot_;
    m.rollback.mode = limits_.rollback;
    m.rollback.positions = limits_.spec_positions;
    if (m.rollback.positions > 0) {
      const bool lanes = m.rollback.mode == StateRollback::Lanes;
      m.rollback.base = rollback_.data() + (lanes ? p.state_offset : p.replay_offset);
      m.rollback.stride = lanes ? state_floats_per_slot_ : replay_floats_per_token_;
    }
  }
  if (p.kv_row > 0) {
    // Each attention layer owns a contiguous region [num_kv_blocks][block_size][row] of the
    // pool (block_size / dcp rows per block under decode context parallel).
    m.block_size = limits_.block_size / dcp_;
    const size_t layer_scale = size_t(m.block_size) * size_t(limits_.num_kv_blocks);
    m.kv = kv_pool_.get() + p.kv_offset * layer_scale;
    m.kv_dtype = kv_dtype_;
  }
  return m;
}

void ModelMemory::tap(size_t li, const ForwardBatch& batch, const float* x) {
  if (taps_.empty() || tap_of_layer_[li] < 0) return;
  const size_t T = taps_.size(), at = size_t(tap_of_layer_[li]), H = size_t(hidden_);
  for (const SeqChunk& sc : batch.seqs)
    for (int t = sc.token_offset + std::max(0, sc.num_tokens - tap_tail_); t < sc.token_offset + sc.num_tokens; ++t)
      std::memcpy(tap_rows_.data() + (size_t(t) * T + at) * H, x + size_t(t) * H, H * sizeof(float));
}

size_t ModelMemory::rollback_bytes_per_slot() const {
  const size_t per = limits_.rollback == StateRollback::Lanes ? state_floats_per_slot_ : replay_floats_per_token_;
  return per * size_t(limits_.spec_positions) * 4;
}

void ModelMemory::commit_speculative(int slot, int keep, ThreadPool* pool, std::vector<std::vector<float>>& scratch) {
  DS_CHECK(allocated_ && slot >= 0 && slot < limits_.max_seqs, "commit_speculative: bad slot " + std::to_string(slot));
  DS_CHECK(keep >= 0 && keep <= limits_.spec_positions,
           "commit_speculative: keep " + std::to_string(keep) + " outside [0, " + std::to_string(limits_.spec_positions) + "]");
  if (keep == 0 || state_floats_per_slot_ == 0) return;
  float* st = states_ + size_t(slot) * state_floats_per_slot_;
  const size_t positions = size_t(limits_.spec_positions);
  if (limits_.rollback == StateRollback::Lanes) {
    // The lane after the last accepted token is the committed state now.
    const float* lane = rollback_.data() + (size_t(slot) * positions + size_t(keep - 1)) * state_floats_per_slot_;
    // Every thread copies a share: the lane was written a whole verify step ago, the step's
    // weight reads have pushed it out to memory, and one core reads memory at about half the
    // machine's bandwidth (2 MB per sequence on bench-100m: the round's commit phase).
    // 16 KiB pieces, shared out whenever there are two: small enough that the test models'
    // commits (tiny-hybrid: 8k floats) take this path too.
    constexpr size_t kChunk = size_t(4) << 10;  // floats
    const size_t n = state_floats_per_slot_;
    parallel_items(pool, int((n + kChunk - 1) / kChunk), [&](int i, int) {
      const size_t b = size_t(i) * kChunk, e = std::min(n, b + kChunk);
      std::memcpy(st + b, lane + b, (e - b) * 4);
    }, kParallelMinWork);
    return;
  }
  const float* entries = rollback_.data() + size_t(slot) * positions * replay_floats_per_token_;
  for (size_t li : recurrent_) {
    const Part& p = parts_[li];
    p.mixer->replay_prepare(st + p.state_offset, entries + p.replay_offset, replay_floats_per_token_, keep);
  }
  if (replay_items_.empty()) return;
  const double work = parts_[replay_items_[0].layer].mixer->replay_item_work(keep);
  parallel_items(pool, int(replay_items_.size()), [&](int item, int thread) {
    const ReplayItem& r = replay_items_[size_t(item)];
    const Part& p = parts_[r.layer];
    p.mixer->replay_item(st + p.state_offset, entries + p.replay_offset, replay_floats_per_token_, keep, r.item,
                         scratch[size_t(thread)].data());
  }, work);
}

void ModelMemory::save_state(int slot, void* dst) const {
  DS_CHECK(allocated_ && slot >= 0 && slot < limits_.max_seqs, "save_state: bad slot " + std::to_string(slot));
  if (state_floats_per_slot_ == 0) return;  // no recurrent layers: nothing to copy (dst may be null)
  std::memcpy(dst, states_ + size_t(slot) * state_floats_per_slot_, state_floats_per_slot_ * 4);
}

void ModelMemory::load_state(int slot, const void* src) {
  DS_CHECK(allocated_ && slot >= 0 && slot < limits_.max_seqs, "load_state: bad slot " + std::to_string(slot));
  if (state_floats_per_slot_ == 0) return;
  std::memcpy(states_ + size_t(slot) * state_floats_per_slot_, src, state_floats_per_slot_ * 4);
}

// Block b of attention layer L: bytes [b * bs * row_L, (b + 1) * bs * row_L) of its region.
// Calls f(pointer, bytes) for each attention layer in order: the layout of a saved block.
template <typename F>
void ModelMemory::for_each_block_span(int block, F&& f) const {
  DS_CHECK(allocated_ && block >= 0 && block < limits_.num_kv_blocks, "KV block " + std::to_string(block) + " outside the pool");
  const size_t bs = size_t(limits_.block_size / dcp_), scale = bs * size_t(limits_.num_kv_blocks);
  for (const Part& p : parts_) {
    if (p.kv_row == 0) continue;
    f(kv_pool_.get() + p.kv_offset * scale + size_t(block) * bs * p.kv_row, bs * p.kv_row);
  }
}

void ModelMemory::save_block(int block, void* dst) const {
  auto* out = static_cast<std::byte*>(dst);
  for_each_block_span(block, [&](const std::byte* p, size_t n) {
    std::memcpy(out, p, n);
    out += n;
  });
}

void ModelMemory::load_block(int block, const void* src) {
  const auto* in = static_cast<const std::byte*>(src);
  for_each_block_span(block, [&](std::byte* p, size_t n) {
    std::memcpy(p, in, n);
    in += n;
  });
}

}  // namespace ds
