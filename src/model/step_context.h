// Where every token of a forward step belongs, and the step's shared resources: what the
// model hands each layer (mixers and FFNs add their output into the residual stream x).
#pragma once
#include <chrono>
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
  double* kv_attention_seconds = nullptr;  // attention mixers add their KV-cache attention time here
  // Decode context parallel (model/dcp_attention.h): this rank holds every dcp-th token's KV
  // row; null or inactive: all of them.
  const AttentionShard* dcp = nullptr;
};

// Adds the time fn takes to *seconds (when given).
template <class F>
void timed_into(double* seconds, F&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  if (seconds) *seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace ds
