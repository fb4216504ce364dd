// Schemas and patterns built to crash, hang or bloat the compilers and the matcher (issue 40's
// hostile review): each must give a clear error, or a correct grammar, within the grammar's
// limits. No timing assertions: what bounds the time is structural (no recursion per $ref, an
// automaton per pattern, a cap on stacks), and those structures are what is checked.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <pthread.h>

#include <memory>
#include <string>
#include <vector>

#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar/token_constraint.h"
#include "grammar/token_vocabulary.h"
#include "grammar_test_util.h"

namespace ds::grammar {
namespace {

using json = nlohmann::ordered_json;
using testing::matches;

Grammar compile(const std::string& schema, const GrammarLimits& limits = {}) {
  return json_schema_grammar(json::parse(schema), limits);
}

// The SchemaError a schema gives; fails the test when it compiles.
SchemaError refusal(const std::string& schema) {
  try {
    (void)compile(schema);
  } catch (const SchemaError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted " << schema.substr(0, 200);
  return SchemaError("", "");
}

// Stacks alive after feeding `text` to the matcher from the start (0 when a byte was refused).
size_t heads_after(const Grammar& g, const std::string& text, bool* overflowed = nullptr) {
  Matcher m(g);
  std::vector<int32_t> cur, next;
  m.initial(&cur);
  for (char c : text) {
    next.clear();
    if (!m.advance(cur.data(), cur.size(), uint8_t(c), &next)) {
      if (overflowed) *overflowed = m.overflowed();
      return 0;
    }
    cur.swap(next);
  }
  if (overflowed) *overflowed = false;
  return cur.size();
}

TEST(HostileSchema, LeftRecursionIsRefusedNamingTheDefinition) {
  // The review's crash: a definition that reaches itself through anyOf before any character.
  const char* expr = R"({"$defs":{"expr":{"anyOf":[{"type":"object","properties":{"l":{"$ref":"#/$defs/expr"}}},
      {"$ref":"#/$defs/expr"},{"type":"integer"}]}},"$ref":"#/$defs/expr"})";
  SchemaError e = refusal(expr);
  EXPECT_NE(std::string(e.what()).find("'#/$defs/expr' is left-recursive"), std::string::npos) << e.what();
  EXPECT_EQ(e.where(), "/$defs/expr");
  // Variants with a way out (so the loop, not a missing value, is the fault): through another
  // definition, under oneOf inside an array, in definitions.
  for (const std::string& s : std::vector<std::string>{
           R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"})",
           R"({"$defs":{"a":{"oneOf":[{"$ref":"#/$defs/a"},{"type":"string"}]}},"type":"array","items":{"$ref":"#/$defs/a"}})",
           R"({"definitions":{"x":{"anyOf":[{"$ref":"#/definitions/x"},{"const":1}]}},"$ref":"#/definitions/x"})"}) {
    SchemaError v = refusal(s);
    EXPECT_NE(std::string(v.what()).find("left-recursive"), std::string::npos) << s << ": " << v.what();
    EXPECT_TRUE(v.where().starts_with("/$defs/") || v.where().starts_with("/definitions/")) << s << ": " << v.where();
  }
  // Without one (directly, through allOf), nothing finite matches: said as such.
  for (const std::string& s : std::vector<std::string>{
           R"({"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})",
           R"({"$defs":{"a":{"allOf":[{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"})"}) {
    SchemaError v = refusal(s);
    EXPECT_NE(std::string(v.what()).find("'#/$defs/a' admits no finite value"), std::string::npos) << s << ": " << v.what();
  }
}

TEST(HostileSchema, RecursionThroughCharactersStillWorks) {
  // Recursion after a character ('[' or '{') is fine and stays supported.
  const Grammar g = compile(R"({"$defs":{"t":{"anyOf":[{"type":"integer"},{"type":"array","items":{"$ref":"#/$defs/t"}}]}},
      "$ref":"#/$defs/t"})");
  EXPECT_TRUE(matches(g, "[[1,[2]],[]]"));
  EXPECT_FALSE(matches(g, "[[1,[2]],[]"));
}

