// JSON schemas compiled to grammars: what each supported keyword accepts and refuses, the
// refusals of unsupported keywords (naming them and where), and a differential test of the
// any-JSON grammar against nlohmann's parser on random and mutated documents.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>

#include "grammar/json_schema.h"
#include "grammar_test_util.h"

namespace ds::grammar {
namespace {

using nlohmann::json;
using testing::matches;

Grammar compile(const char* schema) { return json_schema_grammar(nlohmann::ordered_json::parse(schema)); }

TEST(JsonSchema, ObjectPropertiesInOrderRequiredAndOptional) {
  const Grammar g = compile(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},
    "c":{"type":"boolean"}},"required":["a","c"]})");
  EXPECT_TRUE(matches(g, R"({"a":1,"b":"x","c":true})"));
  EXPECT_TRUE(matches(g, R"({"a": -12, "c": false})"));
  EXPECT_TRUE(matches(g, R"({"a":0,"b":"","c":true})"));
  EXPECT_FALSE(matches(g, R"({"a":1,"b":"x"})")) << "c is required";
  EXPECT_FALSE(matches(g, R"({"c":true,"a":1})")) << "declared order";
  EXPECT_FALSE(matches(g, R"({"a":1.5,"c":true})")) << "integer";
  EXPECT_FALSE(matches(g, R"({"a":01,"c":true})")) << "no leading zeros";
  EXPECT_FALSE(matches(g, R"({"a":1,"c":true,"d":1})")) << "no undeclared properties";
  EXPECT_FALSE(matches(g, R"({"a":1,  "c":true})")) << "at most one space";
  EXPECT_FALSE(matches(g, R"({"a":1,"c":true})" " ")) << "nothing after the value";
}

TEST(JsonSchema, AllOptionalPropertiesNeedNoLeadingComma) {
  const Grammar g = compile(R"({"properties":{"a":{"type":"null"},"b":{"type":"null"}}})");
  for (const char* ok : {"{}", R"({"a":null})", R"({"b":null})", R"({"a":null,"b":null})"})
    EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {R"({,"b":null})", R"({"a":null,})", R"({"b":null,"a":null})"}) EXPECT_FALSE(matches(g, bad)) << bad;
}

TEST(JsonSchema, EnumConstAnyOfAndTypeLists) {
  const Grammar e = compile(R"({"enum":["red","green",3,null]})");
  for (const char* ok : {R"("red")", R"("green")", "3", "null"}) EXPECT_TRUE(matches(e, ok)) << ok;
  for (const char* bad : {R"("blue")", "4", R"("re")"}) EXPECT_FALSE(matches(e, bad)) << bad;
  EXPECT_TRUE(matches(compile(R"({"const":{"k":[1,2]}})"), R"({"k":[1,2]})"));
  const Grammar a = compile(R"({"anyOf":[{"type":"integer"},{"type":"array","items":{"type":"string"}}]})");
  EXPECT_TRUE(matches(a, "7"));
  EXPECT_TRUE(matches(a, R"(["a", "b"])"));
  EXPECT_FALSE(matches(a, R"([1])"));
  const Grammar t = compile(R"({"type":["string","null"]})");
  EXPECT_TRUE(matches(t, R"("s")"));
  EXPECT_TRUE(matches(t, "null"));
  EXPECT_FALSE(matches(t, "1"));
}

