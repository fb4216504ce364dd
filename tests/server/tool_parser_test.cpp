// Tool calls in model output (server/tools/tool_parser.h): recorded outputs in both formats, parsed
// whole and streamed split at every byte, and the malformed ones that must come back as content.
#include "server/tools/tool_parser.h"

#include <gtest/gtest.h>

#include <cctype>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace ds::server {
namespace {

const std::vector<std::string> kNames = {"get_weather", "get_time", "search"};

// Ids call_0, call_1, ... so two parses of one text give the same ids.
std::function<std::string()> counter_ids() {
  auto n = std::make_shared<int>(0);
  return [n] { return "call_" + std::to_string((*n)++); };
}

struct Recorded {
  const char* what;
  ToolFormat format;
  std::string text;
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

const std::string kNestedArgs =
    R"({"query": {"text": "a } b </tool_call> c", "tags": ["x", {"y": "}"}]}, )"
    R"("note": "\"quoted\" \\ <tool_call> {", "n": [1, 2.5e3, true, null]})";
const std::string kKimiNestedArgs = R"({"q": {"text": "a } b <|tool_ c", "deep": [[{"}": "]"}]]}, "e": "\\\" <|"})";

const std::vector<Recorded>& recorded() {
  static const std::vector<Recorded> r = {
      {"hermes one call", ToolFormat::HermesJson,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
       "",
       {{"get_weather", R"({"city": "Paris"})"}}},
      {"hermes two calls", ToolFormat::HermesJson,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>",
       "",
       {{"get_weather", R"({"city": "Paris"})"}, {"get_time", R"({"tz": "CET"})"}}},
      {"hermes content before", ToolFormat::HermesJson,
       "Let me check the weather.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
       "</tool_call>",
       "Let me check the weather.",
       {{"get_weather", R"({"city": "Oslo"})"}}},
      {"hermes content before and after, lookalike tags", ToolFormat::HermesJson,
       "Use <toolbox> or <tool_ca ll>.  <tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call> \n Done.\n",
       "Use <toolbox> or <tool_ca ll>.Done.\n",
       {{"get_time", "{}"}}},
      {"hermes nested arguments with braces and tags in strings", ToolFormat::HermesJson,
       "<tool_call>\n{\"name\": \"search\", \"arguments\": " + kNestedArgs + "}\n</tool_call>",
       "",
       {{"search", kNestedArgs}}},
      {"hermes loose whitespace", ToolFormat::HermesJson,
       "<tool_call>  \n\t{ \"name\" :\n\"get_weather\" ,\r\n \"arguments\"\t:  {\"city\" : \"Rome\"  }  \n}  \n\n</tool_call>",
       "",
       {{"get_weather", R"({"city" : "Rome"  })"}}},
      {"hermes arguments as a string", ToolFormat::HermesJson,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \" {\\\"city\\\": \\\"Rome\\\"} \"}\n</tool_call>",
       "",
       {{"get_weather", R"({"city": "Rome"})"}}},
      {"hermes parameters", ToolFormat::HermesJson,
       "<tool_call>\n{\"name\": \"get_time\", \"parameters\": {\"tz\": \"UTC\"}}\n</tool_call>",
       "",
       {{"get_time", R"({"tz": "UTC"})"}}},
      {"hermes arguments before name", ToolFormat::HermesJson,
       "<tool_call>\n{\"arguments\": {\"city\": \"Lima\"}, \"name\": \"get_weather\"}\n</tool_call>",
       "",
       {{"get_weather", R"({"city": "Lima"})"}}},
      {"hermes no arguments", ToolFormat::HermesJson,
       "<tool_call>\n{\"name\": \"get_time\"}\n</tool_call>",
       "",
       {{"get_time", "{}"}}},
      {"hermes extra keys after the arguments", ToolFormat::HermesJson,
       "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}, \"why\": \"}</tool_call>\"}\n</tool_call>",
       "",
       {{"get_time", R"({"tz": "UTC"})"}}},
      {"hermes no calls", ToolFormat::HermesJson, "Plain text, a < sign, <tool and trailing space  \n",
       "Plain text, a < sign, <tool and trailing space  \n", {}},
      {"kimi one call", ToolFormat::Kimi,
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
       "{\"city\": \"Paris\"}<|tool_call_end|><|tool_calls_section_end|>",
       "",
       {{"get_weather", R"({"city": "Paris"})"}}},
      {"kimi two calls, content before", ToolFormat::Kimi,
       "I will check both. <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
       "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.get_time:1"
       "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
       "I will check both.",
       {{"get_weather", R"({"city": "Paris"})"}, {"get_time", "{}"}}},
      {"kimi nested arguments, whitespace, content after", ToolFormat::Kimi,
       "<|tool_calls_section_begin|>\n<|tool_call_begin|> functions.search:2 <|tool_call_argument_begin|> " +
           kKimiNestedArgs + " \n<|tool_call_end|>\n<|tool_calls_section_end|>\n\nSearching. <|tool",
       "Searching. <|tool",
       {{"search", kKimiNestedArgs}}},
      {"kimi id in another form", ToolFormat::Kimi,
       "<|tool_calls_section_begin|><|tool_call_begin|>get_time<|tool_call_argument_begin|>{\"tz\": \"UTC\"}"
       "<|tool_call_end|><|tool_calls_section_end|>",
       "",
       {{"get_time", R"({"tz": "UTC"})"}}},
      {"kimi no calls", ToolFormat::Kimi, "Text with <|im_end|>-looking <|tool_call bits ",
       "Text with <|im_end|>-looking <|tool_call bits ", {}},
  };
  return r;
}

