// Trace parsing: good and malformed Mooncake and agentic traces.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "bench/trace_agentic.h"
#include "bench/trace_mooncake.h"
#include "core/error.h"

namespace ds::bench {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MooncakeTrace, ParsesTheSharedSlice) {
  const std::string path =
      std::string(DS_SOURCE_DIR) + "/../shared/traces/mooncake_conversation_head1000.jsonl";
  if (!std::ifstream(path))
    GTEST_SKIP() << "outside the project checkout layout (a fresh clone in CI has no ../shared beside it): no Mooncake trace slice at "
                 << path << "; the synthetic and in-memory traces above and in MooncakeTrace.* cover the parser";
  Workload w = load_mooncake(path);
  ASSERT_EQ(w.sessions.size(), 1000u);  // no session_id: each line is its own session
  EXPECT_EQ(w.block_size, 512);
  const TraceRequest& r = w.sessions[0].requests[0];
  EXPECT_EQ(r.input_tokens, 6758);
  EXPECT_EQ(r.output_tokens, 500);
  EXPECT_EQ(r.hash_ids.size(), 14u);
  EXPECT_EQ(w.sessions[1].requests[0].hash_ids[0], 0u);  // the shared first block
}

TEST(MooncakeTrace, GroupsSessionsAndReadsDelays) {
  std::istringstream in(
      R"({"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [1], "session_id": "a"}
{"timestamp": 10, "input_length": 50, "output_length": 5, "hash_ids": [2], "session_id": 7}

{"timestamp": 3000, "input_length": 300, "output_length": 5, "hash_ids": [1], "session_id": "a"}
{"timestamp": 4000, "input_length": 400, "output_length": 5, "hash_ids": [1], "session_id": "a", "delay": 250}
)");
  Workload w = parse_mooncake(in, "t.jsonl", 128);
  ASSERT_EQ(w.sessions.size(), 2u);
  ASSERT_EQ(w.sessions[0].requests.size(), 3u);
  EXPECT_EQ(w.sessions[0].id, "a");
  EXPECT_EQ(w.sessions[1].id, "7");
  EXPECT_DOUBLE_EQ(w.sessions[0].requests[0].delay_s, 0.0);
  EXPECT_DOUBLE_EQ(w.sessions[0].requests[1].delay_s, 3.0);   // timestamp gap
  EXPECT_DOUBLE_EQ(w.sessions[0].requests[2].delay_s, 0.25);  // recorded delay wins
  EXPECT_EQ(w.block_size, 128);
}

TEST(MooncakeTrace, MalformedLinesNameTheLine) {
  auto parse = [](const std::string& text) {
    std::istringstream in(text);
    return error_of([&] { parse_mooncake(in, "bad.jsonl"); });
  };
  const std::string good = R"({"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [0]})";
  EXPECT_NE(parse(good + "\n{not json\n").find("bad.jsonl:2:"), std::string::npos);
  EXPECT_NE(parse(good + "\n" + good + "\n" + R"({"timestamp": 0, "output_length": 5, "hash_ids": [0]})")
                .find("bad.jsonl:3: missing field \"input_length\""),
            std::string::npos);
  EXPECT_NE(parse(R"({"input_length": -4, "output_length": 5, "hash_ids": [0]})").find("bad.jsonl:1:"),
            std::string::npos);
  EXPECT_NE(parse(R"({"input_length": 4, "output_length": 5, "hash_ids": [0, "x"]})")
                .find("\"hash_ids\"[1]"),
            std::string::npos);
  EXPECT_NE(parse("\n\n").find("no requests"), std::string::npos);
}

