#include "tokenizer/chat_template.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <iterator>
#include <unordered_map>

#include "core/error.h"
#include "core/json_parse.h"
#include "tokenizer/tokenizer.h"

namespace ds {
namespace {

constexpr std::string_view kStart = "<|im_start|>";
constexpr std::string_view kEnd = "<|im_end|>";

// A rendered prompt: plain-text runs and template markers in order. apply_* joins them; encode_*
// turns markers into their special-token ids and encodes the runs as plain text.
struct Segment {
  std::string text;
  bool marker = false;
  // A marker the tokenizer must have as a special token. An optional one (ChatML's <tool_call>
  // tags, which many ChatML tokenizers lack) falls back to plain text.
  bool required = false;
  // Ids given as they are (a reply as the model generated it); text is what they decode to.
  std::vector<int32_t> ids = {};
  bool given = false;
};

class Rendered {
 public:
  void text(std::string_view t) {
    if (t.empty()) return;
    if (!segs_.empty() && !segs_.back().marker && !segs_.back().given) {
      segs_.back().text.append(t);
    } else {
      segs_.push_back({std::string(t), false, false});
    }
  }
  void marker(std::string_view m, bool required = true) { segs_.push_back({std::string(m), true, required}); }
  void ids(const std::vector<int32_t>& ids, const std::string& text) { segs_.push_back({text, false, false, ids, true}); }
  const std::vector<Segment>& segments() const { return segs_; }

 private:
  std::vector<Segment> segs_;
};

void check_role(const std::string& role) {
  const bool known = std::any_of(std::begin(kChatRoles), std::end(kChatRoles),
                                 [&](const char* r) { return role == r; });
  if (known) return;
  std::string allowed;
  for (const char* r : kChatRoles) allowed += (allowed.empty() ? "" : ", ") + std::string(r);
  throw Error("chat template: unknown role '" + role + "' (allowed: " + allowed + ")");
}

bool has_special(const Tokenizer& tok, std::string_view token) {
  auto id = tok.token_id(token);
  return id && tok.is_special(*id);
}

// The client's text may be any bytes; a JSON string of it must still be writable.
std::string json_string(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Each tool definition as one line of JSON, in the order and key order the client sent.
std::vector<std::string> tool_lines(std::string_view tools_json) {
  std::vector<std::string> lines;
  if (tools_json.empty()) return lines;
  const auto tools = parse_json<nlohmann::ordered_json>(tools_json, "chat template: the tool definitions");
  if (!tools.is_array()) throw Error("chat template: the tool definitions must be a JSON array");
  for (const auto& t : tools) lines.push_back(t.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  return lines;
}

bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); });
}

// A call's arguments as the client sent them back: JSON as given, nothing as an empty object, and
// anything else as a JSON string so the rendered call is still one JSON object.
std::string arguments_json(const std::string& arguments) {
  if (is_blank(arguments)) return "{}";
  if (nlohmann::json::accept(arguments)) return arguments;
  return json_string(arguments);
}

// ---- ChatML ----

void hermes_call(Rendered& r, const ChatToolCall& call) {
  r.marker(kHermesToolCallOpen, false);
  r.text("\n{\"name\": " + json_string(call.name) + ", \"arguments\": " + arguments_json(call.arguments) + "}\n");
  r.marker(kHermesToolCallClose, false);
}

// The system prompt's part that declares the tools and shows the call syntax.
void hermes_tools_prompt(Rendered& r, const std::vector<std::string>& lines) {
  r.text(
      "# Tools\n\n"
      "You may call functions to help with the user's request. Their definitions are listed "
      "inside <tools></tools>, one JSON object per line:\n<tools>\n");
  for (const auto& line : lines) r.text(line + "\n");
  r.text("</tools>\n\nTo call a function, answer with its name and arguments in this form:\n");
  r.marker(kHermesToolCallOpen, false);
  r.text("\n{\"name\": <function name>, \"arguments\": <arguments as a JSON object>}\n");
  r.marker(kHermesToolCallClose, false);
  r.text("\nFor several calls, write one such block per call, separated by a newline.");
}

