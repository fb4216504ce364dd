#include "server/openai_request.h"

#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "server/api_error.h"
#include "core/json_parse.h"

namespace ds::server {

using nlohmann::json;

namespace {

// No OpenAI request nests deeper than a few levels; refusing deep nesting while parsing keeps a
// hostile body from costing memory, time, or the stack of whatever walks it later.
constexpr int kMaxBodyDepth = 32;

std::string type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    case json::value_t::number_float: return "number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    default: return "value";
  }
}

std::string num(double x) {
  if (x == std::floor(x) && std::fabs(x) < 1e15) return std::to_string(int64_t(x));
  std::string s = std::to_string(x);
  while (!s.empty() && s.back() == '0') s.pop_back();
  return s;
}

// A present, non-null field; null counts as absent, as the OpenAI API treats it.
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> get_number(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number())
    throw invalid_request(std::string("'") + name + "' must be a number, got " + type_name(*v), name);
  return v->get<double>();
}

std::optional<int64_t> get_int(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      return std::numeric_limits<int64_t>::max();
    return v->get<int64_t>();
  }
  throw invalid_request(std::string("'") + name + "' must be an integer, got " + type_name(*v), name);
}

std::optional<bool> get_bool(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean())
    throw invalid_request(std::string("'") + name + "' must be a boolean, got " + type_name(*v), name);
  return v->get<bool>();
}

void parse_common(const json& body, GenerationRequest* g) {
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) throw invalid_request("'model' must be a string, got " + type_name(*m), "model");
    g->model = m->get<std::string>();
  }
  if (auto n = get_int(body, "n"); n && *n != 1)
    throw invalid_request("'n' must be 1 (one choice per request is supported), got " +
                              std::to_string(*n), "n");
  if (auto t = get_number(body, "temperature")) {
    if (!(*t >= 0.0 && *t <= 2.0))
      throw invalid_request("'temperature' must be in [0, 2], got " + num(*t), "temperature");
    g->sampling.temperature = float(*t);
  }
  if (auto p = get_number(body, "top_p")) {
    if (!(*p > 0.0 && *p <= 1.0))
      throw invalid_request("'top_p' must be in (0, 1], got " + num(*p), "top_p");
    g->sampling.top_p = float(*p);
  }
  if (auto k = get_int(body, "top_k")) {
    if (*k < -1)
      throw invalid_request("'top_k' must be -1 or 0 (off) or a positive integer, got " +
                                std::to_string(*k), "top_k");
    g->sampling.top_k = *k <= 0 ? 0 : int(std::min<int64_t>(*k, std::numeric_limits<int>::max()));
  }
  if (auto mp = get_number(body, "min_p")) {
    if (!(*mp >= 0.0 && *mp <= 1.0))
      throw invalid_request("'min_p' must be in [0, 1], got " + num(*mp), "min_p");
    g->sampling.min_p = float(*mp);
  }
  if (const json* s = field(body, "seed")) {
    if (!s->is_number_integer())
      throw invalid_request("'seed' must be an integer, got " + type_name(*s), "seed");
    g->sampling.seed = s->is_number_unsigned() ? s->get<uint64_t>() : uint64_t(s->get<int64_t>());
    g->seed_given = true;
  }
  // max_completion_tokens is the current name; max_tokens the older one. The newer wins.
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    if (auto m = get_int(body, name)) {
      if (*m < 1)
        throw invalid_request(std::string("'") + name + "' must be at least 1, got " + std::to_string(*m), name);
      g->max_tokens = *m;
    }
  }
  if (const json* s = field(body, "stop")) {
    if (s->is_string()) {
      g->stop.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      for (size_t i = 0; i < s->size(); ++i) {
        if (!(*s)[i].is_string())
          throw invalid_request("'stop[" + std::to_string(i) + "]' must be a string, got " +
                                    type_name((*s)[i]), "stop");
        g->stop.push_back((*s)[i].get<std::string>());
      }
    } else {
      throw invalid_request("'stop' must be a string or an array of strings, got " + type_name(*s), "stop");
    }
    // As the OpenAI API: at most 4 stop sequences. Each is bounded too, so matching costs a
    // bounded amount per generated byte.
    if (g->stop.size() > kMaxStopStrings)
      throw invalid_request("'stop' has " + std::to_string(g->stop.size()) + " strings; at most " +
                                std::to_string(kMaxStopStrings) + " are allowed", "stop");
    for (auto& st : g->stop) {
      if (st.empty()) throw invalid_request("'stop' strings must not be empty", "stop");
      if (st.size() > kMaxStopBytes)
        throw invalid_request("a 'stop' string has " + std::to_string(st.size()) + " bytes; at most " +
                                  std::to_string(kMaxStopBytes) + " are allowed", "stop");
    }
  }
  g->stream = get_bool(body, "stream").value_or(false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object())
      throw invalid_request("'stream_options' must be an object, got " + type_name(*so), "stream_options");
    if (auto iu = get_bool(*so, "include_usage")) g->include_usage = *iu;
  }
  g->ignore_eos = get_bool(body, "ignore_eos").value_or(false);
  for (const char* pen : {"presence_penalty", "frequency_penalty"}) {
    if (auto v = get_number(body, pen)) {
      if (!(*v >= -2.0 && *v <= 2.0))
        throw invalid_request(std::string("'") + pen + "' must be in [-2, 2], got " + num(*v), pen);
      (pen[0] == 'p' ? g->sampling.presence_penalty : g->sampling.frequency_penalty) = float(*v);
    }
  }
  if (auto v = get_number(body, "repetition_penalty")) {
    if (!(*v > 0.0 && *v <= 10.0))
      throw invalid_request("'repetition_penalty' must be in (0, 10] (1 is off), got " + num(*v), "repetition_penalty");
    g->sampling.repetition_penalty = float(*v);
  }
  if (const json* lb = field(body, "logit_bias")) {
    if (!lb->is_object())
      throw invalid_request("'logit_bias' must be an object mapping token ids to biases, got " + type_name(*lb), "logit_bias");
    if (lb->size() > kMaxLogitBias)
      throw invalid_request("'logit_bias' has " + std::to_string(lb->size()) + " entries; at most " +
                                std::to_string(kMaxLogitBias) + " are allowed", "logit_bias");
    for (const auto& [key, v] : lb->items()) {
      int64_t id = -1;
      bool digits = !key.empty() && key.size() <= 10;
      for (char c : key) digits = digits && c >= '0' && c <= '9';
      if (digits) id = std::stoll(key);
      if (!digits)
        throw invalid_request("'logit_bias' key '" + key + "' is not a token id (a decimal integer)", "logit_bias");
      if (!v.is_number())
        throw invalid_request("'logit_bias[" + key + "]' must be a number, got " + type_name(v), "logit_bias");
      const double b = v.get<double>();
      if (!(b >= -100.0 && b <= 100.0))
        throw invalid_request("'logit_bias[" + key + "]' must be in [-100, 100], got " + num(b), "logit_bias");
      g->logit_bias.emplace_back(id, float(b));
    }
  }
}

