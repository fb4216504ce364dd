// The output constraints of chat requests end to end below the engine: a request's tools or
// response_format compiled by OutputConstraints, then random walks through the token mask (any
// allowed token, chosen at random, until the grammar is complete) whose text must parse back
// (server/tools/tool_parser.h) into calls to declared tools with arguments that satisfy the tool's
// schema. A walk is a model that may say anything the mask lets through: if a walk can produce
// output that does not parse, so can a model.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>
#include <string>
#include <vector>

#include "grammar/token_constraint.h"
#include "server/api_error.h"
#include "server/output_constraint.h"
#include "server/tools/tool_parser.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ds::server {
namespace {

using nlohmann::ordered_json;

// Training text that looks like tool calls, so the vocabulary holds multi-byte JSON pieces
// (`{"`, `": "`, digits, words) and a walk crosses token boundaries in the middle of them.
std::vector<std::string> json_corpus() {
  std::mt19937 rng(7);
  const std::vector<std::string> words = {"city", "Paris", "unit", "celsius", "days", "query", "path", "src",
                                          "main", "true", "false", "null", "name", "arguments", "get_weather"};
  std::vector<std::string> out;
  for (int i = 0; i < 300; ++i) {
    std::string s = "{\"" + words[rng() % words.size()] + "\": \"" + words[rng() % words.size()] + "\", \"" +
                    words[rng() % words.size()] + "\": " + std::to_string(rng() % 1000) + "}\n";
    out.push_back(s + "<tool_call>\n{\"name\": \"" + words[rng() % words.size()] + "\", \"arguments\": " + s +
                  "}\n</tool_call>");
  }
  return out;
}

Tokenizer make_tokenizer(bool hermes_tags_special, bool kimi_markers) {
  std::vector<std::string> specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  if (hermes_tags_special) {
    specials.emplace_back(kHermesToolCallOpen);
    specials.emplace_back(kHermesToolCallClose);
  }
  if (kimi_markers) {
    for (std::string_view m : {kKimiSystem, kKimiUser, kKimiAssistant, kKimiMiddle, kKimiToolCallsBegin,
                               kKimiToolCallsEnd, kKimiToolCallBegin, kKimiToolCallArgumentBegin, kKimiToolCallEnd})
      specials.emplace_back(m);
  }
  return Tokenizer::from_json_text(train_bpe_tokenizer_json(json_corpus(), 600, specials), "constraint-test");
}

const ordered_json& weather_schema() {
  static const ordered_json s = ordered_json::parse(R"({
    "type": "object",
    "properties": {
      "city": {"type": "string", "maxLength": 6},
      "unit": {"enum": ["celsius", "fahrenheit"]},
      "days": {"type": "integer"},
      "hourly": {"type": "boolean"}
    },
    "required": ["city", "unit"],
    "additionalProperties": false
  })");
  return s;
}

const ordered_json& search_schema() {
  static const ordered_json s = ordered_json::parse(R"({
    "type": "object",
    "properties": {
      "query": {"type": "string", "maxLength": 4},
      "paths": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2}
    },
    "required": ["query"],
    "additionalProperties": false
  })");
  return s;
}

GenerationRequest tools_request(ToolChoice choice, const std::string& name = {}, bool parallel = true) {
  GenerationRequest g;
  g.chat = true;
  g.tools = {{"get_weather", weather_schema()}, {"search", search_schema()}, {"get_time", nullptr}};
  ordered_json tools = ordered_json::array();
  for (const ToolSpec& t : g.tools) {
    ordered_json f = {{"name", t.name}};
    if (!t.parameters.is_null()) f["parameters"] = t.parameters;
    tools.push_back({{"type", "function"}, {"function", f}});
  }
  g.tools_json = tools.dump();
  g.tool_choice = choice;
  g.tool_choice_name = name;
  g.parallel_tool_calls = parallel;
  return g;
}

