// JSON that comes from outside the program (request bodies, model output, files on disk) is
// parsed here, with a bound on how deep its arrays and objects nest. nlohmann's parser itself is
// iterative, but walking, copying, comparing and dumping a value recurse once per level, so a
// line of 10^6 '[' parsed unchecked is a stack overflow waiting for the first dump(). The bound
// is enforced while parsing (the parser's callback sees each array and object start with its
// depth), so nothing deeper than the limit is ever built.
//
// Nesting counts the arrays and objects around a value: `1` is 0, `[1]` is 1, `{"a":[1]}` is 2.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "core/error.h"

namespace ds {

// Deeper than any configuration, tokenizer, ledger entry or API body this project reads.
inline constexpr int kMaxJsonDepth = 256;

// Text that is not JSON, or nests deeper than the limit; what() starts with the caller's `where`.
class JsonError : public Error {
 public:
  explicit JsonError(const std::string& what, size_t byte = 0) : Error(what), byte(byte) {}
  size_t byte;  // a syntax error's position as nlohmann reports it (parse_error::byte); 0 otherwise
};

namespace json_parse_detail {
struct TooDeep {};  // thrown by the callback to stop the parser at the first level too deep
}  // namespace json_parse_detail

// Parses `text` as one JSON value. Throws JsonError "<where>: JSON nests deeper than <max_depth>
// levels (the limit)" or "<where>: not valid JSON: <the parser's message>". `also`, when given, is
// called as the parser's callback after the depth check (to watch keys, or drop values).
template <class Json = nlohmann::json>
Json parse_json(std::string_view text, const std::string& where, int max_depth = kMaxJsonDepth,
                const typename Json::parser_callback_t& also = nullptr) {
  const typename Json::parser_callback_t bounded = [&](int depth, typename Json::parse_event_t ev, Json& parsed) {
    if ((ev == Json::parse_event_t::object_start || ev == Json::parse_event_t::array_start) && depth >= max_depth)
      throw json_parse_detail::TooDeep{};
    return also ? also(depth, ev, parsed) : true;
  };
  try {
    return Json::parse(text.begin(), text.end(), bounded);
  } catch (const json_parse_detail::TooDeep&) {
    throw JsonError(where + ": JSON nests deeper than " + std::to_string(max_depth) + " levels (the limit)");
  } catch (const typename Json::parse_error& e) {
    throw JsonError(where + ": not valid JSON: " + e.what(), e.byte);
  } catch (const typename Json::exception& e) {  // numbers too large for a double
    throw JsonError(where + ": not valid JSON: " + e.what());
  }
}

// The same for callers to whom bad JSON only means "not there": a discarded value
// (is_discarded()) for text that is not JSON or nests too deep, instead of an exception.
template <class Json = nlohmann::json>
Json parse_json_or_discarded(std::string_view text, int max_depth = kMaxJsonDepth) {
  try {
    return parse_json<Json>(text, {}, max_depth);
  } catch (const JsonError&) {
    return Json(Json::value_t::discarded);
  }
}

}  // namespace ds
