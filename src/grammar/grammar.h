// A context-free grammar over bytes, built by the schema and tool-call compilers and run by the
// Matcher. A rule is a list of alternatives; an alternative is a sequence of symbols, each a
// byte class or a reference to a rule. Repetition is written as right recursion (star, plus,
// bounded counts), never left recursion, so the matcher's expansion always terminates.
//
// After finish(), the grammar is flat: every alternative's symbols lie in one array followed by
// an End marker, and a position in that array is what a matcher stack holds.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "grammar/byte_set.h"

namespace ds::grammar {

using RuleId = uint32_t;

// A grammar past these sizes is refused while it is built (GrammarTooLarge): a schema's bounds
// (maxLength, minItems, maxItems, a regex's {m,n}) expand into rules and symbols, and one request
// must not make a grammar that takes seconds and gigabytes to build (a 47 KB schema of 1000
// strings with distinct maxLengths made 4M rules: 9 s and 2.4 GB before this bound). Both
// bounds compile in well under 0.1 s.
inline constexpr size_t kMaxGrammarRules = size_t(1) << 16;
inline constexpr size_t kMaxGrammarSymbols = size_t(1) << 19;

class GrammarTooLarge : public Error {
 public:
  using Error::Error;
};

struct Symbol {
  enum Kind : uint8_t { Bytes, Rule, End };
  Kind kind = End;
  RuleId rule = 0;  // Rule
  ByteSet bytes;    // Bytes
};

class Grammar {
 public:
  // A new rule with no alternatives yet (so rules may refer to each other, and to themselves).
  RuleId new_rule(std::string name);
  void add_alternative(RuleId rule, std::vector<Symbol> seq);
  void set_root(RuleId r) {
    root_ = r;
    has_root_ = true;
  }
  RuleId root() const { return root_; }

  // Symbols for building sequences.
  static Symbol bytes(const ByteSet& s) { return {Symbol::Bytes, 0, s}; }
  static Symbol byte(uint8_t b) { return bytes(ByteSet::of(b)); }
  static Symbol ref(RuleId r) { return {Symbol::Rule, r, {}}; }
  static void append_literal(std::vector<Symbol>* seq, std::string_view text);

  // Rules made from other symbols. `sym` must not match the empty string for star/plus (a
  // nullable loop would let the model repeat nothing forever; the compilers never build one).
  RuleId literal(std::string_view text);            // exactly text
  RuleId star(const Symbol& sym);                   // sym*
  RuleId plus(const Symbol& sym);                   // sym+
  RuleId optional(const Symbol& sym);               // sym?
  RuleId repeat(const Symbol& sym, int min, int max);  // sym{min,max}; max < 0: unbounded
  RuleId choice(const std::vector<std::vector<Symbol>>& alternatives);

  // Flattens the rules (call once, after the last rule is added). Throws ds::Error for a rule
  // without alternatives or a missing root.
  void finish();
  bool finished() const { return finished_; }

  // The flat form, valid after finish().
  const std::vector<Symbol>& symbols() const { return flat_; }
  // Positions in symbols() where each alternative of `rule` starts.
  const std::vector<uint32_t>& alternatives(RuleId rule) const { return starts_[rule]; }
  size_t num_rules() const { return rules_.size(); }
  const std::string& rule_name(RuleId r) const { return names_[r]; }

  // Debug text, one rule per line (GBNF-like).
  std::string to_string() const;

 private:
  std::vector<std::string> names_;
  std::vector<std::vector<std::vector<Symbol>>> rules_;
  RuleId root_ = 0;
  bool has_root_ = false;
  bool finished_ = false;
  size_t num_symbols_ = 0;
  std::vector<Symbol> flat_;
  std::vector<std::vector<uint32_t>> starts_;

};

}  // namespace ds::grammar
