// The model as the engine sees it: load a checkpoint directory, size the runtime (KV blocks,
// state slots, activation arena) once, then run forward steps over flattened batches.
//
// A batch mixes prefill chunks and decode rows of many sequences. The engine owns scheduling
// and block allocation (which block ids a sequence uses); the model owns the memory behind
// block ids and state slots, and all numerics.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"

namespace ds {

// One sequence's share of a forward step.
struct SeqChunk {
  int32_t slot = 0;                 // state slot in [0, max_seqs): KDA recurrent + conv state
  const int32_t* block_table = nullptr;  // KV block ids for positions [0, start_pos + num_tokens)
  int32_t start_pos = 0;            // tokens of this sequence already in its cache and state
  int32_t num_tokens = 0;           // tokens in this chunk (1 for a decode row)
  int32_t token_offset = 0;         // index of the chunk's first token in ForwardBatch::tokens
  int32_t num_logits = 1;           // logits rows wanted: 0, 1 (last token) or num_tokens (all)
};

struct ForwardBatch {
  std::span<const int32_t> tokens;  // all chunks' tokens, concatenated
  std::span<const SeqChunk> seqs;
};

// Runtime sizes, fixed at start-up; forward() never allocates beyond them.
struct RuntimeLimits {
  int max_seqs = 8;            // state slots
  int max_batch_tokens = 2048; // tokens in one forward step
  int max_logit_rows = 64;     // logits rows in one forward step
  int num_kv_blocks = 256;     // KV blocks in the pool, shared by all attention layers
  int block_size = 64;         // tokens per KV block
  int threads = 0;             // 0 = all available cores
};

class Model {
 public:
  // Loads config.json + safetensors from dir. Throws ds::Error naming what is wrong.
  static std::unique_ptr<Model> load(const std::string& dir, int threads = 0);
  virtual ~Model() = default;

  virtual const ModelConfig& config() const = 0;
  // Bytes of one KV block across all attention layers, and of one state slot across all KDA
  // layers: the engine sizes the pool from these.
  virtual size_t kv_bytes_per_block(int block_size) const = 0;
  virtual size_t state_bytes_per_slot() const = 0;
  virtual size_t weights_bytes() const = 0;
  // Weight bytes one decode step reads (all dense weights, the routed experts' share counted
  // as num_experts_per_token / num_experts): the numerator of decode_read_gb_per_s.
  virtual size_t decode_weight_bytes() const = 0;

  // Allocates KV pool, state slots and activation arena. Call once before forward().
  virtual void allocate(const RuntimeLimits& limits) = 0;
  virtual const RuntimeLimits& limits() const = 0;

  // Runs one step; writes sum(num_logits) rows of vocab_size floats into logits, in the order
  // of batch.seqs. A chunk with start_pos == 0 starts its slot from a zero state.
  virtual void forward(const ForwardBatch& batch, float* logits) = 0;

  // Copies one slot's whole KDA memory (recurrent + conv state) to or from a buffer of
  // state_bytes_per_slot() bytes: snapshots and speculative rollback build on these.
  virtual void save_state(int slot, void* dst) const = 0;
  virtual void load_state(int slot, const void* src) = 0;
  // Copies one KV block (every attention layer's rows for it) to or from a buffer of
  // kv_bytes_per_block(block_size) bytes: the disk tier behind the pool builds on these.
  virtual void save_block(int block, void* dst) const = 0;
  virtual void load_block(int block, const void* src) = 0;
};

}  // namespace ds
