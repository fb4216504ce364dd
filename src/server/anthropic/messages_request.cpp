#include "server/anthropic/messages_request.h"

#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/openai_request.h"
#include "server/request_tools.h"

namespace ds::server {

namespace {

using ojson = nlohmann::ordered_json;

std::string at(const std::string& where, size_t i) { return where + "[" + std::to_string(i) + "]"; }

// A block's "type", required on every content block.
std::string block_type(const ojson& b, const std::string& where) {
  if (!b.is_object()) throw invalid_request("'" + where + "' must be an object, got " + type_name(b), "messages");
  const ojson* t = field(b, "type");
  if (!t || !t->is_string()) throw invalid_request("'" + where + ".type' must be a string", "messages");
  return t->get<std::string>();
}

std::string required_string(const ojson& b, const char* name, const std::string& where, const char* param) {
  const ojson* v = field(b, name);
  if (!v || !v->is_string()) throw invalid_request("'" + where + "." + name + "' must be a string", param);
  return v->get<std::string>();
}

// Text of a string or of text blocks (system, tool_result content). Other block types in a
// tool result (an image a tool returned) cannot be shown to a text model: refused by name.
std::string text_of(const ojson& v, const std::string& where, const char* param) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array())
    throw invalid_request("'" + where + "' must be a string or an array of text blocks, got " + type_name(v), param);
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string w = at(where, i);
    const std::string type = block_type(v[i], w);
    if (type != "text")
      throw invalid_request("'" + w + ".type' is \"" + type + "\": only text blocks are supported here", param);
    if (!out.empty()) out += "\n";
    out += required_string(v[i], "text", w, param);
  }
  return out;
}

void parse_system(const ojson& body, GenerationRequest& g) {
  const ojson* s = field(body, "system");
  if (!s) return;
  std::string text = text_of(*s, "system", "system");
  if (!text.empty()) g.messages.push_back({"system", std::move(text)});
}

// One message's blocks, in order, into turns: text and tool_use gather into the current user or
// assistant turn; each tool_result is a "tool" turn of its own, and text after it opens a new
// turn of the message's role.
void parse_message(const ojson& m, const std::string& where, GenerationRequest& g) {
  if (!m.is_object()) throw invalid_request("'" + where + "' must be an object, got " + type_name(m), "messages");
  const std::string role = required_string(m, "role", where, "messages");
  // Claude Code puts system messages inside the conversation (its environment, reminders) for
  // models that take them; they become system turns where they stand.
  if (role != "user" && role != "assistant" && role != "system")
    throw invalid_request("'" + where + ".role' must be \"user\", \"assistant\" or \"system\", got \"" + role + "\"",
                          "messages");
  const ojson* content = field(m, "content");
  if (!content) throw invalid_request("'" + where + ".content' is required", "messages");
  if (content->is_string()) {
    g.messages.push_back({role, content->get<std::string>()});
    return;
  }
  if (!content->is_array())
    throw invalid_request("'" + where + ".content' must be a string or an array of content blocks, got " +
                              type_name(*content),
                          "messages");
  ChatTurn turn{role, ""};
  bool open = false;  // turn holds something not yet pushed
  auto flush = [&] {
    if (open) g.messages.push_back(std::move(turn));
    turn = ChatTurn{role, ""};
    open = false;
  };
  for (size_t i = 0; i < content->size(); ++i) {
    const ojson& b = (*content)[i];
    const std::string w = at(where + ".content", i);
    const std::string type = block_type(b, w);
    if (type == "text") {
      if (!turn.content.empty()) turn.content += "\n";
      turn.content += required_string(b, "text", w, "messages");
      open = true;
    } else if (type == "tool_use") {
      if (role != "assistant")
        throw invalid_request("'" + w + "' is a tool_use block, which only assistant messages hold", "messages");
      ChatToolCall call;
      call.id = required_string(b, "id", w, "messages");
      call.name = required_string(b, "name", w, "messages");
      const ojson* input = field(b, "input");
      if (input && !input->is_object())
        throw invalid_request("'" + w + ".input' must be an object, got " + type_name(*input), "messages");
      call.arguments = input ? input->dump() : "{}";
      turn.tool_calls.push_back(std::move(call));
      open = true;
    } else if (type == "tool_result") {
      if (role != "user")
        throw invalid_request("'" + w + "' is a tool_result block, which only user messages hold", "messages");
      flush();
      ChatTurn result{"tool", ""};
      result.tool_call_id = required_string(b, "tool_use_id", w, "messages");
      if (const ojson* c = field(b, "content")) result.content = text_of(*c, w + ".content", "messages");
      if (auto err = get_bool(b, "is_error"); err && *err) result.content = "Error: " + result.content;
      g.messages.push_back(std::move(result));
    } else if (type == "thinking" || type == "redacted_thinking") {
      // Passed back by clients that keep the conversation whole; this model wrote none.
    } else if (type == "server_tool_use" || type == "web_search_tool_result" || type == "web_fetch_tool_result") {
      // Results of tools Anthropic's servers run; this server declares none of them.
    } else {
      throw invalid_request("'" + w + ".type' is \"" + type +
                                "\": this server reads text, tool_use and tool_result blocks (and ignores thinking)",
                            "messages");
    }
  }
  flush();
}

void parse_messages_field(const ojson& body, GenerationRequest& g) {
  const ojson* m = field(body, "messages");
  if (!m) throw invalid_request("'messages' is required", "messages");
  if (!m->is_array()) throw invalid_request("'messages' must be an array, got " + type_name(*m), "messages");
  if (m->empty()) throw invalid_request("'messages' must not be empty", "messages");
  for (size_t i = 0; i < m->size(); ++i) parse_message((*m)[i], at("messages", i), g);
}

