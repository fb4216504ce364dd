#include "server/http_server.h"

#include <spdlog/spdlog.h>

#include <thread>

#include "core/error.h"
#include "server/routes.h"

namespace ds::server {

namespace {

http::TransportOptions transport_options(const ServerOptions& o) {
  http::TransportOptions t;
  t.host = o.host;
  t.port = o.port;
  t.max_workers = o.http_threads;
  // HTTP worker threads as SCHED_BATCH: Linux gives a batch thread no wakeup preemption, so a
  // worker woken to write a token's SSE event waits for a free core (or the next tick) instead
  // of preempting the engine thread in the middle of the step's stream phase, or a compute
  // thread in the middle of a fork-join step. Opt-in (`serve --http-sched batch`), not the
  // default: on bench-100m-dense at concurrency 16 the step profile's stream phase fell from
  // 1.4-1.9 ms to 0.6-1.1 ms per step (three A/B pairs), but served tok/s moved within this
  // 2-core VM's noise at 16, and at concurrency 1 (where a writer may now wait for a core) the
  // runs spread wider: batch 65.6-84.8 tok/s, normal 82.3-86.6.
  t.worker_batch_policy = o.http_batch_policy;
  t.max_connections = o.max_connections;
  t.request_timeout = std::chrono::milliseconds(int64_t(o.request_timeout_s * 1000));
  t.keepalive_timeout = std::chrono::milliseconds(int64_t(o.keepalive_timeout_s * 1000));
  t.write_timeout = std::chrono::milliseconds(int64_t(o.write_timeout_s * 1000));
  t.max_header_bytes = o.max_header_bytes;
  t.max_header_count = o.max_header_count;
  t.max_body_bytes = o.max_body_bytes;
  return t;
}

}  // namespace

HttpServer::HttpServer(Engine& engine, Tokenizer tokenizer, ServerOptions opts)
    : ctx_(engine, std::move(tokenizer), std::move(opts)) {
  const auto& o = ctx_.opts;
  DS_CHECK(!o.served_model_names.empty(), "server: no served model name");
  DS_CHECK(o.http_threads >= 1, "invalid settings: --http-threads must be at least 1, got " + std::to_string(o.http_threads));
  DS_CHECK(o.max_connections >= 1,
           "invalid settings: --max-connections must be at least 1, got " + std::to_string(o.max_connections));
  DS_CHECK(o.request_timeout_s > 0 && o.keepalive_timeout_s > 0 && o.write_timeout_s > 0,
           "invalid settings: --http-request-timeout, --http-keepalive-timeout and --http-write-timeout must be "
           "positive seconds");
  DS_CHECK(o.max_header_bytes >= 1024 && o.max_header_count >= 8,
           "invalid settings: the header limits must allow at least 1024 bytes and 8 headers");
  transport_ = std::make_unique<http::HttpTransport>(transport_options(o), make_http_app(ctx_));
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() { return transport_->bind(); }

void HttpServer::start() { transport_->start(); }

void HttpServer::serve() {
  start();
  while (!stop_requested_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

void HttpServer::drain_and_stop(std::chrono::milliseconds grace) {
  ctx_.draining.store(true);
  ctx_.engine.close();
  const auto busy = [&] {
    return ctx_.active.load() > 0 || ctx_.engine.in_flight() > 0 || transport_->responding() > 0;
  };
  spdlog::info("draining: {} requests in flight, grace {} ms", ctx_.engine.in_flight(), grace.count());
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (busy() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (busy()) {
    spdlog::warn("grace period over: cancelling {} requests", ctx_.engine.in_flight());
    ctx_.engine.cancel_all();
    // Cancelled answers end their streams; give those last bytes a moment to leave. A client
    // that does not read them is closed regardless.
    const auto hard = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (busy() && std::chrono::steady_clock::now() < hard)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop();
}

void HttpServer::stop() {
  transport_->stop();
  stop_requested_.store(true);
}

}  // namespace ds::server
