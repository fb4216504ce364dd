#include "bench/trace_agentic.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/hash.h"
#include "bench/text_file.h"
#include "bench/trace_util.h"
#include "core/error.h"
#include "core/json_parse.h"

namespace ds::bench {

using nlohmann::json;

namespace {

int line_of(const std::string& text, size_t byte) {
  byte = std::min(byte, text.size());
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + byte, '\n'));
}

struct TraceContext {
  bool local_scope = true;
  uint64_t trace_index = 0;
};

const json* field(const json& j, const char* a, const char* b) {
  if (auto it = j.find(a); it != j.end()) return &*it;
  if (auto it = j.find(b); it != j.end()) return &*it;
  return nullptr;
}

// Reads `requests` into `s`. `prev_end` is the trace time (s) at which the conversation's last
// response ended, used to turn absolute `t` stamps into end-to-start gaps when think_time is absent.
void parse_requests(const json& arr, Session& s, const TraceContext& ctx, const std::string& where,
                    double prev_end) {
  DS_CHECK(arr.is_array(), where + ": \"requests\" must be an array");
  bool have_prev = prev_end >= 0;
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& e = arr[i];
    const std::string at = where + ".requests[" + std::to_string(i) + "]";
    DS_CHECK(e.is_object(), at + ": expected an object");
    std::string type = e.value("type", std::string("n"));
    if (type == "subagent") {
      Spawn sp;
      sp.after_request = static_cast<int>(s.requests.size()) - 1;
      sp.background = e.value("background", false);
      const json* id = field(e, "agent_id", "id");
      sp.child.id = s.id + "/" + (id && id->is_string() ? id->get<std::string>()
                                                         : "sub" + std::to_string(i));
      DS_CHECK(e.contains("requests"), at + ": a subagent needs \"requests\"");
      parse_requests(e["requests"], sp.child, ctx, at, have_prev ? prev_end : -1);
      s.spawns.push_back(std::move(sp));
      continue;
    }
    DS_CHECK(type == "n" || type == "s" || type == "request",
             at + ": unknown type \"" + type + "\" (expected n, s or subagent)");
    TraceRequest r;
    const json* in = field(e, "in", "input_tokens");
    const json* out = field(e, "out", "output_tokens");
    DS_CHECK(in, at + ": missing field \"in\"");
    DS_CHECK(out, at + ": missing field \"out\"");
    json counts = {{"in", *in}, {"out", *out}};
    r.input_tokens = require_count(counts, "in", at);
    r.output_tokens = require_count(counts, "out", at);
    DS_CHECK(r.input_tokens > 0, at + ": \"in\" must be at least 1");
    r.hash_ids = require_hash_ids(e, "hash_ids", at);
    if (ctx.local_scope)
      for (auto& h : r.hash_ids) h = mix64(ctx.trace_index, h);
    const json* stop = field(e, "stop", "stop_reason");
    if (stop && stop->is_string()) r.stop_reason = stop->get<std::string>();

    const double t = optional_number(e, "t", at, -1);
    const double api = optional_number(e, "api_time", at, 0);
    if (e.contains("think_time")) {
      r.delay_s = optional_number(e, "think_time", at, 0);
      DS_CHECK(r.delay_s >= 0, at + ": \"think_time\" must not be negative");
    } else if (t >= 0 && have_prev) {
      r.delay_s = std::max(0.0, t - prev_end);
    }
    if (t >= 0) {
      prev_end = t + std::max(0.0, api);
      have_prev = true;
    }
    s.requests.push_back(std::move(r));
  }
}

void parse_trace(const json& j, Workload& w, const std::string& where, int64_t& block_size_seen) {
  DS_CHECK(j.is_object(), where + ": a trace must be a JSON object");
  TraceContext ctx;
  ctx.trace_index = w.sessions.size();
  std::string scope = j.value("hash_id_scope", std::string("local"));
  DS_CHECK(scope == "local" || scope == "global",
           where + ": hash_id_scope must be \"local\" or \"global\"");
  ctx.local_scope = scope == "local";
  if (j.contains("block_size")) {
    int64_t bs = require_count(j, "block_size", where);
    DS_CHECK(bs > 0, where + ": block_size must be positive");
    DS_CHECK(block_size_seen == 0 || block_size_seen == bs,
             where + ": block_size " + std::to_string(bs) + " differs from an earlier trace's " +
                 std::to_string(block_size_seen) + " (pass --block-size to force one)");
    block_size_seen = bs;
  }
  Session s;
  s.id = j.contains("id") && j["id"].is_string() ? j["id"].get<std::string>()
                                                  : "trace" + std::to_string(ctx.trace_index);
  DS_CHECK(j.contains("requests"), where + ": missing field \"requests\"");
  parse_requests(j["requests"], s, ctx, where, -1);
  DS_CHECK(!s.requests.empty(), where + ": the trace has no requests of its own");
  w.sessions.push_back(std::move(s));
}

}  // namespace

Workload parse_agentic(const std::string& text, const std::string& name, int64_t block_size) {
  Workload w;
  w.source = name;
  w.format = "agentic";
  int64_t seen = 0;
  json doc;
  bool whole = true;
  size_t error_byte = 0;
  std::string error_what;
  try {
    doc = parse_json(text, "the whole file");
  } catch (const JsonError& e) {
    whole = false;
    error_byte = e.byte;
    error_what = e.what();
  }
  if (whole) {
    if (doc.is_array()) {
      for (size_t i = 0; i < doc.size(); ++i)
        parse_trace(doc[i], w, name + ": [" + std::to_string(i) + "]", seen);
    } else if (doc.is_object() && doc.contains("traces")) {
      DS_CHECK(doc["traces"].is_array(), name + ": \"traces\" must be an array");
      for (size_t i = 0; i < doc["traces"].size(); ++i)
        parse_trace(doc["traces"][i], w, name + ": traces[" + std::to_string(i) + "]", seen);
      if (doc.contains("block_size") && seen == 0) seen = require_count(doc, "block_size", name);
    } else {
      parse_trace(doc, w, name + ": trace", seen);
    }
  } else {
    // Not one document: JSONL, one trace per line. A file whose first line is not a complete
    // object was meant as one document, so report the whole-document parse error instead.
    std::istringstream in(text);
    std::string line;
    int line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      json j;
      try {
        j = parse_json(line, name + ":" + std::to_string(line_no));
      } catch (const JsonError& e) {
        if (w.sessions.empty() && line_no == 1 && error_byte > 0 && line_of(text, error_byte) > 1)
          throw Error(name + ":" + std::to_string(line_of(text, error_byte)) + ": " + error_what);
        throw;
      }
      parse_trace(j, w, name + ":" + std::to_string(line_no), seen);
    }
  }
  DS_CHECK(!w.sessions.empty(), name + ": no traces");
  w.block_size = block_size > 0 ? block_size : (seen > 0 ? seen : 64);
  return w;
}

Workload load_agentic(const std::string& path, int64_t block_size) {
  return parse_agentic(read_text_file(path), path, block_size);
}

}  // namespace ds::bench