// The Kimi ids the recorded texts hold, per case.
std::vector<std::string> kimi_ids(const std::string& text) {
  std::vector<std::string> ids;
  for (size_t p = 0; (p = text.find(kKimiToolCallBegin, p)) != std::string::npos;) {
    p += kKimiToolCallBegin.size();
    const size_t e = text.find(kKimiToolCallArgumentBegin, p);
    std::string id = text.substr(p, e - p);
    id.erase(0, id.find_first_not_of(' '));
    id.erase(id.find_last_not_of(' ') + 1);
    ids.push_back(id);
  }
  return ids;
}

// A streamed response put back together, checking the deltas' shape on the way.
struct Streamed {
  std::string content;
  std::vector<ToolCall> calls;

  void add(const ParseEvents& ev) {
    content += ev.content;
    for (const ToolCallDelta& d : ev.calls) {
      ASSERT_GE(d.index, 0);
      ASSERT_LE(d.index, static_cast<int>(calls.size())) << "indices count up from 0";
      if (d.index == static_cast<int>(calls.size())) {
        EXPECT_FALSE(d.id.empty()) << "a call's first delta has its id";
        EXPECT_FALSE(d.name.empty()) << "a call's first delta has its name";
        calls.push_back({d.id, d.name, d.arguments});
      } else {
        EXPECT_TRUE(d.id.empty() && d.name.empty()) << "only the first delta has id and name";
        calls[d.index].arguments += d.arguments;
      }
    }
  }
};

void expect_same(const ParsedOutput& want, const Streamed& got, const std::string& where) {
  EXPECT_EQ(got.content, want.content) << where;
  ASSERT_EQ(got.calls.size(), want.calls.size()) << where;
  for (size_t i = 0; i < want.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].id, want.calls[i].id) << where << " call " << i;
    EXPECT_EQ(got.calls[i].name, want.calls[i].name) << where << " call " << i;
    EXPECT_EQ(got.calls[i].arguments, want.calls[i].arguments) << where << " call " << i;
  }
}

