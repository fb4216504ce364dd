#include "grammar/json_schema.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <string_view>

#include "grammar/regex.h"
#include "grammar/utf8_sequences.h"

namespace ds::grammar {

using json = nlohmann::ordered_json;

namespace {

constexpr int kMaxLengthBound = 4096;  // minLength / maxLength / minItems / maxItems
// Schemas nested deeper than this inline (properties in properties, items in items...) are
// refused: the compiler recurses once per level. $ref does not count: definitions are compiled
// from a worklist, so a chain of thousands of them costs no stack.
constexpr int kMaxSchemaDepth = 64;
// The schema as JSON (const values included) may nest this deep.
constexpr int kMaxJsonDepth = 256;

bool json_depth_exceeds(const nlohmann::ordered_json& root, int limit) {
  std::vector<std::pair<const nlohmann::ordered_json*, int>> stack{{&root, 1}};
  while (!stack.empty()) {
    const auto [j, d] = stack.back();
    stack.pop_back();
    if (!j->is_structured()) continue;
    if (d > limit) return true;
    for (const auto& c : *j) stack.push_back({&c, d + 1});
  }
  return false;
}
constexpr int kMaxIntegerDigits = 16;  // after the first: bounded so a model cannot count forever
constexpr int kMaxFractionDigits = 16;
// Two: with at most 17 integer digits, |x| < 1e116, which every JSON reader holds as a finite
// double (a model given three could write 1e999, valid JSON that common parsers reject as
// overflow, so a constrained output would not parse back).
constexpr int kMaxExponentDigits = 2;

const std::set<std::string_view> kAnnotations = {"title", "description", "default", "examples", "$schema", "$id",
                                                 "$comment", "deprecated", "readOnly", "writeOnly"};
const std::set<std::string_view> kKeywords = {"type", "properties", "required", "additionalProperties", "items",
                                              "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf",
                                              "$ref", "$defs", "definitions", "minLength", "maxLength", "pattern",
                                              "format"};

std::string join(const std::string& where, const std::string& key) {
  std::string k;
  for (char c : key) {  // JSON pointer escaping
    if (c == '~') k += "~0";
    else if (c == '/') k += "~1";
    else k += c;
  }
  return where + "/" + k;
}

// Single-byte characters a string may hold unescaped, and the rule for one well-formed UTF-8
// character past ASCII.
struct StringAlphabet {
  ByteSet ascii;
  RuleId multibyte;
};

// Keys beside const / enum that leave a schema a plain set of literal values.
bool only_literal_keys(const json& s) {
  for (const auto& [k, v] : s.items())
    if (k != "const" && k != "enum" && k != "type" && !kAnnotations.count(k)) return false;
  return true;
}

class SchemaCompiler {
 public:
  SchemaCompiler(Grammar& g, const json& root) : g_(g), root_(root) {}

  // The schema's value, then every definition it refers to (and they refer to), in turn.
  RuleId compile(const json& s) {
    // Measured without recursion before anything walks it: later steps (const values' text,
    // comparing anyOf branches) recurse through the JSON as nlohmann does.
    if (json_depth_exceeds(s, kMaxJsonDepth))
      throw SchemaError("the schema's JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels", "");
    const RuleId r = value(s, "");
    while (!pending_.empty()) {
      const PendingRef p = pending_.back();
      pending_.pop_back();
      const RuleId body = value(*p.schema, p.where);
      g_.add_alternative(p.rule, {Grammar::ref(body)});
    }
    return r;
  }

  RuleId value(const json& s, const std::string& where) {
    if (depth_ >= kMaxSchemaDepth)
      throw SchemaError("the schema nests deeper than " + std::to_string(kMaxSchemaDepth) + " levels", where);
    ++depth_;
    const RuleId r = value_at_depth(s, where);
    --depth_;
    return r;
  }

