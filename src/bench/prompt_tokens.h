// Turns a recorded request into prompt token ids: block i of the prompt is a pure function of
// its block key, so equal hash ids give identical token blocks and the server's prefix cache sees
// the trace's real reuse.
#pragma once
#include <cstdint>
#include <unordered_set>
#include <vector>

#include "bench/workload.h"

namespace ds::bench {

// Token ids are drawn from [lo, hi). The lowest and highest sixteenth of a vocabulary are left
// out: byte-level BPE puts control bytes at the bottom and added special tokens (BOS, EOS, chat
// markers) at the top, and a random special token would change how the server reads the prompt.
struct TokenRange {
  int32_t lo = 0;
  int32_t hi = 0;
  static TokenRange for_vocab(int64_t vocab_size);
};

class PromptTokens {
 public:
  PromptTokens(uint64_t seed, int64_t block_size, TokenRange range,
               std::unordered_set<uint64_t> shared_ids);

  // The identity a block has in one play of a session tree. Ids shared between trees keep theirs
  // (a global system prompt stays one prompt); the rest are namespaced by the play, so a recycled
  // trace does not hit the cache its previous play left behind.
  uint64_t block_key(uint64_t hash_id, uint64_t play) const;

  // Exactly r.input_tokens ids. `full_block_keys` (optional) receives the keys of the prompt's
  // complete blocks, for the prefix-cache model. Blocks past the recorded hash ids (a trace whose
  // ids cover fewer tokens than it claims) get keys chained from the last recorded one.
  std::vector<int32_t> build(const TraceRequest& r, uint64_t play,
                             std::vector<uint64_t>* full_block_keys = nullptr) const;

  // The first `count` tokens of the block with this key.
  void append_block(uint64_t key, int64_t count, std::vector<int32_t>& out) const;

  int64_t block_size() const { return block_size_; }
  TokenRange range() const { return range_; }

 private:
  uint64_t seed_;
  int64_t block_size_;
  TokenRange range_;
  std::unordered_set<uint64_t> shared_;
};

}  // namespace ds::bench
