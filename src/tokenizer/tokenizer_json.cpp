#include "tokenizer/tokenizer_json.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json_parse.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_data.h"

namespace ds {
namespace tokenizer_json {
namespace {

using Json = nlohmann::json;

// Every message reads "<file>: <field>: <problem>".
[[noreturn]] void fail(const std::string& where, const std::string& field, const std::string& what) {
  throw Error(where + ": " + field + ": " + what);
}

std::string type_name(const Json& j) {
  if (!j.is_string()) return j.dump();
  std::string out = "'";
  out += j.get<std::string>();
  out += "'";
  return out;
}

const Json* find(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

bool get_bool(const Json& obj, const char* key, bool dflt, const std::string& where, const std::string& field) {
  const Json* v = find(obj, key);
  if (v == nullptr || v->is_null()) return dflt;
  if (!v->is_boolean()) fail(where, field + "." + key, "expected true or false, got " + v->dump());
  return v->get<bool>();
}

std::string get_string(const Json& obj, const char* key, const std::string& where, const std::string& field) {
  const Json* v = find(obj, key);
  if (v == nullptr || !v->is_string()) fail(where, field + "." + key, "expected a string");
  return v->get<std::string>();
}

std::string type_of(const Json& obj, const std::string& where, const std::string& field) {
  if (!obj.is_object()) fail(where, field, "expected an object or null, got " + obj.dump());
  return get_string(obj, "type", where, field);
}

SplitBehavior parse_behavior(const Json& obj, const std::string& where, const std::string& field) {
  const std::string b = get_string(obj, "behavior", where, field);
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  fail(where, field + ".behavior",
       "unsupported '" + b + "' (supported: Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous)");
}

// Appends the stages of one pre-tokenizer; returns whether it was (or ended in) ByteLevel.
bool add_stages(const Json& j, const std::string& where, const std::string& field, PreTokenizer& pre) {
  const std::string type = type_of(j, where, field);
  if (type == "ByteLevel") {
    // Hugging Face's defaults when the keys are missing: add_prefix_space and use_regex true.
    if (get_bool(j, "add_prefix_space", true, where, field)) pre.add_prefix_space();
    if (get_bool(j, "use_regex", true, where, field)) {
      pre.add_split(RegexSplitter(kGpt2SplitPattern, false, SplitBehavior::kIsolated, false));
    }
    return true;
  }
  if (type == "Split") {
    const Json* pat = find(j, "pattern");
    if (pat == nullptr || !pat->is_object()) fail(where, field + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    bool literal;
    std::string text;
    if (const Json* r = find(*pat, "Regex"); r != nullptr && r->is_string()) {
      literal = false;
      text = r->get<std::string>();
    } else if (const Json* s = find(*pat, "String"); s != nullptr && s->is_string()) {
      literal = true;
      text = s->get<std::string>();
    } else {
      fail(where, field + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}, got " + pat->dump());
    }
    try {
      pre.add_split(RegexSplitter(text, literal, parse_behavior(j, where, field),
                                  get_bool(j, "invert", false, where, field)));
    } catch (const Error& e) {
      fail(where, field + ".pattern", e.what());
    }
    return false;
  }
  if (type == "Sequence") {
    const Json* list = find(j, "pretokenizers");
    if (list == nullptr || !list->is_array()) fail(where, field + ".pretokenizers", "expected an array");
    bool last_is_byte_level = false;
    for (std::size_t i = 0; i < list->size(); ++i) {
      const std::string sub = field + ".pretokenizers[" + std::to_string(i) + "]";
      if (last_is_byte_level) {
        // After ByteLevel the text is in mapped form; a later regex would see different
        // characters than this tokenizer gives it.
        fail(where, sub, "stages after ByteLevel are not supported (ByteLevel must come last)");
      }
      last_is_byte_level = add_stages((*list)[i], where, sub, pre);
    }
    return last_is_byte_level;
  }
  fail(where, field + ".type", "unsupported " + type_name(j.at("type")) + " (supported: ByteLevel, Split, Sequence)");
}

void check_normalizer(const Json& root, const std::string& where) {
  const Json* n = find(root, "normalizer");
  if (n == nullptr || n->is_null()) return;
  const std::string type = type_of(*n, where, "normalizer");
  if (type == "Sequence") {
    const Json* list = find(*n, "normalizers");
    if (list != nullptr && list->is_array() && list->empty()) return;
  }
  fail(where, "normalizer.type", "unsupported " + type_name(n->at("type")) + " (supported: null)");
}

void check_decoder(const Json& root, const std::string& where) {
  const Json* d = find(root, "decoder");
  // A byte-level model decodes through the byte map whether or not the file says so.
  if (d == nullptr || d->is_null()) return;
  const std::string type = type_of(*d, where, "decoder");
  if (type == "ByteLevel") return;
  fail(where, "decoder.type", "unsupported " + type_name(d->at("type")) + " (supported: ByteLevel, null)");
}

void check_post_processor(const Json& j, const std::string& where, const std::string& field) {
  if (j.is_null()) return;
  const std::string type = type_of(j, where, field);
  if (type == "ByteLevel" || type == "TemplateProcessing") return;
  if (type == "Sequence") {
    const Json* list = find(j, "processors");
    if (list == nullptr || !list->is_array()) fail(where, field + ".processors", "expected an array");
    for (std::size_t i = 0; i < list->size(); ++i) {
      check_post_processor((*list)[i], where, field + ".processors[" + std::to_string(i) + "]");
    }
    return;
  }
  fail(where, field + ".type",
       "unsupported " + type_name(j.at("type")) + " (supported: null, ByteLevel, TemplateProcessing, Sequence)");
}

// The largest id accepted; a bound so that a corrupt file cannot make us allocate gigabytes.
constexpr int64_t kMaxId = (int64_t{1} << 24) - 1;

}  // namespace

PreTokenizer parse_pre_tokenizer(const Json& j, const std::string& where) {
  if (j.is_null()) {
    fail(where, "pre_tokenizer", "null is not supported: byte-level BPE needs a ByteLevel pre-tokenizer");
  }
  PreTokenizer pre;
  if (!add_stages(j, where, "pre_tokenizer", pre)) {
    fail(where, "pre_tokenizer", "no ByteLevel stage (byte-level BPE needs one, as the last stage)");
  }
  return pre;
}

}  // namespace tokenizer_json

Tokenizer Tokenizer::from_json_text(const std::string& json_text, const std::string& where) {
  using namespace tokenizer_json;
  using Json = nlohmann::json;
  const Json root = parse_json<Json>(json_text, where);
  if (!root.is_object()) throw Error(where + ": expected a JSON object at the top level");

  auto data = std::make_shared<Data>();
  data->source = where;
  try {
    const Json* model = find(root, "model");
    if (model == nullptr || !model->is_object()) fail(where, "model", "missing or not an object");
    if (const Json* t = find(*model, "type"); t != nullptr && (!t->is_string() || t->get<std::string>() != "BPE")) {
      fail(where, "model.type", "unsupported " + type_name(*t) + " (supported: BPE)");
    }
    if (const Json* d = find(*model, "dropout"); d != nullptr && !d->is_null()) {
      if (!d->is_number() || d->get<double>() != 0.0) fail(where, "model.dropout", "BPE dropout is not supported");
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const Json* v = find(*model, key);
      if (v != nullptr && !v->is_null() && !(v->is_string() && v->get<std::string>().empty())) {
        fail(where, std::string("model.") + key, "not supported by byte-level BPE (got " + v->dump() + ")");
      }
    }
    const bool ignore_merges = get_bool(*model, "ignore_merges", false, where, "model");

    // Vocabulary: spelling -> id, and the reverse.
    const Json* vocab = find(*model, "vocab");
    if (vocab == nullptr || !vocab->is_object()) fail(where, "model.vocab", "missing or not an object");
    int64_t max_id = -1;
    std::unordered_map<std::string, int32_t> spelling_to_id;
    spelling_to_id.reserve(vocab->size());
    for (auto it = vocab->begin(); it != vocab->end(); ++it) {
      if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > kMaxId) {
        fail(where, "model.vocab[\"" + it.key() + "\"]",
             "id must be an integer in [0, " + std::to_string(kMaxId) + "], got " + it.value().dump());
      }
      const int64_t id = it.value().get<int64_t>();
      spelling_to_id.emplace(it.key(), static_cast<int32_t>(id));
      max_id = std::max(max_id, id);
    }

    // Added tokens.
    std::vector<AddedToken> added;
    if (const Json* list = find(root, "added_tokens"); list != nullptr && !list->is_null()) {
      if (!list->is_array()) fail(where, "added_tokens", "expected an array");
      for (std::size_t i = 0; i < list->size(); ++i) {
        const Json& t = (*list)[i];
        const std::string field = "added_tokens[" + std::to_string(i) + "]";
        if (!t.is_object()) fail(where, field, "expected an object");
        const Json* id = find(t, "id");
        if (id == nullptr || !id->is_number_integer() || id->get<int64_t>() < 0 || id->get<int64_t>() > kMaxId) {
          fail(where, field + ".id", "expected an integer in [0, " + std::to_string(kMaxId) + "]");
        }
        AddedToken a;
        a.id = static_cast<int32_t>(id->get<int64_t>());
        a.content = get_string(t, "content", where, field);
        if (a.content.empty()) fail(where, field + ".content", "empty");
        a.special = get_bool(t, "special", false, where, field);
        a.single_word = get_bool(t, "single_word", false, where, field);
        a.lstrip = get_bool(t, "lstrip", false, where, field);
        a.rstrip = get_bool(t, "rstrip", false, where, field);
        max_id = std::max<int64_t>(max_id, a.id);
        added.push_back(std::move(a));
      }
    }
    if (max_id < 0) fail(where, "model.vocab", "empty");
    // Tables below are sized by the highest id, not by what the file defines: one id of 2^24 - 1
    // among three tokens would cost ~700 MB of empty entries. Real vocabularies leave few ids
    // unused, so the id span is bounded by the tokens the file defines.
    const int64_t defined = int64_t(spelling_to_id.size() + added.size());
    const int64_t span_limit = 2 * defined + 65536;
    if (max_id + 1 > span_limit)
      fail(where, "model.vocab",
           "token ids reach " + std::to_string(max_id) + " but only " + std::to_string(defined) +
               " tokens are defined: the ids may span at most twice the defined tokens + 65536, [0, " +
               std::to_string(span_limit) + ")");

    const auto n = static_cast<std::size_t>(max_id + 1);
    data->id_bytes.assign(n, {});
    data->kind.assign(n, TokenKind::kUndefined);
    std::vector<const std::string*> spelling(n, nullptr);
    // Decoded bytes follow Hugging Face's ByteLevel decoder: map every character back to its
    // byte, or keep the token's own UTF-8 when one character is outside the alphabet.
    auto decoded = [](const std::string& s) { return byte_level::decode(s).value_or(s); };
    for (const auto& [tok, id] : spelling_to_id) {
      if (spelling[id] != nullptr) {
        fail(where, "model.vocab", "id " + std::to_string(id) + " is given to both '" + *spelling[id] + "' and '" + tok + "'");
      }
      spelling[id] = &tok;
      data->id_bytes[id] = decoded(tok);
      data->kind[id] = TokenKind::kVocab;
      data->by_spelling.emplace(tok, id);
    }
    for (const auto& a : added) {
      data->id_bytes[a.id] = decoded(a.content);
      data->kind[a.id] = a.special ? TokenKind::kSpecial : TokenKind::kAdded;
      data->by_spelling.insert_or_assign(a.content, a.id);
    }

    std::array<int32_t, 256> byte_ids{};
    const auto& byte_str = byte_level::byte_strings();
    for (int b = 0; b < 256; ++b) {
      auto it = spelling_to_id.find(byte_str[b]);
      if (it == spelling_to_id.end()) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", b);
        fail(where, "model.vocab",
             std::string("no token for byte ") + hex + " ('" + byte_str[b] + "'); byte-level BPE needs all 256");
      }
      byte_ids[b] = it->second;
    }

