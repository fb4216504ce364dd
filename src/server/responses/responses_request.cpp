#include "server/responses/responses_request.h"

#include <iterator>
#include <set>
#include <unordered_map>

#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/openai_request.h"
#include "server/request_tools.h"

namespace ds::server {

namespace {

using ojson = nlohmann::ordered_json;

std::string at(const std::string& where, size_t i) { return where + "[" + std::to_string(i) + "]"; }

const ojson& object_at(const ojson& v, const std::string& where, const char* param) {
  if (!v.is_object()) throw invalid_request("'" + where + "' must be an object, got " + type_name(v), param);
  return v;
}

std::string required_string(const ojson& o, const char* name, const std::string& where, const char* param) {
  const ojson* v = field(o, name);
  if (!v) throw invalid_request("'" + where + "." + name + "' is required", param);
  if (!v->is_string()) throw invalid_request("'" + where + "." + name + "' must be a string, got " + type_name(*v), param);
  return v->get<std::string>();
}

std::optional<std::string> optional_string(const ojson& o, const char* name, const std::string& where,
                                           const char* param) {
  const ojson* v = field(o, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw invalid_request("'" + where + "." + name + "' must be a string, got " + type_name(*v), param);
  return v->get<std::string>();
}

// ---- tools ----

// One function tool as the client declared it, top-level or inside a namespace.
struct DeclaredTool {
  std::string space;  // empty: top-level
  std::string name;
  std::string description;
  const ojson* parameters = nullptr;
  std::string where;
};

void read_function(const ojson& t, const std::string& where, const std::string& space,
                   const std::string& space_description, std::vector<DeclaredTool>& out) {
  DeclaredTool d;
  d.space = space;
  d.name = required_string(t, "name", where, "tools");
  std::string description = optional_string(t, "description", where, "tools").value_or("");
  // A flat tool has no field for its namespace's description: it opens the tool's own.
  if (!space_description.empty())
    description = description.empty() ? space_description : space_description + "\n\n" + description;
  d.description = std::move(description);
  d.parameters = field(t, "parameters");
  if (const ojson* s = field(t, "strict"); s && !s->is_boolean())
    throw invalid_request("'" + where + ".strict' must be a boolean, got " + type_name(*s), "tools");
  d.where = where;
  out.push_back(std::move(d));
}

void parse_tools(const ojson& body, ResponsesRequest& r) {
  GenerationRequest& g = r.g;
  const ojson* tools = field(body, "tools");
  r.echo["tools"] = tools ? *tools : ojson::array();
  if (!tools) return;
  if (!tools->is_array()) throw invalid_request("'tools' must be an array, got " + type_name(*tools), "tools");
  std::vector<DeclaredTool> declared;
  for (size_t i = 0; i < tools->size(); ++i) {
    const std::string w = at("tools", i);
    const ojson& t = object_at((*tools)[i], w, "tools");
    const std::string type = required_string(t, "type", w, "tools");
    if (type == "function") {
      read_function(t, w, "", "", declared);
    } else if (type == "namespace") {
      const std::string space = required_string(t, "name", w, "tools");
      const std::string description = optional_string(t, "description", w, "tools").value_or("");
      const ojson* inner = field(t, "tools");
      if (!inner) continue;
      if (!inner->is_array()) throw invalid_request("'" + w + ".tools' must be an array, got " + type_name(*inner), "tools");
      for (size_t k = 0; k < inner->size(); ++k) {
        const std::string iw = at(w + ".tools", k);
        const ojson& it = object_at((*inner)[k], iw, "tools");
        // A namespace's custom (free-form) tools have no JSON arguments to constrain or parse.
        if (optional_string(it, "type", iw, "tools").value_or("function") == "function")
          read_function(it, iw, space, description, declared);
      }
    }
    // web_search, file_search, code_interpreter, image_generation, computer_use, local_shell,
    // shell, apply_patch, mcp, custom, tool_search, ...: run by OpenAI's servers or free-form,
    // nothing this server can show the model as a function. Left out.
  }
  // A name used once is shown as it is; a namespaced tool whose name another tool shares is shown
  // qualified by its namespace.
  std::unordered_map<std::string, int> uses;
  for (const DeclaredTool& d : declared) ++uses[d.name];
  ojson shown = ojson::array();
  for (const DeclaredTool& d : declared) {
    const std::string flat = d.space.empty() || uses[d.name] == 1 ? d.name : d.space + "__" + d.name;
    add_tool(g, flat, d.parameters, d.where, d.where + ".parameters", "tools");
    ojson fn = {{"name", flat}};
    if (!d.description.empty()) fn["description"] = d.description;
    if (!g.tools.back().parameters.is_null()) fn["parameters"] = g.tools.back().parameters;
    shown.push_back({{"type", "function"}, {"function", std::move(fn)}});
    if (!d.space.empty()) r.namespaced[flat] = {d.space, d.name};
  }
  if (!g.tools.empty()) g.tools_json = shown.dump();
}

// The name the model sees for a call the client names by (namespace, name).
std::string flat_name(const ResponsesRequest& r, const std::string& space, const std::string& name) {
  if (space.empty()) return name;
  for (const auto& [flat, t] : r.namespaced)
    if (t.space == space && t.name == name) return flat;
  return name;  // not declared this time: shown by its own name
}

void parse_tool_choice(const ojson& body, ResponsesRequest& r) {
  GenerationRequest& g = r.g;
  if (auto p = get_bool(body, "parallel_tool_calls")) g.parallel_tool_calls = *p;
  r.echo["parallel_tool_calls"] = g.parallel_tool_calls;
  const ojson* c = field(body, "tool_choice");
  r.echo["tool_choice"] = c ? *c : ojson("auto");
  g.tool_choice = g.tools.empty() ? ToolChoice::None : ToolChoice::Auto;
  if (!c) return;
  if (c->is_string()) {
    const std::string s = c->get<std::string>();
    if (s == "none") g.tool_choice = ToolChoice::None;
    else if (s == "auto") g.tool_choice = g.tools.empty() ? ToolChoice::None : ToolChoice::Auto;
    else if (s == "required") g.tool_choice = ToolChoice::Required;
    else
      throw invalid_request("'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\"}, got \"" +
                                s + "\"",
                            "tool_choice");
  } else if (c->is_object()) {
    const std::string type = required_string(*c, "type", "tool_choice", "tool_choice");
    if (type != "function")
      throw invalid_request("'tool_choice.type' is \"" + type +
                                "\": this server runs function tools only, so a choice must be \"none\", \"auto\", "
                                "\"required\" or {\"type\": \"function\", \"name\"}",
                            "tool_choice");
    const std::string name = required_string(*c, "name", "tool_choice", "tool_choice");
    g.tool_choice = ToolChoice::Named;
    g.tool_choice_name = name;
    // A namespaced tool may be named by its own name when that is unambiguous.
    bool shown = false;
    for (const ToolSpec& t : g.tools) shown = shown || t.name == name;
    if (!shown) {
      std::vector<std::string> matches;
      for (const auto& [flat, t] : r.namespaced)
        if (t.name == name) matches.push_back(flat);
      if (matches.size() == 1) g.tool_choice_name = matches.front();
    }
  } else {
    throw invalid_request("'tool_choice' must be a string or an object, got " + type_name(*c), "tool_choice");
  }
  check_tool_choice(g, "tool_choice");
}

void parse_text_format(const ojson& body, ResponsesRequest& r) {
  GenerationRequest& g = r.g;
  const ojson* text = field(body, "text");
  ojson echo = {{"format", {{"type", "text"}}}};
  if (text) {
    if (!text->is_object()) throw invalid_request("'text' must be an object, got " + type_name(*text), "text");
    echo = *text;
    if (!echo.contains("format") || echo["format"].is_null()) echo["format"] = {{"type", "text"}};
  }
  r.echo["text"] = echo;
  const ojson* f = text ? field(*text, "format") : nullptr;
  if (!f) return;
  if (!f->is_object()) throw invalid_request("'text.format' must be an object, got " + type_name(*f), "text.format");
  const std::string type = required_string(*f, "type", "text.format", "text.format");
  if (type == "text") {
    g.response_format = ResponseFormat::Text;
  } else if (type == "json_object") {
    g.response_format = ResponseFormat::JsonObject;
  } else if (type == "json_schema") {
    optional_string(*f, "name", "text.format", "text.format");
    if (const ojson* s = field(*f, "strict"); s && !s->is_boolean())
      throw invalid_request("'text.format.strict' must be a boolean, got " + type_name(*s), "text.format");
    const ojson* schema = field(*f, "schema");
    if (!schema || !(schema->is_object() || schema->is_boolean()))
      throw invalid_request("'text.format.schema' must be a JSON schema", "text.format.schema");
    g.response_format = ResponseFormat::JsonSchema;
    g.response_schema = *schema;
  } else {
    throw invalid_request("'text.format.type' must be \"text\", \"json_object\" or \"json_schema\", got \"" + type + "\"",
                          "text.format");
  }
  if (g.response_format != ResponseFormat::Text &&
      (g.tool_choice == ToolChoice::Required || g.tool_choice == ToolChoice::Named))
    throw invalid_request("'text.format' " + type + " cannot be combined with a forced tool call ('tool_choice')",
                          "text.format");
}

// ---- input ----

// The text of a string or of text parts, one part a line. Parts this text-only model cannot read
// (images, files, audio) are refused by name.
std::string text_of(const ojson& v, const std::string& where) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array())
    throw invalid_request("'" + where + "' must be a string or an array of content parts, got " + type_name(v), "input");
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string w = at(where, i);
    const ojson& part = object_at(v[i], w, "input");
    const std::string type = required_string(part, "type", w, "input");
    std::string text;
    if (type == "input_text" || type == "output_text" || type == "text") {
      text = required_string(part, "text", w, "input");
    } else if (type == "refusal") {
      text = required_string(part, "refusal", w, "input");
    } else if (type == "input_image" || type == "input_file" || type == "input_audio") {
      throw invalid_request("'" + w + ".type' is \"" + type +
                                "\": this server's model reads text only (input_text and output_text parts)",
                            "input");
    } else {
      throw invalid_request("'" + w + ".type' is \"" + type + "\": content parts must be input_text or output_text",
                            "input");
    }
    if (i > 0) out += "\n";
    out += text;
  }
  return out;
}

