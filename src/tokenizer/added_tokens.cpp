#include "tokenizer/added_tokens.h"

#include <algorithm>

namespace ds {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Bytes of non-ASCII characters count as word characters: a token glued to a letter in any
// script is inside a word.
bool is_word_byte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || u == '_';
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (uint32_t k = 0; k < tokens_.size(); ++k) {
    if (!tokens_[k].content.empty()) by_first_[static_cast<unsigned char>(tokens_[k].content[0])].push_back(k);
  }
  for (auto& bucket : by_first_) {
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](uint32_t x, uint32_t y) { return tokens_[x].content.size() > tokens_[y].content.size(); });
  }
}

std::size_t AddedTokenMatcher::match_at(const AddedToken& t, std::string_view text, std::size_t pos) const {
  if (text.compare(pos, t.content.size(), t.content) != 0) return 0;
  std::size_t end = pos + t.content.size();
  if (t.single_word) {
    if (pos > 0 && is_word_byte(text[pos - 1]) && is_word_byte(t.content.front())) return 0;
    if (end < text.size() && is_word_byte(text[end]) && is_word_byte(t.content.back())) return 0;
  }
  if (t.rstrip) {
    while (end < text.size() && is_space(text[end])) ++end;
  }
  return end;
}

void AddedTokenMatcher::split(std::string_view text, bool allow_special, std::vector<Segment>& out) const {
  if (tokens_.empty()) {
    if (!text.empty()) out.push_back({text, -1});
    return;
  }
  std::size_t plain_begin = 0, pos = 0;
  while (pos < text.size()) {
    const auto& bucket = by_first_[static_cast<unsigned char>(text[pos])];
    std::size_t end = 0;
    const AddedToken* hit = nullptr;
    for (uint32_t k : bucket) {
      const AddedToken& t = tokens_[k];
      if (t.special && !allow_special) continue;
      if ((end = match_at(t, text, pos)) != 0) {
        hit = &t;
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    std::size_t plain_end = pos;
    if (hit->lstrip) {
      while (plain_end > plain_begin && is_space(text[plain_end - 1])) --plain_end;
    }
    if (plain_end > plain_begin) out.push_back({text.substr(plain_begin, plain_end - plain_begin), -1});
    out.push_back({text.substr(pos, end - pos), hit->id});
    plain_begin = pos = end;
  }
  if (plain_begin < text.size()) out.push_back({text.substr(plain_begin), -1});
}

}  // namespace ds
