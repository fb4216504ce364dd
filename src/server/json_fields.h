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

#include "engine/sampling_params.h"
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

// temperature in [0, max_temperature] (2 for OpenAI's APIs, 1 for Anthropic's) and top_p in
// (0, 1], the fields every generation API shares under these names.
template <class Json>
void read_temperature_and_top_p(const Json& body, SamplingParams& s, double max_temperature) {
  if (auto t = get_number(body, "temperature")) {
    if (!(*t >= 0.0 && *t <= max_temperature))
      throw invalid_request("'temperature' must be in [0, " + num(max_temperature) + "], got " + num(*t), "temperature");
    s.temperature = float(*t);
  }
  if (auto p = get_number(body, "top_p")) {
    if (!(*p > 0.0 && *p <= 1.0)) throw invalid_request("'top_p' must be in (0, 1], got " + num(*p), "top_p");
    s.top_p = float(*p);
  }
}

}  // namespace ds::server