// The schema subset above, checked by hand (independent of the grammar compiler under test).
bool satisfies(const nlohmann::json& v, const ordered_json& schema, std::string* why) {
  if (schema.is_null()) return v.is_object();
  if (schema.contains("enum")) {
    for (const auto& e : schema["enum"])
      if (nlohmann::json(e) == v) return true;
    return *why = "not in enum: " + v.dump(), false;
  }
  const std::string type = schema.value("type", "");
  if (type == "string") {
    if (!v.is_string()) return *why = "not a string: " + v.dump(), false;
    // maxLength counts code points; the walks' strings may hold any UTF-8.
    size_t cps = 0;
    for (unsigned char c : v.get<std::string>()) cps += (c & 0xC0) != 0x80;
    if (schema.contains("maxLength") && cps > schema["maxLength"].get<size_t>())
      return *why = "string too long: " + v.dump(), false;
    return true;
  }
  if (type == "integer") return v.is_number_integer() || (*why = "not an integer: " + v.dump(), false);
  if (type == "boolean") return v.is_boolean() || (*why = "not a boolean: " + v.dump(), false);
  if (type == "array") {
    if (!v.is_array()) return *why = "not an array: " + v.dump(), false;
    if (schema.contains("maxItems") && v.size() > schema["maxItems"].get<size_t>())
      return *why = "too many items: " + v.dump(), false;
    for (const auto& e : v)
      if (!satisfies(e, schema["items"], why)) return false;
    return true;
  }
  if (type == "object") {
    if (!v.is_object()) return *why = "not an object: " + v.dump(), false;
    for (const auto& r : schema.value("required", ordered_json::array()))
      if (!v.contains(r.get<std::string>())) return *why = "missing " + r.dump() + " in " + v.dump(), false;
    for (const auto& [k, e] : v.items()) {
      if (!schema["properties"].contains(k)) return *why = "unknown key " + k, false;
      if (!satisfies(e, schema["properties"][k], why)) return false;
    }
    return true;
  }
  return *why = "schema type not handled by the test: " + type, false;
}

struct Walk {
  std::vector<int32_t> ids;
  bool completed = false;
};

// Uniformly random allowed tokens; once the grammar is complete, stops with probability 1/2
// (always when nothing may follow).
Walk random_walk(grammar::TokenConstraint& c, std::mt19937& rng, int max_steps = 4000) {
  Walk w;
  for (int step = 0; step < max_steps; ++step) {
    if (c.complete() && (!c.can_continue() || rng() % 2 == 0)) return w.completed = true, w;
    const std::vector<uint64_t>& mask = c.allowed();
    std::vector<int32_t> allowed;
    for (size_t word = 0; word < mask.size(); ++word)
      for (uint64_t bits = mask[word]; bits; bits &= bits - 1)
        allowed.push_back(int32_t(word * 64 + size_t(__builtin_ctzll(bits))));
    if (allowed.empty()) return w;  // stuck short of complete: the grammar lost its way
    const int32_t t = allowed[rng() % allowed.size()];
    EXPECT_TRUE(c.accept(t));
    w.ids.push_back(t);
  }
  return w;
}

std::vector<std::string> names_of(const GenerationRequest& g) {
  std::vector<std::string> names;
  for (const ToolSpec& t : g.tools) names.push_back(t.name);
  return names;
}

const ordered_json& schema_of(const GenerationRequest& g, const std::string& name) {
  for (const ToolSpec& t : g.tools)
    if (t.name == name) return t.parameters;
  static const ordered_json none;
  ADD_FAILURE() << "no tool " << name;
  return none;
}

