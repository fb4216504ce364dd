// Issue 40's hostile schemas over HTTP: every one is answered (a 400 naming the field, or a
// constrained answer) and the server goes on serving. Before, each of the crash classes killed
// the process with every stream on it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server_harness.h"

namespace ds::testing {
namespace {

json with_schema(const json& schema) {
  return {{"model", "fake"},
          {"messages", json::array({{{"role", "user"}, {"content", "Answer in JSON."}}})},
          {"max_tokens", 24},
          {"temperature", 0},
          {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "s"}, {"schema", schema}}}}}};
}

json with_tool(const json& parameters) {
  return {{"model", "fake"},
          {"messages", json::array({{{"role", "user"}, {"content", "Call it."}}})},
          {"max_tokens", 24},
          {"temperature", 0},
          {"tool_choice", "required"},
          {"tools", json::array({{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", parameters}}}}})}};
}

std::string chain_of_definitions(int n) {
  json defs = json::object();
  for (int i = 0; i < n; ++i) defs["d" + std::to_string(i)] = {{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
  defs["d" + std::to_string(n)] = {{"type", "integer"}};
  return json{{"type", "object"}, {"properties", {{"v", {{"$ref", "#/$defs/d0"}}}}}, {"$defs", defs}}.dump();
}

TEST(HostileSchemaServer, EveryClassIsAnsweredAndTheServerServesOn) {
  TestServer s;
  struct Case {
    std::string what, schema;
    int status;  // 400, or 200 for schemas that are valid after all
    bool names_param = true;  // a 400 names the field (a body refused as a whole names none)
    // Tools are part of the prompt: past the test server's 1,024 tokens the prompt's length is
    // what answers, so only the small schemas go as tools too (the compiler's handling of the
    // large ones as tools is output_constraint_test's).
    bool as_tool = true;
  };
  json big_enum = json::array();
  for (int i = 0; i < 50000; ++i) big_enum.push_back("item-" + std::to_string(i));
  const std::vector<Case> cases = {
      {"left recursion through anyOf",
       R"({"$defs":{"expr":{"anyOf":[{"type":"object","properties":{"l":{"$ref":"#/$defs/expr"}}},{"$ref":"#/$defs/expr"},
          {"type":"integer"}]}},"$ref":"#/$defs/expr"})",
       400},
      {"mutual left recursion", R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/b"},{"type":"null"}]},"b":{"$ref":"#/$defs/a"}},
          "$ref":"#/$defs/a"})",
       400},
      {"no finite value", R"({"$defs":{"a":{"type":"object","properties":{"x":{"$ref":"#/$defs/a"}},"required":["x"]}},
          "$ref":"#/$defs/a"})",
       400},
      {"nullable loop (a*)*", R"({"type":"object","properties":{"s":{"type":"string","pattern":"(a*)*"}},"required":["s"]})", 200},
      {"nullable loop (|a)+", R"({"type":"string","pattern":"x(|a)+"})", 200},
      {"nested bounded quantifiers", R"({"type":"string","pattern":"((a{1,20}){1,20}){1,20}"})", 400},
      {"100,000 nested groups", json{{"type", "string"}, {"pattern", std::string(100000, '(') + "a" + std::string(100000, ')')}}.dump(), 400, true, false},
      {"a billion maxLength", R"({"type":"string","maxLength":1000000000})", 400},
      {"a million minItems", R"({"type":"array","minItems":1000000})", 400},
      {"3,000 chained definitions", chain_of_definitions(3000), 200, true, false},
      {"14,000 chained definitions", chain_of_definitions(14000), 400, false, false},
      {"50,000 enum values", json{{"enum", big_enum}}.dump(), 200, true, false},
  };
  for (const Case& c : cases) {
    const json schema = json::parse(c.schema);
    for (bool tool : {false, true}) {
      if (tool && !c.as_tool) continue;
      // Tool parameters are an object: the schema becomes its one property, its $defs the
      // parameters' own (where "#/$defs/..." points).
      json inner = schema;
      json p = {{"type", "object"}, {"required", {"v"}}};
      if (inner.contains("$defs")) {
        p["$defs"] = inner["$defs"];
        inner.erase("$defs");
      }
      p["properties"] = {{"v", inner}};
      const HttpResult r = post(s.port, "/v1/chat/completions", tool ? with_tool(p) : with_schema(schema));
      EXPECT_EQ(r.status, c.status) << c.what << (tool ? " (tool)" : " (response_format)") << ": " << r.raw.substr(0, 300);
      if (r.status == 400 && c.names_param) {
        EXPECT_EQ(r.body["error"]["param"], tool ? "tools" : "response_format") << c.what << ": " << r.raw.substr(0, 300);
      }
      if (r.status == 400) {
        EXPECT_LT(r.raw.size(), 2000u) << c.what << ": the message quotes, it does not echo";
      }
    }
  }
  const HttpResult ok = post(s.port, "/v1/chat/completions",
                             {{"model", "fake"}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}, {"max_tokens", 2}});
  EXPECT_EQ(ok.status, 200) << ok.raw;
}

}  // namespace
}  // namespace ds::testing
