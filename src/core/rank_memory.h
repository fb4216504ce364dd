// One rank's memory, as /v1/models and /metrics report it (distributed/ fills it; one process has no
// ranks and reports none).
#pragma once
#include <cstdint>

namespace ds {

struct RankMemory {
  int rank = 0;
  int numa_node = -1;          // -1: not pinned
  uint64_t weights_bytes = 0;  // this rank's shard of the weights
  uint64_t kv_pool_bytes = 0;  // its share of every KV block
  uint64_t state_bytes = 0;    // its share of the slots' recurrent state (and rollback)
};

}  // namespace ds
