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
#pragma once
#include <optional>
#include <string>
#include <vector>

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
};

// The error to answer with, or nothing when the request may go on.
std::optional<ApiError> check_request(const GuardSettings& g, const RequestFacts& r);

// Whether the Host header (name, name:port, [v6], [v6]:port) names a loopback address by
// something no DNS server answers for: `localhost`, a whole dotted quad in 127.0.0.0/8, or an
// IPv6 loopback literal in brackets ([::1], [0:0:0:0:0:0:0:1], [::ffff:127.0.0.1]).
bool is_loopback_host(const std::string& host);

// Equal strings in time that depends only on their lengths, not on where they differ.
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace ds::server