TEST(HostileSchema, NoFiniteValueIsRefusedAndDeadBranchesArePruned) {
  // An object whose required property is itself: no finite JSON value matches.
  SchemaError e = refusal(R"({"$defs":{"a":{"type":"object","properties":{"x":{"$ref":"#/$defs/a"}},"required":["x"]}},
      "$ref":"#/$defs/a"})");
  EXPECT_NE(std::string(e.what()).find("'#/$defs/a' admits no finite value"), std::string::npos) << e.what();
  EXPECT_EQ(e.where(), "/$defs/a");
  // Variants: a non-empty array of itself; two definitions requiring each other.
  for (const std::string& s : std::vector<std::string>{
           R"({"$defs":{"a":{"type":"array","items":{"$ref":"#/$defs/a"},"minItems":1}},"$ref":"#/$defs/a"})",
           R"({"$defs":{"a":{"type":"object","properties":{"b":{"$ref":"#/$defs/b"}},"required":["b"]},
               "b":{"type":"array","items":{"$ref":"#/$defs/a"},"minItems":2}},"properties":{"p":{"$ref":"#/$defs/a"}},
               "required":["p"]})"}) {
    SchemaError v = refusal(s);
    EXPECT_NE(std::string(v.what()).find("admits no finite value"), std::string::npos) << s << ": " << v.what();
  }
  // With a way out, the endless branch is dropped and the rest is kept.
  const Grammar g = compile(R"({"$defs":{"a":{"type":"object","properties":{"x":{"$ref":"#/$defs/a"}},"required":["x"]}},
      "anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]})");
  EXPECT_TRUE(matches(g, "null"));
  EXPECT_FALSE(testing::viable_prefix(g, "{")) << "no output may start the endless object";
}

TEST(HostileSchema, LongChainsOfDefinitionsCompileWithoutRecursion) {
  // 14,000 definitions, each referring to the next: compiled from a worklist, not the stack.
  json defs = json::object();
  const int n = 14000;
  for (int i = 0; i < n; ++i) defs["d" + std::to_string(i)] = json{{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
  defs["d" + std::to_string(n)] = json{{"type", "integer"}};
  const json schema = {{"$defs", defs}, {"$ref", "#/$defs/d0"}};
  const Grammar g = json_schema_grammar(schema);
  EXPECT_TRUE(matches(g, "42"));
  EXPECT_FALSE(matches(g, "\"x\""));
  // A cycle of them has no value (and is left-recursive), found without recursion either.
  json cyc = defs;
  cyc["d" + std::to_string(n)] = json{{"$ref", "#/$defs/d0"}};
  try {
    (void)json_schema_grammar(json{{"$defs", cyc}, {"$ref", "#/$defs/d0"}});
    ADD_FAILURE() << "a cycle of references compiled";
  } catch (const SchemaError& e) {
    EXPECT_NE(std::string(e.what()).find("admits no finite value"), std::string::npos) << e.what();
    EXPECT_EQ(e.where().substr(0, 8), "/$defs/d") << e.what();
  }
}

// Runs f on a thread with a 256 KB stack: code that recurses per rule or per definition
// overflows it long before the limits do.
template <class F>
void on_small_stack(F f) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 << 10);
  pthread_t t;
  auto run = [](void* p) -> void* {
    (*static_cast<F*>(p))();
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&t, &attr, run, &f), 0);
  pthread_join(t, nullptr);
  pthread_attr_destroy(&attr);
}

TEST(HostileSchema, ChainsOfAlternativesCostNoStack) {
  // d_i = anyOf[$ref d_{i+1}, null]: the matcher's first state walks 20,000 nested choices.
  const int n = 20000;
  json defs = json::object();
  for (int i = 0; i < n; ++i)
    defs["d" + std::to_string(i)] = json{{"anyOf", {{{"$ref", "#/$defs/d" + std::to_string(i + 1)}}, {{"type", "null"}}}}};
  defs["d" + std::to_string(n)] = json{{"type", "integer"}};
  GrammarLimits big;
  big.max_rules = size_t(1) << 20;
  big.max_symbols = size_t(1) << 22;
  big.max_state_heads = size_t(1) << 16;
  big.max_compile_seconds = 60;
  bool null_ok = false, int_ok = false, str_ok = true;
  on_small_stack([&] {
    const Grammar g = json_schema_grammar(json{{"$defs", defs}, {"$ref", "#/$defs/d0"}}, big);
    null_ok = matches(g, "null");
    int_ok = matches(g, "7");
    str_ok = matches(g, "\"s\"");
  });
  EXPECT_TRUE(null_ok);
  EXPECT_TRUE(int_ok);
  EXPECT_FALSE(str_ok);
}

TEST(HostileSchema, DeepInlineNestingIsRefused) {
  json s = {{"type", "integer"}};
  for (int i = 0; i < 10000; ++i) s = json{{"type", "object"}, {"properties", {{"a", std::move(s)}}}};
  try {
    (void)json_schema_grammar(s);
    ADD_FAILURE() << "10,000 levels compiled";
  } catch (const SchemaError& e) {
    EXPECT_NE(std::string(e.what()).find("nests deeper than"), std::string::npos) << e.what();
  }
  json arr = {{"type", "integer"}};
  for (int i = 0; i < 10000; ++i) arr = json{{"type", "array"}, {"items", std::move(arr)}};
  EXPECT_THROW((void)json_schema_grammar(arr), SchemaError);
}