TEST(ToolParser, RecordedOutputsParse) {
  for (const Recorded& r : recorded()) {
    SCOPED_TRACE(r.what);
    const ParsedOutput out = parse_tool_calls(r.format, r.text, kNames, counter_ids());
    EXPECT_EQ(out.content, r.content);
    ASSERT_EQ(out.calls.size(), r.calls.size());
    const std::vector<std::string> ids = kimi_ids(r.text);
    for (size_t i = 0; i < r.calls.size(); ++i) {
      EXPECT_EQ(out.calls[i].name, r.calls[i].first);
      EXPECT_EQ(out.calls[i].arguments, r.calls[i].second);
      EXPECT_EQ(out.calls[i].id, r.format == ToolFormat::Kimi ? ids[i] : "call_" + std::to_string(i));
    }
  }
}

TEST(ToolParser, StreamingAgreesAtEverySplit) {
  for (const Recorded& r : recorded()) {
    SCOPED_TRACE(r.what);
    const ParsedOutput want = parse_tool_calls(r.format, r.text, kNames, counter_ids());
    for (size_t cut = 0; cut <= r.text.size(); ++cut) {
      auto parser = make_tool_call_parser(r.format, kNames, counter_ids());
      Streamed got;
      got.add(parser->feed(std::string_view(r.text).substr(0, cut)));
      got.add(parser->feed(std::string_view(r.text).substr(cut)));
      got.add(parser->finish());
      expect_same(want, got, "split at " + std::to_string(cut));
    }
  }
}

TEST(ToolParser, StreamingByteByByteNeverReleasesTooEarly) {
  for (const Recorded& r : recorded()) {
    SCOPED_TRACE(r.what);
    const ParsedOutput want = parse_tool_calls(r.format, r.text, kNames, counter_ids());
    auto parser = make_tool_call_parser(r.format, kNames, counter_ids());
    Streamed got;
    for (size_t i = 0; i < r.text.size(); ++i) {
      got.add(parser->feed(std::string_view(r.text).substr(i, 1)));
      // Nothing released is ever taken back, so what is out must already be right.
      ASSERT_EQ(want.content.compare(0, got.content.size(), got.content), 0) << "after byte " << i;
      ASSERT_LE(got.calls.size(), want.calls.size());
      for (size_t k = 0; k < got.calls.size(); ++k) {
        ASSERT_EQ(want.calls[k].arguments.compare(0, got.calls[k].arguments.size(), got.calls[k].arguments), 0)
            << "after byte " << i << " call " << k;
      }
    }
    got.add(parser->finish());
    expect_same(want, got, "byte by byte");
  }
}

TEST(ToolParser, HoldsBackOnlyWhatMayOpenACall) {
  auto hermes = make_tool_call_parser(ToolFormat::HermesJson, kNames, counter_ids());
  EXPECT_EQ(hermes->feed("Hello <tool_ca").content, "Hello");
  EXPECT_EQ(hermes->feed("x> more").content, " <tool_cax> more");
  EXPECT_EQ(hermes->feed("\n\n").content, "");  // may be the whitespace before a call
  EXPECT_EQ(hermes->finish().content, "\n\n");

  auto kimi = make_tool_call_parser(ToolFormat::Kimi, kNames, counter_ids());
  EXPECT_EQ(kimi->feed("Hi <|tool_calls_sec").content, "Hi");
  EXPECT_EQ(kimi->feed("tion_begin|><|tool_call_begin|>functions.get_time:0").content, "");
  const ParseEvents head = kimi->feed("<|tool_call_argument_begin|>{\"tz\": <|tool_call_e");
  ASSERT_EQ(head.calls.size(), 1u);
  EXPECT_EQ(head.calls[0].id, "functions.get_time:0");
  EXPECT_EQ(head.calls[0].name, "get_time");
  EXPECT_EQ(head.calls[0].arguments, "{\"tz\":");  // the space may precede the end marker
  const ParseEvents tail = kimi->feed("x\"}<|tool_call_end|>");
  ASSERT_EQ(tail.calls.size(), 1u);
  EXPECT_EQ(tail.calls[0].arguments, " <|tool_call_ex\"}");

  // Hermes streams the arguments as soon as the head {"name": ..., "arguments": is read.
  auto h2 = make_tool_call_parser(ToolFormat::HermesJson, kNames, counter_ids());
  EXPECT_TRUE(h2->feed("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ").calls.empty());
  const ParseEvents first = h2->feed("{\"city\": \"Pa");
  ASSERT_EQ(first.calls.size(), 1u);
  EXPECT_EQ(first.calls[0].id, "call_0");
  EXPECT_EQ(first.calls[0].name, "get_weather");
  EXPECT_EQ(first.calls[0].arguments, "{\"city\": \"Pa");
  const ParseEvents rest = h2->feed("ris\"}}\n</tool_call>");
  ASSERT_EQ(rest.calls.size(), 1u);
  EXPECT_EQ(rest.calls[0].arguments, "ris\"}");
  EXPECT_EQ(rest.content, "");
}

