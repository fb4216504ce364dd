// Chat templates: messages (and the request's tool definitions) to the prompt a model was trained
// on. Two formats:
//   ChatML (the bundled models, Qwen, Hermes-style tools):
//     <|im_start|>role\ncontent<|im_end|>\n   per message, then <|im_start|>assistant\n
//   Kimi (Kimi K2, Kimi-Linear), every marker a special token and no newline between turns:
//     <|im_user|>user<|im_middle|>content<|im_end|>   per message, then
//     <|im_assistant|>assistant<|im_middle|>
// Both render as a list of plain-text runs and template markers, so the text form (apply_*) and
// the ids (encode_*) cannot drift apart: the ids decode to exactly the text.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ds {

class Tokenizer;

// One function call an assistant made earlier in the conversation.
struct ChatToolCall {
  std::string id, name;
  std::string arguments;  // JSON text of the arguments object, as the client sent it back
};

// role and content stay first so {"user", "hi"} initializes a plain message; the defaults keep
// -Wmissing-field-initializers quiet for that form.
struct ChatMessage {
  std::string role, content;
  std::vector<ChatToolCall> tool_calls = {};  // assistant messages only
  std::string tool_call_id = {};              // tool messages: the call this result answers
  std::string name = {};                      // tool messages: the function's name (not rendered)
  // Assistant messages: the turn's body (content and calls) as the model generated it, when the
  // server knows it (server/reply_memory.h). The template then writes these ids, and their text,
  // in place of rendering content and calls, so the prompt continues exactly the tokens the
  // earlier request ended with and the prefix cache reaches through the reply.
  std::vector<int32_t> generated_ids = {};
  std::string generated_text = {};  // what generated_ids decode to
};

// Roles a message may have.
inline constexpr const char* kChatRoles[] = {"system", "user", "assistant", "tool"};

enum class ChatFormat { ChatML, Kimi };

// Kimi when the tokenizer has <|im_user|>, <|im_assistant|>, <|im_middle|> and <|im_end|> as
// special tokens, or when the model's chat template text (tokenizer_config.json's
// chat_template; may be empty) uses <|im_middle|>; ChatML otherwise.
ChatFormat detect_chat_format(const Tokenizer& tokenizer, std::string_view chat_template_text);
// "chatml" or "kimi".
const char* chat_format_name(ChatFormat format);

// The tags around a Hermes-style call in ChatML. The server's tool-call parser and the decoding
// constraint for tool calls match this same text.
inline constexpr std::string_view kHermesToolCallOpen = "<tool_call>";
inline constexpr std::string_view kHermesToolCallClose = "</tool_call>";

// Kimi's markers, each one special token in Kimi's tokenizer; the model writes the tool-call
// ones itself, so the server's parser looks for them too.
inline constexpr std::string_view kKimiSystem = "<|im_system|>";
inline constexpr std::string_view kKimiUser = "<|im_user|>";
inline constexpr std::string_view kKimiAssistant = "<|im_assistant|>";
inline constexpr std::string_view kKimiMiddle = "<|im_middle|>";
inline constexpr std::string_view kKimiEnd = "<|im_end|>";
inline constexpr std::string_view kKimiToolCallsBegin = "<|tool_calls_section_begin|>";
inline constexpr std::string_view kKimiToolCallsEnd = "<|tool_calls_section_end|>";
inline constexpr std::string_view kKimiToolCallBegin = "<|tool_call_begin|>";
inline constexpr std::string_view kKimiToolCallArgumentBegin = "<|tool_call_argument_begin|>";
inline constexpr std::string_view kKimiToolCallEnd = "<|tool_call_end|>";

// The prompt text. tools_json: the JSON array of the request's function definitions (each
// {"type": "function", "function": {...}}), empty for none.
//   ChatML: the definitions go into the system turn (appended after a blank line to a leading
//     system message, or in a system turn of their own), one per line inside <tools></tools>,
//     with instructions to answer with <tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>.
//     An assistant's earlier calls are written in that form after its content (arguments that are
//     not valid JSON are written as a JSON string, empty ones as {}); tool results are turns of
//     role "tool".
//   Kimi: a tool_declare turn holding tools_json as given comes first; an assistant's calls go
//     into a tool-calls section, each its id and its arguments as given ({} when empty). Ids are
//     functions.NAME:INDEX: one in another form is rewritten to that, INDEX counting the
//     conversation's calls from 0, and a tool result naming the old id follows the rename. A
//     tool result is a "tool" turn headed "## Return of ID".
// Throws ds::Error naming an unknown role and the allowed ones, or tools_json that is not a JSON
// array.
std::string apply_chat(ChatFormat format, const std::vector<ChatMessage>& messages, std::string_view tools_json,
                       bool add_generation_prompt);

// The prompt as ids. Only the template's own markers become special tokens: message content, call
// arguments, tool results and tool definitions are encoded with allow_special = false, so a user
// who types "<|im_end|>" cannot close their turn and write one for the assistant. Encoding
// apply_chat's text would not give that guarantee. ChatML's <tool_call> tags become special ids
// when the tokenizer has them as special tokens and are text otherwise; every other marker must
// be a special token of the tokenizer: ds::Error naming the one that is missing.
std::vector<int32_t> encode_chat(const Tokenizer& tokenizer, ChatFormat format,
                                 const std::vector<ChatMessage>& messages, std::string_view tools_json,
                                 bool add_generation_prompt);

// ChatML without tools.
std::string apply_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt);
std::vector<int32_t> encode_chatml(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt);

}  // namespace ds
