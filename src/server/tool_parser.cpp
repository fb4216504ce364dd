#include "server/tool_parser.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <random>
#include "core/json_parse.h"

#include "core/error.h"

namespace ds::server {
namespace {

constexpr size_t npos = std::string_view::npos;

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool is_blank(std::string_view s) { return std::all_of(s.begin(), s.end(), is_ws); }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

size_t skip_ws(std::string_view s, size_t p) {
  while (p < s.size() && is_ws(s[p])) ++p;
  return p;
}

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

bool starts_with(std::string_view s, std::string_view head) { return s.substr(0, head.size()) == head; }

// The length of the longest proper prefix of tag that s ends with.
size_t tag_prefix_at_end(std::string_view s, std::string_view tag) {
  for (size_t k = std::min(s.size(), tag.size() - 1); k > 0; --k) {
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  }
  return 0;
}

// How much of held's end must wait: a prefix of tag and the whitespace before it. Whitespace
// waits too because the text right around a call is trimmed.
size_t held_tail(std::string_view held, std::string_view tag) {
  size_t cut = held.size() - tag_prefix_at_end(held, tag);
  while (cut > 0 && is_ws(held[cut - 1])) --cut;
  return held.size() - cut;
}

bool is_declared(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// The model's text is untrusted too: however deep it nests brackets, it is parsed within the
// bound (core/json_parse.h), so nothing walks or dumps a value deeper than that.
std::optional<std::string> decode_json_string(std::string_view token) {
  const auto v = parse_json_or_discarded(token);
  if (!v.is_string()) return std::nullopt;
  return v.get<std::string>();
}

bool is_json_object(std::string_view text) {
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
size_t string_end(std::string_view s, size_t p) {
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
size_t value_end(std::string_view s, size_t p) {
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

struct NamedArguments {
  std::string name, arguments;
};

// The object inside <tool_call></tool_call>. The members are read from the raw text (the first
// "name", the first "arguments" or else "parameters"), so the arguments keep the model's bytes.
std::optional<NamedArguments> parse_hermes_object(std::string_view obj, const std::vector<std::string>& names) {
  if (!is_json_object(obj)) return std::nullopt;
  std::optional<std::string_view> name_raw, args_raw, params_raw;
  size_t p = skip_ws(obj, 0) + 1;  // past '{'
  while (true) {
    p = skip_ws(obj, p);
    if (obj[p] == '}') break;
    const size_t key_end = string_end(obj, p);
    const auto key = decode_json_string(obj.substr(p, key_end - p));
    p = skip_ws(obj, skip_ws(obj, key_end) + 1);  // past ':'
    const size_t v_end = value_end(obj, p);
    const std::string_view value = obj.substr(p, v_end - p);
    if (key == "name" && !name_raw) name_raw = value;
    if (key == "arguments" && !args_raw) args_raw = value;
    if (key == "parameters" && !params_raw) params_raw = value;
    p = skip_ws(obj, v_end);
    if (obj[p] != ',') break;
    ++p;
  }
  if (!name_raw) return std::nullopt;
  const auto name = decode_json_string(*name_raw);
  if (!name || !is_declared(names, *name)) return std::nullopt;
  const std::optional<std::string_view> raw = args_raw ? args_raw : params_raw;
  if (!raw) return NamedArguments{*name, "{}"};
  if (raw->front() == '{') return NamedArguments{*name, std::string(*raw)};
  if (raw->front() != '"') return std::nullopt;
  const std::string inner = *decode_json_string(*raw);
  if (!is_json_object(inner)) return std::nullopt;
  return NamedArguments{*name, std::string(trim(inner))};
}

std::string kimi_function_name(std::string_view id) {
  constexpr std::string_view prefix = "functions.";
  const size_t colon = id.rfind(':');
  if (!starts_with(id, prefix) || colon == npos || colon < prefix.size()) return std::string(id);
  return std::string(id.substr(prefix.size(), colon - prefix.size()));
}

// ---- streaming ----

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

// Adds arguments text to the call at index, in this feed's delta for it.
void add_arguments(ParseEvents& ev, int index, std::string_view text) {
  if (text.empty()) return;
  if (ev.calls.empty() || ev.calls.back().index != index) ev.calls.push_back({index, "", "", ""});
  ev.calls.back().arguments.append(text);
}

// Recognizes the head of a call in the order models write it, {"name": "X", "arguments": {
// (any JSON whitespace between), so the arguments can stream from their first byte.
class HermesHead {
 public:
  enum class Result { More, Named, Match, Mismatch };

  // c: the next byte of the object, from its '{'.
  Result push(char c) {
    switch (step_) {
      case Step::Brace:
        if (c != '{') return Result::Mismatch;
        step_ = Step::NameKey;
        return Result::More;
      case Step::NameKey:
      case Step::NameValue:
      case Step::ArgsKey:
        return string_byte(c);
      case Step::NameColon:
      case Step::ArgsColon:
        if (is_ws(c)) return Result::More;
        if (c != ':') return Result::Mismatch;
        step_ = step_ == Step::NameColon ? Step::NameValue : Step::ArgsValue;
        return Result::More;
      case Step::Comma:
        if (is_ws(c)) return Result::More;
        if (c != ',') return Result::Mismatch;
        step_ = Step::ArgsKey;
        return Result::More;
      case Step::ArgsValue:
        if (is_ws(c)) return Result::More;
        return c == '{' ? Result::Match : Result::Mismatch;
    }
    return Result::Mismatch;
  }
  const std::string& name() const { return name_; }

 private:
  enum class Step { Brace, NameKey, NameColon, NameValue, Comma, ArgsKey, ArgsColon, ArgsValue };

  Result string_byte(char c) {
    if (token_.empty()) {
      if (is_ws(c)) return Result::More;
      if (c != '"') return Result::Mismatch;
      token_ = "\"";
      return Result::More;
    }
    token_ += c;
    if (escape_) {
      escape_ = false;
      return Result::More;
    }
    if (c == '\\') {
      escape_ = true;
      return Result::More;
    }
    if (c != '"') return Result::More;
    const auto s = decode_json_string(token_);
    token_.clear();
    if (!s) return Result::Mismatch;
    if (step_ == Step::NameKey) {
      if (*s != "name") return Result::Mismatch;
      step_ = Step::NameColon;
      return Result::More;
    }
    if (step_ == Step::NameValue) {
      name_ = *s;
      step_ = Step::Comma;
      return Result::Named;
    }
    if (*s != "arguments" && *s != "parameters") return Result::Mismatch;
    step_ = Step::ArgsColon;
    return Result::More;
  }

  Step step_ = Step::Brace;
  std::string token_;  // a string being read, from its opening quote
  bool escape_ = false;
  std::string name_;
};

class HermesParser final : public ToolCallParser {
 public:
  HermesParser(std::vector<std::string> names, std::function<std::string()> new_id)
      : names_(std::move(names)), new_id_(std::move(new_id)) {}

  ParseEvents feed(std::string_view text) override {
    ParseEvents ev;
    for (char c : text) step(c, ev);
    return ev;
  }

  ParseEvents finish() override {
    ParseEvents ev;
    if (state_ == State::Content) {
      gate_.flush(ev.content);
    } else if (state_ == State::Close && !call_open_) {
      // The object is whole and only its closing tag is missing (cut off, or taken by a stop
      // string): it is a call if it would have been one with the tag, else content.
      end_block(ev);
    } else if (!call_open_) {
      ev.content += raw_;  // a call cut off before its first delta
    }
    // A call whose first delta went out stands as it is; what was read of its closing tag goes.
    reset_block();
    state_ = State::Content;
    return ev;
  }

 private:
  // Content: outside calls. Head: reading the object's start. Buffered: the head was not the
  // streamable one, the call waits for its closing tag. Args: streaming the arguments object.
  // AfterArgs: the rest of the object. Close: after the object, expecting </tool_call>.
  enum class State { Content, Head, Buffered, Args, AfterArgs, Close };

  void step(char c, ParseEvents& ev) {
    switch (state_) {
      case State::Content: {
        std::string ws;
        if (gate_.push(c, ev.content, &ws)) {
          reset_block();
          raw_ = ws + std::string(kHermesToolCallOpen);
          state_ = State::Head;
        }
        return;
      }
      case State::Head: {
        const auto s = scanner_.push(c);
        if (s == ObjectScanner::Step::Error) {  // not an object
          abandon(ev);
          step(c, ev);
          return;
        }
        raw_ += c;
        if (s == ObjectScanner::Step::Before) return;
        if (json_begin_ == npos) json_begin_ = raw_.size() - 1;
        switch (head_.push(c)) {
          case HermesHead::Result::More:
            return;
          case HermesHead::Result::Named:
            if (!is_declared(names_, head_.name())) abandon(ev);
            return;
          case HermesHead::Result::Mismatch:
            if (s == ObjectScanner::Step::Done) {
              end_object();
            } else {
              state_ = State::Buffered;
            }
            return;
          case HermesHead::Result::Match:
            open_call(head_.name(), ev);
            add_arguments(ev, index_, std::string_view(&c, 1));
            state_ = State::Args;
            return;
        }
        return;
      }
      case State::Buffered:
        raw_ += c;
        if (scanner_.push(c) == ObjectScanner::Step::Done) end_object();
        return;
      case State::Args:
        scanner_.push(c);
        add_arguments(ev, index_, std::string_view(&c, 1));
        if (scanner_.depth() == 1) state_ = State::AfterArgs;  // the arguments' closing brace
        return;
      case State::AfterArgs:
        if (scanner_.push(c) == ObjectScanner::Step::Done) end_object();
        return;
      case State::Close:
        close_byte(c, ev);
        return;
    }
  }

  void close_byte(char c, ParseEvents& ev) {
    raw_ += c;
    if (close_matched_ == 0 && is_ws(c)) return;
    if (c == kHermesToolCallClose[close_matched_]) {
      if (++close_matched_ == kHermesToolCallClose.size()) end_block(ev);
      return;
    }
    // Not the closing tag. What matched of it and this byte are read again as content (they
    // may open the next call).
    const std::string again = raw_.substr(raw_.size() - close_matched_ - 1);
    raw_.resize(raw_.size() - again.size());
    if (call_open_) {
      reset_block();  // the call stands as it is
      state_ = State::Content;
    } else {
      abandon(ev);
    }
    for (char a : again) step(a, ev);
  }

  void end_object() {
    json_end_ = raw_.size();
    close_matched_ = 0;
    state_ = State::Close;
  }

  void end_block(ParseEvents& ev) {
    if (!call_open_) {
      auto call = parse_hermes_object(std::string_view(raw_).substr(json_begin_, json_end_ - json_begin_), names_);
      if (!call) {
        abandon(ev);
        return;
      }
      ev.calls.push_back({next_index_++, new_id_(), std::move(call->name), std::move(call->arguments)});
    }
    reset_block();
    state_ = State::Content;
    gate_.trim_next_ws();
  }

  void open_call(const std::string& name, ParseEvents& ev) {
    index_ = next_index_++;
    ev.calls.push_back({index_, new_id_(), name, ""});
    call_open_ = true;
    raw_.clear();
  }

  // The call is not one: its text so far is content.
  void abandon(ParseEvents& ev) {
    ev.content += raw_;
    reset_block();
    state_ = State::Content;
  }

  void reset_block() {
    raw_.clear();
    scanner_ = ObjectScanner();
    head_ = HermesHead();
    json_begin_ = json_end_ = npos;
    close_matched_ = 0;
    call_open_ = false;
  }

  const std::vector<std::string> names_;
  const std::function<std::string()> new_id_;
  State state_ = State::Content;
  ContentGate gate_{kHermesToolCallOpen};
  // The call's text from the whitespace before its tag, kept until its first delta in case it
  // turns out to be content.
  std::string raw_;
  ObjectScanner scanner_;
  HermesHead head_;
  size_t json_begin_ = npos, json_end_ = npos;  // the object's bytes in raw_ (Buffered)
  size_t close_matched_ = 0;
  bool call_open_ = false;  // the call's first delta went out
  int index_ = 0;           // the open call's
  int next_index_ = 0;
};

class KimiParser final : public ToolCallParser {
 public:
  explicit KimiParser(std::vector<std::string> names) : names_(std::move(names)) {}

  ParseEvents feed(std::string_view text) override {
    ParseEvents ev;
    for (char c : text) step(c, ev);
    return ev;
  }

  ParseEvents finish() override {
    ParseEvents ev;
    if (state_ == State::Content) {
      gate_.flush(ev.content);
    } else if (state_ == State::Args) {
      // Cut off inside the arguments: the call ends as it is, less a start of
      // <|tool_call_end|> (a closing marker cut off is dropped, as HermesJson drops a cut
      // </tool_call>).
      std::string_view args = args_held_;
      args.remove_suffix(tag_prefix_at_end(args, kKimiToolCallEnd));
      add_arguments(ev, index_, trim(args));
    } else if (state_ == State::Section && calls_in_section_ > 0 && is_cut_section_end(raw_)) {
      // The section's closing marker cut off after its calls: dropped.
    } else if (!is_blank(raw_)) {
      ev.content += raw_;
    }
    raw_.clear();
    args_held_.clear();
    state_ = State::Content;
    return ev;
  }

 private:
  // Content: outside sections. Section: between calls, reading a marker. Id: the call's id.
  // ArgsStart: after <|tool_call_argument_begin|>, before the arguments' first byte (a call only
  // if it opens an object). Args: streaming its arguments.
  enum class State { Content, Section, Id, ArgsStart, Args };

  void step(char c, ParseEvents& ev) {
    switch (state_) {
      case State::Content: {
        std::string ws;
        if (gate_.push(c, ev.content, &ws)) {
          raw_ = ws + std::string(kKimiToolCallsBegin);
          marker_.clear();
          calls_in_section_ = 0;
          state_ = State::Section;
        }
        return;
      }
      case State::Section:
        raw_ += c;
        if (marker_.empty() && is_ws(c)) return;
        marker_ += c;
        if (marker_ == kKimiToolCallBegin) {
          marker_.clear();
          state_ = State::Id;
        } else if (marker_ == kKimiToolCallsEnd) {
          if (calls_in_section_ == 0) {  // calls nothing: content, as parse_tool_calls has it
            abandon(ev);
            return;
          }
          raw_.clear();
          state_ = State::Content;
          gate_.trim_next_ws();
        } else if (!starts_with(kKimiToolCallBegin, marker_) && !starts_with(kKimiToolCallsEnd, marker_)) {
          // Something else: the text before the marker is content, and the marker's bytes are
          // read again as content (they may open a section).
          const std::string again = marker_;
          raw_.resize(raw_.size() - again.size());
          abandon(ev);
          for (char a : again) step(a, ev);
        }
        return;
      case State::Id:
        raw_ += c;
        marker_ += c;
        if (ends_with(marker_, kKimiToolCallArgumentBegin)) {
          const size_t id_size = marker_.size() - kKimiToolCallArgumentBegin.size();
          id_ = std::string(trim(std::string_view(marker_).substr(0, id_size)));
          name_ = kimi_function_name(id_);
          if (!is_declared(names_, name_)) {
            abandon(ev);
            return;
          }
          state_ = State::ArgsStart;
        } else if (ends_with(marker_, kKimiToolCallEnd) || ends_with(marker_, kKimiToolCallsEnd) ||
                   ends_with(marker_, kKimiToolCallBegin) || ends_with(marker_, kKimiToolCallsBegin)) {
          abandon(ev);  // a marker where the id should end
        }
        return;
      case State::ArgsStart:
        if (is_ws(c)) {
          raw_ += c;
          return;
        }
        if (c != '{') {  // arguments that are not an object: no call; the byte is read again
          abandon(ev);
          step(c, ev);
          return;
        }
        index_ = next_index_++;
        ++calls_in_section_;
        ev.calls.push_back({index_, id_, name_, ""});
        raw_.clear();
        args_held_.clear();
        args_started_ = false;
        state_ = State::Args;
        step(c, ev);
        return;
      case State::Args:
        if (!args_started_ && is_ws(c)) return;
        args_started_ = true;
        args_held_ += c;
        if (ends_with(args_held_, kKimiToolCallEnd)) {
          args_held_.resize(args_held_.size() - kKimiToolCallEnd.size());
          add_arguments(ev, index_, trim(args_held_));
          args_held_.clear();
          marker_.clear();
          state_ = State::Section;
          return;
        }
        if (const size_t cut = args_held_.size() - held_tail(args_held_, kKimiToolCallEnd); cut > 0) {
          add_arguments(ev, index_, std::string_view(args_held_).substr(0, cut));
          args_held_.erase(0, cut);
        }
        return;
    }
  }

  void abandon(ParseEvents& ev) {
    ev.content += raw_;
    raw_.clear();
    marker_.clear();
    state_ = State::Content;
  }

  // Whitespace, then a proper start of <|tool_calls_section_end|>.
  static bool is_cut_section_end(std::string_view raw) {
    const std::string_view m = raw.substr(skip_ws(raw, 0));
    return !m.empty() && m.size() < kKimiToolCallsEnd.size() && starts_with(kKimiToolCallsEnd, m);
  }

  const std::vector<std::string> names_;
  State state_ = State::Content;
  ContentGate gate_{kKimiToolCallsBegin};
  // The text since the last call's end (or from the whitespace before the section), content if
  // the next call turns out not to be one.
  std::string raw_;
  std::string marker_;  // Section: a marker being read; Id: the id and what follows it
  std::string id_, name_;
  std::string args_held_;  // arguments that may be the start of <|tool_call_end|>
  bool args_started_ = false;
  int calls_in_section_ = 0;
  int index_ = 0;
  int next_index_ = 0;
};

std::function<std::string()> id_source(std::function<std::string()> new_id) {
  return new_id ? std::move(new_id) : std::function<std::string()>(random_tool_call_id);
}

}  // namespace

void append_events(ParsedOutput& out, const ParseEvents& ev) {
  out.content += ev.content;
  for (const ToolCallDelta& d : ev.calls) {
    if (d.index == int(out.calls.size())) {
      out.calls.push_back({d.id, d.name, d.arguments});
    } else {
      DS_CHECK(d.index >= 0 && d.index < int(out.calls.size()), "tool parser: a delta for no call");
      out.calls[size_t(d.index)].arguments += d.arguments;
    }
  }
}

ParsedOutput parse_tool_calls(ToolFormat format, std::string_view text, const std::vector<std::string>& tool_names,
                              const std::function<std::string()>& new_id) {
  // The streaming parser fed everything at once: one set of rules for both forms, so a streamed
  // response and a whole one always agree (its aggregate does not depend on how the text was split).
  const auto parser = make_tool_call_parser(format, tool_names, new_id);
  ParsedOutput out;
  append_events(out, parser->feed(text));
  append_events(out, parser->finish());
  return out;
}

std::unique_ptr<ToolCallParser> make_tool_call_parser(ToolFormat format, std::vector<std::string> tool_names,
                                                      std::function<std::string()> new_id) {
  if (format == ToolFormat::Kimi) return std::make_unique<KimiParser>(std::move(tool_names));
  return std::make_unique<HermesParser>(std::move(tool_names), id_source(std::move(new_id)));
}

std::string random_tool_call_id() {
  static constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += alphabet[pick(rng)];
  return id;
}

}  // namespace ds::server