// The streamed parse of text cut into pieces at `cuts` (offsets, ascending).
Streamed streamed_parse(ToolFormat format, std::string_view text, const std::vector<size_t>& cuts) {
  auto parser = make_tool_call_parser(format, kNames, counter_ids());
  Streamed got;
  size_t at = 0;
  for (size_t c : cuts) {
    got.add(parser->feed(text.substr(at, c - at)));
    at = c;
  }
  got.add(parser->feed(text.substr(at)));
  got.add(parser->finish());
  return got;
}

// Streamed at every single split point, byte by byte, and at `random_splits` random sets of
// split points, each must put together exactly what the whole parse gives.
void expect_streamed_agrees(ToolFormat format, std::string_view text, std::mt19937& rng, int random_splits = 4) {
  const ParsedOutput want = parse_tool_calls(format, text, kNames, counter_ids());
  const std::string what = "text '" + std::string(text) + "'";
  for (size_t cut = 0; cut <= text.size(); ++cut) expect_same(want, streamed_parse(format, text, {cut}), what + " split at " + std::to_string(cut));
  std::vector<size_t> every;
  for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
  expect_same(want, streamed_parse(format, text, every), what + " byte by byte");
  for (int r = 0; r < random_splits; ++r) {
    std::vector<size_t> cuts;
    for (size_t i = 1; i < text.size(); ++i)
      if (rng() % 3 == 0) cuts.push_back(i);
    expect_same(want, streamed_parse(format, text, cuts), what + " random splits " + std::to_string(r));
  }
}

