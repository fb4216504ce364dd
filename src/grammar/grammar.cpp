#include "grammar/grammar.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <string>
#include <unordered_map>

#include "core/error.h"

namespace ds::grammar {

Grammar::Grammar(const GrammarLimits& limits)
    : limits_(limits),
      deadline_(std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(limits.max_compile_seconds))) {}

void Grammar::check_deadline() {
  if (std::chrono::steady_clock::now() > deadline_) {
    char s[32];
    std::snprintf(s, sizeof s, "%g", limits_.max_compile_seconds);
    throw GrammarTooLarge(std::string("compiling the grammar took longer than ") + s + " s");
  }
}

RuleId Grammar::new_rule(std::string name) {
  DS_CHECK(!finished_, "grammar: rule added after finish()");
  if (rules_.size() >= limits_.max_rules)
    throw GrammarTooLarge("the grammar would exceed " + std::to_string(limits_.max_rules) +
                          " rules (lower the schema's length and item bounds, or its size)");
  if ((++calls_ & 255) == 0) check_deadline();
  names_.push_back(std::move(name));
  rules_.emplace_back();
  return RuleId(rules_.size() - 1);
}

void Grammar::add_alternative(RuleId rule, std::vector<Symbol> seq) {
  DS_CHECK(!finished_ && rule < rules_.size(), "grammar: bad rule id");
  num_symbols_ += seq.size() + 1;
  if (num_symbols_ > limits_.max_symbols)
    throw GrammarTooLarge("the grammar would exceed " + std::to_string(limits_.max_symbols) +
                          " symbols (lower the schema's length and item bounds, or its size)");
  if ((++calls_ & 255) == 0) check_deadline();
  rules_[rule].push_back(std::move(seq));
}

void Grammar::append_literal(std::vector<Symbol>* seq, std::string_view text) {
  for (char c : text) seq->push_back(byte(uint8_t(c)));
}

RuleId Grammar::literal(std::string_view text) {
  const RuleId r = new_rule("lit");
  std::vector<Symbol> seq;
  append_literal(&seq, text);
  add_alternative(r, std::move(seq));
  return r;
}

RuleId Grammar::star(const Symbol& sym) {
  const RuleId r = new_rule("star");
  add_alternative(r, {sym, ref(r)});
  add_alternative(r, {});
  return r;
}

RuleId Grammar::plus(const Symbol& sym) {
  const RuleId r = new_rule("plus");
  add_alternative(r, {sym, ref(star(sym))});
  return r;
}

RuleId Grammar::optional(const Symbol& sym) {
  const RuleId r = new_rule("opt");
  add_alternative(r, {sym});
  add_alternative(r, {});
  return r;
}

RuleId Grammar::repeat(const Symbol& sym, int min, int max) {
  DS_CHECK(min >= 0 && (max < 0 || max >= min), "grammar: bad repeat bounds");
  // The optional tail first, innermost out: tail_k = (sym tail_{k-1})?, so at most max - min more.
  std::vector<Symbol> seq;
  for (int i = 0; i < min; ++i) seq.push_back(sym);
  if (max < 0) {
    seq.push_back(ref(star(sym)));
  } else if (max > min) {
    RuleId tail = optional(sym);
    for (int i = min + 1; i < max; ++i) {
      const RuleId t = new_rule("rep");
      add_alternative(t, {sym, ref(tail)});
      add_alternative(t, {});
      tail = t;
    }
    seq.push_back(ref(tail));
  }
  const RuleId r = new_rule("repeat");
  add_alternative(r, std::move(seq));
  return r;
}

RuleId Grammar::choice(const std::vector<std::vector<Symbol>>& alternatives) {
  const RuleId r = new_rule("choice");
  for (const auto& a : alternatives) add_alternative(r, a);
  return r;
}

