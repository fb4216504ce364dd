// Chat messages to prompt token ids through the tokenizer's ChatML template. Message content is
// encoded as plain text (no special tokens), so a user cannot forge a turn boundary.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace ds::server {

// Throws ApiError 400 (param "messages") for a role the template does not know, or when the
// tokenizer has no chat markers.
std::vector<int32_t> chat_prompt_ids(const Tokenizer& tok, const std::vector<ChatTurn>& messages,
                                     bool add_generation_prompt = true);

// The token that ends an assistant turn in this template, as the tokenizer spells it.
inline constexpr const char* kChatEndOfTurn = "<|im_end|>";

}  // namespace ds::server