// Walks `walks` times from fresh constraints; every output must parse into between min_calls
// and max_calls calls (of `only` when given) with valid arguments and no content.
void check_walks(const Tokenizer& tok, ChatFormat format, const GenerationRequest& g, int walks, size_t min_calls,
                 size_t max_calls, const std::string& only = {}) {
  OutputConstraints oc(tok, tok.vocab_size(), format);
  std::mt19937 rng(42);
  size_t most_calls = 0;
  for (int i = 0; i < walks; ++i) {
    auto c = oc.for_request(g);
    ASSERT_TRUE(c);
    const Walk w = random_walk(*c, rng);
    ASSERT_TRUE(w.completed) << "walk " << i << " did not complete: " << tok.decode(w.ids);
    const std::string text = tok.decode(w.ids);
    int n = 0;
    const ParsedOutput out =
        parse_tool_calls(tool_format_for(format), text, names_of(g), [&] { return "id" + std::to_string(n++); });
    ASSERT_GE(out.calls.size(), min_calls) << text;
    ASSERT_LE(out.calls.size(), max_calls) << text;
    EXPECT_EQ(out.content, "") << text;
    most_calls = std::max(most_calls, out.calls.size());
    for (const ToolCall& call : out.calls) {
      if (!only.empty()) {
        EXPECT_EQ(call.name, only) << text;
      }
      nlohmann::json args;
      ASSERT_NO_THROW(args = nlohmann::json::parse(call.arguments)) << text;
      std::string why;
      EXPECT_TRUE(satisfies(args, schema_of(g, call.name), &why)) << why << "\n" << text;
    }
    // The streamed parse agrees with the whole one.
    auto parser = make_tool_call_parser(tool_format_for(format), names_of(g), [] { return std::string("s"); });
    std::vector<std::string> streamed;
    for (int32_t id : w.ids) {
      const ParseEvents ev = parser->feed(tok.decode(std::vector<int32_t>{id}));
      EXPECT_EQ(ev.content, "") << text;
      for (const ToolCallDelta& d : ev.calls) {
        if (size_t(d.index) >= streamed.size()) streamed.resize(size_t(d.index) + 1);
        streamed[size_t(d.index)] += d.arguments;
      }
    }
    for (const ToolCallDelta& d : parser->finish().calls) streamed[size_t(d.index)] += d.arguments;
    ASSERT_EQ(streamed.size(), out.calls.size()) << text;
    for (size_t k = 0; k < streamed.size(); ++k) EXPECT_EQ(streamed[k], out.calls[k].arguments) << text;
  }
  if (max_calls > 1) {
    EXPECT_GT(most_calls, 1u) << "no walk made parallel calls";
  }
}

TEST(OutputConstraintWalks, HermesRequiredGivesValidCalls) {
  const Tokenizer tok = make_tokenizer(false, false);
  check_walks(tok, ChatFormat::ChatML, tools_request(ToolChoice::Required), 60, 1, kMaxForcedToolCalls);
}

TEST(OutputConstraintWalks, HermesWithSpecialTagsGivesValidCalls) {
  const Tokenizer tok = make_tokenizer(true, false);
  check_walks(tok, ChatFormat::ChatML, tools_request(ToolChoice::Required, "", false), 40, 1, 1);
}

TEST(OutputConstraintWalks, HermesNamedGivesOneCallToIt) {
  const Tokenizer tok = make_tokenizer(false, false);
  check_walks(tok, ChatFormat::ChatML, tools_request(ToolChoice::Named, "search"), 40, 1, 1, "search");
}

TEST(OutputConstraintWalks, KimiRequiredGivesValidCalls) {
  const Tokenizer tok = make_tokenizer(false, true);
  check_walks(tok, ChatFormat::Kimi, tools_request(ToolChoice::Required), 60, 1, kMaxForcedToolCalls);
}

TEST(OutputConstraintWalks, KimiNamedGivesOneCallToIt) {
  const Tokenizer tok = make_tokenizer(false, true);
  check_walks(tok, ChatFormat::Kimi, tools_request(ToolChoice::Named, "get_weather"), 40, 1, 1, "get_weather");
}

