// The listener, the connection registry and its cap, the threads, and stopping.
#include "http/http_transport.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include "core/error.h"
#include "http/transport_impl.h"
#include "http/wire_format.h"

namespace ds::http {

using boost::system::error_code;

namespace {

// The cap must leave file descriptors for the model's files, the disk tier and the listener: a
// cap the process cannot reach would fail accept() with EMFILE instead of evicting.
int fit_to_file_limit(int wanted) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return wanted;
  // Raise the soft limit as far as the hard one allows (the usual default soft limit, 1024, is
  // too low for a server).
  const rlim_t want = rlim_t(wanted) + 256;
  if (rl.rlim_cur < want && rl.rlim_cur != RLIM_INFINITY) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max == RLIM_INFINITY ? want : std::min(want, rl.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  if (rl.rlim_cur == RLIM_INFINITY) return wanted;
  const int room = int(std::min<rlim_t>(rl.rlim_cur, 1 << 30)) - 128;
  if (room < wanted) {
    const int cap = std::max(16, room);
    spdlog::warn("http: open-file limit {} allows at most {} connections (asked for {})", rl.rlim_cur, cap, wanted);
    return cap;
  }
  return wanted;
}

}  // namespace

HttpTransport::Impl::Impl(TransportOptions o, HttpApp a)
    : opts(std::move(o)),
      app(std::move(a)),
      ioc(std::max(1, opts.io_threads)),
      accept_strand(net::make_strand(ioc)),
      acceptor(accept_strand),
      accept_retry(accept_strand),
      workers(opts.max_workers, opts.worker_batch_policy) {}

void HttpTransport::Impl::do_accept() {
  if (stopping.load()) return;
  acceptor.async_accept(net::make_strand(ioc), [this](const error_code& ec, tcp::socket sock) {
    on_accept(ec, std::move(sock));
  });
}

void HttpTransport::Impl::on_accept(const error_code& ec, tcp::socket sock) {
  if (stopping.load() || ec == net::error::operation_aborted) return;
  if (ec) {
    // Out of file descriptors (or another transient failure): wait a little rather than spin.
    static std::atomic<int64_t> last_log{0};
    const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
    if (now - last_log.load() > int64_t(1e9)) {
      last_log = now;
      spdlog::warn("http: accept failed: {}", ec.message());
    }
    accept_retry.expires_after(std::chrono::milliseconds(50));
    accept_retry.async_wait([this](const error_code& e) {
      if (!e) do_accept();
    });
    return;
  }
  counters.accepted.fetch_add(1);
  std::shared_ptr<Connection> victim;
  bool room = false;
  {
    std::lock_guard<std::mutex> lk(reg_mu);
    room = int(connections.size()) < opts.max_connections;
    if (!room) {
      int64_t oldest = INT64_MAX;
      for (auto& [ptr, weak] : connections) {
        int64_t since = 0;
        if (auto c = weak.lock(); c && c->evictable(&since) && since < oldest) {
          oldest = since;
          victim = std::move(c);
        }
      }
      if (victim && victim->mark_evicted()) {
        connections.erase(victim.get());  // its slot is the newcomer's from now
        room = true;
      }
    }
  }
  if (victim && room) {
    counters.evicted.fetch_add(1);
    victim->close_from_outside();
  }
  if (room) {
    auto c = std::make_shared<Connection>(*this, std::move(sock));
    {
      std::lock_guard<std::mutex> lk(reg_mu);
      connections.emplace(c.get(), c);
    }
    c->start_on_strand();
  } else {
    refuse(std::move(sock));
  }
  do_accept();
}

// Every connection is busy with a response: tell the newcomer so, and close.
void HttpTransport::Impl::refuse(tcp::socket sock) {
  counters.refused.fetch_add(1);
  HttpResponse r;
  try {
    r = app.error(503, "the server is at its limit of " + std::to_string(opts.max_connections) +
                           " connections, all busy; retry shortly");
  } catch (...) {
    r.status = 503;
  }
  r.set_header("Retry-After", "1");
  auto bytes = std::make_shared<std::string>(response_head(r, r.body.size(), false, false) + r.body);
  auto s = std::make_shared<tcp::socket>(std::move(sock));
  net::async_write(*s, net::buffer(*bytes), [s, bytes](const error_code&, size_t) {
    error_code ignored;
    s->shutdown(tcp::socket::shutdown_both, ignored);
    s->close(ignored);
  });
}

void HttpTransport::Impl::unregister(Connection* c) {
  std::lock_guard<std::mutex> lk(reg_mu);
  connections.erase(c);
}

HttpTransport::HttpTransport(TransportOptions opts, HttpApp app)
    : impl_(std::make_unique<Impl>(std::move(opts), std::move(app))) {
  DS_CHECK(impl_->app.handle && impl_->app.error, "http transport: the application has no handler");
  DS_CHECK(impl_->opts.max_connections >= 1, "invalid settings: --max-connections must be at least 1");
}

HttpTransport::~HttpTransport() { stop(); }

int HttpTransport::bind() {
  auto& t = *impl_;
  const std::string where = t.opts.host + ":" + std::to_string(t.opts.port);
  DS_CHECK(t.opts.port >= 0 && t.opts.port <= 65535,
           "invalid settings: --port must be in [0, 65535], got " + std::to_string(t.opts.port));
  t.opts.max_connections = fit_to_file_limit(t.opts.max_connections);
  error_code ec;
  tcp::resolver resolver(t.ioc);
  auto results = resolver.resolve(t.opts.host, std::to_string(t.opts.port),
                                  tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  DS_CHECK(!ec && !results.empty(), "cannot bind " + where + ": " + (ec ? ec.message() : "no such address"));
  const tcp::endpoint ep = results.begin()->endpoint();
  t.acceptor.open(ep.protocol(), ec);
  if (!ec) t.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) t.acceptor.bind(ep, ec);
  if (!ec) t.acceptor.listen(t.opts.listen_backlog, ec);
  DS_CHECK(!ec, "cannot bind " + where + " (" + ec.message() + ")");
  t.port = t.acceptor.local_endpoint().port();
  return t.port;
}

void HttpTransport::start() {
  auto& t = *impl_;
  DS_CHECK(t.port > 0, "http transport: start() before bind()");
  t.work.emplace(t.ioc.get_executor());
  net::post(t.accept_strand, [&t] { t.do_accept(); });
  for (int i = 0; i < std::max(1, t.opts.io_threads); ++i)
    t.io_threads.emplace_back([&t] {
      for (;;) {
        try {
          t.ioc.run();
          return;
        } catch (const std::exception& e) {  // handlers catch their own; never let one end the thread
          spdlog::error("http: I/O thread: {}", e.what());
        }
      }
    });
}

void HttpTransport::stop() {
  auto& t = *impl_;
  if (t.stopped) return;
  t.stopped = true;
  t.stopping.store(true);
  net::post(t.accept_strand, [&t] {
    error_code ignored;
    t.acceptor.close(ignored);
    t.accept_retry.cancel();
  });
  std::vector<std::shared_ptr<Connection>> open;
  {
    std::lock_guard<std::mutex> lk(t.reg_mu);
    for (auto& [ptr, weak] : t.connections)
      if (auto c = weak.lock()) open.push_back(std::move(c));
  }
  for (auto& c : open) c->close_from_outside();
  open.clear();
  // Handlers see client_gone() and finish; their answers go nowhere.
  t.workers.shutdown();
  t.work.reset();
  t.ioc.stop();
  for (auto& th : t.io_threads) th.join();
  t.io_threads.clear();
}

int HttpTransport::port() const { return impl_->port; }

int HttpTransport::responding() const {
  std::lock_guard<std::mutex> lk(impl_->reg_mu);
  int n = 0;
  for (auto& [ptr, weak] : impl_->connections)
    if (auto c = weak.lock(); c && c->handling()) ++n;
  return n;
}

const TransportOptions& HttpTransport::options() const { return impl_->opts; }

TransportStats HttpTransport::stats() const {
  const auto& c = impl_->counters;
  TransportStats s;
  s.connections_accepted = c.accepted.load();
  s.connections_evicted = c.evicted.load();
  s.connections_refused = c.refused.load();
  s.request_timeouts = c.request_timeouts.load();
  s.write_timeouts = c.write_timeouts.load();
  s.requests = c.requests.load();
  s.oversized = c.oversized.load();
  s.clients_gone = c.clients_gone.load();
  {
    std::lock_guard<std::mutex> lk(impl_->reg_mu);
    s.connections_open = impl_->connections.size();
  }
  return s;
}

}  // namespace ds::http
