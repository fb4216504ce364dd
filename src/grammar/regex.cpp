#include "grammar/regex.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "grammar/utf8_sequences.h"

namespace ds::grammar {
namespace {

constexpr int kMaxRepeat = 1000;
// NFA states visited by the subset construction, summed over DFA states and byte classes:
// what bounds its time (a quarter of a second at this many).
constexpr size_t kMaxSubsetWork = size_t(1) << 24;

// Thompson's NFA over bytes. A fragment is a contiguous run of states with one entry and one
// exit (an Eps state whose `out` is not yet set), so a fragment can be copied by offsetting
// its internal links: how bounded repeats are built.
class Nfa {
 public:
  enum Kind : uint8_t { Byte, Eps, Split, Accept };
  struct State {
    Kind kind;
    uint32_t set;  // Byte: index into sets
    int32_t out, out2;
  };
  struct Frag {
    int32_t lo, start, exit;
  };

  Nfa(size_t max_states, std::string_view pattern) : max_(max_states), pattern_(pattern) {}

  int32_t add(Kind k, int32_t out = -1, int32_t out2 = -1, uint32_t set = 0) {
    if (states.size() >= max_) too_large();
    states.push_back({k, set, out, out2});
    return int32_t(states.size() - 1);
  }
  uint32_t set_id(const ByteSet& s) {
    const std::string k(reinterpret_cast<const char*>(s.w), sizeof s.w);
    auto [it, fresh] = set_index_.try_emplace(k, uint32_t(sets.size()));
    if (fresh) sets.push_back(s);
    return it->second;
  }
  Frag empty() {
    const int32_t e = add(Eps);
    return {e, e, e};
  }
  Frag bytes(const ByteSet& s) {
    const int32_t b = add(Byte, int32_t(states.size()) + 1, -1, set_id(s));
    const int32_t e = add(Eps);
    return {b, b, e};
  }
  // The states of f, [f.lo, hi), copied to the end of the array.
  Frag copy(const Frag& f, int32_t hi) {
    if (states.size() + size_t(hi - f.lo) > max_) too_large();
    const int32_t off = int32_t(states.size()) - f.lo;
    for (int32_t i = f.lo; i < hi; ++i) {
      State s = states[size_t(i)];
      if (s.out >= 0) s.out += off;
      if (s.out2 >= 0) s.out2 += off;
      states.push_back(s);
    }
    return {f.lo + off, f.start + off, f.exit + off};
  }
  // One of `entries`, by a chain of splits.
  int32_t split_over(const std::vector<int32_t>& entries) {
    int32_t start = entries.back();
    for (size_t i = entries.size() - 1; i-- > 0;) start = add(Split, entries[i], start);
    return start;
  }
  // One character: a byte of `ascii`, or (when `multibyte`) any well-formed UTF-8 character
  // past ASCII. The continuation bytes' tails are shared, so `.{0,1000}` stays small.
  Frag character(const ByteSet& ascii, bool multibyte) {
    const int32_t lo = int32_t(states.size());
    const int32_t exit = add(Eps);
    std::vector<int32_t> leads;
    if (!ascii.empty()) leads.push_back(add(Byte, exit, -1, set_id(ascii)));
    if (multibyte) {
      const ByteSet cont = ByteSet::range(0x80, 0xBF);
      const uint32_t c = set_id(cont);
      std::array<int32_t, 4> tail{exit, -1, -1, -1};  // tail[k]: k continuation bytes, then exit
      for (int k = 1; k < 4; ++k) tail[size_t(k)] = add(Byte, tail[size_t(k - 1)], -1, c);
      for (const Utf8Sequence& u : utf8_multibyte_sequences()) {
        int32_t after_lead = tail[size_t(u.length - 1)];
        if (!(u.bytes[1] == cont)) after_lead = add(Byte, tail[size_t(u.length - 2)], -1, set_id(u.bytes[1]));
        leads.push_back(add(Byte, after_lead, -1, set_id(u.bytes[0])));
      }
    }
    return {lo, split_over(leads), exit};
  }

  [[noreturn]] void too_large() const {
    throw GrammarTooLarge("pattern '" + std::string(pattern_.substr(0, 64)) + (pattern_.size() > 64 ? "...'" : "'") +
                          " needs more than " + std::to_string(max_) + " automaton states");
  }

  std::vector<State> states;
  std::vector<ByteSet> sets;

