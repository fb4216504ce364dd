#include "tokenizer/byte_level.h"

#include <unordered_map>

#include "tokenizer/utf8.h"

namespace ds::byte_level {
namespace {

// Bytes that are already printable (and not space) keep their own code point; the rest are
// shifted, in byte order, to 256 and up. This is the published GPT-2 convention, which every
// byte-level tokenizer.json relies on.
struct Tables {
  std::array<char32_t, 256> cp{};
  std::array<std::string, 256> str;
  std::unordered_map<char32_t, unsigned char> back;
  Tables() {
    auto keeps_self = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    char32_t shifted = 256;
    for (int b = 0; b < 256; ++b) {
      cp[b] = keeps_self(b) ? static_cast<char32_t>(b) : shifted++;
      utf8::append(str[b], cp[b]);
      back.emplace(cp[b], static_cast<unsigned char>(b));
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t codepoint_of(unsigned char b) { return tables().cp[b]; }

const std::array<std::string, 256>& byte_strings() { return tables().str; }

std::string encode(std::string_view bytes) {
  const auto& str = tables().str;
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += str[static_cast<unsigned char>(c)];
  return out;
}

std::optional<std::string> decode(std::string_view mapped) {
  const auto& back = tables().back;
  std::string out;
  out.reserve(mapped.size());
  std::size_t pos = 0;
  char32_t cp;
  while (pos < mapped.size()) {
    if (!utf8::next(mapped, pos, cp)) return std::nullopt;
    auto it = back.find(cp);
    if (it == back.end()) return std::nullopt;
    out.push_back(static_cast<char>(it->second));
  }
  return out;
}

}  // namespace ds::byte_level
