// `--synthetic agentic-code`: a seeded generator of coding-agent sessions with layered prefixes.
//   [global system prompt + tool definitions]  shared by every session
//   [repository context]                       shared by the sessions of one repository group
//   [session context]                          one session's task
//   [turn inputs and outputs ...]              history that grows by each turn's input and output
// plus think / tool delays between turns and subagents forked off some turns.
// `--synthetic fixed`: independent requests of one prompt and output length (generate_fixed).
#pragma once
#include <cstdint>

#include "bench/workload.h"

namespace ds::bench {

// Defaults suit a small CPU model: a few thousand tokens of context, short outputs.
struct SyntheticConfig {
  uint64_t seed = 1;
  int sessions = 64;
  int64_t block_size = 64;
  int64_t system_tokens = 1024;
  int repos = 4;
  int64_t repo_tokens = 512;
  int64_t session_tokens = 128;
  int turns_min = 3;
  int turns_max = 8;
  int64_t turn_input_tokens = 96;  // mean new tokens per turn (tool results, user text)
  int64_t output_tokens = 32;      // mean tokens per response
  double think_s = 1.0;            // mean gap between a response and the next request
  double subagent_probability = 0.15;  // per turn
  int subagent_turns_max = 3;
  double background_probability = 0.25;  // a subagent the parent does not wait for
  // `--synthetic fixed`: every request exactly this long, no prefix shared with any other.
  int64_t fixed_input_tokens = 512;
  int64_t fixed_output_tokens = 256;
};

Workload generate_agentic_code(const SyntheticConfig& cfg);
// `--synthetic fixed`: `sessions` one-request sessions of fixed_input_tokens private tokens and
// fixed_output_tokens new ones (ignore_eos), no think time: the steady-decode throughput shape
// (every prompt its own, so the prefix cache cannot help).
Workload generate_fixed(const SyntheticConfig& cfg);

}  // namespace ds::bench
