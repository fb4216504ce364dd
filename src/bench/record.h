// One request the benchmark sent, as requests.jsonl stores it and the metrics read it.
#pragma once
#include <cstdint>
#include <string>

#include "bench/sse_client.h"

namespace ds::bench {

struct RequestRecord {
  int lane = 0;
  std::string session;  // trace session id (subagents: parent/child)
  uint64_t play = 0;    // which replay of the tree; unique within a run point
  int turn = 0;         // index of the request in its session
  int depth = 0;        // 0 for the root conversation, 1 for its subagents, ...
  bool warmup = false;  // primes the cache; left out of every metric
  int64_t input_tokens = 0;
  int64_t max_tokens = 0;
  int64_t theoretical_cached_tokens = 0;  // PrefixCacheModel's answer for this prompt
  StreamResult result;
};

}  // namespace ds::bench