// Items that stand for what OpenAI's servers did (or for tools this server never offers): a model
// that never saw those tools has nothing to read in them.
bool ignored_item(const std::string& type) {
  static const std::set<std::string> kinds = {
      "reasoning",          "web_search_call",       "file_search_call",   "code_interpreter_call",
      "image_generation_call", "computer_call",      "computer_call_output", "local_shell_call",
      "local_shell_call_output", "shell_call",       "shell_call_output",  "apply_patch_call",
      "apply_patch_call_output", "mcp_list_tools",   "mcp_approval_request", "mcp_approval_response",
      "mcp_call",           "tool_search_call",      "tool_search_output", "compaction"};
  return kinds.count(type) > 0;
}

class InputReader {
 public:
  explicit InputReader(ResponsesRequest& r) : r_(r) {}

  void item(const ojson& v, const std::string& where) {
    const ojson& it = object_at(v, where, "input");
    std::string type;
    if (auto t = optional_string(it, "type", where, "input")) type = *t;
    else if (field(it, "role")) type = "message";
    else throw invalid_request("'" + where + ".type' is required", "input");
    if (type == "message") return message(it, where);
    if (type == "function_call" || type == "custom_tool_call") return call(it, where, type == "custom_tool_call");
    if (type == "function_call_output" || type == "custom_tool_call_output") return output(it, where);
    if (ignored_item(type)) return;
    if (type == "item_reference")
      throw invalid_request("'" + where + "' is an item_reference: this server keeps no items by id; send the item itself, "
                                "or continue a stored response with previous_response_id",
                            "input");
    throw invalid_request("'" + where + ".type' is \"" + type +
                              "\": input items must be message, function_call, function_call_output or reasoning",
                          "input");
  }

