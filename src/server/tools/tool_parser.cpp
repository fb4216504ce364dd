#include "server/tools/tool_parser.h"

#include <random>

#include "core/error.h"
#include "server/tools/tool_call_format.h"

namespace ds::server {

void append_events(ParsedOutput& out, const ParseEvents& ev) {
  out.content += ev.content;
  for (const ToolCallDelta& d : ev.calls) {
    if (d.index == int(out.calls.size())) {
      out.calls.push_back({d.id, d.name, d.arguments});
    } else {
      DS_CHECK(d.index >= 0 && d.index < int(out.calls.size()), "tool parser: a delta for no call");
      out.calls[size_t(d.index)].arguments += d.arguments;
    }
  }
}

ParsedOutput parse_tool_calls(ToolFormat format, std::string_view text, const std::vector<std::string>& tool_names,
                              const std::function<std::string()>& new_id) {
  // The streaming parser fed everything at once: one set of rules for both forms, so a streamed
  // response and a whole one always agree (its aggregate does not depend on how the text was split).
  const auto parser = make_tool_call_parser(format, tool_names, new_id);
  ParsedOutput out;
  append_events(out, parser->feed(text));
  append_events(out, parser->finish());
  return out;
}

std::unique_ptr<ToolCallParser> make_tool_call_parser(ToolFormat format, std::vector<std::string> tool_names,
                                                      std::function<std::string()> new_id) {
  if (!new_id) new_id = random_tool_call_id;
  return tool_call_format(format).parser(std::move(tool_names), std::move(new_id));
}

std::string random_tool_call_id() {
  static constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += alphabet[pick(rng)];
  return id;
}

}  // namespace ds::server
