// Helpers for the grammar tests: whole-string matching by the matcher, byte by byte.
#pragma once
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace ds::grammar::testing {

// Whether all of `s` is a sentence of g (g finished).
inline bool matches(const Grammar& g, std::string_view s) {
  Matcher m(g);
  std::vector<int32_t> cur, next;
  m.initial(&cur);
  for (char c : s) {
    next.clear();
    if (!m.advance(cur.data(), cur.size(), uint8_t(c), &next)) return false;
    cur.swap(next);
  }
  for (int32_t h : cur)
    if (h == Matcher::kAccepted) return true;
  return false;
}

// Whether s is a prefix of some sentence.
inline bool viable_prefix(const Grammar& g, std::string_view s) {
  Matcher m(g);
  std::vector<int32_t> cur, next;
  m.initial(&cur);
  for (char c : s) {
    next.clear();
    if (!m.advance(cur.data(), cur.size(), uint8_t(c), &next)) return false;
    cur.swap(next);
  }
  return true;
}

}  // namespace ds::grammar::testing
