// The grammar of a forced tool call (tool_choice "required" or a named function): the output is
// one call (or, with parallel_tool_calls, one or more) to a declared tool, in the chat format's
// own syntax, with arguments that match that tool's parameter schema. The syntax is exactly what
// server/tools/tool_parser.h parses, so a constrained output always comes back as tool_calls:
//   HermesJson: <tool_call>\n{"name": "N", "arguments": ARGS}\n</tool_call>   ("\n" between calls)
//   Kimi: <|tool_calls_section_begin|>( <|tool_call_begin|>functions.N:IDX
//         <|tool_call_argument_begin|>ARGS<|tool_call_end|> )+<|tool_calls_section_end|>
// Nothing may come before the first call; after the last the grammar is complete, so the next
// token is the end of the turn.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "server/tools/tool_parser.h"

namespace ds::server {

// How the grammar spells each marker of the format's tool-call syntax (the tags or section and
// call markers, tool_syntax_markers()). A marker the tokenizer has as a special token is spelled
// by a private byte, kPrivateMarkerByte + the marker's index, which no text token holds and no
// UTF-8 text contains (0xF8-0xFF never occur in UTF-8): only that special token can produce it,
// and never inside a JSON string, where the marker's own text would be ordinary characters
// that the tool parser then reads as the end of the call. A marker the tokenizer lacks is
// spelled as its text.
inline constexpr unsigned char kPrivateMarkerByte = 0xF8;

std::vector<std::string_view> tool_syntax_markers(ToolFormat format);

struct ToolSyntaxSpelling {
  std::vector<std::string> markers;  // by tool_syntax_markers() index; empty: the text itself
  std::string spell(ToolFormat format, std::string_view marker) const;
};

struct ToolGrammarSpec {
  std::string name;
  nlohmann::ordered_json parameters;  // JSON schema; null: any JSON object
};

// `only`: the one tool allowed (tool_choice naming a function), empty for any declared tool;
// max_calls: how many calls the turn may make (at least one).
// Throws grammar::SchemaError for a parameter schema outside the supported subset, with where()
// prefixed by the tool's index ("/tools/2/function/parameters/properties/x"), including a
// definition with no finite value or a left-recursive one; grammar::GrammarTooLarge past the
// limits.
grammar::Grammar tool_call_grammar(ToolFormat format, const std::vector<ToolGrammarSpec>& tools,
                                   const std::string& only, int max_calls, const ToolSyntaxSpelling& spelling = {},
                                   const grammar::GrammarLimits& limits = {});

}  // namespace ds::server