// Refused before its first delta (not an object, an unknown tool, arguments that are no object,
// an unexpected marker) or cut off before it: the call's text is content, raw, in both forms.
TEST(ToolParser, ACallRefusedBeforeItsFirstDeltaIsContent) {
  const std::vector<std::pair<ToolFormat, std::string>> bad = {
      {ToolFormat::HermesJson, "<tool_call>\nget_weather(city=Paris)\n</tool_call>"},
      {ToolFormat::HermesJson, "<tool_call>\n{\"name\": \"launch_rockets\", \"arguments\": {}}\n</tool_call>"},
      {ToolFormat::HermesJson, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": [\"Paris\"]}\n</tool_call>"},
      {ToolFormat::HermesJson, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"Paris\"}\n</tool_call>"},
      {ToolFormat::HermesJson, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": 5}\n</tool_call>"},
      {ToolFormat::HermesJson, "<tool_call>\n{\"name\": 7, \"arguments\": {}}\n</tool_call>"},
      {ToolFormat::HermesJson, "<tool_call>\n{\"arguments\": [1], \"name\": \"get_time\"}\n</tool_call>"},
      {ToolFormat::HermesJson, "<tool_call>\n{\"name\": \"get_weather\", \"argu"},  // cut in the head
      {ToolFormat::HermesJson, "<tool_call>\n{\"arguments\": {}, \"name\": \"get_ti"},  // cut, another order
      {ToolFormat::HermesJson, "Hi <tool_ca"},
      {ToolFormat::Kimi, "<|tool_calls_section_begin|><|tool_call_begin|>functions.launch:0"
                         "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>"},
      {ToolFormat::Kimi, "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0"
                         "<|tool_call_argument_begin|>[1]<|tool_call_end|><|tool_calls_section_end|>"},
      {ToolFormat::Kimi, "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0"
                         "<|tool_call_argument_begin|> <|tool_call_end|><|tool_calls_section_end|>"},
      {ToolFormat::Kimi, "<|tool_calls_section_begin|>junk<|tool_call_begin|>functions.get_time:0"
                         "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>"},
      {ToolFormat::Kimi, "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0<|tool_call_end|>"
                         "<|tool_calls_section_end|>"},
      {ToolFormat::Kimi, "<|tool_calls_section_begin|><|tool_calls_section_end|>"},
      {ToolFormat::Kimi, "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_ti"},  // cut in the id
      {ToolFormat::Kimi, "Hi <|tool_calls_section_begin|><|tool_call_beg"},
  };
  std::mt19937 rng(1);
  for (const auto& [format, text] : bad) {
    const ParsedOutput out = parse_tool_calls(format, text, kNames, counter_ids());
    EXPECT_EQ(out.content, text);
    EXPECT_TRUE(out.calls.empty()) << text;
    expect_streamed_agrees(format, text, rng);
  }
}

// After its first delta a call stands as it is: output that breaks it, or the end of the
// output, ends it there; what follows is content. The whole parse says the same.
TEST(ToolParser, ACallBrokenAfterItsFirstDeltaStands) {
  struct Case {
    ToolFormat format;
    std::string text, content;
    std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  };
  const std::vector<Case> cases = {
      {ToolFormat::HermesJson, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par", "",
       {{"get_weather", "{\"city\": \"Par"}}},
      {ToolFormat::HermesJson, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }}\n</tool_call>", "",
       {{"get_weather", "{\"city\": }"}}},
      // No closing tag, then more text: the call stands, the text is content.
      {ToolFormat::HermesJson,
       "<tool_call>{\"name\": \"get_time\", \"arguments\": {}} oops <tool_call>"
       "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}</tool_call>",
       "oops", {{"get_time", "{}"}, {"get_weather", "{\"city\": \"Rome\"}"}}},
      // The second call refused before its first delta: the first stands, the second is content.
      {ToolFormat::HermesJson,
       "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>", {{"get_time", "{}"}}},
      {ToolFormat::Kimi,
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
       "<|tool_call_argument_begin|>{\"city\": }<|tool_call_end|><|tool_calls_section_end|>",
       "", {{"get_weather", "{\"city\": }"}}},
      {ToolFormat::Kimi,
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>{\"tz\": \"U",
       "", {{"get_time", "{\"tz\": \"U"}}},
  };
  std::mt19937 rng(2);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const ParsedOutput out = parse_tool_calls(c.format, c.text, kNames, counter_ids());
    EXPECT_EQ(out.content, c.content);
    ASSERT_EQ(out.calls.size(), c.calls.size());
    for (size_t i = 0; i < c.calls.size(); ++i) {
      EXPECT_EQ(out.calls[i].name, c.calls[i].first);
      EXPECT_EQ(out.calls[i].arguments, c.calls[i].second);
    }
    expect_streamed_agrees(c.format, c.text, rng);
  }
}

