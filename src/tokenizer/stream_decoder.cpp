#include "tokenizer/stream_decoder.h"

#include "tokenizer/utf8.h"

namespace ds {

StreamDecoder::StreamDecoder(Tokenizer tokenizer, bool skip_special, InvalidBytes invalid)
    : tokenizer_(std::move(tokenizer)), skip_special_(skip_special), invalid_(invalid) {}

std::string StreamDecoder::take(std::size_t n) {
  std::string ready = pending_.substr(0, n);
  pending_.erase(0, n);
  return invalid_ == InvalidBytes::kReplace ? utf8::sanitize(ready) : ready;
}

std::string StreamDecoder::push(int32_t id) {
  const std::string_view bytes = tokenizer_.token_bytes(id);
  if (skip_special_ && tokenizer_.is_special(id)) return {};
  pending_.append(bytes);
  return take(pending_.size() - utf8::incomplete_tail(pending_));
}

std::string StreamDecoder::finish() { return take(pending_.size()); }

}  // namespace ds
