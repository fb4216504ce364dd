// Encoding a huge text once must not leave the thread holding memory of that size afterwards
// (HTTP worker threads live for the server's life; 4 MB /tokenize requests on new connections
// once grew resident memory by ~100 MB each). glibc's allocator statistics count the bytes
// still allocated after the call.
#include <gtest/gtest.h>
#include <malloc.h>

#include <string>

#include "test_util.h"

namespace ds {
namespace {

size_t allocated() { return mallinfo2().uordblks; }

TEST(TokenizerScratch, AHugeTextLeavesNoLargeScratchBehind) {
  const Tokenizer& tok = test::trained_tokenizer();
  tok.encode("warm up the caches once");
  std::string text;
  while (text.size() < (4u << 20)) text += "def f(x):\n    return x * 2  # words and symbols !? ";
  std::string run(1 << 20, 'a');  // one piece the pre-tokenizer cannot split
  const size_t before = allocated();
  { auto ids = tok.encode(text); EXPECT_GT(ids.size(), 100000u); }
  { auto ids = tok.encode(run); EXPECT_GT(ids.size(), 0u); }
  const size_t after = allocated();
  // The piece cache may keep a bounded amount; the scratch of a 4 MB text is tens of MB.
  EXPECT_LT(after, before + (8u << 20)) << "retained " << (after - before) / 1024 << " KiB";
}

}  // namespace
}  // namespace ds
