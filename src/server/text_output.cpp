#include "server/text_output.h"

#include <algorithm>

#include "core/error.h"

namespace ds::server {

TextOutput::TextOutput(const Tokenizer& tok, std::vector<std::string> stop)
    : vocab_(tok.vocab_size()), decoder_(tok, /*skip_special=*/true), stop_(std::move(stop)) {}

bool TextOutput::find_stop() {
  // No match can start before sent_: take() never releases text that could begin one.
  size_t best = std::string::npos;
  for (const auto& s : stop_) best = std::min(best, text_.find(s, sent_));
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
