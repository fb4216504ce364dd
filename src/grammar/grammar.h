// A context-free grammar over bytes, built by the schema and tool-call compilers and run by the
// Matcher. A rule is a list of alternatives; an alternative is a sequence of symbols, each a
// byte class or a reference to a rule.
//
// finish() checks what the matcher needs to terminate and flattens the rules:
//   - alternatives that can never end (they refer to a rule with no finite sentence, such as a
//     schema object whose required property is itself) are dropped, and a root with no finite
//     sentence is refused;
//   - left recursion (a rule that can reach itself before any byte is read, directly, through
//     other rules, or behind rules that match the empty string) is refused: the matcher expands
//     rules eagerly and would never stop. Repetition is right recursion (star, plus, repeat).
// Both refusals are GrammarErrors naming a rule; the schema compiler names its `$defs` rules by
// their reference ("#/$defs/expr"), and finish() names such a rule when one is involved.
//
// After finish(), the grammar is flat: every alternative's symbols lie in one array followed by
// an End marker, and a position in that array is what a matcher stack holds. Byte classes are
// interned, so a flat symbol is 8 bytes.
#pragma once
#include <chrono>
#include <climits>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "grammar/byte_set.h"

namespace ds::grammar {

using RuleId = uint32_t;

// What one grammar may cost to build and to run. A client's schema or pattern past these is
// refused with a message that says which bound it hit; the defaults are far above any schema
// an agent sends (the largest tool set in the agent clients' requests compiles to under 2,000
// rules) and keep one grammar to a few tens of MB and well under a second.
struct GrammarLimits {
  size_t max_rules = size_t(1) << 16;
  size_t max_symbols = size_t(1) << 19;
  // One regex (grammar/regex.h) is compiled to a DFA: its NFA while building, and the DFA kept.
  size_t max_regex_nfa_states = size_t(1) << 16;
  size_t max_regex_dfa_states = size_t(1) << 13;
  // Bytes of enum and const values in one schema (they become a trie of literals).
  size_t max_literal_bytes = size_t(1) << 20;
  // Wall-clock seconds for building one grammar (the schema walk, regexes, finish()).
  double max_compile_seconds = 2.0;
  // Matcher stacks alive in one state. An ambiguous grammar (anyOf branches that overlap,
  // nested through recursion) can double them with every byte; past this the byte is refused.
  size_t max_state_heads = 1024;
};

class GrammarError : public Error {
 public:
  explicit GrammarError(const std::string& what, std::string rule = {}, uint32_t rule_id = UINT32_MAX)
      : Error(what), rule_(std::move(rule)), rule_id_(rule_id) {}
  // The rule the error is about, if any (UINT32_MAX: none).
  const std::string& rule_name() const { return rule_; }
  uint32_t rule_id() const { return rule_id_; }

 private:
  std::string rule_;
  uint32_t rule_id_;
};

// A bound of GrammarLimits was hit while building.
class GrammarTooLarge : public GrammarError {
 public:
  using GrammarError::GrammarError;
};

struct Symbol {
  enum Kind : uint8_t { Bytes, Rule, End };
  Kind kind = End;
  RuleId rule = 0;  // Rule
  ByteSet bytes;    // Bytes
};

// A symbol of the flat form: a rule id (Rule) or an index into byte_sets() (Bytes).
struct FlatSymbol {
  Symbol::Kind kind = Symbol::End;
  uint32_t arg = 0;
};

class Grammar {
 public:
  explicit Grammar(const GrammarLimits& limits = {});

  // A new rule with no alternatives yet (so rules may refer to each other, and to themselves).
  RuleId new_rule(std::string name);
  void add_alternative(RuleId rule, std::vector<Symbol> seq);
  void set_root(RuleId r) {
    root_ = r;
    has_root_ = true;
  }
  RuleId root() const { return root_; }
  // finish() refuses a rule without a finite sentence only at the root: elsewhere such a rule's
  // alternatives are dropped. A rule named here must have one too (a tool's arguments: the
  // choice among tools must not silently lose one).
  void require_finite(RuleId r) { must_end_.push_back(r); }
  const GrammarLimits& limits() const { return limits_; }
  // Throws GrammarTooLarge once the compile deadline has passed (the builders call it in their
  // loops; new_rule and add_alternative call it too).
  void check_deadline();

  // Symbols for building sequences.
  static Symbol bytes(const ByteSet& s) { return {Symbol::Bytes, 0, s}; }
  static Symbol byte(uint8_t b) { return bytes(ByteSet::of(b)); }
  static Symbol ref(RuleId r) { return {Symbol::Rule, r, {}}; }
  static void append_literal(std::vector<Symbol>* seq, std::string_view text);

  // Rules made from other symbols. star/plus over a symbol that matches the empty string would
  // be left recursion, which finish() refuses; the compilers never build one.
  RuleId literal(std::string_view text);            // exactly text
  RuleId star(const Symbol& sym);                   // sym*
  RuleId plus(const Symbol& sym);                   // sym+
  RuleId optional(const Symbol& sym);               // sym?
  RuleId repeat(const Symbol& sym, int min, int max);  // sym{min,max}; max < 0: unbounded
  RuleId choice(const std::vector<std::vector<Symbol>>& alternatives);

  // Checks and flattens the rules (call once, after the last rule is added). Throws
  // GrammarError for a root without a finite sentence or for left recursion; ds::Error for a
  // rule without alternatives or a missing root (the builders' mistakes).
  void finish();
  bool finished() const { return finished_; }

  // The flat form, valid after finish().
  const std::vector<FlatSymbol>& symbols() const { return flat_; }
  const std::vector<ByteSet>& byte_sets() const { return sets_; }
  // Positions in symbols() where each alternative of `rule` starts.
  const std::vector<uint32_t>& alternatives(RuleId rule) const { return starts_[rule]; }
  size_t num_rules() const { return names_.size(); }
  const std::string& rule_name(RuleId r) const { return names_[r]; }
  // Bytes the flat form holds (the compiled-grammar cache is bounded by these).
  size_t memory_bytes() const;

  // Debug text, one rule per line (GBNF-like).
  std::string to_string() const;

 private:
  void prune_and_check();
  RuleId rule_for_error(const std::vector<RuleId>& candidates) const;
  template <class Keep>
  std::vector<RuleId> reachable(RuleId from, Keep keep) const;  // before flattening

  GrammarLimits limits_;
  std::chrono::steady_clock::time_point deadline_;
  uint32_t calls_ = 0;
  std::vector<std::string> names_;
  std::vector<std::vector<std::vector<Symbol>>> rules_;
  RuleId root_ = 0;
  std::vector<RuleId> must_end_;
  bool has_root_ = false;
  bool finished_ = false;
  size_t num_symbols_ = 0;
  std::vector<FlatSymbol> flat_;
  std::vector<ByteSet> sets_;
  std::vector<std::vector<uint32_t>> starts_;
};

}  // namespace ds::grammar
