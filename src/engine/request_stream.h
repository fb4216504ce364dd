// The channel between the engine thread (producer) and the HTTP thread serving one request
// (consumer). The engine pushes tokens and, once, the end; the consumer drains them in batches
// and may cancel at any time (client disconnect, stop string). Cancelling only raises a flag: the
// engine notices at its next step and frees the request's blocks and slot there, so the model's
// state is only ever touched by the engine thread.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/request.h"

namespace ds {

struct StreamBatch {
  std::vector<TokenOutput> tokens;
  bool finished = false;
  FinishReason reason = FinishReason::None;
  std::string error;
};

class RequestStream {
 public:
  RequestStream(uint64_t id, int prompt_tokens) : id_(id), prompt_tokens_(prompt_tokens) {}

  uint64_t id() const { return id_; }
  int prompt_tokens() const { return prompt_tokens_; }
  // Prompt tokens the prefix cache supplied (usage.prompt_tokens_details.cached_tokens): set by
  // the engine at admission, before the first token is pushed.
  int cached_tokens() const { return cached_tokens_.load(std::memory_order_acquire); }
  void set_cached_tokens(int n) { cached_tokens_.store(n, std::memory_order_release); }

  // The furthest prompt position this request made resumable in the prefix cache (a state
  // snapshot it saved; whole blocks for a model without recurrent state); 0 when none.
  int cache_written_end() const { return cache_written_.load(std::memory_order_acquire); }
  void note_cache_written(int end) {
    int cur = cache_written_.load(std::memory_order_relaxed);
    while (end > cur && !cache_written_.compare_exchange_weak(cur, end, std::memory_order_release)) {
    }
  }

  // Speculative decoding: draft tokens accepted and rejected over the request (usage's
  // completion_tokens_details.{accepted,rejected}_prediction_tokens); set before the end.
  int accepted_prediction_tokens() const { return accepted_.load(std::memory_order_acquire); }
  int rejected_prediction_tokens() const { return rejected_.load(std::memory_order_acquire); }
  bool speculated() const { return speculated_.load(std::memory_order_acquire); }
  int speculative_rounds() const { return rounds_.load(std::memory_order_acquire); }
  void set_prediction_tokens(int accepted, int rejected, int rounds) {
    accepted_.store(accepted, std::memory_order_release);
    rejected_.store(rejected, std::memory_order_release);
    rounds_.store(rounds, std::memory_order_release);
    speculated_.store(true, std::memory_order_release);
  }

  // Consumer. Waits up to `timeout` for tokens or the end, then appends everything pending to
  // out (out->tokens is not cleared). Returns true when something arrived or the stream ended.
  bool wait(std::chrono::milliseconds timeout, StreamBatch* out);
  void cancel();
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

  // Producer (engine thread).
  void push(TokenOutput&& t);
  void finish(FinishReason reason, std::string error = {});
  bool finished() const;

 private:
  const uint64_t id_;
  const int prompt_tokens_;
  std::atomic<bool> cancelled_{false};
  std::atomic<int> cached_tokens_{0};
  std::atomic<int> cache_written_{0};
  std::atomic<int> accepted_{0}, rejected_{0}, rounds_{0};
  std::atomic<bool> speculated_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TokenOutput> pending_;
  bool finished_ = false;
  FinishReason reason_ = FinishReason::None;
  std::string error_;
};

}  // namespace ds