 private:
  size_t max_;
  std::string_view pattern_;
  std::unordered_map<std::string, uint32_t> set_index_;
};

using Frag = Nfa::Frag;

class RegexCompiler {
 public:
  RegexCompiler(Grammar& g, std::string_view p, const ByteSet& ascii)
      : g_(g), p_(p), ascii_(ascii), nfa_(g.limits().max_regex_nfa_states, p) {}

  RuleId compile() {
    if (peek('^')) ++i_;
    const Frag f = alternation(0);
    if (i_ != p_.size()) fail("unexpected '" + std::string(1, p_[i_]) + "'");
    nfa_.states[size_t(f.exit)].out = nfa_.add(Nfa::Accept);
    return emit_dfa(f.start);
  }

 private:
  std::string shown() const { return std::string(p_.substr(0, 64)) + (p_.size() > 64 ? "..." : ""); }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("pattern '" + shown() + "': " + what + " at offset " + std::to_string(i_));
  }
  bool peek(char c) const { return i_ < p_.size() && p_[i_] == c; }
  bool at_end_anchor() const { return peek('$') && i_ + 1 == p_.size(); }

  Frag alternation(int depth) {
    std::vector<Frag> alts{concat(depth)};
    while (peek('|')) {
      ++i_;
      alts.push_back(concat(depth));
    }
    if (alts.size() == 1) return alts[0];
    const int32_t exit = nfa_.add(Nfa::Eps);
    std::vector<int32_t> entries;
    for (const Frag& a : alts) {
      nfa_.states[size_t(a.exit)].out = exit;
      entries.push_back(a.start);
    }
    return {alts[0].lo, nfa_.split_over(entries), exit};
  }

  Frag concat(int depth) {
    const Frag first = nfa_.empty();
    int32_t exit = first.exit;
    while (i_ < p_.size() && !peek('|') && !peek(')')) {
      if (at_end_anchor()) {
        ++i_;
        break;
      }
      const Frag piece = quantified(atom(depth));
      nfa_.states[size_t(exit)].out = piece.start;
      exit = piece.exit;
    }
    return {first.lo, first.start, exit};
  }

  Frag quantified(const Frag& x) {
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
    if (lo == 1 && hi == 1) return x;
    // x{lo,hi}: lo copies, then hi - lo optional ones (each may skip to the end), or a loop
    // when unbounded. All copies are made before any link is set: a copy takes x as it is.
    const int optional = hi < 0 ? 0 : hi - lo, loop = hi < 0 ? 1 : 0;
    const int total = lo + optional + loop;
    if (total == 0) return nfa_.empty();
    std::vector<Frag> copies{x};
    const int32_t x_end = int32_t(nfa_.states.size());  // x's states run to the end of the array
    for (int k = 1; k < total; ++k) copies.push_back(nfa_.copy(x, x_end));
    const int32_t exit = nfa_.add(Nfa::Eps);
    const int32_t begin = nfa_.add(Nfa::Eps);
    int32_t at = begin;
    size_t k = 0;
    for (int n = 0; n < lo; ++n, ++k) {
      nfa_.states[size_t(at)].out = copies[k].start;
      at = copies[k].exit;
    }
    for (int n = 0; n < optional; ++n, ++k) {
      const int32_t s = nfa_.add(Nfa::Split, copies[k].start, exit);
      nfa_.states[size_t(at)].out = s;
      at = copies[k].exit;
    }
    if (loop) {
      const int32_t s = nfa_.add(Nfa::Split, copies[k].start, exit);
      nfa_.states[size_t(at)].out = s;
      nfa_.states[size_t(copies[k].exit)].out = s;
    } else {
      nfa_.states[size_t(at)].out = exit;
    }
    return {x.lo, begin, exit};
  }

  Frag atom(int depth) {
    const char c = p_[i_];
    if (c == '(') {
      if (depth >= kMaxRegexNesting) fail("groups nested deeper than " + std::to_string(kMaxRegexNesting));
      ++i_;
      if (peek('?')) {
        if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
          i_ += 2;
        } else {
          fail("a group construct '(?' other than '(?:'");
        }
      }
      const Frag f = alternation(depth + 1);
      if (!peek(')')) fail("an unclosed group");
      ++i_;
      return f;
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++i_;
      return nfa_.character(ascii_, true);
    }
    if (c == '\\') return escape(false, nullptr);
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("a quantifier with nothing to repeat");
    if (c == '^' || c == '$') fail("an anchor inside the pattern");
    const uint8_t b = uint8_t(c);
    if (b >= 0x80) return utf8_literal();
    ++i_;
    return plain(ByteSet::of(b));
  }

