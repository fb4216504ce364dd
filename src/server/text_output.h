// A request's generated text, built token by token for streaming. The tokenizer's StreamDecoder
// releases only whole UTF-8 characters; on top of it this holds back any tail that could be the
// beginning of a stop string, and cuts the text at the first stop string (which is never sent).
// Special tokens (end of turn, ...) add no text, except those listed as text_specials (the
// tool-call markers of Kimi's format, which the tool parser reads).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace ds::server {

class TextOutput {
 public:
  TextOutput(const Tokenizer& tok, std::vector<std::string> stop, std::vector<int32_t> text_specials = {});

  // Adds one generated token. Returns true when it completed a stop string: the text is cut
  // there and the request should end with finish_reason "stop".
  bool add(int32_t token);
  bool stopped() const { return stopped_; }
  // The stop string that ended the text (Anthropic's stop_sequence); empty when none did.
  const std::string& stop_string() const { return matched_; }
  // Text safe to send now; advances the send cursor.
  std::string take();
  // Everything not yet sent, including a held-back partial character (at the end).
  std::string flush();
  // Offset of the next token's text in the whole output (completions logprobs text_offset).
  size_t size() const { return text_.size(); }

 private:
  bool find_stop();

  int32_t vocab_;
  Tokenizer tok_;
  StreamDecoder decoder_;
  std::vector<int32_t> text_specials_;
  std::vector<std::string> stop_;
  std::string text_;
  size_t sent_ = 0;
  size_t scanned_ = 0;       // text_ searched for stop strings up to here
  size_t longest_stop_ = 1;  // bytes of the longest stop string
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace ds::server
