#include "bench/sse_client.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/json_parse.h"

namespace ds::bench {

using nlohmann::json;

void SseParser::feed(const char* bytes, size_t n) {
  buf_.append(bytes, n);
  size_t start = 0;
  for (;;) {
    const size_t nl = buf_.find('\n', start);
    if (nl == std::string::npos) break;
    std::string_view l(buf_.data() + start, nl - start);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    line(l);
    start = nl + 1;
  }
  buf_.erase(0, start);
}

void SseParser::finish() {
  if (!buf_.empty()) {
    std::string rest = std::move(buf_);
    buf_.clear();
    if (!rest.empty() && rest.back() == '\r') rest.pop_back();
    line(rest);
  }
  line("");
}

void SseParser::line(std::string_view l) {
  if (l.empty()) {
    if (has_data_) on_event_(data_);
    data_.clear();
    has_data_ = false;
    return;
  }
  if (l.front() == ':') return;  // comment / keep-alive
  if (l.substr(0, 5) != "data:") return;  // event:, id:, retry: carry nothing we time
  l.remove_prefix(5);
  if (!l.empty() && l.front() == ' ') l.remove_prefix(1);
  if (has_data_) data_ += '\n';
  data_.append(l);
  has_data_ = true;
}

bool is_context_overflow(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* p : {"context length", "context_length", "maximum context", "context window",
                        "prompt is too long", "too many tokens", "max_model_len"})
    if (t.find(p) != std::string::npos) return true;
  return false;
}

namespace {

double seconds_since(Clock::time_point origin) {
  return std::chrono::duration<double>(Clock::now() - origin).count();
}

// A content event: generated text in a completions chunk, or a chat delta's content / reasoning.
bool carries_text(const json& choice) {
  auto non_empty = [](const json& o, const char* k) {
    auto it = o.find(k);
    return it != o.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
  };
  if (non_empty(choice, "text")) return true;
  auto d = choice.find("delta");
  return d != choice.end() && d->is_object() &&
         (non_empty(*d, "content") || non_empty(*d, "reasoning_content") ||
          non_empty(*d, "reasoning"));
}

}  // namespace

StreamResult post_stream(httplib::Client& client, const StreamRequest& req,
                         Clock::time_point origin) {
  StreamResult r;
  std::string error_body;
  bool done = false;
  SseParser parser([&](const std::string& data) {
    const double now = seconds_since(origin);
    if (data == "[DONE]") {
      done = true;
      return;
    }
    json j = parse_json_or_discarded(data);
    if (j.is_discarded() || !j.is_object()) {
      if (r.error.empty()) r.error = "unparseable stream event: " + data.substr(0, 200);
      return;
    }
    if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
      r.error = "stream error: " + e->dump();
      r.context_overflow = is_context_overflow(e->dump());
      return;
    }
    if (auto c = j.find("choices"); c != j.end() && c->is_array() && !c->empty()) {
      const json& choice = (*c)[0];
      if (carries_text(choice)) r.chunk_s.push_back(now);
      if (auto t = choice.find("text"); t != choice.end() && t->is_string()) r.text += t->get_ref<const std::string&>();
      if (auto d = choice.find("delta"); d != choice.end() && d->is_object())
        if (auto t = d->find("content"); t != d->end() && t->is_string()) r.text += t->get_ref<const std::string&>();
      if (auto f = choice.find("finish_reason"); f != choice.end() && f->is_string())
        r.finish_reason = f->get<std::string>();
    }
    if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
      r.prompt_tokens = u->value("prompt_tokens", int64_t{-1});
      r.completion_tokens = u->value("completion_tokens", int64_t{-1});
      if (auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object()) {
        auto ct = d->find("cached_tokens");
        if (ct != d->end() && ct->is_number_integer()) r.cached_tokens = ct->get<int64_t>();
      }
    }
  });

  httplib::Request hreq;
  hreq.method = "POST";
  hreq.path = req.path;
  hreq.headers = {{"Accept", "text/event-stream"}};
  hreq.set_header("Content-Type", "application/json");
  hreq.body = req.body;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(req.timeout_s));
  bool timed_out = false;
  hreq.response_handler = [&](const httplib::Response& res) {
    r.status = res.status;
    return true;
  };
  hreq.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (req.cancel && req.cancel->load(std::memory_order_relaxed)) return false;
    if (Clock::now() > deadline) {
      timed_out = true;
      return false;
    }
    if (r.status == 200)
      parser.feed(data, n);
    else if (error_body.size() < 4096)
      error_body.append(data, std::min(n, 4096 - error_body.size()));
    return true;
  };

  r.send_s = seconds_since(origin);
  auto res = client.send(hreq);
  r.end_s = seconds_since(origin);
  if (r.status == 200) parser.finish();

  if (!res) {
    if (timed_out) {
      r.error = "timed out after " + std::to_string(req.timeout_s) + " s";
    } else if (res.error() == httplib::Error::Canceled && req.cancel && req.cancel->load()) {
      r.cancelled = true;
      r.error = "cancelled at the end of the run";
    } else {
      r.error = "HTTP request failed: " + httplib::to_string(res.error());
    }
    return r;
  }
  if (r.status != 200) {
    r.error = "HTTP " + std::to_string(r.status) + ": " + error_body.substr(0, 500);
    r.context_overflow = is_context_overflow(error_body);
    return r;
  }
  if (r.error.empty() && !done && r.finish_reason.empty())
    r.error = "stream ended without [DONE] or a finish_reason";
  return r;
}

}  // namespace ds::bench
