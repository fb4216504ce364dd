// Round trips, special tokens and id checks on the tokenizer as a whole.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "test_util.h"
#include "../support/remove_at_exit.h"

namespace ds {
namespace {

using Ids = std::vector<int32_t>;

TEST(Tokenizer, RandomUtf8RoundTrips) {
  const Tokenizer& tok = test::trained_tokenizer();
  std::mt19937 rng(11);
  for (int i = 0; i < 500; ++i) {
    const std::string s = test::random_utf8(rng, 80);
    const auto ids = tok.encode(s);
    ASSERT_EQ(tok.decode(ids), s) << "case " << i;
    ASSERT_EQ(tok.decode(tok.encode(s, false)), s) << "case " << i;
  }
}

TEST(Tokenizer, RandomInvalidBytesRoundTrip) {
  const Tokenizer& tok = test::trained_tokenizer();
  std::mt19937 rng(12);
  for (int i = 0; i < 500; ++i) {
    std::string s = test::random_bytes(rng, 60);
    if (i % 3 == 0) s += test::random_utf8(rng, 10) + "\xC3" + test::random_bytes(rng, 5);  // mixed
    const auto ids = tok.encode(s);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size());
    ASSERT_EQ(tok.decode(ids), s) << "case " << i;
  }
}

TEST(Tokenizer, HandWrittenTokenizerRoundTripsToo) {
  test::TinySpec spec;
  spec.extra = {"he", "ll"};
  spec.merges = {{"h", "e"}, {"l", "l"}};
  const Tokenizer tok = test::tiny_tokenizer(spec);
  std::mt19937 rng(13);
  for (int i = 0; i < 300; ++i) {
    const std::string s = i % 2 ? test::random_utf8(rng, 40) : test::random_bytes(rng, 40);
    ASSERT_EQ(tok.decode(tok.encode(s)), s) << "case " << i;
  }
}

TEST(Tokenizer, SpecialTokensMatchLiterallyAndRoundTrip) {
  const Tokenizer& tok = test::trained_tokenizer();
  const int32_t start = *tok.token_id("<|im_start|>"), end = *tok.token_id("<|im_end|>");
  EXPECT_EQ(start, 998);
  EXPECT_EQ(end, 999);
  EXPECT_TRUE(tok.is_special(start));
  EXPECT_FALSE(tok.is_special(5));
  EXPECT_FALSE(tok.is_special(-1));
  EXPECT_FALSE(tok.is_special(100000));

  const std::string text = "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n";
  const auto ids = tok.encode(text);
  EXPECT_EQ(ids.front(), start);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), start), 2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), end), 1);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), "user\nhi there\nassistant\n");

  // Without allow_special the same text is ordinary bytes and still round-trips.
  const auto plain = tok.encode(text, false);
  for (int32_t id : plain) EXPECT_FALSE(tok.is_special(id));
  EXPECT_EQ(tok.decode(plain), text);

  // Glued to other text, inside words, repeated, and a near miss.
  for (std::string s : {"x<|im_end|>y", "<|im_end|><|im_end|>", "<|im_end|", "<|im_<|im_end|>", "ab<|endoftext|>"}) {
    EXPECT_EQ(tok.decode(tok.encode(s)), s) << s;
  }
  EXPECT_EQ(tok.encode("<|im_end|><|im_end|>"), (Ids{end, end}));
  EXPECT_EQ(tok.encode("<|im_<|im_end|>").back(), end);
}

TEST(Tokenizer, AddedTokensTakeTheLongestMatchAndHonourSpecialFlag) {
  test::TinySpec spec;
  spec.added = {{"<a>", true}, {"<a>b", true}, {"@@", false}};  // ids 256, 257, 258
  const Tokenizer tok = test::tiny_tokenizer(spec);
  EXPECT_EQ(tok.encode("<a>b"), (Ids{257}));
  EXPECT_EQ(tok.encode("<a>c").front(), 256);
  // A non-special added token is vocabulary, not control: matched even without allow_special.
  EXPECT_EQ(tok.encode("x@@", false).back(), 258);
  const auto plain = tok.encode("<a>b", false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 257), 0);
  EXPECT_TRUE(tok.is_special(257));
  EXPECT_FALSE(tok.is_special(258));
  EXPECT_EQ(tok.token_id("<a>b"), 257);
  EXPECT_EQ(tok.vocab_size(), 259);
}

TEST(Tokenizer, DecodeOfOutOfRangeIdErrorsWithIdAndRange) {
  const Tokenizer& tok = test::trained_tokenizer();
  for (int32_t bad : {1000, -1, 1 << 30}) {
    const Ids ids = {5, bad};
    try {
      (void)tok.decode(ids);
      FAIL() << "no error for " << bad;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("[0, 1000)"), std::string::npos) << msg;
    }
  }
  EXPECT_THROW((void)tok.token_text(1000), Error);
  EXPECT_THROW((void)tok.token_text(-3), Error);
}

TEST(Tokenizer, IdsThatTheFileSkipsAreInvalid) {
  test::TinySpec spec;
  spec.added = {{"<x>", true}};
  nlohmann::json j = test::tiny_json(spec);
  j["added_tokens"][0]["id"] = 300;  // 256..299 undefined
  const Tokenizer tok = Tokenizer::from_json_text(j.dump(), "gappy");
  EXPECT_EQ(tok.vocab_size(), 301);
  EXPECT_EQ(tok.decode(Ids{300}), "<x>");
  EXPECT_THROW((void)tok.decode(Ids{280}), Error);
}

TEST(Tokenizer, CopiesShareTablesAndThreadsAgree) {
  const Tokenizer tok = test::trained_tokenizer();  // a copy
  std::vector<std::string> texts;
  std::mt19937 rng(21);
  for (int i = 0; i < 200; ++i) texts.push_back(test::random_utf8(rng, 60));
  std::vector<Ids> expected;
  for (const auto& t : texts) expected.push_back(tok.encode(t));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (std::size_t i = t; i < texts.size(); i += 1 + t) {
          if (tok.encode(texts[i]) != expected[i]) ++mismatches;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(Tokenizer, LoadReadsAFileAndNamesAMissingOne) {
  const std::string path = ds::test::remove_at_exit(testing::TempDir() + "/tok_load_test_" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream f(path);
    f << test::trained_json();
  }
  EXPECT_EQ(Tokenizer::load(path).vocab_size(), 1000);
  try {
    (void)Tokenizer::load(path + ".missing");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ".missing"), std::string::npos);
  }
}

}  // namespace
}  // namespace ds
