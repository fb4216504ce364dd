// Where the benchmark sends requests: an http:// base URL, optionally with a path prefix.
#pragma once
#include <httplib.h>

#include <memory>
#include <string>

namespace ds::bench {

struct HttpTarget {
  std::string base;    // scheme://host:port
  std::string prefix;  // path before /v1/..., without a trailing slash ("" for most servers)

  // Accepts http://host:port, http://host:port/, http://host:port/v1 and http://host:port/x/v1.
  static HttpTarget parse(const std::string& url);
  std::string path(const std::string& endpoint) const { return prefix + endpoint; }
  // One client per thread: httplib clients are not shared between threads.
  std::unique_ptr<httplib::Client> client(double timeout_s) const;
};

}  // namespace ds::bench