TEST(JsonSchema, ArrayAndStringBounds) {
  const Grammar g = compile(R"({"type":"array","items":{"type":"number"},"minItems":1,"maxItems":3})");
  EXPECT_FALSE(matches(g, "[]"));
  EXPECT_TRUE(matches(g, "[1]"));
  EXPECT_TRUE(matches(g, "[1.5, -2e10,3E-2]"));
  EXPECT_FALSE(matches(g, "[1,2,3,4]"));
  const Grammar s = compile(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_FALSE(matches(s, R"("a")"));
  EXPECT_TRUE(matches(s, R"("ab")"));
  EXPECT_TRUE(matches(s, R"("a\nb")")) << "an escape is one character";
  EXPECT_TRUE(matches(s, "\"\xc3\xa9t\xc3\xa9\"")) << "UTF-8 characters count once";
  EXPECT_FALSE(matches(s, R"("abcd")"));
}

TEST(JsonSchema, StringsAreWellFormedJson) {
  const Grammar s = compile(R"({"type":"string"})");
  EXPECT_TRUE(matches(s, R"("a\"b\\c\u00e9\/")"));
  EXPECT_FALSE(matches(s, "\"a\nb\"")) << "a raw newline";
  EXPECT_FALSE(matches(s, R"("\x")"));
  EXPECT_FALSE(matches(s, "\"\xc0\xaf\"")) << "an overlong encoding";
  EXPECT_FALSE(matches(s, "\"\xed\xa0\x80\"")) << "a surrogate";
  EXPECT_FALSE(matches(s, "\"\xff\""));
}

TEST(JsonSchema, PatternAndFormat) {
  const Grammar p = compile(R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"})");
  EXPECT_TRUE(matches(p, R"("AB-123")"));
  EXPECT_FALSE(matches(p, R"("AB-12")"));
  EXPECT_FALSE(matches(p, R"("ab-123")"));
  const Grammar d = compile(R"({"type":"string","format":"date"})");
  EXPECT_TRUE(matches(d, R"("2026-12-03")"));
  EXPECT_FALSE(matches(d, R"("2026-13-03")"));
  const Grammar u = compile(R"({"type":"string","format":"uuid"})");
  EXPECT_TRUE(matches(u, R"("123e4567-e89b-12d3-a456-426614174000")"));
}

TEST(JsonSchema, RecursiveRefs) {
  const Grammar g = compile(R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object",
    "properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}}})");
  EXPECT_TRUE(matches(g, R"({"v":1})"));
  EXPECT_TRUE(matches(g, R"({"v":1,"kids":[]})"));
  EXPECT_TRUE(matches(g, R"({"v":1,"kids":[{"v":2}]})"));
  EXPECT_TRUE(matches(g, R"({"v":3,"kids":[{"v":2},{"v":3}]})"));
  EXPECT_TRUE(matches(g, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"));
  EXPECT_FALSE(matches(g, R"({"v":1,"kids":[{"w":2}]})"));
}

TEST(JsonSchema, AdditionalPropertiesMaps) {
  const Grammar m = compile(R"({"type":"object","additionalProperties":{"type":"integer"}})");
  EXPECT_TRUE(matches(m, "{}"));
  EXPECT_TRUE(matches(m, R"({"x":1, "y":2})"));
  EXPECT_FALSE(matches(m, R"({"x":"1"})"));
  EXPECT_TRUE(matches(compile(R"({"type":"object","additionalProperties":false})"), "{}"));
  EXPECT_FALSE(matches(compile(R"({"type":"object","additionalProperties":false})"), R"({"a":1})"));
}

void expect_refusal(const char* schema, const std::string& names, const std::string& where) {
  try {
    (void)compile(schema);
    ADD_FAILURE() << "accepted " << schema;
  } catch (const SchemaError& e) {
    EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
    EXPECT_EQ(e.where(), where) << e.what();
  }
}

TEST(JsonSchema, UnsupportedFeaturesAreNamedWithTheirPlace) {
  expect_refusal(R"({"type":"integer","minimum":0})", "minimum", "/minimum");
  expect_refusal(R"({"properties":{"a":{"type":"string","format":"email"}}})", "email", "/properties/a/format");
  expect_refusal(R"({"properties":{"a/b":{"not":{}}}})", "not", "/properties/a~1b/not");
  expect_refusal(R"({"required":["x"],"properties":{}})", "'x'", "/required");
  expect_refusal(R"({"$ref":"#/$defs/none"})", "#/$defs/none", "/$ref");
  expect_refusal(R"({"$ref":"http://example.com/s.json"})", "not supported", "/$ref");
  expect_refusal(R"J({"type":"string","pattern":"(?=a)"})J", "'(?'", "/pattern");
  expect_refusal(R"({"type":"string","pattern":"a\"b"})", "escape", "/pattern");
  expect_refusal(R"({"type":"tuple"})", "tuple", "/type");
  expect_refusal(R"(false)", "matches nothing", "");
  expect_refusal(R"({"type":"string","maxLength":100000})", "maxLength", "/maxLength");
}

// Random documents: nlohmann's compact dump of random values, and mutations of it (bytes
// deleted, duplicated or replaced by JSON punctuation). The any-object grammar must agree with
// nlohmann's parser on every one, except where the grammar is knowingly narrower (whitespace,
// numbers' digit counts), which the generator avoids.
json random_value(std::mt19937& rng, int depth) {
  const int kind = int(rng() % (depth > 3 ? 5u : 7u));
  switch (kind) {
    case 0: return nullptr;
    case 1: return bool(rng() & 1);
    case 2: return int(rng() % 2001) - 1000;
    case 3: return double(int(rng() % 20001) - 10000) / 64.0;
    case 4: {
      std::string s;
      const char* alphabet = "ab\"\\/\n\t\x01 z\xc3\xa9";
      for (unsigned i = 0, n = rng() % 6; i < n; ++i) s += alphabet[rng() % 13];
      try {
        (void)json(s).dump();
      } catch (const json::exception&) {
        s = "x";  // a split \xc3\xa9 is not UTF-8
      }
      return s;
    }
    case 5: {
      json a = json::array();
      for (unsigned i = 0, n = rng() % 4; i < n; ++i) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      for (unsigned i = 0, n = rng() % 4; i < n; ++i) o["k" + std::to_string(rng() % 5)] = random_value(rng, depth + 1);
      return o;
    }
  }
}

TEST(JsonSchema, AnyObjectGrammarAgreesWithAJsonParser) {
  const Grammar g = json_object_grammar();
  std::mt19937 rng(7);
  int valid = 0, invalid = 0;
  for (int i = 0; i < 400; ++i) {
    json o = json::object();
    for (unsigned k = 0, n = rng() % 4; k < n; ++k) o["p" + std::to_string(k)] = random_value(rng, 1);
    std::string doc = o.dump();
    for (int mutation = 0; mutation < 4; ++mutation) {
      const json parsed = json::parse(doc, nullptr, false);
      const bool ok = !parsed.is_discarded() && parsed.is_object();
      EXPECT_EQ(matches(g, doc), ok) << doc;
      (ok ? valid : invalid) += 1;
      if (doc.empty()) break;
      const size_t at = rng() % doc.size();
      const char* punct = "{}[],:\"0-.e";
      switch (rng() % 3) {
        case 0: doc.erase(at, 1); break;
        case 1: doc.insert(at, 1, doc[at]); break;
        default: doc[at] = punct[rng() % 11];
      }
    }
  }
  EXPECT_GT(valid, 400);
  EXPECT_GT(invalid, 300);
}

}  // namespace
}  // namespace ds::grammar
