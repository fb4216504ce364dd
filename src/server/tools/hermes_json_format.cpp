// The HermesJson tool-call format (ChatML models), all of it in one place: its syntax
//   <tool_call>\n{"name": "get_weather", "arguments": {...}}\n</tool_call>
// its streaming parser (server/tools/tool_parser.h gives the rules every format keeps), and its
// grammar for forced calls (server/tools/tool_call_grammar.h).
#include <nlohmann/json.hpp>

#include <memory>

#include "server/tools/tool_call_format.h"
#include "server/tools/tool_text.h"
#include "tokenizer/chat_template.h"

namespace ds::server {
namespace {

using namespace tool_text;

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

class HermesParser final : public ByteParser {
 public:
  HermesParser(std::vector<std::string> names, std::function<std::string()> new_id)
      : names_(std::move(names)), new_id_(std::move(new_id)) {}

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

  void step(char c, ParseEvents& ev) override {
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

class HermesJsonFormat final : public ToolCallFormat {
 public:
  std::vector<std::string_view> markers() const override { return {kHermesToolCallOpen, kHermesToolCallClose}; }

  std::unique_ptr<ToolCallParser> parser(std::vector<std::string> tool_names,
                                         std::function<std::string()> new_id) const override {
    return std::make_unique<HermesParser>(std::move(tool_names), std::move(new_id));
  }

  std::vector<grammar::Symbol> call(grammar::Grammar&, const std::string& name, grammar::RuleId args,
                                    const MarkerSpelling& mark) const override {
    std::vector<grammar::Symbol> seq;
    grammar::Grammar::append_literal(&seq, mark(kHermesToolCallOpen));
    grammar::Grammar::append_literal(&seq, "\n{\"name\": " + nlohmann::json(name).dump() + ", \"arguments\": ");
    seq.push_back(grammar::Grammar::ref(args));
    grammar::Grammar::append_literal(&seq, "}\n");
    grammar::Grammar::append_literal(&seq, mark(kHermesToolCallClose));
    return seq;
  }

  // A newline between calls keeps the parser's view of where one call ends.
  std::string call_separator() const override { return "\n"; }

  std::vector<grammar::Symbol> turn(grammar::RuleId calls, const MarkerSpelling&) const override {
    return {grammar::Grammar::ref(calls)};
  }
};

}  // namespace

const ToolCallFormat& hermes_json_format() {
  static const HermesJsonFormat f;
  return f;
}

}  // namespace ds::server