TEST(HostileSchema, HugeBoundsAreRefused) {
  for (const char* s : {R"({"type":"string","maxLength":1000000})", R"({"type":"string","minLength":4000000000})",
                        R"({"type":"array","minItems":1000000000})", R"({"type":"array","maxItems":-1})"})
    EXPECT_THROW((void)compile(s), SchemaError) << s;
}

TEST(HostileSchema, LargeEnumsAreOneTrie) {
  // 50,000 values (the review's 3.9 s compile): one stack for the whole choice.
  json values = json::array();
  for (int i = 0; i < 50000; ++i) values.push_back("value_" + std::to_string(i * 7919 % 100003));
  const Grammar g = json_schema_grammar(json{{"enum", values}});
  EXPECT_TRUE(matches(g, "\"value_" + std::to_string(7919) + "\""));
  EXPECT_FALSE(matches(g, "\"value_\""));
  EXPECT_FALSE(matches(g, "\"value_100003\""));
  // A trie's node holds one stack per next byte (here the ten digits and the closing quote),
  // not one per value.
  EXPECT_LE(heads_after(g, "\"value_1"), 11u);
  // The same through anyOf of consts, and values that are prefixes of each other.
  const Grammar p = compile(R"({"anyOf":[{"const":"ab"},{"const":"a"},{"enum":["abc","b",1,10,100]}]})");
  for (const char* ok : {R"("a")", R"("ab")", R"("abc")", R"("b")", "1", "10", "100"}) EXPECT_TRUE(matches(p, ok)) << ok;
  for (const char* bad : {R"("abcd")", R"("")", "1000", "0"}) EXPECT_FALSE(matches(p, bad)) << bad;
  // Past the bytes budget: refused.
  GrammarLimits small;
  small.max_literal_bytes = 1000;
  try {
    (void)json_schema_grammar(json{{"enum", values}}, small);
    ADD_FAILURE() << "an enum past the literal budget compiled";
  } catch (const SchemaError& e) {
    EXPECT_NE(std::string(e.what()).find("bytes"), std::string::npos) << e.what();
  }
}

TEST(HostileSchema, AmbiguousRecursionIsCappedNotExploded) {
  // Two different branches accepting the same arrays of itself: each '[' doubles the parses.
  const Grammar g = compile(R"({"$defs":{"a":{"anyOf":[{"type":"array","items":{"$ref":"#/$defs/a"}},
      {"type":"array","items":{"$ref":"#/$defs/a"},"maxItems":1000},{"type":"integer"}]}},"$ref":"#/$defs/a"})");
  bool overflowed = false;
  const size_t heads = heads_after(g, std::string(64, '['), &overflowed);
  EXPECT_EQ(heads, 0u) << "2^64 parses cannot all be kept";
  EXPECT_TRUE(overflowed) << "refused for the cap, not for the grammar";
  // Shallow nesting is still fine.
  EXPECT_TRUE(matches(g, "[[1],[[2]]]"));
  // A compiled grammar's first state past the cap is refused at compile time.
  GrammarLimits one;
  one.max_state_heads = 1;
  auto vocab = std::make_shared<const TokenVocabulary>(std::vector<std::string>{"a", "b"});
  Grammar amb(one);
  const RuleId x = amb.literal("a"), y = amb.literal("a");
  amb.set_root(amb.choice({{Grammar::ref(x)}, {Grammar::ref(y)}}));
  EXPECT_THROW(CompiledGrammar(std::move(amb), vocab), GrammarTooLarge);
}

TEST(HostileSchema, CompileDeadlineAndRuleBudgetHold) {
  GrammarLimits instant;
  instant.max_compile_seconds = 0;  // already past at the first check
  json props = json::object();
  for (int i = 0; i < 2000; ++i) props["p" + std::to_string(i)] = json{{"type", "string"}, {"maxLength", 3}};
  try {
    (void)json_schema_grammar(json{{"type", "object"}, {"properties", props}}, instant);
    ADD_FAILURE() << "no deadline";
  } catch (const GrammarTooLarge& e) {
    EXPECT_NE(std::string(e.what()).find("longer than"), std::string::npos) << e.what();
  }
  GrammarLimits few;
  few.max_rules = 100;
  EXPECT_THROW((void)json_schema_grammar(json{{"type", "object"}, {"properties", props}}, few), GrammarTooLarge);
}

