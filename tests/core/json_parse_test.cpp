// The bounded JSON parse (core/json_parse.h): nesting up to the limit parses, one level more is
// refused naming the limit, whatever the shape (arrays, objects, mixed, unclosed), before a
// value that deep exists, so nothing walks it.
#include "core/json_parse.h"

#include <gtest/gtest.h>

#include <string>

namespace ds {
namespace {

std::string arrays(int depth) { return std::string(size_t(depth), '[') + std::string(size_t(depth), ']'); }

std::string objects(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += "{\"k\":";
  return s + "null" + std::string(size_t(depth), '}');
}

std::string error_of(const std::string& text, int max_depth = kMaxJsonDepth) {
  try {
    parse_json(text, "where", max_depth);
  } catch (const JsonError& e) {
    return e.what();
  }
  return "";
}

TEST(JsonParse, NestingUpToTheLimitParses) {
  EXPECT_EQ(parse_json("1", "w"), 1);
  nlohmann::json j = parse_json(arrays(kMaxJsonDepth), "w");
  int depth = 0;
  const nlohmann::json* v = &j;
  while (v->is_array()) {
    ++depth;
    if (v->empty()) break;
    v = &(*v)[0];
  }
  EXPECT_EQ(depth, kMaxJsonDepth);
  EXPECT_TRUE(parse_json(objects(kMaxJsonDepth), "w").is_object());
  EXPECT_EQ(parse_json("[[1]]", "w", 2), nlohmann::json::parse("[[1]]"));
  EXPECT_EQ(error_of("[[1]]", 1), "where: JSON nests deeper than 1 levels (the limit)");
}

TEST(JsonParse, OneLevelMoreIsRefusedNamingTheLimit) {
  const std::string want = "where: JSON nests deeper than 256 levels (the limit)";
  EXPECT_EQ(error_of(arrays(kMaxJsonDepth + 1)), want);
  EXPECT_EQ(error_of(objects(kMaxJsonDepth + 1)), want);
  // A million levels, closed or not, mixed, or inside a wide object: the same error, at once.
  EXPECT_EQ(error_of(arrays(1000000)), want);
  EXPECT_EQ(error_of(std::string(1000000, '[')), want);
  std::string mixed;
  for (int i = 0; i < 100000; ++i) mixed += i % 2 ? "{\"a\":" : "[";
  EXPECT_EQ(error_of(mixed), want);
  EXPECT_EQ(error_of(R"({"a":1,"b":[2,3],"c":)" + arrays(300) + "}"), want);
  // The ordered flavour too.
  try {
    parse_json<nlohmann::ordered_json>(arrays(1000), "ordered");
    FAIL() << "parsed 1000 levels";
  } catch (const JsonError& e) {
    EXPECT_STREQ(e.what(), "ordered: JSON nests deeper than 256 levels (the limit)");
  }
  EXPECT_TRUE(parse_json_or_discarded(arrays(1000)).is_discarded());
  EXPECT_FALSE(parse_json_or_discarded(arrays(10)).is_discarded());
}

TEST(JsonParse, SyntaxErrorsNameWhereAndThePosition) {
  const std::string m = error_of("{\"a\": ");
  EXPECT_EQ(m.rfind("where: not valid JSON: ", 0), 0u) << m;
  try {
    parse_json("[1,\n2,\nx]", "w");
    FAIL();
  } catch (const JsonError& e) {
    EXPECT_GT(e.byte, 0u);
  }
  EXPECT_EQ(error_of("1e400").rfind("where: not valid JSON: ", 0), 0u);  // too large for a double
  EXPECT_TRUE(parse_json_or_discarded("{").is_discarded());
  EXPECT_TRUE(parse_json_or_discarded("").is_discarded());
}

TEST(JsonParse, TheCallersCallbackStillRuns) {
  int keys = 0;
  const nlohmann::json::parser_callback_t count = [&](int, nlohmann::json::parse_event_t ev, nlohmann::json&) {
    keys += ev == nlohmann::json::parse_event_t::key;
    return true;
  };
  const auto j = parse_json(R"({"a":1,"b":{"c":2}})", "w", kMaxJsonDepth, count);
  EXPECT_EQ(keys, 3);
  EXPECT_EQ(j["b"]["c"], 2);
}

}  // namespace
}  // namespace ds

namespace ds {
namespace {

TEST(JsonParse, ManyObjectsInOneObjectCostLinearTime) {
  // nlohmann's callback parser rescans an object after each object inside it: a million members
  // took hours (the test's timeout is what catches that). The bounded parse checks the nesting
  // in a SAX pass and builds without a callback.
  std::string text = "{";
  for (int i = 0; i < 1000000; ++i) text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":{}";
  text += "}";
  const nlohmann::json j = parse_json(text, "w");
  EXPECT_EQ(j.size(), 1000000u);
  int keys = 0;
  const nlohmann::json::parser_callback_t count = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& k) {
    if (ev == nlohmann::json::parse_event_t::key) {
      EXPECT_EQ(depth, 1);
      EXPECT_TRUE(k.is_string());
      ++keys;
    }
    return true;
  };
  (void)parse_json(text, "w", kMaxJsonDepth, count);
  EXPECT_EQ(keys, 1000000);
}

}  // namespace
}  // namespace ds
