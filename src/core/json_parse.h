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
struct TooDeep {};  // thrown by the check to stop at the first level too deep

// A SAX pass that builds nothing: checks the nesting and hands the structure's events to the
// caller's callback. nlohmann's own callback parser is not used for this: after every object
// inside an object it scans the outer one for discarded members, so a body of n small objects
// in one object costs n^2/2 steps (14,000 of them: a second; a million: hours).
template <class Json>
struct Check {
  using string_t = typename Json::string_t;
  Check(int max_depth, const typename Json::parser_callback_t* also) : max_depth(max_depth), also(also) {}

  int max_depth;
  const typename Json::parser_callback_t* also;
  int open = 0;
  std::string error;
  size_t error_byte = 0;

  void event(int depth, typename Json::parse_event_t ev, Json parsed = Json()) {
    if (*also) (*also)(depth, ev, parsed);
  }
  bool start(typename Json::parse_event_t ev) {
    if (open >= max_depth) throw TooDeep{};
    event(open, ev);
    ++open;
    return true;
  }
  bool end(typename Json::parse_event_t ev) {
    --open;
    event(open, ev);
    return true;
  }
  bool value() {
    event(open, Json::parse_event_t::value);
    return true;
  }
  bool null() { return value(); }
  bool boolean(bool) { return value(); }
  bool number_integer(typename Json::number_integer_t) { return value(); }
  bool number_unsigned(typename Json::number_unsigned_t) { return value(); }
  bool number_float(typename Json::number_float_t, const string_t&) { return value(); }
  bool string(string_t&) { return value(); }
  bool binary(typename Json::binary_t&) { return value(); }
  bool start_object(std::size_t) { return start(Json::parse_event_t::object_start); }
  bool end_object() { return end(Json::parse_event_t::object_end); }
  bool start_array(std::size_t) { return start(Json::parse_event_t::array_start); }
  bool end_array() { return end(Json::parse_event_t::array_end); }
  bool key(string_t& k) {
    event(open, Json::parse_event_t::key, Json(k));
    return true;
  }
  bool parse_error(std::size_t byte, const std::string&, const nlohmann::detail::exception& e) {
    error = e.what();
    error_byte = byte;
    return false;
  }
};
}  // namespace json_parse_detail

// Parses `text` as one JSON value. Throws JsonError "<where>: JSON nests deeper than <max_depth>
// levels (the limit)" or "<where>: not valid JSON: <the parser's message>". `also`, when given,
// sees the text's events first, before anything is built, in the order and with the depths
// nlohmann's parser callback gives them (a key event carries the key); it may throw to refuse
// the text, and its return value is not used (nothing is discarded).
template <class Json = nlohmann::json>
Json parse_json(std::string_view text, const std::string& where, int max_depth = kMaxJsonDepth,
                const typename Json::parser_callback_t& also = nullptr) {
  json_parse_detail::Check<Json> check(max_depth, &also);
  try {
    if (!Json::sax_parse(text.begin(), text.end(), &check))
      throw JsonError(where + ": not valid JSON: " + check.error, check.error_byte);
    return Json::parse(text.begin(), text.end());  // checked: no callback, so linear
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
