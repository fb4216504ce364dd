// The well-formed UTF-8 encodings of characters past ASCII, as byte classes (no overlong forms,
// no surrogates, nothing past U+10FFFF): what a JSON string may hold unescaped beyond ASCII.
// The schema compiler makes a rule of them; the regex compiler an automaton.
#pragma once
#include <array>

#include "grammar/byte_set.h"

namespace ds::grammar {

struct Utf8Sequence {
  int length;                   // 2 to 4 bytes
  std::array<ByteSet, 4> bytes;  // bytes[0] the lead byte's class, then the continuation bytes'
};

inline const std::array<Utf8Sequence, 7>& utf8_multibyte_sequences() {
  static const std::array<Utf8Sequence, 7> seqs = [] {
    const ByteSet cont = ByteSet::range(0x80, 0xBF);
    return std::array<Utf8Sequence, 7>{{
        {2, {ByteSet::range(0xC2, 0xDF), cont, {}, {}}},
        {3, {ByteSet::of(0xE0), ByteSet::range(0xA0, 0xBF), cont, {}}},
        {3, {ByteSet::range(0xE1, 0xEC) | ByteSet::range(0xEE, 0xEF), cont, cont, {}}},
        {3, {ByteSet::of(0xED), ByteSet::range(0x80, 0x9F), cont, {}}},
        {4, {ByteSet::of(0xF0), ByteSet::range(0x90, 0xBF), cont, cont}},
        {4, {ByteSet::range(0xF1, 0xF3), cont, cont, cont}},
        {4, {ByteSet::of(0xF4), ByteSet::range(0x80, 0x8F), cont, cont}},
    }};
  }();
  return seqs;
}

}  // namespace ds::grammar
