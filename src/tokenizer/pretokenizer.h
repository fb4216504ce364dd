// Pre-tokenization: cutting text into the pieces BPE runs on, as tokenizer.json's pre_tokenizer
// describes (Split by regex, ByteLevel's GPT-2 regex and prefix space). Regexes are PCRE2 with
// UTF + UCP so \p{L}, \p{N} and \s mean what they mean in the Rust/Oniguruma original.
#pragma once
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/split_patterns.h"

namespace ds {

// What happens to a match and the text around it (tokenizer.json "behavior").
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// One compiled pattern. Immutable after construction and safe to share between threads: each
// call allocates its own match state.
class RegexSplitter {
 public:
  // literal: the pattern is a plain string, not a regex (tokenizer.json {"String": ...}).
  // invert: the pieces are what lies between matches (tokenizer.json "invert": true).
  // Throws ds::Error with PCRE2's message and offset when the pattern does not compile.
  RegexSplitter(std::string_view pattern, bool literal, SplitBehavior behavior, bool invert);

  // Appends the pieces of text to out. Bytes that are not valid UTF-8 never match; they land
  // in the text between matches, so the pieces always cover the input.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
  std::string pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

// An ordered list of stages applied piece by piece, as a tokenizer.json Sequence is.
class PreTokenizer {
 public:
  void add_split(RegexSplitter splitter);
  // ByteLevel's add_prefix_space: a piece that does not start with ' ' gets one.
  void add_prefix_space();

  bool empty() const { return stages_.empty(); }

  // Appends the pieces of text to out. Pieces point into text, or into strings this call adds
  // to scratch (a deque, so earlier pieces stay valid); both must outlive out.
  void split(std::string_view text, std::deque<std::string>& scratch,
             std::vector<std::string_view>& out) const;

 private:
  struct Stage {
    std::shared_ptr<const RegexSplitter> splitter;  // null: the prefix-space stage
  };
  std::vector<Stage> stages_;
};

}  // namespace ds
