#include "bench/openai_sender.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace ds::bench {

using nlohmann::json;

std::string request_body(const SenderConfig& cfg, const std::vector<int32_t>& prompt,
                         int64_t max_tokens) {
  json j;
  j["model"] = cfg.model;
  if (cfg.endpoint == Endpoint::completions) {
    j["prompt"] = prompt;
  } else {
    DS_CHECK(cfg.to_text, "--endpoint chat needs a tokenizer to build message text");
    // One user message holding the whole history: its text is a pure function of the prompt
    // tokens, so turns that share a prefix share it byte for byte after the chat template too.
    j["messages"] = json::array({{{"role", "user"}, {"content", cfg.to_text(prompt)}}});
  }
  j["max_tokens"] = max_tokens;
  j["ignore_eos"] = true;
  j["stream"] = true;
  j["stream_options"] = {{"include_usage", true}};
  if (cfg.temperature) j["temperature"] = *cfg.temperature;
  return j.dump();
}

namespace {

class OpenAiSender : public RequestSender {
 public:
  explicit OpenAiSender(std::shared_ptr<const SenderConfig> cfg)
      : keep_(std::move(cfg)), cfg_(*keep_), client_(cfg_.target.client(cfg_.timeout_s)) {}

  StreamResult send(const std::vector<int32_t>& prompt, int64_t max_tokens,
                    const std::atomic<bool>& cancel) override {
    StreamRequest req;
    req.path = cfg_.target.path(cfg_.endpoint == Endpoint::completions ? "/v1/completions"
                                                                        : "/v1/chat/completions");
    req.body = request_body(cfg_, prompt, max_tokens);
    req.timeout_s = cfg_.timeout_s;
    req.cancel = &cancel;
    return post_stream(*client_, req, cfg_.origin);
  }

 private:
  std::shared_ptr<const SenderConfig> keep_;
  const SenderConfig& cfg_;
  std::unique_ptr<httplib::Client> client_;
};

}  // namespace

SenderFactory openai_sender_factory(SenderConfig cfg) {
  auto shared = std::make_shared<const SenderConfig>(std::move(cfg));
  return [shared]() -> std::unique_ptr<RequestSender> {
    return std::make_unique<OpenAiSender>(shared);
  };
}

}  // namespace ds::bench
