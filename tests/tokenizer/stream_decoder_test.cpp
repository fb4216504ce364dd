#include <gtest/gtest.h>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/stream_decoder.h"

namespace ds {
namespace {

using test::byte_id;

// With no merges every byte is its own token, so a character's bytes arrive one by one.
Tokenizer bytes_only() { return test::tiny_tokenizer({}); }

TEST(StreamDecoder, HoldsBackSplitCharacters) {
  const Tokenizer tok = bytes_only();
  StreamDecoder dec(tok);
  const std::string world = "\xE4\xB8\x96";  // 世
  EXPECT_EQ(dec.push(byte_id('a')), "a");
  EXPECT_EQ(dec.push(byte_id(0xE4)), "");
  EXPECT_EQ(dec.pending_bytes(), 1u);
  EXPECT_EQ(dec.push(byte_id(0xB8)), "");
  EXPECT_EQ(dec.push(byte_id(0x96)), world);
  EXPECT_EQ(dec.pending_bytes(), 0u);
  // A four-byte emoji followed by ASCII in the token that completes it.
  for (unsigned char b : std::string("\xF0\x9F\x99")) EXPECT_EQ(dec.push(byte_id(b)), "");
  EXPECT_EQ(dec.push(byte_id(0x82)), "\xF0\x9F\x99\x82");
  EXPECT_EQ(dec.finish(), "");
}

TEST(StreamDecoder, TokensThatSpanCharacterBoundaries) {
  // One token ends inside 世 and the next token starts with its last byte.
  test::TinySpec spec;
  const auto& m = byte_level::byte_strings();
  spec.extra = {m['a'] + m[0xE4], m['a'] + m[0xE4] + m[0xB8], m[0x96] + m['b']};
  spec.merges = {{m['a'], m[0xE4]}, {m['a'] + m[0xE4], m[0xB8]}, {m[0x96], m['b']}};
  const Tokenizer tok = test::tiny_tokenizer(spec);
  // "a世b" is one piece for the GPT-2 regex (世 is a letter), so the merges see it whole.
  const auto ids = tok.encode("a\xE4\xB8\x96" "b");
  ASSERT_EQ(ids, (std::vector<int32_t>{257, 258}));
  StreamDecoder dec(tok);
  EXPECT_EQ(dec.push(257), "a");
  EXPECT_EQ(dec.push(258), "\xE4\xB8\x96" "b");
}

TEST(StreamDecoder, ConcatenationEqualsDecodeAndEveryChunkIsValid) {
  const Tokenizer& tok = test::trained_tokenizer();
  std::mt19937 rng(17);
  for (int i = 0; i < 300; ++i) {
    const std::string s = test::random_utf8(rng, 60) + (i % 5 == 0 ? "<|im_end|>" : "");
    StreamDecoder dec(tok);
    std::string joined;
    for (int32_t id : tok.encode(s)) {
      const std::string chunk = dec.push(id);
      ASSERT_TRUE(utf8::is_valid(chunk));
      joined += chunk;
    }
    joined += dec.finish();
    ASSERT_EQ(joined, s) << "case " << i;
  }
}

TEST(StreamDecoder, InvalidBytesAreReplacedOrKept) {
  const Tokenizer tok = bytes_only();
  StreamDecoder replace(tok);
  EXPECT_EQ(replace.push(byte_id(0xFF)), "\xEF\xBF\xBD");
  EXPECT_EQ(replace.push(byte_id(0xE4)), "");
  EXPECT_EQ(replace.push(byte_id('x')), "\xEF\xBF\xBDx");  // the E4 can no longer complete
  EXPECT_EQ(replace.push(byte_id(0xE4)), "");
  EXPECT_EQ(replace.finish(), "\xEF\xBF\xBD");  // the stream ended mid-character

  StreamDecoder keep(tok, false, StreamDecoder::InvalidBytes::kKeep);
  EXPECT_EQ(keep.push(byte_id(0xFF)), "\xFF");
  EXPECT_EQ(keep.push(byte_id(0xE4)), "");
  EXPECT_EQ(keep.finish(), "\xE4");
}

TEST(StreamDecoder, SkipsSpecialsOnRequestAndRejectsBadIds) {
  const Tokenizer& tok = test::trained_tokenizer();
  const int32_t end = *tok.token_id("<|im_end|>");
  StreamDecoder keep(tok);
  EXPECT_EQ(keep.push(end), "<|im_end|>");
  StreamDecoder skip(tok, /*skip_special=*/true);
  EXPECT_EQ(skip.push(end), "");
  EXPECT_THROW(skip.push(5000), Error);
}

}  // namespace
}  // namespace ds
