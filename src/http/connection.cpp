// One connection's life: wait for a request (idle deadline), read its headers and body (one
// deadline for both, limits enforced by the parser as bytes arrive), hand it to a handler, write
// the answer (a deadline on every write), and go round again or close. While a request is
// handled the connection keeps reading: pipelined requests wait in the buffer, and end-of-file
// means the client has gone.
#include <spdlog/spdlog.h>

#include <chrono>

#include "http/transport_impl.h"
#include "http/wire_format.h"

namespace ds::http {

using boost::system::error_code;
using namespace std::chrono_literals;

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string to_std(boost::beast::string_view s) { return std::string(s.data(), s.size()); }

// How long a closing connection reads and discards what the client still sends, so that the
// kernel does not answer unread bytes with a reset that destroys our last response in flight.
constexpr auto kLingerTime = 2000ms;
constexpr size_t kLingerBytes = 64u << 20;

}  // namespace

// A streamed response's writer: frames chunks, queues them, and holds the worker back while the
// client is more than max_queued_stream_bytes behind.
class Connection::Sink final : public ChunkSink {
 public:
  explicit Sink(Connection& c) : c_(c) {}
  bool write(std::string_view bytes) override {
    if (client_gone()) return false;
    if (bytes.empty()) return true;
    c_.enqueue(chunk(bytes), false);
    std::unique_lock<std::mutex> lk(c_.mu_);
    c_.cv_.wait(lk, [&] { return c_.dead_ || c_.queued_bytes_ <= c_.t_.opts.max_queued_stream_bytes; });
    return !c_.dead_ && !c_.gone_->load();
  }
  bool client_gone() const override { return c_.gone_->load(std::memory_order_acquire); }

 private:
  Connection& c_;
};

Connection::Connection(HttpTransport::Impl& t, tcp::socket sock)
    : t_(t),
      sock_(std::move(sock)),
      strand_(net::make_strand(t.ioc)),
      read_timer_(strand_),
      write_timer_(strand_) {
  phase_since_ns_ = now_ns();
}

void Connection::start_on_strand() {
  net::dispatch(strand_, [self = shared_from_this()] { self->start(); });
}

void Connection::start() {
  error_code ec;
  sock_.set_option(tcp::no_delay(true), ec);  // one SSE event per token: no Nagle delay
  wait_for_request();
}

void Connection::set_phase(Phase p) {
  phase_.store(int(p));
  phase_since_ns_.store(now_ns());
}

bool Connection::evictable(int64_t* since_ns) const {
  if (evicted_.load() || phase_.load() == int(Phase::Handling)) return false;
  *since_ns = phase_since_ns_.load();
  return true;
}

bool Connection::mark_evicted() {
  bool expected = false;
  return evicted_.compare_exchange_strong(expected, true);
}

void Connection::close_from_outside() {
  net::post(strand_, [self = shared_from_this()] { self->close(); });
}

// ---- reading a request ----------------------------------------------------------------------

void Connection::arm_read_timer(std::chrono::milliseconds d) {
  const uint64_t gen = ++read_timer_gen_;
  read_timer_.expires_after(d);
  read_timer_.async_wait([self = shared_from_this(), gen](const error_code& ec) {
    if (ec || gen != self->read_timer_gen_ || self->closed_) return;
    if (self->lingering_ || Phase(self->phase_.load()) == Phase::Waiting) return self->close();
    // Reading: the request did not arrive in time. Cancelling the read completes it with
    // operation_aborted, and read_failed() answers 408.
    self->read_timed_out_ = true;
    error_code ignored;
    self->sock_.cancel(ignored);
  });
}

void Connection::cancel_read_timer() {
  ++read_timer_gen_;
  read_timer_.cancel();
}

void Connection::wait_for_request() {
  if (closed_) return;
  set_phase(Phase::Waiting);
  if (buf_.size() > 0) return begin_request();  // pipelined: already here
  arm_read_timer(first_request_ ? t_.opts.request_timeout : t_.opts.keepalive_timeout);
  sock_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](const error_code& ec) {
    if (self->closed_) return;
    if (ec) return self->close();
    self->begin_request();
  });
}

