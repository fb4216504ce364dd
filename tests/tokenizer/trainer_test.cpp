#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/pretokenizer.h"

namespace ds {
namespace {

using nlohmann::json;
using Merge = std::pair<int32_t, int32_t>;

// The merges of a trained file as (left id, right id), read back through its own vocab.
std::vector<Merge> merges_of(const json& j) {
  std::vector<Merge> out;
  const auto& vocab = j["model"]["vocab"];
  for (const auto& m : j["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    const auto sp = s.find(' ');
    out.emplace_back(vocab[s.substr(0, sp)].get<int32_t>(), vocab[s.substr(sp + 1)].get<int32_t>());
  }
  return out;
}

// Textbook BPE training: recount every pair after every merge. Slow and obviously right; the
// incremental trainer must learn exactly the same merges, ties included.
std::vector<Merge> reference_merges(const std::vector<std::string>& texts, int n_merges) {
  RegexSplitter split(kGpt4SplitPattern, false, SplitBehavior::kIsolated, false);
  std::map<std::string, int64_t> counts;
  for (const auto& t : texts) {
    std::vector<std::string_view> pieces;
    split.split(t, pieces);
    for (auto p : pieces) ++counts[std::string(p)];
  }
  std::vector<std::pair<std::vector<int32_t>, int64_t>> words;
  for (const auto& [w, c] : counts) {
    std::vector<int32_t> syms;
    for (char ch : w) syms.push_back(static_cast<unsigned char>(ch));
    words.emplace_back(std::move(syms), c);
  }
  std::vector<Merge> merges;
  for (int m = 0; m < n_merges; ++m) {
    std::map<Merge, int64_t> pairs;
    for (const auto& [syms, c] : words) {
      for (std::size_t i = 0; i + 1 < syms.size(); ++i) pairs[{syms[i], syms[i + 1]}] += c;
    }
    if (pairs.empty()) break;
    // Highest count; among equals the smallest pair (map order visits it first).
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it) {
      if (it->second > best->second) best = it;
    }
    const Merge pick = best->first;
    const int32_t id = 256 + m;
    merges.push_back(pick);
    for (auto& [syms, c] : words) {
      std::vector<int32_t> next;
      for (std::size_t i = 0; i < syms.size(); ++i) {
        if (i + 1 < syms.size() && syms[i] == pick.first && syms[i + 1] == pick.second) {
          next.push_back(id);
          ++i;
        } else {
          next.push_back(syms[i]);
        }
      }
      syms = std::move(next);
    }
  }
  return merges;
}

TEST(BpeTrainer, LearnsTheSameMergesAsTextbookBpe) {
  std::mt19937 rng(99);
  // Small alphabets make many equal counts, so tie-breaking is exercised too.
  const std::vector<std::string> alphabets = {"ab ", "aab b\n", "abc  \n\tx1", "é世a "};
  for (int round = 0; round < 12; ++round) {
    const std::string& alpha = alphabets[round % alphabets.size()];
    std::vector<std::string> chars;
    for (std::size_t p = 0; p < alpha.size();) {
      std::size_t len = 1;
      const auto b = static_cast<unsigned char>(alpha[p]);
      if (b >= 0xF0) len = 4; else if (b >= 0xE0) len = 3; else if (b >= 0xC0) len = 2;
      chars.push_back(alpha.substr(p, len));
      p += len;
    }
    std::vector<std::string> texts;
    for (int d = 0; d < 20; ++d) {
      std::string t;
      const int n = std::uniform_int_distribution<int>(5, 120)(rng);
      for (int k = 0; k < n; ++k) t += chars[std::uniform_int_distribution<std::size_t>(0, chars.size() - 1)(rng)];
      texts.push_back(t);
    }
    const int vocab = 256 + 60;
    const json j = json::parse(train_bpe_tokenizer_json(texts, vocab, {}));
    const auto got = merges_of(j);
    const auto want = reference_merges(texts, vocab - 256);
    ASSERT_EQ(got, want) << "round " << round;
  }
}

TEST(BpeTrainer, OutputFollowsTheHuggingFaceSchemaAndIdLayout) {
  const json j = json::parse(test::trained_json());
  EXPECT_EQ(j["version"], "1.0");
  for (const char* key : {"truncation", "padding", "normalizer", "post_processor"}) {
    ASSERT_TRUE(j.contains(key)) << key;
    EXPECT_TRUE(j[key].is_null()) << key;
  }
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
  EXPECT_EQ(j["pre_tokenizer"]["type"], "Sequence");
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][0]["type"], "Split");
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"], std::string(kGpt4SplitPattern));
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][1]["type"], "ByteLevel");

  // Bytes 0..255 in byte order, then merges, then the specials at the very end.
  const auto& vocab = j["model"]["vocab"];
  EXPECT_EQ(vocab.size(), 997u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(vocab[byte_level::byte_strings()[b]], b);
  EXPECT_EQ(j["model"]["merges"].size(), 997u - 256u);
  const auto& added = j["added_tokens"];
  ASSERT_EQ(added.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(added[k]["id"], 997 + k);
    EXPECT_EQ(added[k]["content"], test::chat_specials()[k]);
    EXPECT_EQ(added[k]["special"], true);
    EXPECT_EQ(added[k]["normalized"], false);
  }
  // Merge k makes token 256 + k, spelled as its two halves joined.
  const auto merges = merges_of(j);
  std::vector<std::string> spelling(997);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) spelling[it.value().get<int>()] = it.key();
  for (std::size_t k = 0; k < merges.size(); ++k) {
    EXPECT_EQ(spelling[256 + k], spelling[merges[k].first] + spelling[merges[k].second]);
  }
}

