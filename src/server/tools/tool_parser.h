// Tool calls in a model's output text, in the chat format's own syntax:
//   HermesJson (ChatML models): <tool_call>\n{"name": "get_weather", "arguments": {...}}\n</tool_call>
//     The object may also give the arguments as a JSON string holding an object, or under
//     "parameters"; "arguments" left out means {}.
//   Kimi: <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
//     <|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>
//     The function's name is the id's part between "functions." and the last ':' (the whole id
//     in another form); the id is kept as written.
// Text outside the calls is content, without the whitespace right around the calls (the pieces
// are joined as they are). A call's arguments are the JSON text of the arguments object as the
// model wrote it, trimmed, so the streamed and the whole-text parse give the same bytes.
// Each format's parser (and its grammar for forced calls) is one file of server/tools/, behind
// tool_call_format.h; this header is what the rest of the server uses.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_template.h"

namespace ds::server {

struct ToolCall {
  std::string id, name;
  std::string arguments;  // JSON text of an object
};

struct ParsedOutput {
  std::string content;
  std::vector<ToolCall> calls;
};

// A piece of one call. A call's first delta has its id and name; every delta adds to its
// arguments text. Indices count the response's calls from 0.
struct ToolCallDelta {
  int index = 0;
  std::string id, name;
  std::string arguments;
};

// What one feed released: content, and call deltas in order (one per call touched).
struct ParseEvents {
  std::string content;
  std::vector<ToolCallDelta> calls;
};

// The streaming form: text arrives in arbitrary pieces (any byte boundary). Content is released
// as it arrives, except a tail that may still start a call (a prefix of the opening tag and the
// whitespace before it), which waits until it cannot. A HermesJson call whose object starts
// {"name": "X", "arguments": { (any JSON whitespace) gets its first delta there and its
// arguments stream as they come; in any other key order, or with arguments given as a string,
// the call is held until its closing tag and comes as one delta. A Kimi call gets its first
// delta at the '{' that opens its arguments after <|tool_call_argument_begin|>; its arguments
// stream, less a tail that may be the start of <|tool_call_end|> (or whitespace before it).
//
// The rules, the same for parse_tool_calls (which is this parser fed the whole text) and for
// any split of the text into pieces (docs/tools.md, "Cut and malformed output"):
//   - a call exists from its first delta on, and stands as it is from then: output that breaks
//     it afterwards (arguments that are not a JSON object, a missing closing tag, the end of the
//     output) ends it there, with the arguments as far as they came, and what follows is content;
//   - a call refused before its first delta (not an object, an unknown tool, an unexpected
//     marker) or cut off before it is content, raw (from the whitespace before its opening tag),
//     and parsing goes on after it;
//   - at the end of the output (max_tokens, a stop string, the end token), a HermesJson call held
//     whole but for its closing tag is a call when its object would make one; a closing marker
//     cut off (</tool_call>, <|tool_call_end|>, <|tool_calls_section_end|>) is dropped.
class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  virtual ParseEvents feed(std::string_view text) = 0;
  // The end of the output: releases what was held back.
  virtual ParseEvents finish() = 0;
};

enum class ToolFormat { HermesJson, Kimi };

inline ToolFormat tool_format_for(ChatFormat format) {
  return format == ChatFormat::Kimi ? ToolFormat::Kimi : ToolFormat::HermesJson;
}

// The whole output at once: the streaming parser fed it in one piece, its events put together
// (so a non-streamed response says exactly what a streamed one would have). new_id gives
// HermesJson calls their ids (Kimi's come from the text); empty means random_tool_call_id.
ParsedOutput parse_tool_calls(ToolFormat format, std::string_view text, const std::vector<std::string>& tool_names,
                              const std::function<std::string()>& new_id);

// Adds one feed's events to out: content appended, a call's first delta a new call, later deltas
// its arguments.
void append_events(ParsedOutput& out, const ParseEvents& ev);

std::unique_ptr<ToolCallParser> make_tool_call_parser(ToolFormat format, std::vector<std::string> tool_names,
                                                      std::function<std::string()> new_id);

// "call_" and 24 random letters and digits.
std::string random_tool_call_id();

}  // namespace ds::server
