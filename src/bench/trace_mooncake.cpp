#include "bench/trace_mooncake.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "bench/trace_util.h"
#include "core/error.h"
#include "core/json_parse.h"

namespace ds::bench {

using nlohmann::json;

Workload parse_mooncake(std::istream& in, const std::string& name, int64_t block_size) {
  DS_CHECK(block_size > 0, "--block-size must be positive");
  Workload w;
  w.source = name;
  w.format = "mooncake";
  w.block_size = block_size;
  std::unordered_map<std::string, size_t> session_index;
  std::unordered_map<std::string, double> last_timestamp_ms;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = name + ":" + std::to_string(line_no);
    json j;
    try {
      j = parse_json(line, where);
    } catch (const JsonError& e) {
      throw Error(e.what());
    }
    DS_CHECK(j.is_object(), where + ": expected a JSON object per line");
    TraceRequest r;
    r.input_tokens = require_count(j, "input_length", where);
    r.output_tokens = require_count(j, "output_length", where);
    r.hash_ids = require_hash_ids(j, "hash_ids", where);
    const double ts = optional_number(j, "timestamp", where, 0.0);

    std::string sid;
    if (j.contains("session_id") && !j["session_id"].is_null()) {
      auto& s = j["session_id"];
      DS_CHECK(s.is_string() || s.is_number_integer(),
               where + ": session_id must be a string or an integer");
      sid = s.is_string() ? s.get<std::string>() : std::to_string(s.get<int64_t>());
    }
    // Without a recorded delay, a follow-up turn waits the start-to-start gap of the trace; the
    // replay's idle-gap cap keeps long pauses from stalling a lane.
    double delay_ms = 0;
    if (j.contains("delay")) {
      delay_ms = optional_number(j, "delay", where, 0.0);
      DS_CHECK(delay_ms >= 0, where + ": delay must not be negative");
    } else if (!sid.empty() && last_timestamp_ms.count(sid)) {
      delay_ms = std::max(0.0, ts - last_timestamp_ms[sid]);
    }
    r.delay_s = delay_ms / 1000.0;

    if (sid.empty()) {
      Session s;
      s.id = "line-" + std::to_string(line_no);
      s.requests.push_back(std::move(r));
      w.sessions.push_back(std::move(s));
      continue;
    }
    last_timestamp_ms[sid] = ts;
    auto it = session_index.find(sid);
    if (it == session_index.end()) {
      session_index[sid] = w.sessions.size();
      Session s;
      s.id = sid;
      w.sessions.push_back(std::move(s));
      it = session_index.find(sid);
    }
    w.sessions[it->second].requests.push_back(std::move(r));
  }
  DS_CHECK(!w.sessions.empty(), name + ": the trace has no requests");
  return w;
}

Workload load_mooncake(const std::string& path, int64_t block_size) {
  std::ifstream f(path);
  DS_CHECK(f, "cannot open trace " + path);
  return parse_mooncake(f, path, block_size);
}

}  // namespace ds::bench