Rendered render_chatml(const std::vector<ChatMessage>& messages, std::string_view tools_json,
                       bool add_generation_prompt) {
  const std::vector<std::string> tools = tool_lines(tools_json);
  Rendered r;
  size_t first = 0;
  if (!tools.empty()) {
    r.marker(kStart);
    r.text("system\n");
    if (!messages.empty() && messages[0].role == "system") {
      if (!messages[0].content.empty()) r.text(messages[0].content + "\n\n");
      first = 1;
    }
    hermes_tools_prompt(r, tools);
    r.marker(kEnd);
    r.text("\n");
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    check_role(m.role);
    r.marker(kStart);
    if (m.role == "assistant" && !m.generated_ids.empty()) {
      // The head as the generation prompt wrote it (its own run), then the reply's own ids.
      r.text("assistant\n");
      r.ids(m.generated_ids, m.generated_text);
      r.marker(kEnd);
      r.text("\n");
      continue;
    }
    // role, newline and content in one run: the same plain-text runs that encoding the text
    // yields (the markers are where the added-token matcher would cut it), so benign content gets
    // identical ids either way.
    r.text(m.role + "\n" + m.content);
    if (m.role == "assistant") {
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        if (k > 0 || !m.content.empty()) r.text("\n");
        hermes_call(r, m.tool_calls[k]);
      }
    }
    r.marker(kEnd);
    r.text("\n");
  }
  if (add_generation_prompt) {
    r.marker(kStart);
    r.text("assistant\n");
  }
  return r;
}

// ---- Kimi ----

// functions.NAME:INDEX, NAME non-empty and INDEX decimal digits.
bool is_kimi_call_id(std::string_view id) {
  constexpr std::string_view prefix = "functions.";
  if (id.substr(0, prefix.size()) != prefix) return false;
  const size_t colon = id.rfind(':');
  if (colon == std::string_view::npos || colon <= prefix.size() || colon + 1 == id.size()) return false;
  return std::all_of(id.begin() + static_cast<std::ptrdiff_t>(colon) + 1, id.end(),
                     [](unsigned char c) { return std::isdigit(c); });
}

void kimi_turn_head(Rendered& r, std::string_view opener, std::string_view role) {
  r.marker(opener);
  r.text(role);
  r.marker(kKimiMiddle);
}

Rendered render_kimi(const std::vector<ChatMessage>& messages, std::string_view tools_json,
                     bool add_generation_prompt) {
  (void)tool_lines(tools_json);  // the same validation as ChatML; Kimi shows the array as given
  Rendered r;
  if (!tools_json.empty()) {
    kimi_turn_head(r, kKimiSystem, "tool_declare");
    r.text(tools_json);
    r.marker(kKimiEnd);
  }
  // Kimi was trained on its own call ids; a history call whose id the client made up elsewhere
  // is shown in Kimi's form, and the tool result answering it follows the rename.
  std::unordered_map<std::string, std::string> renamed;
  size_t call_index = 0;
  for (const ChatMessage& m : messages) {
    check_role(m.role);
    if (m.role == "system") {
      kimi_turn_head(r, kKimiSystem, "system");
      r.text(m.content);
    } else if (m.role == "user") {
      kimi_turn_head(r, kKimiUser, "user");
      r.text(m.content);
    } else if (m.role == "assistant" && !m.generated_ids.empty()) {
      kimi_turn_head(r, kKimiAssistant, "assistant");
      r.ids(m.generated_ids, m.generated_text);
      call_index += m.tool_calls.size();
    } else if (m.role == "assistant") {
      kimi_turn_head(r, kKimiAssistant, "assistant");
      r.text(m.content);
      if (!m.tool_calls.empty()) {
        r.marker(kKimiToolCallsBegin);
        for (const ChatToolCall& call : m.tool_calls) {
          std::string id = call.id;
          if (!is_kimi_call_id(id)) {
            id = "functions." + call.name + ":" + std::to_string(call_index);
            if (!call.id.empty()) renamed[call.id] = id;
          }
          ++call_index;
          r.marker(kKimiToolCallBegin);
          r.text(id);
          r.marker(kKimiToolCallArgumentBegin);
          r.text(is_blank(call.arguments) ? std::string("{}") : call.arguments);
          r.marker(kKimiToolCallEnd);
        }
        r.marker(kKimiToolCallsEnd);
      }
    } else {  // tool
      auto it = renamed.find(m.tool_call_id);
      const std::string& id = it == renamed.end() ? m.tool_call_id : it->second;
      kimi_turn_head(r, kKimiSystem, "tool");
      r.text("## Return of " + id + "\n" + m.content);
    }
    r.marker(kKimiEnd);
  }
  if (add_generation_prompt) kimi_turn_head(r, kKimiAssistant, "assistant");
  return r;
}

