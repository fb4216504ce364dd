#include "engine/cache_identity.h"

#include <functional>
#include <string>

#include "cache/block_hash.h"

namespace ds {

uint64_t cache_chain_seed(const Model& model, int block_size) {
  const ModelConfig& mc = model.config();
  const uint64_t identity[] = {std::hash<std::string>{}(mc.model_type), uint64_t(mc.vocab_size),
                               uint64_t(mc.hidden_size), uint64_t(mc.num_layers),
                               uint64_t(model.weights_bytes()), uint64_t(block_size)};
  return block_hash_seed(identity);
}

}  // namespace ds
