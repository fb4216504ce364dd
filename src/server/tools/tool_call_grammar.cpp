#include "server/tools/tool_call_grammar.h"

#include "grammar/json_schema.h"
#include "server/tools/tool_call_format.h"

namespace ds::server {

using grammar::Grammar;
using grammar::RuleId;
using grammar::Symbol;

namespace {

// The arguments value of one tool: its schema, or any object when it declares none.
RuleId arguments_rule(Grammar& g, const ToolGrammarSpec& t, size_t index) {
  if (t.parameters.is_null()) return grammar::add_any_json_object(g);
  try {
    return grammar::add_json_schema(g, t.parameters);
  } catch (const grammar::SchemaError& e) {
    throw grammar::SchemaError(e.what(), "/tools/" + std::to_string(index) + "/function/parameters" + e.where());
  }
}

}  // namespace

std::vector<std::string_view> tool_syntax_markers(ToolFormat format) { return tool_call_format(format).markers(); }

std::string ToolSyntaxSpelling::spell(ToolFormat format, std::string_view marker) const {
  const std::vector<std::string_view> names = tool_syntax_markers(format);
  for (size_t k = 0; k < names.size() && k < markers.size(); ++k)
    if (names[k] == marker && !markers[k].empty()) return markers[k];
  return std::string(marker);
}

Grammar tool_call_grammar(ToolFormat format, const std::vector<ToolGrammarSpec>& tools, const std::string& only,
                          int max_calls, const ToolSyntaxSpelling& spelling, const grammar::GrammarLimits& limits) {
  const ToolCallFormat& syntax = tool_call_format(format);
  const MarkerSpelling mark = [&](std::string_view marker) { return spelling.spell(format, marker); };
  Grammar g(limits);
  // Each tool's definitions are named by their reference ("#/$defs/x"); the rules a tool adds
  // lie in [its first, the next tool's first), which is how an error in finish() finds the tool.
  std::vector<std::pair<RuleId, size_t>> first_rule;
  const RuleId call = g.new_rule("tool_call");
  bool any = false;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ToolGrammarSpec& t = tools[i];
    if (!only.empty() && t.name != only) continue;
    any = true;
    first_rule.push_back({RuleId(g.num_rules()), i});
    const RuleId args = arguments_rule(g, t, i);
    g.require_finite(args);
    g.add_alternative(call, syntax.call(g, t.name, args, mark));
  }
  if (!any) throw grammar::SchemaError("no declared tool is named '" + only + "'", "/tool_choice");

  RuleId calls = call;
  if (max_calls > 1) {
    // call (sep call){0,max-1}: the separator keeps the parser's view of where one call ends.
    std::vector<Symbol> next;
    Grammar::append_literal(&next, syntax.call_separator());
    next.push_back(Grammar::ref(call));
    const RuleId one_more = g.new_rule("next_call");
    g.add_alternative(one_more, std::move(next));
    calls = g.new_rule("tool_calls");
    g.add_alternative(calls, {Grammar::ref(call), Grammar::ref(g.repeat(Grammar::ref(one_more), 0, max_calls - 1))});
  }
  const RuleId root = g.new_rule("root");
  g.add_alternative(root, syntax.turn(calls, mark));
  g.set_root(root);
  try {
    g.finish();
  } catch (const grammar::GrammarTooLarge&) {
    throw;
  } catch (const grammar::GrammarError& e) {
    std::string where = "/tools";
    for (const auto& [first, tool] : first_rule)
      if (e.rule_id() != UINT32_MAX && e.rule_id() >= first) where = "/tools/" + std::to_string(tool) + "/function/parameters";
    const std::string& n = e.rule_name();
    if (where != "/tools" && !n.empty() && n[0] == '#') where += n.substr(1);
    throw grammar::SchemaError(e.what(), where);
  }
  return g;
}

}  // namespace ds::server