TEST(OutputConstraintWalks, JsonSchemaOutputsSatisfyTheSchema) {
  const Tokenizer tok = make_tokenizer(false, false);
  OutputConstraints oc(tok, tok.vocab_size(), ChatFormat::ChatML);
  GenerationRequest g;
  g.chat = true;
  g.response_format = ResponseFormat::JsonSchema;
  g.response_schema = weather_schema();
  std::mt19937 rng(3);
  for (int i = 0; i < 40; ++i) {
    auto c = oc.for_request(g);
    ASSERT_TRUE(c);
    const Walk w = random_walk(*c, rng);
    ASSERT_TRUE(w.completed);
    const std::string text = tok.decode(w.ids);
    nlohmann::json v;
    ASSERT_NO_THROW(v = nlohmann::json::parse(text)) << text;
    std::string why;
    EXPECT_TRUE(satisfies(v, weather_schema(), &why)) << why << "\n" << text;
  }
}

TEST(OutputConstraintWalks, JsonObjectOutputsAreObjects) {
  const Tokenizer tok = make_tokenizer(false, false);
  OutputConstraints oc(tok, tok.vocab_size(), ChatFormat::ChatML);
  GenerationRequest g;
  g.chat = true;
  g.response_format = ResponseFormat::JsonObject;
  std::mt19937 rng(5);
  int finished = 0;
  for (int i = 0; i < 20; ++i) {
    auto c = oc.for_request(g);
    const Walk w = random_walk(*c, rng);
    // Free-form JSON may nest deeper than a walk's budget; what ends must be an object.
    if (!w.completed) continue;
    ++finished;
    nlohmann::json v;
    ASSERT_NO_THROW(v = nlohmann::json::parse(tok.decode(w.ids))) << tok.decode(w.ids);
    EXPECT_TRUE(v.is_object());
  }
  EXPECT_GT(finished, 0);
}

TEST(OutputConstraints, FreeOutputHasNoConstraint) {
  const Tokenizer tok = make_tokenizer(false, false);
  OutputConstraints oc(tok, tok.vocab_size(), ChatFormat::ChatML);
  EXPECT_FALSE(oc.for_request(tools_request(ToolChoice::Auto)));
  EXPECT_FALSE(oc.for_request(tools_request(ToolChoice::None)));
  GenerationRequest plain;
  plain.chat = true;
  EXPECT_FALSE(oc.for_request(plain));
  EXPECT_EQ(oc.grammars_compiled(), 0);
}

TEST(OutputConstraints, SpecialTokensOutsideTheSyntaxAreNeverAllowed) {
  const Tokenizer tok = make_tokenizer(false, true);
  OutputConstraints oc(tok, tok.vocab_size() + 5, ChatFormat::Kimi);  // padded model vocabulary
  auto c = oc.for_request(tools_request(ToolChoice::Required));
  const std::vector<uint64_t>& mask = c->allowed();
  // The first token must open the section: that marker alone.
  int n = 0;
  for (size_t word = 0; word < mask.size(); ++word) n += __builtin_popcountll(mask[word]);
  EXPECT_EQ(n, 1);
  EXPECT_TRUE(c->allows(*tok.token_id(kKimiToolCallsBegin)));
  for (std::string_view s : {"<|im_end|>", "<|endoftext|>", "<|im_start|>"}) EXPECT_FALSE(c->allows(*tok.token_id(s)));
}

TEST(OutputConstraints, GrammarsAreCachedBySourceWithAnLruBound) {
  const Tokenizer tok = make_tokenizer(false, false);
  OutputConstraints oc(tok, tok.vocab_size(), ChatFormat::ChatML, /*max_grammars=*/3);
  const GenerationRequest g = tools_request(ToolChoice::Required);
  oc.for_request(g);
  oc.for_request(g);
  EXPECT_EQ(oc.grammars_compiled(), 1);
  // Parallel or not, and another named tool, are other grammars.
  oc.for_request(tools_request(ToolChoice::Required, "", false));
  oc.for_request(tools_request(ToolChoice::Named, "search"));
  EXPECT_EQ(oc.grammars_compiled(), 3);
  EXPECT_EQ(oc.cached_grammars(), 3u);
  // A fourth pushes out the least recently used: the first, which then compiles again.
  GenerationRequest schema;
  schema.chat = true;
  schema.response_format = ResponseFormat::JsonSchema;
  schema.response_schema = search_schema();
  oc.for_request(schema);
  EXPECT_EQ(oc.cached_grammars(), 3u);
  EXPECT_EQ(oc.grammars_compiled(), 4);
  oc.for_request(tools_request(ToolChoice::Named, "search"));  // still cached
  EXPECT_EQ(oc.grammars_compiled(), 4);
  oc.for_request(g);
  EXPECT_EQ(oc.grammars_compiled(), 5);
}