using ojson = nlohmann::ordered_json;

bool valid_tool_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

// ---- a tool's parameters must describe an object ----
//
// Tool arguments are a JSON object in every chat format (the parsers take nothing else back), so
// a schema that admits other values would let a forced call's grammar write arguments that then
// come back as no call. What a schema admits is read as a set of JSON types. Each keyword that
// restricts the type (type, enum, const, anyOf/oneOf, allOf, $ref) must admit only objects on its
// own, which is stricter than JSON Schema's intersection of them: the grammar compiler follows
// one such keyword per schema (grammar/json_schema.cpp).

enum TypeBit : unsigned {
  kObjectBit = 1,
  kArrayBit = 2,
  kStringBit = 4,
  kIntegerBit = 8,
  kNumberBit = 16,
  kBooleanBit = 32,
  kNullBit = 64,
  kAnyType = 127,
};

std::string type_names(unsigned mask) {
  static const std::pair<unsigned, const char*> names[] = {{kObjectBit, "object"},   {kArrayBit, "array"},
                                                           {kStringBit, "string"},   {kIntegerBit, "integer"},
                                                           {kNumberBit, "number"},   {kBooleanBit, "boolean"},
                                                           {kNullBit, "null"}};
  std::string out;
  for (const auto& [bit, name] : names) {
    if (!(mask & bit)) continue;
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

unsigned value_type(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::object: return kObjectBit;
    case ojson::value_t::array: return kArrayBit;
    case ojson::value_t::string: return kStringBit;
    case ojson::value_t::number_integer:
    case ojson::value_t::number_unsigned: return kIntegerBit;
    case ojson::value_t::number_float: return kNumberBit;
    case ojson::value_t::boolean: return kBooleanBit;
    default: return kNullBit;
  }
}

unsigned type_bit(const std::string& name) {
  if (name == "object") return kObjectBit;
  if (name == "array") return kArrayBit;
  if (name == "string") return kStringBit;
  if (name == "integer") return kIntegerBit;
  if (name == "number") return kNumberBit | kIntegerBit;
  if (name == "boolean") return kBooleanBit;
  if (name == "null") return kNullBit;
  return 0;
}

// What a schema admits.
struct SchemaReading {
  unsigned mask = kAnyType;  // the JSON types it admits
  bool known = true;         // false: malformed; the grammar compiler reports it where it applies
  bool untyped = false;      // no keyword says or implies the type: any value
  // The first keyword (a JSON pointer into the schema) that on its own admits a non-object, and
  // what it admits; empty when none does.
  std::string offender;
  unsigned offender_mask = 0;
};

class ParametersReader {
 public:
  ParametersReader(const ojson& root, std::string context) : root_(root), context_(std::move(context)) {}

  SchemaReading read(const ojson& s, const std::string& where, int depth = 0) {
    if (depth > 32)
      throw invalid_request(context_ + " at '" + where + "': the schema nests and references more than 32 levels "
                                           "deep (a '$ref' cycle?), so what it admits cannot be checked",
                            "tools");
    if (s.is_boolean()) return leaf(s.get<bool>() ? kAnyType : 0u, where, s.get<bool>());
    if (!s.is_object()) return unknown();
    SchemaReading out;
    bool restricted = false;
    auto take = [&](const SchemaReading& r) {
      restricted = true;
      if (!r.known) out.known = false;
      out.mask &= r.mask;
      if (out.offender.empty() && !r.offender.empty()) {
        out.offender = r.offender;
        out.offender_mask = r.offender_mask;
      }
    };
    if (auto it = s.find("$ref"); it != s.end()) take(ref(*it, where + "/$ref", depth));
    if (auto it = s.find("const"); it != s.end()) take(leaf(value_type(*it), where + "/const"));
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) {
        take(unknown());
      } else {
        unsigned m = 0;
        for (const auto& v : *it) m |= value_type(v);
        take(leaf(m, where + "/enum"));
      }
    }
    for (const char* key : {"anyOf", "oneOf", "allOf"}) {
      auto it = s.find(key);
      if (it == s.end()) continue;
      if (!it->is_array() || it->empty()) {
        take(unknown());
        continue;
      }
      const bool all = std::string_view(key) == "allOf";
      SchemaReading r;
      r.mask = all ? kAnyType : 0u;
      for (size_t i = 0; i < it->size(); ++i) {
        const SchemaReading b = read((*it)[i], where + "/" + key + "/" + std::to_string(i), depth + 1);
        if (!b.known) r.known = false;
        r.mask = all ? (r.mask & b.mask) : (r.mask | b.mask);
        if (r.offender.empty() && !b.offender.empty()) {
          r.offender = b.offender;
          r.offender_mask = b.offender_mask;
        }
      }
      // allOf applies every branch, so one that admits only objects is enough (as in JSON Schema).
      if (all && !(r.mask & ~kObjectBit)) r.offender.clear();
      take(r);
    }
    if (auto it = s.find("type"); it != s.end()) {
      unsigned m = 0;
      bool ok = it->is_string() || (it->is_array() && !it->empty());
      if (ok) {
        const std::vector<ojson> names =
            it->is_array() ? std::vector<ojson>(it->begin(), it->end()) : std::vector<ojson>{*it};
        for (const ojson& n : names) {
          const unsigned bit = n.is_string() ? type_bit(n.get<std::string>()) : 0u;
          ok = ok && bit != 0;
          m |= bit;
        }
      }
      take(ok ? leaf(m, where + "/type") : unknown());
    }
    if (restricted) return out;
    // Nothing says the type: the grammar compiler reads it from the other keywords (properties:
    // an object; items: an array; string bounds: a string), else it takes any value.
    if (s.contains("properties") || s.contains("additionalProperties")) return leaf(kObjectBit, where);
    for (const char* k : {"items", "minItems", "maxItems"})
      if (s.contains(k)) return leaf(kArrayBit, where + "/" + k);
    for (const char* k : {"pattern", "minLength", "maxLength", "format"})
      if (s.contains(k)) return leaf(kStringBit, where + "/" + k);
    return leaf(kAnyType, where, true);
  }

 private:
  static SchemaReading unknown() {
    SchemaReading r;
    r.known = false;
    return r;
  }

  static SchemaReading leaf(unsigned mask, const std::string& where, bool untyped = false) {
    SchemaReading r;
    r.mask = mask;
    r.untyped = untyped;
    if (mask & ~kObjectBit) {
      r.offender = where.empty() ? "/" : where;
      r.offender_mask = mask;
    }
    return r;
  }

  // A $ref is followed within the schema's own $defs or definitions; any other is refused, since
  // what it admits could not be checked.
  SchemaReading ref(const ojson& r, const std::string& where, int depth) {
    if (r.is_string()) {
      const std::string name = r.get<std::string>();
      for (const char* defs : {"$defs", "definitions"}) {
        const std::string prefix = std::string("#/") + defs + "/";
        if (name.rfind(prefix, 0) != 0) continue;
        const std::string key = name.substr(prefix.size());
        auto d = root_.find(defs);
        if (d != root_.end() && d->is_object() && d->contains(key))
          return read((*d)[key], "/" + std::string(defs) + "/" + key, depth + 1);
      }
    }
    throw invalid_request(context_ + " at '" + where + "': '$ref' " + r.dump() +
                              " must name an entry of the schema's own $defs or definitions, so that the server can "
                              "check that the arguments are an object",
                          "tools");
  }

  const ojson& root_;
  std::string context_;
};

