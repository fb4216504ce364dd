// What the transport hands the application and takes back: a parsed request (headers and the
// whole body, already bounded by the transport's limits) and a response that is either a body
// or a stream the application writes into from its worker thread.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ds::http {

struct Header {
  std::string name, value;
};

// ASCII case-insensitive equality, as HTTP compares header names.
bool iequals(std::string_view a, std::string_view b);

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: "/v1/models/x?y=1"
  std::string path;    // the target's path, percent-decoded: "/v1/models/x"
  std::string query;   // after '?', as sent
  std::vector<Header> headers;
  std::string body;

  // The first value of a header (case-insensitive name), or "" when absent.
  std::string header(std::string_view name) const;
  bool has_header(std::string_view name) const;

  // True once the client has closed its end of the connection (or the connection failed or was
  // closed by the server): the answer can no longer be delivered, so work on it should stop.
  // A client that half-closes after sending its request counts as gone.
  bool client_gone() const { return gone_ && gone_->load(std::memory_order_acquire); }

  std::shared_ptr<const std::atomic<bool>> gone_;  // set by the transport
};

// Where a streamed response's bytes go. Used from the worker thread that runs the handler.
class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  // Queues bytes for the client (one chunk of the chunked body). Blocks while the client is
  // behind by more than the transport's bound. False: the client is gone or stopped reading for
  // longer than the write deadline; nothing more will be delivered.
  virtual bool write(std::string_view bytes) = 0;
  virtual bool client_gone() const = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<Header> headers;  // besides Content-Type / Content-Length / Connection
  std::string body;
  // Set: the body is streamed (chunked transfer encoding) by this function, which runs on a
  // worker thread and returns when the stream is over; `body` is then unused.
  std::function<void(ChunkSink&)> stream;
  bool close = false;  // close the connection after this response

  void set_header(std::string name, std::string value) { headers.push_back({std::move(name), std::move(value)}); }
  void set_content(std::string b, std::string type) {
    body = std::move(b);
    content_type = std::move(type);
  }
};

}  // namespace ds::http
