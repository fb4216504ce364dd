// The checks every request passes before routing (server/request_guard.h): Host against the
// listening address, Origin against --allowed-origins, JSON content type on POST, API key.
#include "server/request_guard.h"

#include <gtest/gtest.h>

namespace ds::server {
namespace {

RequestFacts post(std::string host, std::string origin = {}, std::string ct = "application/json") {
  return {"POST", "/v1/chat/completions", std::move(host), std::move(origin), std::move(ct), {}, {}};
}

int status(const GuardSettings& g, const RequestFacts& r) {
  auto e = check_request(g, r);
  return e ? e->status : 200;
}

TEST(RequestGuard, HostMustNameThisServer) {
  GuardSettings loop{"127.0.0.1", {}, {}, {}};
  EXPECT_EQ(status(loop, post("127.0.0.1:8000")), 200);
  EXPECT_EQ(status(loop, post("localhost:8000")), 200);
  EXPECT_EQ(status(loop, post("[::1]:8000")), 200);
  EXPECT_EQ(status(loop, post("LOCALHOST")), 200);
  // A DNS-rebinding page: its requests carry its own name.
  EXPECT_EQ(status(loop, post("evil.example:8000")), 403);
  EXPECT_EQ(status(loop, post("")), 400);
  GuardSettings named{"10.0.0.5", {"api.internal"}, {}, {}};
  EXPECT_EQ(status(named, post("10.0.0.5:8000")), 200);
  EXPECT_EQ(status(named, post("api.internal")), 200);
  EXPECT_EQ(status(named, post("localhost")), 403);
  // All interfaces: names are unknown, so any Host unless a list is given.
  EXPECT_EQ(status(GuardSettings{"0.0.0.0", {}, {}, {}}, post("anything:1")), 200);
  EXPECT_EQ(status(GuardSettings{"0.0.0.0", {"a.example"}, {}, {}}, post("b.example")), 403);
  EXPECT_EQ(status(GuardSettings{"127.0.0.1", {"*"}, {}, {}}, post("b.example")), 200);
  // IPv6 listening addresses, as a Host header brackets them.
  EXPECT_EQ(status(GuardSettings{"::1", {}, {}, {}}, post("[::1]:8000")), 200);
  EXPECT_EQ(status(GuardSettings{"::1", {}, {}, {}}, post("localhost:8000")), 200);
  EXPECT_EQ(status(GuardSettings{"::1", {}, {}, {}}, post("evil.example")), 403);
  EXPECT_EQ(status(GuardSettings{"::", {}, {}, {}}, post("anything")), 200);
}

TEST(RequestGuard, CrossOriginRequestsOnlyFromListedOrigins) {
  GuardSettings g{"127.0.0.1", {}, {"http://localhost:3000"}, {}};
  EXPECT_EQ(status(g, post("127.0.0.1", "https://evil.example")), 403);
  EXPECT_EQ(status(g, post("127.0.0.1", "http://localhost:3000")), 200);
  EXPECT_EQ(status(g, post("127.0.0.1", "")), 200);  // API clients send no Origin
  EXPECT_EQ(status(GuardSettings{"127.0.0.1", {}, {}, {}}, post("127.0.0.1", "http://localhost:3000")), 403);
}

TEST(RequestGuard, PostNeedsJsonContentType) {
  GuardSettings g{"127.0.0.1", {}, {}, {}};
  EXPECT_EQ(status(g, post("127.0.0.1", "", "application/json; charset=utf-8")), 200);
  EXPECT_EQ(status(g, post("127.0.0.1", "", "Application/JSON")), 200);
  // What a cross-site form or a "simple" fetch can send without a preflight.
  EXPECT_EQ(status(g, post("127.0.0.1", "", "text/plain")), 415);
  EXPECT_EQ(status(g, post("127.0.0.1", "", "application/x-www-form-urlencoded")), 415);
  EXPECT_EQ(status(g, post("127.0.0.1", "", "")), 415);
  RequestFacts get{"GET", "/v1/models", "127.0.0.1", {}, {}, {}, {}};
  EXPECT_EQ(status(g, get), 200);
}

TEST(RequestGuard, ApiKeyComparedWhole) {
  GuardSettings g{"127.0.0.1", {}, {}, "s3cret"};
  RequestFacts r = post("127.0.0.1");
  EXPECT_EQ(status(g, r), 401);
  r.authorization = "Bearer s3cret";
  EXPECT_EQ(status(g, r), 200);
  for (const char* wrong : {"Bearer s3cre", "Bearer s3cretX", "Bearer S3cret", "bearer s3cret", "s3cret"}) {
    r.authorization = wrong;
    EXPECT_EQ(status(g, r), 401) << wrong;
  }
  RequestFacts health{"GET", "/health", "127.0.0.1", {}, {}, {}, {}};
  EXPECT_EQ(status(g, health), 200);  // probes need no key
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "abcd"));
  EXPECT_FALSE(constant_time_equal("", "a"));
}

