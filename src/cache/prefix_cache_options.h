// The prefix cache's settings as `deltaserve serve` takes them (docs/prefix-cache.md): cached KV
// blocks, recurrent-state snapshots, and the disk tier behind both.
#pragma once
#include <string>

namespace ds {

struct PrefixCacheOptions {
  bool enabled = true;
  int snapshot_interval = 8;   // blocks between prefill snapshots (0: prompt ends and branch points only)
  // Cache what decode computes: the state each time decode fills a block, and that block.
  // Off: only prefill results are reused, each bit-identical to recomputing it.
  bool decode_snapshots = true;
  // Memory for state snapshots. 0: auto (resolve_engine_config). Ignored for a model without
  // recurrent layers.
  double state_cache_gb = 0;
  int num_state_snapshots = -1;  // -1: derived from state_cache_gb; tests set it directly
  // The disk tier behind the pool and the snapshots: evicted blocks and states go there, and
  // everything cached is written there at shutdown, so a restart starts warm. Empty: no tier.
  std::string disk_tier_dir;
  double disk_tier_gb = 16;
};

// Throws ds::Error("invalid settings: ...") naming the flag, for settings that contradict each
// other or are out of range; sizing (num_state_snapshots) is the engine's.
void validate_prefix_cache_options(const PrefixCacheOptions& o);

}  // namespace ds
