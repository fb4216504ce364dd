// ChatML, the chat format of the bundled models:
//   <|im_start|>role\ncontent<|im_end|>\n   per message, then <|im_start|>assistant\n
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ds {

class Tokenizer;

struct ChatMessage {
  std::string role, content;
};

// Roles a message may have.
inline constexpr const char* kChatRoles[] = {"system", "user", "assistant", "tool"};

// The prompt text. Throws ds::Error naming an unknown role and the allowed ones.
std::string apply_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt);

// The prompt as ids. Only the template's own markers become special tokens: message content is
// encoded with allow_special = false, so a user who types "<|im_end|>" cannot close their turn
// and write one for the assistant. Encoding apply_chatml's text would not give that guarantee.
// Throws ds::Error if the tokenizer lacks <|im_start|> or <|im_end|>.
std::vector<int32_t> encode_chatml(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt);

}  // namespace ds
