// CORS for --allowed-origins (server/request_guard.h), over HTTP and in a browser: a listed
// origin's preflight is answered 204 without an API key, and every answer to it (JSON, a
// stream, an error, a refusal before the body) says the page may read it; another origin gets
// its 403 and no CORS header at all. The last test runs the real thing in headless Chromium: a
// page on a listed origin posts a chat completion with an Authorization header (so the browser
// preflights), and a page on another origin is refused.
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "../support/missing_dependency.h"
#include "../support/raw_client.h"
#include "server_harness.h"

namespace ds {
namespace {

using namespace testing;
namespace fs = std::filesystem;

const std::string kPage = "http://localhost:3000";

TestServer cors_server(std::vector<std::string> origins, std::string key = "sekret") {
  server::ServerOptions o = TestServer::default_options();
  o.allowed_origins = std::move(origins);
  o.api_key = std::move(key);
  return TestServer(TestServer::default_config(), o);
}

std::string preflight_request(int port, const std::string& origin, const std::string& path = "/v1/chat/completions") {
  return "OPTIONS " + path + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) + "\r\nOrigin: " + origin +
         "\r\nAccess-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization,content-type\r\n\r\n";
}

std::string head_of(const std::string& response) { return response.substr(0, response.find("\r\n\r\n") + 2); }

TEST(Cors, AListedOriginsPreflightGets204WithoutAKey) {
  auto s = cors_server({kPage});
  RawClient c(s.port);
  ASSERT_TRUE(c.send(preflight_request(s.port, kPage)));
  const std::string h = head_of(c.read_until("\r\n\r\n"));
  EXPECT_EQ(h.rfind("HTTP/1.1 204 ", 0), 0u) << h;
  EXPECT_NE(h.find("Access-Control-Allow-Origin: " + kPage + "\r\n"), std::string::npos) << h;
  EXPECT_NE(h.find("Access-Control-Allow-Methods: GET, POST, DELETE, OPTIONS\r\n"), std::string::npos) << h;
  const size_t ah = h.find("Access-Control-Allow-Headers: ");
  ASSERT_NE(ah, std::string::npos) << h;
  const std::string allowed = h.substr(ah, h.find("\r\n", ah) - ah);
  for (const char* name : {"content-type", "authorization", "x-api-key", "anthropic-version"})
    EXPECT_NE(allowed.find(name), std::string::npos) << name << " in " << allowed;
  EXPECT_NE(h.find("Access-Control-Max-Age: "), std::string::npos) << h;
  EXPECT_NE(h.find("Vary: Origin\r\n"), std::string::npos) << h;
  EXPECT_EQ(h.find("Content-Length"), std::string::npos) << h;  // a 204 has no body
  // The connection stays open for the request the preflight was for.
  c.clear();
  const std::string body = R"({"model":"fake","prompt":[1,2],"max_tokens":2,"temperature":0,"ignore_eos":true})";
  ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: " + kPage +
                     "\r\nAuthorization: Bearer sekret\r\nContent-Type: application/json\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body));
  const std::string r = c.read_until("\"usage\"");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 ", 0), 0u) << r;
  EXPECT_NE(head_of(r).find("Access-Control-Allow-Origin: " + kPage + "\r\n"), std::string::npos) << r;
  // Any path: the browser asks before each kind of request.
  for (const char* path : {"/v1/completions", "/v1/models", "/tokenize", "/no/such/route"}) {
    RawClient p(s.port);
    ASSERT_TRUE(p.send(preflight_request(s.port, kPage, path)));
    EXPECT_EQ(p.read_until("\r\n\r\n").rfind("HTTP/1.1 204 ", 0), 0u) << path;
  }
}

TEST(Cors, AnotherOriginsPreflightIsRefusedWithNoCorsHeaders) {
  auto s = cors_server({kPage});
  for (const std::string origin : {"https://evil.example", "http://localhost:3001", "null", "http://localhost:3000.evil"}) {
    RawClient c(s.port);
    ASSERT_TRUE(c.send(preflight_request(s.port, origin)));
    const std::string h = head_of(c.read_until("\r\n\r\n"));
    EXPECT_EQ(h.rfind("HTTP/1.1 403 ", 0), 0u) << origin << ": " << h;
    EXPECT_EQ(h.find("Access-Control-"), std::string::npos) << origin << ": " << h;
    EXPECT_EQ(h.find("Vary: Origin"), std::string::npos) << origin << ": " << h;
  }
  // Without --allowed-origins no origin is listed.
  auto none = cors_server({});
  RawClient c(none.port);
  ASSERT_TRUE(c.send(preflight_request(none.port, kPage)));
  const std::string h = head_of(c.read_until("\r\n\r\n"));
  EXPECT_EQ(h.rfind("HTTP/1.1 403 ", 0), 0u) << h;
  EXPECT_EQ(h.find("Access-Control-"), std::string::npos) << h;
}

// Every kind of answer to a listed origin carries Access-Control-Allow-Origin, or the page could
// not read its errors; answers to other origins or to no origin carry none.
TEST(Cors, EveryAnswerToAListedOriginSaysItMayReadIt) {
  auto s = cors_server({kPage});
  httplib::Client cli("127.0.0.1", s.port);
  const httplib::Headers listed = {{"Origin", kPage}, {"Authorization", "Bearer sekret"}};
  const std::string ok_body = R"({"model":"fake","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"temperature":0})";
  struct Case {
    std::string what;
    httplib::Result r;
    int status;
  };
  std::vector<Case> cases;
  cases.push_back({"chat", cli.Post("/v1/chat/completions", listed, ok_body, "application/json"), 200});
  cases.push_back({"models", cli.Get("/v1/models", listed), 200});
  cases.push_back({"health", cli.Get("/health", listed), 200});
  cases.push_back({"bad body", cli.Post("/v1/chat/completions", listed, "{", "application/json"), 400});
  cases.push_back({"no route", cli.Get("/v1/nothing", listed), 404});
  cases.push_back({"unknown model", cli.Post("/v1/chat/completions", listed,
                                             R"({"model":"other","messages":[{"role":"user","content":"hi"}]})",
                                             "application/json"),
                   404});
  // Refused before the body is read (screen): no key, a wrong key, a form content type.
  cases.push_back({"no key", cli.Post("/v1/chat/completions", {{"Origin", kPage}}, ok_body, "application/json"), 401});
  cases.push_back({"wrong key",
                   cli.Post("/v1/chat/completions", {{"Origin", kPage}, {"Authorization", "Bearer x"}}, ok_body,
                            "application/json"),
                   401});
  cases.push_back({"text/plain", cli.Post("/v1/chat/completions", listed, ok_body, "text/plain"), 415});
  for (const Case& c : cases) {
    ASSERT_TRUE(c.r) << c.what;
    EXPECT_EQ(c.r->status, c.status) << c.what << ": " << c.r->body;
    EXPECT_EQ(c.r->get_header_value("Access-Control-Allow-Origin"), kPage) << c.what;
    EXPECT_EQ(c.r->get_header_value("Vary"), "Origin") << c.what;
    EXPECT_EQ(c.r->get_header_value_count("Access-Control-Allow-Origin"), 1u) << c.what;
  }
  // A stream's head.
  {
    RawClient c(s.port);
    const std::string body =
        R"({"model":"fake","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"temperature":0,"stream":true})";
    ASSERT_TRUE(c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: " + kPage +
                       "\r\nAuthorization: Bearer sekret\r\nContent-Type: application/json\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body));
    const std::string r = c.read_until("[DONE]");
    EXPECT_NE(r.find("text/event-stream"), std::string::npos) << r.substr(0, 400);
    EXPECT_NE(head_of(r).find("Access-Control-Allow-Origin: " + kPage + "\r\n"), std::string::npos) << r.substr(0, 400);
    EXPECT_NE(r.find("[DONE]"), std::string::npos);
  }
  // The transport's own refusal while the body is read (a chunked body over the limit).
  {
    server::ServerOptions o = TestServer::default_options();
    o.allowed_origins = {kPage};
    o.max_body_bytes = 1000;
    TestServer small(TestServer::default_config(), o);
    RawClient c(small.port);
    ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: " + kPage +
                       "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"));
    for (int i = 0; i < 16 && !c.readable(i < 2 ? 0 : 20); ++i)
      if (!c.send("400\r\n" + std::string(1024, 'a') + "\r\n")) break;
    const std::string h = head_of(c.read_until("\r\n\r\n"));
    EXPECT_EQ(h.rfind("HTTP/1.1 413 ", 0), 0u) << h;
    EXPECT_NE(h.find("Access-Control-Allow-Origin: " + kPage + "\r\n"), std::string::npos) << h;
  }
  // Another origin: 403 and nothing a browser would read it by; no Origin (an API client): no
  // CORS headers.
  auto evil = cli.Post("/v1/chat/completions", {{"Origin", "https://evil.example"}, {"Authorization", "Bearer sekret"}},
                       ok_body, "application/json");
  ASSERT_TRUE(evil);
  EXPECT_EQ(evil->status, 403);
  EXPECT_FALSE(evil->has_header("Access-Control-Allow-Origin"));
  EXPECT_FALSE(evil->has_header("Vary"));
  auto plain = cli.Post("/v1/chat/completions", {{"Authorization", "Bearer sekret"}}, ok_body, "application/json");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->status, 200);
  EXPECT_FALSE(plain->has_header("Access-Control-Allow-Origin"));
}

