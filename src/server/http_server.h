// The HTTP front of `deltaserve serve`: the transport (src/http: asynchronous connections with
// limits and deadlines, handlers on a worker pool), the routes, and graceful draining.
#pragma once
#include <chrono>
#include <memory>

#include "http/http_transport.h"
#include "server/server_context.h"

namespace ds::server {

class HttpServer {
 public:
  HttpServer(Engine& engine, Tokenizer tokenizer, ServerOptions opts);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds opts.host:opts.port (port 0: any free port) and returns the port. Throws ds::Error
  // with one line naming the address.
  int bind();
  // Serves until stop(). Call after bind().
  void serve();
  // Starts serving on background threads and returns (tests).
  void start();

  // Graceful drain: new generation requests get 503 and /health turns 503 at once; requests in
  // flight run to completion for up to `grace`, then are cancelled; answers still being
  // written get a little longer; then every connection closes, however slow its client.
  void drain_and_stop(std::chrono::milliseconds grace);
  void stop();

  int port() const { return transport_->port(); }
  ServerContext& context() { return ctx_; }
  http::TransportStats transport_stats() const { return transport_->stats(); }

 private:
  ServerContext ctx_;
  std::unique_ptr<http::HttpTransport> transport_;
  std::atomic<bool> stop_requested_{false};
};

}  // namespace ds::server