const char* kAgentic = R"({
  "id": "trace_a",
  "block_size": 64,
  "hash_id_scope": "local",
  "requests": [
    {"t": 0.0, "type": "n", "in": 130, "out": 12, "hash_ids": [1, 2, 3], "stop": "tool_use", "api_time": 2.0},
    {"t": 5.0, "type": "n", "in": 200, "out": 10, "hash_ids": [1, 2, 4, 5], "think_time": 1.5},
    {"t": 9.0, "type": "subagent", "agent_id": "explore", "requests": [
      {"t": 9.0, "in": 64, "out": 8, "hash_ids": [1]},
      {"t": 12.0, "in": 100, "out": 8, "hash_ids": [1, 9], "api_time": 1.0}
    ]},
    {"t": 9.5, "type": "subagent", "background": true, "requests": [{"in": 10, "out": 2, "hash_ids": [7]}]},
    {"t": 20.0, "in": 260, "out": 20, "hash_ids": [1, 2, 4, 5, 6], "stop": "end_turn"}
  ]
})";

TEST(AgenticTrace, ParsesRequestsSubagentsAndGaps) {
  Workload w = parse_agentic(kAgentic, "a.json");
  ASSERT_EQ(w.sessions.size(), 1u);
  EXPECT_EQ(w.block_size, 64);
  const Session& s = w.sessions[0];
  ASSERT_EQ(s.requests.size(), 3u);
  EXPECT_EQ(s.requests[0].stop_reason, "tool_use");
  EXPECT_DOUBLE_EQ(s.requests[1].delay_s, 1.5);  // think_time as recorded
  EXPECT_DOUBLE_EQ(s.requests[2].delay_s, 20.0 - 5.0);  // t gap, previous had no api_time
  // Local scope: equal ids within the trace stay equal.
  EXPECT_EQ(s.requests[0].hash_ids[0], s.requests[2].hash_ids[0]);
  ASSERT_EQ(s.spawns.size(), 2u);
  EXPECT_EQ(s.spawns[0].after_request, 1);
  EXPECT_FALSE(s.spawns[0].background);
  EXPECT_TRUE(s.spawns[1].background);
  EXPECT_EQ(s.spawns[0].child.requests.size(), 2u);
  EXPECT_EQ(s.spawns[0].child.id, "trace_a/explore");
  EXPECT_EQ(s.spawns[0].child.requests[0].hash_ids[0], s.requests[0].hash_ids[0]);
}

TEST(AgenticTrace, LocalScopeSeparatesTraces) {
  const std::string two = std::string("[") + kAgentic + "," + kAgentic + "]";
  Workload w = parse_agentic(two, "two.json");
  ASSERT_EQ(w.sessions.size(), 2u);
  EXPECT_NE(w.sessions[0].requests[0].hash_ids[0], w.sessions[1].requests[0].hash_ids[0]);
  std::string global = two;
  for (size_t p; (p = global.find("\"local\"")) != std::string::npos;) global.replace(p, 7, "\"global\"");
  Workload g = parse_agentic(global, "g.json");
  EXPECT_EQ(g.sessions[0].requests[0].hash_ids[0], g.sessions[1].requests[0].hash_ids[0]);
}

TEST(AgenticTrace, JsonlAndMalformedInput) {
  const std::string line1 = R"({"requests": [{"in": 10, "out": 2, "hash_ids": [1]}]})";
  Workload w = parse_agentic(line1 + "\n" + line1 + "\n", "t.jsonl");
  EXPECT_EQ(w.sessions.size(), 2u);
  EXPECT_EQ(w.block_size, 64);

  std::string e = error_of([&] { parse_agentic(line1 + "\n" + "{\"requests\": [}\n", "t.jsonl"); });
  EXPECT_NE(e.find("t.jsonl:2:"), std::string::npos) << e;
  e = error_of([&] { parse_agentic("{\n  \"requests\": [\n    {\"in\": 10,, }\n  ]\n}\n", "p.json"); });
  EXPECT_NE(e.find("p.json:3:"), std::string::npos) << e;
  e = error_of([&] { parse_agentic(R"({"requests": [{"out": 2, "hash_ids": [1]}]})", "m.json"); });
  EXPECT_NE(e.find("requests[0]: missing field \"in\""), std::string::npos) << e;
  e = error_of([&] { parse_agentic(R"({"requests": [{"type": "x", "in": 1, "out": 2, "hash_ids": []}]})", "m.json"); });
  EXPECT_NE(e.find("unknown type"), std::string::npos) << e;
}

}  // namespace
}  // namespace ds::bench
