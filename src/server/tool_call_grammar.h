// The grammar of a forced tool call (tool_choice "required" or a named function): the output is
// one call (or, with parallel_tool_calls, one or more) to a declared tool, in the chat format's
// own syntax, with arguments that match that tool's parameter schema. The syntax is exactly what
// server/tool_parser.h parses, so a constrained output always comes back as tool_calls:
//   HermesJson: <tool_call>\n{"name": "N", "arguments": ARGS}\n</tool_call>   ("\n" between calls)
//   Kimi: <|tool_calls_section_begin|>( <|tool_call_begin|>functions.N:IDX
//         <|tool_call_argument_begin|>ARGS<|tool_call_end|> )+<|tool_calls_section_end|>
// Nothing may come before the first call; after the last the grammar is complete, so the next
// token is the end of the turn.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "server/tool_parser.h"

namespace ds::server {

struct ToolGrammarSpec {
  std::string name;
  nlohmann::ordered_json parameters;  // JSON schema; null: any JSON object
};

// `only`: the one tool allowed (tool_choice naming a function), empty for any declared tool;
// max_calls: how many calls the turn may make (at least one).
// Throws grammar::SchemaError for a parameter schema outside the supported subset, with where()
// prefixed by the tool's index ("/tools/2/function/parameters/properties/x").
grammar::Grammar tool_call_grammar(ToolFormat format, const std::vector<ToolGrammarSpec>& tools,
                                   const std::string& only, int max_calls);

}  // namespace ds::server
