// `serve --request-log FILE`: one JSON line per finished generation request (its API, model,
// session, prompt and cached tokens, output tokens, time to first token, total time, how it
// ended). What an operator or a benchmark reads to follow agent sessions turn by turn; the
// prompt and the output themselves are never written.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdio>
#include <mutex>
#include <string>

namespace ds::server {

class RequestLog {
 public:
  RequestLog() = default;
  ~RequestLog();
  RequestLog(const RequestLog&) = delete;
  RequestLog& operator=(const RequestLog&) = delete;

  // Appends to `path` (created when missing); ds::Error when it cannot be opened.
  void open(const std::string& path);
  bool enabled() const { return file_ != nullptr; }
  // One line, flushed at once, so a reader sees each request as it ends.
  void write(const nlohmann::json& line);

 private:
  std::mutex mu_;
  std::FILE* file_ = nullptr;
};

}  // namespace ds::server
