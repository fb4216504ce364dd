// A request as the scheduler tracks it: its tokens so far, how many of them are already in the
// model's cache and state, and the KV blocks and state slot it holds while running.
#pragma once
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "cache/prefix_cache.h"
#include "engine/request.h"
#include "engine/request_stream.h"
#include "engine/sampling_params.h"
#include "spec_decode/draft_length.h"

namespace ds {

// A sequence's speculative decoding state, in one place.
struct SequenceSpec {
  // With a draft model that mirrors the target: tokens the draft has fed. Level with
  // num_computed but after a round whose draft tokens were all accepted, when it is one behind
  // (the last draft token). Written by the speculator after every accept.
  int draft_computed = 0;
  // Rounds so far: draft tokens proposed and accepted (usage's prediction tokens).
  int drafted = 0;
  int accepted = 0;
  int rounds = 0;
  // Set by the speculator before each schedule: the most draft tokens this step may give the
  // sequence (-1: no bound beyond K; 0: decode one token), and an early method's proposal
  // (suffix drafting, the parallel drafter), which the scheduler copies into the verify chunk.
  int budget = -1;
  std::vector<int32_t> proposal;
  // Per-position acceptance of this sequence's rounds (auto's AcceptanceModel).
  AcceptanceModel::Counts acceptance;
};

struct Sequence {
  Request req;
  std::shared_ptr<RequestStream> stream;
  // prompt followed by every generated token. Kept whole so that a preempted sequence can be
  // recomputed from it: nothing it produced is lost.
  std::vector<int32_t> tokens;
  int num_prompt = 0;
  int num_computed = 0;  // tokens already fed to the model (its start_pos)
  // Speculative decoding's part (engine/speculation.h writes it; the scheduler reads it).
  SequenceSpec spec;
  std::vector<int32_t> blocks;
  int32_t slot = -1;

  PrefixCursor prefix;  // this sequence's place in the prefix cache
  // Prompt tokens found in the prefix cache at the first admission (-1: not admitted yet).
  int num_cached_tokens = -1;
  Rng rng;
  int num_preemptions = 0;
  // For penalties: each generated token's count, in first-seen order, and where each token
  // sits in it; every distinct token of prompt and output (repetition_penalty), filled at the
  // first sample.
  std::vector<std::pair<int32_t, int32_t>> output_counts;
  std::unordered_map<int32_t, int32_t> count_index;
  std::vector<int32_t> seen;
  bool seen_built = false;

  Clock::time_point arrival{};
  Clock::time_point last_token{};
  bool has_first_token = false;

  int num_generated() const { return int(tokens.size()) - num_prompt; }
  // Tokens not yet fed: the prompt (or its remainder) during prefill, 1 while decoding.
  int pending() const { return int(tokens.size()) - num_computed; }
};

}  // namespace ds
