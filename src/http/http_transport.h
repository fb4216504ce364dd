// The HTTP/1.1 server under `deltaserve serve`: Boost.Asio sockets with Boost.Beast's request
// parser, written for clients that may be slow, hostile or gone.
//
// - I/O threads (few) accept, read and write every connection asynchronously; a connection
//   that is waiting or trickling costs a socket and a buffer, never a thread.
// - Handlers that may block run on a worker pool; cheap ones (health, metrics) run on the I/O
//   thread, so they answer however busy the workers are.
// - Limits while reading, whatever the framing: header bytes and count, body bytes (chunked
//   bodies included), one deadline from a request's first byte to its last, an idle deadline
//   between requests on a keep-alive connection, and a deadline on every write.
// - At most max_connections open: past it, the connection that has waited longest for its
//   request is closed to make room (a new client beats a stalled one); when every connection
//   is busy with a response, the newcomer gets 503 and is closed.
// - Requests pipelined on one connection are answered in order. While a request is handled the
//   connection keeps reading, so a client that hangs up is seen at once (HttpRequest::client_gone).
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "http/http_message.h"

namespace ds::http {

struct TransportOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  int io_threads = 1;
  int max_workers = 512;      // handler threads: a streamed response holds one for its life
  bool worker_batch_policy = false;
  int max_connections = 1024;  // lowered to fit the open-file limit at bind()
  int listen_backlog = 256;    // the kernel's accept queue
  std::chrono::milliseconds request_timeout{30000};    // first byte of a request to its last
  std::chrono::milliseconds keepalive_timeout{60000};  // idle between requests (and before the first)
  std::chrono::milliseconds write_timeout{30000};      // any single write to the client
  size_t max_header_bytes = 64 << 10;  // request line and headers together
  int max_header_count = 100;
  size_t max_body_bytes = 32u << 20;
  size_t max_queued_stream_bytes = 1 << 20;  // a stream's writer waits past this much unsent
  size_t max_pipelined_bytes = 1 << 20;      // read ahead while a request is handled
};

// What the application plugs in. Every function must be safe to call from several threads.
struct HttpApp {
  // After the headers, before the body is read: a response refuses the request (the connection
  // is then closed, its body unread). Runs on an I/O thread.
  std::function<std::optional<HttpResponse>(const HttpRequest&)> screen;
  // True: handle() may run on the I/O thread (it never blocks).
  std::function<bool(const HttpRequest&)> runs_inline;
  std::function<void(const HttpRequest&, HttpResponse&)> handle;
  // The response for an error the transport finds itself (400, 408, 413, 431, 500, 503).
  std::function<HttpResponse(int status, const std::string& message)> error;
  // Optional. Runs on every response to a request whose headers were read, whatever made it
  // (screen's refusal, handle(), error() while the body was read or for a handler that threw),
  // before its head is written: for headers that depend on the request's (CORS). Runs on an
  // I/O thread or a handler thread; what it throws is ignored.
  std::function<void(const HttpRequest&, HttpResponse&)> decorate;
};

// Counters since start (monotonic), for /metrics and tests.
struct TransportStats {
  uint64_t connections_accepted = 0;
  uint64_t connections_open = 0;
  uint64_t connections_evicted = 0;   // closed to make room at the cap
  uint64_t connections_refused = 0;   // 503 at the cap, every connection busy
  uint64_t request_timeouts = 0;      // request not received within request_timeout
  uint64_t write_timeouts = 0;
  uint64_t requests = 0;
  uint64_t oversized = 0;             // header or body over its limit
  uint64_t clients_gone = 0;          // client hung up while its request was handled
};

class HttpTransport {
 public:
  HttpTransport(TransportOptions opts, HttpApp app);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Binds and listens; returns the port. Throws ds::Error naming the address.
  int bind();
  // Starts the I/O threads (after bind()).
  void start();
  // Stops accepting, closes every connection, waits for the handlers (which see client_gone())
  // and joins all threads. Idempotent.
  void stop();

  int port() const;
  // Connections with a request in a handler or an answer being written.
  int responding() const;
  TransportStats stats() const;
  const TransportOptions& options() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds::http