void Grammar::finish() {
  DS_CHECK(!finished_, "grammar: finish() called twice");
  DS_CHECK(has_root_, "grammar: no root rule");
  for (size_t r = 0; r < rules_.size(); ++r)
    DS_CHECK(!rules_[r].empty(), "grammar: rule '" + names_[r] + "' has no alternatives");
  prune_and_check();
  starts_.assign(rules_.size(), {});
  flat_.clear();
  sets_.clear();
  std::unordered_map<std::string, uint32_t> set_index;  // a set's 32 bytes -> its index
  for (size_t r = 0; r < rules_.size(); ++r) {
    for (const auto& alt : rules_[r]) {
      starts_[r].push_back(uint32_t(flat_.size()));
      for (const Symbol& s : alt) {
        DS_CHECK(s.kind != Symbol::Rule || s.rule < rules_.size(), "grammar: reference to a missing rule");
        DS_CHECK(s.kind != Symbol::End, "grammar: End inside an alternative");
        if (s.kind == Symbol::Rule) {
          flat_.push_back({Symbol::Rule, s.rule});
          continue;
        }
        const std::string k(reinterpret_cast<const char*>(s.bytes.w), sizeof s.bytes.w);
        auto [it, fresh] = set_index.try_emplace(k, uint32_t(sets_.size()));
        if (fresh) sets_.push_back(s.bytes);
        flat_.push_back({Symbol::Bytes, it->second});
      }
      flat_.push_back(FlatSymbol{});  // End
    }
  }
  rules_.clear();
  rules_.shrink_to_fit();
  finished_ = true;
}

size_t Grammar::memory_bytes() const {
  size_t b = flat_.capacity() * sizeof(FlatSymbol) + sets_.capacity() * sizeof(ByteSet);
  for (const auto& s : starts_) b += s.capacity() * sizeof(uint32_t) + sizeof s;
  for (const auto& n : names_) b += n.capacity() + sizeof n;
  return b;
}

RuleId Grammar::rule_for_error(const std::vector<RuleId>& candidates) const {
  // A schema's definitions are named by their reference; they are what a client can act on.
  for (RuleId r : candidates)
    if (!names_[r].empty() && names_[r][0] == '#') return r;
  return candidates.front();
}

template <class Keep>
std::vector<RuleId> Grammar::reachable(RuleId from, Keep keep) const {
  // Breadth-first over references, through the rules `keep` admits: from, then what they reach.
  std::vector<RuleId> out{from};
  std::vector<char> seen(rules_.size(), 0);
  seen[from] = 1;
  for (size_t i = 0; i < out.size(); ++i)
    for (const auto& alt : rules_[out[i]])
      for (const Symbol& s : alt)
        if (s.kind == Symbol::Rule && !seen[s.rule] && keep(s.rule)) seen[s.rule] = 1, out.push_back(s.rule);
  return out;
}

