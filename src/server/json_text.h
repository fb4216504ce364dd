// JSON serialisation that cannot throw on model output: a token may end in the middle of a UTF-8
// character, and nlohmann::json refuses invalid UTF-8 by default. Invalid bytes become U+FFFD.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

namespace ds::server {

inline std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ds::server
