// A set of byte values: one input symbol class of a grammar.
#pragma once
#include <cstdint>
#include <string_view>

namespace ds::grammar {

struct ByteSet {
  uint64_t w[4] = {0, 0, 0, 0};

  static ByteSet of(uint8_t b) {
    ByteSet s;
    s.add(b);
    return s;
  }
  static ByteSet range(uint8_t lo, uint8_t hi) {
    ByteSet s;
    s.add_range(lo, hi);
    return s;
  }
  static ByteSet any_of(std::string_view chars) {
    ByteSet s;
    for (char c : chars) s.add(uint8_t(c));
    return s;
  }
  void add(uint8_t b) { w[b >> 6] |= uint64_t(1) << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(uint8_t(b));
  }
  bool has(uint8_t b) const { return (w[b >> 6] >> (b & 63)) & 1; }
  bool empty() const { return (w[0] | w[1] | w[2] | w[3]) == 0; }
  ByteSet operator|(const ByteSet& o) const {
    ByteSet s;
    for (int i = 0; i < 4; ++i) s.w[i] = w[i] | o.w[i];
    return s;
  }
  ByteSet operator&(const ByteSet& o) const {
    ByteSet s;
    for (int i = 0; i < 4; ++i) s.w[i] = w[i] & o.w[i];
    return s;
  }
  ByteSet operator~() const {
    ByteSet s;
    for (int i = 0; i < 4; ++i) s.w[i] = ~w[i];
    return s;
  }
  bool operator==(const ByteSet& o) const {
    return w[0] == o.w[0] && w[1] == o.w[1] && w[2] == o.w[2] && w[3] == o.w[3];
  }
};

}  // namespace ds::grammar
