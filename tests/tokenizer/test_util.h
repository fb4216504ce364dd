// Shared fixtures for the tokenizer tests: a hand-written tokenizer.json builder, a tokenizer
// trained once per process, and seeded random text.
#pragma once
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/bpe_trainer.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace ds::test {

// Byte b gets id byte_id(b): deliberately not b, so nothing may assume ids equal bytes.
inline int32_t byte_id(unsigned char b) { return static_cast<int32_t>((b * 7 + 3) % 256); }

// A complete byte-level tokenizer.json: the 256 byte tokens, then `extra` tokens (mapped
// spelling) at ids 256.., merges as given, added tokens at the ids given.
struct TinySpec {
  std::vector<std::string> extra;                  // mapped spellings, ids 256, 257, ...
  std::vector<std::pair<std::string, std::string>> merges;
  bool merges_as_pairs = false;
  std::vector<std::pair<std::string, bool>> added;  // content, special; ids after extra
  nlohmann::json pre_tokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  bool ignore_merges = false;
};

inline nlohmann::json tiny_json(const TinySpec& spec) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level::byte_strings()[b]] = byte_id(static_cast<unsigned char>(b));
  int32_t next = 256;
  for (const auto& t : spec.extra) vocab[t] = next++;
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [l, r] : spec.merges) {
    if (spec.merges_as_pairs) {
      merges.push_back({l, r});
    } else {
      merges.push_back(l + " " + r);
    }
  }
  nlohmann::json added = nlohmann::json::array();
  for (const auto& [content, special] : spec.added) {
    added.push_back({{"id", next++}, {"content", content}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", special}});
  }
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", spec.pre_tokenizer},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"ignore_merges", spec.ignore_merges},
            {"vocab", vocab},
            {"merges", merges}}}};
}

inline Tokenizer tiny_tokenizer(const TinySpec& spec) { return Tokenizer::from_json_text(tiny_json(spec).dump(), "tiny"); }

// Code points from scripts and classes that exercise the regex and multi-byte paths.
inline char32_t random_codepoint(std::mt19937& rng) {
  static const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {0x20, 0x7E},       {0x20, 0x7E},     {0x20, 0x7E},  // ASCII, weighted up
      {'\t', '\r'},       {0xA0, 0x17F},                   // whitespace controls, Latin-1 + ext
      {0x300, 0x36F},                                      // combining marks
      {0x391, 0x3C9},     {0x410, 0x44F},                  // Greek, Cyrillic
      {0x4E00, 0x4FFF},   {0x3040, 0x30FF},                // CJK, kana
      {0x0660, 0x0669},   {0x2000, 0x206F},                // Arabic digits, general punctuation
      {0x1F300, 0x1F64F}, {0xE000, 0xE0FF},                // emoji, private use
      {0x10000, 0x1000F}, {0x10FFF0, 0x10FFFF}};           // edges of the planes
  const auto& r = ranges[std::uniform_int_distribution<std::size_t>(0, ranges.size() - 1)(rng)];
  return std::uniform_int_distribution<char32_t>(r.first, r.second)(rng);
}

inline std::string random_utf8(std::mt19937& rng, int max_chars) {
  std::string s;
  const int n = std::uniform_int_distribution<int>(0, max_chars)(rng);
  for (int i = 0; i < n; ++i) utf8::append(s, random_codepoint(rng));
  return s;
}

inline std::string random_bytes(std::mt19937& rng, int max_len) {
  std::string s;
  const int n = std::uniform_int_distribution<int>(0, max_len)(rng);
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng)));
  return s;
}

// Text that looks like code and prose, with some non-ASCII, for training test tokenizers.
inline std::vector<std::string> synthetic_corpus(int docs, uint32_t seed) {
  std::mt19937 rng(seed);
  static const std::vector<std::string> words = {
      "def", "return", "self", "import", "class", "for", "in", "if", "else", "value", "count", "tokenizer",
      "merge", "pair", "the", "and", "of", "data", "None", "True", "print", "héllo", "naïve", "世界", "数据",
      "Привет", "γεια", "🙂", "x", "y", "i", "0", "1", "42", "1000", "3.14"};
  static const std::vector<std::string> seps = {" ", " ", " ", "(", ")", ":", ", ", ".", "\n", "\n    ",
                                                "\n\n", " = ", " + ", "[", "]", "  # ", "'", "\""};
  std::vector<std::string> out;
  for (int d = 0; d < docs; ++d) {
    std::string doc;
    const int n = std::uniform_int_distribution<int>(20, 200)(rng);
    for (int i = 0; i < n; ++i) {
      if (i % 4 == 3) {
        // Made-up identifiers keep the number of distinct pieces up, so a 1000-id training
        // run never runs out of pairs.
        const int len = std::uniform_int_distribution<int>(2, 9)(rng);
        for (int k = 0; k < len; ++k) doc.push_back(static_cast<char>('a' + rng() % 26));
        doc += '_';
      }
      doc += words[std::uniform_int_distribution<std::size_t>(0, words.size() - 1)(rng)];
      doc += seps[std::uniform_int_distribution<std::size_t>(0, seps.size() - 1)(rng)];
    }
    out.push_back(std::move(doc));
  }
  return out;
}

inline const std::vector<std::string>& chat_specials() {
  static const std::vector<std::string> s = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  return s;
}

// Trained once: 1000 ids on the synthetic corpus, the three chat specials at 997..999.
inline const std::string& trained_json() {
  static const std::string json = train_bpe_tokenizer_json(synthetic_corpus(400, 7), 1000, chat_specials());
  return json;
}

inline const Tokenizer& trained_tokenizer() {
  static const Tokenizer tok = Tokenizer::from_json_text(trained_json(), "trained");
  return tok;
}

}  // namespace ds::test