// DNS rebinding: only names no DNS server answers for count as loopback. A name that starts
// like an address (127.attacker.example, 127.0.0.1.evil.com) is an ordinary DNS name.
TEST(RequestGuard, LoopbackHostsAreLiteralsOrLocalhostOnly) {
  GuardSettings loop{"127.0.0.1", {}, {}, {}};
  for (const char* ok : {"127.0.0.1", "127.0.0.1:8000", "127.1.2.3", "127.255.255.255:1", "127.0.0.1:", "localhost",
                         "LOCALHOST:8000", "LocalHost", "[::1]", "[::1]:8000", "[0:0:0:0:0:0:0:1]", "[0::1]:80",
                         "[::0001]", "[::ffff:127.0.0.1]", "[::FFFF:127.9.8.7]:1"})
    EXPECT_EQ(status(loop, post(ok)), 200) << ok;
  for (const char* bad :
       {"127.attacker.example", "127.0.0.1.evil.com", "127.0.0.1.evil.com:8000", "127.evil", "127.", "127.0.0.1.",
        "127.0.0", "127.1", "127.0.0.256", "127.0.0.1.1", "0x7f.0.0.1", "0x7f000001", "0177.0.0.1", "127.00.0.1",
        "2130706433", "127.0.0.1:80:80", "127.0.0.1:http", "127.0.0.1:1234567", "localhost.evil", "localhost.",
        "evil-localhost", "sub.localhost.evil.example", "::1", "[::1]evil", "[::1]:80x", "[::2]", "[::1%eth0]",
        "[::ffff:10.0.0.1]", "[::127.0.0.1]", "[]", ":8000", "10.0.0.1", "128.0.0.1", "126.0.0.1"})
    EXPECT_EQ(status(loop, post(bad)), 403) << bad;
  // The same rules when listening on another loopback spelling.
  EXPECT_EQ(status(GuardSettings{"localhost", {}, {}, {}}, post("127.0.0.1:1")), 200);
  EXPECT_EQ(status(GuardSettings{"localhost", {}, {}, {}}, post("127.attacker.example")), 403);
  EXPECT_EQ(status(GuardSettings{"::1", {}, {}, {}}, post("127.0.0.1.evil.com")), 403);
  // --allowed-hosts still adds names, and the listening address is still accepted by name.
  EXPECT_EQ(status(GuardSettings{"127.0.0.1", {"127.attacker.example"}, {}, {}}, post("127.attacker.example:1")), 200);
  EXPECT_EQ(status(GuardSettings{"10.1.2.3", {}, {}, {}}, post("10.1.2.3:8000")), 200);
  EXPECT_EQ(status(GuardSettings{"10.1.2.3", {}, {}, {}}, post("127.0.0.1")), 403);
  EXPECT_TRUE(is_loopback_host("127.3.2.1:9"));
  EXPECT_FALSE(is_loopback_host("127.3.2.1.nip.io"));
}

RequestFacts preflight(std::string origin, std::string path = "/v1/chat/completions") {
  RequestFacts r{"OPTIONS", std::move(path), "127.0.0.1:8000", std::move(origin), {}, {}, "POST"};
  return r;
}

std::string header(const std::vector<http::Header>& h, const std::string& name) {
  for (const auto& x : h)
    if (x.name == name) return x.value;
  return "<none>";
}

