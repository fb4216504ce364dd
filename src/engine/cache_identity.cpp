#include "engine/cache_identity.h"

#include <functional>
#include <string>

#include "cache/block_hash.h"

namespace ds {

uint64_t cache_chain_seed(const Model& model, int block_size, const Model* draft) {
  const ModelConfig& mc = model.config();
  // The weights' content (not just their shape: a restart on another checkpoint of the same
  // shape must not reuse this one's KV or states), the KV and state layout (f32 rows of these
  // sizes), and the block size.
  constexpr uint64_t kKvDtypeF32 = 0x6633320000000001ull;  // bump when the cache's dtype changes
  const uint64_t identity[] = {std::hash<std::string>{}(mc.model_type),
                               uint64_t(mc.vocab_size),
                               uint64_t(mc.hidden_size),
                               uint64_t(mc.num_layers),
                               uint64_t(model.weights_bytes()),
                               model.weights_fingerprint(),
                               kKvDtypeF32,
                               uint64_t(model.kv_bytes_per_block(block_size)),
                               uint64_t(model.state_bytes_per_slot()),
                               uint64_t(block_size)};
  const uint64_t seed = block_hash_seed(identity);
  if (!draft) return seed;
  const uint64_t with_draft[] = {seed,
                                 0x6472616674000001ull,  // "draft"
                                 uint64_t(draft->weights_bytes()),
                                 draft->weights_fingerprint(),
                                 uint64_t(draft->kv_bytes_per_block(block_size)),
                                 uint64_t(draft->state_bytes_per_slot())};
  return block_hash_seed(with_draft);
}

}  // namespace ds
