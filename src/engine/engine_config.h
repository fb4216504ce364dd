// Engine settings, as `deltaserve serve` takes them, and their start-up validation. Every rule
// here prevents a failure that would otherwise appear only under load.
#pragma once
#include <cstdint>
#include <string>

#include "cache/prefix_cache_options.h"
#include "core/activation_dtype.h"
#include "core/kv_dtype.h"
#include "spec_decode/spec_options.h"

namespace ds {

class Model;
struct RuntimeLimits;

inline constexpr double kAutoPoolCapGb = 4.0;
// With prefix caching, auto sizing gives the KV pool and the state snapshots at least this.
inline constexpr double kAutoCacheFloorGb = 1.0;

// How the model is spread over processes (distributed/), as /v1/models and /metrics report it.
struct RankLayout {
  int tp = 1, dcp = 1, ranks = 1;
  std::string numa = "unpinned: one process";
};

struct EngineConfig {
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  int max_model_len = 0;       // 0: the model's max_position_embeddings, or 8192 when unbounded
  // 0: auto, enough blocks for max_num_seqs full-length sequences (with prefix caching at least
  // kAutoCacheFloorGb), capped at kAutoPoolCapGb.
  double kv_pool_gb = 0;
  int threads = 0;             // 0: all available cores
  int max_waiting = 256;       // requests queued beyond this get 503 + Retry-After
  int block_size = 64;
  int num_kv_blocks = 0;       // 0: derived from kv_pool_gb; tests set it directly
  // --kv-cache-dtype: the attention KV cache's element type, for the target and the draft alike.
  KvDtype kv_cache_dtype = KvDtype::F32;
  // --activation-dtype: how activations meet bf16 weights, for the target and the draft alike.
  ActivationDtype activation_dtype = ActivationDtype::F32;
  // --total-cpu-dram-gb: the host memory (GB, 1e9 bytes) for the KV pool and the state
  // snapshots, summed over ranks as agentic benchmark plans give it (each rank gets its share;
  // distributed/ checks that share against the rank's NUMA node). 0: not set.
  double total_cpu_dram_gb = 0;
  RankLayout ranks;
  int profile_steps = 0;       // --profile-steps N: log the step profile's table every N steps (0: metrics only)

  // Prefix caching (docs/prefix-cache.md): cached KV blocks, state snapshots, their spill folder.
  PrefixCacheOptions prefix;
  // Speculative decoding (docs/speculative-decoding.md): a draft method (a draft model, suffix
  // drafting or a parallel drafter) proposes, the target verifies. Resolved before the engine
  // starts, with the speculator (engine/speculation.h).
  SpecOptions spec;
};

// Fills derived values (max_model_len default, num_kv_blocks) and checks every rule against
// the model (and the draft, whose KV and state share the pool's blocks and the snapshots).
// Throws ds::Error with one line naming the setting, its value and what it needs.
void resolve_engine_config(EngineConfig* cfg, const Model& model, const Model* draft = nullptr);

RuntimeLimits runtime_limits(const EngineConfig& cfg);

}  // namespace ds
