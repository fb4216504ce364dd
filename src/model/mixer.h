// A layer's token mixer (KDA, MLA, GQA) as the model's layer loop and its runtime memory
// (model/model_memory.h) see it: what memory it needs (recurrent state per slot, KV bytes per
// token, replay inputs per speculative token), the step temporaries it takes, its forward over
// a batch, and the speculative replay commit. One virtual call per layer per step; the kernels
// inside stay concrete. A new mixer implements this in its own file and registers its
// MixerKind in model/layer_registry.cpp.
#pragma once
#include <cstddef>

#include "core/activation_dtype.h"
#include "core/kv_dtype.h"
#include "model/shard.h"
#include "model/forward_profile.h"
#include "model/model.h"
#include "model/step_context.h"

namespace ds {

// Where a recurrent layer keeps what speculative chunks need for rollback (model.h,
// StateRollback). Entry (slot s, position j) is at base + (s * positions + j) * stride; base
// already points at this layer's part.
struct RollbackArea {
  StateRollback mode = StateRollback::Lanes;
  int positions = 0;
  float* base = nullptr;  // lanes: states; replay: inputs (replay_floats() each)
  size_t stride = 0;
  float* at(int slot, int j) const { return base + (size_t(slot) * size_t(positions) + size_t(j)) * stride; }
};

// One layer's share of the runtime memory for a step (ModelMemory::layer). A recurrent mixer
// reads the state fields, an attention mixer the KV fields; the others are left empty.
struct LayerMemory {
  float* states = nullptr;  // this layer's state in slot 0; slot s at states + s * slot_stride
  size_t slot_stride = 0;
  RollbackArea rollback;
  std::byte* kv = nullptr;  // this layer's region of the pool, [num_blocks][block_size][row]
  int block_size = 0;       // rows of a block this rank holds (block_size / dcp)
  KvDtype kv_dtype = KvDtype::F32;
};

class Mixer {
 public:
  virtual ~Mixer() = default;
  // Adds the mixer's output for h into the residual x, over every row of the step.
  virtual void forward(const StepContext& ctx, const float* h, float* x, const LayerMemory& mem) const = 0;
  // The part of the forward profile its time goes to.
  virtual ForwardProfile::Part profile_part() const = 0;
  virtual size_t weight_bytes() const = 0;
  virtual void set_activation_dtype(ActivationDtype a) = 0;

  // Memory it needs: recurrent state floats per slot, replay floats per speculative token
  // (both 0 for attention), KV bytes per token (0 for a recurrent mixer).
  virtual size_t state_floats() const { return 0; }
  virtual size_t replay_floats() const { return 0; }
  virtual size_t kv_row_bytes(KvDtype) const { return 0; }
  // Arena floats a step of n rows takes, and per-thread scratch for contexts up to max_ctx
  // tokens, decode context parallel's share included.
  virtual size_t step_temp_floats(int n, const AttentionShard& dcp) const = 0;
  virtual size_t step_scratch_floats(int max_ctx, const AttentionShard& dcp) const = 0;

  // Replay commit (StateRollback::Replay) of a recurrent mixer: advances `state` (this layer's,
  // one slot) through the first `keep` kept tokens. replay_prepare runs once, then the
  // replay_items() independent items (any thread each; scratch: the thread's scratch), each
  // about replay_item_work(keep) flops.
  virtual int replay_items() const { return 0; }
  virtual double replay_item_work(int) const { return 0; }
  virtual void replay_prepare(float*, const float*, size_t, int) const {}
  virtual void replay_item(float*, const float*, size_t, int, int, float*) const {}
};

}  // namespace ds
