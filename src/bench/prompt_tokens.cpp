#include "bench/prompt_tokens.h"

#include "bench/hash.h"
#include "core/error.h"

namespace ds::bench {

TokenRange TokenRange::for_vocab(int64_t vocab_size) {
  DS_CHECK(vocab_size >= 32, "vocabulary size " + std::to_string(vocab_size) + " is too small");
  const int64_t margin = vocab_size / 16;
  return {static_cast<int32_t>(margin), static_cast<int32_t>(vocab_size - margin)};
}

PromptTokens::PromptTokens(uint64_t seed, int64_t block_size, TokenRange range,
                           std::unordered_set<uint64_t> shared_ids)
    : seed_(seed), block_size_(block_size), range_(range), shared_(std::move(shared_ids)) {
  DS_CHECK(block_size > 0, "block size must be positive");
  DS_CHECK(range.hi > range.lo && range.lo >= 0, "empty token id range");
}

uint64_t PromptTokens::block_key(uint64_t hash_id, uint64_t play) const {
  return shared_.count(hash_id) ? mix64(hash_id, 0x5A4EDull) : mix64(hash_id, mix64(play, 0x91A7ull));
}

void PromptTokens::append_block(uint64_t key, int64_t count, std::vector<int32_t>& out) const {
  const uint64_t span = static_cast<uint64_t>(range_.hi - range_.lo);
  const uint64_t base = mix64(seed_, key);
  for (int64_t j = 0; j < count; ++j)
    out.push_back(range_.lo + static_cast<int32_t>(mix64(base, static_cast<uint64_t>(j)) % span));
}

std::vector<int32_t> PromptTokens::build(const TraceRequest& r, uint64_t play,
                                         std::vector<uint64_t>* full_block_keys) const {
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(r.input_tokens));
  uint64_t key = mix64(play, 0xF111ull);
  for (int64_t i = 0; i * block_size_ < r.input_tokens; ++i) {
    const int64_t count = std::min(block_size_, r.input_tokens - i * block_size_);
    key = static_cast<size_t>(i) < r.hash_ids.size() ? block_key(r.hash_ids[i], play)
                                                     : mix64(key, static_cast<uint64_t>(i));
    append_block(key, count, out);
    if (full_block_keys && count == block_size_) full_block_keys->push_back(key);
  }
  return out;
}

}  // namespace ds::bench
