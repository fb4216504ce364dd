#include "grammar/grammar.h"

#include <string>

#include "core/error.h"

namespace ds::grammar {

RuleId Grammar::new_rule(std::string name) {
  DS_CHECK(!finished_, "grammar: rule added after finish()");
  if (rules_.size() >= kMaxGrammarRules)
    throw GrammarTooLarge("the grammar would exceed " + std::to_string(kMaxGrammarRules) +
                          " rules (lower the schema's length and item bounds)");
  names_.push_back(std::move(name));
  rules_.emplace_back();
  return RuleId(rules_.size() - 1);
}

void Grammar::add_alternative(RuleId rule, std::vector<Symbol> seq) {
  DS_CHECK(!finished_ && rule < rules_.size(), "grammar: bad rule id");
  num_symbols_ += seq.size() + 1;
  if (num_symbols_ > kMaxGrammarSymbols)
    throw GrammarTooLarge("the grammar would exceed " + std::to_string(kMaxGrammarSymbols) +
                          " symbols (lower the schema's length and item bounds)");
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
  starts_.assign(rules_.size(), {});
  flat_.clear();
  for (size_t r = 0; r < rules_.size(); ++r) {
    DS_CHECK(!rules_[r].empty(), "grammar: rule '" + names_[r] + "' has no alternatives");
    for (const auto& alt : rules_[r]) {
      starts_[r].push_back(uint32_t(flat_.size()));
      for (const Symbol& s : alt) {
        DS_CHECK(s.kind != Symbol::Rule || s.rule < rules_.size(), "grammar: reference to a missing rule");
        DS_CHECK(s.kind != Symbol::End, "grammar: End inside an alternative");
        flat_.push_back(s);
      }
      flat_.push_back(Symbol{});  // End
    }
  }
  rules_.clear();
  finished_ = true;
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
        const Symbol& s = flat_[p];
        out += s.kind == Symbol::Rule ? names_[s.rule] + std::to_string(s.rule) : byte_set_text(s.bytes);
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
