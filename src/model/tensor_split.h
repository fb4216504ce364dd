// Which models split into how many tensor-parallel shards, and the shape one shard's layers see.
#pragma once
#include "model/config.h"
#include "model/shard.h"

namespace ds {

// Throws ds::Error naming the first size that `tp` ranks cannot split evenly (heads, KV heads,
// FFN width, experts, vocabulary). tp 1 always fits.
// dcp > 1 with tp > 1: a dcp group's ranks hold the same KV heads (GQA), so those split over
// tp / dcp only.
void check_tensor_split(const ModelConfig& c, int tp, int dcp = 1);

// The config one shard's layers are built from: per-rank heads and dense FFN width. Experts,
// vocabulary and hidden size stay whole (the MoE splits experts itself, the LM head by rows).
ModelConfig shard_config(const ModelConfig& c, const TensorShard& s);

}  // namespace ds