void Connection::begin_request() {
  first_request_ = false;
  set_phase(Phase::Reading);
  read_timed_out_ = false;
  arm_read_timer(t_.opts.request_timeout);
  parser_.emplace();
  parser_->header_limit(std::uint32_t(std::min<size_t>(t_.opts.max_header_bytes, UINT32_MAX)));
  parser_->body_limit(std::uint64_t(t_.opts.max_body_bytes));
  bhttp::async_read_header(sock_, buf_, *parser_,
                           [self = shared_from_this()](const error_code& ec, size_t) { self->on_header(ec); });
}

void Connection::on_header(const error_code& ec) {
  if (closed_) return;
  if (ec) return read_failed(ec);
  const auto& h = parser_->get();
  HttpRequest req;
  req.method = to_std(h.method_string());
  req.target = to_std(h.target());
  split_target(req.target, &req.path, &req.query);
  for (const auto& f : h) {
    if (int(req.headers.size()) >= t_.opts.max_header_count) {
      t_.counters.oversized.fetch_add(1);
      return fail_request(431, "the request has more than " + std::to_string(t_.opts.max_header_count) + " headers");
    }
    req.headers.push_back({to_std(f.name_string()), to_std(f.value())});
  }
  if (t_.app.screen) {
    std::optional<HttpResponse> refused;
    try {
      refused = t_.app.screen(req);
    } catch (const std::exception& e) {
      return fail_request(500, std::string("internal error: ") + e.what());
    }
    if (refused) {  // its body stays unread, so the connection cannot go on
      cancel_read_timer();
      decorate(req, *refused);
      refused->close = true;
      set_phase(Phase::Handling);
      return respond(std::move(*refused));
    }
  }
  pending_ = std::move(req);
  reading_body_ = true;
  if (!parser_->is_done() && iequals(pending_.header("Expect"), "100-continue"))
    enqueue("HTTP/1.1 100 Continue\r\n\r\n", false);
  read_body();
}

void Connection::read_body() {
  if (parser_->is_done()) return on_body({});
  bhttp::async_read(sock_, buf_, *parser_, [self = shared_from_this()](const error_code& ec, size_t) { self->on_body(ec); });
}

void Connection::read_failed(const error_code& ec) {
  if (read_timed_out_) {
    t_.counters.request_timeouts.fetch_add(1);
    return fail_request(408, "the request was not received within " + std::to_string(t_.opts.request_timeout.count()) +
                                 " ms");
  }
  if (ec == bhttp::error::header_limit) {
    t_.counters.oversized.fetch_add(1);
    return fail_request(431, "the request line and headers are over the limit of " +
                                 std::to_string(t_.opts.max_header_bytes) + " bytes");
  }
  if (ec == bhttp::error::body_limit) {
    t_.counters.oversized.fetch_add(1);
    return fail_request(413, "the request body is over the limit of " + std::to_string(t_.opts.max_body_bytes) +
                                 " bytes");
  }
  // The client closed or reset the connection (before or during a request), or we did.
  if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message || ec == net::error::eof ||
      ec == net::error::operation_aborted || ec == net::error::connection_reset || ec == net::error::broken_pipe)
    return close();
  fail_request(400, "malformed HTTP request: " + ec.message());
}

void Connection::fail_request(int status, const std::string& message) {
  cancel_read_timer();
  set_phase(Phase::Handling);
  HttpResponse r;
  try {
    r = t_.app.error(status, message);
  } catch (...) {
    r.status = status;
    r.set_content(message, "text/plain");
  }
  if (reading_body_) decorate(pending_, r);
  reading_body_ = false;
  r.close = true;  // what follows on the connection cannot be trusted to start a request
  respond(std::move(r));
}

