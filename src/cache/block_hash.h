// Chained hashes of full KV blocks: h_i = H_key(h_{i-1}, tokens of block i). A block's hash names
// its whole prefix, so equal hashes mean equal token histories up to the block's end and one
// lookup per block walks a prompt's cached prefix. The chain starts from a seed that names the
// model (and anything else that changes what a block holds), so two models never share an entry.
//
// H is keyed SHA-256, truncated to 64 bits: the first 8 bytes (little-endian) of
// SHA-256(key || parent as 8 little-endian bytes || the block's tokens as int32 little-endian).
// A cache shared by clients is an oracle (cached_tokens, timing): with an unkeyed or
// non-cryptographic hash a client could craft a prompt whose block collides with another
// client's prefix and be served that prefix's KV and state. Without the 32-byte secret nobody
// can compute a hash offline, and online guessing needs ~2^64 / (cached blocks) tries.
// docs/prefix-cache.md gives the measured cost (about 0.3 us per 64-token block).
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ds {

// The chain's secret. Random per process; with a disk tier it is kept in the tier's folder
// (0600), so a restart finds its own entries again.
struct ChainKey {
  std::array<uint8_t, 32> bytes{};
  static ChainKey random();
  // Reads the key stored at path, or creates it there (exclusively, 0600, without following
  // links); a damaged key is replaced by a new one. Throws ds::Error when it cannot write.
  static ChainKey load_or_create(const std::string& path);
};

// The hash of a block of tokens that follows a prefix whose last block hashed to `parent`.
uint64_t chain_block_hash(const ChainKey& key, uint64_t parent, std::span<const int32_t> block_tokens);

// A seed from a model's identity: hash any bytes that distinguish one model's cache from
// another's (model type, shapes, weights' fingerprint, dtype, block size). Not secret.
uint64_t block_hash_seed(std::span<const uint64_t> identity);

// Extends hashes (the chain of tokens' leading full blocks, as far as already computed) to
// cover every full block of tokens. Tokens only ever grow at the end, so earlier entries stay.
void extend_block_hashes(const ChainKey& key, uint64_t seed, std::span<const int32_t> tokens, int block_size,
                         std::vector<uint64_t>* hashes);

}  // namespace ds