// A page server on its own loopback port: any GET gets `page`. Stops with the object.
class PageServer {
 public:
  explicit PageServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0) return;
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~PageServer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }
  std::string origin() const { return "http://127.0.0.1:" + std::to_string(port_); }

  void serve(std::string page) {
    page_ = std::move(page);
    thread_ = std::thread([this] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) continue;
        timeval tv{5, 0};
        ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        std::string req;
        char buf[4096];
        while (req.find("\r\n\r\n") == std::string::npos && req.size() < 65536) {
          const ssize_t n = ::recv(c, buf, sizeof buf, 0);
          if (n <= 0) break;
          req.append(buf, size_t(n));
        }
        const bool root = req.rfind("GET / ", 0) == 0 || req.rfind("GET /index.html ", 0) == 0;
        const std::string body = root ? page_ : "not found";
        const std::string res = std::string(root ? "HTTP/1.1 200 OK" : "HTTP/1.1 404 Not Found") +
                                "\r\nContent-Type: text/html; charset=utf-8\r\nCache-Control: no-store\r\n"
                                "Connection: close\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
        size_t off = 0;
        while (off < res.size()) {
          const ssize_t n = ::send(c, res.data() + off, res.size() - off, MSG_NOSIGNAL);
          if (n <= 0) break;
          off += size_t(n);
        }
        ::close(c);
      }
    });
  }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::string page_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The page: a chat completion and a streamed one, each a POST with JSON and an Authorization
