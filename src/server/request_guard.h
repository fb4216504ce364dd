// Checks every request passes before routing, for a server that browsers can reach: a page a
// user visits can send simple cross-site POSTs to a local server, and DNS rebinding can make a
// page's own origin resolve to it. So:
//   - the Host header must name this server: the listening address, --allowed-hosts, or, when
//     it listens on loopback, `localhost` and loopback IP literals (a whole dotted quad in
//     127.0.0.0/8, or [::1] in any spelling); a name that only looks like one
//     (127.0.0.1.evil.example, 0x7f.0.0.1) is a name some DNS server answers, so it is refused;
//   - a request with an Origin header (browsers send one on cross-origin requests) is refused
//     unless --allowed-origins lists that origin;
//   - a POST must say Content-Type: application/json (a simple cross-site form POST cannot);
//   - with an API key, the Authorization header is compared in constant time.
// CORS for the listed origins: a preflight (OPTIONS with Origin and
// Access-Control-Request-Method) passes without an API key (browsers send no credentials on
// it) and is answered 204 with preflight_headers(); every other answer to a listed origin
// carries cors_headers(). Other origins get no CORS header at all.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "http/http_message.h"
#include "server/api_error.h"

namespace ds::server {

struct GuardSettings {
  std::string listen_host;                   // as given to --host (the Host header's port is not checked)
  std::vector<std::string> allowed_hosts;    // extra Host names; "*" allows any
  std::vector<std::string> allowed_origins;  // "*" allows any
  std::string api_key;                       // empty: no authentication
};

struct RequestFacts {
  std::string method, path;
  std::string host, origin, content_type, authorization;
  std::string cors_request_method;  // Access-Control-Request-Method: set on a CORS preflight
  std::string api_key = {};  // the x-api-key header (Anthropic's clients)
};

// The error to answer with, or nothing when the request may go on (a preflight from a listed
// origin included: answer it with preflight_headers()).
std::optional<ApiError> check_request(const GuardSettings& g, const RequestFacts& r);

// OPTIONS with Origin and Access-Control-Request-Method: what a browser sends before a
// cross-origin request it may not send unasked.
bool is_preflight(const RequestFacts& r);

// Whether --allowed-origins lets this Origin (as sent; "" is no Origin) call the API.
bool origin_allowed(const GuardSettings& g, const std::string& origin);

// For any response to a listed origin: Access-Control-Allow-Origin (the origin itself) and
// Vary: Origin. Nothing for another origin or none.
std::vector<http::Header> cors_headers(const GuardSettings& g, const std::string& origin);

// A listed origin's preflight answer: cors_headers() and the methods, request headers and how
// long the browser may keep the answer. `requested_headers` is the preflight's
// Access-Control-Request-Headers; the ones that are header names are allowed besides the
// API's own (content-type, authorization, x-api-key, anthropic-version).
std::vector<http::Header> preflight_headers(const GuardSettings& g, const std::string& origin,
                                            const std::string& requested_headers);

// Whether the Host header (name, name:port, [v6], [v6]:port) names a loopback address by
// something no DNS server answers for: `localhost`, a whole dotted quad in 127.0.0.0/8, or an
// IPv6 loopback literal in brackets ([::1], [0:0:0:0:0:0:0:1], [::ffff:127.0.0.1]).
bool is_loopback_host(const std::string& host);

// Equal strings in time that depends only on their lengths, not on where they differ.
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace ds::server
