// The RequestSender that talks to an OpenAI-compatible server: streaming /v1/completions with a
// token-id prompt, or /v1/chat/completions with text built to the same token count.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench/http_target.h"
#include "bench/lanes.h"

namespace ds::bench {

enum class Endpoint { completions, chat };

struct SenderConfig {
  HttpTarget target;
  Endpoint endpoint = Endpoint::completions;
  std::string model;
  double timeout_s = 600;
  std::optional<double> temperature;
  Clock::time_point origin;
  // Chat only: prompt token ids -> message text that the served tokenizer encodes back to them.
  std::function<std::string(const std::vector<int32_t>&)> to_text;
};

// The JSON body for one request: max_tokens = the recorded output, ignore_eos so the server
// generates all of it, and a final usage event (stream_options.include_usage).
std::string request_body(const SenderConfig& cfg, const std::vector<int32_t>& prompt,
                         int64_t max_tokens);

SenderFactory openai_sender_factory(SenderConfig cfg);

}  // namespace ds::bench