// Where each call's text ends in `text` (one past its closing marker), in order. HermesJson
// arguments may hold the tags in strings, so the object is walked to its end first.
std::vector<size_t> call_ends(ToolFormat format, const std::string& text) {
  std::vector<size_t> ends;
  if (format == ToolFormat::Kimi) {
    for (size_t p = 0; (p = text.find(kKimiToolCallEnd, p)) != std::string::npos;) ends.push_back(p += kKimiToolCallEnd.size());
    return ends;
  }
  for (size_t p = 0; (p = text.find(kHermesToolCallOpen, p)) != std::string::npos;) {
    p = text.find('{', p);
    int depth = 0;
    bool in_string = false;
    for (; p < text.size(); ++p) {
      const char c = text[p];
      if (in_string) {
        if (c == '\\') ++p;
        else if (c == '"') in_string = false;
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if ((c == '}' || c == ']') && --depth == 0) {
        break;
      }
    }
    p = text.find(kHermesToolCallClose, p);
    if (p == std::string::npos) break;
    ends.push_back(p += kHermesToolCallClose.size());
  }
  return ends;
}

// max_tokens (or a stop string) cuts the output anywhere: in a marker, in the JSON, between
// calls. For every prefix of every recorded output, the streamed parse (any split) and the whole
// parse agree, and every call the prefix holds whole comes out as in the whole output.
TEST(ToolParser, EveryCutKeepsTheCompletedCallsStreamedAndWhole) {
  std::mt19937 rng(3);
  for (const Recorded& r : recorded()) {
    SCOPED_TRACE(r.what);
    const ParsedOutput full = parse_tool_calls(r.format, r.text, kNames, counter_ids());
    const std::vector<size_t> ends = call_ends(r.format, r.text);
    for (size_t cut = 0; cut <= r.text.size(); ++cut) {
      const std::string_view prefix = std::string_view(r.text).substr(0, cut);
      const ParsedOutput out = parse_tool_calls(r.format, prefix, kNames, counter_ids());
      for (size_t i = 0; i < ends.size() && i < full.calls.size(); ++i) {
        if (ends[i] > cut) {
          EXPECT_LE(out.calls.size(), i + 1) << "cut at " << cut << ": at most the unfinished call " << i << " more";
          break;
        }
        ASSERT_GT(out.calls.size(), i) << "cut at " << cut << " loses completed call " << i;
        EXPECT_EQ(out.calls[i].id, full.calls[i].id) << "cut at " << cut;
        EXPECT_EQ(out.calls[i].name, full.calls[i].name) << "cut at " << cut;
        EXPECT_EQ(out.calls[i].arguments, full.calls[i].arguments) << "cut at " << cut;
      }
      expect_streamed_agrees(r.format, prefix, rng, 1);
    }
  }
}

// Two parallel calls cut at named places, in both formats: what comes back, exactly.
TEST(ToolParser, CutsInMarkersJsonAndBetweenCalls) {
  const std::string h1 = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  const std::string h2 = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>";
  const std::string k0 = "<|tool_calls_section_begin|>";
  const std::string k1 = "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>";
  const std::string k2 = "<|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{\"tz\": \"CET\"}<|tool_call_end|>";
  const std::string kend = "<|tool_calls_section_end|>";
  struct Case {
    const char* what;
    ToolFormat format;
    std::string text, content;
    std::vector<std::string> arguments;  // the calls' arguments; names as in h1/h2, k1/k2
  };
  const std::string paris = "{\"city\": \"Paris\"}", cet = "{\"tz\": \"CET\"}";
  const std::vector<Case> cases = {
      {"hermes between calls", ToolFormat::HermesJson, h1 + "\n", "", {paris}},
      {"hermes in the second opening tag", ToolFormat::HermesJson, h1 + "\n<tool_c", "<tool_c", {paris}},
      {"hermes in the second head", ToolFormat::HermesJson, h1 + "\n" + h2.substr(0, 24), h2.substr(0, 24), {paris}},
      {"hermes in the second arguments", ToolFormat::HermesJson, h1 + "\n" + h2.substr(0, h2.find("CET") + 1), "", {paris, "{\"tz\": \"C"}},
      {"hermes after the second object", ToolFormat::HermesJson, h1 + "\n" + h2.substr(0, h2.size() - 12), "", {paris, cet}},
      {"hermes in the second closing tag", ToolFormat::HermesJson, h1 + "\n" + h2.substr(0, h2.size() - 3), "", {paris, cet}},
      {"kimi between calls", ToolFormat::Kimi, k0 + k1, "", {paris}},
      {"kimi in the second call's marker", ToolFormat::Kimi, k0 + k1 + "<|tool_call_beg", "<|tool_call_beg", {paris}},
      {"kimi in the second id", ToolFormat::Kimi, k0 + k1 + k2.substr(0, 30), k2.substr(0, 30), {paris}},
      {"kimi in the second arguments", ToolFormat::Kimi, k0 + k1 + k2.substr(0, k2.find("CET") + 1), "", {paris, "{\"tz\": \"C"}},
      {"kimi in the second end marker", ToolFormat::Kimi, k0 + k1 + k2.substr(0, k2.size() - 4), "", {paris, cet}},
      {"kimi in the section end", ToolFormat::Kimi, k0 + k1 + k2 + kend.substr(0, 16), "", {paris, cet}},
  };
  std::mt19937 rng(4);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const ParsedOutput out = parse_tool_calls(c.format, c.text, kNames, counter_ids());
    EXPECT_EQ(out.content, c.content);
    ASSERT_EQ(out.calls.size(), c.arguments.size());
    for (size_t i = 0; i < c.arguments.size(); ++i) {
      EXPECT_EQ(out.calls[i].name, i == 0 ? "get_weather" : "get_time");
      EXPECT_EQ(out.calls[i].arguments, c.arguments[i]);
    }
    expect_streamed_agrees(c.format, c.text, rng);
  }
}

