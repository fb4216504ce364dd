// A regular-expression subset compiled into grammar rules, for JSON-schema `pattern` and
// `format`. The pattern describes a JSON string's value, and the rules match its JSON text; to
// keep those the same, the pattern may only produce characters that JSON writes unescaped
// (no '"', '\' or control characters). Supported: literals (any UTF-8), '.', classes
// [a-z0-9_] and [^...] (ASCII members), \d \w \s \D \W \S and escaped punctuation, groups
// (...) and (?:...), alternation, the quantifiers * + ? {m} {m,} {m,n} (a lazy '?' suffix is
// accepted and means the same here), and ^ / $ at the ends. Anything else is a ds::Error
// naming it and its offset.
#pragma once
#include <string_view>

#include "grammar/grammar.h"

namespace ds::grammar {

struct StringAlphabet {
  ByteSet ascii;       // single-byte characters a string may hold unescaped
  RuleId multibyte;    // one well-formed UTF-8 character of two to four bytes
};

// Rules matching exactly the strings the pattern matches, as a whole (the pattern is anchored
// at both ends, as JSON schema validators do not; see json_schema.cpp for why).
RuleId add_regex(Grammar& g, std::string_view pattern, const StringAlphabet& alphabet);

}  // namespace ds::grammar