// Refuses (a 400 naming the tool and the path) a parameters schema that admits anything but a
// JSON object. One that says nothing of the type at its root ({}, annotations, `required` alone)
// is taken as any object: the schema returned for the grammar carries "type": "object".
ojson checked_parameters(const ojson& schema, const std::string& where, const std::string& tool) {
  const std::string context = "'" + where + ".function.parameters' (tool '" + tool + "')";
  const SchemaReading r = ParametersReader(schema, context).read(schema, "");
  if (r.untyped) {
    ojson typed = schema;
    typed["type"] = "object";
    return typed;
  }
  if (r.offender.empty()) return schema;  // object only, or malformed (the grammar compiler says where)
  throw invalid_request(context + " must describe a JSON object, since tool arguments are always one, but at '" +
                            r.offender + "' the schema admits " +
                            (r.offender_mask & kObjectBit ? "also " + type_names(r.offender_mask & ~kObjectBit)
                                                          : type_names(r.offender_mask)),
                        "tools");
}

void parse_tools(const ojson& body, GenerationRequest* g) {
  auto it = body.find("tools");
  if (it == body.end() || it->is_null()) return;
  if (!it->is_array()) throw invalid_request("'tools' must be an array of tool definitions", "tools");
  if (it->size() > kMaxTools)
    throw invalid_request("'tools' has " + std::to_string(it->size()) + " entries; at most " + std::to_string(kMaxTools) +
                              " are allowed", "tools");
  for (size_t i = 0; i < it->size(); ++i) {
    const ojson& t = (*it)[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) throw invalid_request("'" + where + "' must be an object", "tools");
    if (!t.contains("type") || t["type"] != "function")
      throw invalid_request("'" + where + ".type' must be \"function\" (the only tool type served)", "tools");
    if (!t.contains("function") || !t["function"].is_object())
      throw invalid_request("'" + where + ".function' must be an object", "tools");
    const ojson& f = t["function"];
    if (!f.contains("name") || !f["name"].is_string() || !valid_tool_name(f["name"].get<std::string>()))
      throw invalid_request("'" + where + ".function.name' must be 1 to 64 letters, digits, '_' or '-'", "tools");
    ToolSpec spec;
    spec.name = f["name"].get<std::string>();
    for (const ToolSpec& other : g->tools)
      if (other.name == spec.name) throw invalid_request("'" + where + "' repeats the tool name '" + spec.name + "'", "tools");
    if (f.contains("description") && !f["description"].is_string() && !f["description"].is_null())
      throw invalid_request("'" + where + ".function.description' must be a string", "tools");
    if (f.contains("parameters") && !f["parameters"].is_null()) {
      if (!f["parameters"].is_object())
        throw invalid_request("'" + where + ".function.parameters' must be a JSON schema object", "tools");
      spec.parameters = checked_parameters(f["parameters"], where, spec.name);
    }
    g->tools.push_back(std::move(spec));
  }
  if (!g->tools.empty()) g->tools_json = it->dump();
}

