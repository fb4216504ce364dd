#include "engine/cache_identity.h"

#include <functional>
#include <string>

#include "cache/block_hash.h"

namespace ds {

uint64_t cache_chain_seed(const Model& model, int block_size, const Model* draft) {
  const ModelConfig& mc = model.config();
  // The weights' content (not just their shape: a restart on another checkpoint of the same
  // shape must not reuse this one's KV or states), the KV and state layout (rows of this
  // dtype and these sizes), and the block size.
  // The arrangement of a block's rows: 2 since GQA blocks hold each KV head's rows together
  // (model/gqa_mixer.h). Entries written with another arrangement are misses, never misread.
  constexpr uint64_t kKvLayout = 0x6b766c61796f0002ull;
  auto kv_dtype_tag = [](KvDtype t) -> uint64_t {
    switch (t) {
      case KvDtype::F32: return 0x6633320000000001ull;
      case KvDtype::BF16: return 0x6266313600000001ull;
      case KvDtype::Fp8E4M3: return 0x6670385f65346d33ull;
    }
    return 0;
  };
  const uint64_t identity[] = {std::hash<std::string>{}(mc.model_type),
                               uint64_t(mc.vocab_size),
                               uint64_t(mc.hidden_size),
                               uint64_t(mc.num_layers),
                               uint64_t(model.weights_bytes()),
                               model.weights_fingerprint(),
                               kv_dtype_tag(model.kv_dtype()),
                               kKvLayout,
                               uint64_t(model.kv_bytes_per_block(block_size)),
                               uint64_t(model.state_bytes_per_slot()),
                               uint64_t(block_size)};
  uint64_t seed = block_hash_seed(identity);
  // bf16 activations compute other KV rows and states from the same tokens (their entries
  // must not mix with f32's); f32's seed stays what it was, so existing disk tiers still hit.
  auto with_activations = [](uint64_t s, const Model& m) {
    if (m.activation_dtype() == ActivationDtype::F32) return s;
    const uint64_t mixed[] = {s, 0x6163743a62663136ull /* "act:bf16" */};
    return block_hash_seed(mixed);
  };
  seed = with_activations(seed, model);
  if (!draft) return seed;
  const uint64_t with_draft[] = {seed,
                                 0x6472616674000001ull,  // "draft"
                                 uint64_t(draft->weights_bytes()),
                                 draft->weights_fingerprint(),
                                 kv_dtype_tag(draft->kv_dtype()),
                                 uint64_t(draft->kv_bytes_per_block(block_size)),
                                 uint64_t(draft->state_bytes_per_slot())};
  return with_activations(block_hash_seed(with_draft), *draft);
}

}  // namespace ds
