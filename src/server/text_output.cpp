#include "server/text_output.h"

#include <algorithm>

#include "core/error.h"

namespace ds::server {

TextOutput::TextOutput(const Tokenizer& tok, std::vector<std::string> stop, std::vector<int32_t> text_specials)
    : vocab_(tok.vocab_size()), tok_(tok), decoder_(tok, /*skip_special=*/true),
      text_specials_(std::move(text_specials)), stop_(std::move(stop)) {
  for (const auto& s : stop_) longest_stop_ = std::max(longest_stop_, s.size());
}

bool TextOutput::find_stop() {
  // No match can start before sent_: take() never releases text that could begin one. Nor can
  // one start before scanned_ - (longest - 1): everything up to scanned_ was searched already
  // and held no whole match. So each byte is searched a bounded number of times, and a long
  // non-streamed answer costs linear time, not a rescan of the whole text per token.
  size_t from = sent_;
  if (scanned_ >= longest_stop_) from = std::max(from, scanned_ - (longest_stop_ - 1));
  scanned_ = text_.size();
  size_t best = std::string::npos;
  for (const auto& s : stop_) {
    const size_t at = text_.find(s, from);
    if (at < best) {
      best = at;
      matched_ = s;
    }
  }
  if (best == std::string::npos) return false;
  text_.resize(best);
  stopped_ = true;
  return true;
}

bool TextOutput::add(int32_t token) {
  if (stopped_) return true;
  // Models often pad their vocabulary past the tokenizer's; such ids have no text.
  if (token < 0 || token >= vocab_) return false;
  try {
    if (std::find(text_specials_.begin(), text_specials_.end(), token) != text_specials_.end())
      text_ += decoder_.finish() + std::string(tok_.token_bytes(token));  // a marker ends any broken character
    else
      text_ += decoder_.push(token);
  } catch (const Error&) {
    return false;  // an id the tokenizer file leaves undefined: no text, never a failed request
  }
  return !stop_.empty() && find_stop();
}

std::string TextOutput::take() {
  size_t end = text_.size();
  if (!stopped_ && end > sent_) {
    // Hold back the longest tail that is a proper prefix of some stop string.
    size_t hold = 0;
    for (const auto& s : stop_) {
      const size_t max_k = std::min(s.size() - 1, end - sent_);
      for (size_t k = max_k; k > hold; --k)
        if (text_.compare(end - k, k, s, 0, k) == 0) {
          hold = k;
          break;
        }
    }
    end -= hold;
  }
  if (end <= sent_) return {};
  std::string out = text_.substr(sent_, end - sent_);
  sent_ = end;
  return out;
}

std::string TextOutput::flush() {
  if (!stopped_) {
    text_ += decoder_.finish();
    find_stop();
  }
  std::string out = sent_ < text_.size() ? text_.substr(sent_) : std::string();
  sent_ = text_.size();
  return out;
}

}  // namespace ds::server