  // A literal character past ASCII: its bytes in sequence, if they are well-formed UTF-8.
  Frag utf8_literal() {
    for (const Utf8Sequence& u : utf8_multibyte_sequences()) {
      if (i_ + size_t(u.length) > p_.size()) continue;
      bool ok = true;
      for (int k = 0; k < u.length; ++k) ok = ok && u.bytes[size_t(k)].has(uint8_t(p_[i_ + size_t(k)]));
      if (!ok) continue;
      const Frag first = nfa_.empty();
      int32_t exit = first.exit;
      for (int k = 0; k < u.length; ++k) {
        const Frag b = nfa_.bytes(ByteSet::of(uint8_t(p_[i_ + size_t(k)])));
        nfa_.states[size_t(exit)].out = b.start;
        exit = b.exit;
      }
      i_ += size_t(u.length);
      return {first.lo, first.start, exit};
    }
    fail("a malformed UTF-8 character");
  }

  Frag plain(const ByteSet& s) {
    const ByteSet ok = s & ascii_;
    if (!(ok == s)) fail("a character JSON would have to escape (a quote, backslash or control character)");
    return nfa_.bytes(ok);
  }

  // \d, \w, \s, their negations and escaped punctuation. In a class, adds to *cls and returns
  // an unused fragment.
  Frag escape(bool in_class, ByteSet* cls) {
    ++i_;
    if (i_ >= p_.size()) fail("a trailing backslash");
    const char e = p_[i_++];
    ByteSet s;
    bool negate = false;
    const ByteSet word = ByteSet::range('a', 'z') | ByteSet::range('A', 'Z') | ByteSet::range('0', '9') | ByteSet::of('_');
    switch (e) {
      case 'd': s = ByteSet::range('0', '9'); break;
      case 'D': s = ByteSet::range('0', '9'), negate = true; break;
      case 'w': s = word; break;
      case 'W': s = word, negate = true; break;
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
      return {};
    }
    if (!negate) return plain(s);
    return nfa_.character(ascii_ & ~s, true);
  }