    const Json* merges = find(*model, "merges");
    if (merges == nullptr || !merges->is_array()) fail(where, "model.merges", "missing or not an array");
    std::vector<BpeMerge> rules;
    rules.reserve(merges->size());
    for (std::size_t i = 0; i < merges->size(); ++i) {
      const Json& m = (*merges)[i];
      const std::string field = "model.merges[" + std::to_string(i) + "]";
      std::string left, right;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const auto sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          fail(where, field, "expected \"left right\" with one space, got " + m.dump());
        }
        left = s.substr(0, sp);
        right = s.substr(sp + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        left = m[0].get<std::string>();
        right = m[1].get<std::string>();
      } else {
        fail(where, field, "expected \"left right\" or [\"left\", \"right\"], got " + m.dump());
      }
      auto l = spelling_to_id.find(left), r = spelling_to_id.find(right), res = spelling_to_id.find(left + right);
      if (l == spelling_to_id.end()) fail(where, field, "'" + left + "' is not in model.vocab");
      if (r == spelling_to_id.end()) fail(where, field, "'" + right + "' is not in model.vocab");
      if (res == spelling_to_id.end()) fail(where, field, "the merged token '" + left + right + "' is not in model.vocab");
      rules.push_back({l->second, r->second, res->second});
    }

    std::unordered_map<std::string, int32_t> whole_words;
    if (ignore_merges) {
      for (std::size_t id = 0; id < n; ++id) {
        if (data->kind[id] == TokenKind::kVocab) whole_words.emplace(data->id_bytes[id], static_cast<int32_t>(id));
      }
    }
    data->bpe = BpeModel(byte_ids, rules, std::move(whole_words));

    check_normalizer(root, where);
    const Json* pre = find(root, "pre_tokenizer");
    data->pre = parse_pre_tokenizer(pre == nullptr ? Json() : *pre, where);
    check_decoder(root, where);
    if (const Json* pp = find(root, "post_processor"); pp != nullptr) check_post_processor(*pp, where, "post_processor");
    data->added = AddedTokenMatcher(std::move(added));
  } catch (const Json::exception& e) {
    // Type errors inside nlohmann (a number where a string was expected, ...).
    throw Error(where + ": malformed tokenizer.json: " + e.what());
  }
  return Tokenizer(std::move(data));
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open tokenizer file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(path + ": read error");
  return from_json_text(ss.str(), path);
}

}  // namespace ds
