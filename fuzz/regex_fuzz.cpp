// libFuzzer target: a JSON-schema `pattern` as the regex compiler reads it. Every input must
// compile to a grammar (then run over the input's own bytes) or be refused with a ds::Error
// naming the construct or the bound; any other exception, crash, hang or sanitizer report is a
// bug.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "grammar/matcher.h"
#include "grammar/regex.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ds::grammar;
  const std::string_view pattern(reinterpret_cast<const char*>(data), size);
  GrammarLimits limits;
  limits.max_compile_seconds = 5;
  try {
    Grammar g(limits);
    g.set_root(add_regex(g, pattern, ByteSet::range(0x20, 0x7e) & ~ByteSet::any_of("\"\\")));
    g.finish();
    // A DFA holds at most a transition's worth of stacks: run the pattern's own text through it.
    Matcher m(g);
    std::vector<int32_t> cur, next;
    m.initial(&cur);
    for (char c : pattern) {
      next.clear();
      if (!m.advance(cur.data(), cur.size(), uint8_t(c), &next)) break;
      if (next.size() > 258) __builtin_trap();
      cur.swap(next);
    }
  } catch (const ds::Error&) {
  }
  return 0;
}
