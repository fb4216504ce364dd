// An in-process server for integration tests: FakeModel engine + trained test tokenizer +
// HttpServer on a free loopback port, and small HTTP/SSE client helpers.
#pragma once
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "../engine/fake_model.h"  // shared with the engine tests
#include "../support/free_port.h"
#include "server/http_server.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace ds::testing {

using nlohmann::json;

inline const Tokenizer& test_tokenizer() {
  static const Tokenizer tok = [] {
    std::vector<std::string> texts;
    for (int i = 0; i < 20; ++i) {
      texts.push_back("The quick brown fox jumps over the lazy dog. Hello, world! 0123456789 ");
      texts.push_back("Streaming servers batch many requests; each step reads the weights once. ");
      texts.push_back("user assistant system tool: what is the answer? It is forty-two. ");
    }
    return Tokenizer::from_json_text(
        train_bpe_tokenizer_json(texts, 400, {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}), "test");
  }();
  return tok;
}

// The text the server must produce for these generated tokens.
inline std::string expected_text(const std::vector<int32_t>& toks) {
  StreamDecoder d(test_tokenizer(), true);
  std::string s;
  for (int32_t t : toks) s += d.push(t);
  s += d.finish();
  return s;
}

struct TestServer {
  FakeModel* model = nullptr;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<server::HttpServer> http;
  int port = 0;

  // vocab: the model's (0: the tokenizer's); larger pads the model past the tokenizer.
  explicit TestServer(EngineConfig cfg = default_config(), server::ServerOptions opts = default_options(), int vocab = 0) {
    auto m = std::make_unique<FakeModel>(vocab > 0 ? vocab : test_tokenizer().vocab_size());
    model = m.get();
    engine = std::make_unique<Engine>(std::move(m), cfg);
    opts.host = "127.0.0.1";
    opts.port = 0;
    http = std::make_unique<server::HttpServer>(*engine, test_tokenizer(), opts);
    port = http->bind();
    http->start();
  }
  ~TestServer() {
    http->stop();
    engine->stop();
  }

  static EngineConfig default_config() {
    EngineConfig c;
    c.max_num_seqs = 16;
    c.max_num_batched_tokens = 256;
    c.max_model_len = 1024;
    c.num_kv_blocks = 256;
    return c;
  }
  static server::ServerOptions default_options() {
    server::ServerOptions o;
    o.served_model_names = {"fake", "fake-alias"};
    o.http_threads = 256;
    return o;
  }

  std::vector<int32_t> chat_ids(const std::vector<ChatMessage>& msgs) const {
    return encode_chatml(test_tokenizer(), msgs, true);
  }
};

struct HttpResult {
  int status = 0;
  json body;
  std::string raw;
  httplib::Headers headers;
};

inline HttpResult http_call(int port, const std::string& method, const std::string& path,
                            const std::string& body = {}, const httplib::Headers& headers = {}) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120, 0);
  httplib::Result r = method == "GET" ? cli.Get(path.c_str(), headers)
                                      : cli.Post(path.c_str(), headers, body, "application/json");
  HttpResult out;
  if (!r) return out;
  out.status = r->status;
  out.raw = r->body;
  out.headers = r->headers;
  out.body = json::parse(r->body, nullptr, false);
  return out;
}

// /metrics once it holds `line`, or the last read after ~5 s. A stream's last event leaves
// before the engine step that finished it publishes its gauges, so a gauge reads settled a
// moment after the clients return, not at that instant.
inline HttpResult metrics_once_they_show(int port, const std::string& line) {
  HttpResult m = http_call(port, "GET", "/metrics");
  for (int i = 0; i < 500 && m.raw.find(line) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    m = http_call(port, "GET", "/metrics");
  }
  return m;
}

inline HttpResult post(int port, const std::string& path, const json& body, const httplib::Headers& h = {}) {
  return http_call(port, "POST", path, body.dump(), h);
}

struct SseResult {
  int status = 0;
  std::vector<json> events;  // parsed data events, [DONE] excluded
  bool done = false;         // saw data: [DONE]
  std::string raw;
  std::string content;       // concatenated delta content / text
  json usage;
  std::string finish_reason;
  int content_chunks = 0;
  std::string error;  // httplib's error when the exchange failed
  httplib::Headers headers;
};

// Streams a request; when cancel_after_chunks >= 0, hangs up after that many content chunks.
inline SseResult stream(int port, const std::string& path, json body, int cancel_after_chunks = -1) {
  body["stream"] = true;
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120, 0);
  SseResult out;
  std::string buf;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    buf.append(d, n);
    out.raw.append(d, n);
    size_t pos;
    while ((pos = buf.find("\n\n")) != std::string::npos) {
      std::string ev = buf.substr(0, pos);
      buf.erase(0, pos + 2);
      if (ev.rfind("data: ", 0) != 0) continue;  // comments (keep-alive)
      std::string data = ev.substr(6);
      if (data == "[DONE]") {
        out.done = true;
        continue;
      }
      json j = json::parse(data, nullptr, false);
      out.events.push_back(j);
      if (j.contains("usage") && !j["usage"].is_null()) out.usage = j["usage"];
      if (j.contains("choices") && !j["choices"].empty()) {
        const json& c = j["choices"][0];
        std::string piece;
        if (c.contains("delta") && c["delta"].contains("content") && c["delta"]["content"].is_string())
          piece = c["delta"]["content"];
        if (c.contains("text") && c["text"].is_string()) piece = c["text"];
        if (!piece.empty()) {
          out.content += piece;
          ++out.content_chunks;
        }
        if (c.contains("finish_reason") && c["finish_reason"].is_string()) out.finish_reason = c["finish_reason"];
      }
      if (cancel_after_chunks >= 0 && out.content_chunks >= cancel_after_chunks) return false;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  cli.send(req, res, err);
  if (err != httplib::Error::Success) out.error = httplib::to_string(err);
  out.status = res.status;
  out.headers = res.headers;
  if (res.status != 200 && out.raw.empty()) out.raw = res.body;
  return out;
}

}  // namespace ds::testing
