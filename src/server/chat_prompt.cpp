#include "server/chat_prompt.h"

#include "core/error.h"
#include "server/api_error.h"
#include "tokenizer/chat_template.h"

namespace ds::server {

std::vector<int32_t> chat_prompt_ids(const Tokenizer& tok, const std::vector<ChatTurn>& messages,
                                     bool add_generation_prompt) {
  try {
    return encode_chatml(tok, messages, add_generation_prompt);
  } catch (const Error& e) {
    throw invalid_request(e.what(), "messages");
  }
}

}  // namespace ds::server