void Connection::on_body(const error_code& ec) {
  if (closed_) return;
  if (ec) return read_failed(ec);
  cancel_read_timer();
  HttpRequest req = std::move(pending_);
  reading_body_ = false;
  req.body = std::move(parser_->get().body());
  keep_alive_ = parser_->get().keep_alive();
  parser_.reset();
  req.gone_ = gone_;
  t_.counters.requests.fetch_add(1);
  set_phase(Phase::Handling);
  watch_peer();
  dispatch(std::move(req));
}

// ---- handling ---------------------------------------------------------------------------------

void Connection::run_handler(const HttpRequest& req, HttpResponse& res) {
  try {
    t_.app.handle(req, res);
  } catch (const std::exception& e) {
    res = t_.app.error(500, std::string("internal error: ") + e.what());
  } catch (...) {
    res = t_.app.error(500, "internal error");
  }
  decorate(req, res);
}

void Connection::decorate(const HttpRequest& req, HttpResponse& res) {
  if (!t_.app.decorate) return;
  try {
    t_.app.decorate(req, res);
  } catch (...) {
  }
}

void Connection::dispatch(HttpRequest req) {
  bool inline_ok = false;
  try {
    inline_ok = t_.app.runs_inline && t_.app.runs_inline(req);
  } catch (...) {
  }
  const bool keep_alive = keep_alive_;
  if (inline_ok) {
    HttpResponse r;
    run_handler(req, r);
    if (!r.stream) return respond(std::move(r));
    t_.workers.submit([self = shared_from_this(), r = std::move(r), keep_alive]() mutable {
      self->stream_on_worker(std::move(r), keep_alive);
    });
    return;
  }
  t_.workers.submit([self = shared_from_this(), req = std::move(req), keep_alive]() mutable {
    HttpResponse r;
    try {
      self->run_handler(req, r);
      if (r.stream) return self->stream_on_worker(std::move(r), keep_alive);
    } catch (...) {
      r = HttpResponse{};
      r.status = 500;
    }
    net::post(self->strand_, [self, r = std::move(r)]() mutable { self->respond(std::move(r)); });
  });
}

void Connection::respond(HttpResponse r) {
  if (closed_) return;
  if (r.close) close_after_ = true;
  const bool ka = keep_alive_ && !close_after_;
  std::string head = response_head(r, r.body.size(), false, ka);
  if (r.body.empty()) {
    enqueue(std::move(head), true);
  } else {
    enqueue(std::move(head), false);
    enqueue(std::move(r.body), true);
  }
}

void Connection::stream_on_worker(HttpResponse r, bool keep_alive) {
  auto fn = std::move(r.stream);
  enqueue(response_head(r, 0, true, keep_alive), false);
  Sink sink(*this);
  try {
    fn(sink);
  } catch (const std::exception& e) {
    spdlog::error("http: a streamed response failed: {}", e.what());
  } catch (...) {
    spdlog::error("http: a streamed response failed");
  }
  enqueue(last_chunk(), true);
}

void Connection::watch_peer() {
  if (watching_ || closed_ || peer_closed_ || buf_.size() >= t_.opts.max_pipelined_bytes) return;
  watching_ = true;
  sock_.async_read_some(buf_.prepare(16 << 10), [self = shared_from_this()](const error_code& ec, size_t n) {
    self->on_peer_read(ec, n);
  });
}

void Connection::on_peer_read(const error_code& ec, size_t n) {
  watching_ = false;
  if (closed_ || lingering_) return;
  if (!ec) {
    buf_.commit(n);  // the start of a pipelined request: read once this response is done
    if (resume_after_watch_) {
      resume_after_watch_ = false;
      return wait_for_request();
    }
    return watch_peer();
  }
  if (ec == net::error::operation_aborted) {
    if (resume_after_watch_) {
      resume_after_watch_ = false;
      wait_for_request();
    }
    return;
  }
  // End of file or an error: nobody is left to answer.
  peer_closed_ = true;
  if (Phase(phase_.load()) == Phase::Handling) t_.counters.clients_gone.fetch_add(1);
  gone_->store(true, std::memory_order_release);
  std::lock_guard<std::mutex> lk(mu_);
  cv_.notify_all();
}

