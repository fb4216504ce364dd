// The HTTP front of `deltaserve serve`: cpp-httplib with a thread per connection (a streaming
// response holds its thread until its last event), the routes, and graceful draining.
#pragma once
#include <httplib.h>

#include <chrono>
#include <memory>
#include <thread>

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
  // serve() on a background thread (tests).
  void start();

  // Graceful drain: new generation requests get 503 and /health turns 503 at once; requests in
  // flight run to completion for up to `grace`, then are cancelled; then the listener stops.
  void drain_and_stop(std::chrono::milliseconds grace);
  void stop();

  int port() const { return port_; }
  ServerContext& context() { return ctx_; }

 private:
  ServerContext ctx_;
  httplib::Server svr_;
  static constexpr int kListenBacklog = 1024;
  int port_ = -1;
  int listen_fd_ = -1;
  std::thread thread_;
};

}  // namespace ds::server
