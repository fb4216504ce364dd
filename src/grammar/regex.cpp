#include "grammar/regex.h"

#include <string>
#include <vector>

#include "core/error.h"

namespace ds::grammar {
namespace {

constexpr int kMaxRepeat = 1000;

class RegexCompiler {
 public:
  RegexCompiler(Grammar& g, std::string_view p, const StringAlphabet& a) : g_(g), p_(p), a_(a) {}

  RuleId compile() {
    if (peek('^')) ++i_;
    const RuleId r = alternation();
    if (i_ != p_.size()) fail("unexpected '" + std::string(1, p_[i_]) + "'");
    return r;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("pattern '" + std::string(p_) + "': " + what + " at offset " + std::to_string(i_));
  }
  bool peek(char c) const { return i_ < p_.size() && p_[i_] == c; }
  bool at_end_anchor() const { return peek('$') && i_ + 1 == p_.size(); }

  RuleId alternation() {
    std::vector<std::vector<Symbol>> alts{concat()};
    while (peek('|')) {
      ++i_;
      alts.push_back(concat());
    }
    return g_.choice(alts);
  }

  std::vector<Symbol> concat() {
    std::vector<Symbol> seq;
    while (i_ < p_.size() && !peek('|') && !peek(')')) {
      if (at_end_anchor()) {
        ++i_;
        break;
      }
      Symbol atom_sym = atom();
      quantified(atom_sym, &seq);
    }
    return seq;
  }

  void quantified(const Symbol& s, std::vector<Symbol>* seq) {
    int lo = 1, hi = 1;
    if (peek('*')) {
      lo = 0, hi = -1, ++i_;
    } else if (peek('+')) {
      lo = 1, hi = -1, ++i_;
    } else if (peek('?')) {
      lo = 0, hi = 1, ++i_;
    } else if (peek('{')) {
      const size_t save = i_++;
      auto number = [&]() -> int {
        size_t start = i_;
        long v = 0;
        while (i_ < p_.size() && p_[i_] >= '0' && p_[i_] <= '9') {
          v = v * 10 + (p_[i_++] - '0');
          if (v > kMaxRepeat) fail("a repeat count above " + std::to_string(kMaxRepeat));
        }
        return i_ == start ? -2 : int(v);
      };
      lo = number();
      if (lo == -2) fail("a '{' that is not a repeat count");
      hi = lo;
      if (peek(',')) {
        ++i_;
        hi = number();
        if (hi == -2) hi = -1;
      }
      if (!peek('}')) {
        i_ = save;
        fail("an unterminated repeat count");
      }
      ++i_;
      if (hi >= 0 && hi < lo) fail("a repeat count {m,n} with n < m");
    }
    if (peek('?')) ++i_;  // lazy: the same language
    if (lo == 1 && hi == 1) {
      seq->push_back(s);
    } else {
      seq->push_back(Grammar::ref(g_.repeat(s, lo, hi)));
    }
  }

  Symbol atom() {
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (peek('?')) {
        if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
          i_ += 2;
        } else {
          fail("a group construct '(?' other than '(?:'");
        }
      }
      const RuleId r = alternation();
      if (!peek(')')) fail("an unclosed group");
      ++i_;
      return Grammar::ref(r);
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++i_;
      return any_char();
    }
    if (c == '\\') return escape(false, nullptr);
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("a quantifier with nothing to repeat");
    if (c == '^' || c == '$') fail("an anchor inside the pattern");
    const uint8_t b = uint8_t(c);
    if (b >= 0x80) {  // a literal multi-byte character: its bytes in sequence
      int len = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
      if (len == 1 || i_ + size_t(len) > p_.size()) fail("a malformed UTF-8 character");
      const RuleId r = g_.literal(p_.substr(i_, size_t(len)));
      i_ += size_t(len);
      return Grammar::ref(r);
    }
    ++i_;
    return plain(ByteSet::of(b));
  }

  Symbol plain(const ByteSet& s) {
    const ByteSet ok = s & a_.ascii;
    if (!(ok == s)) fail("a character JSON would have to escape (a quote, backslash or control character)");
    return Grammar::bytes(ok);
  }