TEST(HostileGrammar, NullableLoopsAreLeftRecursion) {
  // A builder that loops over something that matches nothing would hang the matcher: finish()
  // refuses it.
  Grammar g;
  const RuleId empty = g.new_rule("empty");
  g.add_alternative(empty, {});
  g.set_root(g.star(Grammar::ref(empty)));
  EXPECT_THROW(g.finish(), GrammarError);
}

TEST(HostileRegex, NullableLoopsCompileToTheRightLanguage) {
  // (a*)*, (a?)*, (|a)+: loops over patterns that match the empty string.
  const ByteSet ascii = ByteSet::range(0x20, 0x7e) & ~ByteSet::any_of("\"\\");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"(a*)*", "a*"}, {"(a?)*", "a*"}, {"(|a)+", "a*"}, {"((a*)*)*b", "a*b"}, {"(a{0,3})*", "a*"},
      {"(a*|b*)*", "[ab]*"}, {"(a?){2,5}", "a{0,5}"}, {"(?:(?:)*)*", ""}};
  for (const auto& [p, same] : cases) {
    Grammar g, h;
    g.set_root(add_regex(g, p, ascii));
    g.finish();
    h.set_root(add_regex(h, same, ascii));
    h.finish();
    for (const char* s : {"", "a", "aa", "aaaaaaa", "b", "ab", "ba", "aab", "abab"})
      EXPECT_EQ(matches(g, s), matches(h, s)) << p << " vs " << same << " on '" << s << "'";
    // One stack per DFA transition (and one for "accepted"), whatever the pattern's ambiguity.
    EXPECT_LE(heads_after(g, "aaaa"), 3u) << p;
  }
}

TEST(HostileRegex, NestedBoundedQuantifiersAreBounded) {
  // ((a{1,20}){1,20}){1,20} took 23 s and then bad_alloc: now a DFA, or a refusal.
  const ByteSet ascii = ByteSet::range(0x20, 0x7e) & ~ByteSet::any_of("\"\\");
  for (const char* p : {"((a{1,20}){1,20}){1,20}", "((a{1,20}){1,20}){1,20}b", "(((a|b){1,30}){1,30}){1,30}",
                        "((a?){1000}){1000}", "(.{0,1000}){0,1000}"}) {
    Grammar g;
    try {
      g.set_root(add_regex(g, p, ascii));
      g.finish();
    } catch (const GrammarTooLarge& e) {
      EXPECT_NE(std::string(e.what()).find("pattern"), std::string::npos) << e.what();
      continue;
    }
    EXPECT_LE(heads_after(g, std::string(50, 'a')), 4u) << p;
  }
  // Within the limits, the language is exact: a{1,400} as (a{1,20}){1,20}.
  Grammar g;
  g.set_root(add_regex(g, "(a{1,20}){1,20}", ascii));
  g.finish();
  EXPECT_TRUE(matches(g, std::string(400, 'a')));
  EXPECT_FALSE(matches(g, std::string(401, 'a')));
  EXPECT_FALSE(matches(g, ""));
}

TEST(HostileRegex, DeepGroupsAreRefusedFast) {
  const ByteSet ascii = ByteSet::range(0x20, 0x7e) & ~ByteSet::any_of("\"\\");
  const std::string deep = std::string(100000, '(') + "a" + std::string(100000, ')');
  Grammar g;
  try {
    (void)add_regex(g, deep, ascii);
    ADD_FAILURE() << "100,000 nested groups compiled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper than"), std::string::npos);
    EXPECT_LT(std::string(e.what()).size(), 400u) << "the message quotes the pattern's start, not all of it";
  }
  // At the limit it compiles.
  const std::string ok = std::string(kMaxRegexNesting, '(') + "a" + std::string(kMaxRegexNesting, ')');
  Grammar h;
  h.set_root(add_regex(h, ok, ascii));
  h.finish();
  EXPECT_TRUE(matches(h, "a"));
}

TEST(HostileRegex, MalformedUtf8LiteralsAreRefused) {
  const ByteSet ascii = ByteSet::range(0x20, 0x7e) & ~ByteSet::any_of("\"\\");
  for (const std::string& p : {std::string("\xc3"), std::string("\xe2\x82"), std::string("\xc0\x80"), std::string("\xed\xa0\x80"),
                              std::string("a\xff")}) {
    Grammar g;
    EXPECT_THROW((void)add_regex(g, p, ascii), Error) << p;
  }
  Grammar g;
  g.set_root(add_regex(g, "\xc3\xa9+", ascii));
  g.finish();
  EXPECT_TRUE(matches(g, "\xc3\xa9\xc3\xa9"));
}

}  // namespace
}  // namespace ds::grammar
