// Reading a request body's fields with the checks every API applies: a present, non-null field
// of the right JSON type, or a 400 that names it and says what it got. Null counts as absent, as
// the OpenAI and Anthropic APIs treat it.
#pragma once
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "server/api_error.h"

namespace ds::server {

template <class Json>
std::string type_name(const Json& v) {
  switch (v.type()) {
    case nlohmann::detail::value_t::null: return "null";
    case nlohmann::detail::value_t::boolean: return "boolean";
    case nlohmann::detail::value_t::string: return "string";
    case nlohmann::detail::value_t::array: return "array";
    case nlohmann::detail::value_t::object: return "object";
    case nlohmann::detail::value_t::number_float: return "number";
    case nlohmann::detail::value_t::number_integer:
    case nlohmann::detail::value_t::number_unsigned: return "integer";
    default: return "value";
  }
}

inline std::string num(double x) {
  if (x == std::floor(x) && std::fabs(x) < 1e15) return std::to_string(int64_t(x));
  std::string s = std::to_string(x);
  while (!s.empty() && s.back() == '0') s.pop_back();
  return s;
}

// A present, non-null field.
template <class Json>
const Json* field(const Json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

template <class Json>
std::optional<double> get_number(const Json& body, const char* name) {
  const Json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number())
    throw invalid_request(std::string("'") + name + "' must be a number, got " + type_name(*v), name);
  return v->template get<double>();
}

template <class Json>
std::optional<int64_t> get_int(const Json& body, const char* name) {
  const Json* v = field(body, name);
  if (!v) return std::nullopt;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->template get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      return std::numeric_limits<int64_t>::max();
    return v->template get<int64_t>();
  }
  throw invalid_request(std::string("'") + name + "' must be an integer, got " + type_name(*v), name);
}

template <class Json>
std::optional<bool> get_bool(const Json& body, const char* name) {
  const Json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean())
    throw invalid_request(std::string("'") + name + "' must be a boolean, got " + type_name(*v), name);
  return v->template get<bool>();
}

template <class Json>
std::optional<std::string> get_string(const Json& body, const char* name) {
  const Json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_string())
    throw invalid_request(std::string("'") + name + "' must be a string, got " + type_name(*v), name);
  return v->template get<std::string>();
}

}  // namespace ds::server
