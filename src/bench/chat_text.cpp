#include "bench/chat_text.h"

#include "core/error.h"

namespace ds::bench {

namespace {

bool is_space_word(std::string_view s) {
  if (s.size() < 3 || s.size() > 13 || s[0] != ' ') return false;
  for (size_t i = 1; i < s.size(); ++i)
    if (s[i] < 'a' || s[i] > 'z') return false;
  return true;
}

}  // namespace

ChatText::ChatText(const Tokenizer& tok, size_t min_words) {
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.is_special(id)) continue;
    std::string_view b;
    try {
      b = tok.token_bytes(id);
    } catch (const Error&) {
      continue;  // an id the file leaves undefined
    }
    if (!is_space_word(b)) continue;
    const auto back = tok.encode(b, false);
    if (back.size() == 1 && back[0] == id) words_.emplace_back(b);
  }
  DS_CHECK(words_.size() >= min_words,
           "--endpoint chat: the tokenizer has only " + std::to_string(words_.size()) +
               " single-token words of the form \" word\"; cannot build exact-length text");
  // The promise holds only if the pre-tokenizer cuts before each space; check it once.
  std::vector<int32_t> probe;
  for (int32_t i = 0; i < 64; ++i) probe.push_back(i % word_count());
  const size_t got = tok.encode(text(probe), false).size();
  DS_CHECK(got == probe.size(), "--endpoint chat: 64 words encode to " + std::to_string(got) +
                                    " tokens with this tokenizer; cannot build exact-length text");
}

std::string ChatText::text(const std::vector<int32_t>& ids) const {
  std::string s;
  s.reserve(ids.size() * 6);
  for (int32_t id : ids) s += words_.at(static_cast<size_t>(id));
  return s;
}

}  // namespace ds::bench
