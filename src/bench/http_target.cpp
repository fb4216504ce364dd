#include "bench/http_target.h"

#include "core/error.h"

namespace ds::bench {

HttpTarget HttpTarget::parse(const std::string& url) {
  const auto scheme_end = url.find("://");
  DS_CHECK(scheme_end != std::string::npos, "--url must look like http://host:port, got " + url);
  DS_CHECK(url.compare(0, scheme_end, "http") == 0,
           "--url: only http:// is supported (the benchmark targets a local server), got " + url);
  HttpTarget t;
  const auto path_start = url.find('/', scheme_end + 3);
  t.base = url.substr(0, path_start);
  DS_CHECK(t.base.size() > scheme_end + 3, "--url has no host: " + url);
  if (path_start != std::string::npos) {
    std::string p = url.substr(path_start);
    while (!p.empty() && p.back() == '/') p.pop_back();
    if (p.size() >= 3 && p.compare(p.size() - 3, 3, "/v1") == 0) p.resize(p.size() - 3);
    t.prefix = p;
  }
  return t;
}

std::unique_ptr<httplib::Client> HttpTarget::client(double timeout_s) const {
  auto c = std::make_unique<httplib::Client>(base);
  const auto sec = static_cast<time_t>(timeout_s);
  const auto usec = static_cast<time_t>((timeout_s - static_cast<double>(sec)) * 1e6);
  c->set_connection_timeout(10, 0);
  c->set_read_timeout(sec, usec);
  c->set_write_timeout(sec, usec);
  c->set_keep_alive(true);
  // Without it the request body waits on the server's delayed ACK (Nagle), adding ~40 ms to
  // every measured TTFT.
  c->set_tcp_nodelay(true);
  return c;
}

}  // namespace ds::bench