  void user_text(std::string text) { turns().push_back({"user", std::move(text)}); }

 private:
  std::vector<ChatTurn>& turns() { return r_.conversation; }

  void message(const ojson& it, const std::string& where) {
    std::string role = required_string(it, "role", where, "input");
    if (role == "developer") role = "system";  // the newer name of the system role
    if (role != "user" && role != "assistant" && role != "system")
      throw invalid_request("'" + where + ".role' must be \"user\", \"assistant\", \"system\" or \"developer\", got \"" +
                                role + "\"",
                            "input");
    const ojson* content = field(it, "content");
    if (!content) throw invalid_request("'" + where + ".content' is required", "input");
    turns().push_back({role, text_of(*content, where + ".content")});
  }

  // A call joins the assistant turn just before it (the message it came with, or the calls
  // before it); otherwise it opens an assistant turn of its own.
  void call(const ojson& it, const std::string& where, bool custom) {
    ChatToolCall c;
    c.id = required_string(it, "call_id", where, "input");
    const std::string name = required_string(it, "name", where, "input");
    const std::string space = optional_string(it, "namespace", where, "input").value_or("");
    c.name = flat_name(r_, space, name);
    if (custom) {
      c.arguments = optional_string(it, "input", where, "input").value_or("");
    } else if (const ojson* a = field(it, "arguments")) {
      // The API sends the arguments as JSON text; an object is taken as its text.
      if (a->is_string()) c.arguments = a->get<std::string>();
      else if (a->is_object()) c.arguments = a->dump();
      else throw invalid_request("'" + where + ".arguments' must be a string, got " + type_name(*a), "input");
    }
    if (turns().empty() || turns().back().role != "assistant") turns().push_back({"assistant", ""});
    turns().back().tool_calls.push_back(std::move(c));
  }