  RuleId value_at_depth(const json& s, const std::string& where) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return any_value();
      throw SchemaError("the schema 'false' matches nothing", where);
    }
    if (!s.is_object()) throw SchemaError("a schema must be an object or a boolean, got " + std::string(s.type_name()), where);
    for (const auto& [k, v] : s.items()) {
      if (kKeywords.count(k) || kAnnotations.count(k)) continue;
      throw SchemaError("the schema keyword '" + k + "' is not supported", join(where, k));
    }
    if (auto it = s.find("$ref"); it != s.end()) {
      if (s.size() > 1) {
        for (const auto& [k, v] : s.items())
          if (k != "$ref" && !kAnnotations.count(k) && k != "$defs" && k != "definitions")
            throw SchemaError("'$ref' beside other constraints ('" + k + "') is not supported", join(where, k));
      }
      return ref(*it, join(where, "$ref"));
    }
    if (s.contains("const") || s.contains("enum")) {
      std::vector<std::string> values;
      add_literal_values(s, where, &values);
      return literals(std::move(values), where);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (auto it = s.find(key); it != s.end()) {
        // oneOf's exclusivity is not enforced: the output matches at least one branch.
        if (!it->is_array() || it->empty()) throw SchemaError(std::string("'") + key + "' must be a non-empty array", join(where, key));
        const std::string at = join(where, key);
        // Branches that are only values (const / enum) become one trie of literals: a choice
        // among thousands of them then costs the matcher one stack, not one per value.
        if (std::all_of(it->begin(), it->end(), [](const json& b) {
              return b.is_object() && (b.contains("const") || b.contains("enum")) && only_literal_keys(b);
            })) {
          std::vector<std::string> values;
          for (size_t i = 0; i < it->size(); ++i) add_literal_values((*it)[i], join(at, std::to_string(i)), &values);
          return literals(std::move(values), at);
        }
        // Identical branches are compiled once: each copy would be one more matcher stack for
        // the same text (and recursion through them doubles the stacks per level).
        std::vector<std::vector<Symbol>> alts;
        std::set<std::string> seen;
        for (size_t i = 0; i < it->size(); ++i) {
          if (!seen.insert((*it)[i].dump()).second) continue;
          alts.push_back({Grammar::ref(value((*it)[i], join(at, std::to_string(i))))});
        }
        return g_.choice(alts);
      }
    }
    if (auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->size() != 1)
        throw SchemaError("'allOf' is supported with exactly one schema", join(where, "allOf"));
      return value((*it)[0], join(join(where, "allOf"), "0"));
    }
    auto t = s.find("type");
    if (t == s.end()) {
      if (s.contains("properties") || s.contains("additionalProperties")) return typed(s, "object", where);
      if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) return typed(s, "array", where);
      if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength") || s.contains("format"))
        return typed(s, "string", where);
      return any_value();
    }
    if (t->is_string()) return typed(s, t->get<std::string>(), where);
    if (t->is_array() && !t->empty()) {
      std::vector<std::vector<Symbol>> alts;
      for (const auto& x : *t) {
        if (!x.is_string()) throw SchemaError("'type' entries must be strings", join(where, "type"));
        alts.push_back({Grammar::ref(typed(s, x.get<std::string>(), where))});
      }
      return g_.choice(alts);
    }
    throw SchemaError("'type' must be a string or a non-empty array of strings", join(where, "type"));
  }

  RuleId any_value() {
    if (any_value_) return *any_value_;
    const RuleId v = g_.new_rule("value");
    any_value_ = v;
    const RuleId obj = map_of(v);
    const RuleId arr = array_of(v, 0, -1);
    for (const std::vector<Symbol>& alt : std::vector<std::vector<Symbol>>{
             {Grammar::ref(obj)}, {Grammar::ref(arr)}, {Grammar::ref(string_rule(0, -1))}, {Grammar::ref(number())},
             {Grammar::ref(g_.literal("true"))}, {Grammar::ref(g_.literal("false"))}, {Grammar::ref(g_.literal("null"))}})
      g_.add_alternative(v, alt);
    return v;
  }

  RuleId any_object() { return map_of(any_value()); }

 private:
  RuleId ref(const json& r, const std::string& where) {
    if (!r.is_string()) throw SchemaError("'$ref' must be a string", where);
    const std::string name = r.get<std::string>();
    if (auto it = refs_.find(name); it != refs_.end()) return it->second;
    for (std::string_view prefix : {"#/$defs/", "#/definitions/"})
      if (std::string_view(name).substr(0, prefix.size()) == prefix) {
        const json* def = definition(std::string(prefix.substr(2, prefix.size() - 3)), name.substr(prefix.size()));
        if (!def) throw SchemaError("'$ref' " + name + " names no definition in the schema", where);
        // Named (by the reference, which grammar errors quote) before its body is compiled, so a
        // recursive reference finds it; the body waits in the worklist (compile()).
        const RuleId rule = g_.new_rule(name);
        refs_[name] = rule;
        pending_.push_back({rule, def, name.substr(1)});
        return rule;
      }
    throw SchemaError("'$ref' " + name + " is not supported (only #/$defs/... and #/definitions/...)", where);
  }

  // root_[section][key], through an index built once per section: an ordered_json object finds
  // a key by scanning, and a schema of thousands of definitions refers to each of them.
  const json* definition(const std::string& section, const std::string& key) {
    auto [it, fresh] = defs_.try_emplace(section);
    if (fresh && root_.is_object()) {
      auto s = root_.find(section);
      if (s != root_.end() && s->is_object())
        for (auto d = s->begin(); d != s->end(); ++d) it->second.emplace(d.key(), &d.value());
    }
    auto d = it->second.find(key);
    return d == it->second.end() ? nullptr : d->second;
  }

  // The JSON text of each value s allows: its const, else its enum's members.
  static void add_literal_values(const json& s, const std::string& where, std::vector<std::string>* out) {
    if (auto it = s.find("const"); it != s.end()) {
      out->push_back(it->dump());
      return;
    }
    const auto it = s.find("enum");
    if (!it->is_array() || it->empty()) throw SchemaError("'enum' must be a non-empty array", join(where, "enum"));
    for (const auto& v : *it) out->push_back(v.dump());
  }

  // Exactly one of `values`, as a trie: rules only where values part ways, so the matcher
  // follows one path whatever their number.
  RuleId literals(std::vector<std::string> values, const std::string& where) {
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    for (const std::string& v : values) literal_bytes_ += v.size();
    if (literal_bytes_ > g_.limits().max_literal_bytes)
      throw SchemaError("the schema's const and enum values pass " + std::to_string(g_.limits().max_literal_bytes) +
                            " bytes in all",
                        where);
    if (values.size() == 1) return g_.literal(values[0]);
    struct Task {
      size_t lo, hi, depth;
      RuleId rule;
    };
    const RuleId root = g_.new_rule("enum");
    std::vector<Task> tasks{{0, values.size(), 0, root}};
    while (!tasks.empty()) {
      const Task t = tasks.back();
      tasks.pop_back();
      size_t i = t.lo;
      // Sorted and distinct: a value that ends here is the range's first.
      if (values[i].size() == t.depth) g_.add_alternative(t.rule, {}), ++i;
      while (i < t.hi) {
        size_t j = i + 1;
        while (j < t.hi && values[j][t.depth] == values[i][t.depth]) ++j;
        const std::string& a = values[i];
        if (j == i + 1) {
          std::vector<Symbol> seq;
          Grammar::append_literal(&seq, std::string_view(a).substr(t.depth));
          g_.add_alternative(t.rule, std::move(seq));
        } else {
          const std::string& b = values[j - 1];  // the range's common prefix is the first's and last's
          size_t l = 1;
          while (t.depth + l < a.size() && t.depth + l < b.size() && a[t.depth + l] == b[t.depth + l]) ++l;
          const RuleId child = g_.new_rule("enum");
          std::vector<Symbol> seq;
          Grammar::append_literal(&seq, std::string_view(a).substr(t.depth, l));
          seq.push_back(Grammar::ref(child));
          g_.add_alternative(t.rule, std::move(seq));
          tasks.push_back({i, j, t.depth + l, child});
        }
        i = j;
      }
    }
    return root;
  }

  static int bound(const json& s, const char* key, int dflt, const std::string& where) {
    auto it = s.find(key);
    if (it == s.end()) return dflt;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > kMaxLengthBound)
      throw SchemaError(std::string("'") + key + "' must be an integer in [0, " + std::to_string(kMaxLengthBound) + "]",
                        join(where, key));
    return int(it->get<int64_t>());
  }

  RuleId typed(const json& s, const std::string& type, const std::string& where) {
    if (type == "object") return object(s, where);
    if (type == "array") {
      const int lo = bound(s, "minItems", 0, where), hi = bound(s, "maxItems", -1, where);
      if (hi >= 0 && hi < lo) throw SchemaError("'maxItems' is below 'minItems'", join(where, "maxItems"));
      const RuleId item = s.contains("items") ? value(s["items"], join(where, "items")) : any_value();
      return array_of(item, lo, hi);
    }
    if (type == "string") return string_schema(s, where);
    if (type == "integer") return integer();
    if (type == "number") return number();
    if (type == "boolean") {
      return g_.choice({seq_of("true"), seq_of("false")});
    }
    if (type == "null") return g_.literal("null");
    throw SchemaError("unknown type '" + type + "'", join(where, "type"));
  }

  static std::vector<Symbol> seq_of(std::string_view text) {
    std::vector<Symbol> seq;
    Grammar::append_literal(&seq, text);
    return seq;
  }

  RuleId sp() {  // the one optional space after ':' and ','
    if (!sp_) sp_ = g_.optional(Grammar::byte(' '));
    return *sp_;
  }

  RuleId object(const json& s, const std::string& where) {
    const json* props = nullptr;
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) throw SchemaError("'properties' must be an object", join(where, "properties"));
      props = &*it;
    }
    std::set<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) throw SchemaError("'required' must be an array of names", join(where, "required"));
      for (const auto& r : *it) {
        if (!r.is_string()) throw SchemaError("'required' must be an array of names", join(where, "required"));
        if (!props || !props->contains(r.get<std::string>()))
          throw SchemaError("'required' names '" + r.get<std::string>() + "', which 'properties' does not declare",
                            join(where, "required"));
        required.insert(r.get<std::string>());
      }
    }
    const json* extra = nullptr;
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      if (!it->is_boolean() && !it->is_object())
        throw SchemaError("'additionalProperties' must be a boolean or a schema", join(where, "additionalProperties"));
      extra = &*it;
    }
    if (!props || props->empty()) {
      // No declared properties: an empty object, or a map of the additional properties' schema.
      if (extra && extra->is_boolean() && !extra->get<bool>()) return g_.literal("{}");
      const RuleId v = extra && extra->is_object() ? value(*extra, join(where, "additionalProperties")) : any_value();
      return map_of(v);
    }
    // Declared properties in order; each optional one may be left out. after[i][first]: the
    // properties from i on, where `first` says no property has been written yet (no comma).
    struct Prop {
      std::string key;
      RuleId value;
      bool required;
    };
    std::vector<Prop> ps;
    for (const auto& [k, v] : props->items())
      ps.push_back({json(k).dump(), value(v, join(join(where, "properties"), k)), required.count(k) > 0});
    const size_t n = ps.size();
    std::vector<std::array<RuleId, 2>> after(n + 1);
    for (size_t i = 0; i <= n; ++i)
      for (int f = 0; f < 2; ++f) after[i][size_t(f)] = g_.new_rule("props");
    for (int f = 0; f < 2; ++f) g_.add_alternative(after[n][size_t(f)], {});
    for (size_t i = n; i-- > 0;) {
      for (int f = 0; f < 2; ++f) {
        std::vector<Symbol> take;
        if (!f) {
          take.push_back(Grammar::byte(','));
          take.push_back(Grammar::ref(sp()));
        }
        Grammar::append_literal(&take, ps[i].key);
        take.push_back(Grammar::byte(':'));
        take.push_back(Grammar::ref(sp()));
        take.push_back(Grammar::ref(ps[i].value));
        take.push_back(Grammar::ref(after[i + 1][0]));
        g_.add_alternative(after[i][size_t(f)], std::move(take));
        if (!ps[i].required) g_.add_alternative(after[i][size_t(f)], {Grammar::ref(after[i + 1][size_t(f)])});
      }
    }
    const RuleId r = g_.new_rule("object");
    g_.add_alternative(r, {Grammar::byte('{'), Grammar::ref(after[0][1]), Grammar::byte('}')});
    return r;
  }

  RuleId map_of(RuleId v) {
    // '{' (member (',' sp member)*)? '}' with member = string ':' sp value
    const RuleId member = g_.new_rule("member");
    g_.add_alternative(member, {Grammar::ref(string_rule(0, -1)), Grammar::byte(':'), Grammar::ref(sp()), Grammar::ref(v)});
    const RuleId more = g_.new_rule("member_more");
    g_.add_alternative(more, {Grammar::byte(','), Grammar::ref(sp()), Grammar::ref(member)});
    const RuleId body = g_.optional(Grammar::ref(g_.choice({{Grammar::ref(member), Grammar::ref(g_.star(Grammar::ref(more)))}})));
    const RuleId r = g_.new_rule("map");
    g_.add_alternative(r, {Grammar::byte('{'), Grammar::ref(body), Grammar::byte('}')});
    return r;
  }

  RuleId array_of(RuleId item, int lo, int hi) {
    // '[' item (',' sp item){lo-1, hi-1} ']', or '[]' when lo == 0.
    const RuleId more = g_.new_rule("item_more");
    g_.add_alternative(more, {Grammar::byte(','), Grammar::ref(sp()), Grammar::ref(item)});
    const RuleId r = g_.new_rule("array");
    if (lo == 0) g_.add_alternative(r, seq_of("[]"));
    if (hi != 0) {
      const int rest_lo = std::max(0, lo - 1), rest_hi = hi < 0 ? -1 : hi - 1;
      g_.add_alternative(r, {Grammar::byte('['), Grammar::ref(item), Grammar::ref(g_.repeat(Grammar::ref(more), rest_lo, rest_hi)),
                             Grammar::byte(']')});
    }
    return r;
  }

  const StringAlphabet& alphabet() {
    if (!alphabet_) {
      StringAlphabet a;
      a.ascii = ByteSet::range(0x20, 0x7f);
      a.ascii = a.ascii & ~ByteSet::any_of("\"\\");
      // Well-formed UTF-8 only (grammar/utf8_sequences.h).
      const RuleId mb = g_.new_rule("utf8");
      for (const Utf8Sequence& u : utf8_multibyte_sequences()) {
        std::vector<Symbol> seq;
        for (int k = 0; k < u.length; ++k) seq.push_back(Grammar::bytes(u.bytes[size_t(k)]));
        g_.add_alternative(mb, std::move(seq));
      }
      a.multibyte = mb;
      alphabet_ = a;
    }
    return *alphabet_;
  }

  RuleId string_char() {
    if (string_char_) return *string_char_;
    const StringAlphabet& a = alphabet();
    const RuleId hex4 = g_.repeat(Grammar::bytes(ByteSet::range('0', '9') | ByteSet::range('a', 'f') | ByteSet::range('A', 'F')), 4, 4);
    const RuleId esc = g_.new_rule("escape");
    g_.add_alternative(esc, {Grammar::bytes(ByteSet::any_of("\"\\/bfnrt"))});
    g_.add_alternative(esc, {Grammar::byte('u'), Grammar::ref(hex4)});
    const RuleId c = g_.new_rule("char");
    g_.add_alternative(c, {Grammar::bytes(a.ascii)});
    g_.add_alternative(c, {Grammar::ref(a.multibyte)});
    g_.add_alternative(c, {Grammar::byte('\\'), Grammar::ref(esc)});
    string_char_ = c;
    return c;
  }

  RuleId string_rule(int lo, int hi) {
    const auto key = std::make_pair(lo, hi);
    if (auto it = strings_.find(key); it != strings_.end()) return it->second;
    const RuleId r = g_.new_rule("string");
    g_.add_alternative(r, {Grammar::byte('"'), Grammar::ref(g_.repeat(Grammar::ref(string_char()), lo, hi)), Grammar::byte('"')});
    strings_[key] = r;
    return r;
  }

  RuleId string_schema(const json& s, const std::string& where) {
    const int lo = bound(s, "minLength", 0, where), hi = bound(s, "maxLength", -1, where);
    if (hi >= 0 && hi < lo) throw SchemaError("'maxLength' is below 'minLength'", join(where, "maxLength"));
    std::string pattern;
    std::string pattern_where;
    if (auto it = s.find("format"); it != s.end()) {
      if (!it->is_string()) throw SchemaError("'format' must be a string", join(where, "format"));
      const std::string f = it->get<std::string>();
      static const std::map<std::string, std::string> formats = {
          {"date", "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"},
          {"time", "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"},
          {"date-time", "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"},
          {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
      };
      auto fit = formats.find(f);
      if (fit == formats.end())
        throw SchemaError("the string format '" + f + "' is not supported (supported: date, time, date-time, uuid)",
                          join(where, "format"));
      pattern = fit->second;
      pattern_where = join(where, "format");
    }
    if (auto it = s.find("pattern"); it != s.end()) {
      if (!it->is_string()) throw SchemaError("'pattern' must be a string", join(where, "pattern"));
      if (!pattern.empty()) throw SchemaError("'pattern' beside 'format' is not supported", join(where, "pattern"));
      pattern = it->get<std::string>();
      pattern_where = join(where, "pattern");
    }
    if (pattern.empty()) return string_rule(lo, hi);
    if (s.contains("minLength") || s.contains("maxLength"))
      throw SchemaError("'minLength' / 'maxLength' beside a pattern or format is not supported", pattern_where);
    // Anchored at both ends. JSON schema's pattern is unanchored (it may match anywhere), but
    // generating text the pattern merely occurs in would let a model write anything around it;
    // schemas written for structured outputs anchor their patterns anyway.
    RuleId body;
    try {
      body = add_regex(g_, pattern, alphabet().ascii);
    } catch (const SchemaError&) {
      throw;
    } catch (const GrammarError&) {
      throw;  // a bound of the grammar's limits: the caller says which
    } catch (const Error& e) {
      throw SchemaError(e.what(), pattern_where);
    }
    const RuleId r = g_.new_rule("pattern_string");
    g_.add_alternative(r, {Grammar::byte('"'), Grammar::ref(body), Grammar::byte('"')});
    return r;
  }

  RuleId integer() {
    if (integer_) return *integer_;
    const RuleId digits = g_.repeat(Grammar::bytes(ByteSet::range('0', '9')), 0, kMaxIntegerDigits - 1);
    const RuleId mag = g_.new_rule("magnitude");
    g_.add_alternative(mag, seq_of("0"));
    g_.add_alternative(mag, {Grammar::bytes(ByteSet::range('1', '9')), Grammar::ref(digits)});
    const RuleId r = g_.new_rule("integer");
    g_.add_alternative(r, {Grammar::ref(g_.optional(Grammar::byte('-'))), Grammar::ref(mag)});
    integer_ = r;
    return r;
  }

  RuleId number() {
    if (number_) return *number_;
    const Symbol digit = Grammar::bytes(ByteSet::range('0', '9'));
    const RuleId frac = g_.new_rule("fraction");
    g_.add_alternative(frac, {Grammar::byte('.'), Grammar::ref(g_.repeat(digit, 1, kMaxFractionDigits))});
    const RuleId exp = g_.new_rule("exponent");
    g_.add_alternative(exp, {Grammar::bytes(ByteSet::any_of("eE")), Grammar::ref(g_.optional(Grammar::bytes(ByteSet::any_of("+-")))),
                             Grammar::ref(g_.repeat(digit, 1, kMaxExponentDigits))});
    const RuleId r = g_.new_rule("number");
    g_.add_alternative(r, {Grammar::ref(integer()), Grammar::ref(g_.optional(Grammar::ref(frac))),
                           Grammar::ref(g_.optional(Grammar::ref(exp)))});
    number_ = r;
    return r;
  }

  struct PendingRef {
    RuleId rule;
    const json* schema;
    std::string where;
  };

  Grammar& g_;
  const json& root_;
  int depth_ = 0;
  size_t literal_bytes_ = 0;
  std::vector<PendingRef> pending_;
  std::map<std::string, RuleId> refs_;
  std::map<std::string, std::unordered_map<std::string, const json*>> defs_;
  std::map<std::pair<int, int>, RuleId> strings_;
  std::optional<RuleId> any_value_, sp_, string_char_, integer_, number_;
  std::optional<StringAlphabet> alphabet_;
};

}  // namespace

RuleId add_json_schema(Grammar& g, const json& schema) { return SchemaCompiler(g, schema).compile(schema); }
RuleId add_any_json_value(Grammar& g) { return SchemaCompiler(g, json::object()).any_value(); }
RuleId add_any_json_object(Grammar& g) { return SchemaCompiler(g, json::object()).any_object(); }

Grammar json_schema_grammar(const json& schema, const GrammarLimits& limits) {
  Grammar g(limits);
  g.set_root(add_json_schema(g, schema));
  try {
    g.finish();
  } catch (const GrammarTooLarge&) {
    throw;
  } catch (const GrammarError& e) {
    // A definition's rule is named by its reference: point at the definition.
    const std::string& n = e.rule_name();
    throw SchemaError(e.what(), !n.empty() && n[0] == '#' ? n.substr(1) : std::string());
  }
  return g;
}

Grammar json_object_grammar(const GrammarLimits& limits) {
  Grammar g(limits);
  g.set_root(add_any_json_object(g));
  g.finish();
  return g;
}

}  // namespace ds::grammar
