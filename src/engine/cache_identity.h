// What a cached KV block or state snapshot depends on besides its tokens: the model's weights
// (their content, not only their shape), the KV layout and dtype, and the block size. Its hash seeds the block-hash chain (cache/block_hash.h), so entries of another
// model or layout, in memory or persisted by an earlier run, never match.
#pragma once
#include <cstdint>

#include "model/model.h"

namespace ds {

// With a draft, its weights and layout join the identity: cached blocks and states carry both.
uint64_t cache_chain_seed(const Model& model, int block_size, const Model* draft = nullptr);

}  // namespace ds