  void output(const ojson& it, const std::string& where) {
    ChatTurn t{"tool", ""};
    t.tool_call_id = required_string(it, "call_id", where, "input");
    const ojson* out = field(it, "output");
    if (!out) throw invalid_request("'" + where + ".output' is required", "input");
    t.content = text_of(*out, where + ".output");
    turns().push_back(std::move(t));
  }

  ResponsesRequest& r_;
};

void parse_input(const ojson& body, ResponsesRequest& r) {
  const ojson* input = field(body, "input");
  if (!input) {
    if (r.previous_response_id.empty()) throw invalid_request("'input' is required", "input");
    return;
  }
  InputReader reader(r);
  if (input->is_string()) {
    reader.user_text(input->get<std::string>());
    return;
  }
  if (!input->is_array())
    throw invalid_request("'input' must be a string or an array of input items, got " + type_name(*input), "input");
  for (size_t i = 0; i < input->size(); ++i) reader.item((*input)[i], at("input", i));
}

void parse_sampling(const ojson& body, ResponsesRequest& r) {
  GenerationRequest& g = r.g;
  if (auto m = get_string(body, "model")) g.model = *m;
  if (auto n = get_int(body, "max_output_tokens")) {
    if (*n < 1)
      throw invalid_request("'max_output_tokens' must be at least 1, got " + std::to_string(*n), "max_output_tokens");
    g.max_tokens = *n;
  }
  r.echo["max_output_tokens"] = g.max_tokens ? ojson(*g.max_tokens) : ojson(nullptr);
  read_temperature_and_top_p(body, g.sampling, 2.0);
  r.echo["temperature"] = field(body, "temperature") ? *field(body, "temperature") : ojson(1.0);
  r.echo["top_p"] = field(body, "top_p") ? *field(body, "top_p") : ojson(1.0);
  g.stream = get_bool(body, "stream").value_or(false);
  r.store = get_bool(body, "store").value_or(true);
  r.echo["store"] = r.store;
  if (auto p = get_string(body, "previous_response_id")) r.previous_response_id = *p;
  r.echo["previous_response_id"] = r.previous_response_id.empty() ? ojson(nullptr) : ojson(r.previous_response_id);
  if (auto k = get_string(body, "prompt_cache_key")) r.prompt_cache_key = *k;
  r.echo["prompt_cache_key"] = r.prompt_cache_key.empty() ? ojson(nullptr) : ojson(r.prompt_cache_key);
  if (const ojson* md = field(body, "metadata"); md && !md->is_object())
    throw invalid_request("'metadata' must be an object, got " + type_name(*md), "metadata");
  r.echo["metadata"] = field(body, "metadata") ? *field(body, "metadata") : ojson::object();
  if (const ojson* rs = field(body, "reasoning"); rs && !rs->is_object())
    throw invalid_request("'reasoning' must be an object, got " + type_name(*rs), "reasoning");
  // A model without a reasoning format writes no reasoning, whatever effort is asked for.
  r.echo["reasoning"] = {{"effort", nullptr}, {"summary", nullptr}};
  if (const ojson* inc = field(body, "include"); inc && !inc->is_array())
    throw invalid_request("'include' must be an array, got " + type_name(*inc), "include");
  if (auto u = get_string(body, "user")) r.echo["user"] = *u;
  if (auto t = get_string(body, "truncation")) {
    if (*t != "auto" && *t != "disabled")
      throw invalid_request("'truncation' must be \"auto\" or \"disabled\", got \"" + *t + "\"", "truncation");
  }
  r.echo["truncation"] = "disabled";  // the prompt is never cut: one too long is refused
  if (get_bool(body, "background").value_or(false))
    throw invalid_request("'background' responses are not supported: send the request without it (streamed, if "
                          "it is long)",
                          "background");
  if (field(body, "conversation"))
    throw invalid_request("'conversation' is not supported: this server keeps no conversations; continue a stored "
                          "response with previous_response_id, or send the whole input",
                          "conversation");
  if (field(body, "prompt"))
    throw invalid_request("'prompt' (a stored prompt template) is not supported: send 'instructions' and 'input'", "prompt");
}

}  // namespace