// Random edits of the recorded outputs (bytes dropped, repeated, changed, markers pasted in):
// the streamed parse at any split and the whole parse agree on all of them.
TEST(ToolParser, EditedOutputsAgreeStreamedAndWhole) {
  std::mt19937 rng(5);
  const std::vector<std::string> pieces = {"<tool_call>", "</tool_call>", "{", "}", "\"", "\\", "\n", " ",
                                           std::string(kKimiToolCallsBegin), std::string(kKimiToolCallBegin),
                                           std::string(kKimiToolCallArgumentBegin), std::string(kKimiToolCallEnd),
                                           std::string(kKimiToolCallsEnd), "\"name\": \"get_time\"", "\"arguments\": "};
  for (int round = 0; round < 300; ++round) {
    const Recorded& r = recorded()[rng() % recorded().size()];
    std::string text = r.text;
    const int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = rng() % text.size();
      switch (rng() % 4) {
        case 0: text.erase(at, 1 + rng() % 8); break;
        case 1: text.insert(at, text.substr(at, 1 + rng() % 8)); break;
        case 2: text[at] = char(rng() % 128); break;
        default: text.insert(at, pieces[rng() % pieces.size()]); break;
      }
    }
    for (ToolFormat f : {ToolFormat::HermesJson, ToolFormat::Kimi}) expect_streamed_agrees(f, text, rng, 2);
  }
}

TEST(ToolParser, RandomIds) {
  const std::string a = random_tool_call_id(), b = random_tool_call_id();
  EXPECT_NE(a, b);
  ASSERT_EQ(a.size(), 5u + 24u);
  EXPECT_EQ(a.substr(0, 5), "call_");
  for (char c : a.substr(5)) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << a;
  // No id source given: random ones.
  const ParsedOutput out =
      parse_tool_calls(ToolFormat::HermesJson, "<tool_call>{\"name\": \"get_time\"}</tool_call>", kNames, nullptr);
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].id.substr(0, 5), "call_");
  EXPECT_EQ(tool_format_for(ChatFormat::ChatML), ToolFormat::HermesJson);
  EXPECT_EQ(tool_format_for(ChatFormat::Kimi), ToolFormat::Kimi);
}

}  // namespace
}  // namespace ds::server