// The markers a format uses in every prompt, checked up front so a tokenizer without them is
// refused even for an empty conversation.
std::vector<std::string_view> base_markers(ChatFormat format) {
  if (format == ChatFormat::Kimi) return {kKimiSystem, kKimiUser, kKimiAssistant, kKimiMiddle, kKimiEnd};
  return {kStart, kEnd};
}

int32_t marker_id(const Tokenizer& tok, ChatFormat format, std::string_view marker) {
  auto id = tok.token_id(marker);
  if (!id || !tok.is_special(*id)) {
    throw Error("chat template: the tokenizer has no special token " + std::string(marker) + " (the " +
                chat_format_name(format) + " chat format needs it)");
  }
  return *id;
}

Rendered render(ChatFormat format, const std::vector<ChatMessage>& messages, std::string_view tools_json,
                bool add_generation_prompt) {
  return format == ChatFormat::Kimi ? render_kimi(messages, tools_json, add_generation_prompt)
                                    : render_chatml(messages, tools_json, add_generation_prompt);
}

}  // namespace

ChatFormat detect_chat_format(const Tokenizer& tok, std::string_view chat_template_text) {
  const bool kimi_tokens = has_special(tok, kKimiUser) && has_special(tok, kKimiAssistant) &&
                           has_special(tok, kKimiMiddle) && has_special(tok, kKimiEnd);
  if (kimi_tokens || chat_template_text.find(kKimiMiddle) != std::string_view::npos) return ChatFormat::Kimi;
  return ChatFormat::ChatML;
}

const char* chat_format_name(ChatFormat format) { return format == ChatFormat::Kimi ? "kimi" : "chatml"; }

std::string apply_chat(ChatFormat format, const std::vector<ChatMessage>& messages, std::string_view tools_json,
                       bool add_generation_prompt) {
  std::string out;
  const Rendered r = render(format, messages, tools_json, add_generation_prompt);
  for (const Segment& s : r.segments()) out += s.text;
  return out;
}

std::vector<int32_t> encode_chat(const Tokenizer& tok, ChatFormat format, const std::vector<ChatMessage>& messages,
                                 std::string_view tools_json, bool add_generation_prompt) {
  for (std::string_view m : base_markers(format)) (void)marker_id(tok, format, m);
  const Rendered r = render(format, messages, tools_json, add_generation_prompt);
  std::vector<int32_t> ids;
  // Plain text between two special ids is encoded as one run, also across an optional marker
  // the tokenizer lacks, so the ids are those of encoding the prompt text whenever the content
  // holds nothing that looks like a marker.
  std::string run;
  auto flush = [&] {
    if (run.empty()) return;
    const auto part = tok.encode(run, /*allow_special=*/false);
    ids.insert(ids.end(), part.begin(), part.end());
    run.clear();
  };
  for (const Segment& s : r.segments()) {
    if (s.given) {
      flush();
      ids.insert(ids.end(), s.ids.begin(), s.ids.end());
    } else if (s.marker && (s.required || has_special(tok, s.text))) {
      const int32_t id = marker_id(tok, format, s.text);
      flush();
      ids.push_back(id);
    } else {
      run += s.text;
    }
  }
  flush();
  return ids;
}

std::string apply_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  return apply_chat(ChatFormat::ChatML, messages, {}, add_generation_prompt);
}

std::vector<int32_t> encode_chatml(const Tokenizer& tok, const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt) {
  return encode_chat(tok, ChatFormat::ChatML, messages, {}, add_generation_prompt);
}

}  // namespace ds
