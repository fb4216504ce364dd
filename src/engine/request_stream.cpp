#include "engine/request_stream.h"

namespace ds {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::None: return "none";
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "unknown";
}

bool RequestStream::wait(std::chrono::milliseconds timeout, StreamBatch* out) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !pending_.empty() || finished_; });
  bool got = !pending_.empty();
  for (auto& t : pending_) out->tokens.push_back(std::move(t));
  pending_.clear();
  if (finished_ && !out->finished) {
    out->finished = true;
    out->reason = reason_;
    out->error = error_;
    got = true;
  }
  return got;
}

void RequestStream::cancel() { cancelled_.store(true, std::memory_order_release); }

void RequestStream::push(TokenOutput&& t) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    pending_.push_back(std::move(t));
  }
  cv_.notify_all();
}

void RequestStream::finish(FinishReason reason, std::string error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    reason_ = reason;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

bool RequestStream::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

}  // namespace ds
