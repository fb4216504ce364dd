// Text for --endpoint chat that the served model's tokenizer encodes to an exact token count.
// The words are single vocabulary tokens of the form " word" (a space and lowercase letters):
// byte-level BPE pre-tokenizers cut text before each such space, so a run of n of them encodes
// to exactly n tokens, and a prompt id sequence maps to text position by position, keeping
// shared prefixes byte-identical.
#pragma once
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ds::bench {

class ChatText {
 public:
  // Throws ds::Error when the vocabulary has too few such words (fewer than `min_words`) or the
  // tokenizer does not keep them apart.
  explicit ChatText(const Tokenizer& tokenizer, size_t min_words = 16);
  int32_t word_count() const { return static_cast<int32_t>(words_.size()); }
  // ids in [0, word_count()).
  std::string text(const std::vector<int32_t>& ids) const;

 private:
  std::vector<std::string> words_;
};

}  // namespace ds::bench
