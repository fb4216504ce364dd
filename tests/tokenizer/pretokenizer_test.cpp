#include <gtest/gtest.h>

#include <deque>

#include "core/error.h"
#include "tokenizer/pretokenizer.h"

namespace ds {
namespace {

std::vector<std::string> pieces(const RegexSplitter& s, std::string_view text) {
  std::vector<std::string_view> out;
  s.split(text, out);
  return {out.begin(), out.end()};
}

using V = std::vector<std::string>;

TEST(RegexSplitter, Gpt2Pattern) {
  RegexSplitter s(kGpt2SplitPattern, false, SplitBehavior::kIsolated, false);
  EXPECT_EQ(pieces(s, "Hello world's  test 123!!"),
            (V{"Hello", " world", "'s", " ", " test", " 123", "!!"}));
  EXPECT_EQ(pieces(s, "héllo 世界"), (V{"héllo", " 世界"}));
}

TEST(RegexSplitter, Gpt4PatternGroupsDigitsAndKeepsNewlinesApart) {
  RegexSplitter s(kGpt4SplitPattern, false, SplitBehavior::kIsolated, false);
  EXPECT_EQ(pieces(s, "x = 1234567"), (V{"x", " =", " ", "123", "456", "7"}));
  EXPECT_EQ(pieces(s, "def f():\n    return 1\n"), (V{"def", " f", "():\n", "   ", " return", " ", "1", "\n"}));
  EXPECT_EQ(pieces(s, "I'LL"), (V{"I", "'LL"}));
}

TEST(RegexSplitter, InvalidUtf8BytesStayCovered) {
  RegexSplitter s(kGpt4SplitPattern, false, SplitBehavior::kIsolated, false);
  const std::string text = "ab\xFF\xFE" "cd \x80";
  const auto p = pieces(s, text);
  std::string joined;
  for (const auto& x : p) joined += x;
  EXPECT_EQ(joined, text);
  EXPECT_EQ(p, (V{"ab", "\xFF\xFE", "cd", " ", "\x80"}));
}

TEST(RegexSplitter, Behaviors) {
  auto run = [](SplitBehavior b, bool invert, std::string_view text) {
    return pieces(RegexSplitter("-", false, b, invert), text);
  };
  EXPECT_EQ(run(SplitBehavior::kIsolated, false, "a-b--c"), (V{"a", "-", "b", "-", "-", "c"}));
  EXPECT_EQ(run(SplitBehavior::kRemoved, false, "a-b--c"), (V{"a", "b", "c"}));
  EXPECT_EQ(run(SplitBehavior::kMergedWithPrevious, false, "a-b--c"), (V{"a-", "b-", "-", "c"}));
  EXPECT_EQ(run(SplitBehavior::kMergedWithNext, false, "a-b--c"), (V{"a", "-b", "-", "-c"}));
  EXPECT_EQ(run(SplitBehavior::kContiguous, false, "a-b--c"), (V{"a", "-", "b", "--", "c"}));
  EXPECT_EQ(run(SplitBehavior::kRemoved, true, "a-b--c"), (V{"-", "-", "-"}));
}

TEST(RegexSplitter, LiteralPatternIsNotARegex) {
  RegexSplitter s(".", true, SplitBehavior::kIsolated, false);
  EXPECT_EQ(pieces(s, "a.b"), (V{"a", ".", "b"}));
}

TEST(RegexSplitter, EmptyMatchesDoNotLoop) {
  RegexSplitter s("x*", false, SplitBehavior::kIsolated, false);
  EXPECT_EQ(pieces(s, "abxxc"), (V{"ab", "xx", "c"}));
}

TEST(RegexSplitter, BadPatternThrows) {
  EXPECT_THROW(RegexSplitter("(unclosed", false, SplitBehavior::kIsolated, false), Error);
}

TEST(RegexSplitter, HugeRunsDoNotOverflowTheStack) {
  RegexSplitter s(kGpt4SplitPattern, false, SplitBehavior::kIsolated, false);
  const std::string spaces(2'000'000, ' ');
  const auto p = pieces(s, spaces + "x");
  ASSERT_FALSE(p.empty());
  std::size_t total = 0;
  for (const auto& x : p) total += x.size();
  EXPECT_EQ(total, spaces.size() + 1);
}

TEST(PreTokenizer, PrefixSpaceStage) {
  PreTokenizer pre;
  pre.add_prefix_space();
  pre.add_split(RegexSplitter(kGpt2SplitPattern, false, SplitBehavior::kIsolated, false));
  std::deque<std::string> scratch;
  std::vector<std::string_view> out;
  pre.split("hello world", scratch, out);
  EXPECT_EQ(std::vector<std::string>(out.begin(), out.end()), (V{" hello", " world"}));
  out.clear();
  pre.split(" x", scratch, out);
  EXPECT_EQ(std::vector<std::string>(out.begin(), out.end()), (V{" x"}));
}

}  // namespace
}  // namespace ds
