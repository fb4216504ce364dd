// libFuzzer target: model output as the tool-call parsers read it (server/tools/tool_parser.h), in both
// chat formats. The first byte seeds where the streamed parse splits the rest (the text): single
// split points (every one while the text is short) and random sets of them. The whole parse and every streamed parse must
// put together the same content and calls, the deltas must have their shape (indices from 0 in
// order, id and a declared name on a call's first delta only), and nothing may crash or throw.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/tools/tool_parser.h"

namespace {

using ds::server::ParsedOutput;
using ds::server::ParseEvents;
using ds::server::ToolFormat;

const std::vector<std::string> kNames = {"get_weather", "get_time", "search"};

std::function<std::string()> counter_ids() {
  auto n = std::make_shared<int>(0);
  return [n] { return "call_" + std::to_string((*n)++); };
}

[[noreturn]] void fail(const char* what, ToolFormat f) {
  std::fprintf(stderr, "tool_parser_fuzz: %s (%s)\n", what, f == ToolFormat::Kimi ? "kimi" : "hermes");
  std::abort();
}

// Adds a feed's events to out, checking their shape.
void add(ParsedOutput& out, const ParseEvents& ev, ToolFormat f) {
  out.content += ev.content;
  for (const auto& d : ev.calls) {
    if (d.index == int(out.calls.size())) {
      if (d.id.empty()) fail("a call's first delta has no id", f);
      bool declared = false;
      for (const auto& n : kNames) declared = declared || n == d.name;
      if (!declared) fail("a call's first delta names an undeclared tool", f);
      out.calls.push_back({d.id, d.name, d.arguments});
    } else if (d.index >= 0 && d.index < int(out.calls.size())) {
      if (!d.id.empty() || !d.name.empty()) fail("a later delta repeats the id or name", f);
      out.calls[size_t(d.index)].arguments += d.arguments;
    } else {
      fail("a delta's index is not the next call's or an earlier one's", f);
    }
  }
}

ParsedOutput streamed(ToolFormat f, std::string_view text, const std::vector<size_t>& cuts) {
  const auto parser = ds::server::make_tool_call_parser(f, kNames, counter_ids());
  ParsedOutput out;
  size_t at = 0;
  for (size_t c : cuts) {
    add(out, parser->feed(text.substr(at, c - at)), f);
    at = c;
  }
  add(out, parser->feed(text.substr(at)), f);
  add(out, parser->finish(), f);
  return out;
}

void expect_same(const ParsedOutput& a, const ParsedOutput& b, ToolFormat f) {
  if (a.content != b.content) fail("streamed and whole content differ", f);
  if (a.calls.size() != b.calls.size()) fail("streamed and whole call counts differ", f);
  for (size_t i = 0; i < a.calls.size(); ++i) {
    if (a.calls[i].id != b.calls[i].id || a.calls[i].name != b.calls[i].name ||
        a.calls[i].arguments != b.calls[i].arguments)
      fail("streamed and whole calls differ", f);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  uint64_t seed = data[0] * 0x9e3779b97f4a7c15ull + 1;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  auto next = [&seed] {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return seed;
  };
  for (ToolFormat f : {ToolFormat::HermesJson, ToolFormat::Kimi}) {
    const ParsedOutput whole = ds::server::parse_tool_calls(f, text, kNames, counter_ids());
    if (text.size() <= 48) {
      for (size_t cut = 0; cut <= text.size(); ++cut) expect_same(whole, streamed(f, text, {cut}), f);
    } else {
      for (int i = 0; i < 8; ++i) expect_same(whole, streamed(f, text, {size_t(next() % (text.size() + 1))}), f);
    }
    for (int round = 0; round < 4; ++round) {
      std::vector<size_t> cuts;
      const uint64_t every = 1 + next() % 16;  // mean piece length
      for (size_t i = 1; i < text.size(); ++i)
        if (next() % every == 0) cuts.push_back(i);
      expect_same(whole, streamed(f, text, cuts), f);
    }
  }
  return 0;
}