TEST(OutputConstraints, ConstraintsOfOneGrammarAreIndependent) {
  const Tokenizer tok = make_tokenizer(false, false);
  OutputConstraints oc(tok, tok.vocab_size(), ChatFormat::ChatML);
  const GenerationRequest g = tools_request(ToolChoice::Named, "get_time");
  auto a = oc.for_request(g);
  auto b = oc.for_request(g);
  std::mt19937 rng(1);
  const Walk wa = random_walk(*a, rng);
  ASSERT_TRUE(wa.completed);
  // b starts where a started, whatever a did.
  EXPECT_FALSE(b->complete());
  for (int32_t t : wa.ids) ASSERT_TRUE(b->accept(t));
  EXPECT_TRUE(b->complete());
  // Later requests reuse the masks the first ones computed.
  auto c = oc.for_request(g);
  for (int32_t t : wa.ids) {
    c->allowed();
    ASSERT_TRUE(c->accept(t));
  }
  EXPECT_EQ(c->masks_computed(), 0);
  EXPECT_GT(c->masks_cached(), 0);
}

TEST(OutputConstraints, UnsupportedSchemaIsA400NamingTheKeywordAndWhere) {
  const Tokenizer tok = make_tokenizer(false, false);
  OutputConstraints oc(tok, tok.vocab_size(), ChatFormat::ChatML);
  GenerationRequest g = tools_request(ToolChoice::Required);
  g.tools[1].parameters = ordered_json::parse(R"({"type": "object", "patternProperties": {"^x": {}}})");
  try {
    oc.for_request(g);
    FAIL() << "accepted patternProperties";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "tools");
    EXPECT_NE(std::string(e.what()).find("patternProperties"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/tools/1/function/parameters"), std::string::npos) << e.what();
  }
  GenerationRequest s;
  s.chat = true;
  s.response_format = ResponseFormat::JsonSchema;
  s.response_schema = ordered_json::parse(R"({"type": "object", "properties": {"a": {"not": {}}}})");
  try {
    oc.for_request(s);
    FAIL() << "accepted not";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "response_format");
    EXPECT_NE(std::string(e.what()).find("not"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/properties/a"), std::string::npos) << e.what();
  }
  // Bounds that would expand into millions of rules are refused, quickly, naming the field.
  ordered_json big = {{"type", "object"}, {"properties", ordered_json::object()}};
  for (int i = 0; i < 1000; ++i) big["properties"]["p" + std::to_string(i)] = {{"type", "string"}, {"maxLength", 4096 - i}};
  s.response_schema = big;
  try {
    oc.for_request(s);
    FAIL() << "accepted a schema of 4M rules";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "response_format");
    EXPECT_NE(std::string(e.what()).find("too large"), std::string::npos) << e.what();
  }
  g.tools[1].parameters = big;
  try {
    oc.for_request(g);
    FAIL() << "accepted tools of 4M rules";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "tools");
  }
  // A failed compile is not cached as a grammar.
  EXPECT_EQ(oc.cached_grammars(), 0u);
}

}  // namespace
}  // namespace ds::server

