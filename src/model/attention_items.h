// Splits a step's attention into independent items: a decode row is one item per KV head; a
// prefill chunk is one item per (tile of queries, KV head); a speculative chunk is one item
// per KV head with all its tokens, run by attention_decode_rows (each row equal to what decode
// would give, the keys read once for all rows). Items depend only on their own sequence, so a
// sequence's result never depends on what it is batched with.
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/arena.h"
#include "kernels/attention.h"
#include "model/model.h"

namespace ds {

struct AttnItem {
  int32_t seq;    // index into batch.seqs
  int32_t t0, t1; // query tokens of the chunk, relative to its first token
  int32_t group;  // KV head (GQA) or head group (MLA)
};

// A decode row or a speculative chunk: its rows attend as decode does (attention_decode /
// attention_decode_rows over the whole context), one item per KV head or head group.
inline bool attends_as_decode(const SeqChunk& sc) { return sc.num_tokens == 1 || sc.spec_lane >= 0; }

// Returns the item count; items come from the arena.
inline int plan_attention(const ForwardBatch& batch, int groups, int nq_per_group, Arena& arena, AttnItem** out) {
  const int tile = attention_prefill_tile(nq_per_group);
  int n = 0;
  auto tile_of = [&](const SeqChunk& sc) { return sc.spec_lane >= 0 ? std::max(1, sc.num_tokens) : tile; };
  for (const SeqChunk& sc : batch.seqs) n += ((sc.num_tokens + tile_of(sc) - 1) / tile_of(sc)) * groups;
  AttnItem* items = arena.alloc<AttnItem>(size_t(std::max(n, 1)));
  int i = 0;
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const int T = batch.seqs[s].num_tokens, tl = tile_of(batch.seqs[s]);
    for (int t0 = 0; t0 < T; t0 += tl)
      for (int g = 0; g < groups; ++g) items[i++] = {int32_t(s), int32_t(t0), int32_t(std::min(T, t0 + tl)), int32_t(g)};
  }
  *out = items;
  return n;
}

}  // namespace ds
