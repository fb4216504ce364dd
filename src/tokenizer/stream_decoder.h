// Incremental detokenization for streaming responses. A token may end in the middle of a
// multi-byte character (byte-level BPE splits "世" = E4 B8 96 across tokens freely); sending
// those bytes as they come would put broken text into an SSE event.
#pragma once
#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace ds {

class StreamDecoder {
 public:
  // What to do with bytes that can never become a character (a stray continuation byte, 0xFF):
  // kReplace emits U+FFFD for them, so everything returned is valid UTF-8 (what JSON needs);
  // kKeep passes them through unchanged.
  enum class InvalidBytes { kReplace, kKeep };

  explicit StreamDecoder(Tokenizer tokenizer, bool skip_special = false,
                         InvalidBytes invalid = InvalidBytes::kReplace);

  // Adds one token; returns the text that is now complete (often empty while a character is
  // still being assembled). Throws ds::Error for an invalid id, like Tokenizer::decode.
  std::string push(int32_t id);

  // End of the stream: returns whatever was held back (as U+FFFD under kReplace) and resets.
  std::string finish();

  // Bytes held back waiting for the rest of a character.
  std::size_t pending_bytes() const { return pending_.size(); }

 private:
  std::string take(std::size_t n);

  Tokenizer tokenizer_;
  bool skip_special_;
  InvalidBytes invalid_;
  std::string pending_;
};

}  // namespace ds