TEST(BpeTrainer, OutputLoadsAndRoundTrips) {
  const Tokenizer& tok = test::trained_tokenizer();
  EXPECT_EQ(tok.vocab_size(), 1000);
  for (const auto& doc : test::synthetic_corpus(30, 1234)) {
    const auto ids = tok.encode(doc);
    EXPECT_EQ(tok.decode(ids), doc);
    // Trained on this kind of text, the tokenizer compresses it well below a token per byte.
    EXPECT_LT(ids.size() * 2, doc.size());
  }
}

TEST(BpeTrainer, DeterministicWhateverTheInputOrder) {
  auto texts = test::synthetic_corpus(60, 3);
  const std::string a = train_bpe_tokenizer_json(texts, 600, {"<|endoftext|>"});
  std::reverse(texts.begin(), texts.end());
  const std::string b = train_bpe_tokenizer_json(texts, 600, {"<|endoftext|>"});
  EXPECT_EQ(a, b);
}

TEST(BpeTrainer, SpecialTokensInTheCorpusAreNotLearned) {
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back("<|endoftext|>abc " + std::to_string(i) + "<|im_end|><|endoftext|>");
  const json j = json::parse(train_bpe_tokenizer_json(texts, 400, test::chat_specials()));
  for (auto it = j["model"]["vocab"].begin(); it != j["model"]["vocab"].end(); ++it) {
    EXPECT_EQ(it.key().find("endof"), std::string::npos) << it.key();
    EXPECT_EQ(it.key().find("im_"), std::string::npos) << it.key();
  }
}

TEST(BpeTrainer, SmallCorpusGivesSmallerVocabWithSpecialsRightAfterMerges) {
  const json j = json::parse(train_bpe_tokenizer_json({"abab"}, 1000, {"<s>"}));
  // "abab" has pairs ab, ba: merges ab, then (ab,ab); then nothing is left.
  EXPECT_EQ(j["model"]["merges"].size(), 2u);
  EXPECT_EQ(j["added_tokens"][0]["id"], 258);
  EXPECT_EQ(Tokenizer::from_json_text(j.dump(), "small").vocab_size(), 259);
}

TEST(BpeTrainer, MinPairCountStopsEarly) {
  BpeTrainerOptions opt;
  opt.vocab_size = 1000;
  opt.min_pair_count = 2;
  BpeTrainer t(opt);
  t.add_text("xy xy qz");
  (void)t.train();
  EXPECT_EQ(t.stats().merges, 1);  // "xy" (twice); " x" etc. appear once
  EXPECT_EQ(t.stats().vocab_size, 257);
}

TEST(BpeTrainer, RefusesImpossibleOptions) {
  EXPECT_THROW(train_bpe_tokenizer_json({"a"}, 257, {"<a>", "<b>"}), Error);
  EXPECT_THROW(train_bpe_tokenizer_json({"a"}, 300, {"<a>", "<a>"}), Error);
  EXPECT_THROW(train_bpe_tokenizer_json({"a"}, 300, {""}), Error);
  EXPECT_THROW(train_bpe_tokenizer_json({"a"}, 300, {"\xFF"}), Error);
  EXPECT_THROW(train_bpe_tokenizer_json({"a"}, 300, {"a"}), Error);
  BpeTrainerOptions opt;
  opt.split_pattern = "(";
  EXPECT_THROW(BpeTrainer{opt}, Error);
}

TEST(BpeTrainer, StatsCountWhatWasFed) {
  BpeTrainer t(BpeTrainerOptions{});
  t.add_text("hello world");
  t.add_text("hello");
  (void)t.train();
  EXPECT_EQ(t.stats().bytes, 16);
  EXPECT_EQ(t.stats().pieces, 3);
  EXPECT_EQ(t.stats().unique_pieces, 2);
  EXPECT_THROW(t.add_text("more"), Error);
}

}  // namespace
}  // namespace ds
