// Inside the transport (http_transport.h says what it does): the shared state of the server and
// one connection's state machine. Only http/*.cpp include this; it is where Asio lives.
#pragma once
#include <boost/asio.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "http/http_transport.h"
#include "http/worker_pool.h"

namespace ds::http {

namespace net = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using Strand = net::strand<net::io_context::executor_type>;

class Connection;

struct HttpTransport::Impl {
  Impl(TransportOptions o, HttpApp a);

  TransportOptions opts;
  HttpApp app;
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  Strand accept_strand;
  tcp::acceptor acceptor;
  net::steady_timer accept_retry;  // after EMFILE: try again shortly rather than spin
  WorkerPool workers;
  std::vector<std::thread> io_threads;
  std::atomic<bool> stopping{false};
  bool stopped = false;
  int port = -1;

  std::mutex reg_mu;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> connections;

  struct Counters {
    std::atomic<uint64_t> accepted{0}, evicted{0}, refused{0}, request_timeouts{0}, write_timeouts{0},
        requests{0}, oversized{0}, clients_gone{0};
  } counters;

  void do_accept();
  void on_accept(const boost::system::error_code& ec, tcp::socket sock);
  void refuse(tcp::socket sock);
  void unregister(Connection* c);
};

// One client connection. Every member but the outbound queue is touched only on the
// connection's strand; the queue (written by a worker streaming a response) has its own mutex.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  enum class Phase { Waiting, Reading, Handling };

  Connection(HttpTransport::Impl& t, tcp::socket sock);
  void start_on_strand();      // any thread
  void close_from_outside();   // any thread
  // For the cap: waiting or reading (not handling) and not already being closed; since when.
  bool evictable(int64_t* since_ns) const;
  bool mark_evicted();         // true for the one caller that gets to evict it
  bool handling() const { return phase_.load() == int(Phase::Handling); }

 private:
  class Sink;
  friend class Sink;

  void start();
  void set_phase(Phase p);
  void wait_for_request();
  void begin_request();
  void on_header(const boost::system::error_code& ec);
  void read_body();
  void on_body(const boost::system::error_code& ec);
  void read_failed(const boost::system::error_code& ec);
  void fail_request(int status, const std::string& message);
  void dispatch(HttpRequest req);
  void run_handler(const HttpRequest& req, HttpResponse& res);
  void decorate(const HttpRequest& req, HttpResponse& res);
  void respond(HttpResponse r);
  void stream_on_worker(HttpResponse r, bool keep_alive);
  void watch_peer();
  void on_peer_read(const boost::system::error_code& ec, size_t n);
  void finish_response();

  void arm_read_timer(std::chrono::milliseconds d);
  void cancel_read_timer();
  void enqueue(std::string bytes, bool ends_response);  // any thread
  void do_flush();
  void on_written(const boost::system::error_code& ec);
  void linger_close();
  void drain_some(size_t total);
  void close();

  HttpTransport::Impl& t_;
  tcp::socket sock_;
  Strand strand_;
  net::steady_timer read_timer_, write_timer_;
  uint64_t read_timer_gen_ = 0, write_timer_gen_ = 0;
  boost::beast::flat_buffer buf_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  HttpRequest pending_;  // headers of the request being read
  bool reading_body_ = false;  // pending_ holds the headers of a request whose body is being read
  std::shared_ptr<std::atomic<bool>> gone_ = std::make_shared<std::atomic<bool>>(false);

  std::atomic<int> phase_{int(Phase::Waiting)};
  std::atomic<int64_t> phase_since_ns_{0};
  std::atomic<bool> evicted_{false};
  bool first_request_ = true;
  bool read_timed_out_ = false;
  bool write_timed_out_ = false;
  bool keep_alive_ = true;
  bool close_after_ = false;
  bool watching_ = false;
  bool resume_after_watch_ = false;
  bool peer_closed_ = false;
  bool lingering_ = false;
  bool closed_ = false;
  std::vector<std::string> writing_batch_;
  std::vector<char> discard_;

  // Outbound queue, shared with a streaming worker.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> out_;
  size_t queued_bytes_ = 0;
  bool response_end_queued_ = false;
  bool writing_ = false, flush_posted_ = false, dead_ = false;
};

}  // namespace ds::http