// header (neither is a "simple" request, so the browser preflights first); what happened goes
// into #result, which --dump-dom prints.
std::string fetch_page(int api_port, const std::string& key) {
  const std::string url = "http://127.0.0.1:" + std::to_string(api_port) + "/v1/chat/completions";
  return R"(<!doctype html><html><head><title>cors</title></head><body><pre id="result">PENDING</pre><script>
const out = document.getElementById('result');
const body = (stream) => JSON.stringify({model: 'fake', messages: [{role: 'user', content: 'hello'}],
                                         max_tokens: 4, temperature: 0, ignore_eos: true, stream});
const init = (stream) => ({method: 'POST', body: body(stream),
                           headers: {'Content-Type': 'application/json', 'Authorization': 'Bearer )" +
         key + R"('}});
(async () => {
  try {
    const r = await fetch(')" + url + R"(', init(false));
    const j = await r.json();
    const s = await fetch(')" + url + R"(', init(true));
    const text = await s.text();
    out.textContent = 'RESULT ok status=' + r.status + ' object=' + j.object + ' tokens=' + j.usage.completion_tokens +
                      ' stream_status=' + s.status + ' stream_done=' + text.includes('data: [DONE]') + ' END';
  } catch (e) {
    out.textContent = 'RESULT rejected ' + e.name + ' END';
  }
})();
</script></body></html>)";
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// What `#result` said once the page's fetches settled, and chromium's log.
struct BrowserRun {
  int exit_status = -1;
  std::string result, dom, log;
};

BrowserRun run_page(const char* chromium, const fs::path& dir, const std::string& url) {
  const fs::path dom = dir / "dom.html", log = dir / "chromium.log";
  fs::remove_all(dir / "profile");
  // --virtual-time-budget lets the page run until its fetches are done (virtual time waits for
  // the network) and then dumps the DOM; `timeout` bounds the whole run.
  const std::string cmd = std::string("timeout -k 5 120 ") + chromium +
                          " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
                          " --disable-background-networking --disable-component-update --disable-sync"
                          " --disable-dev-shm-usage --user-data-dir=" + (dir / "profile").string() +
                          " --enable-logging=stderr --v=0 --virtual-time-budget=10000"
                          " --dump-dom " + url + " > " + dom.string() + " 2> " + log.string();
  BrowserRun r;
  r.exit_status = std::system(cmd.c_str());
  r.dom = slurp(dom);
  r.log = slurp(log);
  const size_t b = r.dom.find("RESULT "), e = r.dom.find(" END", b == std::string::npos ? 0 : b);
  if (b != std::string::npos && e != std::string::npos) r.result = r.dom.substr(b, e - b);
  return r;
}

TEST(Cors, InHeadlessChromiumAListedOriginPostsAndAnotherIsRefused) {
  const char* chromium = "/usr/bin/chromium";
  // Skips without chromium, except under CI (CI=true), where its absence is a failure.
  DS_REQUIRE_DEPENDENCY(access(chromium, X_OK) == 0, "no " << chromium << " (scripts/setup installs it)");
  const fs::path dir = fs::temp_directory_path() / ("ds-cors-chromium-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  struct Cleanup {
    fs::path dir;
    ~Cleanup() { fs::remove_all(dir); }
  } cleanup{dir};

  // Two origins: two loopback ports serving the same page. Only the first is listed.
  PageServer listed, other;
  ASSERT_GT(listed.port(), 0);
  ASSERT_GT(other.port(), 0);
  auto s = cors_server({listed.origin()}, "browser-key");
  const std::string page = fetch_page(s.port, "browser-key");
  listed.serve(page);
  other.serve(page);

  const BrowserRun ok = run_page(chromium, dir, listed.origin() + "/");
  ASSERT_EQ(ok.exit_status, 0) << ok.log;
  EXPECT_EQ(ok.result, "RESULT ok status=200 object=chat.completion tokens=4 stream_status=200 stream_done=true")
      << ok.dom.substr(0, 2000) << "\n" << ok.log;

  const BrowserRun refused = run_page(chromium, dir, other.origin() + "/");
  ASSERT_EQ(refused.exit_status, 0) << refused.log;
  EXPECT_EQ(refused.result, "RESULT rejected TypeError") << refused.dom.substr(0, 2000) << "\n" << refused.log;
  // The browser said why: the preflight's answer did not let the origin in.
  EXPECT_NE(refused.log.find("CORS"), std::string::npos) << refused.log;
}

}  // namespace
}  // namespace ds
