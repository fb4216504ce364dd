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

#include "cache/cache_memory.h"
#include "core/activation_dtype.h"
#include "core/kv_dtype.h"
#include "core/rank_memory.h"
#include "model/config.h"
#include "model/forward_profile.h"
#include "model/shard.h"

namespace ds {

class ThreadPool;

// One sequence's share of a forward step.
struct SeqChunk {
  int32_t slot = 0;                 // state slot in [0, max_seqs): KDA recurrent + conv state
  const int32_t* block_table = nullptr;  // KV block ids for positions [0, start_pos + num_tokens)
  int32_t start_pos = 0;            // tokens of this sequence already in its cache and state
  int32_t num_tokens = 0;           // tokens in this chunk (1 for a decode row)
  int32_t token_offset = 0;         // index of the chunk's first token in ForwardBatch::tokens
  int32_t num_logits = 1;           // logits rows wanted: 0, 1 (last token) or num_tokens (all)
  // >= 0: a speculative chunk (docs/speculative-decoding.md). Its tokens run one at a time with
  // the decode arithmetic (recurrence, per-row attention), so each row equals what a decode
  // step would give; the slot's committed KDA state is left untouched, and token i's state is
  // kept as rollback lane spec_lane + i (lanes), or its inputs are kept for a replay (replay,
  // spec_lane 0 only). The chunk starts from lane spec_lane - 1, or the committed state at 0.
  // commit_speculative() then makes the state after the accepted tokens the committed one.
  int32_t spec_lane = -1;
};

struct ForwardBatch {
  std::span<const int32_t> tokens;  // all chunks' tokens, concatenated
  std::span<const SeqChunk> seqs;
};

// How a speculative chunk keeps what a partial accept needs to roll the KDA state back.
enum class StateRollback {
  Lanes,   // the state after every speculative token ((k+1) states per sequence)
  Replay,  // every speculative token's conv input, k, v, g and beta; commit replays the accepted
};

// Runtime sizes, fixed at start-up; forward() never allocates beyond them.
struct RuntimeLimits {
  int max_seqs = 8;            // state slots
  int max_batch_tokens = 2048; // tokens in one forward step
  int max_logit_rows = 64;     // logits rows in one forward step
  int num_kv_blocks = 256;     // KV blocks in the pool, shared by all attention layers
  int block_size = 64;         // tokens per KV block
  int threads = 0;             // 0 = all available cores
  int spec_positions = 0;      // speculative tokens per slot and step (0: none)
  StateRollback rollback = StateRollback::Lanes;
};

// The model is also the memory behind the cache's block ids and state slots (CacheMemory:
// kv_bytes_per_block, state_bytes_per_slot, save/load of a state or a block).
class Model : public CacheMemory {
 public:
  // Loads config.json + safetensors from dir. Throws ds::Error naming what is wrong.
  static std::unique_ptr<Model> load(const std::string& dir, int threads = 0);
  // The same, running on another model's threads (a draft beside its target: one pool, so the
  // two never spin against each other on the same cores).
  static std::unique_ptr<Model> load_sharing_threads(const std::string& dir, const Model& other);
  // One tensor-parallel shard of a model folder (model/shard.h): its heads, FFN columns,
  // experts and vocabulary rows, joined to the other ranks' by comm inside forward(). On rank
  // 0 forward() writes whole logits rows; elsewhere `logits` is not written. Cache memory
  // (save/load of states and blocks) is this shard's own part.
  // Decode context parallel (shard.dcp > 1): dcp_comm joins the rank's dcp group.
  static std::unique_ptr<Model> load_shard(const std::string& dir, int threads, TensorShard shard,
                                           std::shared_ptr<Collectives> comm, std::shared_ptr<Collectives> dcp_comm = nullptr);
  virtual std::shared_ptr<ThreadPool> thread_pool() const { return nullptr; }
  ~Model() override = default;

  virtual const ModelConfig& config() const = 0;
  virtual size_t weights_bytes() const = 0;
  // A hash of the checkpoint's bytes (every safetensors file, header and data): two checkpoints
  // of the same shape but other weights differ here, so their cached entries never mix.
  virtual uint64_t weights_fingerprint() const = 0;
  // Weight bytes one decode step reads (all dense weights, the routed experts' share counted
  // as num_experts_per_token / num_experts): the numerator of decode_read_gb_per_s.
  virtual size_t decode_weight_bytes() const = 0;

  // The KV cache's element type (f32 until set). Set it before allocate(): it sizes
  // kv_bytes_per_block and the pool.
  virtual void set_kv_dtype(KvDtype t) = 0;
  virtual KvDtype kv_dtype() const = 0;

  // How activations meet the bf16 weights (core/activation_dtype.h; f32 until set). Any time
  // between steps; F32 and quantized weights are unaffected.
  virtual void set_activation_dtype(ActivationDtype a) = 0;
  virtual ActivationDtype activation_dtype() const = 0;

  // Allocates KV pool, state slots and activation arena. Call once before forward().
  virtual void allocate(const RuntimeLimits& limits) = 0;
  virtual const RuntimeLimits& limits() const = 0;

  // Runs one step; writes sum(num_logits) rows of vocab_size floats into logits, in the order
  // of batch.seqs. A chunk with start_pos == 0 starts its slot from a zero state.
  virtual void forward(const ForwardBatch& batch, float* logits) = 0;

  // After a step with a speculative chunk in `slot`: the first `keep` of its tokens are
  // accepted, so the committed KDA state becomes the state after them (keep 0 leaves it as it
  // was). KV rows need nothing: rows past the accepted ones are rewritten before they are read.
  virtual void commit_speculative(int slot, int keep) = 0;
  // What a drafter on the target's hidden states reads (spec_decode/parallel_drafter.h).
  // Taps, set before allocate(): after each forward() the residual stream after each listed
  // layer (0-based), as [batch row][taps][hidden] floats, filled for the last `tail_rows` rows
  // of every chunk (the rows a drafter can use; the others hold stale values). None by
  // default, and then forward() copies nothing.
  virtual void set_hidden_taps(const std::vector<int>& layers, int tail_rows);
  virtual const float* hidden_taps() const { return nullptr; }
  // The token embedding (rows as f32) and the LM head (on rows the caller has normed): the
  // drafter shares them instead of holding copies.
  virtual void embed(std::span<const int32_t> ids, float* out) const;
  virtual void lm_head(const float* h, int rows, float* logits) const;

  // Bytes one slot holds for rollback beyond its committed state.
  virtual size_t rollback_bytes_per_slot() const = 0;
  // Under ranks (distributed/), each rank's memory; empty in one process.
  virtual std::vector<RankMemory> rank_memory() const { return {}; }
  // Where the last forward's time went (all zero for a model that does not measure it).
  virtual const ForwardProfile& last_profile() const {
    static const ForwardProfile none;
    return none;
  }
};

}  // namespace ds
