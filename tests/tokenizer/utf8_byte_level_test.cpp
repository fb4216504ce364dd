#include <gtest/gtest.h>

#include <random>
#include <set>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace ds {
namespace {

TEST(ByteLevel, MapIsABijectionOntoPrintableCodePoints) {
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = byte_level::codepoint_of(static_cast<unsigned char>(b));
    EXPECT_TRUE(seen.insert(cp).second) << b;
    EXPECT_GT(cp, 0x20u) << "byte " << b << " maps to a space or control";
  }
  EXPECT_EQ(byte_level::codepoint_of('A'), U'A');
  EXPECT_EQ(byte_level::codepoint_of(' '), U'\u0120');   // Ġ
  EXPECT_EQ(byte_level::codepoint_of('\n'), U'\u010A');  // Ċ
  EXPECT_EQ(byte_level::codepoint_of(0xAD), U'\u0143');  // soft hyphen is shifted too
}

TEST(ByteLevel, EncodeDecodeRoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string mapped = byte_level::encode(all);
  EXPECT_TRUE(utf8::is_valid(mapped));
  EXPECT_EQ(byte_level::decode(mapped), all);
  EXPECT_EQ(byte_level::encode(" hello"), "\xC4\xA0hello");
}

TEST(ByteLevel, DecodeRejectsTextOutsideTheAlphabet) {
  EXPECT_FALSE(byte_level::decode("a b").has_value());   // a real space
  EXPECT_FALSE(byte_level::decode("\xFF").has_value());  // not UTF-8
  EXPECT_FALSE(byte_level::decode("\xE4\xB8\x96").has_value());
}

TEST(Utf8, NextRejectsOverlongsSurrogatesAndOutOfRange) {
  for (std::string bad : {"\xC0\xAF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\x80", "\xFF", "\xE4\xB8"}) {
    std::size_t pos = 0;
    char32_t cp;
    EXPECT_FALSE(utf8::next(bad, pos, cp)) << testing::PrintToString(bad);
    EXPECT_EQ(pos, 0u);
  }
  std::size_t pos = 0;
  char32_t cp;
  ASSERT_TRUE(utf8::next("\xF0\x9F\x99\x82", pos, cp));
  EXPECT_EQ(cp, 0x1F642u);
  EXPECT_EQ(pos, 4u);
}

TEST(Utf8, IncompleteTailFindsOnlyCompletablePrefixes) {
  EXPECT_EQ(utf8::incomplete_tail(""), 0u);
  EXPECT_EQ(utf8::incomplete_tail("abc"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("a\xE4"), 1u);
  EXPECT_EQ(utf8::incomplete_tail("a\xE4\xB8"), 2u);
  EXPECT_EQ(utf8::incomplete_tail("a\xE4\xB8\x96"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("\xF0\x9F\x99"), 3u);
  EXPECT_EQ(utf8::incomplete_tail("a\x80"), 0u);      // stray continuation: never completes
  EXPECT_EQ(utf8::incomplete_tail("a\xFF"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("a\xED\xA0"), 0u);  // would be a surrogate
  EXPECT_EQ(utf8::incomplete_tail("a\xC0"), 0u);      // overlong lead
}

TEST(Utf8, SanitizeReplacesOnlyInvalidParts) {
  EXPECT_EQ(utf8::sanitize("h\xC3\xA9llo"), "h\xC3\xA9llo");
  EXPECT_EQ(utf8::sanitize("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  // A truncated sequence is one maximal subpart: one replacement character.
  EXPECT_EQ(utf8::sanitize("a\xE4\xB8" "b"), "a\xEF\xBF\xBD" "b");
  std::mt19937 rng(3);
  for (int i = 0; i < 300; ++i) {
    std::string s;
    for (int k = 0; k < 40; ++k) s.push_back(static_cast<char>(rng() & 0xFF));
    EXPECT_TRUE(utf8::is_valid(utf8::sanitize(s)));
  }
}

TEST(Utf8, AppendAndNextAgreeOnEveryScalarValueSample) {
  for (char32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x800 ? 1 : 97)) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s;
    utf8::append(s, cp);
    std::size_t pos = 0;
    char32_t back;
    ASSERT_TRUE(utf8::next(s, pos, back)) << static_cast<uint32_t>(cp);
    EXPECT_EQ(back, cp);
    EXPECT_EQ(pos, s.size());
  }
}

}  // namespace
}  // namespace ds
