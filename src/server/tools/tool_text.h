// What the tool-call parsers of every format share (server/tools/*_format.cpp): reading JSON
// text byte by byte and as a whole, and the gate that releases content while holding back what
// may still open a call. Internal to server/tools/.
#pragma once
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json_parse.h"
#include "server/tools/tool_parser.h"

namespace ds::server::tool_text {

inline constexpr size_t npos = std::string_view::npos;

inline bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

inline bool is_blank(std::string_view s) { return std::all_of(s.begin(), s.end(), is_ws); }

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

inline size_t skip_ws(std::string_view s, size_t p) {
  while (p < s.size() && is_ws(s[p])) ++p;
  return p;
}

inline bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

inline bool starts_with(std::string_view s, std::string_view head) { return s.substr(0, head.size()) == head; }

// The length of the longest proper prefix of tag that s ends with.
inline size_t tag_prefix_at_end(std::string_view s, std::string_view tag) {
  for (size_t k = std::min(s.size(), tag.size() - 1); k > 0; --k) {
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  }
  return 0;
}

// How much of held's end must wait: a prefix of tag and the whitespace before it. Whitespace
// waits too because the text right around a call is trimmed.
inline size_t held_tail(std::string_view held, std::string_view tag) {
  size_t cut = held.size() - tag_prefix_at_end(held, tag);
  while (cut > 0 && is_ws(held[cut - 1])) --cut;
  return held.size() - cut;
}

inline bool is_declared(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// The model's text is untrusted too: however deep it nests brackets, it is parsed within the
// bound (core/json_parse.h), so nothing walks or dumps a value deeper than that.
inline std::optional<std::string> decode_json_string(std::string_view token) {
  const auto v = parse_json_or_discarded(token);
  if (!v.is_string()) return std::nullopt;
  return v.get<std::string>();
}

inline bool is_json_object(std::string_view text) {
  const auto v = parse_json_or_discarded(text);
  return v.is_object();
}

// Follows one JSON object through its text a byte at a time: where strings are and how deep the
// brackets go. It does not check the grammar (the finished text is parsed for that); it finds
// where the object ends, so braces and tags inside strings do not end it early.
class ObjectScanner {
 public:
  enum class Step { Before, Inside, Done, Error };

  Step push(char c) {
    if (depth_ == 0) {  // not started (a finished scanner is not pushed again)
      if (is_ws(c)) return Step::Before;
      if (c != '{') return Step::Error;
      depth_ = 1;
      return Step::Inside;
    }
    if (in_string_) {
      if (escape_) {
        escape_ = false;
      } else if (c == '\\') {
        escape_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
      return Step::Inside;
    }
    if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      if (--depth_ == 0) return Step::Done;
    }
    return Step::Inside;
  }
  int depth() const { return depth_; }

 private:
  int depth_ = 0;
  bool in_string_ = false, escape_ = false;
};

// One past the JSON string that starts at s[p] (a quote).
inline size_t string_end(std::string_view s, size_t p) {
  for (size_t i = p + 1; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == '"') {
      return i + 1;
    }
  }
  return npos;
}

// One past the JSON value at s[p], in text already known to be valid JSON.
inline size_t value_end(std::string_view s, size_t p) {
  if (s[p] == '"') return string_end(s, p);
  if (s[p] == '{' || s[p] == '[') {
    int depth = 0;
    for (size_t i = p; i < s.size(); ++i) {
      if (s[i] == '"') {
        i = string_end(s, i) - 1;
      } else if (s[i] == '{' || s[i] == '[') {
        ++depth;
      } else if ((s[i] == '}' || s[i] == ']') && --depth == 0) {
        return i + 1;
      }
    }
    return npos;
  }
  while (p < s.size() && !is_ws(s[p]) && s[p] != ',' && s[p] != '}' && s[p] != ']') ++p;
  return p;
}

// Content outside calls, released as it comes except for held_tail: the text that may still
// open a call.
class ContentGate {
 public:
  explicit ContentGate(std::string_view open_tag) : tag_(open_tag) {}

  // Takes one byte, appending what is sure to be content to out. True when the opening tag is
  // complete; *ws_before then holds the whitespace that stood before it, and the gate is empty.
  bool push(char c, std::string& out, std::string* ws_before) {
    if (trim_ws_ && held_.empty() && is_ws(c)) return false;
    held_ += c;
    if (ends_with(held_, tag_)) {
      // What the tag's start was held with is whitespace only (held_tail's shape).
      ws_before->assign(held_, 0, held_.size() - tag_.size());
      held_.clear();
      trim_ws_ = false;
      return true;
    }
    const size_t cut = held_.size() - held_tail(held_, tag_);
    if (cut > 0) {
      out.append(held_, 0, cut);
      held_.erase(0, cut);
      trim_ws_ = false;
    }
    return false;
  }
  // Whitespace right after a call is trimmed.
  void trim_next_ws() { trim_ws_ = true; }
  void flush(std::string& out) {
    out += held_;
    held_.clear();
  }

 private:
  std::string_view tag_;
  std::string held_;
  bool trim_ws_ = false;
};

// A parser that reads the model's text one byte at a time, whatever the chunks it arrives in
// (token boundaries fall anywhere, tags included): each format implements step().
class ByteParser : public ToolCallParser {
 public:
  ParseEvents feed(std::string_view text) final {
    ParseEvents ev;
    for (char c : text) step(c, ev);
    return ev;
  }

 protected:
  virtual void step(char c, ParseEvents& ev) = 0;
};

// Adds arguments text to the call at index, in this feed's delta for it.
inline void add_arguments(ParseEvents& ev, int index, std::string_view text) {
  if (text.empty()) return;
  if (ev.calls.empty() || ev.calls.back().index != index) ev.calls.push_back({index, "", "", ""});
  ev.calls.back().arguments.append(text);
}

}  // namespace ds::server::tool_text
