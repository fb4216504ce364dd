// Added tokens (tokenizer.json "added_tokens"): strings matched literally in the input before
// pre-tokenization, so "<|im_start|>" becomes one id instead of BPE pieces.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ds {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool single_word = false;  // match only where not inside a word
  bool lstrip = false;       // swallow whitespace to the left
  bool rstrip = false;       // swallow whitespace to the right
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  // One run of plain text (id < 0) or one matched token.
  struct Segment {
    std::string_view text;
    int32_t id;
  };

  // Cuts text into segments, taking at each position the longest token that starts there
  // (leftmost-longest, as Hugging Face's matcher does). Special tokens are matched only when
  // allow_special; the others (plain vocabulary additions) always are.
  void split(std::string_view text, bool allow_special, std::vector<Segment>& out) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Returns the end of the match (after any rstrip) or 0 when token k does not match at pos.
  std::size_t match_at(const AddedToken& t, std::string_view text, std::size_t pos) const;

  std::vector<AddedToken> tokens_;
  // Indices into tokens_ by first byte, longest first.
  std::array<std::vector<uint32_t>, 256> by_first_{};
};

}  // namespace ds
