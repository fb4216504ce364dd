// The regex subset against std::regex (ECMAScript, matched whole) on every string up to a length
// over a small alphabet, and its refusals.
#include <gtest/gtest.h>

#include <regex>

#include "core/error.h"
#include "grammar/regex.h"
#include "grammar_test_util.h"

namespace ds::grammar {
namespace {

Grammar regex_grammar(const std::string& pattern) {
  Grammar g;
  g.set_root(add_regex(g, pattern, ByteSet::range(0x20, 0x7e) & ~ByteSet::any_of("\"\\")));
  g.finish();
  return g;
}

TEST(Regex, AgreesWithStdRegexOnAllShortStrings) {
  const char* patterns[] = {"a*b", "(ab|a)+", "[a-c]{2,3}", "a?b?c?", "[^a]b", "\\d+-\\d{2}", "(?:a|b)*c{0,2}",
                            "^a.b$", "[\\w-]+", "a{3}", "(a|)b", "[-a]b", "a|b|", "\\.x", "(a*)*b", "(|a)+c",
                            "((ab){1,2}){1,2}", "(a?){2,3}x"};
  const std::string alphabet = "abc1-.x";
  for (const char* p : patterns) {
    const Grammar g = regex_grammar(p);
    const std::regex re(p, std::regex::ECMAScript);
    std::vector<std::string> strings{""};
    for (size_t len = 0, at = 0; len < 4; ++len) {
      const size_t end = strings.size();
      for (; at < end; ++at)
        for (char c : alphabet) strings.push_back(strings[at] + c);
    }
    for (const std::string& s : strings)
      ASSERT_EQ(testing::matches(g, s), std::regex_match(s, re)) << "pattern " << p << " string '" << s << "'";
  }
}

TEST(Regex, RefusalsNameTheConstruct) {
  for (const auto& [p, what] : std::vector<std::pair<const char*, const char*>>{
           {"(?=a)", "'(?'"}, {"a{2,1}", "n < m"}, {"[z-a]", "backwards"}, {"(ab", "unclosed group"},
           {"[ab", "unclosed class"}, {"*a", "nothing to repeat"}, {"a\\", "trailing backslash"},
           {"\\bx", "\\b"}, {"a^b", "anchor"}, {"a{5000}", "above 1000"}, {"\"", "escape"}}) {
    try {
      (void)regex_grammar(p);
      ADD_FAILURE() << "accepted " << p;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << p << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace ds::grammar
