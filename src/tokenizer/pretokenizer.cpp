#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace ds {

struct RegexSplitter::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

namespace {

std::string pcre2_message(int rc) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(rc, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

struct MatchData {
  pcre2_match_data* data;
  explicit MatchData(const pcre2_code* code) : data(pcre2_match_data_create_from_pattern(code, nullptr)) {
    DS_CHECK(data != nullptr, "pre-tokenizer: out of memory for regex match data");
  }
  ~MatchData() { pcre2_match_data_free(data); }
};

// Lazily made only when a match runs out of the default 32 KiB JIT stack, which takes unusual
// input (a pathological pattern or megabytes of one character class).
struct BigJitStack {
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
  BigJitStack() {
    stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    DS_CHECK(stack != nullptr && context != nullptr, "pre-tokenizer: out of memory for JIT stack");
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~BigJitStack() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

struct Segment {
  std::size_t begin, end;
  bool match;
};

std::size_t char_length_at(std::string_view s, std::size_t pos) {
  std::size_t p = pos;
  char32_t cp;
  return utf8::next(s, p, cp) ? p - pos : 1;
}

}  // namespace

RegexSplitter::RegexSplitter(std::string_view pattern, bool literal, SplitBehavior behavior, bool invert)
    : pattern_(pattern), behavior_(behavior), invert_(invert) {
  // MATCH_INVALID_UTF lets arbitrary bytes through: the tokenizer must encode any input.
  uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
  // PCRE2 refuses UCP together with LITERAL; a literal has no character classes anyway.
  options |= literal ? PCRE2_LITERAL : PCRE2_UCP;
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  auto code = std::make_shared<Code>();
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &err,
                             &err_offset, nullptr);
  if (code->code == nullptr) {
    throw Error("pre-tokenizer: regex does not compile at offset " + std::to_string(err_offset) + ": " +
                pcre2_message(err) + " (pattern: " + std::string(pattern) + ")");
  }
  // JIT is a 5-10x speed-up; without it (an odd platform) matching still works, just slower.
  pcre2_jit_compile(code->code, PCRE2_JIT_COMPLETE);
  code_ = std::move(code);
}

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (text.empty()) return;
  MatchData md(code_->code);
  std::unique_ptr<BigJitStack> big_stack;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());

  std::vector<Segment> segs;
  std::size_t start = 0, last_end = 0;
  while (start < text.size()) {
    int rc = pcre2_match(code_->code, subject, text.size(), start, 0, md.data,
                         big_stack ? big_stack->context : nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !big_stack) {
      big_stack = std::make_unique<BigJitStack>();
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw Error("pre-tokenizer: regex match failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.data);
    const std::size_t ms = ov[0], me = ov[1];
    if (me <= ms) {
      // An empty match cuts nothing; step one character so the loop always advances.
      start = std::max(start, ms) + char_length_at(text, std::max(start, ms));
      continue;
    }
    if (ms > last_end) segs.push_back({last_end, ms, false});
    segs.push_back({ms, me, true});
    last_end = start = me;
  }
  if (last_end < text.size()) segs.push_back({last_end, text.size(), false});

  if (invert_) {
    for (auto& s : segs) s.match = !s.match;
  }
  auto emit = [&](std::size_t b, std::size_t e) {
    if (e > b) out.push_back(text.substr(b, e - b));
  };
  switch (behavior_) {
    case SplitBehavior::kIsolated:
      for (const auto& s : segs) emit(s.begin, s.end);
      break;
    case SplitBehavior::kRemoved:
      for (const auto& s : segs) {
        if (!s.match) emit(s.begin, s.end);
      }
      break;
    case SplitBehavior::kMergedWithPrevious: {
      std::size_t piece = 0;
      for (const auto& s : segs) {
        if (s.match) {
          emit(piece, s.end);
          piece = s.end;
        }
      }
      emit(piece, text.size());
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      std::size_t piece = 0;
      for (const auto& s : segs) {
        if (s.match) {
          emit(piece, s.begin);
          piece = s.begin;
        }
      }
      emit(piece, text.size());
      break;
    }
    case SplitBehavior::kContiguous: {
      std::size_t piece = 0;
      for (std::size_t i = 0; i < segs.size(); ++i) {
        const bool joins_previous = i > 0 && segs[i].match && segs[i - 1].match;
        if (!joins_previous) {
          emit(piece, segs[i].begin);
          piece = segs[i].begin;
        }
      }
      emit(piece, text.size());
      break;
    }
  }
}

void PreTokenizer::add_split(RegexSplitter splitter) {
  stages_.push_back({std::make_shared<const RegexSplitter>(std::move(splitter))});
}

void PreTokenizer::add_prefix_space() { stages_.push_back({nullptr}); }

void PreTokenizer::split(std::string_view text, std::deque<std::string>& scratch,
                         std::vector<std::string_view>& out) const {
  if (stages_.empty()) {
    if (!text.empty()) out.push_back(text);
    return;
  }
  std::vector<std::string_view> cur{text}, next;
  for (std::size_t i = 0; i < stages_.size(); ++i) {
    auto& dest = i + 1 == stages_.size() ? out : next;
    const auto& stage = stages_[i];
    for (std::string_view piece : cur) {
      if (stage.splitter) {
        stage.splitter->split(piece, dest);
      } else if (!piece.empty() && piece.front() != ' ') {
        std::string& owned = scratch.emplace_back();
        owned.reserve(piece.size() + 1);
        owned.push_back(' ');
        owned.append(piece);
        dest.push_back(owned);
      } else if (!piece.empty()) {
        dest.push_back(piece);
      }
    }
    if (&dest == &next) {
      cur.swap(next);
      next.clear();
    }
  }
}

}  // namespace ds
