#include "server/request_guard.h"

#include <algorithm>
#include <cctype>

namespace ds::server {

namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// "name", "name:port", "[v6]", "[v6]:port" -> name (lowercase), brackets kept for v6.
std::string host_name(const std::string& host) {
  std::string h = lower(host);
  if (!h.empty() && h[0] == '[') {
    const size_t close = h.find(']');
    return close == std::string::npos ? h : h.substr(0, close + 1);
  }
  const size_t colon = h.rfind(':');
  return colon == std::string::npos ? h : h.substr(0, colon);
}

bool is_loopback(const std::string& name) {
  return name == "localhost" || name == "[::1]" || name == "::1" || name.rfind("127.", 0) == 0;
}

bool listed(const std::vector<std::string>& list, const std::string& v) {
  for (const auto& x : list)
    if (x == "*" || lower(x) == v) return true;
  return false;
}

bool needs_auth(const std::string& path) {
  return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize";
}

}  // namespace

bool constant_time_equal(const std::string& a, const std::string& b) {
  // Every byte of the longer string is visited whatever the contents; the length difference is
  // folded into the result instead of returning early.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

std::optional<ApiError> check_request(const GuardSettings& g, const RequestFacts& r) {
  // Host: a rebinding page's requests carry the attacker's name, not one of ours.
  // The listening address is bare (no port); an IPv6 one is compared in its bracketed form, as
  // a Host header spells it.
  std::string listen = lower(g.listen_host);
  if (listen.find(':') != std::string::npos && listen[0] != '[') listen = "[" + listen + "]";
  const bool any_interface = listen == "0.0.0.0" || listen == "[::]" || listen.empty();
  const std::string host = host_name(r.host);
  if (r.host.empty()) {
    if (!listed(g.allowed_hosts, "*"))
      return ApiError(400, "invalid_request_error", "the request has no Host header", {}, {}, "invalid_request");
  } else if (!listed(g.allowed_hosts, host)) {
    const bool ok = host == listen || (is_loopback(listen) && is_loopback(host)) || (any_interface && g.allowed_hosts.empty());
    if (!ok)
      return ApiError(403, "invalid_request_error",
                      "Host '" + r.host + "' is not this server's; list it with --allowed-hosts", {}, {}, "forbidden");
  }
  // Origin: browsers send it on cross-origin requests; API clients do not.
  if (!r.origin.empty() && !listed(g.allowed_origins, lower(r.origin)))
    return ApiError(403, "invalid_request_error",
                    "cross-origin requests from '" + r.origin + "' are refused; list the origin with --allowed-origins",
                    {}, {}, "forbidden");
  if (r.method == "POST") {
    const std::string ct = lower(r.content_type.substr(0, r.content_type.find(';')));
    const size_t b = ct.find_first_not_of(' '), e = ct.find_last_not_of(' ');
    if (b == std::string::npos || ct.substr(b, e - b + 1) != "application/json")
      return ApiError(415, "invalid_request_error",
                      "a POST body must be sent with 'Content-Type: application/json'" +
                          (r.content_type.empty() ? std::string() : ", got '" + r.content_type + "'"),
                      {}, {}, "invalid_request");
  }
  if (!g.api_key.empty() && needs_auth(r.path)) {
    if (r.authorization.empty())
      return ApiError(401, "authentication_error", "missing API key: send 'Authorization: Bearer <key>'", {},
                      "invalid_api_key", "authentication");
    if (!constant_time_equal(r.authorization, "Bearer " + g.api_key))
      return ApiError(401, "authentication_error", "incorrect API key provided", {}, "invalid_api_key", "authentication");
  }
  return std::nullopt;
}

}  // namespace ds::server