void parse_tool_choice(const ojson& body, GenerationRequest* g) {
  if (auto p = body.find("parallel_tool_calls"); p != body.end() && !p->is_null()) {
    if (!p->is_boolean()) throw invalid_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
    g->parallel_tool_calls = p->get<bool>();
  }
  auto it = body.find("tool_choice");
  if (it == body.end() || it->is_null()) {
    g->tool_choice = g->tools.empty() ? ToolChoice::None : ToolChoice::Auto;
    return;
  }
  if (it->is_string()) {
    const std::string c = it->get<std::string>();
    if (c == "none") g->tool_choice = ToolChoice::None;
    else if (c == "auto") g->tool_choice = ToolChoice::Auto;
    else if (c == "required") g->tool_choice = ToolChoice::Required;
    else throw invalid_request("'tool_choice' must be \"none\", \"auto\", \"required\" or a named function, got \"" + c + "\"",
                               "tool_choice");
  } else if (it->is_object()) {
    const ojson* f = it->contains("function") ? &(*it)["function"] : nullptr;
    if (!it->contains("type") || (*it)["type"] != "function" || !f || !f->is_object() || !f->contains("name") ||
        !(*f)["name"].is_string())
      throw invalid_request("'tool_choice' as an object must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                            "tool_choice");
    g->tool_choice = ToolChoice::Named;
    g->tool_choice_name = (*f)["name"].get<std::string>();
    bool declared = false;
    for (const ToolSpec& t : g->tools) declared = declared || t.name == g->tool_choice_name;
    if (!declared)
      throw invalid_request("'tool_choice' names the function '" + g->tool_choice_name + "', which 'tools' does not declare",
                            "tool_choice");
  } else {
    throw invalid_request("'tool_choice' must be a string or an object", "tool_choice");
  }
  if (g->tool_choice != ToolChoice::None && g->tools.empty())
    throw invalid_request("'tool_choice' asks for a tool call, but the request declares no 'tools'", "tool_choice");
}

void parse_response_format(const ojson& body, GenerationRequest* g) {
  auto it = body.find("response_format");
  if (it == body.end() || it->is_null()) return;
  if (!it->is_object() || !it->contains("type") || !(*it)["type"].is_string())
    throw invalid_request("'response_format' must be an object with a 'type'", "response_format");
  const std::string type = (*it)["type"].get<std::string>();
  if (type == "text") {
    g->response_format = ResponseFormat::Text;
  } else if (type == "json_object") {
    g->response_format = ResponseFormat::JsonObject;
  } else if (type == "json_schema") {
    const ojson* js = it->contains("json_schema") ? &(*it)["json_schema"] : nullptr;
    if (!js || !js->is_object())
      throw invalid_request("'response_format.json_schema' must be an object with a 'schema'", "response_format");
    if (js->contains("name") && !(*js)["name"].is_string())
      throw invalid_request("'response_format.json_schema.name' must be a string", "response_format");
    if (js->contains("strict") && !(*js)["strict"].is_boolean() && !(*js)["strict"].is_null())
      throw invalid_request("'response_format.json_schema.strict' must be a boolean", "response_format");
    if (!js->contains("schema") || !((*js)["schema"].is_object() || (*js)["schema"].is_boolean()))
      throw invalid_request("'response_format.json_schema.schema' must be a JSON schema", "response_format");
    g->response_format = ResponseFormat::JsonSchema;
    g->response_schema = (*js)["schema"];
  } else {
    throw invalid_request("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got \"" + type + "\"",
                          "response_format");
  }
  if (g->response_format != ResponseFormat::Text &&
      (g->tool_choice == ToolChoice::Required || g->tool_choice == ToolChoice::Named))
    throw invalid_request("'response_format' " + type + " cannot be combined with a forced tool call ('tool_choice')",
                          "response_format");
}

std::string content_text(const json& c, const std::string& where) {
  if (c.is_null()) return {};
  if (c.is_string()) return c.get<std::string>();
  if (c.is_array()) {
    std::string out;
    for (size_t i = 0; i < c.size(); ++i) {
      const json& part = c[i];
      const std::string p = where + "[" + std::to_string(i) + "]";
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
        throw invalid_request("'" + p + "' must be an object with a 'type'", where);
      if (part["type"] != "text")
        throw invalid_request("'" + p + ".type' " + part["type"].dump() +
                                  " is not supported: only text content parts are", where);
      if (!part.contains("text") || !part["text"].is_string())
        throw invalid_request("'" + p + ".text' must be a string", where);
      out += part["text"].get<std::string>();
    }
    return out;
  }
  throw invalid_request("'" + where + "' must be a string or an array of content parts, got " +
                            type_name(c), where);
}

template <class Json>
Json parse_body(const std::string& body) {
  try {
    return parse_json<Json>(body, "the request body", kMaxBodyDepth);
  } catch (const JsonError& e) {  // not JSON, too deep, or a number too large for a double
    throw invalid_request(e.what());
  }
}

}  // namespace

