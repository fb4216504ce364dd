// Known merges on a hand-written tokenizer.json give known ids.
#include <gtest/gtest.h>

#include "test_util.h"

namespace ds {
namespace {

using test::byte_id;
using test::TinySpec;
using Ids = std::vector<int32_t>;

// Spellings are in byte-level form: "Ġ" is a space.
TinySpec hello_spec() {
  TinySpec s;
  s.extra = {"he", "ll", "hell", "hello", "Ġw", "Ġwo", "or"};
  s.merges = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "w"}, {"o", "r"}, {"Ġw", "o"}};
  return s;
}

TEST(Bpe, KnownMergesGiveKnownIds) {
  const Tokenizer tok = test::tiny_tokenizer(hello_spec());
  // "hello": he (rank 0), ll (1), hell (2), hello (3). " world": Ġw (rank 4) first; then
  // (Ġw,o) at rank 6 and (o,r) at rank 5 compete for the "o", and "or" wins.
  EXPECT_EQ(tok.encode("hello world"), (Ids{259, 260, 262, byte_id('l'), byte_id('d')}));
  EXPECT_EQ(tok.encode("hell"), (Ids{258}));
  EXPECT_EQ(tok.encode("help"), (Ids{256, byte_id('l'), byte_id('p')}));
  EXPECT_EQ(tok.encode(""), Ids{});
  EXPECT_EQ(tok.vocab_size(), 263);
  EXPECT_EQ(tok.token_id("Ġw"), 260);
  EXPECT_EQ(tok.token_id("hello"), 259);
  EXPECT_FALSE(tok.token_id("nope").has_value());
  EXPECT_EQ(tok.token_text(260), " w");
  EXPECT_EQ(tok.decode(tok.encode("hello world")), "hello world");
}

TEST(Bpe, RankDecidesBetweenOverlappingMerges) {
  TinySpec s;
  s.extra = {"ab", "bc"};
  s.merges = {{"b", "c"}, {"a", "b"}};
  EXPECT_EQ(test::tiny_tokenizer(s).encode("abc"), (Ids{byte_id('a'), 257}));
  s.merges = {{"a", "b"}, {"b", "c"}};
  EXPECT_EQ(test::tiny_tokenizer(s).encode("abc"), (Ids{256, byte_id('c')}));
}

TEST(Bpe, EqualRanksMergeLeftmostFirst) {
  TinySpec s;
  s.extra = {"aa"};
  s.merges = {{"a", "a"}};
  EXPECT_EQ(test::tiny_tokenizer(s).encode("aaa"), (Ids{256, byte_id('a')}));
  EXPECT_EQ(test::tiny_tokenizer(s).encode("aaaa"), (Ids{256, 256}));
}

TEST(Bpe, MergesAsPairsEqualMergesAsStrings) {
  TinySpec strings = hello_spec(), pairs = hello_spec();
  pairs.merges_as_pairs = true;
  const Tokenizer a = test::tiny_tokenizer(strings), b = test::tiny_tokenizer(pairs);
  for (const char* text : {"hello world", "ohell worldly", "he ll o"}) EXPECT_EQ(a.encode(text), b.encode(text)) << text;
}

TEST(Bpe, IgnoreMergesTakesWholeVocabularyWords) {
  // "hello" is in the vocabulary but no merge path reaches it.
  TinySpec s;
  s.extra = {"he", "hello"};
  s.merges = {{"h", "e"}};
  EXPECT_EQ(test::tiny_tokenizer(s).encode("hello"), (Ids{256, byte_id('l'), byte_id('l'), byte_id('o')}));
  s.ignore_merges = true;
  EXPECT_EQ(test::tiny_tokenizer(s).encode("hello"), (Ids{257}));
}

TEST(Bpe, PrefixSpaceFromByteLevel) {
  TinySpec s = hello_spec();
  s.pre_tokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  const Tokenizer tok = test::tiny_tokenizer(s);
  EXPECT_EQ(tok.encode("world"), (Ids{260, 262, byte_id('l'), byte_id('d')}));
  EXPECT_EQ(tok.decode(tok.encode("world")), " world");
}

TEST(Bpe, LongPiecesEncodeAndRoundTrip) {
  TinySpec s;
  s.extra = {"aa", "aaaa", "aaaaaaaa"};
  s.merges = {{"a", "a"}, {"aa", "aa"}, {"aaaa", "aaaa"}};
  const Tokenizer tok = test::tiny_tokenizer(s);
  const std::string text(200'001, 'a');  // one piece for the regex
  const auto ids = tok.encode(text);
  EXPECT_EQ(ids.size(), 25'001u);
  EXPECT_EQ(ids.front(), 258);
  EXPECT_EQ(ids.back(), byte_id('a'));
  EXPECT_EQ(tok.decode(ids), text);
}

}  // namespace
}  // namespace ds
