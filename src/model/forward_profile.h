// Where the last forward's time went, by kind of layer part. The model rewrites it on every
// forward; the engine's step profiler reads it after each step. Kept always: two clock reads per
// layer part (tens of nanoseconds each) against steps of milliseconds.
#pragma once

namespace ds {

struct ForwardProfile {
  // kv_attention: the attention of GQA and MLA layers over the KV cache (their projections stay
  // under gqa / mla), which grows with context and concurrency where the projections do not.
  // rank_comm: tensor-parallel ranks' collectives (the residual allreduces and the logits
  // gather); zero in one process.
  enum Part { Embed, Norms, Kda, Mla, Gqa, KvAttention, DenseFfn, Moe, LmHead, RankComm, kParts };
  double seconds[kParts] = {};
  static const char* name(int part) {
    static const char* kNames[kParts] = {"embed", "norms", "kda", "mla", "gqa", "kv_attention", "dense_ffn", "moe", "lm_head", "rank_comm"};
    return kNames[part];
  }
};

}  // namespace ds
