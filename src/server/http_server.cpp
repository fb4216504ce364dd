#include "server/http_server.h"

#include <pthread.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>


#include "core/error.h"
#include "server/routes.h"

namespace ds::server {
namespace {

// HTTP worker threads as SCHED_BATCH: Linux gives a batch thread no wakeup preemption, so a
// worker woken to write a token's SSE event waits for a free core (or the next tick) instead of
// preempting the engine thread in the middle of the step's stream phase, or a compute thread in
// the middle of a fork-join step. Opt-in (`serve --http-sched batch`), not the default: on
// bench-100m-dense at concurrency 16 the step profile's stream phase fell from 1.4-1.9 ms to
// 0.6-1.1 ms per step (three A/B pairs), but served tok/s moved within this 2-core VM's noise at
// 16, and at concurrency 1 (where a writer may now wait for a core) the runs spread wider:
// batch 65.6-84.8 tok/s, normal 82.3-86.6.
class BatchPolicyPool final : public httplib::TaskQueue {
 public:
  explicit BatchPolicyPool(size_t threads) : pool_(threads) {}
  void enqueue(std::function<void()> fn) override {
    pool_.enqueue([f = std::move(fn)] {
      thread_local bool set = false;
      if (!set) {
        sched_param p{};
        pthread_setschedparam(pthread_self(), SCHED_BATCH, &p);
        set = true;
      }
      f();
    });
  }
  void shutdown() override { pool_.shutdown(); }

 private:
  httplib::ThreadPool pool_;
};

}  // namespace

HttpServer::HttpServer(Engine& engine, Tokenizer tokenizer, ServerOptions opts)
    : ctx_(engine, std::move(tokenizer), std::move(opts)) {
  DS_CHECK(!ctx_.opts.served_model_names.empty(), "server: no served model name");
  DS_CHECK(ctx_.opts.http_threads >= 1,
           "invalid settings: --http-threads must be at least 1, got " + std::to_string(ctx_.opts.http_threads));
  const size_t threads = size_t(ctx_.opts.http_threads);
  if (ctx_.opts.http_batch_policy)
    svr_.new_task_queue = [threads] { return new BatchPolicyPool(threads); };
  else
    svr_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr_.set_payload_max_length(ctx_.opts.max_body_bytes);
  // Streams can sit quietly through a long prefill; keep-alive comments cover the gap, and
  // writes to a slow client may take a while before we call it gone.
  svr_.set_read_timeout(30, 0);
  svr_.set_write_timeout(30, 0);
  svr_.set_keep_alive_max_count(1000);
  svr_.set_tcp_nodelay(true);  // one SSE event per token: do not let Nagle hold them back
  // Replaces httplib's default options (SO_REUSEADDR), and remembers the listening socket:
  // Debian's httplib listens with a backlog of 5, which drops connections when dozens of
  // clients connect at once; bind() raises it.
  svr_.set_socket_options([this](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd_ = sock;
  });
  install_routes(svr_, ctx_);
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  const auto& o = ctx_.opts;
  DS_CHECK(o.port >= 0 && o.port <= 65535,
           "invalid settings: --port must be in [0, 65535], got " + std::to_string(o.port));
  if (o.port == 0) {
    port_ = svr_.bind_to_any_port(o.host);
    DS_CHECK(port_ > 0, "cannot bind " + o.host + " to a free port");
  } else {
    DS_CHECK(svr_.bind_to_port(o.host, o.port),
             "cannot bind " + o.host + ":" + std::to_string(o.port) + " (address in use or not local?)");
    port_ = o.port;
  }
  // Calling listen() again on a listening socket only changes its backlog (Linux).
  if (listen_fd_ >= 0) ::listen(listen_fd_, kListenBacklog);
  return port_;
}

void HttpServer::serve() {
  if (!svr_.listen_after_bind()) spdlog::error("http server on port {} stopped listening with an error", port_);
}

void HttpServer::start() {
  thread_ = std::thread([this] { serve(); });
  // listen_after_bind sets is_running only once inside its loop; wait so stop() cannot race it.
  for (int i = 0; i < 500 && !svr_.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

void HttpServer::drain_and_stop(std::chrono::milliseconds grace) {
  ctx_.draining.store(true);
  ctx_.engine.close();
  const auto busy = [&] { return ctx_.active.load() > 0 || ctx_.engine.in_flight() > 0; };
  spdlog::info("draining: {} requests in flight, grace {} ms", ctx_.engine.in_flight(), grace.count());
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (busy() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (busy()) {
    spdlog::warn("grace period over: cancelling {} requests", ctx_.engine.in_flight());
    ctx_.engine.cancel_all();
    const auto hard = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (busy() && std::chrono::steady_clock::now() < hard)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop();
}

void HttpServer::stop() {
  if (svr_.is_running()) svr_.stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace ds::server
