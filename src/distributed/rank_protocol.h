// The step protocol between rank 0 and the other ranks: rank 0 broadcasts one header per
// operation on the model (and a payload where the operation carries data); every rank then
// runs the same operation on its shard, so the collectives inside line up.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/rank_memory.h"
#include "model/model.h"

namespace ds::distributed {

enum class RankOp : uint32_t {
  Open = 1,         // payload: OpenRequest; every rank loads its shard, then reports
  SetKvDtype,       // a: KvDtype
  SetActivationDtype,  // a: ActivationDtype
  Allocate,         // payload: RuntimeLimits; every rank allocates, then reports
  Forward,          // payload: the step plan (encode_batch)
  Commit,           // a: slot, b: keep
  SaveState,        // a: slot; every rank's part is gathered on rank 0
  LoadState,        // a: slot; rank 0's buffer is scattered, a part per rank
  SaveBlock,        // a: block
  LoadBlock,        // a: block
  Close,            // drop the model
  Exit,             // leave the worker loop
};

struct OpHeader {
  uint32_t op = 0;
  int32_t a = 0, b = 0;
  uint32_t reserved = 0;
  uint64_t payload_bytes = 0;
};

struct OpenRequest {
  std::string model_dir;
  int tp = 1, dcp = 1;  // ranks: max(tp, dcp) (distributed/ranks.h)
  int threads = 0;   // per rank
  std::string numa;  // --numa-bind: auto, off, or a node per rank "0,1"
};
std::vector<char> encode_open(const OpenRequest& r);
OpenRequest decode_open(const std::vector<char>& bytes);

// A forward step as bytes: the batch's tokens and chunks, each with the block ids it reaches.
std::vector<char> encode_batch(const ForwardBatch& batch, int block_size);
// The decoded step: `batch` points into the other members.
struct DecodedBatch {
  std::vector<int32_t> tokens;
  std::vector<SeqChunk> seqs;
  std::vector<std::vector<int32_t>> tables;
  ForwardBatch batch;
};
void decode_batch(const std::vector<char>& bytes, DecodedBatch* out);

// What each rank tells rank 0 after Open and Allocate: an error (empty: none) and its memory.
struct RankReport {
  char error[480] = {};
  RankMemory memory;
  uint64_t decode_weight_bytes = 0;
  uint64_t kv_bytes_per_block = 0;  // at the limits' block size (after Allocate)
  uint64_t state_bytes_per_slot = 0;
  uint64_t rollback_bytes_per_slot = 0;
};

}  // namespace ds::distributed
