#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"

namespace ds {
namespace {

TEST(BpeTrainer, OutputLoadsAndRoundTrips) {
  std::vector<std::string> texts;
  for (int i = 0; i < 300; ++i) {
    texts.push_back("def func_" + std::to_string(i) + "(arg_" + std::to_string(i % 7) + "):\n    return arg * " +
                    std::to_string(i * 37) + "  # note " + std::to_string(i % 13) + "\n<|endoftext|>");
  }
  const std::string json = train_bpe_tokenizer_json(texts, 300, {"<|endoftext|>", "<|im_start|>", "<|im_end|>"});
  const Tokenizer tok = Tokenizer::from_json_text(json, "trained");
  EXPECT_EQ(tok.vocab_size(), 300);
  const std::string s = "def baz(z):\n    return z - 3\n<|im_end|>";
  const auto ids = tok.encode(s);
  EXPECT_EQ(tok.decode(ids), s);
  EXPECT_EQ(ids.back(), 299);
  EXPECT_TRUE(tok.is_special(297));
}

}  // namespace
}  // namespace ds
