#include "tokenizer/chat_template.h"

#include <algorithm>
#include <iterator>
#include <string_view>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace ds {
namespace {

constexpr std::string_view kStart = "<|im_start|>";
constexpr std::string_view kEnd = "<|im_end|>";

void check_role(const std::string& role) {
  const bool known = std::any_of(std::begin(kChatRoles), std::end(kChatRoles),
                                 [&](const char* r) { return role == r; });
  if (known) return;
  std::string allowed;
  for (const char* r : kChatRoles) allowed += (allowed.empty() ? "" : ", ") + std::string(r);
  throw Error("chat template: unknown role '" + role + "' (allowed: " + allowed + ")");
}

int32_t marker_id(const Tokenizer& tok, std::string_view marker) {
  auto id = tok.token_id(marker);
  if (!id || !tok.is_special(*id)) {
    throw Error("chat template: the tokenizer has no special token " + std::string(marker) +
                " (ChatML needs <|im_start|> and <|im_end|>)");
  }
  return *id;
}

}  // namespace

std::string apply_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  for (const auto& m : messages) {
    check_role(m.role);
    out.append(kStart).append(m.role).append("\n").append(m.content).append(kEnd).append("\n");
  }
  if (add_generation_prompt) out.append(kStart).append("assistant\n");
  return out;
}

std::vector<int32_t> encode_chatml(const Tokenizer& tok, const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt) {
  const int32_t start = marker_id(tok, kStart), end = marker_id(tok, kEnd);
  std::vector<int32_t> ids;
  auto append = [&](const std::string& text) {
    const auto part = tok.encode(text, /*allow_special=*/false);
    ids.insert(ids.end(), part.begin(), part.end());
  };
  for (const auto& m : messages) {
    check_role(m.role);
    ids.push_back(start);
    // The same plain-text runs that encoding apply_chatml's text yields: the markers are where
    // the added-token matcher would cut it, so benign content gets identical ids.
    append(m.role + "\n" + m.content);
    ids.push_back(end);
    append("\n");
  }
  if (add_generation_prompt) {
    ids.push_back(start);
    append("assistant\n");
  }
  return ids;
}

}  // namespace ds
