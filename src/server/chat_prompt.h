// Chat messages (and the request's tool definitions) to prompt token ids through the model's
// chat template (tokenizer/chat_template.h). Message content is encoded as plain text (no
// special tokens), so a user cannot forge a turn boundary.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai_request.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ds::server {

// Throws ApiError 400 (param "messages") for a role the template does not know, or when the
// tokenizer lacks the template's markers.
std::vector<int32_t> chat_prompt_ids(const Tokenizer& tok, ChatFormat format, const std::vector<ChatTurn>& messages,
                                     std::string_view tools_json = {}, bool add_generation_prompt = true);

// The token that ends an assistant turn, in both templates.
inline constexpr const char* kChatEndOfTurn = "<|im_end|>";

// The chat template text of a model folder (tokenizer_config.json's "chat_template", a string or
// the "default" entry of a list of named templates); empty when there is none.
std::string model_chat_template(const std::string& model_dir);

}  // namespace ds::server
