// What the server hands the engine, and what the engine streams back.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/sampling_params.h"

namespace ds {

namespace grammar {
class TokenConstraint;  // grammar/token_constraint.h
}

using Clock = std::chrono::steady_clock;

enum class FinishReason {
  None,
  Stop,       // an end-of-sequence / stop token (or, in the server, a stop string)
  Length,     // max_tokens reached, or the sequence filled max_model_len
  Cancelled,  // the client went away or the server stopped the request
  Error,      // the engine could not run it; RequestStream carries the message
};

const char* finish_reason_name(FinishReason r);

struct Request {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 16;           // new tokens at most; the engine also stops at max_model_len
  bool ignore_eos = false;       // keep going through stop_token_ids and the model's eos ids
  std::vector<int32_t> stop_token_ids;  // besides the model's eos ids (e.g. a chat end-of-turn)
  // -1: no logprobs. n >= 0: the chosen token's logprob plus the n most likely alternatives.
  int logprobs = -1;
  // Constrained decoding (response_format, forced tool calls): only tokens the constraint
  // allows are sampled, and an end token only once it is complete. The request owns its
  // constraint; the engine thread steps it.
  std::shared_ptr<grammar::TokenConstraint> constraint;
  // Sequences whose logits are processed (penalties, bias, a constraint) decode one token per
  // step: speculative verification compares raw target and draft distributions.
  bool processes_logits() const { return constraint != nullptr || sampling.penalized(); }
};

struct TokenOutput {
  int32_t token = 0;
  float logprob = 0.f;  // model log-softmax of the chosen token (when logprobs were asked for)
  std::vector<std::pair<int32_t, float>> top;
};

}  // namespace ds
