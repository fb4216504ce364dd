#include "cache/block_hash.h"

#include <xxhash.h>

namespace ds {

uint64_t chain_block_hash(uint64_t parent, std::span<const int32_t> block_tokens) {
  // The parent is the xxHash seed: one pass over the block's tokens, no concatenation buffer.
  return XXH64(block_tokens.data(), block_tokens.size_bytes(), parent);
}

uint64_t block_hash_seed(std::span<const uint64_t> identity) {
  return XXH64(identity.data(), identity.size_bytes(), 0x64656c7461736576ull);  // "deltasev"
}

void extend_block_hashes(uint64_t seed, std::span<const int32_t> tokens, int block_size,
                         std::vector<uint64_t>* hashes) {
  const size_t full = tokens.size() / size_t(block_size);
  for (size_t i = hashes->size(); i < full; ++i) {
    const uint64_t parent = i == 0 ? seed : (*hashes)[i - 1];
    hashes->push_back(chain_block_hash(
        parent, std::span<const int32_t>(tokens.data() + i * size_t(block_size), size_t(block_size))));
  }
}

}  // namespace ds
