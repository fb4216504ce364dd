// One streaming completion over HTTP: sends the JSON body, parses the SSE `data:` events as they
// arrive, and times them. The caller turns the times into TTFT / ITL / E2E (metrics.h).
#pragma once
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ds::bench {

using Clock = std::chrono::steady_clock;

// Splits an SSE byte stream into the payloads of its `data:` fields, one call per event.
// Handles events split across reads, CRLF line ends, comments and multi-line data.
class SseParser {
 public:
  explicit SseParser(std::function<void(const std::string& data)> on_event)
      : on_event_(std::move(on_event)) {}
  void feed(const char* bytes, size_t n);
  void finish();  // dispatches an event left open when the stream ended without a blank line

 private:
  void line(std::string_view l);
  std::function<void(const std::string&)> on_event_;
  std::string buf_;
  std::string data_;
  bool has_data_ = false;
};

struct StreamResult {
  int status = 0;     // HTTP status; 0 when no response arrived
  std::string error;  // empty when the request completed normally
  bool context_overflow = false;
  bool cancelled = false;  // stopped by the benchmark (end of run), not by the server
  double send_s = -1;      // seconds since the run's origin
  double end_s = -1;
  std::vector<double> chunk_s;  // arrival of each event that carried generated text
  int64_t prompt_tokens = -1;   // from the final usage event; -1 when not reported
  int64_t completion_tokens = -1;
  int64_t cached_tokens = -1;  // usage.prompt_tokens_details.cached_tokens
  std::string finish_reason;
  std::string text;  // the generated text (completions' text, chat deltas' content), joined
};

struct StreamRequest {
  std::string path;  // e.g. /v1/completions
  std::string body;  // JSON with "stream": true
  double timeout_s = 600;
  const std::atomic<bool>* cancel = nullptr;  // set by the run to abandon in-flight requests
};

// True when an error body says the prompt did not fit the server's context window (the phrases
// OpenAI-compatible servers use).
bool is_context_overflow(const std::string& error_text);

StreamResult post_stream(httplib::Client& client, const StreamRequest& req, Clock::time_point origin);

}  // namespace ds::bench
