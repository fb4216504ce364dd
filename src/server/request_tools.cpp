#include "server/request_tools.h"

#include <cctype>
#include <string_view>

#include "server/api_error.h"

namespace ds::server {

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

namespace {

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
}  // namespace

ojson checked_parameters(const ojson& schema, const std::string& path, const std::string& tool) {
  const std::string context = "'" + path + "' (tool '" + tool + "')";
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


void add_tool(GenerationRequest& g, const std::string& name, const ojson* parameters, const std::string& where,
              const std::string& parameters_path, const std::string& param) {
  if (g.tools.size() >= kMaxTools)
    throw invalid_request("'" + param + "' has more than " + std::to_string(kMaxTools) + " tools; at most " +
                              std::to_string(kMaxTools) + " are allowed",
                          param);
  if (!valid_tool_name(name))
    throw invalid_request("'" + where + "' names the tool \"" + name + "\"; a name must be 1 to 64 letters, digits, '_' or '-'",
                          param);
  for (const ToolSpec& other : g.tools)
    if (other.name == name) throw invalid_request("'" + where + "' repeats the tool name '" + name + "'", param);
  ToolSpec spec;
  spec.name = name;
  if (parameters && !parameters->is_null()) {
    if (!parameters->is_object())
      throw invalid_request("'" + parameters_path + "' must be a JSON schema object", param);
    spec.parameters = checked_parameters(*parameters, parameters_path, name);
  }
  g.tools.push_back(std::move(spec));
}

void check_tool_choice(const GenerationRequest& g, const std::string& param) {
  if (g.tool_choice == ToolChoice::Named) {
    bool declared = false;
    for (const ToolSpec& t : g.tools) declared = declared || t.name == g.tool_choice_name;
    if (!declared)
      throw invalid_request("'" + param + "' names the function '" + g.tool_choice_name + "', which 'tools' does not declare",
                            param);
  }
  if (g.tool_choice != ToolChoice::None && g.tools.empty())
    throw invalid_request("'" + param + "' asks for a tool call, but the request declares no 'tools'", param);
}

}  // namespace ds::server
