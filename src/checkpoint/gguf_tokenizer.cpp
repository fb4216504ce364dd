#include "checkpoint/gguf_tokenizer.h"

#include <map>
#include <nlohmann/json.hpp>

#include "checkpoint/gguf_file.h"
#include "checkpoint/gguf_writer.h"
#include "core/error.h"
#include "core/json_parse.h"
#include "tokenizer/split_patterns.h"

namespace ds {

using json = nlohmann::json;

namespace {

enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// GGUF's pre-tokenizer names this project reads and writes, and the regex each stands for.
std::optional<std::string_view> split_pattern_of(std::string_view pre) {
  if (pre == "gpt-2") return kGpt2SplitPattern;
  if (pre == "llama-bpe" || pre == "llama3") return kGpt4SplitPattern;
  return std::nullopt;
}
std::optional<std::string> pre_name_of(std::string_view pattern) {
  if (pattern == kGpt2SplitPattern) return "gpt-2";
  if (pattern == kGpt4SplitPattern) return "llama-bpe";
  return std::nullopt;
}

}  // namespace

std::optional<std::string> gguf_tokenizer_json(const GgufFile& g) {
  if (!g.find("tokenizer.ggml.model")) return std::nullopt;
  const std::string where = "GGUF " + g.path();
  const std::string model = g.get_string("tokenizer.ggml.model");
  DS_CHECK(model == "gpt2", where + ": tokenizer.ggml.model '" + model +
                                "' is not supported (only \"gpt2\", byte-level BPE; SentencePiece \"llama\" vocabularies are not)");
  DS_CHECK(g.find("tokenizer.ggml.pre"), where + ": tokenizer.ggml.pre is missing, so the split regex is unknown (known: gpt-2, llama-bpe, llama3)");
  const std::string pre = g.get_string("tokenizer.ggml.pre");
  const auto pattern = split_pattern_of(pre);
  DS_CHECK(pattern, where + ": tokenizer.ggml.pre '" + pre + "' is not a pre-tokenizer this server knows (gpt-2, llama-bpe, llama3)");
  const GgufValue* tokens = g.find("tokenizer.ggml.tokens");
  DS_CHECK(tokens && tokens->is_array() && tokens->elem == GgufValueType::String,
           where + ": tokenizer.ggml.tokens must be an array of strings");
  const GgufValue* types = g.find("tokenizer.ggml.token_type");
  if (types)
    DS_CHECK(types->is_array() && types->ints.size() == tokens->strings.size(),
             where + ": tokenizer.ggml.token_type must be an integer array as long as tokenizer.ggml.tokens (" +
                 std::to_string(tokens->strings.size()) + ")");
  const GgufValue* merges = g.find("tokenizer.ggml.merges");
  DS_CHECK(!merges || (merges->is_array() && (merges->elem == GgufValueType::String || merges->count == 0)),
           where + ": tokenizer.ggml.merges must be an array of strings");

  json vocab = json::object(), added = json::array();
  for (size_t id = 0; id < tokens->strings.size(); ++id) {
    const std::string& t = tokens->strings[id];
    const int64_t type = types ? types->ints[id] : int64_t(kNormal);
    if (type == kUnknown || type == kUnused) continue;
    DS_CHECK(type == kNormal || type == kControl || type == kUserDefined || type == kByte,
             where + ": tokenizer.ggml.token_type[" + std::to_string(id) + "] = " + std::to_string(type) + " is not a token type (1..6)");
    if (vocab.contains(t)) continue;  // a duplicate spelling: the first id keeps it, as llama.cpp does
    vocab[t] = id;
    if (type == kControl || type == kUserDefined)
      added.push_back({{"id", id}, {"content", t}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", type == kControl}});
  }
  json j = {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", added},
            {"normalizer", nullptr},
            {"pre_tokenizer",
             {{"type", "Sequence"},
              {"pretokenizers",
               json::array({{{"type", "Split"}, {"pattern", {{"Regex", std::string(*pattern)}}}, {"behavior", "Isolated"}, {"invert", false}},
                            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}})}}},
            {"post_processor", nullptr},
            {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}},
            {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                       {"vocab", vocab}, {"merges", merges ? json(merges->strings) : json::array()}}}};
  // Token and merge strings come from the file: one that is not UTF-8 is the file's error, not a crash.
  try {
    return j.dump();
  } catch (const json::exception&) {
    throw Error(where + ": tokenizer.ggml.tokens or tokenizer.ggml.merges holds a string that is not UTF-8");
  }
}

