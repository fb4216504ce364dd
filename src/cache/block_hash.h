// Chained hashes of full KV blocks: h_i = H(h_{i-1}, tokens of block i), xxHash64. A block's
// hash names its whole prefix, so equal hashes mean equal token histories up to the block's end
// and one lookup per block walks a prompt's cached prefix. The chain starts from a seed that
// names the model (and anything else that changes what a block holds), so two models never
// share an entry.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace ds {

// The hash of a block of tokens that follows a prefix whose last block hashed to `parent`.
uint64_t chain_block_hash(uint64_t parent, std::span<const int32_t> block_tokens);

// A seed from a model's identity: hash any bytes that distinguish one model's cache from
// another's (model type, shapes, dtype, block size).
uint64_t block_hash_seed(std::span<const uint64_t> identity);

// Extends hashes (the chain of tokens' leading full blocks, as far as already computed) to
// cover every full block of tokens. Tokens only ever grow at the end, so earlier entries stay.
void extend_block_hashes(uint64_t seed, std::span<const int32_t> tokens, int block_size,
                         std::vector<uint64_t>* hashes);

}  // namespace ds