json parse_json_body(const std::string& body) {
  const json j = parse_body<json>(body);
  if (!j.is_object())
    throw invalid_request("the request body must be a JSON object, got " + type_name(j));
  return j;
}

ojson parse_json_body_ordered(const std::string& body) {
  // An ordered object finds a key by scanning its members, so parsing one of n members costs
  // n^2/2 comparisons: a 32 MB body of one object with a million keys would hold a core for
  // hours. The members each insertion scans are counted over the whole body and bounded (some
  // tens of milliseconds of work): an object of ~4,000 members alone, or many smaller ones.
  constexpr uint64_t kMaxMemberScans = uint64_t(1) << 23;
  std::vector<uint64_t> members;  // of each object open at the parse's point
  uint64_t scans = 0;
  const ojson::parser_callback_t count = [&](int, ojson::parse_event_t event, ojson&) {
    if (event == ojson::parse_event_t::object_start) {
      members.push_back(0);
    } else if (event == ojson::parse_event_t::object_end) {
      if (!members.empty()) members.pop_back();
    } else if (event == ojson::parse_event_t::key && !members.empty()) {
      scans += members.back()++;
      if (scans > kMaxMemberScans)
        throw invalid_request("the request body's objects hold too many members to keep in order (an object of about " +
                              std::to_string(members.back()) + " members; at most about 4,000 in all)");
    }
    return true;
  };
  ojson j;
  try {
    j = parse_json<ojson>(body, "the request body", kMaxBodyDepth, count);
  } catch (const JsonError& e) {
    throw invalid_request(e.what());
  }
  if (!j.is_object()) throw invalid_request("the request body must be a JSON object, got " + std::string(j.type_name()));
  return j;
}