void Connection::finish_response() {
  if (closed_) return;
  if (close_after_ || !keep_alive_) return linger_close();
  if (peer_closed_) return close();
  if (watching_) {  // stop the watcher first: wait_for_request() reads the socket itself
    resume_after_watch_ = true;
    error_code ignored;
    sock_.cancel(ignored);
    return;
  }
  wait_for_request();
}

// ---- writing ----------------------------------------------------------------------------------

void Connection::enqueue(std::string bytes, bool ends_response) {
  std::lock_guard<std::mutex> lk(mu_);
  if (dead_) return;
  queued_bytes_ += bytes.size();
  out_.push_back(std::move(bytes));
  if (ends_response) response_end_queued_ = true;
  if (!writing_ && !flush_posted_) {
    flush_posted_ = true;
    net::post(strand_, [self = shared_from_this()] { self->do_flush(); });
  }
}

void Connection::do_flush() {
  bool finished = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    flush_posted_ = false;
    if (writing_ || closed_) return;
    if (out_.empty()) {
      finished = response_end_queued_;
      response_end_queued_ = false;
    } else {
      writing_batch_.assign(std::make_move_iterator(out_.begin()), std::make_move_iterator(out_.end()));
      out_.clear();
      writing_ = true;
    }
  }
  if (finished) return finish_response();
  if (writing_batch_.empty()) return;
  std::vector<net::const_buffer> bufs;
  bufs.reserve(writing_batch_.size());
  for (const std::string& s : writing_batch_) bufs.emplace_back(s.data(), s.size());
  const uint64_t gen = ++write_timer_gen_;
  write_timer_.expires_after(t_.opts.write_timeout);
  write_timer_.async_wait([self = shared_from_this(), gen](const error_code& ec) {
    if (ec || gen != self->write_timer_gen_ || self->closed_) return;
    self->write_timed_out_ = true;  // the client stopped reading
    self->t_.counters.write_timeouts.fetch_add(1);
    self->close();
  });
  net::async_write(sock_, bufs, [self = shared_from_this()](const error_code& ec, size_t) { self->on_written(ec); });
}

void Connection::on_written(const error_code& ec) {
  ++write_timer_gen_;
  write_timer_.cancel();
  size_t n = 0;
  for (const std::string& s : writing_batch_) n += s.size();
  writing_batch_.clear();
  {
    std::lock_guard<std::mutex> lk(mu_);
    writing_ = false;
    queued_bytes_ -= std::min(queued_bytes_, n);
  }
  cv_.notify_all();
  if (closed_) return;
  if (ec) return close();
  do_flush();  // more queued, or the response's end
}

// ---- closing ----------------------------------------------------------------------------------

void Connection::linger_close() {
  if (closed_ || lingering_) return;
  lingering_ = true;
  gone_->store(true);
  set_phase(Phase::Waiting);  // answered: no longer counted as responding, and evictable
  error_code ignored;
  sock_.cancel(ignored);  // a watcher's read, if any, ends aborted (and on_peer_read ignores it)
  sock_.shutdown(tcp::socket::shutdown_send, ignored);
  arm_read_timer(kLingerTime);
  discard_.resize(16 << 10);
  drain_some(0);
}

// Reads and drops what the client still sends until it closes, the linger time ends, or enough
// has been dropped.
void Connection::drain_some(size_t total) {
  sock_.async_read_some(net::buffer(discard_), [self = shared_from_this(), total](const error_code& ec, size_t n) {
    if (self->closed_) return;
    if (ec || total + n > kLingerBytes) return self->close();
    self->drain_some(total + n);
  });
}

void Connection::close() {
  if (closed_) return;
  closed_ = true;
  gone_->store(true, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lk(mu_);
    dead_ = true;
    out_.clear();
    queued_bytes_ = 0;
  }
  cv_.notify_all();
  ++read_timer_gen_;
  ++write_timer_gen_;
  read_timer_.cancel();
  write_timer_.cancel();
  error_code ignored;
  sock_.shutdown(tcp::socket::shutdown_both, ignored);
  sock_.close(ignored);
  t_.unregister(this);
}

}  // namespace ds::http
