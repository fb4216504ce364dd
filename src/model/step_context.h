// Where every token of a forward step belongs, and the step's shared resources: what the
// model hands each layer (mixers and FFNs add their output into the residual stream x).
#pragma once
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace ds {

// Where every token of the step belongs.
struct StepContext {
  const ForwardBatch* batch = nullptr;
  int num_tokens = 0;
  const int32_t* token_seq = nullptr;  // [num_tokens] index into batch->seqs
  const int32_t* token_pos = nullptr;  // [num_tokens] absolute position in its sequence
  ThreadPool* pool = nullptr;
  Arena* arena = nullptr;
  std::vector<std::vector<float>>* thread_scratch = nullptr;  // per thread, sized at allocate()
};

}  // namespace ds