std::vector<ChatTurn> parse_messages(const json& body) {
  const json* m = field(body, "messages");
  if (!m) throw invalid_request("'messages' is required", "messages");
  if (!m->is_array()) throw invalid_request("'messages' must be an array, got " + type_name(*m), "messages");
  if (m->empty()) throw invalid_request("'messages' must not be empty", "messages");
  std::vector<ChatTurn> out;
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object())
      throw invalid_request("'" + where + "' must be an object, got " + type_name(msg), "messages");
    auto r = msg.find("role");
    if (r == msg.end() || !r->is_string())
      throw invalid_request("'" + where + ".role' must be a string", "messages");
    ChatTurn t;
    t.role = r->get<std::string>();
    if (t.role == "developer") t.role = "system";  // the newer name of the system role
    auto c = msg.find("content");
    t.content = c == msg.end() ? std::string() : content_text(*c, where + ".content");
    if (auto tc = msg.find("tool_calls"); tc != msg.end() && !tc->is_null()) {
      if (t.role != "assistant")
        throw invalid_request("'" + where + ".tool_calls' is only allowed on assistant messages", "messages");
      if (!tc->is_array()) throw invalid_request("'" + where + ".tool_calls' must be an array", "messages");
      for (size_t k = 0; k < tc->size(); ++k) {
        const json& call = (*tc)[k];
        const std::string cw = where + ".tool_calls[" + std::to_string(k) + "]";
        const json* f = call.is_object() && call.contains("function") ? &call["function"] : nullptr;
        if (!f || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string())
          throw invalid_request("'" + cw + "' must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}",
                                "messages");
        ChatToolCall out_call;
        out_call.name = (*f)["name"].get<std::string>();
        if (call.contains("id") && call["id"].is_string()) out_call.id = call["id"].get<std::string>();
        if (f->contains("arguments") && !(*f)["arguments"].is_null()) {
          const json& a = (*f)["arguments"];
          // The API sends arguments as a JSON string; an object is accepted as its text.
          out_call.arguments = a.is_string() ? a.get<std::string>() : a.dump();
        }
        t.tool_calls.push_back(std::move(out_call));
      }
    }
    if (auto id = msg.find("tool_call_id"); id != msg.end() && !id->is_null()) {
      if (!id->is_string()) throw invalid_request("'" + where + ".tool_call_id' must be a string", "messages");
      t.tool_call_id = id->get<std::string>();
    }
    if (auto nm = msg.find("name"); nm != msg.end() && nm->is_string()) t.name = nm->get<std::string>();
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<int64_t> parse_token_array(const json& v, const std::string& name) {
  std::vector<int64_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_integer())
      throw invalid_request("'" + name + "[" + std::to_string(i) + "]' must be an integer token id, got " +
                                type_name(v[i]), name);
    ids.push_back(v[i].is_number_unsigned() && v[i].get<uint64_t>() > uint64_t(INT64_MAX)
                      ? INT64_MAX
                      : v[i].get<int64_t>());
  }
  return ids;
}