void write_gguf_tokenizer(const std::string& tokenizer_json, const std::string& where, int vocab_size, GgufWriter& w) {
  const json j = parse_json(tokenizer_json, where);
  DS_CHECK(j.is_object(), where + ": not a JSON object");
  DS_CHECK(j.contains("model") && j["model"].value("type", "") == "BPE", where + ": only BPE tokenizers can be written to GGUF");
  // The split regex: a Split stage's, or ByteLevel's own (GPT-2's) when it splits by itself.
  std::string pattern;
  const json& pre = j.value("pre_tokenizer", json());
  // GGUF names the regex only: a stage that does more than split out its matches (a prefix
  // space, another Split behaviour, an inverted one) has no GGUF form, and dropping it would
  // write a tokenizer that encodes differently.
  auto stage = [&](const json& s) {
    if (s.value("type", "") == "Split") {
      DS_CHECK(s.value("behavior", "Isolated") == "Isolated" && !s.value("invert", false),
               where + ": a Split pre-tokenizer other than Isolated and not inverted has no GGUF form");
      if (s.contains("pattern") && s["pattern"].contains("Regex")) pattern = s["pattern"]["Regex"];
    }
    if (s.value("type", "") == "ByteLevel") {
      // Missing, add_prefix_space is true (Hugging Face's default, which tokenizer/ reads too).
      DS_CHECK(!s.value("add_prefix_space", true), where + ": ByteLevel's add_prefix_space has no GGUF form for BPE");
      if (s.value("use_regex", true) && pattern.empty()) pattern = kGpt2SplitPattern;
    }
  };
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers"))
    for (const json& s : pre["pretokenizers"]) stage(s);
  else if (pre.is_object())
    stage(pre);
  const auto name = pre_name_of(pattern);
  DS_CHECK(name, where + ": its split regex has no GGUF pre-tokenizer name (known: GPT-2's as gpt-2, GPT-4 / Llama-3's as llama-bpe)");

  std::map<int64_t, std::pair<std::string, int32_t>> by_id;
  for (const auto& [tok, id] : j["model"]["vocab"].items()) by_id[id.get<int64_t>()] = {tok, kNormal};
  for (const json& a : j.value("added_tokens", json::array()))
    by_id[a["id"].get<int64_t>()] = {a["content"].get<std::string>(), a.value("special", false) ? kControl : kUserDefined};
  DS_CHECK(!by_id.empty() && by_id.rbegin()->first < vocab_size,
           where + ": token ids reach " + std::to_string(by_id.empty() ? 0 : by_id.rbegin()->first) + ", past the model's vocab_size " +
               std::to_string(vocab_size));
  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  std::vector<int32_t> types(size_t(vocab_size), kUnused);
  for (int id = 0; id < vocab_size; ++id) {
    auto it = by_id.find(id);
    if (it == by_id.end()) {
      tokens[size_t(id)] = "<|unused_" + std::to_string(id) + "|>";
      continue;
    }
    tokens[size_t(id)] = it->second.first;
    types[size_t(id)] = it->second.second;
  }
  std::vector<std::string> merges;
  for (const json& m : j["model"].value("merges", json::array()))
    merges.push_back(m.is_string() ? m.get<std::string>() : m.at(0).get<std::string>() + " " + m.at(1).get<std::string>());
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", *name);
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_strings("tokenizer.ggml.merges", merges);
}

}  // namespace ds