namespace ds::server {
namespace {

GenerationRequest schema_request(const std::string& schema) {
  GenerationRequest s;
  s.chat = true;
  s.response_format = ResponseFormat::JsonSchema;
  s.response_schema = ordered_json::parse(schema);
  return s;
}

TEST(OutputConstraintsHostile, LoopingSchemasAre400sNamingTheDefinition) {
  const Tokenizer tok = make_tokenizer(false, false);
  OutputConstraints oc(tok, tok.vocab_size(), ChatFormat::ChatML);
  const std::string expr = R"({"$defs":{"expr":{"anyOf":[{"type":"object","properties":{"l":{"$ref":"#/$defs/expr"}}},
      {"$ref":"#/$defs/expr"},{"type":"integer"}]}},"$ref":"#/$defs/expr"})";
  try {
    oc.for_request(schema_request(expr));
    FAIL() << "accepted a left-recursive schema";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "response_format");
    EXPECT_NE(std::string(e.what()).find("#/$defs/expr"), std::string::npos) << e.what();
  }
  // The same as a tool's parameters under tool_choice "required": the tool and the definition.
  GenerationRequest g = tools_request(ToolChoice::Required);
  g.tools[1].parameters = ordered_json::parse(R"({"type":"object","properties":{"q":{"$ref":"#/$defs/t"}},"required":["q"],
      "$defs":{"t":{"type":"object","properties":{"n":{"$ref":"#/$defs/t"}},"required":["n"]}}})");
  try {
    oc.for_request(g);
    FAIL() << "accepted a tool schema with no finite value";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "tools");
    EXPECT_NE(std::string(e.what()).find("/tools/1/function/parameters/$defs/t"), std::string::npos) << e.what();
  }
  // An optional self-reference is fine: the endless property is dropped, the rest decodes.
  GenerationRequest ok = schema_request(R"({"$defs":{"t":{"type":"object","properties":{"n":{"$ref":"#/$defs/t"}},
      "required":["n"]}},"type":"object","properties":{"a":{"type":"integer"},"b":{"$ref":"#/$defs/t"}},"required":["a"]})");
  auto c = oc.for_request(ok);
  std::mt19937 rng(3);
  const Walk w = random_walk(*c, rng);
  ASSERT_TRUE(w.completed);
  const nlohmann::json v = nlohmann::json::parse(tok.decode(w.ids));
  EXPECT_TRUE(v.contains("a") && !v.contains("b")) << v.dump();
}

TEST(OutputConstraintsHostile, TheFirstMaskIsComputedBeforeTheEngineSeesTheRequest) {
  // The engine's first step for a request with a new schema finds its mask cached: the compile
  // (and that walk of the vocabulary) was the handler thread's.
  const Tokenizer tok = make_tokenizer(false, false);
  OutputConstraints oc(tok, tok.vocab_size(), ChatFormat::ChatML);
  auto c = oc.for_request(schema_request(R"({"type":"object","properties":{"x":{"enum":["a","b"]}}})"));
  c->allowed();
  EXPECT_EQ(c->masks_computed(), 0);
  EXPECT_EQ(c->masks_cached(), 1);
}

TEST(OutputConstraintsHostile, TheGrammarCacheIsBoundedByBytes) {
  const Tokenizer tok = make_tokenizer(false, false);
  const size_t budget = 512u << 10;  // each grammar below holds about 150 KB
  OutputConstraints oc(tok, tok.vocab_size(), ChatFormat::ChatML, /*max_grammars=*/32, /*mask bytes=*/1u << 20, {}, budget);
  for (int k = 0; k < 12; ++k) {
    ordered_json values = ordered_json::array();
    for (int i = 0; i < 3000; ++i) values.push_back("v" + std::to_string(k) + "_" + std::to_string(i));
    GenerationRequest s;
    s.chat = true;
    s.response_format = ResponseFormat::JsonSchema;
    s.response_schema = {{"enum", values}};
    oc.for_request(s)->allowed();
    EXPECT_LE(oc.cached_bytes(), budget) << "after " << k + 1 << " grammars";
    if (k == 0) {
      EXPECT_GT(oc.cached_bytes(), budget / 8) << "the grammars are as large as the test assumes";
    }
  }
  EXPECT_GT(oc.grammars_evicted(), 0);
  EXPECT_LT(oc.cached_grammars(), 12u);
}

}  // namespace
}  // namespace ds::server