GenerationRequest parse_chat_request(const json& body, const ojson* ordered) {
  GenerationRequest g;
  g.chat = true;
  parse_common(body, &g);
  g.messages = parse_messages(body);
  for (const char* key : {"tools", "tool_choice", "response_format", "parallel_tool_calls"}) {
    if (field(body, key) && !ordered)
      throw ApiError(500, "server_error", std::string("'") + key + "' reached the parser without its ordered body", key, {},
                     "internal");
  }
  if (ordered) {
    parse_tools(*ordered, &g);
    parse_tool_choice(*ordered, &g);
    parse_response_format(*ordered, &g);
  } else {
    g.tool_choice = ToolChoice::None;
  }
  g.logprobs = get_bool(body, "logprobs").value_or(false);
  if (auto tl = get_int(body, "top_logprobs")) {
    if (*tl < 0 || *tl > 20)
      throw invalid_request("'top_logprobs' must be in [0, 20], got " + std::to_string(*tl), "top_logprobs");
    if (!g.logprobs && *tl > 0)
      throw invalid_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
    g.top_logprobs = int(*tl);
  }
  return g;
}

GenerationRequest parse_completion_request(const json& body) {
  GenerationRequest g;
  parse_common(body, &g);
  const json* p = field(body, "prompt");
  if (!p) throw invalid_request("'prompt' is required", "prompt");
  if (p->is_string()) {
    g.prompt_text = p->get<std::string>();
    if (g.prompt_text.empty()) throw invalid_request("'prompt' must not be empty", "prompt");
  } else if (p->is_array()) {
    if (p->empty()) throw invalid_request("'prompt' must not be empty", "prompt");
    const json& first = (*p)[0];
    if (first.is_string() || first.is_array()) {
      // A batch of prompts: the API allows it, this server takes one per request.
      if (p->size() != 1)
        throw invalid_request("'prompt' holds " + std::to_string(p->size()) +
                                  " prompts; send one prompt per request", "prompt");
      if (first.is_string()) {
        g.prompt_text = first.get<std::string>();
        if (g.prompt_text.empty()) throw invalid_request("'prompt' must not be empty", "prompt");
      } else {
        if (first.empty()) throw invalid_request("'prompt' must not be empty", "prompt");
        g.prompt_is_ids = true;
        g.prompt_ids = parse_token_array(first, "prompt[0]");
      }
    } else {
      g.prompt_is_ids = true;
      g.prompt_ids = parse_token_array(*p, "prompt");
    }
  } else {
    throw invalid_request("'prompt' must be a string, an array of token ids, or an array of one of those, got " +
                              type_name(*p), "prompt");
  }
  if (auto lp = get_int(body, "logprobs")) {
    if (*lp < 0 || *lp > 20)
      throw invalid_request("'logprobs' must be in [0, 20], got " + std::to_string(*lp), "logprobs");
    g.logprobs = true;
    g.top_logprobs = int(*lp);
  }
  if (get_bool(body, "echo").value_or(false))
    throw invalid_request("'echo' is not supported", "echo");
  if (const json* s = field(body, "suffix"))
    if (!(s->is_string() && s->get<std::string>().empty()))
      throw invalid_request("'suffix' is not supported", "suffix");
  return g;
}

}  // namespace ds::server