void Grammar::prune_and_check() {
  const size_t R = rules_.size();
  // users[x]: (rule, alternative) once per reference to x in it.
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> users(R);
  auto index_users = [&] {
    for (auto& u : users) u.clear();
    for (uint32_t r = 0; r < R; ++r)
      for (uint32_t a = 0; a < rules_[r].size(); ++a)
        for (const Symbol& s : rules_[r][a])
          if (s.kind == Symbol::Rule) users[s.rule].push_back({r, a});
  };
  index_users();

  // marked[r] for every rule with an alternative whose count of pending references reaches 0 as
  // marked rules are counted off, by a worklist: linear in the grammar's size, whatever the
  // depth of its references. `own(alternative)` is that alternative's starting count.
  std::vector<std::vector<uint32_t>> pending(R);
  auto close_over = [&](std::vector<char>& marked, auto own) {
    marked.assign(R, 0);
    std::vector<uint32_t> work;
    for (uint32_t r = 0; r < R; ++r) {
      pending[r].assign(rules_[r].size(), 0);
      for (uint32_t a = 0; a < rules_[r].size(); ++a) {
        pending[r][a] = own(rules_[r][a]);
        if (pending[r][a] == 0 && !marked[r]) marked[r] = 1, work.push_back(r);
      }
    }
    while (!work.empty()) {
      const uint32_t x = work.back();
      work.pop_back();
      for (auto [r, a] : users[x])
        if (--pending[r][a] == 0 && !marked[r]) marked[r] = 1, work.push_back(r);
    }
  };
  auto references = [](const std::vector<Symbol>& alt) {
    uint32_t n = 0;
    for (const Symbol& s : alt) n += s.kind == Symbol::Rule;
    return n;
  };

  // Productive rules: some alternative's rules are all productive.
  std::vector<char> productive;
  close_over(productive, references);
  std::vector<RuleId> must_end = must_end_;
  must_end.insert(must_end.begin(), root_);
  for (RuleId top : must_end) {
    if (productive[top]) continue;
    // Name an unproductive rule it reaches.
    const RuleId r = rule_for_error(reachable(top, [&](RuleId x) { return !productive[x]; }));
    throw GrammarError("'" + names_[r] + "' admits no finite value: every alternative of it refers back to itself",
                       names_[r], r);
  }
  // Alternatives that refer to an unproductive rule can never end: drop them, so the matcher
  // never leads the model into one.
  for (uint32_t r = 0; r < R; ++r) {
    auto& alts = rules_[r];
    alts.erase(std::remove_if(alts.begin(), alts.end(),
                              [&](const std::vector<Symbol>& alt) {
                                for (const Symbol& s : alt)
                                  if (s.kind == Symbol::Rule && !productive[s.rule]) return true;
                                return false;
                              }),
               alts.end());
  }
  for (uint32_t r = 0; r < R; ++r)
    if (!productive[r]) rules_[r].push_back({Grammar::bytes(ByteSet{})});  // unreachable now: a dead end
  index_users();

  // Nullable rules: some alternative is only nullable rules (a byte: never; the count cannot
  // then come down to 0).
  std::vector<char> nullable;
  close_over(nullable, [&](const std::vector<Symbol>& alt) {
    for (const Symbol& s : alt)
      if (s.kind == Symbol::Bytes) return UINT32_MAX;
    return references(alt);
  });

  // Left calls: r -> x when x stands in an alternative of r behind nullable rules only. A cycle
  // among the rules the root reaches is left recursion. Depth-first with an explicit stack.
  std::vector<std::vector<RuleId>> left(R);
  for (uint32_t r = 0; r < R; ++r)
    for (const auto& alt : rules_[r])
      for (const Symbol& s : alt) {
        if (s.kind != Symbol::Rule) break;
        left[r].push_back(s.rule);
        if (!nullable[s.rule]) break;
      }
  std::vector<uint8_t> color(R, 0);  // 0 new, 1 on the stack, 2 done
  std::vector<std::pair<RuleId, size_t>> stack;
  for (RuleId start : reachable(root_, [](RuleId) { return true; })) {
    if (color[start]) continue;
    stack.push_back({start, 0});
    color[start] = 1;
    while (!stack.empty()) {
      auto& [r, next] = stack.back();
      if (next == left[r].size()) {
        color[r] = 2;
        stack.pop_back();
        continue;
      }
      const RuleId x = left[r][next++];
      if (color[x] == 1) {
        std::vector<RuleId> cycle;
        for (size_t i = stack.size(); i-- > 0;) {
          cycle.push_back(stack[i].first);
          if (stack[i].first == x) break;
        }
        std::reverse(cycle.begin(), cycle.end());
        const RuleId e = rule_for_error(cycle);
        throw GrammarError("'" + names_[e] +
                               "' is left-recursive: it can refer to itself again before any character is written",
                           names_[e], e);
      }
      if (color[x] == 0) {
        color[x] = 1;
        stack.push_back({x, 0});
      }
    }
  }
}

namespace {

std::string byte_set_text(const ByteSet& s) {
  std::string out = "[";
  auto put = [&](int b) {
    if (b >= 0x20 && b < 0x7f && b != ']' && b != '\\' && b != '-') {
      out += char(b);
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[b >> 4];
      out += hex[b & 15];
    }
  };
  for (int b = 0; b < 256;) {
    if (!s.has(uint8_t(b))) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && s.has(uint8_t(e + 1))) ++e;
    put(b);
    if (e > b) {
      out += '-';
      put(e);
    }
    b = e + 1;
  }
  return out + "]";
}

}  // namespace

std::string Grammar::to_string() const {
  std::string out;
  for (size_t r = 0; r < starts_.size(); ++r) {
    out += names_[r] + std::to_string(r) + " ::=";
    bool first = true;
    for (uint32_t p : starts_[r]) {
      out += first ? " " : " | ";
      first = false;
      for (; flat_[p].kind != Symbol::End; ++p) {
        const FlatSymbol& s = flat_[p];
        out += s.kind == Symbol::Rule ? names_[s.arg] + std::to_string(s.arg) : byte_set_text(sets_[s.arg]);
        out += ' ';
      }
      if (out.back() != ' ') out += ' ';
      out += "()";
    }
    out += '\n';
  }
  return out;
}

}  // namespace ds::grammar
