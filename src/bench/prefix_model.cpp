#include "bench/prefix_model.h"

#include "bench/hash.h"

namespace ds::bench {

int64_t PrefixCacheModel::observe(const std::vector<uint64_t>& keys, int64_t block_size) {
  std::vector<uint64_t> chain(keys.size());
  uint64_t prev = 0;
  for (size_t i = 0; i < keys.size(); ++i) chain[i] = prev = mix64(prev, keys[i]);
  std::lock_guard lock(mu_);
  size_t hits = 0;
  while (hits < chain.size() && seen_.count(chain[hits])) ++hits;
  seen_.insert(chain.begin(), chain.end());
  return static_cast<int64_t>(hits) * block_size;
}

}  // namespace ds::bench
