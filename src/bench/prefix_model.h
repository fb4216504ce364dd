// The theoretical prefix hit rate: what an unbounded prefix cache would hold for each prompt,
// given the blocks sent before it. It is the ceiling the server's reported hit rate is read
// against.
#pragma once
#include <cstdint>
#include <mutex>
#include <unordered_set>
#include <vector>

namespace ds::bench {

class PrefixCacheModel {
 public:
  // Tokens of this prompt found in the cache: its leading full blocks whose whole prefix was
  // sent before. Records the prompt's blocks for later prompts. Thread-safe; call in send order.
  int64_t observe(const std::vector<uint64_t>& full_block_keys, int64_t block_size);

 private:
  std::mutex mu_;
  std::unordered_set<uint64_t> seen_;  // chained keys: a block only hits behind a hit prefix
};

}  // namespace ds::bench