TEST(RequestGuard, PreflightFromAListedOriginNeedsNoKeyOrContentType) {
  GuardSettings g{"127.0.0.1", {}, {"http://localhost:3000"}, "s3cret"};
  EXPECT_TRUE(is_preflight(preflight("http://localhost:3000")));
  EXPECT_EQ(status(g, preflight("http://localhost:3000")), 200);
  EXPECT_EQ(status(g, preflight("http://localhost:3000", "/tokenize")), 200);
  // Another origin's preflight stays refused, as does a preflight to a host that is not ours.
  EXPECT_EQ(status(g, preflight("http://evil.example")), 403);
  RequestFacts rebound = preflight("http://localhost:3000");
  rebound.host = "127.0.0.1.evil.com";
  EXPECT_EQ(status(g, rebound), 403);
  // Not a preflight: no Access-Control-Request-Method, or no Origin. Those need the key.
  RequestFacts plain = preflight("http://localhost:3000");
  plain.cors_request_method.clear();
  EXPECT_FALSE(is_preflight(plain));
  EXPECT_EQ(status(g, plain), 401);
  RequestFacts no_origin = preflight("");
  EXPECT_FALSE(is_preflight(no_origin));
  EXPECT_EQ(status(g, no_origin), 401);
  // The actual request still needs the key, and gets it checked.
  RequestFacts actual = post("127.0.0.1:8000", "http://localhost:3000");
  EXPECT_EQ(status(g, actual), 401);
  actual.authorization = "Bearer s3cret";
  EXPECT_EQ(status(g, actual), 200);
}

TEST(RequestGuard, CorsHeadersOnlyForListedOrigins) {
  GuardSettings g{"127.0.0.1", {}, {"http://localhost:3000", "HTTP://Example.COM"}, {}};
  const auto h = cors_headers(g, "http://localhost:3000");
  EXPECT_EQ(header(h, "Access-Control-Allow-Origin"), "http://localhost:3000");
  EXPECT_EQ(header(h, "Vary"), "Origin");
  EXPECT_EQ(header(cors_headers(g, "http://example.com"), "Access-Control-Allow-Origin"), "http://example.com");
  EXPECT_TRUE(cors_headers(g, "http://evil.example").empty());
  EXPECT_TRUE(cors_headers(g, "http://localhost:3001").empty());
  EXPECT_TRUE(cors_headers(g, "").empty());
  EXPECT_TRUE(cors_headers(GuardSettings{"127.0.0.1", {}, {}, {}}, "http://localhost:3000").empty());
  EXPECT_TRUE(preflight_headers(g, "http://evil.example", "content-type").empty());
  // "*" lets any origin in, and the answer still names the origin (never "*").
  GuardSettings any{"127.0.0.1", {}, {"*"}, {}};
  EXPECT_EQ(header(cors_headers(any, "https://a.example"), "Access-Control-Allow-Origin"), "https://a.example");
}

TEST(RequestGuard, PreflightAnswerListsMethodsHeadersAndMaxAge) {
  GuardSettings g{"127.0.0.1", {}, {"http://localhost:3000"}, {}};
  const auto h = preflight_headers(g, "http://localhost:3000", "Content-Type, X-Stainless-Os,authorization, bad header, x\r\ny:z, ");
  EXPECT_EQ(header(h, "Access-Control-Allow-Origin"), "http://localhost:3000");
  EXPECT_EQ(header(h, "Vary"), "Origin");
  EXPECT_EQ(header(h, "Access-Control-Allow-Methods"), "GET, POST, DELETE, OPTIONS");
  // The API's own headers, then the requested ones that are header names, each once.
  EXPECT_EQ(header(h, "Access-Control-Allow-Headers"),
            "content-type, authorization, x-api-key, anthropic-version, x-stainless-os");
  EXPECT_NE(header(h, "Access-Control-Max-Age"), "<none>");
  EXPECT_GT(std::stoi(header(h, "Access-Control-Max-Age")), 0);
  EXPECT_EQ(header(preflight_headers(g, "http://localhost:3000", ""), "Access-Control-Allow-Headers"),
            "content-type, authorization, x-api-key, anthropic-version");
}

}  // namespace
}  // namespace ds::server