  Frag char_class() {
    ++i_;  // '['
    bool negate = false;
    if (peek('^')) negate = true, ++i_;
    ByteSet s;
    bool first = true;
    while (i_ < p_.size() && (first || !peek(']'))) {
      first = false;
      uint8_t lo;
      if (peek('\\')) {
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
    return nfa_.character(ascii_ & ~s, true);
  }

  // --- The DFA, by subsets, and its rules. ---

  // The Byte and Accept states reachable from `seeds` by Eps and Split, sorted.
  void closure(std::vector<int32_t>& seeds, std::vector<int32_t>* out) {
    out->clear();
    ++stamp_;
    while (!seeds.empty()) {
      const int32_t s = seeds.back();
      seeds.pop_back();
      if (s < 0 || visit_[size_t(s)] == stamp_) continue;
      visit_[size_t(s)] = stamp_;
      const Nfa::State& st = nfa_.states[size_t(s)];
      switch (st.kind) {
        case Nfa::Byte:
        case Nfa::Accept: out->push_back(s); break;
        case Nfa::Eps: seeds.push_back(st.out); break;
        case Nfa::Split:
          seeds.push_back(st.out2);
          seeds.push_back(st.out);
          break;
      }
    }
    std::sort(out->begin(), out->end());
  }

  RuleId emit_dfa(int32_t start) {
    const auto& states = nfa_.states;
    const auto& sets = nfa_.sets;
    visit_.assign(states.size(), 0);
    // Byte classes: bytes no set of the pattern tells apart share a class.
    std::array<uint16_t, 256> cls{};
    int ncls = 1;
    for (const ByteSet& s : sets) {
      std::array<int, 512> remap;
      remap.fill(-1);
      int n = 0;
      for (int b = 0; b < 256; ++b) {
        int& to = remap[size_t(cls[size_t(b)]) * 2 + (s.has(uint8_t(b)) ? 1 : 0)];
        if (to < 0) to = n++;
        cls[size_t(b)] = uint16_t(to);
      }
      ncls = n;
    }
    std::vector<int> rep(static_cast<size_t>(ncls), -1);
    std::vector<ByteSet> members(static_cast<size_t>(ncls));
    for (int b = 0; b < 256; ++b) {
      if (rep[cls[size_t(b)]] < 0) rep[cls[size_t(b)]] = b;
      members[cls[size_t(b)]].add(uint8_t(b));
    }

    const size_t max_dfa = g_.limits().max_regex_dfa_states;
    std::unordered_map<std::string, int32_t> index;
    std::vector<std::vector<int32_t>> dstates;
    std::vector<char> accepting;
    std::vector<std::vector<int32_t>> trans;  // [state][class], -1: dead
    std::vector<int32_t> seeds{start}, set;
    auto intern = [&](const std::vector<int32_t>& s) -> int32_t {
      const std::string k(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(int32_t));
      auto [it, fresh] = index.try_emplace(k, int32_t(dstates.size()));
      if (fresh) {
        if (dstates.size() >= max_dfa)
          throw GrammarTooLarge("pattern '" + shown() + "' needs more than " + std::to_string(max_dfa) +
                                " automaton states (lower its repeat counts)");
        dstates.push_back(s);
        bool acc = false;
        for (int32_t x : s) acc = acc || states[size_t(x)].kind == Nfa::Accept;
        accepting.push_back(acc);
      }
      return it->second;
    };
    closure(seeds, &set);
    intern(set);
    size_t work = 0;
    for (size_t d = 0; d < dstates.size(); ++d) {
      trans.emplace_back(size_t(ncls), -1);
      for (int c = 0; c < ncls; ++c) {
        work += dstates[d].size();
        if (work > kMaxSubsetWork)
          throw GrammarTooLarge("pattern '" + shown() + "' is too complex to compile (its automaton passes " +
                                std::to_string(kMaxSubsetWork) + " steps of construction)");
        seeds.clear();
        const uint8_t b = uint8_t(rep[size_t(c)]);
        for (int32_t x : dstates[d]) {
          const Nfa::State& st = states[size_t(x)];
          if (st.kind == Nfa::Byte && sets[st.set].has(b)) seeds.push_back(st.out);
        }
        if (seeds.empty()) continue;
        closure(seeds, &set);
        if (set.empty()) continue;
        const int32_t t = intern(set);
        trans[d][size_t(c)] = t;
      }
      if ((d & 63) == 63) g_.check_deadline();
    }

    // Only states from which an accepting one can be reached are kept.
    const size_t n = dstates.size();
    std::vector<std::vector<int32_t>> back(n);
    for (size_t d = 0; d < n; ++d)
      for (int32_t t : trans[d])
        if (t >= 0) back[size_t(t)].push_back(int32_t(d));
    std::vector<char> live(n, 0);
    std::vector<int32_t> work_list;
    for (size_t d = 0; d < n; ++d)
      if (accepting[d]) live[d] = 1, work_list.push_back(int32_t(d));
    while (!work_list.empty()) {
      const int32_t d = work_list.back();
      work_list.pop_back();
      for (int32_t p : back[size_t(d)])
        if (!live[size_t(p)]) live[size_t(p)] = 1, work_list.push_back(p);
    }
    if (!live[0]) throw Error("pattern '" + shown() + "' matches no string a JSON string can hold");

    std::vector<RuleId> rule(n, 0);
    for (size_t d = 0; d < n; ++d)
      if (live[d]) rule[d] = g_.new_rule("pattern_state");
    for (size_t d = 0; d < n; ++d) {
      if (!live[d]) continue;
      std::map<int32_t, ByteSet> to;  // by target, in order: the rules come out the same every time
      for (int c = 0; c < ncls; ++c) {
        const int32_t t = trans[d][size_t(c)];
        if (t >= 0 && live[size_t(t)]) to[t] = to[t] | members[size_t(c)];
      }
      for (const auto& [t, bytes] : to) g_.add_alternative(rule[d], {Grammar::bytes(bytes), Grammar::ref(rule[size_t(t)])});
      if (accepting[d]) g_.add_alternative(rule[d], {});
    }
    return rule[0];
  }

  Grammar& g_;
  std::string_view p_;
  ByteSet ascii_;
  size_t i_ = 0;
  Nfa nfa_;
  std::vector<uint32_t> visit_;
  uint32_t stamp_ = 0;
};

}  // namespace

RuleId add_regex(Grammar& g, std::string_view pattern, const ByteSet& ascii) {
  return RegexCompiler(g, pattern, ascii).compile();
}

}  // namespace ds::grammar
