// One tool-call format: its syntax's markers, its streaming parser and its grammar for forced
// calls, in one file per format (hermes_json_format.cpp, kimi_format.cpp) behind this interface.
// The rest of the server reaches a format only through tool_call_format(): adding one is its
// file, a ToolFormat value (tool_parser.h) and a line in tool_call_format.cpp.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "server/tools/tool_parser.h"

namespace ds::server {

// How the grammar spells one of the format's markers (tool_call_grammar.h: a private byte when
// the tokenizer holds the marker as a special token, else its text).
using MarkerSpelling = std::function<std::string(std::string_view marker)>;

class ToolCallFormat {
 public:
  virtual ~ToolCallFormat() = default;

  // The markers of the syntax, in a fixed order (ToolSyntaxSpelling indexes them).
  virtual std::vector<std::string_view> markers() const = 0;

  // A streaming parser of model output in this syntax, to the rules of tool_parser.h. new_id
  // gives the calls ids where the syntax carries none.
  virtual std::unique_ptr<ToolCallParser> parser(std::vector<std::string> tool_names,
                                                 std::function<std::string()> new_id) const = 0;

  // The grammar of one call to tool `name` whose arguments match rule `args`: exactly what the
  // parser reads back as that call.
  virtual std::vector<grammar::Symbol> call(grammar::Grammar& g, const std::string& name, grammar::RuleId args,
                                            const MarkerSpelling& mark) const = 0;
  // What stands between two calls of one turn.
  virtual std::string call_separator() const = 0;
  // The turn's calls (rule `calls`) as the whole output.
  virtual std::vector<grammar::Symbol> turn(grammar::RuleId calls, const MarkerSpelling& mark) const = 0;
};

const ToolCallFormat& tool_call_format(ToolFormat format);

// Each format's one instance, defined in its file.
const ToolCallFormat& hermes_json_format();
const ToolCallFormat& kimi_format();

}  // namespace ds::server
