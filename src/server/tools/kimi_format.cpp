// The Kimi tool-call format, all of it in one place: its syntax
//   <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
//   <|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>
// (the function's name is the id's part between "functions." and the last ':'; the id is kept as
// written), its streaming parser (server/tools/tool_parser.h gives the rules every format keeps),
// and its grammar for forced calls (server/tools/tool_call_grammar.h).
#include <memory>

#include "grammar/byte_set.h"
#include "server/tools/tool_call_format.h"
#include "server/tools/tool_text.h"
#include "tokenizer/chat_template.h"

namespace ds::server {
namespace {

using namespace tool_text;

std::string kimi_function_name(std::string_view id) {
  constexpr std::string_view prefix = "functions.";
  const size_t colon = id.rfind(':');
  if (!starts_with(id, prefix) || colon == npos || colon < prefix.size()) return std::string(id);
  return std::string(id.substr(prefix.size(), colon - prefix.size()));
}

class KimiParser final : public ByteParser {
 public:
  explicit KimiParser(std::vector<std::string> names) : names_(std::move(names)) {}

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

  void step(char c, ParseEvents& ev) override {
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

class KimiFormat final : public ToolCallFormat {
 public:
  std::vector<std::string_view> markers() const override {
    return {kKimiToolCallsBegin, kKimiToolCallsEnd, kKimiToolCallBegin, kKimiToolCallArgumentBegin, kKimiToolCallEnd};
  }

  // The ids come from the model's text, so new_id is not needed.
  std::unique_ptr<ToolCallParser> parser(std::vector<std::string> tool_names,
                                         std::function<std::string()>) const override {
    return std::make_unique<KimiParser>(std::move(tool_names));
  }

  std::vector<grammar::Symbol> call(grammar::Grammar& g, const std::string& name, grammar::RuleId args,
                                    const MarkerSpelling& mark) const override {
    // The index counts the conversation's calls; any short number is accepted back.
    const grammar::RuleId digits = g.repeat(grammar::Grammar::bytes(grammar::ByteSet::range('0', '9')), 1, 4);
    std::vector<grammar::Symbol> seq;
    grammar::Grammar::append_literal(&seq, mark(kKimiToolCallBegin));
    grammar::Grammar::append_literal(&seq, "functions." + name + ":");
    seq.push_back(grammar::Grammar::ref(digits));
    grammar::Grammar::append_literal(&seq, mark(kKimiToolCallArgumentBegin));
    seq.push_back(grammar::Grammar::ref(args));
    grammar::Grammar::append_literal(&seq, mark(kKimiToolCallEnd));
    return seq;
  }

  // Each call's own markers delimit it.
  std::string call_separator() const override { return ""; }

  std::vector<grammar::Symbol> turn(grammar::RuleId calls, const MarkerSpelling& mark) const override {
    std::vector<grammar::Symbol> seq;
    grammar::Grammar::append_literal(&seq, mark(kKimiToolCallsBegin));
    seq.push_back(grammar::Grammar::ref(calls));
    grammar::Grammar::append_literal(&seq, mark(kKimiToolCallsEnd));
    return seq;
  }
};

}  // namespace

const ToolCallFormat& kimi_format() {
  static const KimiFormat f;
  return f;
}

}  // namespace ds::server