  Symbol any_char() {
    // Any character a string may hold unescaped: one ASCII byte or one UTF-8 character.
    const RuleId r = g_.new_rule("any_char");
    g_.add_alternative(r, {Grammar::bytes(a_.ascii)});
    g_.add_alternative(r, {Grammar::ref(a_.multibyte)});
    return Grammar::ref(r);
  }

  // \d, \w, \s, their negations and escaped punctuation. In a class, adds to *cls and returns
  // an unused symbol; *negated_any receives whether a negated shorthand appeared.
  Symbol escape(bool in_class, ByteSet* cls) {
    ++i_;
    if (i_ >= p_.size()) fail("a trailing backslash");
    const char e = p_[i_++];
    ByteSet s;
    bool negate = false;
    switch (e) {
      case 'd': s = ByteSet::range('0', '9'); break;
      case 'D': s = ByteSet::range('0', '9'), negate = true; break;
      case 'w': s = ByteSet::range('a', 'z') | ByteSet::range('A', 'Z') | ByteSet::range('0', '9') | ByteSet::of('_'); break;
      case 'W': s = ByteSet::range('a', 'z') | ByteSet::range('A', 'Z') | ByteSet::range('0', '9') | ByteSet::of('_'), negate = true; break;
      case 's': s = ByteSet::of(' '); break;  // tabs and newlines would need escapes in JSON
      case 'S': s = ByteSet::of(' '), negate = true; break;
      default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
          fail(std::string("the escape \\") + e);
        s = ByteSet::of(uint8_t(e));
    }
    if (in_class) {
      if (negate) fail("a negated shorthand inside a class");
      *cls = *cls | s;
      return Symbol{};
    }
    if (!negate) return plain(s);
    const RuleId r = g_.new_rule("not_class");
    g_.add_alternative(r, {Grammar::bytes(a_.ascii & ~s)});
    g_.add_alternative(r, {Grammar::ref(a_.multibyte)});
    return Grammar::ref(r);
  }

  Symbol char_class() {
    ++i_;  // '['
    bool negate = false;
    if (peek('^')) negate = true, ++i_;
    ByteSet s;
    bool first = true;
    while (i_ < p_.size() && (first || !peek(']'))) {
      first = false;
      uint8_t lo;
      if (peek('\\')) {
        const size_t save = i_;
        ByteSet esc;
        escape(true, &esc);
        // A single escaped character may start a range; a shorthand may not.
        int count = 0, only = -1;
        for (int b = 0; b < 256; ++b)
          if (esc.has(uint8_t(b))) ++count, only = b;
        if (count != 1 || !peek('-') || i_ + 1 >= p_.size() || p_[i_ + 1] == ']') {
          s = s | esc;
          continue;
        }
        (void)save;
        lo = uint8_t(only);
      } else {
        lo = uint8_t(p_[i_++]);
      }
      if (lo >= 0x80) fail("a non-ASCII character in a class");
      if (peek('-') && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        uint8_t hi;
        if (peek('\\')) {
          ++i_;
          if (i_ >= p_.size()) fail("a trailing backslash");
          hi = uint8_t(p_[i_++]);
        } else {
          hi = uint8_t(p_[i_++]);
        }
        if (hi >= 0x80) fail("a non-ASCII character in a class");
        if (hi < lo) fail("a class range that runs backwards");
        s.add_range(lo, hi);
      } else {
        s.add(lo);
      }
    }
    if (!peek(']')) fail("an unclosed class");
    ++i_;
    if (!negate) return plain(s);
    const RuleId r = g_.new_rule("not_class");
    g_.add_alternative(r, {Grammar::bytes(a_.ascii & ~s)});
    g_.add_alternative(r, {Grammar::ref(a_.multibyte)});
    return Grammar::ref(r);
  }

  Grammar& g_;
  std::string_view p_;
  const StringAlphabet& a_;
  size_t i_ = 0;
};

}  // namespace

RuleId add_regex(Grammar& g, std::string_view pattern, const StringAlphabet& alphabet) {
  return RegexCompiler(g, pattern, alphabet).compile();
}

}  // namespace ds::grammar
