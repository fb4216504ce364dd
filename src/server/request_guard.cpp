#include "server/request_guard.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace ds::server {

namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool all_digits(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "name", "name:port", "[v6]", "[v6]:port" -> name (lowercase), brackets kept for v6; nothing
// when the value is not of that shape (a second colon, a port that is not digits, no name).
std::optional<std::string> host_name(const std::string& host) {
  const std::string h = lower(host);
  size_t end = 0;
  if (!h.empty() && h[0] == '[') {
    const size_t close = h.find(']');
    if (close == std::string::npos) return std::nullopt;
    end = close + 1;
  } else {
    end = std::min(h.find(':'), h.size());
  }
  const std::string name = h.substr(0, end), rest = h.substr(end);
  if (name.empty() || name == "[]") return std::nullopt;
  if (!rest.empty() && (rest[0] != ':' || rest.size() > 6 || !all_digits(rest.substr(1)))) return std::nullopt;
  return name;
}

// Exactly four decimal parts of 1 to 3 digits, no leading zeros (inet_aton would read 0177 as
// octal), each at most 255, the first 127. Shorter forms (127.1), hex (0x7f.0.0.1) and whole
// numbers (2130706433) are names to a browser's resolver rules only in part, so none counts.
bool is_ipv4_loopback(const std::string& name) {
  int parts = 0;
  int first = -1;
  size_t i = 0;
  while (true) {
    const size_t dot = std::min(name.find('.', i), name.size());
    const std::string part = name.substr(i, dot - i);
    if (part.empty() || part.size() > 3 || !all_digits(part) || (part.size() > 1 && part[0] == '0')) return false;
    const int v = std::stoi(part);
    if (v > 255) return false;
    if (parts == 0) first = v;
    ++parts;
    if (dot == name.size()) break;
    i = dot + 1;
  }
  return parts == 4 && first == 127;
}

// "[...]" holding the IPv6 loopback address or an IPv4-mapped 127.0.0.0/8 address, in any
// spelling inet_pton takes (no zone ids).
bool is_ipv6_loopback(const std::string& name) {
  if (name.size() < 4 || name.front() != '[' || name.back() != ']') return false;
  const std::string inner = name.substr(1, name.size() - 2);
  unsigned char a[16];
  if (inet_pton(AF_INET6, inner.c_str(), a) != 1) return false;
  static const unsigned char kLoopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  static const unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(a, kLoopback, 16) == 0 || (std::memcmp(a, kMapped, 12) == 0 && a[12] == 127);
}

bool is_loopback_name(const std::string& name) {
  return name == "localhost" || is_ipv4_loopback(name) || is_ipv6_loopback(name);
}

bool listed(const std::vector<std::string>& list, const std::string& v) {
  for (const auto& x : list)
    if (x == "*" || lower(x) == v) return true;
  return false;
}

bool needs_auth(const std::string& path) {
  return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize";
}

// RFC 9110's token characters: what a header name may hold.
bool is_token(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && !std::strchr("!#$%&'*+-.^_`|~", c)) return false;
  return true;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

}  // namespace

bool is_loopback_host(const std::string& host) {
  const auto name = host_name(host);
  return name && is_loopback_name(*name);
}

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

bool is_preflight(const RequestFacts& r) {
  return r.method == "OPTIONS" && !r.origin.empty() && !r.cors_request_method.empty();
}

bool origin_allowed(const GuardSettings& g, const std::string& origin) {
  return !origin.empty() && listed(g.allowed_origins, lower(origin));
}

std::vector<http::Header> cors_headers(const GuardSettings& g, const std::string& origin) {
  if (!origin_allowed(g, origin)) return {};
  return {{"Access-Control-Allow-Origin", origin}, {"Vary", "Origin"}};
}

std::vector<http::Header> preflight_headers(const GuardSettings& g, const std::string& origin,
                                            const std::string& requested_headers) {
  std::vector<http::Header> h = cors_headers(g, origin);
  if (h.empty()) return h;
  std::vector<std::string> names = {"content-type", "authorization", "x-api-key", "anthropic-version"};
  // What the page asked for, when it is a list of header names (anything else is left out, so
  // nothing the client wrote reaches the answer but names).
  size_t i = 0;
  while (i <= requested_headers.size() && names.size() < 64) {
    const size_t comma = std::min(requested_headers.find(',', i), requested_headers.size());
    const std::string name = lower(trim(requested_headers.substr(i, comma - i)));
    if (is_token(name) && std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    i = comma + 1;
  }
  std::string allowed;
  for (const auto& n : names) allowed += (allowed.empty() ? "" : ", ") + n;
  h.push_back({"Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS"});
  h.push_back({"Access-Control-Allow-Headers", allowed});
  h.push_back({"Access-Control-Max-Age", "600"});
  return h;
}

std::optional<ApiError> check_request(const GuardSettings& g, const RequestFacts& r) {
  // Host: a rebinding page's requests carry the attacker's name, not one of ours.
  // The listening address is bare (no port); an IPv6 one is compared in its bracketed form, as
  // a Host header spells it.
  std::string listen = lower(g.listen_host);
  if (listen.find(':') != std::string::npos && listen[0] != '[') listen = "[" + listen + "]";
  const bool any_interface = listen == "0.0.0.0" || listen == "[::]" || listen.empty();
  if (r.host.empty()) {
    if (!listed(g.allowed_hosts, "*"))
      return ApiError(400, "invalid_request_error", "the request has no Host header", {}, {}, "invalid_request");
  } else if (!listed(g.allowed_hosts, "*")) {
    const std::optional<std::string> host = host_name(r.host);
    const bool ok = host && (listed(g.allowed_hosts, *host) || *host == listen ||
                             (is_loopback_name(listen) && is_loopback_name(*host)) ||
                             (any_interface && g.allowed_hosts.empty()));
    if (!ok)
      return ApiError(403, "invalid_request_error",
                      "Host '" + r.host + "' is not this server's; list it with --allowed-hosts", {}, {}, "forbidden");
  }
  // Origin: browsers send it on cross-origin requests; API clients do not.
  if (!r.origin.empty() && !origin_allowed(g, r.origin))
    return ApiError(403, "invalid_request_error",
                    "cross-origin requests from '" + r.origin + "' are refused; list the origin with --allowed-origins",
                    {}, {}, "forbidden");
  // A listed origin's preflight: browsers send it without credentials or a body.
  if (is_preflight(r)) return std::nullopt;
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
    // Either header carries the key: OpenAI's clients send a bearer token, Anthropic's x-api-key.
    if (r.authorization.empty() && r.api_key.empty())
      return ApiError(401, "authentication_error",
                      "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'", {}, "invalid_api_key",
                      "authentication");
    const bool ok = r.authorization.empty() ? constant_time_equal(r.api_key, g.api_key)
                                            : constant_time_equal(r.authorization, "Bearer " + g.api_key);
    if (!ok)
      return ApiError(401, "authentication_error", "incorrect API key provided", {}, "invalid_api_key", "authentication");
  }
  return std::nullopt;
}

}  // namespace ds::server