ResponsesRequest parse_responses_request(const std::string& text, ResponsesStore& store) {
  const ojson body = parse_json_body_ordered(text);
  ResponsesRequest r;
  GenerationRequest& g = r.g;
  g.api = Api::Responses;
  g.chat = true;
  g.prompt_field = "input";
  g.max_tokens_field = "max_output_tokens";
  parse_sampling(body, r);
  std::optional<std::string> instructions = get_string(body, "instructions");
  r.echo["instructions"] = instructions ? ojson(*instructions) : ojson(nullptr);
  parse_tools(body, r);
  parse_tool_choice(body, r);
  parse_text_format(body, r);
  if (!r.previous_response_id.empty()) {
    std::shared_ptr<const StoredResponse> prev = store.get(r.previous_response_id);
    if (!prev)
      throw ApiError(404, "invalid_request_error",
                     "Previous response with id '" + r.previous_response_id +
                         "' not found (this server keeps only responses created with store: true, in memory, the "
                         "most recent " + std::to_string(store.max_count()) + " at most)",
                     "previous_response_id", "previous_response_not_found", "not_found");
    r.conversation = prev->conversation;
  }
  parse_input(body, r);
  if (instructions && !instructions->empty()) g.messages.push_back({"system", *instructions});
  // The store keeps the conversation apart from the instructions; a response not kept needs no copy.
  if (r.store) g.messages.insert(g.messages.end(), r.conversation.begin(), r.conversation.end());
  else g.messages.insert(g.messages.end(), std::make_move_iterator(r.conversation.begin()),
                         std::make_move_iterator(r.conversation.end()));
  if (g.messages.empty()) throw invalid_request("'input' holds no messages", "input");
  return r;
}

}  // namespace ds::server