void parse_tools(const ojson& body, GenerationRequest& g) {
  const ojson* tools = field(body, "tools");
  if (!tools) return;
  if (!tools->is_array()) throw invalid_request("'tools' must be an array, got " + type_name(*tools), "tools");
  ojson shown = ojson::array();  // as the chat template shows function tools
  for (size_t i = 0; i < tools->size(); ++i) {
    const ojson& t = (*tools)[i];
    const std::string w = at("tools", i);
    if (!t.is_object()) throw invalid_request("'" + w + "' must be an object, got " + type_name(t), "tools");
    // Tools of Anthropic's own types (web_search_20250305, bash_20250124, ...) are run by
    // Anthropic's servers or carry no schema this server could show the model.
    if (auto type = get_string(t, "type"); type && *type != "custom") continue;
    const std::string name = required_string(t, "name", w, "tools");
    const ojson* schema = field(t, "input_schema");
    if (!schema) throw invalid_request("'" + w + ".input_schema' is required", "tools");
    add_tool(g, name, schema, w, w + ".input_schema", "tools");
    ojson fn = {{"name", name}};
    if (auto d = get_string(t, "description")) fn["description"] = *d;
    fn["parameters"] = g.tools.back().parameters;
    shown.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  if (!g.tools.empty()) g.tools_json = shown.dump();
}

void parse_tool_choice(const ojson& body, GenerationRequest& g) {
  g.tool_choice = g.tools.empty() ? ToolChoice::None : ToolChoice::Auto;
  const ojson* c = field(body, "tool_choice");
  if (!c) return;
  if (!c->is_object()) throw invalid_request("'tool_choice' must be an object, got " + type_name(*c), "tool_choice");
  const std::string type = required_string(*c, "type", "tool_choice", "tool_choice");
  if (type == "none") {
    g.tool_choice = ToolChoice::None;
    return;
  }
  if (type == "auto") g.tool_choice = ToolChoice::Auto;
  else if (type == "any") g.tool_choice = ToolChoice::Required;
  else if (type == "tool") {
    g.tool_choice = ToolChoice::Named;
    g.tool_choice_name = required_string(*c, "name", "tool_choice", "tool_choice");
  } else {
    throw invalid_request("'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\", got \"" + type + "\"",
                          "tool_choice");
  }
  if (auto d = get_bool(*c, "disable_parallel_tool_use"); d && *d) g.parallel_tool_calls = false;
  // Anthropic accepts auto with no tools; only a forced call needs one.
  if (g.tools.empty() && g.tool_choice == ToolChoice::Auto) {
    g.tool_choice = ToolChoice::None;
    return;
  }
  check_tool_choice(g, "tool_choice");
}

void parse_sampling(const ojson& body, GenerationRequest& g, bool count_only) {
  if (auto m = get_string(body, "model")) g.model = *m;
  if (auto n = get_int(body, "max_tokens")) {
    if (*n < 1) throw invalid_request("'max_tokens' must be at least 1, got " + std::to_string(*n), "max_tokens");
    g.max_tokens = *n;
  } else if (!count_only) {
    throw invalid_request("'max_tokens' is required", "max_tokens");
  }
  read_temperature_and_top_p(body, g.sampling, 1.0);
  if (auto k = get_int(body, "top_k")) {
    if (*k < 0) throw invalid_request("'top_k' must be 0 (off) or a positive integer, got " + std::to_string(*k), "top_k");
    g.sampling.top_k = int(std::min<int64_t>(*k, 1 << 30));
  }
  if (const ojson* s = field(body, "stop_sequences")) {
    if (!s->is_array()) throw invalid_request("'stop_sequences' must be an array of strings", "stop_sequences");
    for (size_t i = 0; i < s->size(); ++i) {
      if (!(*s)[i].is_string()) throw invalid_request("'" + at("stop_sequences", i) + "' must be a string", "stop_sequences");
      const std::string v = (*s)[i].get<std::string>();
      if (v.empty()) throw invalid_request("'" + at("stop_sequences", i) + "' must not be empty", "stop_sequences");
      if (v.size() > kMaxStopBytes)
        throw invalid_request("'" + at("stop_sequences", i) + "' has " + std::to_string(v.size()) + " bytes; at most " +
                                  std::to_string(kMaxStopBytes) + " are allowed",
                              "stop_sequences");
      g.stop.push_back(v);
    }
    if (g.stop.size() > kMaxStopStrings)
      throw invalid_request("'stop_sequences' has " + std::to_string(g.stop.size()) + " strings; at most " +
                                std::to_string(kMaxStopStrings) + " are allowed",
                            "stop_sequences");
  }
  g.stream = get_bool(body, "stream").value_or(false);
  if (const ojson* th = field(body, "thinking"); th && !th->is_object())
    throw invalid_request("'thinking' must be an object, got " + type_name(*th), "thinking");
  if (const ojson* md = field(body, "metadata"); md && !md->is_object())
    throw invalid_request("'metadata' must be an object, got " + type_name(*md), "metadata");
}

}  // namespace

GenerationRequest parse_messages_request(const std::string& text, bool count_only) {
  const ojson body = parse_json_body_ordered(text);
  GenerationRequest g;
  g.api = Api::Messages;
  g.chat = true;
  g.prompt_field = "messages";
  parse_sampling(body, g, count_only);
  parse_system(body, g);
  parse_messages_field(body, g);
  parse_tools(body, g);
  parse_tool_choice(body, g);
  return g;
}

}  // namespace ds::server
