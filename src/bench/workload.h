// The replayable workload every trace format and the synthetic generator produce: session trees
// of recorded model calls, described only by token counts and prefix-block identities.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

namespace ds::bench {

// One recorded model call. `input_tokens` is the whole prompt (history included), as the trace
// records it; `hash_ids[i]` names the content of prompt tokens [i*block, (i+1)*block).
struct TraceRequest {
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  std::vector<uint64_t> hash_ids;
  double delay_s = 0;  // think / tool time from the previous response's end to this send
  std::string stop_reason;
};

struct Spawn;

// A conversation: its own requests in order, plus subagents it starts along the way.
struct Session {
  std::string id;
  std::vector<TraceRequest> requests;
  std::vector<Spawn> spawns;
};

// A subagent started after parent request `after_request` completes (-1: before the first).
// Unless `background`, the parent's next request waits for it to finish (a join).
struct Spawn {
  int after_request = -1;
  bool background = false;
  Session child;
};

struct Workload {
  std::string source;  // file path or generator name, for the results
  std::string format;  // mooncake | agentic | synthetic:agentic-code
  int64_t block_size = 64;
  std::vector<Session> sessions;  // each is the root of one session tree
};

// Multiplies every token count and the block size by `factor` (rounded, at least 1) and keeps the
// hash ids, so the prefix-reuse structure is unchanged while prompts shrink or grow.
void scale_workload(Workload& w, double factor);

// Hash ids that occur in more than one session tree: shared prefixes (system prompts, repository
// context). The replay keeps their content identical across plays; every other block is private
// to one play of its tree, so recycling a trace does not inflate cache hits.
std::unordered_set<uint64_t> shared_hash_ids(const Workload& w);

// Requests in a tree, subagents included.
size_t count_requests(const Session& s);
size_t count_requests(const Workload& w);

}  // namespace ds::bench
