// A regular-expression subset compiled into grammar rules, for JSON-schema `pattern` and
// `format`. The pattern describes a JSON string's value, and the rules match its JSON text; to
// keep those the same, the pattern may only produce characters that JSON writes unescaped
// (no '"', '\' or control characters). Supported: literals (any UTF-8), '.', classes
// [a-z0-9_] and [^...] (ASCII members), \d \w \s \D \W \S and escaped punctuation, groups
// (...) and (?:...), alternation, the quantifiers * + ? {m} {m,} {m,n} (a lazy '?' suffix is
// accepted and means the same here), and ^ / $ at the ends. Anything else is a ds::Error
// naming it and its offset.
//
// The pattern is compiled to a DFA over bytes (Thompson's construction, then subsets), and the
// DFA's states become right-recursive rules. So whatever the pattern's shape (nested bounded
// quantifiers like ((a{1,20}){1,20}){1,20}, loops over patterns that match the empty string
// like (a*)* or (|a)+), the matcher holds one stack for it and never loops: the automaton has
// already resolved the ambiguity. The construction is bounded by the grammar's limits (NFA
// and DFA states, the subset construction's work, the compile deadline) and by a nesting
// depth for groups; past them the pattern is refused with GrammarTooLarge.
#pragma once
#include <string_view>

#include "grammar/grammar.h"

namespace ds::grammar {

// Rules matching exactly the strings the pattern matches, as a whole (the pattern is anchored
// at both ends, as JSON schema validators do not; see json_schema.cpp for why). `ascii`: the
// single-byte characters a string may hold unescaped; every well-formed UTF-8 character past
// ASCII may appear too (grammar/utf8_sequences.h).
RuleId add_regex(Grammar& g, std::string_view pattern, const ByteSet& ascii);

// Groups nested deeper than this are refused (the parser recurses once per group).
inline constexpr int kMaxRegexNesting = 100;

}  // namespace ds::grammar
